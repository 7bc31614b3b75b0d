"""The parts ``DagSession`` (``dagmagic/session.py``) is built from: its run stores, the driver of each run, the
conversation and the runs it owns, replays and evaluations. Private: use ``dagmagic.DagSession``.
"""
