// The clocks that move between syncs (elapsed, running steps, the phase's seconds) and the trace's calls that
// open on a click. Fake timers throughout: the clock's timer, the redraw's frame and the browser clock.

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { answered, mount, mountView, sampleState, unmountAll } from "./fixtures.js";

/** Lets the coalesced redraw run (its animation frame, or the timer standing in for one). */
function frame() {
  vi.advanceTimersByTime(20);
}

/**
 * @param {Element} el
 * @param {string} selector
 */
function text(el, selector) {
  return el.querySelector(selector)?.textContent;
}

/**
 * @param {Element} el
 * @param {string} id
 */
function stepStats(el, id) {
  return text(el, `.dagmagic-round[data-round="2"] .dagmagic-node[data-step-id="${id}"] .dagmagic-node-stats`);
}

/** @param {Element} target */
function click(target) {
  target.dispatchEvent(new MouseEvent("click", { bubbles: true }));
}

beforeEach(() => {
  vi.useFakeTimers();
});

afterEach(() => {
  unmountAll();
  document.body.replaceChildren();
  vi.useRealTimers();
});

describe("clocks", () => {
  it("moves the elapsed time and running steps' times between syncs, redrawing only what shows time", () => {
    const { el, model } = mount();
    expect(text(el, ".dagmagic-total-elapsed")).toBe("elapsed 17s");
    expect(stepStats(el, "c")).toBe("2.8s");
    expect(stepStats(el, "d")).toBe("retry 3.0s");
    const earlierRound = el.querySelector('.dagmagic-round[data-round="1"]');
    const traceRow = el.querySelector(".dagmagic-trace tbody tr");
    const answer = el.querySelector(".dagmagic-answer");
    const goal = el.querySelector(".dagmagic-goal")?.firstChild;
    const reads = model.get.mock.calls.length;

    vi.advanceTimersByTime(3000);
    frame();
    expect(model.get.mock.calls.length).toBeGreaterThan(reads); // redrawn, with no new state
    expect(text(el, ".dagmagic-total-elapsed")).toBe("elapsed 20s");
    expect(stepStats(el, "c")).toBe("5.8s");
    expect(stepStats(el, "d")).toBe("retry 0.0s");
    expect(stepStats(el, "a")).toBe("2.0s · 1.8k tok"); // a finished step's time does not move
    // the rest is not rebuilt
    expect(el.querySelector('.dagmagic-round[data-round="1"]')).toBe(earlierRound);
    expect(el.querySelector(".dagmagic-trace tbody tr")).toBe(traceRow);
    expect(el.querySelector(".dagmagic-answer")).toBe(answer);
    expect(el.querySelector(".dagmagic-goal")?.firstChild).toBe(goal);

    // A sync sets the clock to Python's again, and it goes on from there.
    model.set("now", model.get("now") + 4);
    frame();
    expect(text(el, ".dagmagic-total-elapsed")).toBe("elapsed 21s");
    vi.advanceTimersByTime(1500); // the clock moves with the timer's ticks: by 1.48 s here
    frame();
    expect(text(el, ".dagmagic-total-elapsed")).toBe("elapsed 22s");
  });

  it("stops its timer when the run ends, starts it again for a new run, and stops it on cleanup", () => {
    const { el, model, cleanup } = mount();
    expect(vi.getTimerCount()).toBe(1);
    model.set("status", "done");
    model.set("phase", "finished");
    frame();
    expect(vi.getTimerCount()).toBe(0);
    const ended = text(el, ".dagmagic-total-elapsed");
    vi.advanceTimersByTime(5000);
    expect(text(el, ".dagmagic-total-elapsed")).toBe(ended); // an ended run's time stands

    model.set("status", "running"); // a re-run
    frame();
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(500);
    cleanup(); // with a redraw pending, too
    expect(vi.getTimerCount()).toBe(0);
  });

  it("does not tick for a detached or hidden view, nor for a run whose kernel died", () => {
    const { el, model } = mount();
    const reads = model.get.mock.calls.length;
    el.remove();
    vi.advanceTimersByTime(3000);
    frame();
    expect(model.get.mock.calls.length).toBe(reads);
    document.body.append(el);
    vi.advanceTimersByTime(500);
    frame();
    expect(text(el, ".dagmagic-total-elapsed")).toBe("elapsed 20s"); // 3.5 s later

    const older = mount({ ...sampleState(), run_id: "run-9" });
    const before = text(older.el, ".dagmagic-total-elapsed");
    const newer = mountView(older.model); // the cell's value: hides the live view
    vi.advanceTimersByTime(1000);
    frame();
    expect(text(older.el, ".dagmagic-total-elapsed")).toBe(before);
    expect(text(newer.el, ".dagmagic-total-elapsed")).toBe("elapsed 18s");

    unmountAll();
    const dead = mount({ ...sampleState(), resumable: true }); // read back, not moving
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(2000);
    expect(text(dead.el, ".dagmagic-total-elapsed")).toBe("elapsed 17s");
  });

  it("keeps the rounds still while the user selects text in them, and the header ticking", () => {
    const { el } = mount();
    const round = /** @type {Element} */ (el.querySelector('.dagmagic-round[data-round="2"]'));
    const range = document.createRange();
    range.selectNodeContents(/** @type {Node} */ (round.querySelector(".dagmagic-node-task")));
    document.getSelection()?.removeAllRanges();
    document.getSelection()?.addRange(range);
    vi.advanceTimersByTime(1000);
    frame();
    expect(el.querySelector('.dagmagic-round[data-round="2"]')).toBe(round);
    expect(stepStats(el, "c")).toBe("2.8s");
    expect(text(el, ".dagmagic-total-elapsed")).toBe("elapsed 18s");
    document.getSelection()?.removeAllRanges();
    vi.advanceTimersByTime(500);
    frame();
    expect(stepStats(el, "c")).toBe("4.3s");
  });

  it("shows the seconds in the current phase, ticking, outside the status's live region", () => {
    const state = sampleState();
    Object.assign(state, { phase: "planning", phase_since: state.now - 3 });
    const { el, model } = mount(state);
    const status = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-status"));
    const live = /** @type {HTMLElement} */ (status.querySelector('[role="status"]'));
    expect(status.textContent).toBe("planning… 3s");
    expect(live.textContent).toBe("planning…");
    const words = live.firstChild;
    vi.advanceTimersByTime(2000);
    frame();
    expect(status.textContent).toBe("planning… 5s");
    expect(live.firstChild).toBe(words); // the live region is not rewritten by the clock

    const now = model.get("now");
    for (const [phase, since, shown] of /** @type {const} */ ([
      ["analyzing", 12, "judging… 12s"],
      ["synthesizing", 2, "writing the answer… 2s"],
      ["awaiting_approval", 40, "waiting for your approval… 40s"],
      ["executing", 65, "running steps… 1m 05s"],
    ])) {
      model.set("phase", phase);
      model.set("phase_since", now - since);
      model.set("now", now); // the sync that carries the change
      frame();
      expect(status.textContent).toBe(shown);
      expect(status.getAttribute("data-phase")).toBe(phase);
    }

    model.set("status", "done");
    model.set("phase", "finished");
    frame();
    expect(status.textContent).toBe("done");
  });

  it("says a run the user stopped was stopped by them, once it ended", () => {
    const { el, model } = mount({ ...sampleState(), phase: "synthesizing", stopped_by_user: true });
    const status = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-status"));
    expect(status.textContent).toBe("writing the answer…"); // still running: what it does
    model.set("status", "done");
    model.set("phase", "finished");
    frame();
    expect(status.textContent).toBe("stopped by you");
    expect(status.getAttribute("data-status")).toBe("done");
    expect(status.hasAttribute("data-stopped")).toBe(true);
    model.set("stopped_by_user", false);
    frame();
    expect(status.textContent).toBe("done");
    expect(status.hasAttribute("data-stopped")).toBe(false);
    model.set("status", "failed");
    model.set("stopped_by_user", true);
    frame();
    expect(status.textContent).toBe("failed"); // a failure says so
  });

  it("says nothing about steps or judging in the header while the run plans", () => {
    const state = { ...sampleState(), phase: "planning", rounds: [], phase_since: sampleState().now - 1 };
    const { el } = mount(state);
    const header = /** @type {Element} */ (el.querySelector(".dagmagic-header"));
    expect(header.querySelector(".dagmagic-status")?.textContent).toBe("planning… 1s");
    expect(header.textContent).not.toMatch(/\d+ steps?\b|judging the round/i);
  });
});

const T0 = 1_700_000_000;

/** The sample run with its start, and its calls as Python sends them now: an index and a start each, listed
 * out of order. */
function traceState() {
  const state = sampleState();
  const [plan, s1, s2, analyze] = state.calls;
  return {
    ...state,
    started_at: T0,
    calls: [
      { ...analyze, index: 3, started_at: T0 + 9.5 },
      { ...s2, index: 2, started_at: T0 + 3.6 },
      { ...plan, index: 0, started_at: T0 + 0.2 },
      { ...s1, index: 1, started_at: T0 + 0.5 },
    ],
  };
}

/** @param {Element} el */
function traceRows(el) {
  return /** @type {HTMLElement[]} */ ([...el.querySelectorAll(".dagmagic-trace tbody > tr")]);
}

/**
 * @param {Element} el
 * @param {number} index
 */
function traceRow(el, index) {
  const row = el.querySelector(`.dagmagic-trace-row[data-index="${index}"]`);
  if (!(row instanceof HTMLElement)) throw new Error(`no trace row ${index}`);
  return row;
}

const DETAIL = {
  index: 2,
  messages: [
    { role: "system", content: "You are one step of a plan." },
    { role: "user", content: 'Task: compare\n\n<img src=x onerror="alert(1)">' },
  ],
  reply: "**not** <b>markup</b>",
  // as Python sends them: a model's tool call, its arguments the JSON text the model wrote
  tool_calls: [
    '{"id": "call_0", "name": "web_search", "arguments": "{\\"query\\": \\"<script>x</script>\\", \\"n\\": 3}"}',
  ],
  error: "timeout <i>after</i> 5s",
};

describe("trace", () => {
  it("lists the calls in the order they started, with their start from the run's", () => {
    const { el } = mount(traceState());
    const rows = traceRows(el);
    expect(rows.map((r) => r.getAttribute("data-index"))).toEqual(["0", "1", "2", "3"]);
    expect(rows.map((r) => r.classList.contains("dagmagic-trace-row"))).toEqual([true, true, true, true]);
    expect(rows.map((r) => text(r, ".dagmagic-trace-offset"))).toEqual(["+0.2s", "+0.5s", "+3.6s", "+9.5s"]);
    expect(rows.map((r) => r.children[1].textContent)).toEqual(["plan", "step", "step", "analyze"]);
    expect(text(el, ".dagmagic-trace thead tr")).toBe("startpurposemodelroundsteplevelretriesinoutlatencycost");
    expect(rows.map((r) => [r.tabIndex, r.getAttribute("role"), r.getAttribute("aria-expanded")])).toEqual(
      Array(4).fill([0, "button", "false"]),
    );
    expect(rows[2].classList.contains("dagmagic-trace-error")).toBe(true);
  });

  it("counts the calls per purpose in words, and says the latency is a sum", () => {
    const { el, model } = mount(traceState());
    const foot = () => [...el.querySelectorAll(".dagmagic-trace tfoot tr")].map((tr) => tr.children[0].textContent);
    expect(text(el, ".dagmagic-trace-totals-head")).toContain("latency (sum)");
    expect(foot()).toEqual([
      "per purpose",
      "analyze (1 call)",
      "plan (1 call)",
      "step (2 calls) · 1 failed",
      "all (4 calls) · 1 failed",
    ]);
    model.set("calls", [model.get("calls")[2]]);
    frame();
    expect(foot()).toEqual(["per purpose", "plan (1 call)", "all (1 call)"]);
    expect(text(el, ".dagmagic-trace-summary")).toBe("Trace: 1 LLM call · 500 in · 120 out · $0.0040");
  });

  it("opens a call on a click: asks Python once and shows what it sent and got back, as text", async () => {
    const { el, model } = mount(traceState());
    click(traceRow(el, 2));
    expect(model.requests()).toEqual([{ type: "call_detail", index: 2 }]);
    frame();
    const loading = /** @type {Element} */ (el.querySelector('.dagmagic-trace-detail[data-index="2"]'));
    expect(loading.previousElementSibling).toBe(traceRow(el, 2)); // right under its call
    expect(loading.textContent).toBe("Loading…");
    expect(traceRow(el, 2).getAttribute("aria-expanded")).toBe("true");

    model.answer({ value: DETAIL });
    await answered();
    frame();
    const detail = /** @type {Element} */ (el.querySelector('.dagmagic-trace-detail[data-index="2"]'));
    const messages = /** @type {HTMLDetailsElement[]} */ ([...detail.querySelectorAll(".dagmagic-trace-message")]);
    expect(messages.map((m) => m.tagName)).toEqual(["DETAILS", "DETAILS"]);
    expect(messages.map((m) => m.getAttribute("data-role"))).toEqual(["system", "user"]);
    expect(messages.map((m) => m.querySelector("summary")?.textContent?.split(" · ")[0])).toEqual(["system", "user"]);
    expect(messages[1].querySelector("pre")?.textContent).toBe(DETAIL.messages[1].content);
    expect(text(detail, ".dagmagic-trace-reply pre")).toBe("**not** <b>markup</b>");
    // the call's name, then its arguments pretty-printed as the step detail shows them (not escaped JSON)
    expect(text(detail, ".dagmagic-trace-tool-call .dagmagic-toolcall-name")).toBe("web_search");
    expect(text(detail, ".dagmagic-trace-tool-call pre")).toBe('{\n  "query": "<script>x</script>",\n  "n": 3\n}');
    expect(text(detail, ".dagmagic-trace-error")).toBe("error timeout <i>after</i> 5s");
    expect(detail.querySelector("img, b, i, script")).toBeNull();
  });

  it("keeps an opened call, its opened messages and the focus across redraws; a second click closes it", async () => {
    const { el, model } = mount(traceState());
    const row = traceRow(el, 2);
    row.focus();
    click(row);
    model.answer({ value: DETAIL });
    await answered();
    frame();
    const user = /** @type {HTMLDetailsElement} */ (
      el.querySelector('.dagmagic-trace-detail[data-index="2"] .dagmagic-trace-message[data-role="user"]')
    );
    user.open = true;

    // syncs: a new call, the clock, the run's totals
    model.set("calls", [...model.get("calls"), { ...sampleState().calls[0], index: 4, started_at: T0 + 12 }]);
    model.set("now", model.get("now") + 1);
    model.set("usage", { input_tokens: 1, output_tokens: 1, requests: 5, cost: null });
    vi.advanceTimersByTime(1000);
    frame();
    const rows = traceRows(el);
    expect(rows.map((r) => r.getAttribute("data-index"))).toEqual(["0", "1", "2", "2", "3", "4"]);
    expect(rows[3].classList.contains("dagmagic-trace-detail")).toBe(true);
    expect(/** @type {HTMLDetailsElement} */ (el.querySelector('.dagmagic-trace-message[data-role="user"]')).open).toBe(
      true,
    );
    expect(document.activeElement).toBe(traceRow(el, 2));

    click(traceRow(el, 2));
    frame();
    expect(el.querySelector(".dagmagic-trace-detail")).toBeNull();
    expect(traceRow(el, 2).getAttribute("aria-expanded")).toBe("false");
    click(traceRow(el, 2)); // open again: from what was fetched
    frame();
    expect(text(el, '.dagmagic-trace-detail[data-index="2"] .dagmagic-trace-reply pre')).toBe(DETAIL.reply);
    expect(model.requests()).toEqual([{ type: "call_detail", index: 2 }]);
  });

  it("opens a call with Enter, without the notebook seeing the key", () => {
    const { el, model } = mount(traceState());
    const outside = vi.fn();
    document.addEventListener("keydown", outside);
    const row = traceRow(el, 0);
    row.focus();
    const enter = new KeyboardEvent("keydown", { key: "Enter", bubbles: true, cancelable: true });
    row.dispatchEvent(enter);
    document.removeEventListener("keydown", outside);
    expect(enter.defaultPrevented).toBe(true);
    expect(outside).not.toHaveBeenCalled();
    expect(model.requests()).toEqual([{ type: "call_detail", index: 0 }]);
    expect(row.getAttribute("data-lm-suppress-shortcuts")).toBe("true");
  });

  it("says why Python refused a call's detail, there, and lets the user ask again", async () => {
    const { el, model } = mount(traceState());
    click(traceRow(el, 3));
    model.answer({ error: "there is no LLM call 3" });
    await answered();
    frame();
    expect(text(el, '.dagmagic-trace-detail[data-index="3"]')).toContain("Could not load this call");
    expect(text(el, '.dagmagic-trace-detail[data-index="3"]')).toContain("there is no LLM call 3");
    expect(el.querySelector(".dagmagic-controls .dagmagic-message")?.hasAttribute("hidden")).toBe(true); // not there
    click(traceRow(el, 3));
    click(traceRow(el, 3));
    expect(model.requests()).toEqual([
      { type: "call_detail", index: 3 },
      { type: "call_detail", index: 3 },
    ]);
  });

  it("lists an older kernel's calls as before: no start column, nothing to open", () => {
    const { el, model } = mount();
    expect(el.querySelector(".dagmagic-trace-offset")).toBeNull();
    expect(el.querySelector(".dagmagic-trace-row[data-index]")).toBeNull();
    click(traceRows(el)[0]);
    expect(model.requests()).toEqual([]);
  });
});
