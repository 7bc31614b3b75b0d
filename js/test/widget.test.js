import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  answered,
  approvalState,
  definitionOf,
  mount,
  nextRedraw,
  pausedState,
  rerunState,
  sampleState,
  toolStepState,
  subrunState,
  unmountAll,
} from "./fixtures.js";

/**
 * @param {Element} el
 * @param {string} id
 * @param {number} [round]
 */
function nodeEl(el, id, round = 2) {
  const found = el.querySelector(`.dagmagic-round[data-round="${round}"] .dagmagic-node[data-step-id="${id}"]`);
  if (!found) throw new Error(`no node ${id} in round ${round}`);
  return found;
}

/** @param {Element} target */
function click(target) {
  target.dispatchEvent(new MouseEvent("click", { bubbles: true }));
}

/** @param {Element} el */
function latestSvg(el) {
  const svg = el.querySelector('.dagmagic-round[data-round="2"] svg.dagmagic-graph');
  if (!svg) throw new Error("no svg");
  return svg;
}

/** @param {Element} g */
function box(g) {
  const r = /** @type {Element} */ (g.querySelector("rect.dagmagic-node-box"));
  const [x, y, w, h] = ["x", "y", "width", "height"].map((a) => Number(r.getAttribute(a)));
  return { x, y, w, h };
}

afterEach(() => {
  unmountAll();
  document.body.replaceChildren();
});

describe("drawing", () => {
  it("renders the same state to identical SVG", async () => {
    const first = mount();
    const second = mount();
    const a = latestSvg(first.el).outerHTML;
    expect(a).toBe(latestSvg(second.el).outerHTML);
    expect(a).not.toMatch(/\sid=/); // no document-wide ids that two widgets could share

    // A redraw of an unchanged state changes nothing either.
    first.model.set("rounds", structuredClone(first.model.get("rounds")));
    await nextRedraw();
    expect(latestSvg(first.el).outerHTML).toBe(a);
  });

  it("draws non-overlapping boxes and edges that go down from a lower layer to a higher one", () => {
    const { el } = mount();
    const svg = latestSvg(el);
    const nodes = [...svg.querySelectorAll(".dagmagic-node")];
    expect(nodes.map((n) => n.getAttribute("data-step-id"))).toEqual(["a", "b", "c", "d", "e"]);
    expect(new Set(nodes.map((n) => n.getAttribute("data-layer")))).toEqual(new Set(["0", "1", "2"]));

    const boxes = new Map(
      nodes.map((n) => [
        String(n.getAttribute("data-step-id")),
        { ...box(n), layer: Number(n.getAttribute("data-layer")) },
      ]),
    );
    const list = [...boxes.values()];
    for (let i = 0; i < list.length; i++) {
      for (let j = i + 1; j < list.length; j++) {
        const p = list[i];
        const q = list[j];
        const apart = p.x + p.w <= q.x || q.x + q.w <= p.x || p.y + p.h <= q.y || q.y + q.h <= p.y;
        expect(apart).toBe(true);
      }
    }
    const width = Number(svg.getAttribute("width"));
    const height = Number(svg.getAttribute("height"));
    for (const b of list) {
      expect(b.x).toBeGreaterThanOrEqual(0);
      expect(b.y).toBeGreaterThanOrEqual(0);
      expect(b.x + b.w).toBeLessThanOrEqual(width);
      expect(b.y + b.h).toBeLessThanOrEqual(height);
    }

    const edges = [...svg.querySelectorAll(".dagmagic-edge")];
    expect(edges.map((e) => `${e.getAttribute("data-source")}->${e.getAttribute("data-target")}`)).toEqual([
      "a->c",
      "b->c",
      "a->d",
      "c->e",
      "d->e",
    ]);
    for (const edge of edges) {
      const source = /** @type {{x: number, y: number, w: number, h: number, layer: number}} */ (
        boxes.get(String(edge.getAttribute("data-source")))
      );
      const target = /** @type {{x: number, y: number, w: number, h: number, layer: number}} */ (
        boxes.get(String(edge.getAttribute("data-target")))
      );
      expect(source.layer).toBeLessThan(target.layer);
      const d = String(edge.querySelector("path")?.getAttribute("d"));
      const numbers = d.match(/-?\d+(\.\d+)?/g)?.map(Number) ?? [];
      const [x1, y1] = numbers;
      const points = String(edge.querySelector("polygon")?.getAttribute("points")).split(" ");
      const [x2, y2] = points[2].split(",").map(Number); // the arrow's tip
      expect(y1).toBeLessThan(y2);
      // from the source's bottom to the target's top (the ends of a box's edges side by side, not all at its centre)
      expect(y1).toBe(source.y + source.h);
      expect(x1).toBeGreaterThan(source.x);
      expect(x1).toBeLessThan(source.x + source.w);
      expect(y2).toBe(target.y);
      expect(x2).toBeGreaterThan(target.x);
      expect(x2).toBeLessThan(target.x + target.w);
      expect(numbers[numbers.length - 1]).toBeLessThan(y2); // the line stops where the arrowhead starts
    }
  });

  it("shows each step's status, id, shortened task, badges, duration and tokens", () => {
    const { el } = mount();
    const a = nodeEl(el, "a");
    expect(a.getAttribute("data-status")).toBe("completed");
    expect(a.classList.contains("dagmagic-node")).toBe(true);
    expect(a.querySelector(".dagmagic-node-id")?.textContent).toBe("✓ a");
    expect(a.querySelector(".dagmagic-node-stats")?.textContent).toBe("2.0s · 1.8k tok");
    // the task on two lines, whole when it fits them
    const task = /** @type {Element} */ (a.querySelector(".dagmagic-node-task"));
    expect([...task.querySelectorAll("tspan")].map((t) => t.textContent)).toEqual([
      "Search the web for Germany's ",
      "population in 2024",
    ]);
    expect(task.textContent).toBe("Search the web for Germany's population in 2024");
    expect(a.querySelector("title")?.textContent).toContain("Search the web for Germany's population in 2024");
    expect(a.querySelector(".dagmagic-badge-model text")?.textContent).toBe("gpt-4o-mini");
    expect(a.querySelector(".dagmagic-badge-tool text")?.textContent).toBe("web_search");
    // Running: counts up to `now` from Python, not the browser clock.
    expect(nodeEl(el, "c").querySelector(".dagmagic-node-stats")?.textContent).toBe("2.8s");
    expect(nodeEl(el, "c").classList.contains("dagmagic-node--running")).toBe(true);
    // Retrying, with the countdown to its next attempt.
    expect(nodeEl(el, "d").querySelector(".dagmagic-node-stats")?.textContent).toBe("retry 3.0s");
  });

  it("re-renders a step's data-status on a change event, coalescing bursts into one redraw", async () => {
    const { el, model } = mount();
    expect(nodeEl(el, "c").getAttribute("data-status")).toBe("running");
    const reads = () => model.get.mock.calls.filter(([name]) => name === "rounds").length;
    const before = reads();
    for (let i = 0; i < 10; i++) {
      const rounds = structuredClone(model.get("rounds"));
      rounds[1].nodes[2] = {
        ...rounds[1].nodes[2],
        status: "completed",
        completed_at: rounds[1].nodes[2].started_at + 4,
      };
      model.set("rounds", rounds);
    }
    const afterSets = reads();
    expect(nodeEl(el, "c").getAttribute("data-status")).toBe("running"); // not yet: redraws wait for a frame
    await nextRedraw();
    expect(nodeEl(el, "c").getAttribute("data-status")).toBe("completed");
    expect(nodeEl(el, "c").classList.contains("dagmagic-node--running")).toBe(false);
    expect(reads() - afterSets).toBe(1); // ten changes, one redraw
    expect(afterSets - before).toBe(10); // (the test's own reads)
  });

  it("falls back to a timer when requestAnimationFrame is missing", async () => {
    vi.stubGlobal("requestAnimationFrame", undefined);
    vi.stubGlobal("cancelAnimationFrame", undefined);
    try {
      const { el, model } = mount();
      model.set("status", "done");
      await nextRedraw();
      expect(el.querySelector(".dagmagic-status")?.getAttribute("data-status")).toBe("done");
    } finally {
      vi.unstubAllGlobals();
    }
  });

  it("expands the latest round only; earlier ones toggle open with their verdict and replan reason", async () => {
    const { el } = mount();
    const r1 = /** @type {Element} */ (el.querySelector('.dagmagic-round[data-round="1"]'));
    const r2 = /** @type {Element} */ (el.querySelector('.dagmagic-round[data-round="2"]'));
    expect(r1.getAttribute("data-expanded")).toBe("false");
    expect(r1.querySelector("svg")).toBeNull();
    expect(r2.getAttribute("data-expanded")).toBe("true");
    expect(r1.querySelector(".dagmagic-round-summary")?.textContent).toContain("not achieved 35%");

    click(/** @type {Element} */ (r1.querySelector(".dagmagic-round-toggle")));
    await nextRedraw();
    const open = /** @type {Element} */ (el.querySelector('.dagmagic-round[data-round="1"]'));
    expect(open.getAttribute("data-expanded")).toBe("true");
    const verdict = /** @type {Element} */ (open.querySelector(".dagmagic-verdict"));
    expect(verdict.getAttribute("data-achieved")).toBe("false");
    expect(verdict.textContent).toContain("✗ not achieved");
    expect(verdict.textContent).toContain("confidence 35%");
    expect(verdict.textContent).toContain("The comparison is missing.");
    const decision = /** @type {Element} */ (verdict.querySelector(".dagmagic-decision"));
    expect(decision.getAttribute("data-action")).toBe("replan");
    expect(decision.textContent).toContain("Step s2 failed; retry the comparison with another source.");
  });

  it("shows the header: goal, status, tokens, cost (or a dash), elapsed", async () => {
    const { el, model } = mount();
    const header = /** @type {Element} */ (el.querySelector(".dagmagic-header"));
    expect(header.querySelector(".dagmagic-goal")?.textContent).toBe("Compare the populations of France and Germany");
    expect(header.querySelector(".dagmagic-status")?.getAttribute("data-status")).toBe("running");
    expect(header.querySelector(".dagmagic-total-tokens")?.textContent).toBe("tokens 2,220 in · 430 out");
    expect(header.querySelector(".dagmagic-total-cost")?.textContent).toBe("cost $0.0123");
    expect(header.querySelector(".dagmagic-total-elapsed")?.textContent).toBe("elapsed 17s");
    model.set("usage", { input_tokens: 1, output_tokens: 2, requests: 1, cost: null });
    model.set("error", "Budget exhausted");
    await nextRedraw();
    expect(header.querySelector(".dagmagic-total-cost")?.textContent).toBe("cost —");
    const error = /** @type {HTMLElement} */ (header.querySelector(".dagmagic-error"));
    expect(error.hidden).toBe(false);
    expect(error.textContent).toBe("Budget exhausted");
  });

  it("says where a replay diverged from its recording, and shows the diff line by line", async () => {
    const { el, model } = mount();
    const error = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-error"));
    model.set("status", "failed");
    model.set("error", "ReplayMismatch: Replay mismatch: The 'plan' call in round 1 was not recorded. ...");
    model.set("divergence", {
      headline: "diverged from the recording at the 'plan' call in round 1",
      reason:
        "It was not recorded. The closest recorded call differs:\n--- recorded\n+++ now\n-  lookup(city)\n+  " +
        'lookup_v2(city) <img src=x onerror="alert(1)">\n   unchanged',
    });
    await nextRedraw();
    expect(error.hidden).toBe(false);
    expect(error.querySelector(".dagmagic-divergence-headline")?.textContent).toBe(
      "Diverged from the recording at the 'plan' call in round 1.",
    );
    const lines = [...error.querySelectorAll(".dagmagic-divergence-reason .dagmagic-diff-line")];
    expect(lines.map((line) => line.getAttribute("data-kind"))).toEqual(["", "file", "file", "removed", "added", ""]);
    expect(lines[4].textContent).toBe('+  lookup_v2(city) <img src=x onerror="alert(1)">');
    expect(error.querySelector("img")).toBeNull();
    expect(error.textContent).not.toContain("ReplayMismatch"); // the raw error's one long text is not repeated
    model.set("divergence", null);
    model.set("error", "Budget exhausted");
    await nextRedraw();
    expect(error.textContent).toBe("Budget exhausted");
  });

  it("says where a fork comes from, under the goal, and nothing for a run of its own", async () => {
    const { el, model } = mount();
    const forked = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-forked"));
    expect(forked.hidden).toBe(true);
    model.set("forked", "fork of run 3f2a19c0d4e1 at r1.s2");
    await nextRedraw();
    expect(forked.hidden).toBe(false);
    expect(forked.textContent).toBe("fork of run 3f2a19c0d4e1 at r1.s2");
  });

  it("lists what to know about the whole run, as text, and hides the list when there is none", async () => {
    const { el, model } = mount();
    const list = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-run-warnings"));
    expect(list.hidden).toBe(true);
    model.set("warnings", ["This run is not saved: the disk is full.", '<img src=x onerror="alert(1)">']);
    await nextRedraw();
    expect(list.hidden).toBe(false);
    expect([...list.querySelectorAll("li")].map((li) => li.textContent)).toEqual([
      "This run is not saved: the disk is full.",
      '<img src=x onerror="alert(1)">',
    ]);
    expect(list.querySelector("img")).toBeNull();
    model.set("warnings", []);
    await nextRedraw();
    expect(list.hidden).toBe(true);
  });
});

describe("sanitizing", () => {
  const evil =
    'Hello **world** <script>alert(1)</script> <img src=x onerror="alert(1)"> <a href="javascript:alert(1)">x</a> <style>body{display:none}</style> <b style="position:fixed">b</b> [ok](https://example.org)';

  it("renders the answer as inert Markdown", async () => {
    const { el, model } = mount();
    model.set("answer", evil);
    await nextRedraw();
    const answer = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-answer"));
    expect(answer.hidden).toBe(false);
    expect(answer.querySelector("strong")?.textContent).toBe("world");
    expect(el.querySelector("script")).toBeNull();
    expect(el.querySelector("style")).toBeNull();
    expect(el.querySelector("[onerror]")).toBeNull();
    // the one style is the graphs' minimum width, a number set through the CSSOM (graph.js)
    expect(el.querySelector("[style]:not(svg.dagmagic-graph)")).toBeNull();
    for (const svg of el.querySelectorAll("svg.dagmagic-graph[style]")) {
      expect(svg.getAttribute("style")).toMatch(/^--dm-graph-min-width: [\d.]+px;$/);
    }
    expect(el.querySelector("[href*='javascript:']")).toBeNull(); // the raw <a> is shown as text
    expect(answer.querySelector("img")).toBeNull(); // raw HTML is shown as text (hostile.test.js has the rest)
    const link = /** @type {Element} */ (answer.querySelector('a[href="https://example.org"]'));
    expect(link.getAttribute("rel")).toBe("noopener noreferrer nofollow");
    expect(link.getAttribute("target")).toBe("_blank");
  });

  it("streams: each growth of the answer re-renders it, with a fallback note when asked", async () => {
    const { el, model } = mount();
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-answer")).hidden).toBe(true);
    model.set("answer", "France has");
    await nextRedraw();
    expect(el.querySelector(".dagmagic-answer")?.classList.contains("dagmagic-answer--streaming")).toBe(true);
    model.set("answer", "France has *fewer* people.");
    model.set("answer_fallback", true);
    await nextRedraw();
    expect(el.querySelector(".dagmagic-answer-body em")?.textContent).toBe("fewer");
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-answer-fallback")).hidden).toBe(false);
  });

  it("marks an answer for a goal not reached, and not as a fallback", async () => {
    const { el, model } = mount();
    model.set("answer", "Not reached: the 2024 figure is missing. 2023: 2.1 million.");
    await nextRedraw();
    const unreached = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-answer-unreached"));
    expect(unreached.hidden).toBe(true);
    model.set("answer_unreached", true);
    await nextRedraw();
    expect(unreached.hidden).toBe(false);
    expect(unreached.textContent).toContain("Goal not reached");
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-answer-fallback")).hidden).toBe(true);
  });

  it("says what a running run is doing, and marks a partial answer", async () => {
    const { el, model } = mount();
    const status = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-status"));
    expect(status.textContent).toBe("running steps…");
    model.set("phase", "analyzing");
    await nextRedraw();
    expect(status.textContent).toBe("judging…");
    expect(status.getAttribute("data-phase")).toBe("analyzing");
    model.set("answer", "France has"); // the verdict writes the answer while it judges: it shows, and says so
    await nextRedraw();
    expect(status.textContent).toBe("writing the answer…");
    expect(status.getAttribute("data-phase")).toBe("analyzing");
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-answer")).hidden).toBe(false);
    expect(el.querySelector(".dagmagic-answer")?.classList.contains("dagmagic-answer--streaming")).toBe(true);
    model.set("answer", ""); // dropped: the verdict found the goal not reached
    await nextRedraw();
    expect(status.textContent).toBe("judging…");
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-answer")).hidden).toBe(true);
    model.set("phase", "synthesizing");
    model.set("answer", "Only France: Germany was not fetched.");
    model.set("answer_partial", true);
    await nextRedraw();
    expect(status.textContent).toBe("writing the answer…");
    const partial = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-answer-partial"));
    expect(partial.hidden).toBe(false);
    expect(partial.textContent).toContain("Partial answer");
    model.set("status", "done");
    model.set("phase", "finished");
    await nextRedraw();
    expect(status.textContent).toBe("done");
    expect(partial.hidden).toBe(false);
  });

  it("shows a step's notes in its detail", async () => {
    const state = sampleState();
    state.rounds[1].nodes[0].warnings = ["citations not verified: the check failed (AuthenticationError: bad key)"];
    const { el } = mount(state);
    const id = state.rounds[1].nodes[0].id;
    /** @type {HTMLElement} */ (
      el.querySelector(`.dagmagic-round[data-round="2"] [data-step-id="${id}"]`)
    ).dispatchEvent(new MouseEvent("click", { bubbles: true }));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail-warning")?.textContent).toBe(state.rounds[1].nodes[0].warnings[0]);
  });

  it("offers Retry now on a step waiting for its retry, and Resume on a run that did not end", async () => {
    const state = sampleState();
    const waiting = state.rounds[1].nodes.find((n) => n.status === "retrying");
    if (!waiting) throw new Error("the sample has a retrying step");
    const { el, model } = mount(state);
    /** @type {HTMLElement} */ (
      el.querySelector(`.dagmagic-round[data-round="2"] [data-step-id="${waiting.id}"]`)
    ).dispatchEvent(new MouseEvent("click", { bubbles: true }));
    await nextRedraw();
    const when = new Date(/** @type {number} */ (waiting.retry_at) * 1000).toLocaleTimeString();
    expect(el.querySelector(".dagmagic-detail")?.textContent).toContain(
      `retrying · 2 attempts · tries again at ${when}`,
    );
    const retry = /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-detail .dagmagic-retry-now"));
    retry.click();
    expect(model.lastRequest()).toEqual({ type: "retry_now", step: waiting.id });
    expect(retry.disabled).toBe(true);

    const offer = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-resume-offer"));
    expect(offer.hidden).toBe(true);
    model.set("status", "cancelled");
    model.set("resumable", true);
    await nextRedraw();
    expect(offer.hidden).toBe(false);
    /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-resume")).click();
    expect(model.lastRequest()).toEqual({ type: "resume" });
    expect(/** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-restart")).disabled).toBe(true);
  });

  it("lists what was fixed on the way in a round, as text", async () => {
    const state = sampleState();
    state.rounds[1].warnings = [
      "step s3 no longer depends on s4: that dependency closed a cycle",
      '<img src=x onerror="alert(1)">',
    ];
    const { el } = mount(state);
    const items = [...el.querySelectorAll('.dagmagic-round[data-round="2"] .dagmagic-round-warnings li')];
    expect(items.map((li) => li.textContent)).toEqual(state.rounds[1].warnings);
    expect(el.querySelector(".dagmagic-round-warnings img")).toBeNull();
    expect(el.querySelector('.dagmagic-round[data-round="1"] .dagmagic-round-warnings')).toBeNull(); // collapsed
  });

  it("never turns other LLM text into markup", async () => {
    const state = sampleState();
    state.goal = '<img src=x onerror="alert(1)">';
    state.rounds[1].nodes[0].task = "<script>alert(1)</script>";
    state.rounds[1].nodes[0].result = evil;
    state.rounds[1].nodes[0].tool_calls[0].observation = '<img src=x onerror="alert(2)">';
    state.rounds[0].analysis.reasoning = "<script>alert(3)</script>";
    const { el } = mount(state);
    click(nodeEl(el, "a"));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-goal")?.textContent).toBe('<img src=x onerror="alert(1)">');
    expect(el.querySelector(".dagmagic-detail-task")?.textContent).toBe("<script>alert(1)</script>");
    expect(el.querySelector(".dagmagic-toolcall-obs")?.textContent).toBe('<img src=x onerror="alert(2)">');
    expect(el.querySelector(".dagmagic-detail-result strong")?.textContent).toBe("world");
    expect(el.querySelector("script")).toBeNull();
    expect(el.querySelector("[onerror]")).toBeNull();
  });
});

describe("step detail", () => {
  it("opens on click with the step's task, tool calls and arguments; closes on a second click or ×", async () => {
    const { el } = mount();
    expect(el.querySelector(".dagmagic-detail")).toBeNull();
    click(/** @type {Element} */ (nodeEl(el, "a").querySelector("rect")));
    await nextRedraw();
    const detail = /** @type {Element} */ (el.querySelector(".dagmagic-detail"));
    expect(detail.getAttribute("data-step-id")).toBe("a");
    expect(nodeEl(el, "a").classList.contains("dagmagic-node--selected")).toBe(true);
    expect(detail.textContent).toContain("Search the web for Germany's population in 2024");
    expect(detail.textContent).toContain("openai/gpt-4o-mini");
    expect(detail.textContent).toContain("tool: web_search");
    expect(detail.textContent).toContain("1,500 in · 300 out tokens · $0.0020");
    expect(detail.textContent).toContain("queued 0.0s · ran 2.0s");
    const call = /** @type {Element} */ (detail.querySelector(".dagmagic-toolcall"));
    expect(call.getAttribute("data-tool")).toBe("web_search");
    expect(JSON.parse(String(call.querySelector(".dagmagic-toolcall-args")?.textContent))).toEqual({
      query: "Germany population 2024",
      max_results: 3,
    });
    expect(call.querySelector(".dagmagic-toolcall-obs")?.textContent).toBe("Destatis: 84.5 million");
    expect(detail.querySelector(".dagmagic-detail-result")?.textContent?.trim()).toBe("Germany: 84.5 million (2024).");

    click(nodeEl(el, "a"));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")).toBeNull();

    click(nodeEl(el, "c"));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("c");
    click(/** @type {Element} */ (el.querySelector(".dagmagic-detail-close")));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")).toBeNull();
  });

  it("shows errors and attempts, and follows a dependency on an earlier round", async () => {
    const { el } = mount();
    click(nodeEl(el, "e"));
    await nextRedraw();
    const deps = [...el.querySelectorAll(".dagmagic-detail .dagmagic-dep")].map((d) => d.textContent);
    expect(deps).toEqual(["c", "d", "r1.s1"]);
    click(/** @type {Element} */ (el.querySelector('.dagmagic-detail [data-goto-round="1"][data-goto-step="s1"]')));
    await nextRedraw();
    expect(el.querySelector('.dagmagic-round[data-round="1"]')?.getAttribute("data-expanded")).toBe("true");
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("s1");
    expect(el.querySelector(".dagmagic-detail")?.closest(".dagmagic-round")?.getAttribute("data-round")).toBe("1");

    click(nodeEl(el, "s2", 1));
    await nextRedraw();
    const detail = /** @type {Element} */ (el.querySelector(".dagmagic-detail"));
    expect(detail.querySelector(".dagmagic-detail-error")?.textContent).toBe("provider timeout");
    expect(detail.textContent).toContain("failed · 3 attempts");
  });

  it("opens with the keyboard too", async () => {
    const { el } = mount();
    nodeEl(el, "b").dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("b");
  });

  it("keeps the detail open and current while the step changes", async () => {
    const { el, model } = mount();
    click(nodeEl(el, "c"));
    await nextRedraw();
    const rounds = structuredClone(model.get("rounds"));
    rounds[1].nodes[2].status = "failed";
    rounds[1].nodes[2].error = "boom";
    model.set("rounds", rounds);
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail .dagmagic-detail-error")?.textContent).toBe("boom");
  });
});

describe("controls", () => {
  /** @param {Element} el @param {string} cls */
  const button = (el, cls) => /** @type {HTMLButtonElement} */ (el.querySelector(`.${cls}`));

  it("sends stop, cancel and follow-ups", async () => {
    const { el, model } = mount();
    click(button(el, "dagmagic-stop"));
    expect(model.lastRequest()).toEqual({ type: "stop" });
    expect(button(el, "dagmagic-stop").disabled).toBe(true); // "Stopping…" until the run ends
    click(button(el, "dagmagic-cancel"));
    expect(model.lastRequest()).toEqual({ type: "cancel" });

    const input = /** @type {HTMLInputElement} */ (el.querySelector(".dagmagic-followup-input"));
    input.value = "  also cover Spain ";
    click(button(el, "dagmagic-followup-send"));
    expect(model.lastRequest()).toEqual({ type: "follow_up", text: "also cover Spain" });
    expect(input.value).toBe("");

    input.value = "and Italy";
    input.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    expect(model.lastRequest()).toEqual({ type: "follow_up", text: "and Italy" });

    const count = model.send.mock.calls.length;
    input.value = "   ";
    input.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    expect(model.send.mock.calls.length).toBe(count); // nothing to send
    expect(model.requests()).toEqual([
      { type: "stop" },
      { type: "cancel" },
      { type: "follow_up", text: "also cover Spain" },
      { type: "follow_up", text: "and Italy" },
    ]);
  });

  it("disables everything unless the run is running", async () => {
    const { el, model } = mount();
    const classes = ["dagmagic-stop", "dagmagic-cancel", "dagmagic-followup-send"];
    for (const cls of classes) expect(button(el, cls).disabled).toBe(false);
    for (const status of ["done", "failed", "cancelled"]) {
      model.set("status", status);
      await nextRedraw();
      for (const cls of classes) expect(button(el, cls).disabled).toBe(true);
      expect(/** @type {HTMLInputElement} */ (el.querySelector(".dagmagic-followup-input")).disabled).toBe(true);
      click(button(el, "dagmagic-stop"));
      click(button(el, "dagmagic-cancel"));
    }
    expect(model.send).not.toHaveBeenCalled();
  });

  it("shows an error message from Python inline, and lets the user retry", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    vi.spyOn(console, "debug").mockImplementation(() => {});
    const { el, model } = mount();
    click(button(el, "dagmagic-stop"));
    expect(button(el, "dagmagic-stop").disabled).toBe(true);
    model.answer({ error: "Nothing to stop: <b>the run</b> already finished" });
    await answered();
    const message = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-message"));
    expect(message.hidden).toBe(false);
    expect(message.querySelector(".dagmagic-message-text")?.textContent).toBe(
      "Nothing to stop: <b>the run</b> already finished",
    );
    expect(message.querySelector("b")).toBeNull();
    expect(button(el, "dagmagic-stop").disabled).toBe(false);
    click(/** @type {Element} */ (message.querySelector(".dagmagic-message-close")));
    expect(message.hidden).toBe(true);
    model.receive({ type: "something-else" }); // ignored
    expect(message.hidden).toBe(true);
  });

  it("answers each request on its own: a refusal reaches only the part that asked", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { el, model } = mount(pausedState());
    buttonAt(el, ".dagmagic-continue").click();
    click(button(el, "dagmagic-stop"));
    const [cont, stop] = model.sent;
    expect([cont.kind, cont.name, stop.name]).toEqual(["anywidget-command", "continue", "stop"]);
    expect(cont.id).not.toBe(stop.id);
    model.answer({ error: "no step is paused (the run is executing)", index: 0 });
    await answered();
    await nextRedraw();
    // the paused step's buttons work again and say why; Stop still waits for the run to end
    expect(buttonAt(el, ".dagmagic-continue").disabled).toBe(false);
    expect(el.querySelector(".dagmagic-paused .dagmagic-message-text")?.textContent).toBe(
      "no step is paused (the run is executing)",
    );
    expect(button(el, "dagmagic-stop").disabled).toBe(true);
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-controls .dagmagic-message")).hidden).toBe(true);
    model.answer({ index: 1 }); // Stop taken: "Stopping…" until the run ends
    await answered();
    expect(button(el, "dagmagic-stop").textContent).toBe("Stopping…");
    model.set("status", "done");
    model.set("phase", "finished");
    await nextRedraw();
    expect(button(el, "dagmagic-stop").textContent).toBe("Stop");
  });

  it("confirms a follow-up in the words Python answers with: what it will actually do", async () => {
    const { el, model } = mount();
    const input = /** @type {HTMLInputElement} */ (el.querySelector(".dagmagic-followup-input"));
    const notice = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-notice"));
    input.value = "also Spain";
    click(button(el, "dagmagic-followup-send"));
    expect(notice.hidden).toBe(false);
    expect(notice.textContent).not.toContain("replan"); // nothing is promised before Python says what happens
    const said =
      "Follow-up sent: steps not started are skipped and running ones finish. Then the verdict judges what " +
      "completed against the goal with your follow-up: a new round plans for it, unless those results already " +
      "answer it, and then the answer takes it into account.";
    model.answer({ value: { notice: said } });
    await answered();
    expect(notice.textContent).toBe(said);
  });

  it("gives a refused follow-up its text back", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { el, model } = mount();
    const input = /** @type {HTMLInputElement} */ (el.querySelector(".dagmagic-followup-input"));
    input.value = "also Spain";
    click(button(el, "dagmagic-followup-send"));
    expect(input.value).toBe("");
    model.answer({ error: "this run is done; a follow-up can only steer a running run." });
    await answered();
    expect(input.value).toBe("also Spain");
    expect(el.querySelector(".dagmagic-controls .dagmagic-message-text")?.textContent).toContain(
      "a follow-up can only",
    );
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-notice")).hidden).toBe(true);
  });
});

describe("trace", () => {
  it("lists every call with totals per purpose", async () => {
    const { el, model } = mount();
    const trace = /** @type {HTMLDetailsElement} */ (el.querySelector(".dagmagic-trace"));
    expect(trace.tagName).toBe("DETAILS");
    expect(trace.open).toBe(false);
    expect(trace.querySelector("summary")?.textContent).toBe("Trace: 4 LLM calls · 1,720 in · 260 out · $0.0102");
    const rows = [...trace.querySelectorAll("tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent));
    expect(rows[2]).toEqual(["step", "openai/gpt-4o-mini", "1", "s2", "", "2", "0", "0", "5.4s", "—"]);
    expect(trace.querySelector("tbody tr:nth-child(3)")?.classList.contains("dagmagic-trace-error")).toBe(true);
    const totals = [...trace.querySelectorAll("tfoot tr")].map((tr) => [...tr.children].map((td) => td.textContent));
    expect(totals).toEqual([
      ["per purpose", "in", "out", "latency (sum)", "cost"],
      ["analyze (1 call)", "800", "60", "0.9s", "$0.0050"],
      ["plan (1 call)", "500", "120", "1.2s", "$0.0040"],
      ["step (2 calls) · 1 failed", "420", "80", "8.4s", "$0.0012"],
      ["all (4 calls) · 1 failed", "1,720", "260", "10s", "$0.0102"],
    ]);
    trace.open = true;
    model.set("calls", [
      ...model.get("calls"),
      {
        purpose: "synthesize",
        model: "m",
        round: null,
        step_id: null,
        level: null,
        retries: 0,
        input_tokens: 10,
        output_tokens: 20,
        latency: 0.5,
        cost: null,
        error: null,
        stream: true,
      },
    ]);
    await nextRedraw();
    expect(trace.open).toBe(true); // survives redraws
    expect(trace.querySelectorAll("tbody tr").length).toBe(5);
    expect(trace.querySelector("tbody tr:last-child td:nth-child(9)")?.textContent).toBe("0.5s ⇣");
  });

  it("marks a call cancelled before its reply, whose usage is unknown", async () => {
    const { el, model } = mount();
    model.set("calls", [
      {
        purpose: "analyze",
        model: "m",
        round: 1,
        step_id: null,
        level: "tool_call",
        retries: 0,
        input_tokens: 0,
        output_tokens: 0,
        latency: 3.2,
        cost: null,
        error: null,
        stream: false,
        status: "cancelled",
      },
    ]);
    await nextRedraw();
    const row = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-trace tbody tr"));
    expect(row.classList.contains("dagmagic-trace-cancelled")).toBe(true);
    expect(row.title).toContain("usage is unknown");
    expect(el.querySelector(".dagmagic-trace tfoot tr:last-child th")?.textContent).toBe("all (1 call) · 1 cancelled");
  });
});

describe("cache", () => {
  it("marks a call answered from the response cache, and the header says what the cache saved", async () => {
    const { el, model } = mount();
    const call = {
      purpose: "step",
      model: "m",
      round: 1,
      step_id: "s1",
      level: null,
      retries: 0,
      input_tokens: 0,
      output_tokens: 0,
      latency: 0.01,
      cost: 0,
      error: null,
      stream: false,
      status: "ok",
    };
    model.set("calls", [
      { ...call, cached: true },
      { ...call, step_id: "s2", input_tokens: 90, cost: 0.0004 },
    ]);
    model.set("usage", {
      input_tokens: 90,
      output_tokens: 0,
      requests: 2,
      cost: 0.0004,
      cached_requests: 1,
      saved_cost: 0.0123,
    });
    await nextRedraw();
    const [hit, miss] = /** @type {HTMLElement[]} */ ([...el.querySelectorAll(".dagmagic-trace tbody tr")]);
    expect(hit.querySelector(".dagmagic-trace-cached")?.textContent).toBe("cached");
    expect(hit.title).toContain("response cache");
    expect(miss.querySelector(".dagmagic-trace-cached")).toBeNull();
    expect(el.querySelector(".dagmagic-trace tfoot tr:last-child th")?.textContent).toBe("all (2 calls) · 1 cached");
    const header = /** @type {Element} */ (el.querySelector(".dagmagic-header"));
    expect(header.querySelector(".dagmagic-total-requests")?.textContent).toBe("requests 2 (1 cached)");
    expect(header.querySelector(".dagmagic-total-cost")?.textContent).toBe("cost $0.0004 (saved $0.0123)");
    model.set("usage", {
      input_tokens: 0,
      output_tokens: 0,
      requests: 1,
      cost: 0,
      cached_requests: 1,
      saved_cost: null,
    });
    await nextRedraw();
    expect(header.querySelector(".dagmagic-total-cost")?.textContent).toBe("cost $0.0000 (saving unknown)");
  });
});

describe("lifecycle", () => {
  it("removes its listeners and stops redrawing after cleanup", async () => {
    const { el, model, cleanup } = mount();
    expect(model.listenerCount()).toBeGreaterThan(0);
    const registered = model.on.mock.calls.map(([event, fn]) => [event, fn]);
    model.set("status", "done"); // a redraw is pending...
    cleanup(); // ...and is dropped
    expect(model.off.mock.calls.map(([event, fn]) => [event, fn])).toEqual(registered);
    expect(model.listenerCount()).toBe(0);
    expect(el.querySelector(".dagmagic")).toBeNull();
    const reads = model.get.mock.calls.length;
    model.set("rounds", []);
    model.receive({ type: "error", message: "late" });
    await nextRedraw();
    expect(model.get.mock.calls.length).toBe(reads);
    expect(el.childElementCount).toBe(0);
  });

  it("survives a model with missing or malformed traits", () => {
    const { el } = mount({ status: "running", rounds: null, calls: undefined, usage: null });
    expect(el.querySelector(".dagmagic-planning")?.textContent).toBe("Planning…");
    expect(el.querySelector(".dagmagic-total-cost")?.textContent).toBe("cost —");
  });

  it("can be rendered again into the same element after cleanup (hot reload)", () => {
    const { el, model, cleanup } = mount();
    cleanup();
    const again = definitionOf(model).render({ model: /** @type {any} */ (model), el });
    expect(el.querySelectorAll(".dagmagic").length).toBe(1);
    expect(el.querySelectorAll(".dagmagic-node").length).toBe(5);
    again();
  });

  it("hides an older view of the same run when a newer one renders, and shows it again when that goes", () => {
    const { el: live, model } = mount();
    const value = document.createElement("div");
    document.body.append(value);
    const cleanup = definitionOf(model).render({ model: /** @type {any} */ (model), el: value });
    const [older, newer] = [live, value].map((el) => /** @type {HTMLElement} */ (el.querySelector(".dagmagic")));
    expect([older.hidden, newer.hidden]).toEqual([true, false]);
    const other = mount({ ...sampleState(), run_id: "run-2" });
    expect(/** @type {HTMLElement} */ (other.el.querySelector(".dagmagic")).hidden).toBe(false);
    const same = mount(sampleState()); // another widget of the same run hides nothing of this one's
    expect([older.hidden, newer.hidden, same.el.querySelector(".dagmagic")?.hasAttribute("hidden")]).toEqual([
      true,
      false,
      false,
    ]);
    cleanup();
    expect(older.hidden).toBe(false);
  });

  it("says when there is no plan at all", () => {
    const { el } = mount({ status: "failed", error: "The planner gave up", rounds: [] });
    expect(el.querySelector(".dagmagic-planning")?.textContent).toBe("No plan.");
    expect(el.querySelector(".dagmagic-error")?.textContent).toBe("The planner gave up");
  });

  it("keeps JupyterLab's notebook shortcuts off whatever takes focus in the widget", () => {
    const { el } = mount();
    expect(el.querySelector(".dagmagic")?.getAttribute("data-lm-suppress-shortcuts")).toBe("true");
    const node = /** @type {SVGElement} */ (/** @type {unknown} */ (nodeEl(el, "a")));
    node.focus();
    expect(node.getAttribute("data-lm-suppress-shortcuts")).toBe("true");
    const stop = /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-stop"));
    stop.focus();
    expect(stop.getAttribute("data-lm-suppress-shortcuts")).toBe("true");
  });

  it("logs with a [dagmagic] prefix", () => {
    const debug = vi.spyOn(console, "debug").mockImplementation(() => {});
    const { model } = mount();
    model.receive({ type: "unknown" });
    expect(debug).toHaveBeenCalledWith("[dagmagic]", "ignored message", { type: "unknown" });
  });
});

beforeEach(() => {
  vi.useRealTimers();
});

/**
 * Types into a text box the way a user does: the value, then an input event.
 * @param {Element | null} field
 * @param {string} value
 */
function type(field, value) {
  const box = /** @type {HTMLInputElement | HTMLTextAreaElement} */ (field);
  box.value = value;
  box.dispatchEvent(new Event("input", { bubbles: true }));
}

/**
 * @param {Element} el
 * @param {string} selector
 */
function buttonAt(el, selector) {
  const found = el.querySelector(selector);
  if (!(found instanceof HTMLButtonElement)) throw new Error(`no button ${selector}`);
  return found;
}

/**
 * @param {Element} el
 * @param {string} selector
 */
function fieldAt(el, selector) {
  const found = el.querySelector(selector);
  if (!(found instanceof HTMLTextAreaElement || found instanceof HTMLInputElement)) throw new Error(`no ${selector}`);
  return found;
}

describe("re-run a step", () => {
  it("offers a re-run of the latest round's steps once the run ended, with the task unless it was edited", async () => {
    const { el, model } = mount(rerunState());
    click(nodeEl(el, "c", 3));
    await nextRedraw();
    const task = fieldAt(el, ".dagmagic-detail .dagmagic-rerun-task");
    expect(task.value).toBe("Compute the ratio, to two decimals");
    const rerun = buttonAt(el, ".dagmagic-detail .dagmagic-rerun");
    expect(rerun.textContent).toBe("Re-run this step");
    rerun.click();
    expect(model.lastRequest()).toEqual({ type: "rerun", step: "c", task: null });
    expect(rerun.disabled).toBe(true); // until the state changes
    rerun.click();
    expect(model.requests()).toHaveLength(1);

    model.answer(); // Python took it: the run runs again...
    await answered();
    model.set("status", "running");
    model.set("can_rerun", false);
    await nextRedraw();
    expect(el.querySelector(".dagmagic-rerun")).toBeNull(); // ...and nothing can be re-run meanwhile
    model.set("status", "done");
    model.set("can_rerun", true);
    await nextRedraw();
    expect(buttonAt(el, ".dagmagic-detail .dagmagic-rerun").disabled).toBe(false);
  });

  it("sends an edited task, kept across redraws while it is typed", async () => {
    const { el, model } = mount(rerunState());
    click(nodeEl(el, "b", 3));
    await nextRedraw();
    const task = fieldAt(el, ".dagmagic-rerun-task");
    task.focus();
    type(task, "  Look up France's 2023 population  ");
    task.setSelectionRange(4, 8);
    const rounds = structuredClone(model.get("rounds"));
    rounds[2].nodes[1].output_tokens = 99; // a sync rebuilds the detail
    model.set("rounds", rounds);
    await nextRedraw();
    const again = fieldAt(el, ".dagmagic-rerun-task");
    expect(again).not.toBe(task);
    expect(again.value).toBe("  Look up France's 2023 population  ");
    expect(document.activeElement).toBe(again); // the user keeps typing where they were
    expect([again.selectionStart, again.selectionEnd]).toEqual([4, 8]);

    type(again, "   ");
    expect(buttonAt(el, ".dagmagic-rerun").disabled).toBe(true); // no task to run
    type(again, "  Look up France's 2023 population  ");
    buttonAt(el, ".dagmagic-rerun").click();
    expect(model.lastRequest()).toEqual({ type: "rerun", step: "b", task: "Look up France's 2023 population" });
  });

  it("lets the user try again when Python refuses", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { el, model } = mount(rerunState());
    click(nodeEl(el, "a", 3));
    await nextRedraw();
    buttonAt(el, ".dagmagic-rerun").click();
    expect(buttonAt(el, ".dagmagic-rerun").disabled).toBe(true);
    model.answer({ error: "this run was not started here, so it cannot re-run a step" });
    await answered();
    await nextRedraw();
    expect(el.querySelector(".dagmagic-message-text")?.textContent).toContain("cannot re-run a step");
    expect(buttonAt(el, ".dagmagic-rerun").disabled).toBe(false);
  });

  it("offers no re-run in an earlier round, nor while the run cannot re-run", async () => {
    const { el, model } = mount(rerunState());
    click(/** @type {Element} */ (el.querySelector('.dagmagic-round[data-round="2"] .dagmagic-round-toggle')));
    await nextRedraw();
    click(nodeEl(el, "c", 2));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("c");
    expect(el.querySelector(".dagmagic-rerun-task, .dagmagic-rerun")).toBeNull();
    click(nodeEl(el, "c", 3));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-rerun")).not.toBeNull();
    model.set("can_rerun", false);
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("c");
    expect(el.querySelector(".dagmagic-rerun")).toBeNull();
  });

  it("labels a re-run round and lists what changed from the round it re-ran", async () => {
    const state = rerunState();
    const { el, model } = mount(state);
    const round3 = /** @type {Element} */ (el.querySelector('.dagmagic-round[data-round="3"]'));
    expect(round3.querySelector(".dagmagic-round-toggle .dagmagic-rerun-label")?.textContent).toBe(
      "re-run of round 2 (c)",
    );
    expect(el.querySelector('.dagmagic-round[data-round="2"] .dagmagic-rerun-label')).toBeNull();
    const items = [...round3.querySelectorAll(".dagmagic-diff li")];
    expect(items.map((li) => [li.getAttribute("data-step-id"), li.textContent])).toEqual([
      ["c", "c changed: task, result"],
      ["e", "e changed: result"],
      ["f", "f added"],
    ]);
    // below the graph
    const graph = /** @type {Element} */ (round3.querySelector(".dagmagic-graph-wrap"));
    expect(graph.compareDocumentPosition(/** @type {Element} */ (round3.querySelector(".dagmagic-diff")))).toBe(
      Node.DOCUMENT_POSITION_FOLLOWING,
    );
    click(/** @type {Element} */ (items[0].querySelector("[data-goto-step]"))); // a step that exists opens
    await nextRedraw();
    expect(el.querySelector('.dagmagic-round[data-round="3"] .dagmagic-detail')?.getAttribute("data-step-id")).toBe(
      "c",
    );

    const rounds = structuredClone(model.get("rounds"));
    rounds[2].diff = [];
    model.set("rounds", rounds);
    await nextRedraw();
    expect(el.querySelector('.dagmagic-round[data-round="3"] .dagmagic-diff')?.textContent).toBe("No step changed");
  });
});

describe("plan approval", () => {
  /** @param {Element} el */
  const rows = (el) => [...el.querySelectorAll(".dagmagic-approval .dagmagic-approval-step")];

  it("shows the waiting plan's steps for editing above its graph, and says so in the header", () => {
    const { el } = mount(approvalState());
    expect(el.querySelector(".dagmagic-status")?.textContent).toBe("waiting for your approval…");
    const panel = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-approval"));
    expect(panel.hidden).toBe(false);
    expect(panel.querySelector("h3")?.textContent).toBe("This plan waits for your approval");
    expect(
      rows(el).map((row) => [
        row.getAttribute("data-step-id"),
        fieldAt(row, ".dagmagic-approval-id").readOnly,
        fieldAt(row, ".dagmagic-approval-task").value,
        fieldAt(row, ".dagmagic-approval-deps").value,
        fieldAt(row, ".dagmagic-approval-tool").value,
        fieldAt(row, ".dagmagic-approval-model").value,
      ]),
    ).toEqual([
      ["s1", true, "Find Germany's population", "", "web_search", ""],
      ["s2", true, "Compare it with France's", "s1", "", "fast"],
      ["s3", true, "Explain the trend", "s1, r1.s1", "", ""],
    ]);
    expect(el.querySelectorAll('.dagmagic-round[data-round="2"] .dagmagic-node').length).toBe(3); // drawn as usual
  });

  it("approves the plan as it is with no plan", async () => {
    const { el, model } = mount(approvalState());
    const approve = buttonAt(el, ".dagmagic-approve");
    approve.click();
    expect(model.lastRequest()).toEqual({ type: "approve", plan: null });
    expect(approve.disabled).toBe(true);
    model.set("phase", "executing");
    const rounds = structuredClone(model.get("rounds"));
    rounds[1].approval = "approved";
    model.set("rounds", rounds);
    await nextRedraw();
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-approval")).hidden).toBe(true);
  });

  it("sends the whole edited plan: a task changed, a step removed, one added", async () => {
    const { el, model } = mount(approvalState());
    type(rows(el)[1].querySelector(".dagmagic-approval-task"), "Compare it with France's, per capita ");
    click(/** @type {Element} */ (rows(el)[2].querySelector(".dagmagic-approval-remove")));
    click(buttonAt(el, ".dagmagic-approval-add"));
    const added = rows(el)[2];
    expect(added.getAttribute("data-step-id")).toBe("s4"); // s3 was the plan's: not reused
    expect(fieldAt(added, ".dagmagic-approval-id").readOnly).toBe(false);
    expect(buttonAt(el, ".dagmagic-approve").disabled).toBe(true); // the new step has no task yet
    expect(el.querySelector(".dagmagic-approval-note")?.textContent).toBe("Step s4 has no task.");
    type(added.querySelector(".dagmagic-approval-id"), "s9");
    expect(added.getAttribute("data-step-id")).toBe("s9");
    type(added.querySelector(".dagmagic-approval-task"), "Chart both");
    type(added.querySelector(".dagmagic-approval-deps"), " s1, s2 ,, ");
    type(added.querySelector(".dagmagic-approval-model"), " strong ");
    expect(buttonAt(el, ".dagmagic-approve").disabled).toBe(false);
    buttonAt(el, ".dagmagic-approve").click();
    expect(model.lastRequest()).toEqual({
      type: "approve",
      plan: {
        steps: [
          { id: "s1", task: "Find Germany's population", dependencies: [], tool_hint: "web_search", model_hint: null },
          {
            id: "s2",
            task: "Compare it with France's, per capita",
            dependencies: ["s1"],
            tool_hint: null,
            model_hint: "fast",
          },
          { id: "s9", task: "Chart both", dependencies: ["s1", "s2"], tool_hint: null, model_hint: "strong" },
        ],
      },
    });
  });

  it("keeps a tool step's arguments in an edited plan, unless its tool hint was changed", () => {
    const state = approvalState();
    const [s1, , s3] = state.rounds[1].nodes;
    Object.assign(s1, { tool_args: { query: "Germany population" } });
    Object.assign(s3, { tool_hint: "calc", tool_args: { x: "$s1" } });
    const { el, model } = mount(state);
    expect(el.querySelector(".dagmagic-approval-note")?.textContent).toBe(""); // not edited yet
    type(rows(el)[1].querySelector(".dagmagic-approval-task"), "Compare it with France's, per capita");
    type(rows(el)[2].querySelector(".dagmagic-approval-tool"), "search");
    buttonAt(el, ".dagmagic-approve").click();
    const [first, , third] = model.lastRequest().plan.steps;
    expect(first).toEqual({
      id: "s1",
      task: "Find Germany's population",
      dependencies: [],
      tool_hint: "web_search",
      model_hint: null,
      tool_args: { query: "Germany population" },
    });
    expect(third.tool_hint).toBe("search");
    expect("tool_args" in third).toBe(false); // another tool: an agent runs the step
  });

  it("keeps the draft across syncs, resets it for another round, and re-enables after a refusal", async () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const { el, model } = mount(approvalState());
    type(rows(el)[0].querySelector(".dagmagic-approval-task"), "Find Germany's population in 2024");
    type(el.querySelector(".dagmagic-reject-feedback"), "draft feedback");
    model.set("now", model.get("now") + 1);
    model.set("rounds", structuredClone(model.get("rounds")));
    await nextRedraw();
    expect(fieldAt(rows(el)[0], ".dagmagic-approval-task").value).toBe("Find Germany's population in 2024");
    expect(fieldAt(el, ".dagmagic-reject-feedback").value).toBe("draft feedback");

    buttonAt(el, ".dagmagic-approve").click();
    expect(buttonAt(el, ".dagmagic-approve").disabled).toBe(true);
    model.answer({ error: "step s1: the task is empty" });
    await answered();
    expect(buttonAt(el, ".dagmagic-approve").disabled).toBe(false);
    expect(el.querySelector(".dagmagic-approval .dagmagic-message-text")?.textContent).toBe(
      "step s1: the task is empty",
    );

    // the plan is rejected and round 3 waits: a fresh draft
    const rounds = structuredClone(model.get("rounds"));
    rounds[1].approval = "rejected";
    rounds.push({ ...structuredClone(rounds[1]), index: 3, approval: "pending" });
    model.set("rounds", rounds);
    await nextRedraw();
    expect(fieldAt(rows(el)[0], ".dagmagic-approval-task").value).toBe("Find Germany's population");
    expect(fieldAt(el, ".dagmagic-reject-feedback").value).toBe("");
  });

  it("rejects only with feedback", async () => {
    const { el, model } = mount(approvalState());
    const reject = buttonAt(el, ".dagmagic-reject");
    expect(reject.textContent).toBe("Reject and replan");
    expect(reject.disabled).toBe(true);
    type(el.querySelector(".dagmagic-reject-feedback"), "   ");
    expect(reject.disabled).toBe(true);
    reject.click();
    expect(model.send).not.toHaveBeenCalled();
    type(el.querySelector(".dagmagic-reject-feedback"), " Use Eurostat, not Wikipedia ");
    expect(reject.disabled).toBe(false);
    reject.click();
    expect(model.lastRequest()).toEqual({ type: "reject", feedback: "Use Eurostat, not Wikipedia" });
    expect(reject.disabled).toBe(true);
  });

  it("shows no panel unless the latest round waits and the run is waiting", async () => {
    const { el, model } = mount(approvalState());
    model.set("phase", "planning");
    await nextRedraw();
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-approval")).hidden).toBe(true);
    const other = mount({ ...approvalState(), phase: "awaiting_approval" });
    const rounds = structuredClone(other.model.get("rounds"));
    rounds[1].approval = "approved";
    other.model.set("rounds", rounds);
    await nextRedraw();
    expect(/** @type {HTMLElement} */ (other.el.querySelector(".dagmagic-approval")).hidden).toBe(true);
    const ended = mount({ ...approvalState(), status: "cancelled" }); // a run that ended does not wait
    expect(/** @type {HTMLElement} */ (ended.el.querySelector(".dagmagic-approval")).hidden).toBe(true);
  });
});

describe("breakpoints", () => {
  it("marks the paused step, opens its detail with what it is about to send, as text", () => {
    const { el } = mount(pausedState());
    const c = nodeEl(el, "c");
    expect(c.getAttribute("data-status")).toBe("paused");
    expect(c.querySelector(".dagmagic-node-id")?.textContent).toBe("‖ c");
    expect(el.querySelector('.dagmagic-round[data-round="2"] .dagmagic-round-summary')?.textContent).toBe(
      "5 steps · 2 ✓ · 1 ↻ · 1 ‖",
    );
    const detail = /** @type {Element} */ (el.querySelector(".dagmagic-detail"));
    expect(detail.getAttribute("data-step-id")).toBe("c"); // nothing else was selected
    const paused = /** @type {Element} */ (detail.querySelector(".dagmagic-paused"));
    expect(paused.querySelector("h4")?.textContent).toBe("About to send");
    const messages = /** @type {HTMLDetailsElement[]} */ ([
      ...paused.querySelectorAll("details.dagmagic-paused-message"),
    ]);
    expect(messages.map((m) => m.getAttribute("data-role"))).toEqual(["system", "user"]);
    expect(
      messages.map((m) => m.querySelector("summary")?.textContent?.startsWith(m.getAttribute("data-role") ?? "?")),
    ).toEqual([true, true]);
    expect(messages[1].querySelector("pre")?.textContent).toBe(
      'Task: Compute the ratio\n\nContext from a: <img src=x onerror="alert(1)">',
    );
    expect(paused.querySelector("img, [onerror]")).toBeNull();
    expect(messages.map((m) => m.open)).toEqual([false, true]); // the task is what matters most
    expect(paused.querySelector(".dagmagic-paused-tools")?.textContent).toBe("web_search, fetch_url");
    expect(fieldAt(paused, ".dagmagic-paused-task").value).toBe("Compute the ratio of the two populations");
    expect(["continue", "step", "skip"].map((cls) => buttonAt(paused, `.dagmagic-${cls}`).textContent)).toEqual([
      "Continue",
      "Step",
      "Skip",
    ]);
  });

  it("continues with the task unless edited, and waits for the next state", async () => {
    const { el, model } = mount(pausedState());
    buttonAt(el, ".dagmagic-continue").click();
    expect(model.lastRequest()).toEqual({ type: "continue", step: "c", task: null });
    for (const cls of ["continue", "step", "skip"]) expect(buttonAt(el, `.dagmagic-${cls}`).disabled).toBe(true);
    buttonAt(el, ".dagmagic-skip").click();
    expect(model.requests()).toHaveLength(1);
    const rounds = structuredClone(model.get("rounds"));
    Object.assign(rounds[1].nodes[2], { status: "running", started_at: model.get("now"), paused_messages: null });
    model.set("rounds", rounds);
    await nextRedraw();
    expect(el.querySelector(".dagmagic-paused")).toBeNull();
    expect(el.querySelector(".dagmagic-detail")).toBeNull(); // it was opened because it paused
  });

  it("steps with an edited task, and skips", async () => {
    const first = mount(pausedState());
    type(first.el.querySelector(".dagmagic-paused-task"), "Compute the ratio, Germany over France");
    buttonAt(first.el, ".dagmagic-step").click();
    expect(first.model.lastRequest()).toEqual({
      type: "step",
      step: "c",
      task: "Compute the ratio, Germany over France",
    });
    const second = mount(pausedState());
    type(second.el.querySelector(".dagmagic-paused-task"), "");
    expect(buttonAt(second.el, ".dagmagic-continue").disabled).toBe(true); // no task to run
    expect(buttonAt(second.el, ".dagmagic-skip").disabled).toBe(false);
    buttonAt(second.el, ".dagmagic-skip").click();
    expect(second.model.lastRequest()).toEqual({ type: "skip", step: "c" });
  });

  it("keeps the edited task and the opened messages while other steps run", async () => {
    const { el, model } = mount(pausedState());
    type(el.querySelector(".dagmagic-paused-task"), "edited");
    const system = /** @type {HTMLDetailsElement} */ (el.querySelector('.dagmagic-paused-message[data-role="system"]'));
    system.open = true;
    await new Promise((resolve) => setTimeout(resolve, 0)); // the toggle event
    const rounds = structuredClone(model.get("rounds"));
    rounds[1].nodes[3].status = "running";
    model.set("rounds", rounds);
    model.set("now", model.get("now") + 0.5);
    await nextRedraw();
    expect(el.querySelector(".dagmagic-paused-message")).not.toBe(system); // rebuilt
    expect(fieldAt(el, ".dagmagic-paused-task").value).toBe("edited");
    const open = [...el.querySelectorAll(".dagmagic-paused-message")].map(
      (m) => /** @type {HTMLDetailsElement} */ (m).open,
    );
    expect(open).toEqual([true, true]);
  });

  it("shows the user's own selection first, and a closed paused step stays closed", async () => {
    const { el } = mount(pausedState());
    click(nodeEl(el, "a"));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("a");
    click(/** @type {Element} */ (el.querySelector(".dagmagic-detail-close")));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("c"); // back to the paused one
    click(/** @type {Element} */ (el.querySelector(".dagmagic-detail-close")));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")).toBeNull();
    click(nodeEl(el, "c"));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail .dagmagic-paused")).not.toBeNull();
  });

  it("says when no tools are offered", () => {
    const state = pausedState();
    state.rounds[1].nodes[2].paused_tools = [];
    const { el } = mount(state);
    expect(el.querySelector(".dagmagic-paused-tools")?.textContent).toBe("no tools");
  });
});

describe("older states", () => {
  it("renders a state saved before re-runs, approvals and breakpoints", async () => {
    const state = sampleState();
    for (const round of state.rounds) {
      for (const n of round.nodes) {
        delete n.tool_hint;
        delete n.model_hint;
      }
    }
    const { el, model } = mount(state);
    expect(el.querySelectorAll(".dagmagic-node").length).toBe(5);
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-approval")).hidden).toBe(true);
    expect(el.querySelector(".dagmagic-rerun-label, .dagmagic-diff, .dagmagic-paused")).toBeNull();
    expect(el.querySelector(".dagmagic-detail")).toBeNull(); // nothing paused: nothing opened
    model.set("status", "done");
    await nextRedraw();
    click(nodeEl(el, "e"));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("e");
    expect(el.querySelector(".dagmagic-rerun")).toBeNull(); // no can_rerun: no re-run
    expect(el.querySelector(".dagmagic-detail")?.textContent).not.toContain("Hints");
  });
});

describe("sub-DAGs", () => {
  /** @param {Element} el */
  function subrunEl(el) {
    const found = el.querySelector(".dagmagic-detail details.dagmagic-subrun");
    if (!found) throw new Error("no sub-run");
    return /** @type {HTMLDetailsElement} */ (found);
  }

  /** @param {Element} el */
  async function openDetail(el, id = "c") {
    click(nodeEl(el, id));
    await nextRedraw();
  }

  /** @param {Element} g */
  function badgeBox(g) {
    const r = /** @type {Element} */ (g.querySelector("rect"));
    const [x, y, w, h] = ["x", "y", "width", "height"].map((a) => Number(r.getAttribute(a)));
    return { x, y, w, h };
  }

  it("marks a composite step with a sub-DAG badge inside its box, next to its other badges", () => {
    const { el } = mount(subrunState());
    const c = nodeEl(el, "c");
    const badge = /** @type {Element} */ (c.querySelector(".dagmagic-node-subrun"));
    expect(badge.textContent).toBe("sub-DAG");
    expect(badge.classList.contains("dagmagic-badge")).toBe(true);
    expect(badge.getAttribute("data-status")).toBe("running");
    expect(el.querySelectorAll(".dagmagic-node-subrun").length).toBe(1); // the other steps are plain
    const outer = box(c);
    const inner = badgeBox(badge);
    expect(inner.x).toBeGreaterThanOrEqual(outer.x);
    expect(inner.y).toBeGreaterThanOrEqual(outer.y);
    expect(inner.x + inner.w).toBeLessThanOrEqual(outer.x + outer.w);
    expect(inner.y + inner.h).toBeLessThanOrEqual(outer.y + outer.h);
    for (const other of c.querySelectorAll(".dagmagic-badge:not(.dagmagic-node-subrun)")) {
      const b = badgeBox(other);
      expect(b.x + b.w <= inner.x || inner.x + inner.w <= b.x).toBe(true);
    }
    expect(c.getAttribute("aria-label")).toContain("sub-DAG running");
    // still deterministic
    expect(latestSvg(mount(subrunState()).el).outerHTML).toBe(latestSvg(el).outerHTML);
  });

  it("shows the sub-run collapsed in the step's detail, summarized", async () => {
    const { el } = mount(subrunState("done"));
    await openDetail(el);
    const details = subrunEl(el);
    expect(details.open).toBe(false);
    expect(details.querySelector("summary")?.textContent).toBe("Sub-DAG · 3 steps · done");
    expect(details.getAttribute("data-status")).toBe("done");
    expect(nodeEl(el, "c").querySelector(".dagmagic-node-subrun")?.getAttribute("data-status")).toBe("done");
    // the answer is also the step's result, rendered there
    expect(el.querySelector(".dagmagic-detail-result")?.textContent?.trim()).toBe(
      "Germany has about 1.24 times as many people as France.",
    );
  });

  it("expanded, draws the nested rounds with their steps, verdict and the answer as text", async () => {
    const { el } = mount(subrunState("done"));
    await openDetail(el);
    const details = subrunEl(el);
    click(/** @type {Element} */ (details.querySelector("summary")));
    expect(details.open).toBe(true);
    const round = /** @type {Element} */ (details.querySelector('.dagmagic-subrun-round[data-round="1"]'));
    expect(round.querySelector(".dagmagic-round-summary")?.textContent).toBe(
      "3 steps · 3 ✓ · achieved 90% · synthesize",
    );
    const nodes = [...round.querySelectorAll("svg.dagmagic-graph .dagmagic-node")];
    expect(nodes.map((n) => [n.getAttribute("data-step-id"), n.getAttribute("data-status")])).toEqual([
      ["a", "completed"],
      ["b", "completed"],
      ["c", "completed"],
    ]);
    expect(nodes.every((n) => !n.hasAttribute("tabindex"))).toBe(true); // not selectable: no focus stop
    expect([...round.querySelectorAll(".dagmagic-edge")].map((e) => e.getAttribute("data-target"))).toEqual(["c", "c"]);
    expect(round.querySelector(".dagmagic-verdict-reasoning")?.textContent).toBe("The ratio is computed.");
    expect(details.querySelector(".dagmagic-subrun-answer")?.textContent).toBe(
      "Germany has about 1.24 times as many people as France.",
    );
    expect(details.querySelector(".dagmagic-subrun-error")).toBeNull();
  });

  it("updates live, keeping the sub-run open across redraws until the user closes it", async () => {
    const { el, model } = mount(subrunState());
    await openDetail(el);
    const first = subrunEl(el);
    expect(first.querySelector("summary")?.textContent).toBe("Sub-DAG · 3 steps · running");
    expect(first.textContent).toContain("No answer yet.");
    first.open = true;
    /** @type {HTMLElement} */ (first.querySelector("summary")).focus();

    model.set("now", model.get("now") + 0.5); // a running step: its section is rebuilt
    await nextRedraw();
    const second = subrunEl(el);
    expect(second).not.toBe(first);
    expect(second.open).toBe(true);
    expect(document.activeElement).toBe(second.querySelector("summary")); // the keyboard user stays there

    model.set("rounds", subrunState("done").rounds);
    await nextRedraw();
    const third = subrunEl(el);
    expect(third).not.toBe(second);
    expect(third.open).toBe(true);
    expect(third.querySelector("summary")?.textContent).toBe("Sub-DAG · 3 steps · done");
    expect(third.querySelector('.dagmagic-node[data-step-id="c"]')?.getAttribute("data-status")).toBe("completed");
    expect(third.querySelector(".dagmagic-subrun-answer")?.textContent).toContain("1.24 times");

    click(/** @type {Element} */ (third.querySelector("summary")));
    model.set("now", model.get("now") + 0.5);
    model.set("rounds", subrunState("running").rounds);
    await nextRedraw();
    expect(subrunEl(el).open).toBe(false);

    // closing the detail and opening it again keeps the choice too
    subrunEl(el).open = true;
    click(nodeEl(el, "c"));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-subrun")).toBeNull();
    click(nodeEl(el, "c"));
    await nextRedraw();
    expect(subrunEl(el).open).toBe(true);
  });

  it("does not take a click or key on a nested step for one of the run's own steps", async () => {
    const { el, model } = mount(subrunState("done"));
    await openDetail(el);
    subrunEl(el).open = true;
    const nested = /** @type {Element} */ (subrunEl(el).querySelector('.dagmagic-node[data-step-id="a"]'));
    click(/** @type {Element} */ (nested.querySelector("rect")));
    nested.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("c");
    expect(nodeEl(el, "a").classList.contains("dagmagic-node--selected")).toBe(false);
    expect(nodeEl(el, "c").classList.contains("dagmagic-node--selected")).toBe(true);
    expect(subrunEl(el).open).toBe(true);
    expect(model.send).not.toHaveBeenCalled();

    click(nodeEl(el, "a")); // the run's own a still opens
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("a");
  });

  it("shows a failed sub-run's error as text, and nests a composite nested step", async () => {
    const state = subrunState("done");
    const subrun = state.rounds[1].nodes[2].subrun;
    Object.assign(subrun, { status: "failed", answer: "", error: 'no plan: <img src=x onerror="alert(1)">' });
    subrun.rounds[0].nodes[1].subrun = {
      status: "done",
      answer: "68 million",
      error: "",
      rounds: [
        { ...structuredClone(subrun.rounds[0]), nodes: [structuredClone(subrun.rounds[0].nodes[0])], edges: [] },
      ],
    };
    const { el } = mount(state);
    await openDetail(el);
    const details = subrunEl(el);
    expect(details.querySelector("summary")?.textContent).toBe("Sub-DAG · 3 steps · failed");
    expect(details.querySelector(".dagmagic-subrun-error")?.textContent).toBe(
      'no plan: <img src=x onerror="alert(1)">',
    );
    expect(details.querySelector("img, [onerror]")).toBeNull();
    expect(details.querySelector(":scope > .dagmagic-subrun-answer-wrap")).toBeNull(); // (the nested one has one)
    expect(details.querySelector('.dagmagic-node[data-step-id="b"] .dagmagic-node-subrun')).not.toBeNull();
    const inner = /** @type {HTMLDetailsElement} */ (details.querySelector("details.dagmagic-subrun"));
    expect(inner.querySelector("summary")?.textContent).toBe("Sub-DAG of b · 1 step · done");
    expect(inner.getAttribute("data-subrun-key")).toBe(JSON.stringify([2, "c", 1, "b"]));
    expect(inner.querySelector(".dagmagic-subrun-answer")?.textContent).toBe("68 million");
  });

  it("renders a state without sub-runs as before", async () => {
    const old = mount(sampleState());
    const explicit = sampleState();
    for (const round of explicit.rounds) for (const n of round.nodes) n.subrun = null;
    const nulls = mount(explicit);
    expect(latestSvg(old.el).outerHTML).toBe(latestSvg(nulls.el).outerHTML);
    expect(old.el.querySelector(".dagmagic-node-subrun")).toBeNull();
    await openDetail(old.el);
    expect(old.el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("c");
    expect(old.el.querySelector(".dagmagic-subrun")).toBeNull();
    expect(nodeEl(old.el, "c").getAttribute("aria-label")).toBe(
      "Step c, running: Compute the ratio of the two populations",
    );
  });
});

describe("tool steps", () => {
  /** @param {Element} el @param {string} id */
  async function openDetail(el, id) {
    click(nodeEl(el, id));
    await nextRedraw();
    return /** @type {Element} */ (el.querySelector(`.dagmagic-detail[data-step-id="${id}"]`));
  }

  /** @param {Element} detail */
  function args(detail) {
    return [...detail.querySelectorAll(".dagmagic-toolstep-arg")].map((arg) => ({
      name: arg.getAttribute("data-arg"),
      planned: arg.querySelector(".dagmagic-toolstep-planned")?.textContent,
      value: arg.querySelector(".dagmagic-toolstep-value")?.textContent ?? null,
      title: arg.querySelector(".dagmagic-toolstep-value")?.getAttribute("title") ?? null,
    }));
  }

  it("marks a tool step with a tool badge instead of a model, and shows its call with the values it got", () => {
    const { el } = mount(toolStepState().state);
    const b = nodeEl(el, "b");
    expect(b.querySelector(".dagmagic-badge-direct text")?.textContent).toBe("tool");
    expect(b.querySelector(".dagmagic-badge-model")).toBeNull(); // no model ran
    expect(b.querySelector(".dagmagic-badge-tool")).toBeNull(); // the call names the tool
    expect(b.querySelector(".dagmagic-node-task")?.textContent).toBe("Add the two figures");
    expect(b.querySelector(".dagmagic-node-call")?.textContent).toBe("add(a=$a → 68.4, b=12)");
    expect(b.querySelector("title")?.textContent).toBe("b (✓ completed): Add the two figures\nadd(a=$a → 68.4, b=12)");
    expect(b.getAttribute("aria-label")).toContain("a direct call of add");
    // not run yet: the planned call, references as written
    expect(nodeEl(el, "e").querySelector(".dagmagic-node-call")?.textContent).toBe("divide(x=$b, y=$d)");
    // a long call is cut to the box, whole in the title
    const c = nodeEl(el, "c");
    const call = String(c.querySelector(".dagmagic-node-call")?.textContent);
    expect(call.endsWith("…") && call.length <= 30).toBe(true);
    expect(c.querySelector("title")?.textContent).toContain(
      'search(query="population of $a million" → "population of 68.4 million", limit="many")',
    );
    // its direct call failed and an agent ran it: the agent's model is named too
    expect(c.querySelector(".dagmagic-badge-direct text")?.textContent).toBe("tool");
    expect(c.querySelector(".dagmagic-badge-model text")?.textContent).toBe("gpt-4o-mini");
    // an agent step is drawn as before
    expect(nodeEl(el, "a").querySelector(".dagmagic-node-call")).toBeNull();
    expect(nodeEl(el, "a").querySelector(".dagmagic-badge-direct")).toBeNull();
  });

  it("details the call: each argument as planned and the value it became, long values cut with the whole in the title", async () => {
    const { state, report, fallback } = toolStepState();
    const { el } = mount(state);
    let detail = await openDetail(el, "b");
    expect(detail.querySelector(".dagmagic-toolstep-call")?.textContent).toBe("add(a=$a → 68.4, b=12)");
    expect(args(detail)).toEqual([
      { name: "a", planned: "$a", value: "68.4", title: "68.4" },
      { name: "b", planned: "12", value: null, title: null },
    ]);
    expect(detail.querySelector(".dagmagic-toolstep-how")?.textContent).toBe("Called directly: no LLM call.");
    expect(detail.textContent).toContain("none (a direct tool call)"); // the model field
    expect(detail.querySelectorAll(".dagmagic-toolcall").length).toBe(1); // the call itself, arguments in full

    detail = await openDetail(el, "d");
    const [text] = args(detail);
    expect(text.planned).toBe("$c");
    expect(text.value?.endsWith("…") && text.value.length <= 80).toBe(true);
    expect(text.title).toBe(report); // the whole value

    detail = await openDetail(el, "c");
    expect(args(detail)[0]).toEqual({
      name: "query",
      planned: '"population of $a million"',
      value: '"population of 68.4 million"',
      title: '"population of 68.4 million"',
    });
    expect(detail.querySelector(".dagmagic-toolstep-how")?.textContent).toBe(
      `The direct call failed (${fallback}), so an agent ran the step.`,
    );
    expect(detail.textContent).toContain("openai/gpt-4o-mini");

    detail = await openDetail(el, "e");
    expect(detail.querySelector(".dagmagic-toolstep-call")?.textContent).toBe("divide(x=$b, y=$d)");
    expect(detail.querySelector(".dagmagic-toolstep-how")?.textContent).toBe(
      "To be called directly, with its dependencies' results: no LLM call.",
    );
  });

  it("draws a step of an older state, without tool arguments, as an agent step", () => {
    const { state } = toolStepState();
    for (const n of state.rounds[1].nodes) delete n.tool_args;
    const { el } = mount(state);
    expect(el.querySelector(".dagmagic-node-call, .dagmagic-badge-direct")).toBeNull();
    expect(nodeEl(el, "b").querySelector(".dagmagic-badge-tool text")?.textContent).toBe("add");
  });
});
