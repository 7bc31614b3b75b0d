"""A litellm exception raised by a backend dagmagic did not import litellm for (a ``ScriptedLLM`` used for fault
injection, a user's own backend) is translated by what it is: retried as a rate limit, told as dagmagic's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

SCRIPT = """
import asyncio, json, sys
import litellm  # the user's import, for the exception it raises: dagmagic's own door to litellm stays closed
from dagmagic import errors
from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.llm import _litellm as door
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM

def limited():
    return litellm.RateLimitError("slow down for key sk-proj-abcdefghijklmnop", llm_provider="openai", model="m")

async def main():
    settings = DagSettings(llm_retries=2, llm_retry_backoff=0.001)
    retried = ScriptedLLM({"step": [limited(), "ok"]})
    model = ChatModel(ModelRegistry().register("m", retried).get("m"), settings=settings)
    result = await model.chat([{"role": "user", "content": "hi"}], purpose="step")
    always = ScriptedLLM({"step": [limited()]})
    model = ChatModel(ModelRegistry().register("m", always).get("m"), settings=settings)
    try:
        await model.chat([{"role": "user", "content": "hi"}], purpose="step")
        raised = None
    except Exception as exc:
        raised = exc
    print(json.dumps({
        "door_closed": door._litellm is None,
        "content": result.content, "retries": result.call.retries, "tries": len(retried.requests),
        "raised": type(raised).__module__ + "." + type(raised).__qualname__,
        "message": str(raised), "tries_always": len(always.requests),
    }))

asyncio.run(main())
"""


def _run(script: str) -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DAG_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_a_litellm_rate_limit_from_a_backend_is_retried_and_translated_though_dagmagic_never_imported_litellm() -> None:
    seen = _run(SCRIPT)
    assert seen["door_closed"], seen  # dagmagic's own import never happened: the case this test is about
    assert (seen["content"], seen["retries"], seen["tries"]) == ("ok", 1, 2), seen
    assert seen["raised"] == "dagmagic.errors.RateLimitError", seen
    assert seen["tries_always"] == 3, seen  # the first try and llm_retries=2 more
    assert "sk-proj-abcdefghijklmnop" not in seen["message"], seen
