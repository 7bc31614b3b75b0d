"""``DagSettings``: every knob of the goal loop, from keywords or the environment.

A keyword wins over the environment; an unset variable leaves the default. A bad value raises one
``ConfigurationError`` that names the variable (or keyword), the value and what is accepted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from dagmagic._secrets import mask_data
from dagmagic._settings_env import configuration_error, deprecated_env_var, env, env_var_names, values_from_env
from dagmagic.errors import ConfigurationError
from dagmagic.models import Purpose
from dagmagic.store_url import StoreURL, shown_store, store_location

__all__ = ["DagSettings", "MaxTokens", "settings_table"]


_Cap = Annotated[int | None, Field(ge=1)]


class MaxTokens(BaseModel):
    """The ``max_tokens`` each purpose's calls are sent (None: none): far above what each call needs (a reasoning
    model spends part of it thinking), far below a reply that never ends. The verdict and the synthesis write
    the answer: theirs are the largest. A purpose not given keeps its default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    history_summary: _Cap = 4096
    plan: _Cap = 8192
    tool_selection: _Cap = 4096
    step: _Cap = 8192
    compaction: _Cap = 4096
    analyze: _Cap = 16384
    synthesize: _Cap = 16384
    citation_check: _Cap = 4096
    route: _Cap = 1024
    judge: _Cap = 4096

    def of(self, purpose: Purpose) -> int | None:
        """The cap of ``purpose``'s calls."""
        cap: int | None = getattr(self, purpose)
        return cap

    def __str__(self) -> str:
        return ",".join(f"{name}={value if value is not None else 'off'}" for name, value in self)


class DagSettings(BaseModel):
    """Every knob of dagmagic. ``DagSettings(max_concurrency=8)``; unset fields come from the environment."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    # --- models
    smart_model: str | None = Field(
        None,
        description="Model for planning, analysis, synthesis and checks.",
        json_schema_extra=env("DAG_SMART_MODEL"),
    )
    general_model: str | None = Field(
        None, description="Default model for steps.", json_schema_extra=env("DAG_GENERAL_MODEL")
    )
    fast_model: str | None = Field(
        None,
        description="Model for steps hinted `fast`, compaction and history summaries.",
        json_schema_extra=env("DAG_FAST_MODEL"),
    )
    reasoning_model: str | None = Field(
        None,
        description="Model for steps hinted `reasoning` and domain escalation.",
        json_schema_extra=env("DAG_REASONING_MODEL"),
    )

    # --- goal loop
    max_replan_rounds: int = Field(
        3,
        ge=1,
        description="Autonomous rounds at most: the first plan plus up to N-1 replans.",
        json_schema_extra=env("DAG_MAX_REPLAN_ROUNDS"),
    )
    max_cost: float | None = Field(
        None,
        ge=0,
        description=(
            "Cost budget of a run in USD (its subruns included): an LLM call starts only if its estimated cost fits "
            "in what is left beside the calls under way (see Budgets); once one does not, no further call starts, "
            "and the run answers from what completed, marked partial. Calls whose price litellm does not know "
            "cannot be counted (a warning says so). Unset: no budget."
        ),
        json_schema_extra=env("DAG_MAX_COST"),
    )
    replan_stop_confidence: float = Field(
        0.8,
        ge=0.0,
        le=1.0,
        description="A round not achieved but at least this confident stops replanning.",
        json_schema_extra=env("DAG_REPLAN_STOP_CONFIDENCE"),
    )

    # --- planner
    plan_min_steps: int = Field(
        1,
        ge=1,
        description="Fewest steps the planner is asked for (asked for two, a small model invents a second one).",
        json_schema_extra=env("DAG_PLAN_MIN_STEPS"),
    )
    plan_max_steps: int = Field(
        6,
        ge=1,
        description="Most steps a plan may have; more triggers one re-ask.",
        json_schema_extra=env("DAG_PLAN_MAX_STEPS"),
    )
    planner_input_tokens: int = Field(
        16000,
        ge=1000,
        description="Above this many tokens the history is summarized before planning.",
        json_schema_extra=env("DAG_PLANNER_INPUT_TOKENS"),
    )
    history_fallback_chars: int = Field(
        20000,
        ge=1000,
        description="History kept (last characters) when it cannot be summarized.",
        json_schema_extra=env("DAG_HISTORY_FALLBACK_CHARS"),
    )

    streaming_planner: bool = Field(
        True,
        description="Start steps while the plan still streams, when the smart model can stream.",
        json_schema_extra=env("DAG_STREAMING_PLANNER"),
    )

    # --- executor
    max_concurrency: int = Field(
        5,
        ge=1,
        description="Steps running at once.",
        json_schema_extra=env("DAG_MAX_CONCURRENCY", deprecated="MAX_CONCURRENCY"),
    )
    max_depth: int = Field(
        1,
        ge=0,
        description=(
            "How deep subruns nest: the planner may mark a step `subplan` to run it as a subrun, a DAG of its "
            "own, down to this depth; 0 turns subruns off."
        ),
        json_schema_extra=env("DAG_MAX_DEPTH"),
    )
    step_timeout: float = Field(
        600.0, gt=0, description="Seconds a step may run before it fails.", json_schema_extra=env("DAG_STEP_TIMEOUT")
    )
    max_message_chars: int = Field(
        50000,
        ge=1000,
        description="Dependency context a step sees, in characters.",
        json_schema_extra=env("DAG_MAX_MESSAGE_CHARS"),
    )
    structured_context_multiplier: float = Field(
        3.0,
        ge=1.0,
        description="Context allowance multiplier when a dependency holds a table, code or citation.",
        json_schema_extra=env("DAG_STRUCTURED_CONTEXT_MULTIPLIER"),
    )
    context_floor_tokens: int = Field(
        4000,
        ge=500,
        description="Smallest token budget the context guard assumes for any model.",
        json_schema_extra=env("DAG_CONTEXT_FLOOR_TOKENS"),
    )
    default_context_tokens: int | None = Field(
        None,
        ge=1000,
        description="Context window of a model whose window litellm does not know (local servers); "
        "`register(..., context_window=N)` sets one model's. Unset, such a model's prompts are sent whole, never "
        "compacted (a run says so, once per model in a session), until its provider refuses one as too long: its "
        "window is then the one the refusal states.",
        json_schema_extra=env("DAG_DEFAULT_CONTEXT_TOKENS"),
    )

    # --- step agent
    step_max_iterations: int = Field(
        15,
        ge=1,
        description="Tool-calling turns a step may take before it fails.",
        json_schema_extra=env("DAG_STEP_MAX_ITERATIONS"),
    )
    tool_selection_threshold: int = Field(
        12,
        ge=1,
        description="Above this many tools a step first selects the relevant ones.",
        json_schema_extra=env("DAG_TOOL_SELECTION_THRESHOLD"),
    )
    tool_selection_max: int = Field(
        6, ge=1, description="Tools kept by tool selection.", json_schema_extra=env("DAG_TOOL_SELECTION_MAX")
    )
    observation_max_chars: int = Field(
        8000,
        ge=100,
        description="A tool observation is cut to this many characters.",
        json_schema_extra=env("DAG_OBSERVATION_MAX_CHARS"),
    )
    tool_timeout: float = Field(
        60.0,
        gt=0,
        description="Seconds one tool call may take before it returns a timeout observation.",
        json_schema_extra=env("DAG_TOOL_TIMEOUT"),
    )
    tool_threads: int = Field(
        16,
        ge=1,
        le=1024,
        description=(
            "Threads sync tools may hold at once, apart from the model calls' threads; a tool past its timeout "
            "holds its thread until it returns."
        ),
        json_schema_extra=env("DAG_TOOL_THREADS"),
    )
    code_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds the opt-in `python` tool's process may run before it is killed.",
        json_schema_extra=env("DAG_CODE_TIMEOUT"),
    )
    code_network: bool = Field(
        False,
        description="Let the opt-in `python` tool's scripts use the network (a sandboxed script has none without it).",
        json_schema_extra=env("DAG_CODE_NETWORK"),
    )
    code_without_sandbox: bool = Field(
        False,
        description=(
            "Let the opt-in `python` tool run scripts where no sandbox can be used (macOS, Windows, no bubblewrap): "
            "they then run as your user, with your files, your network and the environments of your processes "
            "(the kernel's keys included). Without it they are refused there."
        ),
        json_schema_extra=env("DAG_CODE_WITHOUT_SANDBOX"),
    )
    scorer_timeout: float = Field(
        300.0,
        gt=0,
        description="Seconds one scorer may take on one cell (an `llm_judge` too) before that cell's score is a "
        "timeout error; a sync scorer runs in a thread, left running past it.",
        json_schema_extra=env("DAG_SCORER_TIMEOUT"),
    )
    domain_routing: bool = Field(
        True,
        description="The first plan call also says the goal's domain (legal, medical, financial), which steers "
        "precise steps to the reasoning model.",
        json_schema_extra=env("DAG_DOMAIN_ROUTING"),
    )
    citation_verification: bool = Field(
        True,
        description="Check citation-like strings in step results with the smart model.",
        json_schema_extra=env("DAG_CITATION_VERIFICATION"),
    )

    # --- analyzer, replanning and synthesis
    analyzer_result_chars: int = Field(
        10000,
        ge=100,
        description="Each step result the analyzer sees, in characters.",
        json_schema_extra=env("DAG_ANALYZER_RESULT_CHARS"),
    )
    synthesis_result_chars: int = Field(
        10000,
        ge=100,
        description="Each step result synthesis sees, in characters.",
        json_schema_extra=env("DAG_SYNTHESIS_RESULT_CHARS"),
    )
    replan_preview_chars: int = Field(
        500,
        ge=50,
        description="Result preview per step of the latest round in the replan context.",
        json_schema_extra=env("DAG_REPLAN_PREVIEW_CHARS"),
    )
    replan_older_preview_chars: int = Field(
        200,
        ge=50,
        description="Result preview per step of older rounds in the replan context.",
        json_schema_extra=env("DAG_REPLAN_OLDER_PREVIEW_CHARS"),
    )

    # --- retries
    llm_timeout: float = Field(
        120.0,
        gt=0,
        description="Seconds one LLM call may take (a stream: between two pieces) before it counts as timed out "
        "and is retried; raise it for slow local models.",
        json_schema_extra=env("DAG_LLM_TIMEOUT"),
    )
    llm_total_timeout: float = Field(
        600.0,
        gt=0,
        description="Seconds one try of an LLM call may take in all, from its request to its reply's last piece, "
        "however steadily a stream keeps coming (a model that never stops writing): past it the call fails timed "
        "out, keeping what arrived.",
        json_schema_extra=env("DAG_LLM_TOTAL_TIMEOUT"),
    )
    llm_max_tokens: MaxTokens = Field(
        default_factory=MaxTokens,
        description="The `max_tokens` each kind of call is sent (`purpose=tokens`, comma-separated; a purpose not "
        "named keeps its default, `off` sends none), so that a reply that never ends is cut; at most what "
        "litellm knows the model can write. A model's own `max_tokens` (`register(..., max_tokens=N)`) wins.",
        json_schema_extra=env("DAG_LLM_MAX_TOKENS"),
    )
    llm_retries: int = Field(
        2,
        ge=0,
        description="Retries of one LLM call on a rate limit, timeout, 5xx or connection error.",
        json_schema_extra=env("DAG_LLM_RETRIES"),
    )
    llm_retry_backoff: float = Field(
        1.0,
        ge=0,
        description="Seconds before the first LLM call retry; doubles each time, plus a random jitter of up to as "
        "much (parallel calls hit by one rate limit spread out). A provider's Retry-After (up to 60 s) wins.",
        json_schema_extra=env("DAG_LLM_RETRY_BACKOFF"),
    )
    llm_rate_limit_wait: float = Field(
        600.0,
        ge=0,
        description="Seconds one LLM call may wait, in all, while a litellm Router refuses it by its own limits "
        "(a deployment's rpm/tpm, also shared through Redis, or its parallel requests) before sending it: it waits "
        "for the next minute's window (or a free slot) without spending a retry; past this the call fails rate "
        "limited.",
        json_schema_extra=env("DAG_LLM_RATE_LIMIT_WAIT"),
    )
    llm_unanswered_limit: int = Field(
        4,
        ge=1,
        description=(
            "Tries of one model in a row that get no answer (timed out, or could not connect), whatever called it, "
            "after which the run stops calling that model: its calls fail at once, and the run answers from what "
            "completed, naming it. Any answer starts the count again."
        ),
        json_schema_extra=env("DAG_LLM_UNANSWERED_LIMIT"),
    )
    step_immediate_retries: int = Field(
        1,
        ge=0,
        description=(
            "Immediate re-runs of a step after a transient error (rate limit, timeout, 5xx, connection), once the "
            "LLM call's own retries are spent; the step keeps its slot."
        ),
        json_schema_extra=env("DAG_STEP_IMMEDIATE_RETRIES"),
    )
    step_retry_delays: tuple[float, ...] = Field(
        (30.0, 120.0, 600.0),
        description=(
            "Then delayed re-runs, seconds each (comma-separated): the step waits `retrying` with its slot free "
            "(`run.retry_now(id)` skips the wait); then it fails for good and only its dependents are skipped."
        ),
        json_schema_extra=env("DAG_STEP_RETRY_DELAYS"),
    )

    # --- durability
    store: str = Field(
        ".dagmagic/runs.sqlite",
        min_length=1,
        description=(
            "Run store every run is saved to as it goes: a SQLite file (relative to the working directory; created "
            "owner-only) or a PostgreSQL URL (`postgresql://user@host:5432/db`, shared by a team; "
            '`pip install "dagmagic[postgres]"`); `%dag resume` and `session.resume(run_id)` continue a run from '
            "it. `none` disables it."
        ),
        json_schema_extra=env("DAG_STORE"),
    )
    store_reconnect_wait: float = Field(
        300.0,
        gt=0,
        description=(
            "Seconds the run store keeps in memory, in order, what it could not write while it cannot be reached (a "
            "PostgreSQL server restarting or down), trying again; once it is back the runs going on are written "
            "whole. Past this, those runs are no longer saved (each says so once) and show as interrupted."
        ),
        json_schema_extra=env("DAG_STORE_RECONNECT_WAIT"),
    )
    cassette: str = Field(
        "none",
        min_length=1,
        description=(
            "Cassette file (JSON lines) model calls are recorded to or replayed from, as `record` says; `none`: "
            "every call goes to its model."
        ),
        json_schema_extra=env("DAG_CASSETTE"),
    )
    record: Literal["once", "new_episodes", "none", "all"] = Field(
        "once",
        description=(
            "How the cassette is used: `once` replays it when it exists, else records it; `new_episodes` replays "
            "what matches and records the rest; `none` only replays (a call not recorded ends the run: for CI); "
            "`all` records it anew."
        ),
        json_schema_extra=env("DAG_RECORD"),
    )
    runs_in_memory: int = Field(
        10,
        ge=1,
        description=(
            "Finished runs a session (and `%dag`) keeps in memory; older ones are dropped from `session.runs` and "
            "read back from the run store when asked for (`dagmagic.load_run(run_id)`, `%dag show N`). Their "
            "answers stay in the conversation."
        ),
        json_schema_extra=env("DAG_RUNS_IN_MEMORY"),
    )

    # --- cache
    cache: str = Field(
        "off",
        description=(
            "Model answers kept in a SQLite file and given again to an identical request (same model, messages, "
            "tools and parameters) with no call and no cost: `on` (`.dagmagic/cache.sqlite`, relative to the "
            "working directory), a path, or `off`."
        ),
        json_schema_extra=env("DAG_CACHE"),
    )

    # --- traces
    otel: bool = Field(
        False,
        description=(
            "Export OpenTelemetry spans of every run (GenAI conventions) over OTLP/HTTP, as the standard "
            '`OTEL_EXPORTER_OTLP_*` variables say; needs `pip install "dagmagic[otel]"`. A `TracerProvider` your '
            "program sets gets the spans without it."
        ),
        json_schema_extra=env("DAG_OTEL"),
    )

    def __init__(self, **data: Any) -> None:
        from_env = values_from_env(type(self).model_fields, data.keys(), os.environ)
        try:
            super().__init__(**{**{name: raw for name, (_, raw) in from_env.items()}, **data})
        except ValidationError as exc:
            raise configuration_error(exc, DagSettings.model_fields, from_env, data) from None
        try:
            self.store_path  # noqa: B018 (a URL of a scheme the store does not support is refused now)
        except ValueError as exc:
            given = from_env["store"][0] if "store" in from_env else "DagSettings(store=...)"
            raise ConfigurationError(f"{given}: {exc}.") from None

    # A store URL's password is kept to connect, but settings are printed, logged and saved in notebooks: every
    # text made of them (repr, str, JSON) shows it masked; model_dump() keeps it, to make settings from.
    @field_serializer("store", when_used="json")
    def _store_shown(self, store: str) -> str:
        return shown_store(store)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, shown_store(value) if name == "store" and isinstance(value, str) else value

    @field_validator("store", "cache", "cassette", mode="before")
    @classmethod
    def _path_as_text(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("max_cost", mode="before")
    @classmethod
    def _none_when_blank(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("", "none", "off"):
            return None
        return value

    @field_validator("llm_max_tokens", mode="before")
    @classmethod
    def _caps_from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.lower() in _OFF:
                return dict.fromkeys(MaxTokens.model_fields)
            pairs = (part.partition("=") for part in text.split(",") if part.strip())
            return {name.strip(): None if cap.strip().lower() in _OFF else cap.strip() for name, _, cap in pairs}
        return value

    @field_validator("step_retry_delays", mode="before")
    @classmethod
    def _split_delays(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip().strip("[]()")
            return tuple(part.strip() for part in text.split(",") if part.strip())
        return value

    @field_validator("step_retry_delays")
    @classmethod
    def _delays_not_negative(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(delay < 0 for delay in value):
            raise ValueError("delays must not be negative")
        return value

    @model_validator(mode="after")
    def _min_within_max(self) -> DagSettings:
        if self.plan_min_steps > self.plan_max_steps:
            raise PydanticCustomError(
                "min_above_max",
                "plan_min_steps ({minimum}) exceeds plan_max_steps ({maximum})",
                {"minimum": self.plan_min_steps, "maximum": self.plan_max_steps, "fields": _MIN_MAX_FIELDS},
            )
        return self

    def non_defaults(self) -> dict[str, Any]:
        """The settings that are not the defaults, as JSON with every secret masked (a store URL's password, a
        key-shaped value): what a run's ``run_started`` event records of them.
        """
        masked: dict[str, Any] = mask_data(self.model_dump(mode="json", exclude_defaults=True))
        return masked

    @property
    def cassette_path(self) -> Path | None:
        """The cassette's path, or None when calls are neither recorded nor replayed."""
        return None if self.cassette.strip().lower() in _OFF else Path(self.cassette)

    @property
    def store_path(self) -> Path | StoreURL | None:
        """The run store's path (SQLite) or URL (PostgreSQL), None when the store is disabled with ``none``."""
        return None if self.store.strip().lower() in _OFF else store_location(self.store)

    @property
    def cache_path(self) -> Path | None:
        """The response cache's file, or None when the cache is off."""
        value = self.cache.strip()
        if value.lower() in {"off", "none", "false", "no", "0", ""}:
            return None
        return DEFAULT_CACHE_PATH if value.lower() in {"on", "true", "yes", "1"} else Path(value)


_OFF = frozenset({"none", "off", "false", ""})
DEFAULT_CACHE_PATH = Path(".dagmagic/cache.sqlite")
"""Where ``cache=on`` keeps model answers."""
_MIN_MAX_FIELDS = ("plan_min_steps", "plan_max_steps")


def settings_table() -> str:
    """The configuration reference's table (docs/configuration.md), made from the fields themselves."""
    rows = ["| setting | environment variable | default | meaning |", "|---|---|---|---|"]
    for name, field in DagSettings.model_fields.items():
        default = field.default
        shown = ",".join(f"{d:g}" for d in default) if isinstance(default, tuple) else default
        if field.default_factory is not None:
            shown = str(field.get_default(call_default_factory=True))
        variables = " / ".join(
            f"`{v}` (deprecated)" if v == deprecated_env_var(field) else f"`{v}`" for v in env_var_names(field)
        )
        rows.append(f"| `{name}` | {variables} | `{shown}` | {field.description} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_table())
