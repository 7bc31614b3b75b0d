// Honest feedback (why a step was skipped, planning, what the controls offer once the run ended) and reading the
// results (whole texts on request, copy buttons, highlighted code, headings, the verdict in words, the open step
// across the live view and Out[n]).

import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { renderVerdict } from "../src/verdict.js";
import {
  answered,
  mount,
  mountView,
  nextRedraw,
  pausedState,
  rerunState,
  sampleState,
  unmountAll,
} from "./fixtures.js";

const view = mountView;

/** @param {Element} target */
function click(target) {
  target.dispatchEvent(new MouseEvent("click", { bubbles: true }));
}

/**
 * @param {Element} root
 * @param {string} selector
 */
function one(root, selector) {
  const found = root.querySelector(selector);
  if (!found) throw new Error(`nothing matches ${selector}`);
  return /** @type {HTMLElement} */ (found);
}

/**
 * Opens a step's detail by clicking its box.
 * @param {Element} el
 * @param {string} id
 * @param {number} [round]
 */
async function open(el, id, round = 2) {
  click(one(el, `.dagmagic-round[data-round="${round}"] .dagmagic-node[data-step-id="${id}"]`));
  await nextRedraw();
  return one(el, ".dagmagic-detail");
}

/** Lets a click's promise (the clipboard's) settle. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

/** @param {any} clipboard */
function setClipboard(clipboard) {
  Object.defineProperty(window.navigator, "clipboard", { value: clipboard, configurable: true });
}

beforeEach(() => {
  vi.spyOn(console, "debug").mockImplementation(() => {});
});

afterEach(() => {
  unmountAll();
  document.body.replaceChildren();
  // @ts-ignore: jsdom has no clipboard of its own
  delete window.navigator.clipboard;
});

describe("why a step did not run", () => {
  it("shows a skipped or cancelled step's reason in neutral words; only a failed step has a red Error", async () => {
    const state = sampleState();
    const [, , c, d, e] = state.rounds[1].nodes;
    Object.assign(e, { status: "skipped", error: "a dependency (d) failed" });
    Object.assign(d, { status: "cancelled", error: "the user cancelled the run" });
    Object.assign(c, { status: "failed", error: "provider timeout" });
    const { el } = mount(state);

    let detail = await open(el, "e");
    expect(detail.querySelector(".dagmagic-detail-error")).toBeNull();
    let reason = one(detail, ".dagmagic-detail-reason");
    expect(reason.textContent).toBe("a dependency (d) failed");
    expect(reason.closest("dd")?.previousElementSibling?.textContent).toBe("Why skipped");
    expect([...detail.querySelectorAll("dt")].map((dt) => dt.textContent)).not.toContain("Error");

    detail = await open(el, "d");
    reason = one(detail, ".dagmagic-detail-reason");
    expect(reason.textContent).toBe("the user cancelled the run");
    expect(reason.closest("dd")?.previousElementSibling?.textContent).toBe("Why cancelled");
    expect(detail.querySelector(".dagmagic-detail-error")).toBeNull();

    detail = await open(el, "c");
    expect(one(detail, ".dagmagic-detail-error").textContent).toBe("provider timeout");
    expect(one(detail, ".dagmagic-detail-error").closest("dd")?.previousElementSibling?.textContent).toBe("Error");
    expect(detail.querySelector(".dagmagic-detail-reason")).toBeNull();
  });
});

describe("why a step has no result", () => {
  it("says it in the Result section: the error, why it was skipped or cancelled, or that it has not run", async () => {
    const state = sampleState();
    const [a, , c, d, e] = state.rounds[1].nodes;
    Object.assign(e, { status: "skipped", error: "Skipped — you stopped the run", result: null });
    Object.assign(d, { status: "cancelled", error: "Cancelled before it started", result: null });
    Object.assign(c, { status: "failed", error: "TimeoutError: timed out after 600s\nat line 3", result: null });
    Object.assign(a, { status: "pending", error: null, result: null, tool_calls: [] });
    const { el } = mount(state);
    /** @param {string} id */
    const none = async (id) => one(await open(el, id), ".dagmagic-detail-no-result").textContent;

    expect(await none("e")).toBe("No result: the step was skipped — you stopped the run.");
    expect(await none("d")).toBe("No result: the step was cancelled before it started.");
    expect(await none("c")).toBe("No result: the step failed — TimeoutError: timed out after 600s");
    expect(await none("a")).toBe("No result yet: the step has not run.");
    expect(el.textContent).not.toContain("No result yet.");
  });
});

describe("planning", () => {
  /** A running run planning its round `index`, whose record has no steps yet. */
  function planningState(index = 3) {
    const state = sampleState();
    state.phase = "planning";
    const done = state.rounds[1];
    for (const n of done.nodes) Object.assign(n, { status: "completed", completed_at: state.now });
    done.analysis = { achieved: false, confidence: 0.4, reasoning: "The ratio is missing." };
    done.decision = { action: "replan", reason: "Compute the ratio." };
    const empty = { ...structuredClone(done), index, nodes: [], edges: [], analysis: null, decision: null };
    state.rounds = index === 1 ? [{ ...empty, index: 1 }] : [state.rounds[0], done, empty];
    return state;
  }

  it("says which round it plans while the latest round has no steps, never '0 steps · No steps · Judging'", async () => {
    const { el, model } = mount(planningState(3));
    const rounds = one(el, ".dagmagic-rounds");
    const latest = one(rounds, '.dagmagic-round[data-round="3"]');
    expect(one(latest, ".dagmagic-planning").textContent).toBe("Planning round 3…");
    for (const text of ["0 steps", "No steps", "Judging the round"]) expect(rounds.textContent).not.toContain(text);

    // the steps arrive: the graph replaces the message
    const full = sampleState().rounds[1];
    const rounds2 = structuredClone(model.get("rounds"));
    rounds2[2] = { ...full, index: 3 };
    model.set("rounds", rounds2);
    model.set("phase", "executing");
    await nextRedraw();
    const now = one(el, '.dagmagic-round[data-round="3"]');
    expect(now.querySelector(".dagmagic-planning")).toBeNull();
    expect(now.querySelector("svg.dagmagic-graph")).not.toBeNull();
  });

  it("says it plans the first steps, with an empty first round or none at all", () => {
    const { el } = mount(planningState(1));
    expect(one(el, ".dagmagic-planning").textContent).toBe("Planning the first steps…");
    expect(one(el, ".dagmagic-rounds").textContent).not.toContain("0 steps");
    const none = mount({ ...sampleState(), phase: "planning", rounds: [] });
    expect(one(none.el, ".dagmagic-planning").textContent).toBe("Planning the first steps…");
  });
});

describe("controls once the run ended", () => {
  it("trades Stop, Cancel and the follow-up for a re-run hint, and keeps the resume offer", async () => {
    const { el, model } = mount();
    const row = one(el, ".dagmagic-controls-row");
    const hint = one(el, ".dagmagic-rerun-hint");
    expect(row.hidden).toBe(false);
    expect(hint.hidden).toBe(true);

    model.set("status", "done");
    model.set("can_rerun", true);
    await nextRedraw();
    expect(row.hidden).toBe(true);
    expect(hint.hidden).toBe(false);
    expect(hint.textContent).toBe(
      "Open a step to re-run it with another task, or to go on as if it had said something else.",
    );
    expect(one(el, ".dagmagic-cancelled-note").hidden).toBe(true);

    model.set("can_rerun", false);
    model.set("status", "failed");
    model.set("resumable", true);
    await nextRedraw();
    expect(hint.hidden).toBe(true);
    expect(one(el, ".dagmagic-resume-offer").hidden).toBe(false);
    expect(row.hidden).toBe(true);
  });

  it("says what a cancelled run kept, over its latest round's steps", async () => {
    const state = sampleState();
    state.rounds[1].nodes[2].status = "completed"; // a, b, c of five
    const { el, model } = mount(state);
    const note = one(el, ".dagmagic-cancelled-note");
    expect(note.hidden).toBe(true);
    model.set("status", "cancelled");
    model.set("resumable", true);
    await nextRedraw();
    expect(note.hidden).toBe(false);
    expect(note.textContent).toBe("Cancelled: 3 of 5 steps had completed; their results are kept.");
    expect(one(el, ".dagmagic-resume-offer").hidden).toBe(false);
    expect(one(el, ".dagmagic-controls-row").hidden).toBe(true);

    const rounds = structuredClone(model.get("rounds"));
    for (const n of rounds[1].nodes) n.status = n.id === "a" ? "completed" : "cancelled";
    model.set("rounds", rounds);
    model.set("status", "running");
    await nextRedraw();
    expect(note.hidden).toBe(true);
    model.set("status", "cancelled");
    await nextRedraw();
    expect(note.textContent).toBe("Cancelled: 1 of 5 steps had completed; its result is kept.");
  });
});

describe("long notes of a round and of a step", () => {
  const long = `The verdict could not be read: litellm.APIConnectionError: ${"connection refused; ".repeat(24)}the end.`;

  it("show their start, and open in place to the whole text, still open after the round is drawn again", async () => {
    const state = sampleState();
    state.rounds[1].warnings = [long, "s9 depended on nothing known: dropped"];
    state.rounds[1].nodes[0].warnings = [long];
    const { el, model } = mount(state);
    await nextRedraw();
    const notes = () => [...el.querySelectorAll('.dagmagic-round[data-round="2"] .dagmagic-round-warnings > li')];
    const [first, second] = notes();
    expect(second.textContent).toBe("s9 depended on nothing known: dropped"); // short: as it is
    expect(second.querySelector("details")).toBeNull();
    let more = /** @type {HTMLDetailsElement} */ (one(first, "details.dagmagic-more"));
    expect(more.open).toBe(false);
    const shown = one(more, ".dagmagic-more-preview").textContent ?? "";
    expect(long.startsWith(shown.replace(/…$/, ""))).toBe(true);
    expect(shown.length).toBeLessThan(long.length);
    expect(one(more, "summary").textContent).toContain(`Show all (${long.length - shown.length + 1} more characters)`);
    expect(one(more, ".dagmagic-more-whole").textContent).toBe(long);
    more.open = true;
    more.dispatchEvent(new Event("toggle"));

    state.rounds[1].analysis = { achieved: false, confidence: 0.5, reasoning: "Judged again." };
    model.set("rounds", structuredClone(state.rounds));
    await nextRedraw();
    more = /** @type {HTMLDetailsElement} */ (one(notes()[0], "details.dagmagic-more"));
    expect(more.open).toBe(true); // the round was drawn anew: what the user opened stays open

    const detail = await open(el, "a");
    const note = one(detail, ".dagmagic-detail-warning details.dagmagic-more");
    expect(one(note, ".dagmagic-more-whole").textContent).toBe(long);
  });
});

describe("whole texts", () => {
  const head = "Germany: 84.5 million (2024). ".repeat(4);
  const rest = "More detail from Destatis. ".repeat(6);
  const cut = `${head}… (${rest.length} more characters)`;
  const obsHead = "Destatis: 84.5 million";
  const obsRest = " — and the regional breakdown follows.";

  function cutState() {
    const state = sampleState();
    const a = state.rounds[1].nodes[0];
    a.result = cut;
    a.tool_calls.push({
      name: "fetch_url",
      arguments: { url: "https://example.org" },
      observation: `${obsHead}… (${obsRest.length} more characters)`,
      error: null,
      duration: 0.2,
    });
    return state;
  }

  it("asks for a cut result with Show all, shows it whole in place, and keeps it across redraws", async () => {
    const { el, model } = mount(cutState());
    let detail = await open(el, "a");
    expect(one(detail, ".dagmagic-detail-result").textContent).toContain("more characters)");
    const wrap = one(detail, ".dagmagic-detail-result-wrap");
    const button = /** @type {HTMLButtonElement} */ (one(wrap, ".dagmagic-expand"));
    expect(button.textContent).toBe("Show all");
    click(button);
    expect(model.lastRequest()).toEqual({ type: "full_text", round: 2, step: "a", field: "result" });
    expect(button.disabled).toBe(true);
    expect(button.textContent).toBe("Loading…");
    await nextRedraw();
    expect(/** @type {HTMLButtonElement} */ (one(el, ".dagmagic-detail-result-wrap .dagmagic-expand")).disabled).toBe(
      true,
    );

    model.answer({ value: { text: head + rest } });
    await answered();
    await nextRedraw();
    detail = one(el, ".dagmagic-detail");
    const result = one(detail, ".dagmagic-detail-result");
    expect(result.textContent?.trim()).toBe((head + rest).trim());
    expect(detail.querySelector(".dagmagic-detail-result-wrap .dagmagic-expand")).toBeNull();

    // a sync later (the clock, another step), the whole text stays
    const rounds = structuredClone(model.get("rounds"));
    rounds[1].nodes[2].status = "completed";
    model.set("rounds", rounds);
    model.set("now", model.get("now") + 1);
    await nextRedraw();
    expect(one(el, ".dagmagic-detail-result").textContent).toContain(rest.trim());

    // an answer to nobody's request (another view's, or one given up on) is left alone
    model.receive({ id: "elsewhere-1", kind: "anywidget-command-response", response: { ok: true, value: "other" } });
    await answered();
    await nextRedraw();
    expect(one(el, ".dagmagic-detail-result").textContent).toContain(rest.trim());
  });

  it("asks for a tool call's whole observation by its position", async () => {
    const { el, model } = mount(cutState());
    const detail = await open(el, "a");
    const calls = detail.querySelectorAll(".dagmagic-toolcall");
    expect(calls.length).toBe(2);
    expect(calls[0].querySelector(".dagmagic-expand")).toBeNull(); // whole already
    click(one(calls[1], ".dagmagic-expand"));
    expect(model.lastRequest()).toEqual({
      type: "full_text",
      round: 2,
      step: "a",
      field: "observation",
      call: 1,
    });
    model.answer({ value: { text: obsHead + obsRest } });
    await answered();
    await nextRedraw();
    const again = one(el, ".dagmagic-detail").querySelectorAll(".dagmagic-toolcall");
    expect(again[1].querySelector(".dagmagic-toolcall-obs")?.textContent).toBe(obsHead + obsRest);
    expect(again[1].querySelector(".dagmagic-expand")).toBeNull();
    expect(again[0].querySelector(".dagmagic-toolcall-obs")?.textContent).toBe("Destatis: 84.5 million");
  });

  it("lets Show all be clicked again when Python refuses, and says why beside it", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { el, model } = mount(cutState());
    await open(el, "a");
    click(one(el, ".dagmagic-detail-result-wrap .dagmagic-expand"));
    model.answer({ error: "there is no step 'a' in round 2" });
    await answered();
    await nextRedraw();
    const button = /** @type {HTMLButtonElement} */ (one(el, ".dagmagic-detail-result-wrap .dagmagic-expand"));
    expect(button.disabled).toBe(false);
    expect(button.textContent).toBe("Show all");
    const why = one(el, ".dagmagic-detail-result-wrap .dagmagic-message");
    expect(why.textContent).toContain("there is no step 'a' in round 2");
    expect(one(el, ".dagmagic-controls .dagmagic-message").hidden).toBe(true); // only where the user acted
    click(one(why, ".dagmagic-message-close"));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail-result-wrap .dagmagic-message")).toBeNull();
  });

  it("waits 30 s for a whole text, then lets Show all be clicked again", async () => {
    vi.useFakeTimers();
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { el } = mount(cutState());
    click(one(el, '.dagmagic-round[data-round="2"] .dagmagic-node[data-step-id="a"]'));
    vi.advanceTimersByTime(50);
    click(one(el, ".dagmagic-detail-result-wrap .dagmagic-expand"));
    vi.advanceTimersByTime(29_000);
    expect(/** @type {HTMLButtonElement} */ (one(el, ".dagmagic-detail-result-wrap .dagmagic-expand")).disabled).toBe(
      true,
    );
    vi.advanceTimersByTime(1_100);
    await answered();
    vi.advanceTimersByTime(50);
    expect(/** @type {HTMLButtonElement} */ (one(el, ".dagmagic-detail-result-wrap .dagmagic-expand")).disabled).toBe(
      false,
    );
    expect(one(el, ".dagmagic-detail-result-wrap .dagmagic-message").textContent).toContain("did not answer");
    vi.useRealTimers();
  });
});

describe("copy", () => {
  it("copies the answer's Markdown, a step's result (whole once fetched) and a paused step's messages", async () => {
    const writeText = vi.fn(() => Promise.resolve());
    setClipboard({ writeText });
    const state = sampleState();
    state.answer = "Germany has **more** people.";
    state.rounds[1].nodes[0].result = `Germany… (12 more characters)`;
    const { el, model } = mount(state);

    const copy = one(el, ".dagmagic-answer .dagmagic-copy");
    expect(copy.textContent).toBe("Copy");
    click(copy);
    await settle();
    expect(writeText).toHaveBeenLastCalledWith("Germany has **more** people.");
    expect(copy.textContent).toBe("Copied");
    expect(copy.getAttribute("data-copied")).toBe("true");

    await open(el, "a");
    click(one(el, ".dagmagic-detail-result-wrap .dagmagic-expand"));
    model.answer({ value: { text: "Germany: 84.5 million (2024)." } });
    await answered();
    await nextRedraw();
    click(one(el, ".dagmagic-detail-result-wrap .dagmagic-copy"));
    await settle();
    expect(writeText).toHaveBeenLastCalledWith("Germany: 84.5 million (2024).");
    expect(one(el, ".dagmagic-detail-result-wrap .dagmagic-copy").textContent).toBe("Copied");

    const paused = mount({ ...pausedState(), run_id: "run-paused" });
    const messages = paused.el.querySelectorAll(".dagmagic-paused-message");
    expect(messages.length).toBe(2);
    for (const message of messages) expect(message.querySelector(".dagmagic-copy")).not.toBeNull();
    click(one(messages[1], ".dagmagic-copy"));
    await settle();
    expect(writeText).toHaveBeenLastCalledWith(pausedState().rounds[1].nodes[2].paused_messages[1].content);
  });

  it("goes back to Copy after a moment", async () => {
    vi.useFakeTimers();
    try {
      setClipboard({ writeText: vi.fn(() => Promise.resolve()) });
      const { el } = mount({ ...sampleState(), answer: "Done." });
      const copy = one(el, ".dagmagic-answer .dagmagic-copy");
      click(copy);
      await vi.advanceTimersByTimeAsync(10);
      expect(copy.textContent).toBe("Copied");
      await vi.advanceTimersByTimeAsync(2000);
      expect(copy.textContent).toBe("Copy");
      expect(copy.hasAttribute("data-copied")).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });

  it("without a clipboard, or when it refuses, selects the text instead and says so", async () => {
    const { el } = mount({ ...sampleState(), answer: "Germany has more people." });
    const copy = one(el, ".dagmagic-answer .dagmagic-copy");
    click(copy); // jsdom has no navigator.clipboard
    await settle();
    expect(copy.textContent).toBe("Selected");
    expect(copy.getAttribute("data-copied")).toBe("false");
    expect(String(window.getSelection())).toContain("Germany has more people.");

    vi.spyOn(console, "warn").mockImplementation(() => {});
    setClipboard({ writeText: vi.fn(() => Promise.reject(new Error("not allowed"))) });
    const state = rerunState();
    const other = mount(state);
    await open(other.el, "a", 3);
    const button = one(other.el, ".dagmagic-detail-result-wrap .dagmagic-copy");
    click(button);
    await settle();
    expect(button.textContent).toBe("Selected");
    expect(String(window.getSelection())).toContain("Result of a");
  });
});

describe("the answer's code and headings", () => {
  it("highlights fenced code in a known language, on the sanitized DOM, and leaves other code alone", async () => {
    const { el, model } = mount();
    const answer = [
      "# Result",
      "```python",
      'def ratio(a, b):  # <img src=x onerror="alert(1)">',
      '    return a / b if b else "<script>alert(1)</script>"',
      "```",
      "```sql",
      "SELECT name FROM countries WHERE population > 80000000;",
      "```",
      "```text",
      "plain <b>text</b>",
      "```",
    ].join("\n");
    model.set("answer", answer);
    await nextRedraw();
    const body = one(el, ".dagmagic-answer-body");
    const python = one(body, "code.hljs[data-language='python']");
    expect(python.querySelector(".hljs-keyword")?.textContent).toBe("def");
    expect(python.querySelector(".hljs-comment")?.textContent).toBe('# <img src=x onerror="alert(1)">');
    expect(python.textContent).toContain('"<script>alert(1)</script>"');
    const sql = one(body, "code.hljs[data-language='sql']");
    expect([...sql.querySelectorAll(".hljs-keyword")].map((k) => k.textContent)).toContain("SELECT");
    const text = one(body, "code.language-text");
    expect(text.classList.contains("hljs")).toBe(false);
    expect(text.textContent).toBe("plain <b>text</b>\n");
    // what highlighting added is classed spans and text only
    for (const node of body.querySelectorAll("code.hljs *")) {
      expect(node.tagName).toBe("SPAN");
      expect([...node.attributes].map((a) => a.name)).toEqual(["class"]);
    }
    expect(el.querySelector("script, img, b")).toBeNull();
  });

  it("keeps the answer's headings no bigger than the widget's title", () => {
    const css = readFileSync(resolve(__dirname, "../src/widget.css"), "utf8");
    const style = document.createElement("style");
    style.textContent = css;
    document.head.append(style);
    try {
      const { el } = mount({ ...sampleState(), goal: "Compare", answer: "# One\n\n## Two\n\n### Three\n\ntext" });
      // the size set on the element or, inherited, on the nearest ancestor (jsdom does not inherit it)
      const px = (/** @type {Element} */ e) => {
        for (let n = /** @type {Element | null} */ (e); n; n = n.parentElement) {
          const size = getComputedStyle(n).fontSize;
          if (size) return size.endsWith("px") ? parseFloat(size) : NaN;
        }
        return NaN;
      };
      const title = px(one(el, ".dagmagic-goal"));
      const answer = one(el, ".dagmagic-answer-body");
      expect(title).toBeGreaterThan(0);
      for (const tag of ["h1", "h2", "h3"]) expect(px(one(answer, tag))).toBeLessThanOrEqual(title);
    } finally {
      style.remove();
    }
  });
});

describe("the verdict in words", () => {
  /**
   * @param {any} analysis
   * @param {any} decision
   */
  function verdict(analysis, decision) {
    const state = sampleState();
    Object.assign(state.rounds[1], { analysis, decision });
    for (const n of state.rounds[1].nodes) n.status = "completed";
    const { el } = mount({ ...state, status: "done", phase: "finished" });
    return one(el, '.dagmagic-round[data-round="2"] .dagmagic-verdict');
  }

  it("says what comes next, and a reason only once", () => {
    let v = verdict(
      { achieved: true, confidence: 0.9, reasoning: "The goal was achieved." },
      { action: "synthesize", reason: "The goal was achieved." },
    );
    expect(one(v, ".dagmagic-verdict-reasoning").textContent).toBe("The goal was achieved.");
    expect(one(v, ".dagmagic-decision").textContent).toBe("Next: the answer");
    expect(v.textContent?.split("The goal was achieved.").length).toBe(2); // once

    v = verdict(
      { achieved: true, confidence: 0.9, reasoning: "Both populations are there." },
      { action: "synthesize", reason: "Enough to answer." },
    );
    expect(one(v, ".dagmagic-decision").textContent).toBe("Next: the answer — Enough to answer.");

    v = verdict(
      { achieved: false, confidence: 0.3, reasoning: "The comparison is missing." },
      { action: "replan", reason: "Step s2 failed; retry it." },
    );
    expect(one(v, ".dagmagic-decision").textContent).toBe("Next: a new plan — Step s2 failed; retry it.");
    expect(one(v, ".dagmagic-decision").getAttribute("data-action")).toBe("replan");

    v = verdict(
      { achieved: false, confidence: 0.2, reasoning: "No source answers this." },
      { action: "stop", reason: "The budget is spent." },
    );
    expect(one(v, ".dagmagic-decision").textContent).toBe("Stopped here — The budget is spent.");
    expect(v.textContent).not.toMatch(/Synthesize:|Replanned:|Stopped:/);
  });

  it("treats a reason that differs only in case, spacing or a full stop as the same", () => {
    const round = structuredClone(sampleState().rounds[0]);
    round.analysis = { achieved: false, confidence: 0.5, reasoning: "Step s2 failed." };
    round.decision = { action: "replan", reason: "  step s2   failed " };
    const v = /** @type {HTMLElement} */ (renderVerdict(/** @type {any} */ (round), false));
    expect(one(v, ".dagmagic-decision").textContent).toBe("Next: a new plan");
  });
});

describe("the open step across views of a run", () => {
  it("opens a newer view of the run (Out[n] after the live view) with the same step and rounds", async () => {
    const { el: live, model } = mount();
    click(one(live, '.dagmagic-round[data-round="1"] .dagmagic-round-toggle'));
    await nextRedraw();
    await open(live, "b");

    const value = view(model);
    expect(one(value.el, ".dagmagic-detail").getAttribute("data-step-id")).toBe("b");
    expect(one(value.el, ".dagmagic-detail").closest(".dagmagic-round")?.getAttribute("data-round")).toBe("2");
    expect(one(value.el, '.dagmagic-round[data-round="1"]').getAttribute("data-expanded")).toBe("true");

    // the newer view goes its own way; another run shares nothing
    click(one(value.el, ".dagmagic-detail-close"));
    await nextRedraw();
    expect(value.el.querySelector(".dagmagic-detail")).toBeNull();
    expect(one(live, ".dagmagic-detail").getAttribute("data-step-id")).toBe("b");
    const other = mount({ ...sampleState(), run_id: "run-2" });
    expect(other.el.querySelector(".dagmagic-detail")).toBeNull();
    expect(one(other.el, '.dagmagic-round[data-round="1"]').getAttribute("data-expanded")).toBe("false");
  });

  it("shares whole texts between the views of the widget, and with no other widget", async () => {
    const state = sampleState();
    state.rounds[1].nodes[0].result = "Germany… (5 more characters)";
    const { el: live, model, cleanup } = mount(state);
    const elsewhere = mount(structuredClone(state)); // another widget of the same run: its own memory
    await open(live, "a");
    await open(elsewhere.el, "a");
    click(one(live, ".dagmagic-detail-result-wrap .dagmagic-expand"));
    const value = view(model);
    model.answer({ value: { text: "Germany, 84.5" } });
    await answered();
    await nextRedraw();
    for (const el of [live, value.el])
      expect(one(el, ".dagmagic-detail-result").textContent?.trim()).toBe("Germany, 84.5");
    expect(one(elsewhere.el, ".dagmagic-detail-result").textContent).toContain("more characters");

    // the memory lives as long as the widget: a view drawn again later opens as the user left it
    cleanup();
    value.cleanup();
    const fresh = view(model);
    expect(one(fresh.el, ".dagmagic-detail-result").textContent?.trim()).toBe("Germany, 84.5");
  });
});

describe("follow-ups in their round", () => {
  it("shows a follow-up the round's verdict and answer took in, in that round", async () => {
    const state = sampleState();
    state.rounds[1].answered_follow_ups = ["also cover Spain"];
    const { el } = mount(state);
    await nextRedraw();
    const second = /** @type {HTMLElement} */ (el.querySelector('.dagmagic-round[data-round="2"]'));
    const item = /** @type {HTMLElement} */ (second.querySelector('.dagmagic-round-followup[data-kind="answered"]'));
    expect(item.textContent).toBe("Follow-up, taken into account by this round's verdict and answer: also cover Spain");
    expect(el.querySelector('.dagmagic-round[data-round="1"] .dagmagic-round-followups')).toBeNull();
  });

  it("says a round's answer is partial beside its verdict, whatever the verdict found", async () => {
    const state = sampleState();
    const last = state.rounds[1];
    last.analysis = { achieved: true, confidence: 0.9, reasoning: "all found" };
    last.decision = {
      action: "synthesize",
      reason: "You stopped the run: answering from what completed.",
      partial: true,
    };
    const { el } = mount(state);
    await nextRedraw();
    const second = /** @type {HTMLElement} */ (el.querySelector('.dagmagic-round[data-round="2"]'));
    expect(second.querySelector(".dagmagic-verdict-mark")?.textContent).toBe("✓ achieved");
    expect(second.querySelector(".dagmagic-verdict-partial")?.textContent).toContain("Partial answer");
    expect(second.querySelector(".dagmagic-round-summary")?.textContent).toContain("partial answer");
    last.decision = { action: "synthesize", reason: "The goal was achieved." };
    const whole = mount(state);
    await nextRedraw();
    expect(whole.el.querySelector(".dagmagic-verdict-partial")).toBeNull();
  });

  it("shows the follow-up a round was planned for, and what changed since the round before", async () => {
    const state = sampleState();
    state.rounds[1].follow_ups = ["also in euros <b>now</b>"];
    state.rounds[1].diff_base = 1;
    state.rounds[1].diff = [{ id: "c", change: "changed", fields: ["task"] }];
    const { el } = mount(state);
    await nextRedraw();
    const second = /** @type {HTMLElement} */ (el.querySelector('.dagmagic-round[data-round="2"]'));
    expect(second.querySelector(".dagmagic-round-followup")?.textContent).toBe("Follow-up: also in euros <b>now</b>");
    expect(second.querySelector(".dagmagic-round-followup b:not(:first-child)")).toBeNull(); // text, not markup
    expect(second.querySelector(".dagmagic-diff-wrap .dagmagic-label")?.textContent).toBe("Compared with round 1");
    expect(second.querySelector('.dagmagic-diff li[data-step-id="c"]')?.textContent).toBe("c changed: task");
    expect(el.querySelector('.dagmagic-round[data-round="1"] .dagmagic-round-followups')).toBeNull();
  });
});
