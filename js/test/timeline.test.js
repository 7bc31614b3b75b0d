import { describe, expect, it } from "vitest";

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
});
