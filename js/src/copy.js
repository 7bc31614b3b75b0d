// Copy buttons: the text goes to the clipboard, and the button says so for a moment. Where the browser gives no
// clipboard (an insecure origin, a refused permission), the text is selected instead, for the user's own copy.

import { h, log } from "./dom.js";

/** How long a button says "Copied" (ms). */
export const COPIED_FOR = 1500;

/**
 * A copy button (the caller handles its click with `copyText`).
 * @param {string} what  what it copies, for its title ("the answer")
 * @param {import("./dom.js").Attrs} [attrs]  which text it copies, for a delegated click handler
 * @returns {HTMLButtonElement}
 */
export function copyButton(what, attrs = {}) {
  return h(
    "button",
    {
      type: "button",
      class: "dagmagic-button dagmagic-copy",
      title: `Copy ${what}`,
      "aria-label": `Copy ${what}`,
      ...attrs,
    },
    ["Copy"],
  );
}

/**
 * Copies `text` to the clipboard; the button says "Copied" (or, without a clipboard, that the text is selected)
 * and goes back to "Copy" after a moment.
 * @param {HTMLButtonElement} button
 * @param {string} text
 * @param {Element | null | undefined} shown  the element showing the text: selected when the clipboard fails
 * @returns {Promise<boolean>} whether the text reached the clipboard
 */
export async function copyText(button, text, shown) {
  const clipboard = globalThis.navigator?.clipboard;
  let copied = false;
  if (clipboard && typeof clipboard.writeText === "function") {
    try {
      await clipboard.writeText(text);
      copied = true;
    } catch (err) {
      log.warn("could not copy to the clipboard", err);
    }
  }
  const selected = !copied && shown ? selectContents(shown) : false;
  button.textContent = copied ? "Copied" : selected ? "Selected" : "Not copied";
  button.setAttribute("data-copied", copied ? "true" : "false");
  button.title = copied
    ? "Copied to the clipboard"
    : selected
      ? "The browser gives no clipboard here: the text is selected, copy it with Ctrl+C (⌘C)"
      : "The browser gives no clipboard here: select the text and copy it";
  const title = button.getAttribute("aria-label") ?? "Copy";
  setTimeout(() => {
    button.textContent = "Copy";
    button.removeAttribute("data-copied");
    button.title = title;
  }, COPIED_FOR);
  return copied;
}

/**
 * Selects what `el` shows.
 * @param {Element} el
 * @returns {boolean}
 */
function selectContents(el) {
  try {
    const selection = globalThis.getSelection?.();
    if (!selection) return false;
    const range = document.createRange();
    range.selectNodeContents(el);
    selection.removeAllRanges();
    selection.addRange(range);
    return true;
  } catch {
    return false;
  }
}
