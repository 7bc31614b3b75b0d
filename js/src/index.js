// The dagmagic widget's front end (anywidget). Python owns the state; this draws it and sends back the
// user's Stop, Cancel and follow-up, and their word on a plan, a paused step or a step to re-run, each as a
// request Python answers (requests.js). Redraws are coalesced into one per animation frame. While the run runs,
// a timer redraws the parts that show time (the display clock carries Python's last `now` forward, see clock.js).
//
// The default export is a function: anywidget calls it once per widget model, so what the model's views share
// (shared.js: which view shows, what the user opened, the whole texts fetched) lives in its closure, made by
// `initialize` — never in this module, whose state every widget on the page would share.

import { createAnswer } from "./answer.js";
import { createApproval } from "./approval.js";
import { clockRuns, createClock, TICK_MS } from "./clock.js";
import { createControls } from "./controls.js";
import { h, log } from "./dom.js";
import { createHeader } from "./header.js";
import { createRequests } from "./requests.js";
import { createRounds } from "./rounds.js";
import { createShared } from "./shared.js";
import { readNow, readState, TRAITS } from "./state.js";
import { createTimeline } from "./timeline.js";
import { createTrace } from "./trace.js";

/** @typedef {import("./types.js").Model} Model */
/** @typedef {import("./shared.js").Shared} Shared */
/** @typedef {"header" | "approval" | "rounds" | "answer" | "controls" | "timeline" | "trace"} Part */

/** Which parts of the view each trait feeds. */
const FEEDS = /** @type {Record<(typeof TRAITS)[number], Part[]>} */ ({
  goal: ["header"],
  status: ["header", "approval", "rounds", "answer", "controls", "timeline"],
  phase: ["header", "approval"],
  error: ["header"],
  divergence: ["header"],
  warnings: ["header"],
  answer: ["answer", "header"],
  answer_fallback: ["answer"],
  answer_partial: ["answer"],
  answer_unreached: ["answer"],
  resumable: ["controls"],
  can_rerun: ["rounds"],
  usage: ["header"],
  rounds: ["rounds", "header", "approval", "timeline"],
  calls: ["trace", "timeline"],
  live_calls: ["header", "rounds", "timeline"],
  now: ["header", "rounds", "timeline"],
  started_at: ["header", "trace", "timeline"],
  phase_since: ["header"],
  stopped_by_user: ["header"],
  idle: ["header"],
  comparison: ["rounds"],
  comparison_round: ["rounds"],
  comparison_label: ["rounds"],
  forked: ["header"],
  detached: ["header"],
});

const ALL_PARTS = /** @type {Part[]} */ (["header", "approval", "rounds", "answer", "controls", "timeline", "trace"]);

/**
 * One frame later (or a timer's worth, where there are no frames: background tabs, some test environments).
 * @param {() => void} fn
 * @returns {() => void} cancels it
 */
function nextFrame(fn) {
  if (typeof requestAnimationFrame === "function") {
    const id = requestAnimationFrame(fn);
    return () => cancelAnimationFrame(id);
  }
  const id = setTimeout(fn, 16);
  return () => clearTimeout(id);
}

/**
 * Whether the user is selecting text or typing in `container`: a redraw there would take either away.
 * @param {HTMLElement} container
 */
function busyIn(container) {
  const active = document.activeElement;
  if ((active instanceof HTMLTextAreaElement || active instanceof HTMLInputElement) && container.contains(active)) {
    return true;
  }
  const selection = document.getSelection?.();
  if (!selection || selection.isCollapsed || !selection.rangeCount) return false;
  return container.contains(selection.getRangeAt(0).commonAncestorContainer);
}

/**
 * One view of the widget.
 * @param {{model: Model, el: HTMLElement, host?: import("./rounds.js").Host}} props  `host`: anywidget's (0.11 and
 *   later), which draws another widget's view inside this one (the compare widget of two rounds)
 * @param {Shared} shared  what the widget's views share
 * @returns {() => void} cleanup: removes every listener and the view
 */
function render({ model, el, host }, shared) {
  const controller = new AbortController();
  const { signal } = controller;

  /** @type {Set<Part>} */
  const dirty = new Set();
  /** @type {(() => void) | null} */
  let cancelFrame = null;
  let alive = true;
  const clock = createClock();
  clock.sync(readNow(model));
  /** @type {ReturnType<typeof setInterval> | null} */
  let ticker = null;

  /** @param {Iterable<Part>} parts */
  function schedule(parts) {
    if (!alive) return;
    for (const part of parts) dirty.add(part);
    if (cancelFrame === null) cancelFrame = nextFrame(flush);
  }

  const requests = createRequests(model);
  const header = createHeader();
  const rounds = createRounds({
    signal,
    redraw: () => schedule(["rounds"]),
    requests,
    memory: shared.memory,
    host,
  });
  const answer = createAnswer();
  const controls = createControls({ signal, requests });
  const approval = createApproval({ signal, requests });
  const trace = createTrace({ signal, requests, redraw: () => schedule(["trace"]) });
  const timeline = createTimeline();
  const parts = { header, approval, rounds, answer, controls, timeline, trace };

  const root = h("div", { class: "dagmagic", "data-lm-suppress-shortcuts": "true" }, [
    header.el,
    controls.el,
    approval.el,
    rounds.el,
    answer.el,
    timeline.el,
    trace.el,
  ]);
  // JupyterLab matches its command-mode shortcuts ("d d" deletes the cell, Enter edits it) against the
  // focused element itself before walking up to the root, so every element that takes focus needs the mark.
  root.addEventListener(
    "focusin",
    (event) => {
      const target = event.target;
      if (target instanceof Element && !target.hasAttribute("data-lm-suppress-shortcuts")) {
        target.setAttribute("data-lm-suppress-shortcuts", "true");
      }
    },
    { signal },
  );
  // Typing in a text box must not drive the notebook (Enter would run the cell, "d d" delete it).
  root.addEventListener(
    "keydown",
    (event) => {
      const target = event.target;
      if (target instanceof HTMLTextAreaElement || target instanceof HTMLInputElement) event.stopPropagation();
    },
    { signal },
  );

  /**
   * The clock's tick: redraws what shows time, unless the view is not on the page (detached, or an older view
   * hidden). The rounds wait while the user selects text or types in them (their next sync redraws them).
   */
  function tick() {
    if (!alive || !root.isConnected || root.hidden) return;
    clock.tick();
    schedule(busyIn(rounds.el) ? ["header", "timeline"] : FEEDS.now);
  }

  /**
   * Starts the clock's timer while the run runs, stops it once it ended.
   * @param {import("./types.js").Traits} state
   */
  function runClock(state) {
    const runs = alive && clockRuns(state);
    if (runs && ticker === null) {
      ticker = setInterval(tick, TICK_MS);
    } else if (!runs && ticker !== null) {
      clearInterval(ticker);
      ticker = null;
    }
  }

  function flush() {
    cancelFrame = null;
    if (!alive) return;
    const todo = [...dirty];
    dirty.clear();
    const synced = readState(model);
    const state = { ...synced, now: clock.read(synced) };
    runClock(state);
    for (const name of todo) {
      try {
        parts[name].update(state);
      } catch (err) {
        log.error(`could not draw the ${name}`, err);
      }
    }
  }

  /** @type {Array<[string, (...args: any[]) => void]>} */
  const handlers = TRAITS.map((trait) => [
    `change:${trait}`,
    () => {
      if (trait === "now") clock.sync(readNow(model));
      schedule(FEEDS[trait]);
    },
  ]);
  for (const [event, handler] of handlers) model.on(event, handler);

  ALL_PARTS.forEach((p) => dirty.add(p));
  flush(); // the first drawing is synchronous: the view is complete when render returns
  el.append(root);
  const leave = shared.show(root);

  return () => {
    alive = false;
    cancelFrame?.();
    cancelFrame = null;
    if (ticker !== null) clearInterval(ticker);
    ticker = null;
    requests.dispose();
    for (const [event, handler] of handlers) model.off(event, handler);
    controller.abort();
    root.remove();
    leave();
  };
}

/**
 * The widget's definition, made once per widget model: `initialize` makes what its views share, `render` draws
 * one view.
 * @returns {{initialize: (props?: {model?: Model}) => () => void, render: (props: {model: Model, el: HTMLElement, host?: import("./rounds.js").Host}) => () => void}}
 */
export default function widget() {
  /** @type {Shared | null} */
  let shared = null;
  return {
    /** @param {{model?: Model}} [props] */
    initialize({ model } = {}) {
      shared = createShared();
      // Tells the kernel a front end that draws widgets holds this one: a notebook executed headless, where
      // nothing would, keeps the run's static views instead of a widget no reader could draw.
      model?.send({ kind: "dagmagic-front-end" });
      return () => {
        shared = null;
      };
    },
    render(props) {
      shared ??= createShared(); // anywidget calls initialize first; a host that does not still gets one
      return render(props, shared);
    },
  };
}
