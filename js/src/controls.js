// Stop, Cancel and the follow-up box while the run runs; once it ended, what can be done then (re-run a step,
// resume) and, cancelled, what was kept. The messages Python sends back about them.

import { h, log } from "./dom.js";

/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./types.js").OutgoingMessage} OutgoingMessage */

/**
 * @param {{send: (msg: OutgoingMessage) => void, signal: AbortSignal}} options
 */
export function createControls({ send, signal }) {
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
  const message = h("div", { class: "dagmagic-message", role: "alert", hidden: true });
  const row = h("div", { class: "dagmagic-controls-row" }, [
    stop,
    cancel,
    h("div", { class: "dagmagic-followup" }, [input, sendButton]),
  ]);
  const kept = h("div", { class: "dagmagic-cancelled-note", role: "status", hidden: true });
  const hint = h("div", { class: "dagmagic-rerun-hint", hidden: true }, [
    "Open a step to re-run it with another task.",
  ]);
  const el = h("div", { class: "dagmagic-controls" }, [row, kept, hint, offer, notice, message]);

  let running = false;
  /** @type {"stop" | "cancel" | null} */
  let requested = null;

  function sync() {
    stop.disabled = !running || requested !== null;
    cancel.disabled = !running || requested === "cancel";
    input.disabled = !running;
    sendButton.disabled = !running;
    stop.textContent = requested === "stop" ? "Stopping…" : "Stop";
    cancel.textContent = requested === "cancel" ? "Cancelling…" : "Cancel";
  }

  /** @param {OutgoingMessage} msg */
  function post(msg) {
    try {
      send(msg);
      return true;
    } catch (err) {
      log.error("could not send", msg.type, err);
      showMessage(`Could not reach the kernel: ${err instanceof Error ? err.message : String(err)}`);
      return false;
    }
  }

  function sendFollowUp() {
    const text = input.value.trim();
    if (!running || !text) return;
    if (post({ type: "follow_up", text })) {
      input.value = "";
      notice.textContent = `Follow-up sent: the run will replan with it.`;
      notice.hidden = false;
    }
  }

  stop.addEventListener(
    "click",
    () => {
      if (running && post({ type: "stop" })) requested = "stop";
      sync();
    },
    { signal },
  );
  cancel.addEventListener(
    "click",
    () => {
      if (running && post({ type: "cancel" })) requested = "cancel";
      sync();
    },
    { signal },
  );
  sendButton.addEventListener("click", sendFollowUp, { signal });
  for (const [button, type] of /** @type {const} */ ([
    [resume, "resume"],
    [restart, "restart"],
  ])) {
    button.addEventListener(
      "click",
      () => {
        if (post({ type })) {
          resume.disabled = restart.disabled = true;
        }
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

  /** @param {string} text */
  function showMessage(text) {
    message.replaceChildren(
      h("span", { class: "dagmagic-message-text" }, [text]),
      h("button", { type: "button", class: "dagmagic-message-close", title: "Dismiss", "aria-label": "Dismiss" }, [
        "×",
      ]),
    );
    message.hidden = false;
    requested = null; // the request may have failed: let the user try again
    sync();
  }
  message.addEventListener(
    "click",
    (event) => {
      if (/** @type {Element} */ (event.target).closest(".dagmagic-message-close")) {
        message.hidden = true;
        message.replaceChildren();
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
    if (!running) {
      requested = null;
      if (wasRunning) notice.hidden = true;
    }
    // Stop, Cancel and follow-ups are for a running run; once it ended, what can be done then
    row.hidden = !running;
    hint.hidden = running || !state.can_rerun;
    kept.hidden = state.status !== "cancelled";
    kept.textContent = state.status === "cancelled" ? keptText(state) : "";
    sync();
  }

  return { el, update, showMessage };
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
