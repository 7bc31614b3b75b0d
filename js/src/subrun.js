// A composite step's nested run, in its detail panel: a collapsible section with each nested round's DAG
// (drawn by graph.js; its steps are not selectable), its verdict, and the sub-run's answer and error as text.
// A nested step that is composite again gets its own section below its round.

import { h } from "./dom.js";
import { isLive } from "./state.js";
import { renderVerdict, roundNotes, roundSummary, roundSummaryTitle } from "./verdict.js";
import { graphView } from "./zoom.js";

/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").SubRun} SubRun */

/**
 * The key of a sub-run's `<details>` (whether it is open), which carries it as `data-subrun-key`: the path of
 * rounds and steps that leads to it, [round, step] for a step of the run, then [.., round, step] per level.
 * @param {Array<number | string>} path
 */
export function subrunKey(path) {
  return JSON.stringify(path);
}

/**
 * The keys of every sub-run in these rounds, nested ones too.
 * @param {Round[]} rounds
 * @param {Array<number | string>} [path]
 * @param {Set<string>} [keys]
 * @returns {Set<string>}
 */
export function subrunKeys(rounds, path = [], keys = new Set()) {
  for (const round of rounds) {
    for (const node of round.nodes) {
      if (!node.subrun) continue;
      const at = [...path, round.index, node.id];
      keys.add(subrunKey(at));
      subrunKeys(node.subrun.rounds, at, keys);
    }
  }
  return keys;
}

/**
 * "Sub-DAG · 3 steps · done": the steps of its latest round (and which round, past the first), its status.
 * @param {SubRun} subrun
 * @param {string} label
 */
function summaryText(subrun, label) {
  const last = subrun.rounds[subrun.rounds.length - 1];
  const parts = [label];
  if (!last) parts.push(subrun.status === "running" ? "planning" : "no plan");
  else {
    parts.push(`${last.nodes.length} step${last.nodes.length === 1 ? "" : "s"}`);
    if (subrun.rounds.length > 1) parts.push(`round ${last.index}`);
  }
  return `${parts.join(" · ")} · `;
}

/**
 * A sub-run, collapsed unless the user opened it.
 * @param {SubRun} subrun
 * @param {Array<number | string>} path  see `subrunKey`
 * @param {number} now
 * @param {(key: string) => boolean | undefined} isOpen  whether the user left it open
 * @param {string} [label]
 * @returns {HTMLDetailsElement}
 */
export function renderSubrun(subrun, path, now, isOpen, label = "Sub-DAG") {
  const key = subrunKey(path);
  const running = subrun.status === "running";
  const last = subrun.rounds.length - 1;
  return h(
    "details",
    { class: "dagmagic-subrun", "data-subrun-key": key, "data-status": subrun.status, open: isOpen(key) ?? false },
    [
      h("summary", {}, [
        summaryText(subrun, label),
        h("span", { class: "dagmagic-subrun-status", "data-status": subrun.status }, [subrun.status]),
      ]),
      ...subrun.rounds.map((round, i) => renderSubrunRound(round, path, now, isOpen, running && i === last)),
      !subrun.rounds.length && h("div", { class: "dagmagic-muted" }, [running ? "Planning…" : "No plan."]),
      subrun.error && h("pre", { class: "dagmagic-subrun-error" }, [subrun.error]),
      subrun.answer
        ? h("div", { class: "dagmagic-subrun-answer-wrap" }, [
            h("h4", {}, ["Answer"]),
            h("div", { class: "dagmagic-subrun-answer" }, [subrun.answer]),
          ])
        : running && h("div", { class: "dagmagic-muted" }, ["No answer yet."]),
    ],
  );
}

/**
 * One nested round: its DAG, what was fixed on the way, its verdict, and the sub-runs of its composite steps.
 * @param {Round} round
 * @param {Array<number | string>} path  the sub-run's
 * @param {number} now
 * @param {(key: string) => boolean | undefined} isOpen
 * @param {boolean} pending  the latest round of a running sub-run: a verdict may still come
 */
function renderSubrunRound(round, path, now, isOpen, pending) {
  return h("section", { class: "dagmagic-subrun-round", "data-round": round.index }, [
    h("div", { class: "dagmagic-subrun-round-head" }, [
      h("span", { class: "dagmagic-subrun-round-title" }, [`Round ${round.index}`]),
      h("span", { class: "dagmagic-round-summary", title: roundSummaryTitle(round) || null }, [roundSummary(round)]),
    ]),
    ...roundNotes(round),
    round.nodes.length
      ? graphView(round, now, null, { interactive: false, zoomKey: subrunKey([...path, round.index]) })
      : h("div", { class: "dagmagic-muted" }, ["No steps."]),
    // a sub-run's phase is not synced: it judges once none of its steps is left to run
    renderVerdict(
      round,
      pending && !round.nodes.some((n) => isLive(n) || n.status === "pending" || n.status === "paused"),
    ),
    ...round.nodes.map(
      (node) =>
        node.subrun && renderSubrun(node.subrun, [...path, round.index, node.id], now, isOpen, `Sub-DAG of ${node.id}`),
    ),
  ]);
}
