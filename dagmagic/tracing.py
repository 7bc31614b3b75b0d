"""OpenTelemetry spans of a run, drawn from its event stream with the GenAI semantic conventions.

Tracing is on when the program has set a global ``TracerProvider`` (its spans go where the program sends
them), or with ``DAG_OTEL=1``: then dagmagic builds a provider of its own that exports over OTLP/HTTP as the
standard ``OTEL_EXPORTER_OTLP_*`` variables say. It needs the optional extra ``dagmagic[otel]``.

The engine makes no tracing call: a ``RunTracer`` (``run_tracer``) follows a run's events, and the spans
open and end as the events arrive, with the times the events (and the LLM call records) carry::

    invoke_workflow dagmagic                    the run
      round 1                                   a plan-execute-analyze round
        plan round 1                            the planner, until its plan is whole
          chat gpt-4o-mini                      each LLM call, under the step or phase it served
        invoke_agent s1                         a step (siblings overlap: they run in parallel)
          execute_tool lookup
          chat gpt-4o-mini
        chat gpt-4o                             the analysis (and the answer it streams)

A run's trace is its run id's: the trace id and the (never exported) span the run's span hangs under are drawn
from the run id (``run_span_context``), so a run resumed later, in another process (a worker Temporal retried the
run on after the first died, say), adds its spans to the trace its first spans are in. A step run again is a
trace of its own.

A subrun (a step planned as a DAG of its own) is an ``invoke_workflow`` span under its step. Messages, tool
arguments and results, the goal and the answer are recorded only with the conventions' opt-in,
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``; every text attribute is masked like the rest of
dagmagic's output (``dagmagic._secrets.mask_secrets``): no key reaches a span.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from dagmagic._secrets import mask_secrets
from dagmagic.errors import ConfigurationError
from dagmagic.events import (
    AnswerReady,
    Event,
    LLMCallRecorded,
    ModelsReady,
    PhaseChanged,
    PlanReady,
    RoundStarted,
    RunFinished,
    RunStarted,
    StepCompleted,
    StepIteration,
    StepRetrying,
    StepStarted,
)
from dagmagic.models import LLMCall, Usage
from dagmagic.settings import DagSettings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Span, SpanContext, Tracer

    from dagmagic.engine.run.dag_run import DagRun

__all__ = [
    "CAPTURE_CONTENT_VARIABLE",
    "RunTracer",
    "capture_content",
    "import_api",
    "provider_name",
    "run_span_context",
    "run_tracer",
    "tracer_for",
]

log = logging.getLogger("dagmagic")

CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI conventions' opt-in for message content on spans."""

INSTALL_HINT = 'pip install "dagmagic[otel]"'
WORKFLOW = "dagmagic"
"""``gen_ai.workflow.name`` of a run (and the default ``service.name`` of dagmagic's own provider)."""
FLUSH_MILLIS = 5_000
"""How long the flush a run's end asks of dagmagic's own provider may wait for the export (off the run's path)."""
OTLP_LOGGER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
"""Where the OTLP/HTTP exporter logs each failed try (several a batch, a batch a run)."""

_ON = {"1", "true", "yes", "on", "span_only", "span_and_event"}
# litellm's provider prefixes whose name in the conventions differs
_PROVIDERS = {
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "xai": "x_ai",
    "watsonx": "ibm.watsonx.ai",
    "moonshot": "moonshot_ai",
}
# a model named without a prefix: litellm's defaults for the common families
_FAMILIES = {
    "gpt-": "openai",
    "o1": "openai",
    "o3": "openai",
    "o4": "openai",
    "claude": "anthropic",
    "gemini": "gcp.gemini",
    "mistral": "mistral_ai",
    "command": "cohere",
    "deepseek": "deepseek",
    "grok": "x_ai",
}

_own_provider: TracerProvider | None = None
_own_provider_lock = threading.Lock()
_flush_lock = threading.Lock()
_flushing = False
_to_flush: TracerProvider | None = None
"""The provider to flush once the flush under way ends (a run ended meanwhile)."""
_PROBLEM_CHARS = 300
_exporting = threading.local()
"""``exporter``: the ``_ToldOnce`` exporting on this thread, whose exporter's own complaints it keeps."""


def capture_content() -> bool:
    """Whether the conventions' opt-in asks for message content on spans."""
    return os.environ.get(CAPTURE_CONTENT_VARIABLE, "").strip().lower() in _ON


def import_api() -> None:
    """Import OpenTelemetry's API when it is installed: what ``tracer_for`` reads as each run starts (imported in
    the background by the notebook, the first run's event loop does not import it).
    """
    with contextlib.suppress(ImportError):  # tracing is optional: a run says so only when asked for traces
        import opentelemetry.trace  # noqa: F401


def run_span_context(run_id: str) -> SpanContext:
    """The remote parent of run ``run_id``'s span, drawn from the run id alone: its trace is the run's wherever and
    whenever its spans are made (a resumed run's join its first ones). Sampled: the run's spans are all kept, or
    (a sampler that drops them) none.
    """
    from opentelemetry.trace import SpanContext, TraceFlags

    digest = hashlib.sha256(f"dagmagic-run:{run_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1  # 0 is no id
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def tracer_for(settings: DagSettings) -> tuple[Tracer, TracerProvider | None] | None:
    """The tracer a run's spans go to, with dagmagic's own provider when it built one (to flush at the run's
    end); None when tracing is off: no global ``TracerProvider`` set and ``DAG_OTEL`` off.
    """
    try:
        from opentelemetry import trace
    except ImportError:
        if settings.otel:
            raise ConfigurationError(
                f"DAG_OTEL=1 asks for OpenTelemetry traces, but OpenTelemetry is not installed: {INSTALL_HINT} "
                "(or unset DAG_OTEL)."
            ) from None
        return None
    provider = trace.get_tracer_provider()
    if not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return provider.get_tracer("dagmagic"), None  # the program's own provider: its spans go where it says
    if not settings.otel:
        return None
    own = _own_otlp_provider()
    return own.get_tracer("dagmagic"), own


def _own_otlp_provider() -> TracerProvider:
    """The provider of dagmagic's own (one per process): OTLP/HTTP, configured by the standard ``OTEL_*`` variables."""
    global _own_provider
    with _own_provider_lock:
        if _own_provider is None:
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import BatchSpanProcessor
            except ImportError:
                raise ConfigurationError(
                    "DAG_OTEL=1 exports traces over OTLP/HTTP, but the OpenTelemetry SDK or its OTLP/HTTP exporter "
                    f"is not installed: {INSTALL_HINT}."
                ) from None
            named = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": WORKFLOW}
            provider = TracerProvider(resource=Resource.create(named))
            # a SpanExporter by its methods, not a subclass: the SDK is optional when this module is imported
            exporter = cast("SpanExporter", _ToldOnce(OTLPSpanExporter(), _otlp_endpoint()))
            provider.add_span_processor(BatchSpanProcessor(exporter))
            _own_provider = provider
        return _own_provider


def _otlp_endpoint() -> str:
    """Where the OTLP/HTTP exporter sends spans, as the standard variables say."""
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
    return traces or base.rstrip("/") + "/v1/traces"


class _ToldOnce:
    """The OTLP exporter, whose failures are told once, by dagmagic, not at every try of every run's batch."""

    def __init__(self, inner: SpanExporter, endpoint: str) -> None:
        self.inner = inner
        self.endpoint = endpoint
        self.problem = ""
        """The exporter's first complaint in the export under way (what failed), kept for the one warning."""
        self._told = False
        _quiet_exporter_logs()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.sdk.trace.export import SpanExportResult

        _exporting.exporter = self
        self.problem = ""
        try:
            result = self.inner.export(spans)
        finally:
            _exporting.exporter = None
        if result is not SpanExportResult.SUCCESS and not self._told:
            self._told = True
            log.warning(
                "[dagmagic] Traces could not be exported to %s (%s); runs go on, and later failures to export "
                "there are not reported.",
                mask_secrets(self.endpoint),
                mask_secrets(self.problem or "no reason given"),
            )
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _quiet_exporter_logs() -> None:
    """Keep the exporter's own complaints from being logged while a ``_ToldOnce`` exports (its thread only: a
    program's own OTLP exporter still logs as it does).
    """
    logger = logging.getLogger(OTLP_LOGGER)
    if not any(isinstance(known, _KeptByExporter) for known in logger.filters):
        logger.addFilter(_KeptByExporter())


class _KeptByExporter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exporter: _ToldOnce | None = getattr(_exporting, "exporter", None)
        if exporter is None:
            return True
        exporter.problem = exporter.problem or record.getMessage()[:_PROBLEM_CHARS]
        return False


def _flush_soon(provider: TracerProvider) -> None:
    """Export what the provider holds, on a thread of its own: a collector that is down or never answers holds
    that thread (up to the exporter's timeout), never a run or the cell awaiting it. One flush at a time; a run
    ending meanwhile gets one more.
    """
    global _flushing, _to_flush
    with _flush_lock:
        if _flushing:
            _to_flush = provider
            return
        _flushing = True
    threading.Thread(target=_flush_until_done, args=(provider,), name="dagmagic-trace-flush", daemon=True).start()


def _flush_until_done(provider: TracerProvider | None) -> None:
    global _flushing, _to_flush
    while provider is not None:
        try:
            provider.force_flush(FLUSH_MILLIS)
        except Exception:  # an exporter's failure is its own to tell (once, by _ToldOnce)
            log.debug("[dagmagic] flushing the traces failed", exc_info=True)
        with _flush_lock:
            provider, _to_flush = _to_flush, None
            _flushing = provider is not None


def run_tracer(settings: DagSettings) -> RunTracer | None:
    """What traces a run with ``settings`` (``follow`` the run, ``close()`` it when the run is driven); None
    when tracing is off. ``ConfigurationError`` when ``DAG_OTEL`` is on without OpenTelemetry installed.
    """
    found = tracer_for(settings)
    if found is None:
        return None
    tracer, own = found
    return RunTracer(tracer, content=capture_content(), provider=own)


def provider_name(target: str) -> str:
    """``gen_ai.provider.name`` of a litellm model string (``anthropic/claude-...`` is ``anthropic``)."""
    prefix, slash, _ = target.partition("/")
    if slash:
        return _PROVIDERS.get(prefix, prefix)
    return next((name for family, name in _FAMILIES.items() if target.startswith(family)), target)


def _nanoseconds(seconds: float) -> int:
    return int(seconds * 1e9)


@dataclass
class _Open:
    """A span under way and what its children have spent."""

    span: Span
    usage: Usage = field(default_factory=Usage)


@dataclass
class _Frame:
    """The spans under way of one run: the run's own, or a subrun's (its events carry the step's path)."""

    run: _Open
    run_id: str
    round: int | None = None
    rounds: dict[int, _Open] = field(default_factory=dict)
    plans: dict[int, _Open] = field(default_factory=dict)
    planning: set[int] = field(default_factory=set)
    """Rounds whose planning began before the round itself did (their plan opens with the round)."""
    steps: dict[tuple[int, str], _Open] = field(default_factory=dict)


class RunTracer:
    """A run listener that opens and ends a run's spans as its events arrive (see the module's docstring).

    ``content``: record messages, tool arguments and results, the goal and the answer (masked);
    ``provider``: dagmagic's own provider, flushed when the run ends.
    """

    def __init__(self, tracer: Tracer, *, content: bool = False, provider: TracerProvider | None = None) -> None:
        self.tracer = tracer
        self.content = content
        self.provider = provider
        self._unsubscribe: Callable[[], object] | None = None
        self._frames: dict[str | None, _Frame] = {}
        self._run_id = ""
        self._targets: dict[str, str] = {}
        self._own_trace = False

    def follow(self, run: DagRun, *, own_trace: bool = False) -> None:
        """Trace ``run`` from its next event on: in the run's trace (``run_span_context``), or, ``own_trace`` (a
        step run again), in a trace of its own.
        """
        self._run_id = run.run_id  # a re-run of a step starts with no RunStarted
        self._own_trace = own_trace
        self._unsubscribe = run.subscribe(self)

    def __call__(self, event: Event) -> None:
        """Open or end the spans ``event`` tells of."""
        scope = event.scope if event.depth else None
        if isinstance(event, ModelsReady):
            self._targets.update({card.name: card.model for card in event.models})
            return
        frame = self._frames.get(scope) or self._open_run(event, scope)
        if isinstance(event, RoundStarted):
            self._round_started(frame, event)
        elif isinstance(event, PhaseChanged) and event.phase == "planning" and event.round is not None:
            self._plan_started(frame, event.round, event.at)
        elif isinstance(event, PlanReady) and (plan := frame.plans.pop(event.round, None)) is not None:
            plan.span.set_attribute("dagmagic.steps", len(event.plan.steps))
            self._end(plan, event.at)
        elif isinstance(event, StepStarted):
            self._step_started(frame, event)
        elif isinstance(event, StepRetrying) and (step := frame.steps.get((event.round, event.step_id))):
            step.span.add_event("step_retrying", {"dagmagic.error": mask_secrets(event.error)}, _nanoseconds(event.at))
        elif isinstance(event, StepCompleted):
            self._step_completed(frame, event)
        elif isinstance(event, StepIteration):
            self._tool_call(frame, event)
        elif isinstance(event, LLMCallRecorded):
            self._llm_call(frame, event)
        elif isinstance(event, AnswerReady) and self.content:
            frame.run.span.set_attribute("gen_ai.output.messages", _output_messages(event.answer, []))
        elif isinstance(event, RunFinished):
            self._run_finished(scope, frame, event)

    # --- the run and its rounds -------------------------------------------------------------------

    def _open_run(self, event: Event, scope: str | None) -> _Frame:
        """The run's span, at its first event (a re-run of a step starts with no ``RunStarted``)."""
        if isinstance(event, RunStarted) and not event.depth:
            self._run_id = event.run_id or self._run_id
        run_id = f"{self._run_id}/{scope}" if scope else self._run_id
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.workflow.name": WORKFLOW,
            "dagmagic.run_id": run_id,
        }
        if isinstance(event, RunStarted):
            if event.replay_of:
                attributes["dagmagic.replay_of"] = event.replay_of
            if self.content:
                attributes["gen_ai.input.messages"] = _messages([{"role": "user", "content": event.goal}])
        parent = self._parent_of_subrun(scope) if scope else None
        span = self._start(f"invoke_workflow {WORKFLOW}", parent, event.at, attributes)
        frame = _Frame(_Open(span), run_id)
        self._frames[scope] = frame
        return frame

    def _parent_of_subrun(self, scope: str) -> _Open | None:
        """The span of the step a subrun belongs to (``s2``; ``s2/s1``: step s1 of s2's subrun)."""
        outer, _, step_id = scope.rpartition("/")
        frame = self._frames.get(outer or None)
        if frame is None:
            return None
        step = frame.steps.get((frame.round, step_id)) if frame.round is not None else None
        return step or frame.rounds.get(frame.round or 0) or frame.run

    def _round_started(self, frame: _Frame, event: RoundStarted) -> None:
        if frame.round is not None and (previous := frame.rounds.pop(frame.round, None)) is not None:
            self._end(previous, event.at)
        frame.round = event.round
        attributes = {"dagmagic.run_id": frame.run_id, "dagmagic.round": event.round}
        frame.rounds[event.round] = _Open(self._start(f"round {event.round}", frame.run, event.at, attributes))
        if event.round in frame.planning:
            frame.planning.discard(event.round)
            self._plan_started(frame, event.round, event.at)

    def _plan_started(self, frame: _Frame, index: int, at: float) -> None:
        """The planner's span, under its round (a round that re-runs a step has none)."""
        if index in frame.plans:
            return
        if index not in frame.rounds:
            frame.planning.add(index)
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "plan",
            "dagmagic.run_id": frame.run_id,
            "dagmagic.round": index,
            "dagmagic.purpose": "plan",
        }
        frame.plans[index] = _Open(self._start(f"plan round {index}", frame.rounds[index], at, attributes))

    def _run_finished(self, scope: str | None, frame: _Frame, event: RunFinished) -> None:
        """End what is still open (a cancelled run's steps), then the run."""
        for still_open in [*frame.steps.values(), *frame.plans.values(), *frame.rounds.values()]:
            still_open.span.set_attribute("dagmagic.status", event.status)
            self._end(still_open, event.at)
        run = frame.run
        run.span.set_attribute("dagmagic.status", event.status)
        if event.error:
            _failed(run.span, event.error)
        self._end(run, event.at)
        del self._frames[scope]

    # --- steps, tools and LLM calls ---------------------------------------------------------------

    def _step_started(self, frame: _Frame, event: StepStarted) -> None:
        if (event.round, event.step_id) in frame.steps:  # tried again after a transient failure: the same span
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": event.step_id,
            "dagmagic.run_id": frame.run_id,
            "dagmagic.round": event.round,
            "dagmagic.step_id": event.step_id,
            "dagmagic.purpose": "step",
        }
        if event.model:
            target = self._targets.get(event.model, event.model)
            attributes |= {"gen_ai.provider.name": provider_name(target), "gen_ai.request.model": target}
        parent = frame.rounds.get(event.round, frame.run)
        frame.steps[(event.round, event.step_id)] = _Open(
            self._start(f"invoke_agent {event.step_id}", parent, event.at, attributes)
        )

    def _step_completed(self, frame: _Frame, event: StepCompleted) -> None:
        step = frame.steps.pop((event.round, event.step_id), None)
        if step is None:  # ended without starting (skipped, or its dependency failed): a span of no length
            self._step_started(frame, StepStarted(round=event.round, step_id=event.step_id, at=event.at))
            step = frame.steps.pop((event.round, event.step_id))
        step.span.set_attribute("dagmagic.status", event.status)
        if event.status == "failed":
            _failed(step.span, event.error or "failed")
        self._end(step, event.at)

    def _tool_call(self, frame: _Frame, event: StepIteration) -> None:
        parent = frame.steps.get((event.round, event.step_id)) or frame.rounds.get(event.round, frame.run)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.tool,
            "gen_ai.tool.type": "function",
            "dagmagic.run_id": frame.run_id,
            "dagmagic.round": event.round,
            "dagmagic.step_id": event.step_id,
            "dagmagic.iteration": event.iteration,
        }
        if self.content:
            attributes["gen_ai.tool.call.arguments"] = _json(event.arguments)
            attributes["gen_ai.tool.call.result"] = event.observation_preview
        span = self._start(f"execute_tool {event.tool}", parent, event.at - event.duration, attributes)
        span.end(_nanoseconds(event.at))

    def _llm_call(self, frame: _Frame, event: LLMCallRecorded) -> None:
        call = event.call
        index = frame.round if event.depth else call.round  # a subrun's call carries its parent's round
        parent = self._call_parent(frame, call, index, event.scope if event.depth else None)
        target = self._targets.get(call.model, call.model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(target),
            "gen_ai.request.model": target,
            "gen_ai.usage.input_tokens": call.usage.input_tokens,
            "gen_ai.usage.output_tokens": call.usage.output_tokens,
            "dagmagic.run_id": frame.run_id,
            "dagmagic.purpose": call.purpose,
            "dagmagic.status": call.status,
            "dagmagic.model": call.model,
        }
        attributes |= {"dagmagic.round": index} if index is not None else {}
        attributes |= {"dagmagic.step_id": call.step_id} if call.step_id else {}
        attributes |= {"gen_ai.response.model": call.response_model} if call.response_model else {}
        attributes |= {"dagmagic.cost": call.usage.cost} if call.usage.cost is not None else {}
        attributes |= {"dagmagic.cached": True} if call.cached else {}
        if self.content:
            attributes["gen_ai.input.messages"] = _messages(call.messages)
            attributes["gen_ai.output.messages"] = _output_messages(call.reply, call.tool_calls)
        start = call.started_at or event.at - call.latency
        span = self._start(f"chat {target}", parent, start, attributes)
        if call.error:
            _failed(span, call.error)
        span.end(_nanoseconds(start + call.latency))
        for spent in self._counting(frame, parent, index):
            spent.usage = spent.usage + call.usage

    def _call_parent(self, frame: _Frame, call: LLMCall, index: int | None, scope: str | None) -> _Open:
        """The span a call served: its step, the plan under way, its round, or the run."""
        step_id = call.step_id
        if scope and step_id:
            step_id = step_id.removeprefix(scope).removeprefix("/") or None
        if index is not None and step_id and (step := frame.steps.get((index, step_id.split("/")[0]))):
            return step
        if index is not None and call.purpose == "plan" and (plan := frame.plans.get(index)):
            return plan
        return frame.rounds.get(index, frame.run) if index is not None else frame.run

    def _counting(self, frame: _Frame, parent: _Open, index: int | None) -> Iterator[_Open]:
        """The spans whose totals a call counts in: the one it served, its round and its run, once each."""
        round_ = frame.rounds.get(index) if index is not None else None
        spans = {id(opened): opened for opened in (parent, round_, frame.run) if opened is not None}
        yield from spans.values()

    # --- spans ------------------------------------------------------------------------------------

    def _start(self, name: str, parent: _Open | None, at: float, attributes: Mapping[str, Any]) -> Span:
        from opentelemetry import context, trace

        if parent is not None:
            within = trace.set_span_in_context(parent.span)
        elif self._run_id and not self._own_trace:
            within = trace.set_span_in_context(trace.NonRecordingSpan(run_span_context(self._run_id)))
        else:
            within = context.Context()
        return self.tracer.start_span(
            mask_secrets(name),
            context=within,
            kind=trace.SpanKind.INTERNAL,
            attributes={key: _masked(value) for key, value in attributes.items()},
            start_time=_nanoseconds(at),
        )

    def _end(self, opened: _Open, at: float) -> None:
        usage = opened.usage
        if usage.requests:
            opened.span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            opened.span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            if usage.cost is not None:
                opened.span.set_attribute("dagmagic.cost", usage.cost)
        opened.span.end(_nanoseconds(at))

    async def close(self) -> None:
        """Stop listening, end what the run left open, and (with dagmagic's own provider) have its spans exported
        in the background.
        """
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for scope, frame in list(self._frames.items()):
            self._run_finished(scope, frame, RunFinished(status="cancelled"))
        if self.provider is not None:
            _flush_soon(self.provider)  # a short run's spans would otherwise wait for the next batch (or the exit)


def _failed(span: Span, error: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    error = mask_secrets(error)
    kind, colon, _ = error.partition(":")
    span.set_attribute("error.type", kind if colon and kind.isidentifier() else "_OTHER")
    span.set_status(Status(StatusCode.ERROR, error))


def _masked(value: Any) -> Any:
    return mask_secrets(value) if isinstance(value, str) else value


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _messages(messages: list[dict[str, Any]]) -> str:
    """Messages as the conventions write them: a role and its parts."""
    return _json(
        [
            {"role": message.get("role", "user"), "parts": [{"type": "text", "content": _text(message.get("content"))}]}
            for message in messages
        ]
    )


def _output_messages(reply: str, tool_calls: list[dict[str, Any]]) -> str:
    parts: list[dict[str, Any]] = [{"type": "text", "content": reply}] if reply else []
    parts += [
        {"type": "tool_call", "id": call.get("id"), "name": call.get("name"), "arguments": call.get("arguments")}
        for call in tool_calls
    ]
    return _json([{"role": "assistant", "parts": parts}])


def _text(content: Any) -> str:
    return content if isinstance(content, str) else _json(content)
