// A long text shown by its start, opening in place to the whole of it (a round's or a step's notes, which quote
// provider errors). A native <details>: it opens without a kernel, in a saved notebook too; its `data-open-key`
// lets the rounds keep it open across redraws (rounds.js records each toggle).

import { h } from "./dom.js";
import { formatInt } from "./format.js";

/** How much of a long text shows before it is opened. */
export const PREVIEW_CHARS = 300;

/**
 * The text as it is when short; else its start, "Show all (N more characters)", and the whole text once opened.
 * @param {string} text
 * @param {string} key  its `data-open-key`
 * @param {(key: string) => boolean | undefined} [isOpen]  whether the user left it open
 * @returns {Node | string}
 */
export function expandable(text, key, isOpen = () => undefined) {
  if (text.length <= PREVIEW_CHARS + 20) return text; // a few characters more are not worth a click
  const preview = `${text.slice(0, PREVIEW_CHARS)}…`;
  const more = text.length - PREVIEW_CHARS;
  return h("details", { class: "dagmagic-more", "data-open-key": key, open: Boolean(isOpen(key)) }, [
    h("summary", { title: `Show the whole text: ${formatInt(more)} more characters` }, [
      h("span", { class: "dagmagic-more-preview" }, [preview]),
      h("span", { class: "dagmagic-more-show" }, [` Show all (${formatInt(more)} more characters)`]),
      h("span", { class: "dagmagic-more-hide" }, ["Show less"]),
    ]),
    h("div", { class: "dagmagic-more-whole" }, [text]),
  ]);
}
