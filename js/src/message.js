// A refusal from the kernel, shown where the user acted (the controls, the approval panel, a step's detail): its
// text, never HTML, and a button that dismisses it.

import { h } from "./dom.js";

/**
 * The message as an element, for a part that redraws it from its own state (a step's detail).
 * @param {string} text
 * @param {import("./dom.js").Attrs} [attrs]
 */
export function messageBox(text, attrs = {}) {
  return h("div", { class: "dagmagic-message", role: "alert", ...attrs }, [
    h("span", { class: "dagmagic-message-text" }, [text]),
    h("button", { type: "button", class: "dagmagic-message-close", title: "Dismiss", "aria-label": "Dismiss" }, ["×"]),
  ]);
}

/**
 * A place for one message that stays in the DOM (hidden while empty), for a part that keeps its elements.
 * @param {AbortSignal} signal
 */
export function createMessage(signal) {
  const el = h("div", { class: "dagmagic-message", role: "alert", hidden: true });

  /** @param {string} text */
  function show(text) {
    const box = messageBox(text);
    el.replaceChildren(...box.childNodes);
    el.hidden = false;
  }

  function clear() {
    el.hidden = true;
    el.replaceChildren();
  }

  el.addEventListener(
    "click",
    (event) => {
      if (/** @type {Element} */ (event.target).closest(".dagmagic-message-close")) clear();
    },
    { signal },
  );
  return { el, show, clear };
}
