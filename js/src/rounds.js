// The rounds: one section each (the latest expanded, earlier ones collapsible) holding the DAG, the step
// detail and the verdict. A section is rebuilt only when its round, its view state or (while steps run) the
// clock changed, so earlier rounds keep their DOM. The views of one run share what the user opened and the
// whole texts fetched (`RunMemory`), and the copy and "Show all" buttons of a step's detail work from here.

import { copyText } from "./copy.js";
import { h } from "./dom.js";
import { draftKey, renderDetail, textKey, uncut } from "./detail.js";
import { isLive } from "./state.js";
import { subrunKeys } from "./subrun.js";
import { renderVerdict, roundNotes, roundSummary } from "./verdict.js";
import { createZoom, graphView } from "./zoom.js";

/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").Traits} Traits */

/**
 * View state that outlives redraws.
 * @typedef {object} RoundsView
 * @property {{round: number, step: string} | null} selected  the step the user opened
 * @property {{round: number, step: string} | null} auto  a paused step, opened for the user when nothing else is
 * @property {Set<string>} dismissed  paused steps (by `stepKey`) whose detail the user closed: not opened again
 * @property {Map<number, boolean>} expanded  explicit choices; otherwise only the latest round is open
 * @property {Map<string, string>} drafts  tasks typed and not sent yet, by `draftKey`
 * @property {Map<string, boolean>} open  which of a paused step's messages the user opened or closed
 * @property {Map<string, boolean>} subruns  which composite steps' sub-runs the user opened or closed, by `subrunKey`
 * @property {{step: string, state: string} | null} busy  an action sent on a step (by `stepKey`): its buttons
 *   stay disabled until that step or the run changes (`actionState`), or Python refuses the action
 */

/** @typedef {import("./types.js").OutgoingMessage} OutgoingMessage */
/** @typedef {import("./types.js").FullTextRequest} FullTextRequest */
/** @typedef {import("./types.js").FullTextMessage} FullTextMessage */
/** @typedef {import("./detail.js").DetailActions} DetailActions */

/**
 * What the views of one run share while one of them is alive. A `%%dag` cell shows its run live, then again as
 * the cell's value (index.js hides the older view): the newer view opens with the step and rounds the user left
 * open. The whole texts fetched for cut results and observations are kept here too, with those asked for.
 * @typedef {object} RunMemory
 * @property {string} id  the run's id ("" for a view of a run without one: then the memory is that view's own)
 * @property {{round: number, step: string} | null} selected
 * @property {Map<number, boolean>} expanded
 * @property {Map<string, {cut: string, text: string}>} texts  by `textKey`: a whole text, and the cut one it completes
 * @property {Map<string, {cut: string, ask: number, refused: boolean}>} asked  by `textKey`: asked for, with the cut
 *   text shown then; refused: Python refused an action since (perhaps this one): "Show all" works again, and a
 *   late answer is still taken
 * @property {Set<(round: number) => void>} views  each view's redraw of one round
 */

/** @type {Map<string, RunMemory>} by run id */
const memories = new Map();
/** @type {Set<RunMemory>} every memory a view uses, those of runs without an id too */
const inUse = new Set();
/** How long "Show all" waits for the whole text before it can be clicked again (ms). */
const ASK_TIMEOUT = 30000;
let asks = 0;

/**
 * @param {string} id
 * @returns {RunMemory}
 */
function newMemory(id) {
  return { id, selected: null, expanded: new Map(), texts: new Map(), asked: new Map(), views: new Set() };
}

/**
 * Python's answer to `{type: "full_text"}`: the whole text replaces the cut one, in every view of the run that
 * asked for it (and stays across redraws). index.js routes the custom message here.
 * @param {FullTextMessage | any} msg
 * @returns {boolean} whether a view had asked for it
 */
export function onFullText(msg) {
  if (!msg || msg.type !== "full_text" || typeof msg.text !== "string") return false;
  const field = msg.field === "observation" ? "observation" : "result";
  const round = Number(msg.round);
  const key = textKey(round, String(msg.step), field, field === "observation" ? Number(msg.call) : null);
  let taken = false;
  for (const memory of inUse) {
    const asked = memory.asked.get(key);
    // another run's step of the same name would not start with this one's text
    if (!asked || !msg.text.startsWith(uncut(asked.cut))) continue;
    memory.asked.delete(key);
    memory.texts.set(key, { cut: asked.cut, text: msg.text });
    for (const redrawRound of memory.views) redrawRound(round);
    taken = true;
  }
  return taken;
}

/** A step's nested run, in its detail: what happens inside is no click, key or focus of the run's own steps. */
const SUBRUN = ".dagmagic-subrun";

/** The buttons of a step's actions that send its (perhaps edited) task: they need one. */
const TASK_ACTIONS = ".dagmagic-rerun, .dagmagic-continue, .dagmagic-step";
const ACTIONS = `${TASK_ACTIONS}, .dagmagic-skip`;

/**
 * @param {number} round
 * @param {string} step
 */
const stepKey = (round, step) => JSON.stringify([round, step]);

/**
 * @param {{signal: AbortSignal, redraw: () => void, send: (msg: OutgoingMessage | FullTextRequest) => void}} options
 */
export function createRounds({ signal, redraw, send }) {
  const el = h("div", { class: "dagmagic-rounds" });
  /** @type {RoundsView} */
  const view = {
    selected: null,
    auto: null,
    dismissed: new Set(),
    expanded: new Map(),
    drafts: new Map(),
    open: new Map(),
    subruns: new Map(),
    busy: null,
  };
  /** @type {Map<number, {sig: string, el: HTMLElement}>} */
  const cache = new Map();
  const zoom = createZoom(el, signal); // zoom buttons and drag-to-pan; a drag's click selects no step
  let latest = -1;
  /** @type {Traits | null} */
  let last = null;
  /** @type {RunMemory} */
  let memory = newMemory("");
  /** whether the user opened or closed something here (then a newer view's choices are not taken over) */
  let touched = false;

  /** @param {number} round */
  const redrawRound = (round) => {
    cache.delete(round);
    redraw();
  };

  /**
   * Uses the memory of run `id`, shared with its other views: a new view opens what the user left open.
   * @param {string} id
   */
  function attach(id) {
    leave();
    const shared = id ? memories.get(id) : undefined;
    if (shared && !touched) {
      view.selected = shared.selected;
      view.expanded = new Map(shared.expanded);
    }
    memory = shared ?? newMemory(id);
    if (!shared) remember();
    if (id) memories.set(id, memory);
    memory.views.add(redrawRound);
    inUse.add(memory);
  }

  function leave() {
    memory.views.delete(redrawRound);
    if (memory.views.size) return;
    inUse.delete(memory);
    if (memories.get(memory.id) === memory) memories.delete(memory.id);
  }
  signal.addEventListener("abort", leave);

  /** The user's choice, for a newer view of the run. */
  function remember() {
    memory.selected = view.selected;
    memory.expanded = new Map(view.expanded);
  }

  /** The user opened or closed something: remember it, and redraw. */
  function changed() {
    touched = true;
    remember();
    redraw();
  }

  /** @param {number} index */
  const isExpanded = (index) => view.expanded.get(index) ?? index === latest;

  /** The step whose detail shows: the user's choice, else a paused step. */
  const shown = () => view.selected ?? view.auto;

  /** Closes the detail; a paused step opened for the user stays closed. */
  function closeDetail() {
    if (!view.selected && view.auto) view.dismissed.add(stepKey(view.auto.round, view.auto.step));
    view.selected = null;
  }

  /**
   * @param {number} round
   * @param {string} step
   */
  function toggleSelection(round, step) {
    const current = shown();
    const same = current && current.round === round && current.step === step;
    if (same) closeDetail();
    else view.selected = { round, step };
    if (!same) view.expanded.set(round, true);
    changed();
  }

  /**
   * A step's action (re-run; continue, step or skip a paused step), with its task when the user edited it.
   * @param {number} round
   * @param {HTMLButtonElement} button
   */
  function act(round, button) {
    const step = String(button.closest(".dagmagic-detail")?.getAttribute("data-step-id"));
    const node = last?.rounds.find((r) => r.index === round)?.nodes.find((n) => n.id === step);
    const box = button.closest(".dagmagic-rerun-box, .dagmagic-paused");
    if (!last || !node || !box || button.disabled) return;
    const typed = box.querySelector("textarea")?.value.trim() ?? "";
    const task = !typed || typed === node.task.trim() ? null : typed;
    const cls = button.classList;
    send(
      cls.contains("dagmagic-rerun")
        ? { type: "rerun", step, task }
        : cls.contains("dagmagic-skip")
          ? { type: "skip", step }
          : { type: cls.contains("dagmagic-step") ? "step" : "continue", step, task },
    );
    view.busy = { step: stepKey(round, step), state: actionState(last, round, step) };
    for (const b of box.querySelectorAll(ACTIONS)) /** @type {HTMLButtonElement} */ (b).disabled = true;
    cache.delete(round); // drawn without the busy buttons: the next redraw (or a refusal) redraws it
  }

  /**
   * The step of a detail's button, in round `round` of the last state.
   * @param {number} round
   * @param {Element} button
   */
  function stepOf(round, button) {
    const detail = button.closest(".dagmagic-detail");
    const step = String(detail?.getAttribute("data-step-id"));
    const node = last?.rounds.find((r) => r.index === round)?.nodes.find((n) => n.id === step);
    return { detail, step, node };
  }

  /**
   * A copy button of a step's detail: its result (whole, if fetched) or one of its paused messages.
   * @param {number} round
   * @param {HTMLButtonElement} button
   */
  function copyFromDetail(round, button) {
    const { detail, step, node } = stepOf(round, button);
    if (!node || !detail) return;
    if (button.getAttribute("data-copy") === "result") {
      const cut = node.result ?? "";
      const whole = memory.texts.get(textKey(round, step, "result"));
      void copyText(
        button,
        whole && whole.cut === cut ? whole.text : cut,
        detail.querySelector(".dagmagic-detail-result"),
      );
    } else if (button.getAttribute("data-copy") === "message") {
      const message = node.paused_messages?.[Number(button.getAttribute("data-index"))];
      const shown = button.closest(".dagmagic-paused-message")?.querySelector(".dagmagic-paused-content");
      if (message) void copyText(button, message.content, shown);
    }
  }

  /**
   * "Show all" under a cut result or observation: asks Python for the whole text (`onFullText` takes the answer).
   * @param {number} round
   * @param {HTMLButtonElement} button
   */
  function askWhole(round, button) {
    const { step, node } = stepOf(round, button);
    const observation = button.getAttribute("data-field") === "observation";
    const call = observation ? Number(button.getAttribute("data-call")) : null;
    const cut = observation ? node?.tool_calls[Number(call)]?.observation : node?.result;
    if (!node || typeof cut !== "string" || button.disabled) return;
    send(
      observation
        ? { type: "full_text", round, step, field: "observation", call: Number(call) }
        : { type: "full_text", round, step, field: "result" },
    );
    const key = textKey(round, step, observation ? "observation" : "result", call);
    const ask = ++asks;
    const asked = memory;
    asked.asked.set(key, { cut, ask, refused: false });
    button.disabled = true;
    button.textContent = "Loading…";
    for (const redrawRound of asked.views) redrawRound(round);
    // no answer (a lost message): the button works again
    setTimeout(() => {
      if (asked.asked.get(key)?.ask !== ask) return;
      asked.asked.delete(key);
      for (const redrawRound of asked.views) redrawRound(round);
    }, ASK_TIMEOUT);
  }

  el.addEventListener(
    "click",
    (event) => {
      const target = /** @type {Element} */ (event.target);
      const section = target.closest?.(".dagmagic-round");
      if (!section || target.closest(SUBRUN)) return; // its summary opens and closes it by itself
      const round = Number(section.getAttribute("data-round"));
      const toggle = target.closest(".dagmagic-round-toggle");
      const node = target.closest(".dagmagic-node");
      const dep = target.closest("[data-goto-step]");
      const action = target.closest(ACTIONS);
      const copy = target.closest(".dagmagic-copy");
      const expand = target.closest(".dagmagic-expand");
      if (toggle) {
        view.expanded.set(round, !isExpanded(round));
        changed();
      } else if (copy) {
        copyFromDetail(round, /** @type {HTMLButtonElement} */ (copy));
      } else if (expand) {
        askWhole(round, /** @type {HTMLButtonElement} */ (expand));
      } else if (target.closest(".dagmagic-retry-now")) {
        const detail = target.closest(".dagmagic-detail");
        send({ type: "retry_now", step: String(detail?.getAttribute("data-step-id")) });
        /** @type {HTMLButtonElement} */ (target.closest(".dagmagic-retry-now")).disabled = true;
      } else if (action) {
        act(round, /** @type {HTMLButtonElement} */ (action));
      } else if (target.closest(".dagmagic-detail-close")) {
        closeDetail();
        changed();
      } else if (dep) {
        view.selected = {
          round: Number(dep.getAttribute("data-goto-round")),
          step: String(dep.getAttribute("data-goto-step")),
        };
        view.expanded.set(view.selected.round, true);
        changed();
      } else if (node) {
        toggleSelection(round, String(node.getAttribute("data-step-id")));
      }
    },
    { signal },
  );
  el.addEventListener(
    "keydown",
    (event) => {
      const target = /** @type {Element} */ (event.target);
      const node = target.closest?.(".dagmagic-node");
      if (!node || node.closest(SUBRUN) || (event.key !== "Enter" && event.key !== " ")) return;
      event.preventDefault();
      event.stopPropagation(); // keep the notebook from running the cell on Enter
      const section = node.closest(".dagmagic-round");
      toggleSelection(Number(section?.getAttribute("data-round")), String(node.getAttribute("data-step-id")));
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
      view.drafts.set(key, target.value);
      const detail = target.closest(".dagmagic-detail");
      const round = Number(target.closest(".dagmagic-round")?.getAttribute("data-round"));
      const busy = view.busy?.step === stepKey(round, String(detail?.getAttribute("data-step-id")));
      const box = target.closest(".dagmagic-rerun-box, .dagmagic-paused");
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
      if (key) view.open.set(key, target.open);
      const subrun = target.getAttribute("data-subrun-key");
      if (subrun) view.subruns.set(subrun, target.open);
    },
    { signal, capture: true },
  );

  /**
   * Forgets what no longer applies: drafts and open messages of steps no longer paused (or re-runnable), a
   * sent action once its step or the run changed.
   * @param {Traits} state
   */
  function prune(state) {
    /** @type {Set<string>} */
    const paused = new Set();
    /** @type {Set<string>} */
    const drafts = new Set();
    state.rounds.forEach((round, i) => {
      const rerunnable = state.can_rerun && i === state.rounds.length - 1;
      for (const node of round.nodes) {
        if (node.status === "paused") {
          paused.add(stepKey(round.index, node.id));
          drafts.add(draftKey("paused", round.index, node.id));
        }
        if (rerunnable) drafts.add(draftKey("rerun", round.index, node.id));
      }
    });
    for (const key of view.drafts.keys()) if (!drafts.has(key)) view.drafts.delete(key);
    for (const key of view.dismissed) if (!paused.has(key)) view.dismissed.delete(key);
    for (const key of view.open.keys()) {
      const [round, step] = JSON.parse(key);
      if (!paused.has(stepKey(round, step))) view.open.delete(key);
    }
    const subruns = subrunKeys(state.rounds);
    for (const key of view.subruns.keys()) if (!subruns.has(key)) view.subruns.delete(key);
    if (view.busy) {
      const [round, step] = JSON.parse(view.busy.step);
      if (actionState(state, round, step) !== view.busy.state) view.busy = null;
    }
  }

  /** Python refused the last action: its buttons work again (and "Show all" buttons waiting for a text). */
  function actionFailed() {
    /** @type {Set<number>} */
    const rounds = new Set();
    for (const [key, asked] of memory.asked) {
      if (!asked.refused) rounds.add(Number(JSON.parse(key)[0]));
      asked.refused = true;
    }
    for (const round of rounds) for (const redrawRound of memory.views) redrawRound(round);
    if (!view.busy) return;
    view.busy = null;
    redraw();
  }

  /**
   * @param {Traits} state
   */
  function update(state) {
    // a sub-run opened or closed since the last redraw, whose toggle event may not have come yet
    for (const details of el.querySelectorAll("details[data-subrun-key]")) {
      view.subruns.set(
        String(details.getAttribute("data-subrun-key")),
        /** @type {HTMLDetailsElement} */ (details).open,
      );
    }
    if (!signal.aborted && (!inUse.has(memory) || state.run_id !== memory.id)) attach(state.run_id);
    last = state;
    latest = state.rounds.length ? state.rounds[state.rounds.length - 1].index : -1;
    prune(state);
    view.auto = view.selected ? null : pausedStep(state, view.dismissed);
    const focused = focusedNode(el);
    const typing = focusedDraft(el);
    const summary = focusedSummary(el);
    const current = shown();
    const sections = state.rounds.map((round) => {
      const expanded = isExpanded(round.index);
      const selected = current?.round === round.index ? current.step : null;
      const live = expanded && round.nodes.some(isLive);
      const isLatest = round.index === latest;
      const busy = view.busy && selected !== null && view.busy.step === stepKey(round.index, selected);
      // Everything the section shows: the round, its view state, the clock while steps run, and for the latest
      // round the run status (it decides whether a missing verdict is still coming), its phase (planning) and
      // whether it can re-run. (Whole texts fetched and asked for redraw their round themselves.)
      const sig = JSON.stringify([
        round,
        expanded,
        selected,
        live ? state.now : 0,
        isLatest && state.status,
        isLatest && state.phase,
        isLatest && state.can_rerun,
        busy,
      ]);
      const cached = cache.get(round.index);
      if (cached && cached.sig === sig) return cached.el;
      /** @type {DetailActions} */
      const actions = {
        rerun: isLatest && state.can_rerun,
        busy: Boolean(busy),
        draft: (key) => view.drafts.get(key),
        messageOpen: (key) => view.open.get(key),
        subrunOpen: (key) => view.subruns.get(key),
        fullText: (key, cut) => {
          const whole = memory.texts.get(key);
          return whole && whole.cut === cut ? whole.text : undefined;
        },
        loading: (key) => memory.asked.get(key)?.refused === false,
      };
      const section = renderRound(round, state, expanded, selected, isLatest, actions);
      cache.set(round.index, { sig, el: section });
      return section;
    });
    for (const index of [...cache.keys()]) {
      if (!state.rounds.some((r) => r.index === index)) cache.delete(index);
    }
    if (sections.length !== el.children.length || sections.some((s, i) => el.children[i] !== s)) {
      el.replaceChildren(...sections);
    }
    if (!state.rounds.length) {
      const text =
        state.status !== "running"
          ? "No plan."
          : state.phase === "planning"
            ? "Planning the first steps…"
            : "Planning…";
      el.replaceChildren(h("div", { class: "dagmagic-muted dagmagic-planning" }, [text]));
    }
    zoom.apply(); // graphs drawn anew: zoomed and panned as the user left them
    if (focused) {
      const again = el.querySelector(
        `.dagmagic-round[data-round="${focused.round}"] > .dagmagic-round-body > .dagmagic-graph-wrap .dagmagic-node[data-step-id="${CSS_escape(focused.step)}"]`,
      );
      if (again && again !== document.activeElement) /** @type {SVGElement} */ (again).focus?.();
    }
    if (typing) {
      const again = [...el.querySelectorAll("textarea[data-draft]")].find(
        (t) => t.getAttribute("data-draft") === typing.key,
      );
      if (again instanceof HTMLTextAreaElement && again !== document.activeElement) {
        again.focus();
        again.setSelectionRange(typing.start, typing.end, typing.direction);
        again.scrollTop = typing.scroll;
      }
    }
    if (summary !== null) {
      const again = [...el.querySelectorAll("details[data-subrun-key] > summary")].find(
        (s) => s.parentElement?.getAttribute("data-subrun-key") === summary,
      );
      if (again instanceof HTMLElement && again !== document.activeElement) again.focus();
    }
  }

  return { el, update, view, actionFailed };
}

/**
 * What decides whether a step's sent action took effect: the run's status and whether it can re-run, the
 * number of rounds, and the step itself.
 * @param {Traits} state
 * @param {number} round
 * @param {string} step
 */
function actionState(state, round, step) {
  const node = state.rounds.find((r) => r.index === round)?.nodes.find((n) => n.id === step);
  return JSON.stringify([state.status, state.can_rerun, state.rounds.length, node ?? null]);
}

/**
 * The first paused step (of the latest round first) whose detail the user did not close.
 * @param {Traits} state
 * @param {Set<string>} dismissed
 * @returns {{round: number, step: string} | null}
 */
function pausedStep(state, dismissed) {
  for (const round of [...state.rounds].reverse()) {
    const node = round.nodes.find((n) => n.status === "paused" && !dismissed.has(stepKey(round.index, n.id)));
    if (node) return { round: round.index, step: node.id };
  }
  return null;
}

/**
 * The task box the user is typing in, with the caret, so they keep both across a redraw.
 * @param {HTMLElement} root
 */
function focusedDraft(root) {
  const active = document.activeElement;
  if (!(active instanceof HTMLTextAreaElement) || !root.contains(active)) return null;
  const key = active.getAttribute("data-draft");
  if (!key) return null;
  return {
    key,
    start: active.selectionStart,
    end: active.selectionEnd,
    direction: active.selectionDirection,
    scroll: active.scrollTop,
  };
}

/**
 * The sub-run whose summary has the keyboard focus (its key), so it keeps it across a redraw.
 * @param {HTMLElement} root
 * @returns {string | null}
 */
function focusedSummary(root) {
  const active = document.activeElement;
  if (!active || !root.contains(active) || active.tagName !== "SUMMARY") return null;
  return active.parentElement?.getAttribute("data-subrun-key") ?? null;
}

/**
 * Which step has the keyboard focus, so it keeps it across a redraw.
 * @param {HTMLElement} root
 */
function focusedNode(root) {
  const active = document.activeElement;
  if (!active || !root.contains(active) || active.closest(SUBRUN)) return null;
  const node = active.closest(".dagmagic-node");
  const section = active.closest(".dagmagic-round");
  if (!node || !section) return null;
  return { round: section.getAttribute("data-round"), step: String(node.getAttribute("data-step-id")) };
}

/** @param {string} value */
function CSS_escape(value) {
  return globalThis.CSS?.escape ? globalThis.CSS.escape(value) : value.replace(/["\\]/g, "\\$&");
}

/**
 * @param {Round} round
 * @param {Traits} state
 * @param {boolean} expanded
 * @param {string | null} selected
 * @param {boolean} isLatest
 * @param {DetailActions} actions  for the selected step's detail
 */
function renderRound(round, state, expanded, selected, isLatest, actions) {
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
          ...roundNotes(round),
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
