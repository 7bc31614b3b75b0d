// The answer: streamed Markdown, sanitized, its code blocks highlighted, with a note when it is partial (the
// user stopped the run), for a goal not reached, or a fallback rather than a synthesis, and a button that copies
// its Markdown.

import { copyButton, copyText } from "./copy.js";
import { h } from "./dom.js";
import { highlightCode, renderMarkdown } from "./markdown.js";

/** @typedef {import("./types.js").Traits} Traits */

/**
 * @param {{signal?: AbortSignal}} [options]  the render's signal, which removes the copy button's listener
 */
export function createAnswer({ signal } = {}) {
  const note = h("div", { class: "dagmagic-answer-fallback", hidden: true }, [
    "Fallback answer: the run did not synthesize one, so this is assembled from the step results.",
  ]);
  const partial = h("div", { class: "dagmagic-answer-partial", hidden: true }, [
    "Partial answer: the run was stopped before it finished, so this covers only the steps that completed.",
  ]);
  const unreached = h("div", { class: "dagmagic-answer-unreached", hidden: true }, [
    "Goal not reached: this answer is written from what the run completed, and says what is missing.",
  ]);
  const body = h("div", { class: "dagmagic-answer-body dagmagic-markdown" });
  const copy = copyButton("the answer (Markdown)");
  const el = h("section", { class: "dagmagic-answer", "aria-label": "Answer", hidden: true }, [
    h("div", { class: "dagmagic-answer-head" }, [h("h3", { class: "dagmagic-section-title" }, ["Answer"]), copy]),
    partial,
    unreached,
    note,
    body,
  ]);
  /** @type {string | null} */
  let shown = null;

  copy.addEventListener("click", () => void copyText(copy, shown ?? "", body), { signal });

  /** @param {Traits} state */
  function update(state) {
    el.hidden = !state.answer;
    note.hidden = !state.answer_fallback;
    partial.hidden = !state.answer_partial;
    unreached.hidden = !state.answer_unreached;
    el.classList.toggle("dagmagic-answer--streaming", state.status === "running" && Boolean(state.answer));
    if (state.answer !== shown) {
      shown = state.answer;
      renderMarkdown(body, state.answer);
      highlightCode(body);
    }
  }

  return { el, update };
}
