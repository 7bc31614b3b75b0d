// "What if this step had said…": a completed step's detail in an ended run offers an editable copy of its result
// and "Continue with this result", which sends `what_if`; the round it makes says it continued with the result edited
// by you, the edited step is marked so in its box and its detail, and the round offers to compare with the one it
// continued from. Everything the model wrote stays text.

import { afterEach, describe, expect, it, vi } from "vitest";
import { answered, fakeModel, mount, mountView, nextRedraw, rerunState, unmountAll } from "./fixtures.js";

afterEach(() => {
  unmountAll();
  document.body.replaceChildren();
  vi.restoreAllMocks();
});

/** An ended run of two rounds: round 2's steps completed, the run can re-run. */
function endedState() {
  const state = rerunState();
  return { ...state, rounds: state.rounds.slice(0, 2) };
}

/**
 * Round 3 as Python sends it once it took "c had said `text`": c's result is the user's, e (which needs c) ran
 * again, the others are carried over from round 2.
 * @param {any} state
 * @param {string} text
 */
function whatIfRound(state, text) {
  const round2 = state.rounds[1];
  return {
    ...structuredClone(round2),
    index: 3,
    rerun_of: 2,
    rerun_step: "c",
    what_if: true,
    nodes: round2.nodes.map((/** @type {any} */ n) =>
      n.id === "c"
        ? {
            ...n,
            result: text,
            edited: true,
            model: "openai/gpt-4o",
            input_tokens: 0,
            output_tokens: 0,
            reused_from: null,
          }
        : n.id === "e"
          ? { ...n, result: "Result of e, again", model: "openai/gpt-4o", reused_from: null }
          : { ...n, reused_from: 2 },
    ),
    diff: [
      { id: "c", change: "changed", fields: ["result"], round: 3, was: null },
      { id: "e", change: "changed", fields: ["result"], round: 3, was: null },
    ],
  };
}

/**
 * @param {Element} el
 * @param {string} id
 * @param {number} round
 */
function nodeEl(el, id, round) {
  const found = el.querySelector(`.dagmagic-round[data-round="${round}"] .dagmagic-node[data-step-id="${id}"]`);
  if (!found) throw new Error(`no node ${id} in round ${round}`);
  return found;
}

/**
 * @param {Element} el
 * @param {string} id
 * @param {number} round
 */
async function openDetail(el, id, round) {
  nodeEl(el, id, round).dispatchEvent(new MouseEvent("click", { bubbles: true }));
  await nextRedraw();
  const detail = el.querySelector(`.dagmagic-round[data-round="${round}"] .dagmagic-detail`);
  if (!detail) throw new Error("no detail");
  return detail;
}

describe("what if this step had said…", () => {
  it("offers an editable copy of a completed step's result and sends what the user wrote", async () => {
    const { el, model } = mount(endedState());
    const detail = await openDetail(el, "c", 2);
    const box = detail.querySelector(".dagmagic-whatif-box");
    expect(box?.querySelector("h4")?.textContent).toBe("What if c had said…");
    const area = /** @type {HTMLTextAreaElement} */ (box?.querySelector("textarea.dagmagic-whatif-result"));
    expect(area.value).toBe("Result of c");
    const button = /** @type {HTMLButtonElement} */ (box?.querySelector(".dagmagic-whatif"));
    expect(button.textContent).toBe("Continue with this result");
    expect(button.disabled).toBe(false);

    area.value = "";
    area.dispatchEvent(new Event("input", { bubbles: true }));
    expect(button.disabled).toBe(true); // nothing to continue with
    area.value = "The ratio is 2.00";
    area.dispatchEvent(new Event("input", { bubbles: true }));
    expect(button.disabled).toBe(false);
    await nextRedraw(); // a redraw keeps what was typed
    const again = /** @type {HTMLTextAreaElement} */ (el.querySelector(".dagmagic-whatif-result"));
    expect(again.value).toBe("The ratio is 2.00");

    /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-whatif")).click();
    expect(model.lastRequest()).toEqual({ type: "what_if", step: "c", result: "The ratio is 2.00" });
    await nextRedraw();
    expect(/** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-whatif")).disabled).toBe(true); // waits

    model.answer();
    await answered();
    const state = endedState();
    model.set("status", "running");
    model.set("can_rerun", false);
    model.set("rounds", [...state.rounds, whatIfRound(state, "The ratio is 2.00")]);
    await nextRedraw();
    const followed = el.querySelector(".dagmagic-detail"); // the detail follows c into the new round
    expect(followed?.closest(".dagmagic-round")?.getAttribute("data-round")).toBe("3");
    expect(followed?.querySelector(".dagmagic-whatif-box")).toBeNull(); // running: nothing to continue
  });

  it("prefills a result Python cut with what it shows, and says Show all loads the whole first", async () => {
    const state = endedState();
    state.rounds[1].nodes[2] = { ...state.rounds[1].nodes[2], result: "The start of c… (1200 more characters)" };
    const { el } = mount(state);
    const detail = await openDetail(el, "c", 2);
    const area = /** @type {HTMLTextAreaElement} */ (detail.querySelector(".dagmagic-whatif-result"));
    expect(area.value).toBe("The start of c"); // not the note of what was cut
    expect(detail.querySelector(".dagmagic-whatif-hint")?.textContent).toContain(
      "The result above is cut: Show all loads the whole of it first.",
    );
  });

  it("is offered only for a completed step of the latest round of a run that can re-run", async () => {
    const running = { ...endedState(), status: "running", can_rerun: false };
    const { el } = mount(running);
    const detail = await openDetail(el, "c", 2);
    expect(detail.querySelector(".dagmagic-whatif-box")).toBeNull();
    unmountAll();

    const state = endedState();
    state.rounds[1].nodes[2] = { ...state.rounds[1].nodes[2], status: "failed", result: null, error: "boom" };
    const second = mount(state);
    const failed = await openDetail(second.el, "c", 2);
    expect(failed.querySelector(".dagmagic-whatif-box")).toBeNull();
    expect(failed.querySelector(".dagmagic-rerun-box")).not.toBeNull(); // a failed step can still be re-run
  });

  it("shows Python's refusal under the box and lets the user try again", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { el, model } = mount(endedState());
    await openDetail(el, "c", 2);
    /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-whatif")).click();
    model.answer({ error: "a step's result can be edited once the run has ended" });
    await answered();
    await nextRedraw();
    const box = el.querySelector(".dagmagic-whatif-box");
    expect(box?.querySelector(".dagmagic-message-text")?.textContent).toBe(
      "a step's result can be edited once the run has ended",
    );
    expect(el.querySelector(".dagmagic-rerun-box .dagmagic-message")).toBeNull(); // said where the user acted
    expect(/** @type {HTMLButtonElement} */ (box?.querySelector(".dagmagic-whatif")).disabled).toBe(false);
  });

  it("marks the edited step in its box, its detail and the round's title, and keeps the model's text inert", async () => {
    const state = endedState();
    const hostile = '<img src=x onerror="window.pwned=1"> **bold**';
    const { el } = mount({ ...state, rounds: [...state.rounds, whatIfRound(state, hostile)] });
    await nextRedraw();
    const round = el.querySelector('.dagmagic-round[data-round="3"]');
    const label = round?.querySelector(".dagmagic-rerun-label");
    expect(label?.textContent).toBe("continued from round 2 with c's result edited by you");
    expect(label?.getAttribute("data-what-if")).toBe("true");

    const box = nodeEl(el, "c", 3);
    expect(box.classList.contains("dagmagic-node--edited")).toBe(true);
    expect(box.getAttribute("data-edited")).toBe("true");
    expect(box.querySelector(".dagmagic-badge-edited")?.textContent).toBe("edited by you");
    expect(box.getAttribute("aria-label")).toContain("result edited by you");
    expect(box.querySelector(".dagmagic-badge-model")).toBeNull(); // no model wrote it
    expect(nodeEl(el, "e", 3).querySelector(".dagmagic-badge-model")).not.toBeNull(); // a model ran it
    expect(nodeEl(el, "e", 3).querySelector(".dagmagic-badge-edited")).toBeNull(); // it ran again: a model's result
    expect(nodeEl(el, "e", 3).classList.contains("dagmagic-node--reused")).toBe(false);
    expect(nodeEl(el, "a", 3).classList.contains("dagmagic-node--reused")).toBe(true);

    const detail = await openDetail(el, "c", 3);
    expect(detail.querySelector(".dagmagic-edited-pill")?.textContent).toBe("result edited by you");
    expect(detail.querySelector(".dagmagic-detail-result-head h4")?.textContent).toBe("Result (edited by you)");
    expect(box.querySelector(".dagmagic-node-stats")).toBeNull(); // it did not run: no time, no tokens
    expect(round?.querySelector('.dagmagic-diff li[data-step-id="c"]')?.textContent).toBe(
      "c changed: result (edited by you)",
    );
    expect(round?.querySelector('.dagmagic-diff li[data-step-id="e"]')?.textContent).toBe("e changed: result");
    expect(detail.querySelector(".dagmagic-detail-result img")).toBeNull();
    const model = [...detail.querySelectorAll("dt")].find((dt) => dt.textContent === "Model");
    expect(model?.nextElementSibling?.textContent).toBe("none: the result edited by you");
    const status = [...detail.querySelectorAll("dt")].find((dt) => dt.textContent === "Status");
    expect(status?.nextElementSibling?.textContent).toBe("completed · result edited by you");
    expect(/** @type {any} */ (window).pwned).toBeUndefined();
    const area = /** @type {HTMLTextAreaElement} */ (detail.querySelector(".dagmagic-whatif-result"));
    expect(area.value).toBe(hostile); // as text, to edit again
    expect(detail.querySelector(".dagmagic-whatif-box img")).toBeNull();
  });

  it("offers to compare a what-if round with the round it continued from, and shows the comparison", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const state = endedState();
    const { el, model } = mount({ ...state, rounds: [...state.rounds, whatIfRound(state, "2.00")] });
    await nextRedraw();
    expect(el.querySelectorAll(".dagmagic-compare-rounds")).toHaveLength(1); // the what-if round's only
    const button = /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-compare-rounds"));
    expect(button.closest(".dagmagic-round")?.getAttribute("data-round")).toBe("3");
    expect(button.textContent).toBe("Compare with round 2");

    button.click();
    expect(model.lastRequest()).toEqual({ type: "compare_rounds", a: 2, b: 3 });
    await nextRedraw();
    expect(/** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-compare-rounds")).disabled).toBe(true);
    model.answer({ error: "comparing rounds needs dagmagic.compare" });
    await answered();
    await nextRedraw();
    const refusal = el.querySelector(".dagmagic-diff-wrap .dagmagic-message-text");
    expect(refusal?.textContent).toBe("comparing rounds needs dagmagic.compare");
    /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-diff-wrap .dagmagic-message-close")).click();
    await nextRedraw();
    expect(el.querySelector(".dagmagic-diff-wrap .dagmagic-message")).toBeNull();

    /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-compare-rounds")).click();
    model.answer({
      value: { a: 2, b: 3, markdown: "| step | round 2 | round 3 |\n|---|---|---|\n| c | 1.24 | 2.00 |" },
    });
    await answered();
    await nextRedraw();
    const shown = el.querySelector(".dagmagic-comparison");
    expect(shown?.querySelector("summary")?.textContent).toBe("Round 2 beside round 3");
    expect(shown?.querySelector("table td:last-child")?.textContent).toBe("2.00");
  });

  it("draws the compare widget Python opened under the round through the host, and closes it", async () => {
    const state = endedState();
    const model = fakeModel({ ...state, rounds: [...state.rounds, whatIfRound(state, "2.00")] });
    /** @type {AbortSignal[]} */
    const signals = [];
    const rendered = vi.fn(async (/** @type {{el: HTMLElement, signal: AbortSignal}} */ { el: into, signal }) => {
      signals.push(signal);
      into.append(
        Object.assign(document.createElement("div"), {
          className: "dagmagic-compare-view",
          textContent: "the compare view",
        }),
      );
    });
    const host = { getWidget: vi.fn(async () => ({ render: rendered })) };
    const { el } = mountView(model, host);
    await nextRedraw();
    /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-compare-rounds")).click();
    expect(model.lastRequest()).toEqual({ type: "compare_rounds", a: 2, b: 3 });
    // Python opens the compare widget (the traits), then answers; the Markdown is not drawn
    model.set("comparison", "anywidget:compare-1");
    model.set("comparison_round", 3);
    model.set("comparison_label", "round 2 vs round 3");
    model.answer({ value: { a: 2, b: 3, markdown: "| c | 1.24 | 2.00 |" } });
    await answered();
    await nextRedraw();
    await answered();
    expect(host.getWidget).toHaveBeenCalledWith("anywidget:compare-1");
    const round3 = /** @type {HTMLElement} */ (el.querySelector('.dagmagic-round[data-round="3"]'));
    const box = /** @type {HTMLElement} */ (round3.querySelector(".dagmagic-comparison--widget"));
    expect(box.querySelector(".dagmagic-comparison-head")?.textContent).toContain("Comparing round 2 vs round 3");
    expect(box.querySelector(".dagmagic-comparison-slot .dagmagic-compare-view")?.textContent).toBe("the compare view");
    expect(el.querySelector("details.dagmagic-comparison")).toBeNull(); // no Markdown beside it
    expect(el.querySelector('.dagmagic-round[data-round="2"] .dagmagic-comparison')).toBeNull();

    // the round drawn again (a step selected): the same view moves into the new section, not drawn anew
    /** @type {HTMLElement} */ (round3.querySelector('.dagmagic-node[data-step-id="c"]')).dispatchEvent(
      new MouseEvent("click", { bubbles: true }),
    );
    await nextRedraw();
    expect(
      el.querySelector('.dagmagic-round[data-round="3"] .dagmagic-comparison-slot .dagmagic-compare-view'),
    ).not.toBeNull();
    expect(host.getWidget).toHaveBeenCalledTimes(1);
    // clicks inside the compare view are its own: no step of the run is selected by them
    const requests = model.requests().length;
    /** @type {HTMLElement} */ (el.querySelector(".dagmagic-compare-view")).click();
    expect(model.requests()).toHaveLength(requests);

    /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-comparison-close")).click();
    expect(model.lastRequest()).toEqual({ type: "close_comparison" });
    model.answer({ value: null });
    model.set("comparison", null);
    model.set("comparison_round", 0);
    await answered();
    await nextRedraw();
    expect(el.querySelector(".dagmagic-comparison")).toBeNull();
    expect(signals[0].aborted).toBe(true); // the compare view was told to clean up
  });

  it("keeps the compare view's cleanup to the view: unmounting the run's view aborts it", async () => {
    const state = endedState();
    const model = fakeModel({
      ...state,
      rounds: [...state.rounds, whatIfRound(state, "2.00")],
      comparison: "anywidget:compare-2",
      comparison_round: 3,
      comparison_label: "round 2 vs round 3",
    });
    /** @type {AbortSignal[]} */
    const signals = [];
    const host = {
      getWidget: async () => ({ render: async (/** @type {any} */ { signal }) => void signals.push(signal) }),
    };
    const { cleanup } = mountView(model, host);
    await nextRedraw();
    await answered();
    expect(signals).toHaveLength(1);
    cleanup();
    expect(signals[0].aborted).toBe(true);
  });
});
