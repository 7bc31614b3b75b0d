"""The goal loop's state machine: the phases of a run, the transitions between them and what a round decides."""
