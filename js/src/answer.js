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
  // a plan cut to plan_max_steps: the answer comes from part of what was planned, which the user must know here
  const cut = h("div", { class: "dagmagic-answer-cut", role: "note", hidden: true });
  const body = h("div", { class: "dagmagic-answer-body dagmagic-markdown" });
  const copy = copyButton("the answer (Markdown)");
  const el = h("section", { class: "dagmagic-answer", "aria-label": "Answer", hidden: true }, [
    h("div", { class: "dagmagic-answer-head" }, [h("h3", { class: "dagmagic-section-title" }, ["Answer"]), copy]),
    partial,
    unreached,
    note,
    cut,
    body,
  ]);
  /** @type {string | null} */
  let shown = null;
  let shownCut = "";

  copy.addEventListener("click", () => void copyText(copy, shown ?? "", body), { signal });

  /** @param {Traits} state */
  function update(state) {
    el.hidden = !state.answer;
    note.hidden = !state.answer_fallback;
    partial.hidden = !state.answer_partial;
    unreached.hidden = !state.answer_unreached;
    const cuts = state.rounds.filter((round) => round.plan_cut);
    const key = JSON.stringify(cuts.map((round) => [round.index, round.plan_cut]));
    if (key !== shownCut) {
      shownCut = key;
      cut.replaceChildren(...cuts.map(cutLine));
      cut.hidden = !cuts.length;
    }
    el.classList.toggle("dagmagic-answer--streaming", state.status === "running" && Boolean(state.answer));
    if (state.answer !== shown) {
      shown = state.answer;
      renderMarkdown(body, state.answer);
      highlightCode(body);
    }
  }

  return { el, update };
}

/**
 * "This answer comes from 6 of the 14 steps planned in round 1 (plan_max_steps). To allow more: ..."
 * @param {import("./types.js").Round} round  one whose plan was cut
 */
function cutLine(round) {
  const { planned, kept } = /** @type {import("./types.js").PlanCut} */ (round.plan_cut);
  return h("p", {}, [
    `This answer comes from ${kept} of the ${planned} steps planned in round ${round.index} (plan_max_steps). `,
    "To allow more: ",
    h("code", {}, [`%dag config plan_max_steps=${planned}`]),
  ]);
}
