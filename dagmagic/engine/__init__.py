"""The goal loop: planner, executor, step agent and tools, context guard, analyzer, goal loop, store."""
