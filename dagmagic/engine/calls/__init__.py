"""The loop's model calls and what they read: planner, analyzer, verdict, synthesis, prompts, context guard."""
