"""Running a plan's steps: the executor, its retries, the step agent and tool steps made without a model."""
