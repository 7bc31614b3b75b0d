// The rounds: one section each (the latest expanded, earlier ones collapsible) holding the DAG, the step detail
// and the verdict (round.js draws one). A section is rebuilt only when its round, what the user opened in it
// (selection.js), a request sent from it (step-actions.js) or, while steps run, the clock changed, so earlier
// rounds keep their DOM. This module routes the user's clicks, keys and typing to those.

import { h } from "./dom.js";
import { keepFocus } from "./focus.js";
import { renderRound } from "./round.js";
import { createSelection } from "./selection.js";
import { isLive, phaseCall } from "./state.js";
import { ACTION_BOXES, ACTIONS, createStepActions } from "./step-actions.js";
import { createZoom } from "./zoom.js";

/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./detail.js").DetailActions} DetailActions */

/** A step's nested run, in its detail: what happens inside is no click, key or focus of the run's own steps. */
const SUBRUN = ".dagmagic-subrun";
/** The compare widget's view under a round: its clicks and keys are its own too. */
const COMPARISON_VIEW = ".dagmagic-comparison-view";

/**
 * anywidget's host (0.11 and later): draws another widget's view where this one says.
 * @typedef {{getWidget: (ref: string) => Promise<{render: (props: {el: HTMLElement, signal?: AbortSignal}) => Promise<void>}>}} Host
 */

/** The buttons of a step's actions that send its (perhaps edited) task: they need one. */
const TASK_ACTIONS = ".dagmagic-rerun, .dagmagic-whatif, .dagmagic-continue, .dagmagic-step";

/**
 * @param {object} options
 * @param {AbortSignal} options.signal
 * @param {() => void} options.redraw
 * @param {import("./requests.js").Requests} options.requests
 * @param {import("./shared.js").RunMemory} options.memory  shared with the widget's other views
 * @param {Host} [options.host]  draws the compare widget of two rounds; without one, the comparison shows as
 *   Markdown
 */
export function createRounds({ signal, redraw, requests, memory, host }) {
  const el = h("div", { class: "dagmagic-rounds" });
  /** @type {Map<number, {sig: string, el: HTMLElement}>} */
  const cache = new Map();
  const zoom = createZoom(el, signal); // zoom buttons and drag-to-pan; a drag's click selects no step
  const selection = createSelection(memory);
  /** @type {Traits | null} */
  let last = null;

  /** @param {number} round */
  const redrawRound = (round) => {
    cache.delete(round);
    redraw();
  };
  signal.addEventListener("abort", memory.subscribe(redrawRound));
  const steps = createStepActions({ requests, memory, state: () => last, redrawRound });
  /** @type {Map<number, {error: string | null, markdown: string | null}>} by round: its "Compare with round N" */
  const comparisons = new Map();
  /** Whether the host draws a widget inside this one: the comparison is then the compare widget Python opened. */
  const composes = typeof host?.getWidget === "function";
  // The compare widget's view: drawn once per widget reference, then moved into its round's section each time
  // that section is drawn again (the view keeps its state: the case chosen, what is open).
  const comparisonView = h("div", { class: "dagmagic-comparison-view" });
  /** @type {string | null} */
  let comparisonRef = null;
  /** @type {AbortController | null} */
  let comparisonDrawing = null;
  signal.addEventListener("abort", () => comparisonDrawing?.abort());

  /**
   * Draws the compare widget `ref` names (through the host) in the comparison's place; null: none.
   * @param {string | null} ref
   */
  function drawComparison(ref) {
    if (ref === comparisonRef) return;
    comparisonRef = ref;
    comparisonDrawing?.abort();
    comparisonDrawing = null;
    comparisonView.replaceChildren();
    if (ref === null || !host) return;
    const drawing = new AbortController();
    comparisonDrawing = drawing;
    host
      .getWidget(ref)
      .then((child) =>
        drawing.signal.aborted ? undefined : child.render({ el: comparisonView, signal: drawing.signal }),
      )
      .catch((/** @type {unknown} */ err) => {
        if (drawing.signal.aborted) return;
        comparisonView.textContent = `Could not draw the comparison: ${err instanceof Error ? err.message : String(err)}`;
      });
  }

  /**
   * "Compare with round N": asks Python for the comparison of the two rounds; it shows under the button.
   * @param {number} round
   * @param {HTMLButtonElement} button
   */
  function compareRounds(round, button) {
    if (button.disabled) return;
    const a = Number(button.getAttribute("data-a"));
    const b = Number(button.getAttribute("data-b"));
    comparisons.delete(round);
    requests
      .request("compare_rounds", { a, b }, { key: `compare:${round}` })
      .then(
        (/** @type {any} */ value) =>
          // with a host, the compare widget comes as the `comparison` trait: the Markdown is for those without
          comparisons.set(round, { error: null, markdown: composes ? null : String(value?.markdown ?? "") || null }),
        (/** @type {Error} */ error) => comparisons.set(round, { error: error.message, markdown: null }),
      )
      .finally(() => redrawRound(round));
    button.disabled = true;
    redrawRound(round);
  }

  /**
   * "Close comparison": asks Python to close the compare widget (the trait then says none).
   * @param {number} round
   */
  function closeComparison(round) {
    requests
      .request("close_comparison", {}, { key: `compare:${round}` })
      .catch((/** @type {Error} */ error) => comparisons.set(round, { error: error.message, markdown: null }))
      .finally(() => redrawRound(round));
  }

  /**
   * A step's action; a re-run's round, once it comes, shows the step (selection.js), unless Python refuses it.
   * @param {number} round
   * @param {HTMLButtonElement} button
   */
  function act(round, button) {
    const sent = steps.act(round, button);
    if (!sent?.rerun) return;
    selection.expectRerun(round, sent.step);
    void sent.taken.then((taken) => taken || selection.cancelRerun());
  }

  /** @type {Array<[string, (target: Element, round: number) => void]>} what a click on each kind of element does */
  const clicks = [
    [".dagmagic-round-toggle", (_, round) => selection.toggleRound(round)],
    [".dagmagic-copy", (target, round) => steps.copy(round, /** @type {HTMLButtonElement} */ (target))],
    [".dagmagic-expand", (target, round) => steps.askWhole(round, /** @type {HTMLButtonElement} */ (target))],
    [".dagmagic-retry-now", (target, round) => steps.retryNow(round, /** @type {HTMLButtonElement} */ (target))],
    [ACTIONS, (target, round) => act(round, /** @type {HTMLButtonElement} */ (target))],
    [".dagmagic-detail .dagmagic-message-close", (target, round) => steps.dismiss(round, target)],
    [".dagmagic-compare-rounds", (target, round) => compareRounds(round, /** @type {HTMLButtonElement} */ (target))],
    [".dagmagic-diff-wrap .dagmagic-message-close", (_, round) => comparisons.delete(round)],
    [".dagmagic-comparison-close", (_, round) => closeComparison(round)],
    [".dagmagic-detail-close", () => selection.closeDetail()],
    [
      "[data-goto-step]",
      (target) =>
        selection.goTo(Number(target.getAttribute("data-goto-round")), String(target.getAttribute("data-goto-step"))),
    ],
    [".dagmagic-node", (target, round) => selection.toggleStep(round, String(target.getAttribute("data-step-id")))],
  ];

  el.addEventListener(
    "click",
    (event) => {
      const target = /** @type {Element} */ (event.target);
      const section = target.closest?.(".dagmagic-round");
      if (!section || target.closest(SUBRUN) || target.closest(COMPARISON_VIEW)) return; // theirs, not ours
      const round = Number(section.getAttribute("data-round"));
      for (const [selector, action] of clicks) {
        const hit = target.closest(selector);
        if (!hit) continue;
        action(hit, round);
        redraw();
        return;
      }
    },
    { signal },
  );
  el.addEventListener(
    "keydown",
    (event) => {
      const target = /** @type {Element} */ (event.target);
      const node = target.closest?.(".dagmagic-node");
      if (
        !node ||
        node.closest(SUBRUN) ||
        node.closest(COMPARISON_VIEW) ||
        (event.key !== "Enter" && event.key !== " ")
      )
        return;
      event.preventDefault();
      event.stopPropagation(); // keep the notebook from running the cell on Enter
      const section = node.closest(".dagmagic-round");
      selection.toggleStep(Number(section?.getAttribute("data-round")), String(node.getAttribute("data-step-id")));
      redraw();
    },
    { signal },
  );
  // A task typed in a step's detail is kept (redraws rebuild the detail while other steps run), and a task
  // cleared to nothing cannot be sent.
  el.addEventListener(
    "input",
    (event) => {
      const target = event.target;
      if (!(target instanceof HTMLTextAreaElement)) return;
      const key = target.getAttribute("data-draft");
      if (!key) return;
      selection.drafts.set(key, target.value);
      const step = String(target.closest(".dagmagic-detail")?.getAttribute("data-step-id"));
      const round = Number(target.closest(".dagmagic-round")?.getAttribute("data-round"));
      const busy = steps.status(round, step).busy;
      const box = target.closest(ACTION_BOXES);
      for (const b of box?.querySelectorAll(TASK_ACTIONS) ?? []) {
        /** @type {HTMLButtonElement} */ (b).disabled = busy || !target.value.trim();
      }
    },
    { signal },
  );
  // Which of a paused step's messages, and which sub-runs, are open (toggle does not bubble: listen as it goes
  // down).
  el.addEventListener(
    "toggle",
    (event) => {
      const target = event.target;
      if (!(target instanceof HTMLDetailsElement)) return;
      const key = target.getAttribute("data-open-key");
      if (key) selection.open.set(key, target.open);
      const subrun = target.getAttribute("data-subrun-key");
      if (subrun) selection.subruns.set(subrun, target.open);
    },
    { signal, capture: true },
  );

  /**
   * One round's section, from the cache when nothing it shows changed.
   * @param {import("./types.js").Round} round
   * @param {Traits} state
   */
  function section(round, state) {
    const current = selection.shown();
    const expanded = selection.isExpanded(round.index);
    const selected = current?.round === round.index ? current.step : null;
    const live = expanded && round.nodes.some(isLive);
    const isLatest = round.index === selection.latest();
    const sent = selected === null ? null : steps.status(round.index, selected);
    const compared = comparisons.get(round.index);
    const shows = composes && state.comparison && state.comparison_round === round.index;
    const compare = {
      busy: requests.busy(`compare:${round.index}`),
      error: compared?.error ?? null,
      markdown: compared?.markdown ?? null,
      widget: shows ? state.comparison_label || `round ${round.rerun_of} vs round ${round.index}` : null,
    };
    // Everything the section shows: the round, its view state, the clock while steps run, and for the latest
    // round the run status (it decides whether a missing verdict is still coming), its phase (planning) and
    // whether it can re-run; the selected step's requests. (Whole texts fetched and asked for redraw their round.)
    const sig = JSON.stringify([
      round,
      expanded,
      selected,
      live ? state.now : 0,
      isLatest && state.status,
      isLatest && state.phase,
      isLatest && phaseCall(state)?.tokens,
      isLatest && state.can_rerun,
      sent && [sent.busy, sent.retrying, sent.error],
      compare,
    ]);
    const cached = cache.get(round.index);
    if (cached && cached.sig === sig) return cached.el;
    /** @type {DetailActions} */
    const actions = {
      rerun: isLatest && state.can_rerun,
      busy: Boolean(sent?.busy),
      retrying: Boolean(sent?.retrying),
      error: sent?.error ?? null,
      draft: (key) => selection.drafts.get(key),
      messageOpen: (key) => selection.open.get(key),
      subrunOpen: (key) => selection.subruns.get(key),
      fullText: (key, cut) => memory.wholeText(key, cut),
      loading: (key) => Boolean(sent?.loading(key)),
      textError: (key) => sent?.textError(key),
    };
    const drawn = renderRound(round, state, expanded, selected, isLatest, actions, compare);
    cache.set(round.index, { sig, el: drawn });
    return drawn;
  }

  /**
   * @param {Traits} state
   */
  function update(state) {
    // a sub-run opened or closed since the last redraw, whose toggle event may not have come yet
    for (const details of el.querySelectorAll("details[data-subrun-key]")) {
      selection.subruns.set(
        String(details.getAttribute("data-subrun-key")),
        /** @type {HTMLDetailsElement} */ (details).open,
      );
    }
    last = state;
    selection.sync(state);
    steps.prune(state);
    const restoreFocus = keepFocus(el);
    const sections = state.rounds.map((round) => section(round, state));
    for (const index of [...cache.keys()]) {
      if (!state.rounds.some((r) => r.index === index)) cache.delete(index);
    }
    for (const index of [...comparisons.keys()]) {
      if (!state.rounds.some((r) => r.index === index)) comparisons.delete(index);
    }
    if (sections.length !== el.children.length || sections.some((s, i) => el.children[i] !== s)) {
      el.replaceChildren(...sections);
    }
    drawComparison(composes ? (state.comparison ?? null) : null);
    const slot = sections
      .find((s) => s.getAttribute("data-round") === String(state.comparison_round))
      ?.querySelector(".dagmagic-comparison-slot");
    if (slot && comparisonView.parentElement !== slot) slot.append(comparisonView);
    if (!state.rounds.length) {
      const text =
        state.status !== "running"
          ? "No plan."
          : state.phase === "planning"
            ? `Planning the first steps…${phaseCall(state)?.tokens ? ` ${phaseCall(state)?.tokens} tokens so far` : ""}`
            : "Planning…";
      el.replaceChildren(h("div", { class: "dagmagic-muted dagmagic-planning" }, [text]));
    }
    zoom.apply(); // graphs drawn anew: zoomed and panned as the user left them
    restoreFocus();
    const followed = selection.takeScroll(); // a re-run's new round, with the step's new run open
    if (followed !== null) {
      const section = [...el.children].find((c) => c.getAttribute("data-round") === String(followed));
      section?.scrollIntoView?.({ block: "nearest", behavior: "smooth" });
    }
  }

  return { el, update };
}
