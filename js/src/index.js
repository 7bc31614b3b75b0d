// The dagmagic widget's front end (anywidget). Python owns the state; this draws it and sends back the
// user's Stop, Cancel and follow-up, and their word on a plan, a paused step or a step to re-run. Redraws are
// coalesced into one per animation frame.

import { createAnswer } from "./answer.js";
import { createApproval } from "./approval.js";
import { createControls } from "./controls.js";
import { h, log } from "./dom.js";
import { createHeader } from "./header.js";
import { createRounds } from "./rounds.js";
import { readState, TRAITS } from "./state.js";
import { createTrace } from "./trace.js";

/** @typedef {import("./types.js").Model} Model */
/** @typedef {"header" | "approval" | "rounds" | "answer" | "controls" | "trace"} Part */

/** Which parts of the view each trait feeds. */
const FEEDS = /** @type {Record<(typeof TRAITS)[number], Part[]>} */ ({
  goal: ["header"],
  status: ["header", "approval", "rounds", "answer", "controls"],
  phase: ["header", "approval"],
  error: ["header"],
  answer: ["answer"],
  answer_fallback: ["answer"],
  answer_partial: ["answer"],
  resumable: ["controls"],
  can_rerun: ["rounds"],
  usage: ["header"],
  rounds: ["rounds", "header", "approval"],
  calls: ["trace"],
  now: ["header", "rounds"],
  started_at: ["header"],
});

const ALL_PARTS = /** @type {Part[]} */ (["header", "approval", "rounds", "answer", "controls", "trace"]);

/**
 * The views of each run, oldest first. A `%%dag` cell shows its run live while it runs, then again as the
 * cell's value: the newer view hides the older, so the cell shows one widget. Keyed by the run's id: the
 * model object a view receives may be a per-view wrapper.
 * @type {Map<string, HTMLElement[]>}
 */
const viewsByRun = new Map();

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
 * @param {{model: Model, el: HTMLElement}} props
 * @returns {() => void} cleanup: removes every listener and the view
 */
function render({ model, el }) {
  const controller = new AbortController();
  const { signal } = controller;

  /** @type {Set<Part>} */
  const dirty = new Set();
  /** @type {(() => void) | null} */
  let cancelFrame = null;
  let alive = true;

  /** @param {Iterable<Part>} parts */
  function schedule(parts) {
    if (!alive) return;
    for (const part of parts) dirty.add(part);
    if (cancelFrame === null) cancelFrame = nextFrame(flush);
  }

  const header = createHeader();
  const rounds = createRounds({ signal, redraw: () => schedule(["rounds"]), send: (msg) => model.send(msg) });
  const answer = createAnswer();
  const controls = createControls({ signal, send: (msg) => model.send(msg) });
  const approval = createApproval({ signal, send: (msg) => model.send(msg) });
  const trace = createTrace();
  const parts = { header, approval, rounds, answer, controls, trace };

  const root = h("div", { class: "dagmagic", "data-lm-suppress-shortcuts": "true" }, [
    header.el,
    controls.el,
    approval.el,
    rounds.el,
    answer.el,
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

  function flush() {
    cancelFrame = null;
    if (!alive) return;
    const todo = [...dirty];
    dirty.clear();
    const state = readState(model);
    for (const name of todo) {
      try {
        parts[name].update(state);
      } catch (err) {
        log.error(`could not draw the ${name}`, err);
      }
    }
  }

  /** @type {Array<[string, (...args: any[]) => void]>} */
  const handlers = TRAITS.map((trait) => [`change:${trait}`, () => schedule(FEEDS[trait])]);
  handlers.push([
    "msg:custom",
    /** @param {any} msg */
    (msg) => {
      if (msg && msg.type === "error") {
        log.warn("kernel reported:", msg.message);
        controls.showMessage(String(msg.message ?? "Unknown error"));
        // the refused action's buttons work again
        rounds.actionFailed();
        approval.actionFailed();
      } else {
        log.debug("ignored message", msg);
      }
    },
  ]);
  for (const [event, handler] of handlers) model.on(event, handler);

  ALL_PARTS.forEach((p) => dirty.add(p));
  flush(); // the first drawing is synchronous: the view is complete when render returns
  el.append(root);
  const runId = readState(model).run_id;
  if (runId) {
    const views = viewsByRun.get(runId) ?? [];
    for (const older of views) older.hidden = true;
    views.push(root);
    viewsByRun.set(runId, views);
  }

  return () => {
    alive = false;
    cancelFrame?.();
    cancelFrame = null;
    for (const [event, handler] of handlers) model.off(event, handler);
    controller.abort();
    root.remove();
    const remaining = (viewsByRun.get(runId) ?? []).filter((view) => view !== root);
    if (remaining.length) viewsByRun.set(runId, remaining);
    else viewsByRun.delete(runId);
    const newest = remaining[remaining.length - 1];
    if (newest) newest.hidden = false;
  };
}

export default { render };
