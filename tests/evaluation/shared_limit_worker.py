"""One of the processes of tests/evaluation/test_shared_rate_limits.py: an evaluation of a few cells through its own
``litellm.Router``, whose deployment's ``rpm`` is counted in the Redis every process names.

Run as ``python -m tests.evaluation.shared_limit_worker API_BASE REDIS_PORT RPM CELLS``. It prints ``ready`` once
set up, starts when a line arrives on stdin (so that the processes start together), and prints its cells' statuses
and errors as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from dagmagic import DagSession, DagSettings, ModelRegistry

REPLY = json.dumps(
    {"steps": [{"id": "s1", "task": "look it up"}], "achieved": True, "confidence": 0.9, "reasoning": "ok"}
)
"""One reply that every purpose reads (tests/fake_provider.py gives it): a plan, a step's result, a verdict."""


def shared_router(api_base: str, redis_port: int, rpm: int) -> Any:
    """The Router each process builds alike, as the documentation's "Shared rate limits" shows (docs/team.md)."""
    from litellm.router import Router

    deployment = {"model": "openai/gpt-4.1-mini", "api_base": api_base, "api_key": "sk-test", "rpm": rpm}
    return Router(
        model_list=[
            {"model_name": "pool", "litellm_params": deployment, "model_info": {"id": "shared-gpt-4.1-mini"}},
        ],
        redis_host="127.0.0.1",
        redis_port=redis_port,
        optional_pre_call_checks=["enforce_model_rate_limits"],
    )


async def main(api_base: str, redis_port: int, rpm: int, cells: int) -> None:
    registry = ModelRegistry().register("pool", shared_router(api_base, redis_port, rpm), model_group="pool")
    # no retry of a call or a step: every call the limit held back must have waited its turn
    settings = DagSettings(
        store="none", llm_retries=0, step_immediate_retries=0, step_retry_delays=(), max_replan_rounds=1
    )
    session = DagSession(registry, settings)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    experiment = await session.evaluate([f"question {i}" for i in range(cells)], concurrency=cells)
    frame = experiment.to_dataframe()
    print(json.dumps({"status": list(frame["status"]), "error": [str(e) for e in frame["error"]]}), flush=True)


if __name__ == "__main__":
    api_base, redis_port, rpm, cells = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    asyncio.run(main(api_base, redis_port, rpm, cells))
