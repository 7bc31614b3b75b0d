// What the user opened in the rounds, kept across redraws: the step whose detail shows (their choice, else a
// paused step opened for them until they close it), which rounds are expanded, the tasks they typed and did not
// send, which of a paused step's messages and which sub-runs they opened. The step and the rounds are remembered
// for the widget's other views (shared.js): a newer view of the run opens with them. A step the user re-runs is
// followed into the round that re-runs it: its detail shows there, the round it came from folds, and the new
// round is to be scrolled into view (once).

import { draftKey } from "./detail.js";
import { subrunKeys } from "./subrun.js";

/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./shared.js").StepRef} StepRef */

/**
 * @param {number} round
 * @param {string} step
 */
export const stepKey = (round, step) => JSON.stringify([round, step]);

/**
 * @param {import("./shared.js").RunMemory} memory
 */
export function createSelection(memory) {
  /** @type {StepRef | null} the step the user opened */
  let selected = null;
  /** @type {StepRef | null} a paused step, opened for the user when nothing else is */
  let auto = null;
  /** paused steps (by `stepKey`) whose detail the user closed: not opened again */
  const dismissed = new Set();
  /** @type {Map<number, boolean>} explicit choices; otherwise only the latest round is open */
  let expanded = new Map();
  /** @type {Map<string, string>} tasks typed and not sent yet, by `draftKey` */
  const drafts = new Map();
  /** @type {Map<string, boolean>} which of a paused step's messages the user opened or closed */
  const open = new Map();
  /** @type {Map<string, boolean>} which composite steps' sub-runs the user opened or closed, by `subrunKey` */
  const subruns = new Map();
  let latest = -1;
  let synced = false;
  /** @type {StepRef | null} a step whose re-run the user asked for: followed into the round that re-runs it */
  let rerunning = null;
  /** @type {number | null} a round to scroll into view, once */
  let scrollTo = null;
  /** whether the user opened or closed something here (then another view's choices are not taken over) */
  let touched = false;

  /** The user opened or closed something: the widget's other views open with it. */
  function changed() {
    touched = true;
    memory.remember(selected, expanded);
  }

  /** @param {number} index */
  const isExpanded = (index) => expanded.get(index) ?? index === latest;

  /** The step whose detail shows: the user's choice, else a paused step. */
  const shown = () => selected ?? auto;

  /** Closes the detail; a paused step opened for the user stays closed. */
  function closeDetail() {
    if (!selected && auto) dismissed.add(stepKey(auto.round, auto.step));
    selected = null;
    changed();
  }

  /**
   * Opens the detail of a step (its round too), or closes it when it shows.
   * @param {number} round
   * @param {string} step
   */
  function toggleStep(round, step) {
    const current = shown();
    if (current && current.round === round && current.step === step) return closeDetail();
    goTo(round, step);
  }

  /**
   * @param {number} round
   * @param {string} step
   */
  function goTo(round, step) {
    selected = { round, step };
    expanded.set(round, true);
    changed();
  }

  /**
   * The user asked to re-run a step: the next round that re-runs it gets its detail.
   * @param {number} round
   * @param {string} step
   */
  function expectRerun(round, step) {
    rerunning = { round, step };
  }

  /** Python refused the re-run: nothing to follow. */
  function cancelRerun() {
    rerunning = null;
  }

  /** The round to scroll into view, once (null when none). */
  function takeScroll() {
    const round = scrollTo;
    scrollTo = null;
    return round;
  }

  /** @param {number} round */
  function toggleRound(round) {
    expanded.set(round, !isExpanded(round));
    changed();
  }

  /**
   * A new state: the run it shows, the latest round, what no longer applies forgotten, the paused step to open.
   * @param {Traits} state
   */
  function sync(state) {
    memory.follow(state.run_id);
    const recalled = synced || touched ? null : memory.recall();
    if (recalled) ({ selected, expanded } = recalled);
    synced = true;
    latest = state.rounds.length ? state.rounds[state.rounds.length - 1].index : -1;
    followRerun(state);
    prune(state);
    auto = selected ? null : pausedStep(state, dismissed);
  }

  /**
   * The round re-running the step the user asked for arrived: its run of the step shows, the round it came from
   * folds (the user's own choice for it is dropped), and the new round is to be scrolled to.
   * @param {Traits} state
   */
  function followRerun(state) {
    const asked = rerunning;
    if (!asked) return;
    const round = state.rounds.find(
      (r) => r.index > asked.round && r.rerun_of === asked.round && r.rerun_step === asked.step,
    );
    if (!round) return;
    rerunning = null;
    expanded.delete(asked.round);
    goTo(round.index, asked.step);
    scrollTo = round.index;
  }

  /**
   * Forgets drafts and open messages of steps no longer paused (or re-runnable), and sub-runs gone (long notes
   * opened in place are kept).
   * @param {Traits} state
   */
  function prune(state) {
    /** @type {Set<string>} */
    const paused = new Set();
    /** @type {Set<string>} */
    const kept = new Set();
    state.rounds.forEach((round, i) => {
      const rerunnable = state.can_rerun && i === state.rounds.length - 1;
      for (const node of round.nodes) {
        if (node.status === "paused") {
          paused.add(stepKey(round.index, node.id));
          kept.add(draftKey("paused", round.index, node.id));
        }
        if (rerunnable) kept.add(draftKey("rerun", round.index, node.id));
        if (rerunnable && node.status === "completed") kept.add(draftKey("whatif", round.index, node.id));
      }
    });
    for (const key of drafts.keys()) if (!kept.has(key)) drafts.delete(key);
    for (const key of dismissed) if (!paused.has(key)) dismissed.delete(key);
    for (const key of open.keys()) {
      const [round, step] = JSON.parse(key);
      if (typeof round === "string") continue; // a long note opened in place (more.js): it stays as the user left it
      if (!paused.has(stepKey(round, step))) open.delete(key);
    }
    const present = subrunKeys(state.rounds);
    for (const key of subruns.keys()) if (!present.has(key)) subruns.delete(key);
  }

  return {
    drafts,
    open,
    subruns,
    latest: () => latest,
    isExpanded,
    shown,
    closeDetail,
    toggleStep,
    goTo,
    toggleRound,
    expectRerun,
    cancelRerun,
    takeScroll,
    sync,
  };
}

/**
 * The first paused step (of the latest round first) whose detail the user did not close.
 * @param {Traits} state
 * @param {Set<string>} dismissed
 * @returns {StepRef | null}
 */
function pausedStep(state, dismissed) {
  for (const round of [...state.rounds].reverse()) {
    const node = round.nodes.find((n) => n.status === "paused" && !dismissed.has(stepKey(round.index, n.id)));
    if (node) return { round: round.index, step: node.id };
  }
  return null;
}
