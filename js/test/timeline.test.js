import { describe, expect, it } from "vitest";

import { textWidth } from "../src/layout.js";
import { createTimeline, timelineOf } from "../src/timeline.js";
import { sampleState } from "./fixtures.js";

describe("timeline", () => {
  it("puts every started step and every call outside a step on one time axis", () => {
    const state = sampleState();
    const { labels, bars, start, end } = timelineOf(state);
    const started = state.rounds.flatMap((r) => r.nodes).filter((n) => n.queued_at !== null || n.started_at !== null);
    const purposes = new Set(state.calls.filter((c) => !c.step_id && c.started_at).map((c) => c.purpose));
    expect(labels.length).toBe(started.length + purposes.size);
    expect(labels.slice(0, 2).every((label) => /^r\d+\./.test(label))).toBe(true); // several rounds: rN.id
    for (const bar of bars) {
      expect(bar.start).toBeGreaterThanOrEqual(start - 1e-9);
      expect(bar.end).toBeLessThanOrEqual(end + 1e-9);
      expect(bar.end).toBeGreaterThanOrEqual(bar.start);
    }
    const kinds = new Set(bars.map((b) => b.kind));
    expect(kinds.has("completed")).toBe(true);
  });

  it("shows a step's wait for a slot apart from its run, and a running step up to now", () => {
    const state = sampleState();
    const t0 = timelineOf(state).start;
    const node = state.rounds[0].nodes[0];
    node.queued_at = t0 + 1;
    node.started_at = t0 + 3;
    node.completed_at = null;
    node.status = "running";
    state.status = "running";
    state.now = t0 + 10;
    const { bars, labels } = timelineOf(state);
    const row = labels.findIndex((label) => label.startsWith(`r1.${node.id} `));
    const own = bars.filter((b) => b.row === row);
    expect(own.map((b) => b.kind)).toEqual(["queued", "running"]);
    expect(own[0].end - own[0].start).toBeCloseTo(2);
    expect(own[1].end).toBeCloseTo(state.now);
  });

  it("draws an SVG with a bar per segment, text only, collapsed by default", () => {
    const state = sampleState();
    state.rounds[0].nodes[0].task = "<img src=x onerror=alert(1)>";
    const timeline = createTimeline();
    timeline.update(state);
    expect(timeline.el.tagName).toBe("DETAILS");
    expect(/** @type {HTMLDetailsElement} */ (timeline.el).open).toBe(false);
    const { bars } = timelineOf(state);
    expect(timeline.el.querySelectorAll(".dagmagic-timeline-bar").length).toBe(bars.length);
    expect(timeline.el.querySelector("img")).toBeNull();
    expect(timeline.el.querySelector(".dagmagic-timeline-summary")?.textContent).toMatch(/^Timeline · .+ · \d+ rows$/);
  });

  it("says when nothing ran yet", () => {
    const state = sampleState();
    state.rounds = [];
    state.calls = [];
    const timeline = createTimeline();
    timeline.update(state);
    expect(timeline.el.textContent).toContain("Nothing has run yet.");
  });

  it("says a step's whole task in its bars' tooltips, and keeps its label clear of the 0 s line", () => {
    const state = sampleState();
    const task = "Find the population of Reykjavík in 2023 from the national statistics office of Iceland";
    const node = state.rounds[0].nodes[0];
    node.task = task;
    node.attempts = 3;
    const timeline = createTimeline();
    timeline.update(state);
    const svg = /** @type {SVGSVGElement} */ (timeline.el.querySelector("svg"));
    const zero = Number(svg.querySelector(".dagmagic-timeline-tick")?.getAttribute("x1"));
    const labels = [...svg.querySelectorAll(".dagmagic-timeline-label")];
    expect(labels.length).toBeGreaterThan(2);
    for (const label of labels) {
      const x = Number(label.getAttribute("x"));
      expect(x + textWidth(String(label.textContent), 10), String(label.textContent)).toBeLessThan(zero);
    }
    const row = labels.findIndex((l) => l.textContent?.startsWith(`r1.${node.id} (3 tries)`));
    expect(row).toBeGreaterThanOrEqual(0);
    const titles = [...svg.querySelectorAll(`.dagmagic-timeline-bar[data-row="${row}"] title`)].map(
      (t) => t.textContent,
    );
    expect(titles.length).toBeGreaterThan(0);
    for (const title of titles) expect(title).toContain(`r1.${node.id} (3 tries) · ${task}`);
  });

  it("is as wide as the space it has, its text at its own size", () => {
    const state = sampleState();
    const timeline = createTimeline();
    Object.defineProperty(timeline.el, "clientWidth", { configurable: true, get: () => 1100 });
    timeline.update(state);
    const svg = /** @type {SVGSVGElement} */ (timeline.el.querySelector("svg"));
    expect(svg.getAttribute("width")).toBe("1100");
    expect(svg.getAttribute("viewBox")?.split(" ")[2]).toBe("1100"); // one unit a pixel: 10 px text stays 10 px
    const ends = [...svg.querySelectorAll(".dagmagic-timeline-bar")].map(
      (b) => Number(b.getAttribute("x")) + Number(b.getAttribute("width")),
    );
    expect(Math.max(...ends)).toBeGreaterThan(1100 * 0.95); // the last bar ends at the right edge
  });
});
