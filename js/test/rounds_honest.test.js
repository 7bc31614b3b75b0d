// What a round says about itself: a plan cut to plan_max_steps (in the round and beside the answer), what changed
// since the round it is compared with (steps matched by what they are, reused results as reused), and, during a
// long model call, the same phase as the header with what has arrived so far.

import { afterEach, describe, expect, it } from "vitest";
import { timelineOf } from "../src/timeline.js";
import { mount, nextRedraw, sampleState, unmountAll } from "./fixtures.js";

afterEach(unmountAll);

/**
 * @param {Element} root
 * @param {string} selector
 */
function one(root, selector) {
  const found = root.querySelector(selector);
  if (!found) throw new Error(`nothing matches ${selector}`);
  return /** @type {HTMLElement} */ (found);
}

/** The sample's second round, finished, with its plan cut from 14 steps to the 5 it shows. */
function cutState() {
  const state = sampleState();
  const round = state.rounds[1];
  for (const n of round.nodes) Object.assign(n, { status: "completed", retry_at: null, completed_at: state.now });
  round.plan_cut = { planned: 14, kept: 5, dropped: ["Check the <b>trend</b> again", "Write a summary"] };
  round.analysis = { achieved: true, confidence: 0.9, reasoning: "Both are known." };
  round.decision = { action: "synthesize", reason: "achieved" };
  Object.assign(state, { status: "done", phase: "finished", answer: "France has **68 million**." });
  return state;
}

describe("a plan cut to plan_max_steps", () => {
  it("is said in its round, in its title and beside the answer, with the setting that allows more", async () => {
    const { el } = mount(cutState());
    await nextRedraw();
    const round = one(el, '.dagmagic-round[data-round="2"]');
    expect(one(round, ".dagmagic-round-summary").textContent).toContain("5 of 14 planned steps");
    const banner = one(round, ".dagmagic-plan-cut");
    expect(banner.getAttribute("role")).toBe("note");
    expect(banner.textContent).toContain("The plan had 14 steps: only the first 5 ran.");
    expect(one(banner, "code").textContent).toBe("%dag config plan_max_steps=14");
    expect(banner.textContent).toContain("Check the <b>trend</b> again"); // the model's text, as text
    expect(banner.querySelector("b")).toBeNull();
    const answer = one(el, ".dagmagic-answer");
    const near = one(answer, ".dagmagic-answer-cut");
    expect(near.textContent).toContain("from 5 of the 14 steps planned in round 2");
    expect(one(near, "code").textContent).toBe("%dag config plan_max_steps=14");
    // before the answer's text, where it is read first
    const body = one(answer, ".dagmagic-answer-body");
    expect(near.compareDocumentPosition(body) & Node.DOCUMENT_POSITION_FOLLOWING).toBeTruthy();
  });

  it("says nothing when no plan was cut", async () => {
    const state = cutState();
    state.rounds[1].plan_cut = null;
    const { el } = mount(state);
    await nextRedraw();
    expect(el.querySelector(".dagmagic-plan-cut, .dagmagic-answer-cut:not([hidden])")).toBeNull();
    expect(one(el, '.dagmagic-round[data-round="2"] .dagmagic-round-summary').textContent).not.toContain("planned");
  });
});

describe("what changed since the round compared with", () => {
  it("names reused results as reused, renumbered steps by both ids, and what is really gone", async () => {
    const state = sampleState();
    state.rounds[1].diff_base = 1;
    state.rounds[1].diff = [
      { id: "a", change: "added", fields: [], round: 2, was: null },
      { id: "b", change: "changed", fields: ["result"], round: 2, was: "s2" },
      { id: "s1", change: "reused", fields: [], round: 1, was: null },
      { id: "s2", change: "removed", fields: [], round: 1, was: null },
    ];
    const { el } = mount(state);
    await nextRedraw();
    const items = [...el.querySelectorAll('.dagmagic-round[data-round="2"] .dagmagic-diff li')];
    expect(items.map((li) => li.textContent)).toEqual([
      "a added",
      "b (was s2) changed: result",
      "r1.s1 reused",
      "s2 removed",
    ]);
    const reused = one(el, '.dagmagic-diff li[data-change="reused"]');
    const link = one(reused, "button");
    expect([link.getAttribute("data-goto-round"), link.getAttribute("data-goto-step")]).toEqual(["1", "s1"]);
    expect(link.textContent).toBe("r1.s1");
  });
});

describe("a long model call", () => {
  /** Round 2's plan still streams: two steps arrived and ran, the plan call has 57 pieces so far. */
  function planningState() {
    const state = sampleState();
    const round = state.rounds[1];
    round.nodes = round.nodes.slice(0, 2);
    Object.assign(state, { phase: "planning", phase_since: state.now - 4 });
    state.live_calls = [
      { purpose: "plan", model: "m", round: 2, step_id: null, started_at: state.now - 4, tokens: 57, stream: true },
    ];
    return state;
  }

  it("shows the plan being written, in the same phase as the header, not a verdict", async () => {
    const { el } = mount(planningState());
    await nextRedraw();
    const round = one(el, '.dagmagic-round[data-round="2"]');
    expect(round.textContent).not.toContain("Judging");
    expect(one(round, ".dagmagic-plan-progress").textContent).toBe("Writing the plan: 2 steps so far · 57 tokens");
    expect(one(el, ".dagmagic-status").textContent).toMatch(/^planning… \d+s · 57 tokens$/);
  });

  it("says it waits for the model's first token, then counts what arrives", async () => {
    const state = planningState();
    state.rounds[1].nodes = [];
    state.live_calls[0].tokens = 0;
    const { el, model } = mount(state);
    await nextRedraw();
    const round = one(el, '.dagmagic-round[data-round="2"]');
    expect(one(round, ".dagmagic-planning").textContent).toBe("Planning round 2… waiting for the model's first token");
    model.set("live_calls", [{ ...state.live_calls[0], tokens: 212 }]);
    await nextRedraw();
    expect(one(el, ".dagmagic-planning").textContent).toBe("Planning round 2… 212 tokens so far");
    model.set("live_calls", [{ ...state.live_calls[0], tokens: 0, stream: false }]); // a plan asked for whole
    await nextRedraw();
    expect(one(el, ".dagmagic-planning").textContent).toBe("Planning round 2… waiting for the model's whole reply");
  });

  it("judges only while the run judges, counting the verdict's tokens", async () => {
    const state = sampleState();
    for (const n of state.rounds[1].nodes) Object.assign(n, { status: "completed", retry_at: null });
    Object.assign(state, { phase: "analyzing", phase_since: state.now - 2 });
    state.live_calls = [
      { purpose: "analyze", model: "m", round: 2, step_id: null, started_at: state.now - 2, tokens: 12 },
    ];
    const { el } = mount(state);
    await nextRedraw();
    expect(one(el, ".dagmagic-verdict").textContent).toBe("Judging the round… 12 tokens so far");
    expect(one(el, ".dagmagic-status").textContent).toMatch(/^judging… \d+s · 12 tokens$/);
  });

  it("says the answer is being written once the verdict writes it, as the header does", async () => {
    const state = sampleState();
    for (const n of state.rounds[1].nodes) Object.assign(n, { status: "completed", retry_at: null });
    Object.assign(state, { phase: "analyzing", phase_since: state.now - 2, answer: "France has" });
    state.live_calls = [
      { purpose: "analyze", model: "m", round: 2, step_id: null, started_at: state.now - 2, tokens: 40 },
    ];
    const { el } = mount(state);
    await nextRedraw();
    expect(one(el, ".dagmagic-verdict").textContent).toBe("Writing the answer… 40 tokens so far");
    expect(one(el, ".dagmagic-status").textContent).toMatch(/^writing the answer… \d+s · 40 tokens$/);
  });

  it("is drawn on the timeline up to now", () => {
    const state = /** @type {any} */ (sampleState());
    state.live_calls = [{ purpose: "plan", model: "m", round: 3, step_id: null, started_at: state.now - 3, tokens: 9 }];
    const { labels, bars, end } = timelineOf(state);
    const bar = bars.find((b) => b.kind === "call-running");
    expect(bar && labels[bar.row]).toBe("plan");
    expect(bar?.end).toBe(state.now);
    expect(end).toBe(state.now);
  });
});
