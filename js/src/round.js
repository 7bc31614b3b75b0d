// One round's section: its title (collapsible), and expanded, the follow-ups it was planned for, what was fixed
// on the way, its DAG, what changed since the round it is compared with, the selected step's detail and the
// verdict. Pure: the same arguments give the same markup (rounds.js decides when a section is drawn again).

import { h } from "./dom.js";
import { EDITED, renderDetail } from "./detail.js";
import { markdownFragment } from "./markdown.js";
import { messageBox } from "./message.js";
import { phaseCall, tokenCount } from "./state.js";
import { renderVerdict, roundNotes, roundSummary, roundSummaryTitle } from "./verdict.js";
import { graphView } from "./zoom.js";

/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./detail.js").DetailActions} DetailActions */

/**
 * "Compare with round N" under a what-if round: whether the request waits for Python, why Python refused it, and
 * the comparison: the compare widget Python opened under this round (`widget`: its label; rounds.js moves its view
 * into the slot), or, where the host cannot draw a widget inside another, the Markdown it sent (written from the
 * runs' texts: rendered sanitized).
 * @typedef {{busy: boolean, error: string | null, markdown: string | null, widget?: string | null}} CompareState
 */

/** @type {CompareState} */
const NO_COMPARE = { busy: false, error: null, markdown: null, widget: null };

/**
 * @param {Round} round
 * @param {Traits} state
 * @param {boolean} expanded
 * @param {string | null} selected
 * @param {boolean} isLatest
 * @param {DetailActions} actions  for the selected step's detail
 * @param {CompareState} [compare]  the round's "Compare with round N"
 */
export function renderRound(round, state, expanded, selected, isLatest, actions, compare = NO_COMPARE) {
  // the latest round of a running run is in the run's phase: what the header says, this says too
  const phase = isLatest && state.status === "running" ? state.phase : null;
  const planning = phase !== null && isPlanning(round, state);
  const call = phase !== null ? phaseCall(state) : null;
  const body = !expanded
    ? null
    : planning
      ? h("div", { class: "dagmagic-round-body" }, [
          h("div", { class: "dagmagic-muted dagmagic-planning" }, [
            [round.index <= 1 ? "Planning the first steps…" : `Planning round ${round.index}…`, arrived(call)]
              .filter(Boolean)
              .join(" "),
          ]),
        ])
      : h("div", { class: "dagmagic-round-body" }, [
          renderFollowUps(round),
          renderPlanCut(round),
          ...roundNotes(round, actions.messageOpen),
          phase === "planning" && planProgress(round, call),
          round.nodes.length
            ? graphView(round, state.now, selected, { zoomKey: JSON.stringify([round.index]) })
            : h("div", { class: "dagmagic-muted" }, ["No steps."]),
          renderDiff(round, state.rounds, compare),
          selectedDetail(round, state, selected, actions),
          renderVerdict(round, phase === "analyzing", call?.tokens ?? null, Boolean(state.answer)),
        ]);
  return h(
    "section",
    { class: "dagmagic-round", "data-round": round.index, "data-expanded": expanded ? "true" : "false" },
    [
      h("button", { type: "button", class: "dagmagic-round-toggle", "aria-expanded": expanded ? "true" : "false" }, [
        h("span", { class: "dagmagic-caret", "aria-hidden": "true" }, [expanded ? "▾" : "▸"]),
        h("span", { class: "dagmagic-round-title" }, [`Round ${round.index}`]),
        round.rerun_of !== null &&
          h("span", { class: "dagmagic-rerun-label", "data-what-if": round.what_if ? "true" : null }, [
            roundOrigin(round),
          ]),
        h("span", { class: "dagmagic-round-summary", title: planning ? null : roundSummaryTitle(round) || null }, [
          planning ? "planning…" : roundSummary(round) + (phase === "planning" ? " · planning…" : ""),
        ]),
      ]),
      body,
    ],
  );
}

/**
 * Where a re-run round came from: "re-run of round 1 (s2)", or for a what-if round "continued from round 1 with s2's
 * result edited by you".
 * @param {Round} round
 */
export function roundOrigin(round) {
  if (round.what_if && round.rerun_step) {
    return `continued from round ${round.rerun_of} with ${round.rerun_step}'s ${EDITED}`;
  }
  return `re-run of round ${round.rerun_of}${round.rerun_step ? ` (${round.rerun_step})` : ""}`;
}

/**
 * What has arrived of the call the phase waits on: its tokens so far, or that the model has not begun.
 * @param {import("./types.js").LiveCall | null} call
 */
function arrived(call) {
  if (!call) return "";
  if (!call.stream) return "waiting for the model's whole reply";
  return call.tokens ? `${tokenCount(call.tokens)} so far` : "waiting for the model's first token";
}

/**
 * A plan still being written while its first steps run: how far it has come.
 * @param {Round} round
 * @param {import("./types.js").LiveCall | null} call
 */
function planProgress(round, call) {
  const steps = `${round.nodes.length} step${round.nodes.length === 1 ? "" : "s"} so far`;
  const tokens = call && call.tokens ? ` · ${tokenCount(call.tokens)}` : "";
  return h("div", { class: "dagmagic-muted dagmagic-plan-progress", role: "status" }, [
    `Writing the plan: ${steps}${tokens}`,
  ]);
}

/**
 * A plan cut to plan_max_steps: said where the round is read, with the dropped steps and the setting that
 * allows more.
 * @param {Round} round
 */
function renderPlanCut(round) {
  const cut = round.plan_cut;
  if (!cut) return null;
  return h("div", { class: "dagmagic-plan-cut", role: "note" }, [
    h("strong", {}, [`The plan had ${cut.planned} steps: only the first ${cut.kept} ran.`]),
    " To allow more: ",
    h("code", {}, [`%dag config plan_max_steps=${cut.planned}`]),
    cut.dropped.length
      ? h("details", { class: "dagmagic-plan-cut-dropped" }, [
          h("summary", {}, [`${cut.dropped.length} dropped step${cut.dropped.length === 1 ? "" : "s"}`]),
          h(
            "ol",
            { start: cut.kept + 1 },
            cut.dropped.map((task) => h("li", {}, [task])),
          ),
        ])
      : null,
  ]);
}

/**
 * The run's latest round waits for its plan: it has no steps yet (nor a verdict or an error) and the run plans.
 * @param {Round} round
 * @param {Traits} state
 */
function isPlanning(round, state) {
  return (
    state.status === "running" &&
    (state.phase === "planning" || state.phase === "starting") &&
    !round.nodes.length &&
    !round.analysis &&
    !round.decision &&
    !round.error
  );
}

/**
 * @param {Round} round
 * @param {Traits} state
 * @param {string | null} selected
 * @param {DetailActions} actions
 */
function selectedDetail(round, state, selected, actions) {
  const node = selected === null ? undefined : round.nodes.find((n) => n.id === selected);
  return node ? renderDetail(node, round, state.rounds, state.now, actions) : null;
}

/**
 * A re-run round: which steps differ from the round it re-ran ("s2 changed: task, result", "s5 added"); a
 * what-if round offers to compare it with that round side by side.
 * @param {Round} round
 * @param {Round[]} rounds  to make each step clickable where it exists
 * @param {CompareState} compare
 */
function renderDiff(round, rounds, compare) {
  const before = round.rerun_of ?? round.diff_base ?? null;
  if (before === null || round.diff === null) return null;
  const items = round.diff.map((entry) => {
    const where = entry.round ?? (entry.change === "removed" || entry.change === "reused" ? before : round.index);
    const exists = rounds.some((r) => r.index === where && r.nodes.some((n) => n.id === entry.id));
    // a reused result is named as the round names it, r1.s3; a renumbered step by both its ids
    const name = entry.change === "reused" ? `r${where}.${entry.id}` : entry.id;
    const was = entry.was ? ` (was ${entry.was})` : "";
    const what =
      entry.change === "changed" && entry.fields.length ? ` changed: ${entry.fields.join(", ")}` : ` ${entry.change}`;
    const yours = round.what_if && entry.id === round.rerun_step && where === round.index ? " (edited by you)" : "";
    return h("li", { "data-step-id": entry.id, "data-change": entry.change }, [
      exists
        ? h(
            "button",
            {
              type: "button",
              class: "dagmagic-dep",
              "data-goto-round": where,
              "data-goto-step": entry.id,
              title: where === round.index ? `Show step ${entry.id}` : `Show step ${entry.id} of round ${where}`,
            },
            [name],
          )
        : name,
      was,
      what,
      yours,
    ]);
  });
  const offer =
    round.what_if && round.rerun_of !== null && rounds.some((r) => r.index === round.rerun_of)
      ? h(
          "button",
          {
            type: "button",
            class: "dagmagic-button dagmagic-compare-rounds",
            "data-a": round.rerun_of,
            "data-b": round.index,
            title: `Show round ${round.rerun_of} and round ${round.index} side by side: plans, results, verdicts, answers`,
            "aria-busy": compare.busy ? "true" : null,
            disabled: compare.busy,
          },
          [`Compare with round ${round.rerun_of}`],
        )
      : null;
  return h("div", { class: "dagmagic-diff-wrap" }, [
    h("div", { class: "dagmagic-diff-head" }, [
      h("span", { class: "dagmagic-label" }, [`Compared with round ${before}`]),
      offer,
    ]),
    h(
      "ul",
      { class: "dagmagic-diff", "aria-label": `What changed since round ${before}` },
      items.length ? items : [h("li", { class: "dagmagic-muted" }, ["No step changed"])],
    ),
    compare.error && messageBox(compare.error, { "data-dismiss": "compare" }),
    compare.widget &&
      h("section", { class: "dagmagic-comparison dagmagic-comparison--widget", "aria-label": "Comparison" }, [
        h("div", { class: "dagmagic-comparison-head" }, [
          h("span", { class: "dagmagic-label" }, [`Comparing ${compare.widget}`]),
          h("button", { type: "button", class: "dagmagic-button dagmagic-comparison-close" }, ["Close comparison"]),
        ]),
        h("div", { class: "dagmagic-comparison-slot" }),
      ]),
    offer &&
      !compare.widget &&
      compare.markdown &&
      h("details", { class: "dagmagic-comparison", open: true }, [
        h("summary", {}, [`Round ${round.rerun_of} beside round ${round.index}`]),
        h("div", { class: "dagmagic-markdown" }, [markdownFragment(compare.markdown)]),
      ]),
  ]);
}

/**
 * The follow-ups that shaped a round: those its plan was made for, and those that came while it ran and that its
 * verdict and answer took into account (no new round followed).
 * @param {Round} round
 */
function renderFollowUps(round) {
  const planned = round.follow_ups ?? [];
  const answered = round.answered_follow_ups ?? [];
  if (!planned.length && !answered.length) return null;
  /** @param {string} how  @param {string} text  @param {string} kind */
  const item = (how, text, kind) =>
    h("li", { class: "dagmagic-round-followup", "data-kind": kind }, [h("b", {}, [how]), text]);
  return h("ul", { class: "dagmagic-round-followups", "aria-label": "Your follow-ups in this round" }, [
    ...planned.map((text) => item("Follow-up: ", text, "planned")),
    ...answered.map((text) =>
      item("Follow-up, taken into account by this round's verdict and answer: ", text, "answered"),
    ),
  ]);
}
