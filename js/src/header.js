// The header: the goal, the run's status (what a running run is doing, and for how long), its totals
// (tokens, requests, cost, elapsed) and its error (for a replay that left its recording: where, and the diff). Built once; updates change only the texts that changed, so
// the clock's ticks are cheap and the status's live region speaks only when the phase or status changes.

import { h } from "./dom.js";
import { formatCost, formatDuration, formatInt } from "./format.js";
import { phaseCall, phaseElapsed, runElapsed, tokenCount } from "./state.js";

/** @typedef {import("./types.js").Traits} Traits */

const STATUS_LABEL = /** @type {Record<string, string>} */ ({
  running: "running",
  done: "done",
  failed: "failed",
  cancelled: "cancelled",
});

/** What a running run is doing, in words. */
const PHASE_LABEL = /** @type {Record<string, string>} */ ({
  starting: "starting…",
  planning: "planning…",
  awaiting_approval: "waiting for your approval…",
  executing: "running steps…",
  analyzing: "judging…",
  synthesizing: "writing the answer…",
});

const TOTALS = /** @type {const} */ (["tokens", "requests", "cost", "elapsed"]);

/**
 * Sets a node's text only when it differs (rewriting a live region's text may announce it again).
 * @param {Node} node
 * @param {string} text
 */
function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

/**
 * Whole seconds in a phase, like a stopwatch: "3s", "59s", then "1m 05s".
 * @param {number} seconds
 */
export function formatPhaseTime(seconds) {
  return seconds < 60 ? `${Math.floor(seconds)}s` : formatDuration(seconds);
}

/**
 * The status badge's words and the seconds in the phase ("" when not shown).
 * @param {Traits} state
 * @returns {{label: string, time: string, stopped: boolean}}
 */
function statusText(state) {
  // the verdict writes the answer while it judges: once the answer shows, that is what the run is doing
  const phase = state.phase === "analyzing" && state.answer ? "synthesizing" : state.phase;
  const doing = state.status === "running" ? PHASE_LABEL[phase] : undefined;
  if (doing) {
    const seconds = phaseElapsed(state);
    const call = phaseCall(state);
    // what the model has written so far: a long call counts up rather than sit still
    const arrived = call && call.tokens ? ` · ${tokenCount(call.tokens)}` : "";
    return { label: doing, time: seconds === null ? "" : formatPhaseTime(seconds) + arrived, stopped: false };
  }
  const stopped = state.status === "done" && state.stopped_by_user;
  return { label: stopped ? "stopped by you" : (STATUS_LABEL[state.status] ?? state.status), time: "", stopped };
}

/**
 * The run's error; a replay that diverged from its recording says so first, then shows the closest recorded call's
 * diff line by line, monospace, removed and added lines marked.
 * @param {HTMLElement} error
 * @param {Traits} state
 */
function showError(error, state) {
  const divergence = state.divergence;
  const key = divergence ? `${divergence.headline}\n${divergence.reason}` : state.error;
  error.hidden = !key;
  if (error.dataset.shown === key) return;
  error.dataset.shown = key;
  if (!divergence) {
    error.replaceChildren(state.error);
    return;
  }
  const lines = divergence.reason.split("\n").map((line) => {
    const kind = /^(\+\+\+|---)/.test(line) ? "file" : line[0] === "+" ? "added" : line[0] === "-" ? "removed" : "";
    return h("span", { class: "dagmagic-diff-line", "data-kind": kind }, [line]);
  });
  const headline = divergence.headline.charAt(0).toUpperCase() + divergence.headline.slice(1);
  error.replaceChildren(
    h("div", { class: "dagmagic-divergence-headline" }, [`${headline}.`]),
    h("pre", { class: "dagmagic-divergence-reason" }, lines),
  );
}

export function createHeader() {
  const goal = h("div", { class: "dagmagic-goal" });
  // Only the words are a live region: the seconds beside them tick.
  const label = h("span", { class: "dagmagic-status-label", role: "status" });
  const phaseTime = h("span", { class: "dagmagic-phase-time", hidden: true });
  const status = h("span", { class: "dagmagic-status" }, [label, phaseTime]);
  /** @type {Record<(typeof TOTALS)[number], HTMLElement>} */
  const values = {
    tokens: h("span", { class: "dagmagic-total-value" }),
    requests: h("span", { class: "dagmagic-total-value" }),
    cost: h("span", { class: "dagmagic-total-value" }),
    elapsed: h("span", { class: "dagmagic-total-value" }),
  };
  const totals = h(
    "div",
    { class: "dagmagic-totals" },
    TOTALS.map((name) =>
      h("span", { class: `dagmagic-total dagmagic-total-${name}` }, [
        h("span", { class: "dagmagic-label" }, [name]),
        " ",
        values[name],
      ]),
    ),
  );
  const forked = h("div", { class: "dagmagic-forked", hidden: true });
  // Where a run on Temporal's workers runs: it goes on without this kernel.
  const detached = h("div", { class: "dagmagic-forked dagmagic-detached", hidden: true });
  const error = h("div", { class: "dagmagic-error", role: "alert", hidden: true });
  // What the user should know about the whole run (not saved, code without a sandbox, a model that went silent).
  const warnings = h("ul", { class: "dagmagic-run-warnings", "aria-label": "About this run", hidden: true });
  const el = h("header", { class: "dagmagic-header" }, [
    h("div", { class: "dagmagic-title" }, [h("span", { class: "dagmagic-brand" }, ["dagmagic"]), status, goal]),
    forked,
    detached,
    totals,
    error,
    warnings,
  ]);
  let shownWarnings = "";

  /** @param {Traits} state */
  function update(state) {
    setText(goal, state.goal);
    goal.title = state.goal;
    const text = statusText(state);
    setText(label, text.label);
    // the space is part of the text, so the badge reads "planning… 3s"
    setText(phaseTime, text.time ? ` ${text.time}` : "");
    phaseTime.hidden = !text.time;
    status.dataset.status = state.status;
    status.dataset.phase = state.phase;
    status.toggleAttribute("data-stopped", text.stopped);
    const { usage } = state;
    setText(values.tokens, `${formatInt(usage.input_tokens)} in · ${formatInt(usage.output_tokens)} out`);
    const cached = usage.cached_requests;
    setText(values.requests, formatInt(usage.requests) + (cached ? ` (${formatInt(cached)} cached)` : ""));
    const saved = usage.saved_cost === null ? "saving unknown" : `saved ${formatCost(usage.saved_cost)}`;
    setText(values.cost, formatCost(usage.cost) + (cached ? ` (${saved})` : ""));
    setText(values.elapsed, formatDuration(runElapsed(state)));
    setText(forked, state.forked ?? "");
    forked.hidden = !state.forked;
    setText(detached, state.detached ?? "");
    detached.hidden = !state.detached;
    showError(error, state);
    const joined = state.warnings.join("\n");
    if (joined !== shownWarnings) {
      shownWarnings = joined;
      warnings.replaceChildren(...state.warnings.map((w) => h("li", {}, [w])));
      warnings.hidden = state.warnings.length === 0;
    }
  }

  return { el, update };
}
