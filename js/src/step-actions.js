// What a step's detail sends: its actions (re-run an ended run's step, or go on with its result edited; continue,
// step or skip a paused one;
// retry a step waiting for its retry now) and "Show all" under a text Python cut; and its copy buttons. A sent
// action's buttons stay disabled until Python refuses it or the state shows its effect; a refusal shows in the
// step's detail, under the buttons that sent it, until the user dismisses it or acts again.

import { copyText } from "./copy.js";
import { textKey } from "./detail.js";
import { stepKey } from "./selection.js";

/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./types.js").DagNode} DagNode */
/** @typedef {import("./detail.js").StepError} StepError */

/** The buttons of a step's actions. */
export const ACTIONS = ".dagmagic-rerun, .dagmagic-whatif, .dagmagic-continue, .dagmagic-step, .dagmagic-skip";

/** The boxes of a step's actions, each with its text to send. */
export const ACTION_BOXES = ".dagmagic-rerun-box, .dagmagic-whatif-box, .dagmagic-paused";

/** How long "Show all" waits for the whole text before it can be clicked again (ms). */
const ASK_TIMEOUT = 30000;

/**
 * @param {object} options
 * @param {import("./requests.js").Requests} options.requests
 * @param {import("./shared.js").RunMemory} options.memory
 * @param {() => Traits | null} options.state  the last state drawn
 * @param {(round: number) => void} options.redrawRound
 */
export function createStepActions({ requests, memory, state, redrawRound }) {
  /** @type {Map<string, StepError>} by `stepKey`: why Python refused the last action on the step */
  const errors = new Map();
  /** @type {Map<string, string>} by `textKey`: why the whole text did not come */
  const textErrors = new Map();

  /**
   * The step of a detail's button, in round `round` of the last state.
   * @param {number} round
   * @param {Element} button
   */
  function stepOf(round, button) {
    const detail = button.closest(".dagmagic-detail");
    const step = String(detail?.getAttribute("data-step-id"));
    const node = state()
      ?.rounds.find((r) => r.index === round)
      ?.nodes.find((n) => n.id === step);
    return { detail, step, node };
  }

  /**
   * Sends a step's action; its buttons wait for the answer, then for the state to change.
   * @param {number} round
   * @param {string} step
   * @param {StepError["where"]} where
   * @param {string} name
   * @param {Record<string, unknown>} msg
   * @returns {Promise<boolean>} whether Python took it
   */
  function send(round, step, where, name, msg) {
    const sent = actionState(state(), round, step);
    const key = stepKey(round, step);
    errors.delete(key);
    const taken = requests
      .request(name, msg, {
        key: `${where === "status" ? "retry" : "step"}:${key}`,
        until: () => actionState(state(), round, step) !== sent,
      })
      .then(
        () => true,
        (/** @type {Error} */ error) => {
          errors.set(key, { where, text: error.message });
          return false;
        },
      )
      .finally(() => redrawRound(round));
    redrawRound(round); // drawn without the busy buttons
    return taken;
  }

  /**
   * A step's action (re-run; go on with its result edited; continue, step or skip a paused step), with its task
   * when the user edited it.
   * @param {number} round
   * @param {HTMLButtonElement} button
   * @returns {{step: string, rerun: boolean, taken: Promise<boolean>} | null}  what was sent (null: nothing)
   */
  function act(round, button) {
    const { step, node } = stepOf(round, button);
    const box = button.closest(ACTION_BOXES);
    if (!node || !box || button.disabled) return null;
    if (box.classList.contains("dagmagic-whatif-box")) {
      const result = box.querySelector("textarea")?.value ?? "";
      if (!result.trim()) return null;
      const taken = send(round, step, "whatif", "what_if", { step, result });
      for (const b of box.querySelectorAll(ACTIONS)) /** @type {HTMLButtonElement} */ (b).disabled = true;
      return { step, rerun: true, taken };
    }
    const typed = box.querySelector("textarea")?.value.trim() ?? "";
    const task = !typed || typed === node.task.trim() ? null : typed;
    const cls = button.classList;
    const where = cls.contains("dagmagic-rerun") ? "rerun" : "paused";
    const taken =
      where === "rerun"
        ? send(round, step, where, "rerun", { step, task })
        : cls.contains("dagmagic-skip")
          ? send(round, step, where, "skip", { step })
          : send(round, step, where, cls.contains("dagmagic-step") ? "step" : "continue", { step, task });
    for (const b of box.querySelectorAll(ACTIONS)) /** @type {HTMLButtonElement} */ (b).disabled = true;
    return { step, rerun: where === "rerun", taken };
  }

  /**
   * Retry now, for a step waiting for its retry.
   * @param {number} round
   * @param {HTMLButtonElement} button
   */
  function retryNow(round, button) {
    const { step, node } = stepOf(round, button);
    if (!node || button.disabled) return;
    send(round, step, "status", "retry_now", { step });
    button.disabled = true;
  }

  /**
   * "Show all" under a cut result or observation: asks Python for the whole text, which every view then shows.
   * @param {number} round
   * @param {HTMLButtonElement} button
   */
  function askWhole(round, button) {
    const { step, node } = stepOf(round, button);
    const observation = button.getAttribute("data-field") === "observation";
    const call = observation ? Number(button.getAttribute("data-call")) : null;
    const cut = observation ? node?.tool_calls[Number(call)]?.observation : node?.result;
    const runId = state()?.run_id ?? "";
    if (!node || typeof cut !== "string" || button.disabled) return;
    const key = textKey(round, step, observation ? "observation" : "result", call);
    textErrors.delete(key);
    requests
      .request(
        "full_text",
        observation ? { round, step, field: "observation", call } : { round, step, field: "result" },
        {
          key: `text:${key}`,
          timeout: ASK_TIMEOUT,
        },
      )
      .then((/** @type {any} */ value) => memory.keepText(runId, round, key, cut, String(value?.text ?? "")))
      .catch((/** @type {Error} */ error) => textErrors.set(key, error.message))
      .finally(() => redrawRound(round));
    button.disabled = true;
    button.textContent = "Loading…";
    redrawRound(round);
  }

  /**
   * A copy button of a step's detail: its result (whole, if fetched) or one of its paused messages.
   * @param {number} round
   * @param {HTMLButtonElement} button
   */
  function copy(round, button) {
    const { detail, step, node } = stepOf(round, button);
    if (!node || !detail) return;
    if (button.getAttribute("data-copy") === "result") {
      const cut = node.result ?? "";
      const whole = memory.wholeText(textKey(round, step, "result"), cut);
      void copyText(button, whole ?? cut, detail.querySelector(".dagmagic-detail-result"));
    } else if (button.getAttribute("data-copy") === "message") {
      const message = node.paused_messages?.[Number(button.getAttribute("data-index"))];
      const shown = button.closest(".dagmagic-paused-message")?.querySelector(".dagmagic-paused-content");
      if (message) void copyText(button, message.content, shown);
    }
  }

  /**
   * The user closed a refusal shown in a step's detail.
   * @param {number} round
   * @param {Element} close  its close button
   */
  function dismiss(round, close) {
    const which = close.closest("[data-dismiss]")?.getAttribute("data-dismiss");
    const { step } = stepOf(round, close);
    if (which === "step") errors.delete(stepKey(round, step));
    else if (which) textErrors.delete(which);
    redrawRound(round);
  }

  /**
   * What a step's detail shows of its actions: busy, refused, texts loading or refused.
   * @param {number} round
   * @param {string} step
   */
  function status(round, step) {
    const key = stepKey(round, step);
    return {
      busy: requests.busy(`step:${key}`),
      retrying: requests.busy(`retry:${key}`),
      error: errors.get(key) ?? null,
      /** @param {string} text */
      loading: (text) => requests.busy(`text:${text}`),
      /** @param {string} text */
      textError: (text) => textErrors.get(text),
    };
  }

  /**
   * Forgets the refusals of steps no longer there.
   * @param {Traits} current
   */
  function prune(current) {
    const steps = new Set(current.rounds.flatMap((r) => r.nodes.map((n) => stepKey(r.index, n.id))));
    for (const key of errors.keys()) if (!steps.has(key)) errors.delete(key);
    for (const key of textErrors.keys()) {
      const [round, step] = JSON.parse(key);
      if (!steps.has(stepKey(round, step))) textErrors.delete(key);
    }
  }

  return { act, retryNow, askWhole, copy, dismiss, status, prune };
}

/**
 * What decides whether a step's sent action took effect: the run's status and whether it can re-run, the
 * number of rounds, and the step itself.
 * @param {Traits | null} state
 * @param {number} round
 * @param {string} step
 */
function actionState(state, round, step) {
  if (!state) return "";
  const node = state.rounds.find((r) => r.index === round)?.nodes.find((n) => n.id === step);
  return JSON.stringify([state.status, state.can_rerun, state.rounds.length, node ?? null]);
}
