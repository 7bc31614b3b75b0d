"""A run as the user holds it: ``DagRun`` (its state and event log), its inbox of user actions, its queries."""
