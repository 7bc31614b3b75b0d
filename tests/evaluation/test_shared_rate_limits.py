"""Two processes, each with its own ``litellm.Router`` over one Redis, held together under the deployment's ``rpm``,
as measured at the fake provider on 127.0.0.1; the calls the limit held back waited for the next minute instead of
failing their cells.

litellm counts ``rpm`` per calendar minute (UTC), so the test crosses one minute's end: it takes the workers' start
(about 8 s) and the rest of the minute they start in, 25 to 85 s in all (39 s and 78 s measured). The same test
fails without Redis (each process lets its own ``rpm`` through: 16 requests in a minute) and with
``routing_strategy="usage-based-routing-v2"`` instead of the ``enforce_model_rate_limits`` check (14: that strategy
syncs its counts with Redis every 0.1 s, where the check increments the shared count atomically before each
request).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.evaluation.shared_limit_worker import REPLY
from tests.fake_provider import Provider
from tests.redis_server import redis_server

ROOT = Path(__file__).resolve().parents[2]
RPM = 10
CELLS = 2
"""Cells each process evaluates, at once; a cell makes 4 calls (plan, step, verdict, answer)."""
PROCESSES = 2
LATEST_START = 45
"""The second of a minute after which the processes start only when the next minute begins: the first minute's
calls (a few seconds' worth) must all fall in it, so that the limit binds there and the rest wait for the next."""


@pytest.fixture
def redis_port() -> Iterator[int]:
    with redis_server() as port:
        yield port


@pytest.fixture
def provider() -> Iterator[Provider]:
    served = Provider()
    served.reply = REPLY
    yield served
    served.close()


def _worker(provider: Provider, redis_port: int) -> subprocess.Popen[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "DAG_STORE": "none"}
    command = [sys.executable, "-m", "tests.evaluation.shared_limit_worker", provider.base, str(redis_port)]
    return subprocess.Popen(
        [*command, str(RPM), str(CELLS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=ROOT,
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_processes_on_one_router_and_redis_stay_within_the_rpm_together(
    provider: Provider, redis_port: int
) -> None:
    workers = [_worker(provider, redis_port) for _ in range(PROCESSES)]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        if time.time() % 60 > LATEST_START:
            time.sleep(60 - time.time() % 60)
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        outputs = [worker.communicate(timeout=200)[0] for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()

    for worker, output in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, output
        cells = json.loads(output.strip().splitlines()[-1])
        assert cells["status"] == ["done"] * CELLS, cells["error"]  # none failed for the limit: they waited
    calls = PROCESSES * CELLS * 4
    assert provider.requests == calls > RPM
    wall = time.time() - time.monotonic()
    per_minute = Counter(int((arrived + wall) // 60) for arrived in provider.times)
    assert max(per_minute.values()) <= RPM, per_minute  # together, within the rpm in every minute
    first, *later = sorted(per_minute)
    assert per_minute[first] == RPM  # the limit bound in the first minute; the rest waited for the next
    assert later, per_minute
