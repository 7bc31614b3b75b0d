"""dagmagic on Temporal: experiments whose cells run on any number of workers, and runs that outlive the kernel.

``on="temporal://HOST:PORT/NAMESPACE"`` (``session.evaluate``, ``session.start``, ``%%dag --on``, ``%%dag eval
--on``) sends the work to the workers of that Temporal service (``python -m dagmagic worker --temporal HOST:PORT
FILE``); the notebook follows it through the run store they share. The ``temporalio`` SDK is an optional extra
(``pip install "dagmagic[temporal]"``): this front imports none of it until it is used.
"""

from __future__ import annotations

from dagmagic.temporal.address import DEFAULT_NAMESPACE, DEFAULT_TASK_QUEUE, TemporalAddress
from dagmagic.temporal.connection import connect, require_sdk
from dagmagic.temporal.detached import DetachedRun, attach, start_detached
from dagmagic.temporal.experiments import TemporalCells
from dagmagic.temporal.worker import serve

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TASK_QUEUE",
    "DetachedRun",
    "TemporalAddress",
    "TemporalCells",
    "attach",
    "connect",
    "require_sdk",
    "serve",
    "start_detached",
]
