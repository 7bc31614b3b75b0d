// What a re-run started from a step's detail shows: the detail follows the step into the new round, which is
// scrolled into view; the steps the new round carried over look reused; the elapsed time leaves out the wait
// before the click.

import { afterEach, describe, expect, it, vi } from "vitest";
import { runElapsed } from "../src/state.js";
import { answered, mount, nextRedraw, rerunState, unmountAll } from "./fixtures.js";

afterEach(() => {
  unmountAll();
  document.body.replaceChildren();
  vi.restoreAllMocks();
});

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

/** An ended run of two rounds (round 3 of rerunState left out): step c of round 2 can be re-run. */
function endedState() {
  const state = rerunState();
  return { ...state, rounds: state.rounds.slice(0, 2) };
}

/**
 * Round 3 as Python sends it once it took the re-run of round 2's c: c and e (which needs c) run again, the
 * others are carried over from round 2.
 * @param {any} state
 */
function rerunRound(state) {
  const round2 = state.rounds[1];
  const ran = new Set(["c", "e"]);
  return {
    ...structuredClone(round2),
    index: 3,
    rerun_of: 2,
    rerun_step: "c",
    nodes: round2.nodes.map((/** @type {any} */ n) =>
      ran.has(n.id)
        ? { ...n, status: "pending", result: null, started_at: null, completed_at: null, reused_from: null }
        : { ...n, reused_from: 2 },
    ),
    analysis: null,
    decision: null,
    diff: [],
  };
}

describe("re-run feedback", () => {
  it("follows the re-run step into its new round, scrolled into view, the old round folded", async () => {
    const scrolled = vi.fn();
    Element.prototype.scrollIntoView = scrolled;
    const { el, model } = mount(endedState());
    nodeEl(el, "c", 2).dispatchEvent(new MouseEvent("click", { bubbles: true }));
    await nextRedraw();
    expect(el.querySelector('.dagmagic-round[data-round="2"] .dagmagic-detail')?.getAttribute("data-step-id")).toBe(
      "c",
    );
    /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-detail .dagmagic-rerun")).click();
    model.answer();
    await answered();
    const state = endedState();
    model.set("status", "running");
    model.set("can_rerun", false);
    model.set("rounds", [...state.rounds, rerunRound(state)]);
    await nextRedraw();

    const detail = el.querySelector(".dagmagic-detail");
    expect(detail?.closest(".dagmagic-round")?.getAttribute("data-round")).toBe("3"); // the new run of c
    expect(detail?.getAttribute("data-step-id")).toBe("c");
    expect(el.querySelector('.dagmagic-round[data-round="2"]')?.getAttribute("data-expanded")).toBe("false");
    expect(scrolled).toHaveBeenCalledTimes(1);
    expect(scrolled.mock.contexts[0]).toBe(el.querySelector('.dagmagic-round[data-round="3"]'));

    model.set("rounds", [...state.rounds, { ...rerunRound(state), warnings: ["a later sync"] }]);
    await nextRedraw();
    expect(scrolled).toHaveBeenCalledTimes(1); // once: the user may scroll away meanwhile
  });

  it("leaves the view as it is when Python refuses the re-run", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const scrolled = vi.fn();
    Element.prototype.scrollIntoView = scrolled;
    const { el, model } = mount(endedState());
    nodeEl(el, "c", 2).dispatchEvent(new MouseEvent("click", { bubbles: true }));
    await nextRedraw();
    /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-detail .dagmagic-rerun")).click();
    model.answer({ error: "a step can be re-run once the run has ended" });
    await answered();
    await nextRedraw();
    expect(el.querySelector('.dagmagic-round[data-round="2"] .dagmagic-detail')?.getAttribute("data-step-id")).toBe(
      "c",
    );
    expect(scrolled).not.toHaveBeenCalled();
  });

  it("marks the steps a re-run carried over as reused, apart from those it ran again", async () => {
    const state = endedState();
    const { el } = mount({ ...state, rounds: [...state.rounds, rerunRound(state)] });
    await nextRedraw();
    const reused = nodeEl(el, "a", 3);
    expect(reused.classList.contains("dagmagic-node--reused")).toBe(true);
    expect(reused.getAttribute("data-reused-from")).toBe("2");
    expect(reused.querySelector(".dagmagic-badge-reused")?.textContent).toBe("reused");
    expect(reused.getAttribute("aria-label")).toContain("reused from round 2");
    const again = nodeEl(el, "c", 3);
    expect(again.classList.contains("dagmagic-node--reused")).toBe(false);
    expect(again.hasAttribute("data-reused-from")).toBe(false);
    expect(again.querySelector(".dagmagic-badge-reused")).toBeNull();
  });

  it("counts the time the run ran, not the time it stood ended before a re-run", () => {
    const state = /** @type {any} */ ({ ...rerunState(), started_at: 1000, now: 1100, idle: 60, rounds: [] });
    expect(runElapsed(state)).toBe(40);
    expect(runElapsed({ ...state, idle: 0 })).toBe(100);
  });
});
