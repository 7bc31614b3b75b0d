// A round's one-line summary and the analyzer's verdict: for the run's rounds and for a composite step's
// nested rounds alike.

import { h } from "./dom.js";
import { formatPercent } from "./format.js";
import { STATUS_GLYPH } from "./graph.js";
import { expandable } from "./more.js";
import { isLive, tokenCount } from "./state.js";

/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./dom.js").Child} Child */

const SUMMARY_STATUSES = /** @type {const} */ ([
  "completed",
  "running",
  "retrying",
  "paused",
  "failed",
  "skipped",
  "cancelled",
]);

/**
 * How many steps of the round have each status.
 * @param {Round} round
 */
function statusCounts(round) {
  /** @type {Record<string, number>} */
  const counts = {};
  for (const n of round.nodes) counts[n.status] = (counts[n.status] ?? 0) + 1;
  return counts;
}

/**
 * What the glyphs of the round's summary mean, its tooltip: "3 ✓ completed · 1 ⤼ skipped" ("" for none).
 * @param {Round} round
 */
export function roundSummaryTitle(round) {
  const counts = statusCounts(round);
  return SUMMARY_STATUSES.filter((status) => counts[status])
    .map((status) => `${counts[status]} ${STATUS_GLYPH[status]} ${status}`)
    .join(" · ");
}

/**
 * "4 steps · 3 ✓ · 1 ✗ · achieved 85%" (roundSummaryTitle says what its glyphs mean)
 * @param {Round} round
 */
export function roundSummary(round) {
  const counts = statusCounts(round);
  const cut = round.plan_cut;
  const parts = [
    cut
      ? `${round.nodes.length} of ${cut.planned} planned steps`
      : `${round.nodes.length} step${round.nodes.length === 1 ? "" : "s"}`,
  ];
  for (const status of SUMMARY_STATUSES) {
    if (counts[status]) parts.push(`${counts[status]} ${STATUS_GLYPH[status]}`);
  }
  if (round.analysis)
    parts.push(`${round.analysis.achieved ? "achieved" : "not achieved"} ${formatPercent(round.analysis.confidence)}`);
  if (round.decision) parts.push(round.decision.action);
  if (round.decision?.partial) parts.push("partial answer");
  return parts.join(" · ");
}

/**
 * The analyzer's verdict and what the loop decided next (why it replanned, above all).
 * @param {Round} round
 * @param {boolean} judging  the run judges this round now (its phase says so, as the header does)
 * @param {number | null} [tokens]  how much of the verdict has arrived (null: nothing known)
 * @param {boolean} [writing]  the verdict writes the answer already (what the header says too)
 */
export function renderVerdict(round, judging, tokens = null, writing = false) {
  const { analysis, decision } = round;
  if (!analysis && !decision) {
    if (!judging) return null;
    const arrived = tokens ? ` ${tokenCount(tokens)} so far` : "";
    const doing = writing ? "Writing the answer…" : "Judging the round…";
    return h("div", { class: "dagmagic-verdict dagmagic-muted" }, [doing + arrived]);
  }
  return h(
    "div",
    { class: "dagmagic-verdict", "data-achieved": analysis ? String(Boolean(analysis.achieved)) : null },
    [
      analysis &&
        h("div", { class: "dagmagic-verdict-head" }, [
          h("span", { class: "dagmagic-verdict-mark" }, [analysis.achieved ? "✓ achieved" : "✗ not achieved"]),
          h("span", { class: "dagmagic-verdict-confidence" }, [`confidence ${formatPercent(analysis.confidence)}`]),
        ]),
      analysis?.reasoning && h("p", { class: "dagmagic-verdict-reasoning" }, [String(analysis.reasoning)]),
      decision && decisionLine(decision, analysis?.reasoning),
      decision?.partial &&
        h("p", { class: "dagmagic-verdict-partial", role: "note" }, [
          "Partial answer: the run was stopped before it finished, so the answer covers only what completed.",
        ]),
    ],
  );
}

/** What the loop did next, in words. */
const DECISION_LABEL = /** @type {Record<string, string>} */ ({
  synthesize: "Next: the answer",
  replan: "Next: a new plan",
  stop: "Stopped here",
});

/**
 * "Next: a new plan — Step s2 failed", its reason left out when it only repeats the verdict's reasoning.
 * @param {import("./types.js").Decision} decision
 * @param {unknown} reasoning  the verdict's
 */
function decisionLine(decision, reasoning) {
  const reason = decision.reason ? String(decision.reason) : "";
  const repeats = typeof reasoning === "string" && sameText(reason, reasoning);
  return h("p", { class: "dagmagic-decision", "data-action": decision.action }, [
    h("strong", {}, [DECISION_LABEL[decision.action] ?? String(decision.action)]),
    reason && !repeats ? ` — ${reason}` : "",
  ]);
}

/**
 * The same words, whatever the case, spacing or final full stop.
 * @param {string} a
 * @param {string} b
 */
function sameText(a, b) {
  /** @param {string} s */
  const norm = (s) =>
    s
      .trim()
      .replace(/\s+/g, " ")
      .replace(/[.!…]+$/, "")
      .toLowerCase();
  return norm(a) === norm(b);
}

/**
 * What went wrong in a round, and what was fixed on the way (both as text; a long one opens in place).
 * @param {Round} round
 * @param {(key: string) => boolean | undefined} [isOpen]  which long notes the user left open
 * @returns {Child[]}
 */
export function roundNotes(round, isOpen) {
  return [
    round.error &&
      h("div", { class: "dagmagic-round-error", role: "alert" }, [
        expandable(round.error, JSON.stringify(["round-error", round.index]), isOpen),
      ]),
    round.warnings.length
      ? h(
          "ul",
          { class: "dagmagic-round-warnings", "aria-label": "Fixed on the way" },
          round.warnings.map((w, i) => h("li", {}, [expandable(w, JSON.stringify(["note", round.index, i]), isOpen)])),
        )
      : null,
  ];
}
