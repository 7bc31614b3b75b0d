// One round's section: its title (collapsible), and expanded, the follow-ups it was planned for, what was fixed
// on the way, its DAG, what changed since the round it is compared with, the selected step's detail and the
// verdict. Pure: the same arguments give the same markup (rounds.js decides when a section is drawn again).

import { h } from "./dom.js";
import { renderDetail } from "./detail.js";
import { renderVerdict, roundNotes, roundSummary } from "./verdict.js";
import { graphView } from "./zoom.js";

/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./detail.js").DetailActions} DetailActions */

/**
 * @param {Round} round
 * @param {Traits} state
 * @param {boolean} expanded
 * @param {string | null} selected
 * @param {boolean} isLatest
 * @param {DetailActions} actions  for the selected step's detail
 */
export function renderRound(round, state, expanded, selected, isLatest, actions) {
  const planning = isLatest && isPlanning(round, state);
  const body = !expanded
    ? null
    : planning
      ? h("div", { class: "dagmagic-round-body" }, [
          h("div", { class: "dagmagic-muted dagmagic-planning" }, [
            round.index <= 1 ? "Planning the first steps…" : `Planning round ${round.index}…`,
          ]),
        ])
      : h("div", { class: "dagmagic-round-body" }, [
          renderFollowUps(round),
          ...roundNotes(round, actions.messageOpen),
          round.nodes.length
            ? graphView(round, state.now, selected, { zoomKey: JSON.stringify([round.index]) })
            : h("div", { class: "dagmagic-muted" }, ["No steps."]),
          renderDiff(round, state.rounds),
          selectedDetail(round, state, selected, actions),
          renderVerdict(round, isLatest && state.status === "running"),
        ]);
  return h(
    "section",
    { class: "dagmagic-round", "data-round": round.index, "data-expanded": expanded ? "true" : "false" },
    [
      h("button", { type: "button", class: "dagmagic-round-toggle", "aria-expanded": expanded ? "true" : "false" }, [
        h("span", { class: "dagmagic-caret", "aria-hidden": "true" }, [expanded ? "▾" : "▸"]),
        h("span", { class: "dagmagic-round-title" }, [`Round ${round.index}`]),
        round.rerun_of !== null &&
          h("span", { class: "dagmagic-rerun-label" }, [
            `re-run of round ${round.rerun_of}${round.rerun_step ? ` (${round.rerun_step})` : ""}`,
          ]),
        h("span", { class: "dagmagic-round-summary" }, [planning ? "planning…" : roundSummary(round)]),
      ]),
      body,
    ],
  );
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
 * A re-run round: which steps differ from the round it re-ran ("s2 changed: task, result", "s5 added").
 * @param {Round} round
 * @param {Round[]} rounds  to make each step clickable where it exists
 */
function renderDiff(round, rounds) {
  const before = round.rerun_of ?? round.diff_base ?? null;
  if (before === null || round.diff === null) return null;
  const items = round.diff.map((entry) => {
    const where = entry.change === "removed" ? before : round.index;
    const exists = rounds.some((r) => r.index === where && r.nodes.some((n) => n.id === entry.id));
    const what =
      entry.change === "changed" && entry.fields.length ? ` changed: ${entry.fields.join(", ")}` : ` ${entry.change}`;
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
            [entry.id],
          )
        : entry.id,
      what,
    ]);
  });
  return h("div", { class: "dagmagic-diff-wrap" }, [
    h("div", { class: "dagmagic-label" }, [`Compared with round ${before}`]),
    h(
      "ul",
      { class: "dagmagic-diff", "aria-label": `What changed since round ${before}` },
      items.length ? items : [h("li", { class: "dagmagic-muted" }, ["No step changed"])],
    ),
  ]);
}

/**
 * The follow-ups a round was planned for: what the user asked that made this round.
 * @param {Round} round
 */
function renderFollowUps(round) {
  const texts = round.follow_ups ?? [];
  if (!texts.length) return null;
  return h(
    "ul",
    { class: "dagmagic-round-followups", "aria-label": "Planned for your follow-up" },
    texts.map((text) => h("li", { class: "dagmagic-round-followup" }, [h("b", {}, ["Follow-up: "]), text])),
  );
}
