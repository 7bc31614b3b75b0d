// Reading the synced traits defensively: a trait may be missing while the model initializes, or come from
// an older kernel. Views get complete, well-typed values and never have to check.

import { num } from "./format.js";

/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./types.js").Model} Model */
/** @typedef {import("./types.js").DagNode} DagNode */
/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").StepDiff} StepDiff */
/** @typedef {import("./types.js").SubRun} SubRun */

/** The traits whose changes redraw something. */
export const TRAITS = /** @type {const} */ ([
  "goal",
  "status",
  "phase",
  "error",
  "divergence",
  "warnings",
  "answer",
  "answer_fallback",
  "answer_partial",
  "answer_unreached",
  "resumable",
  "can_rerun",
  "usage",
  "rounds",
  "calls",
  "live_calls",
  "now",
  "started_at",
  "phase_since",
  "stopped_by_user",
  "idle",
  "comparison",
  "comparison_round",
  "comparison_label",
  "forked",
  "detached",
]);

/**
 * Python's clock at the last sync (epoch seconds; 0 when unknown), without reading the rest of the state.
 * @param {Model} model
 */
export function readNow(model) {
  return num(get(model, "now")) ?? 0;
}

/**
 * @template T
 * @param {unknown} value
 * @returns {T[]}
 */
function list(value) {
  return Array.isArray(value) ? value : [];
}

/**
 * @param {Model} model
 * @param {keyof Traits} name
 * @returns {unknown}
 */
function get(model, name) {
  try {
    return model.get(name);
  } catch {
    return undefined;
  }
}

/**
 * A complete snapshot of the state.
 * @param {Model} model
 * @returns {Traits}
 */
export function readState(model) {
  const status = String(get(model, "status") ?? "running");
  const usage = /** @type {Partial<Traits["usage"]> | null} */ (get(model, "usage")) ?? {};
  return {
    run_id: String(get(model, "run_id") ?? ""),
    goal: String(get(model, "goal") ?? ""),
    status: /** @type {Traits["status"]} */ (status),
    phase: /** @type {Traits["phase"]} */ (
      String(get(model, "phase") ?? (status === "running" ? "starting" : "finished"))
    ),
    error: String(get(model, "error") ?? ""),
    divergence: normalizeDivergence(get(model, "divergence")),
    warnings: list(get(model, "warnings")).map(String),
    answer: String(get(model, "answer") ?? ""),
    answer_fallback: Boolean(get(model, "answer_fallback")),
    answer_partial: Boolean(get(model, "answer_partial")),
    answer_unreached: Boolean(get(model, "answer_unreached")),
    resumable: Boolean(get(model, "resumable")),
    can_rerun: Boolean(get(model, "can_rerun")),
    usage: {
      input_tokens: num(usage.input_tokens) ?? 0,
      output_tokens: num(usage.output_tokens) ?? 0,
      requests: num(usage.requests) ?? 0,
      cost: num(usage.cost),
      cached_requests: num(usage.cached_requests) ?? 0,
      saved_cost: num(usage.saved_cost),
    },
    rounds: list(get(model, "rounds")).map(normalizeRound),
    calls: list(get(model, "calls")),
    live_calls: list(get(model, "live_calls")).map(normalizeLiveCall),
    now: num(get(model, "now")) ?? 0,
    started_at: num(get(model, "started_at")),
    phase_since: num(get(model, "phase_since")),
    stopped_by_user: Boolean(get(model, "stopped_by_user")),
    idle: Math.max(num(get(model, "idle")) ?? 0, 0),
    comparison: widgetRef(get(model, "comparison")),
    comparison_round: num(get(model, "comparison_round")) ?? 0,
    comparison_label: String(get(model, "comparison_label") ?? ""),
    forked: String(get(model, "forked") ?? ""),
    detached: String(get(model, "detached") ?? ""),
  };
}

/**
 * A widget reference as anywidget's `WidgetTrait` sends it (`"anywidget:<id>"`), or null for none.
 * @param {unknown} value
 * @returns {string | null}
 */
function widgetRef(value) {
  return typeof value === "string" && value ? value : null;
}

/**
 * @param {any} round
 * @param {number} position
 * @returns {Round}
 */
function normalizeRound(round, position) {
  const r = round ?? {};
  return {
    index: num(r.index) ?? position + 1,
    error: r.error ? String(r.error) : null,
    warnings: list(r.warnings).map(String),
    nodes: list(r.nodes).map(normalizeNode),
    analysis: r.analysis ?? null,
    decision: r.decision ?? null,
    rerun_of: num(r.rerun_of),
    rerun_step: optionalText(r.rerun_step),
    what_if: Boolean(r.what_if),
    approval: APPROVALS.includes(r.approval) ? r.approval : null,
    diff: Array.isArray(r.diff) ? r.diff.map(normalizeDiff) : null,
    diff_base: num(r.diff_base),
    follow_ups: list(r.follow_ups).map(String),
    answered_follow_ups: list(r.answered_follow_ups).map(String),
    plan_cut: normalizePlanCut(r.plan_cut),
  };
}

/**
 * @param {any} value
 * @returns {import("./types.js").Divergence | null}
 */
function normalizeDivergence(value) {
  if (!value || typeof value !== "object" || !value.headline) return null;
  return { headline: String(value.headline), reason: String(value.reason ?? "") };
}

/**
 * @param {any} cut
 * @returns {import("./types.js").PlanCut | null}
 */
function normalizePlanCut(cut) {
  const planned = num(cut?.planned);
  const kept = num(cut?.kept);
  if (planned === null || kept === null) return null;
  return { planned, kept, dropped: list(cut.dropped).map(String) };
}

/**
 * @param {any} call
 * @returns {import("./types.js").LiveCall}
 */
function normalizeLiveCall(call) {
  const c = call ?? {};
  return {
    purpose: String(c.purpose ?? "?"),
    model: String(c.model ?? ""),
    round: num(c.round),
    step_id: optionalText(c.step_id),
    started_at: num(c.started_at) ?? 0,
    tokens: num(c.tokens) ?? 0,
    stream: c.stream !== false,
  };
}

/**
 * The call the run's current phase waits on (the plan being written, the verdict), when one is under way: the
 * latest call outside the steps.
 * @param {Traits} state
 * @returns {import("./types.js").LiveCall | null}
 */
export function phaseCall(state) {
  if (state.status !== "running") return null;
  const calls = (state.live_calls ?? []).filter((call) => call.step_id === null);
  return calls.at(-1) ?? null;
}

/**
 * "57 tokens", "1 token"
 * @param {number} tokens
 */
export function tokenCount(tokens) {
  return `${tokens} token${tokens === 1 ? "" : "s"}`;
}

const APPROVALS = ["pending", "approved", "rejected"];

/**
 * @param {any} entry
 * @returns {StepDiff}
 */
function normalizeDiff(entry) {
  const d = entry ?? {};
  return {
    id: String(d.id ?? "?"),
    change: d.change ?? "changed",
    fields: /** @type {StepDiff["fields"]} */ (list(d.fields).map(String)),
    round: num(d.round),
    was: optionalText(d.was),
  };
}

/**
 * @param {unknown} value
 * @returns {string | null}
 */
function optionalText(value) {
  return value === null || value === undefined || value === "" ? null : String(value);
}

/**
 * @param {any} node
 * @returns {DagNode}
 */
function normalizeNode(node) {
  const n = node ?? {};
  return {
    ...n,
    id: String(n.id ?? "?"),
    task: String(n.task ?? ""),
    status: n.status ?? "pending",
    dependencies: list(n.dependencies).map(String),
    tool_calls: list(n.tool_calls),
    warnings: list(n.warnings).map(String),
    attempts: num(n.attempts) ?? 0,
    tool_hint: optionalText(n.tool_hint),
    model_hint: optionalText(n.model_hint),
    paused_messages: Array.isArray(n.paused_messages)
      ? n.paused_messages.map((/** @type {any} */ m) => ({
          role: String(m?.role ?? "?"),
          content: String(m?.content ?? ""),
        }))
      : null,
    paused_tools: list(n.paused_tools).map(String),
    subrun: normalizeSubrun(n.subrun),
    reused_from: num(n.reused_from),
    edited: Boolean(n.edited),
  };
}

/**
 * A composite step's nested run; its rounds are read like the run's own (so nested steps may nest again).
 * @param {any} subrun
 * @returns {SubRun | null}
 */
function normalizeSubrun(subrun) {
  if (!subrun || typeof subrun !== "object") return null;
  return {
    status: /** @type {SubRun["status"]} */ (String(subrun.status ?? "running")),
    answer: String(subrun.answer ?? ""),
    error: String(subrun.error ?? ""),
    rounds: list(subrun.rounds).map(normalizeRound),
  };
}

/** @param {DagNode} node */
export function isLive(node) {
  return node.status === "running" || node.status === "retrying" || node.status === "queued";
}

/**
 * Queue wait and run time of a step, in seconds; a running step counts up to `now` (the display clock: the last
 * sync carried forward while the run runs, see clock.js).
 * @param {DagNode} node
 * @param {number} now
 * @returns {{queue: number | null, run: number | null}}
 */
export function stepTimes(node, now) {
  const queued = num(node.queued_at);
  const started = num(node.started_at);
  const completed = num(node.completed_at);
  const queueEnd = started ?? (node.status === "queued" && now ? now : null);
  const queue = queued !== null && queueEnd !== null ? Math.max(queueEnd - queued, 0) : null;
  const runEnd = completed ?? (isLive(node) && now ? now : null);
  const run = started !== null && runEnd !== null ? Math.max(runEnd - started, 0) : null;
  return { queue, run };
}

/**
 * Running time of the run so far: from `started_at` (or the earliest step) to `now`, less the time it stood
 * ended before it went on (a step re-run later).
 * @param {Traits} state
 * @returns {number | null}
 */
export function runElapsed(state) {
  let start = state.started_at ?? null;
  if (start === null) {
    for (const round of state.rounds) {
      for (const node of round.nodes) {
        const t = num(node.queued_at) ?? num(node.started_at);
        if (t !== null && (start === null || t < start)) start = t;
      }
    }
  }
  if (start === null || !state.now) return null;
  return Math.max(state.now - start - (state.idle ?? 0), 0);
}

/**
 * Seconds the running run has been in its current phase, up to `now`; null when it is not running or the
 * phase's start is unknown (older kernels).
 * @param {Traits} state
 * @returns {number | null}
 */
export function phaseElapsed(state) {
  if (state.status !== "running" || state.phase_since === null || !state.now) return null;
  return Math.max(state.now - state.phase_since, 0);
}
