// Stop, Cancel and the follow-up box while the run runs; once it ended, what can be done then (re-run a step,
// resume) and, cancelled, what was kept. Python's refusal of any of them shows here.

import { h } from "./dom.js";
import { createMessage } from "./message.js";

/** @typedef {import("./types.js").Traits} Traits */

/**
 * @param {{requests: import("./requests.js").Requests, signal: AbortSignal}} options
 */
export function createControls({ requests, signal }) {
  const stop = h(
    "button",
    {
      type: "button",
      class: "dagmagic-button dagmagic-stop",
      title: "Skip the pending steps; running ones finish, then the run ends",
    },
    ["Stop"],
  );
  const cancel = h(
    "button",
    { type: "button", class: "dagmagic-button dagmagic-cancel", title: "Abort now: running steps are cancelled" },
    ["Cancel"],
  );
  const input = h("input", {
    type: "text",
    class: "dagmagic-followup-input",
    placeholder: "Follow-up: refine the goal while it runs (Enter sends)",
    "aria-label": "Follow-up",
    // Lumino (JupyterLab) would otherwise treat keys typed here as notebook shortcuts.
    "data-lm-suppress-shortcuts": "true",
  });
  const sendButton = h("button", { type: "button", class: "dagmagic-button dagmagic-followup-send" }, ["Send"]);
  const notice = h("div", { class: "dagmagic-notice", role: "status", hidden: true });
  const resume = h("button", { type: "button", class: "dagmagic-button dagmagic-resume" }, ["Resume"]);
  const restart = h("button", { type: "button", class: "dagmagic-button dagmagic-restart" }, ["Start over"]);
  const offer = h("div", { class: "dagmagic-resume-offer", role: "status", hidden: true }, [
    h("span", { class: "dagmagic-resume-text" }, [
      "This run did not end (its kernel stopped, or it was cancelled). Resume it: what completed is kept.",
    ]),
    resume,
    restart,
  ]);
  const message = createMessage(signal);
  const row = h("div", { class: "dagmagic-controls-row" }, [
    stop,
    cancel,
    h("div", { class: "dagmagic-followup" }, [input, sendButton]),
  ]);
  const kept = h("div", { class: "dagmagic-cancelled-note", role: "status", hidden: true });
  const hint = h("div", { class: "dagmagic-rerun-hint", hidden: true }, [
    "Open a step to re-run it with another task, or to go on as if it had said something else.",
  ]);
  const el = h("div", { class: "dagmagic-controls" }, [row, kept, hint, offer, notice, message.el]);

  let running = false;
  /** Stop and Cancel wait for Python's answer, then for the run to end. */
  const ended = () => !running;

  function sync() {
    const stopping = requests.busy("stop");
    const cancelling = requests.busy("cancel");
    stop.disabled = !running || stopping || cancelling;
    cancel.disabled = !running || cancelling;
    input.disabled = !running;
    sendButton.disabled = !running;
    stop.textContent = stopping ? "Stopping…" : "Stop";
    cancel.textContent = cancelling ? "Cancelling…" : "Cancel";
  }

  /**
   * Sends a request; Python's refusal shows here, and what waited for it works again.
   * @param {string} name
   * @param {Record<string, unknown>} msg
   * @param {import("./requests.js").RequestOptions & {then?: (value: unknown) => void}} [options]  `then` gets
   *   the answer's value when Python took it
   * @returns {Promise<boolean>} whether Python took it
   */
  function post(name, msg, options = {}) {
    message.clear();
    const { then, ...rest } = options;
    const answer = requests.request(name, msg, rest).then(
      (value) => {
        then?.(value);
        return true;
      },
      (/** @type {Error} */ error) => {
        message.show(error.message);
        return false;
      },
    );
    void answer.then(sync);
    sync();
    return answer;
  }

  function sendFollowUp() {
    const text = input.value.trim();
    if (!running || !text) return;
    input.value = "";
    notice.textContent = "Sending your follow-up…";
    notice.hidden = false;
    void post("follow_up", { text }, { then: (value) => (notice.textContent = outlook(value)) }).then((took) => {
      if (took) return;
      notice.hidden = true;
      if (!input.value) input.value = text; // refused: the user gets their text back
    });
  }

  for (const [button, name] of /** @type {const} */ ([
    [stop, "stop"],
    [cancel, "cancel"],
  ])) {
    button.addEventListener(
      "click",
      () => {
        if (running && !button.disabled) void post(name, {}, { until: ended });
      },
      { signal },
    );
  }
  sendButton.addEventListener("click", sendFollowUp, { signal });
  for (const [button, name] of /** @type {const} */ ([
    [resume, "resume"],
    [restart, "restart"],
  ])) {
    button.addEventListener(
      "click",
      () => {
        resume.disabled = restart.disabled = true;
        void post(name, {}).then((took) => {
          if (!took) resume.disabled = restart.disabled = false;
        });
      },
      { signal },
    );
  }
  input.addEventListener(
    "keydown",
    (event) => {
      event.stopPropagation(); // typing here must not drive the notebook (Enter would run the cell)
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        sendFollowUp();
      }
    },
    { signal },
  );

  /** @param {Traits} state */
  function update(state) {
    const wasRunning = running;
    running = state.status === "running";
    if (state.resumable && offer.hidden) resume.disabled = restart.disabled = false; // offered anew
    offer.hidden = !state.resumable;
    if (!running && wasRunning) notice.hidden = true;
    // Stop, Cancel and follow-ups are for a running run; once it ended, what can be done then
    row.hidden = !running;
    hint.hidden = running || !state.can_rerun;
    kept.hidden = state.status !== "cancelled";
    kept.textContent = state.status === "cancelled" ? keptText(state) : "";
    sync();
  }

  return { el, update };
}

/**
 * What Python says the follow-up will do, in the phase it arrived in (a new round, or the verdict and answer under
 * way taking it into account); a kernel that says nothing gets the words that hold whatever the phase.
 * @param {unknown} value  the answer's value: `{notice}`
 */
export function outlook(value) {
  const said = value && typeof value === "object" ? /** @type {{notice?: unknown}} */ (value).notice : null;
  return typeof said === "string" && said.trim()
    ? said
    : "Follow-up sent: it is planned for in a new round, or taken into account by the answer.";
}

/**
 * What a cancelled run kept, counted over its latest round's steps: "Cancelled: 3 of 5 steps had completed;
 * their results are kept."
 * @param {Traits} state
 */
export function keptText(state) {
  const nodes = state.rounds.length ? state.rounds[state.rounds.length - 1].nodes : [];
  if (!nodes.length) return "Cancelled before any step ran.";
  const done = nodes.filter((n) => n.status === "completed").length;
  const steps = `${nodes.length} step${nodes.length === 1 ? "" : "s"}`;
  if (done === 0) {
    return nodes.length === 1
      ? "Cancelled before its step completed."
      : `Cancelled before any of its ${steps} completed.`;
  }
  const kept = done === 1 ? "its result is kept" : "their results are kept";
  return `Cancelled: ${done} of ${steps} had completed; ${kept}.`;
}
