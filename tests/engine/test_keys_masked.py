"""Keys that enter a run as text (a tool's result, a model's reply echoing its own ``api_key=``) are masked
where they enter: run.calls, run.events, the run's state, the store (both backends) and the widget state sent to
the browser never hold them. The keys here are not shaped like a provider's key: only knowing them masks them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic._secrets import mask_secrets
from dagmagic.notebook.widget import DagWidget, widget_state
from dagmagic.testing import ScriptedLLM, ScriptedRequest, ToolCall
from tests.engine.conftest import plan_reply, verdict
from tests.stored import table_rows

ENV_KEY = "acme0token0from0the0environment41"
REGISTERED_KEY = "registered0model0credential0977"
SHAPED_KEY = "sk-live-4f9a8b7c6d5e4f3a2b1c"  # a provider's shape, in no variable: masked by its shape


def read_config(note: str = "") -> str:
    """Read the service's configuration."""
    return f"url=https://acme.example token={os.environ['ACME_SERVICE_TOKEN']} legacy={SHAPED_KEY}"


def step(request: ScriptedRequest) -> Any:
    if request.step_id == "s1" and request.index == 0:
        return ToolCall("read_config", {"note": f"called with {REGISTERED_KEY}"})
    return f"The config says token {ENV_KEY}; my own key is {REGISTERED_KEY}."


def script() -> dict[str, Any]:
    return {
        "plan": [plan_reply(("s1", []), ("s2", ["s1"]))],
        "step": step,
        "analyze": [verdict(True, 0.9, f"the steps quote {ENV_KEY} and {REGISTERED_KEY}")],
        # the answer streams; the registered key comes whole in one piece, the environment's cut over two
        "synthesize": [["Token ", ENV_KEY[:10], ENV_KEY[10:] + ", key ", REGISTERED_KEY, "."]],
    }


def everything_kept(run: Any, widget: DagWidget) -> dict[str, str]:
    return {
        "run.calls": json.dumps([call.model_dump(mode="json") for call in run.calls]),
        "run.events": json.dumps([event.model_dump(mode="json") for event in run.events]),
        "run.state": run.state.model_dump_json(),
        "widget_state": json.dumps(widget_state(run)),
        "DagWidget": json.dumps(widget.get_state(), default=str),
    }


async def test_a_key_from_a_tool_or_echoed_by_its_model_is_kept_nowhere(
    store_path: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACME_SERVICE_TOKEN", ENV_KEY)
    registry = ModelRegistry().register("m", ScriptedLLM(script()), api_key=REGISTERED_KEY)
    session = DagSession(registry, DagSettings(store=str(store_path)), tools=[read_config])
    run = session.start("Read the service's configuration")
    widget = DagWidget(run)
    await run
    assert run.status == "done", run.error
    kept = everything_kept(run, widget)
    rows = repr(table_rows(store_path))
    assert "acme.example" in rows  # the tool's result is in the store
    if isinstance(store_path, Path):  # the database and its write-ahead log, byte for byte
        kept["store files"] = b"".join(p.read_bytes() for p in store_path.parent.iterdir()).decode("latin-1")
    kept["store rows"] = rows
    widget.close()
    shown = {
        (where, key[:8]): text.count(key)
        for where, text in kept.items()
        for key in (ENV_KEY, REGISTERED_KEY, SHAPED_KEY)
        if key in text
    }
    assert shown == {}, f"keys kept (where, key): times: {shown}"
    (call,) = run.steps["s1"].tool_calls
    assert call.observation == "url=https://acme.example token=*** legacy=***"  # the tool ran, its keys masked
    assert call.arguments == {"note": "called with ***"}
    assert run.steps["s2"].result == "The config says token ***; my own key is ***."
    assert run.answer == "Token ***, key ***."


def test_masking_sees_a_variable_set_after_an_earlier_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "late0token0value0set0after0start"
    assert mask_secrets(f"x {text}") == f"x {text}"  # not a secret yet: the set of secrets is now cached
    monkeypatch.setenv("LATE_SERVICE_TOKEN", text)
    assert mask_secrets(f"x {text}") == "x ***"
    monkeypatch.setenv("LATE_SERVICE_TOKEN", "another0value0of0that0variable")
    assert mask_secrets(f"x {text} another0value0of0that0variable") == f"x {text} ***"


def test_credentials_in_a_models_other_options_are_masked_too() -> None:
    ModelRegistry().register(
        "proxied",
        ScriptedLLM({"*": ["x"]}),
        api_base="https://team:proxy0password0912@llm-proxy.example/v1",
        extra_headers={"Authorization": "Bearer header0bearer0token0733", "X-Team": "research"},
        aws_secret_access_key="aws0secret0access0key0511",
    )
    text = "proxy0password0912 header0bearer0token0733 aws0secret0access0key0511 research"
    assert mask_secrets(text) == "*** *** *** research"
