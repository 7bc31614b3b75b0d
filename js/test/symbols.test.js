// Every glyph that means something has its meaning at hand (a tooltip), and the timeline's tick labels stay
// inside its drawing.

import { afterEach, describe, expect, it } from "vitest";

import { STATUS_GLYPH, renderGraph } from "../src/graph.js";
import { textWidth } from "../src/layout.js";
import { createTimeline } from "../src/timeline.js";
import { renderCall } from "../src/toolstep.js";
import { mount, nextRedraw, sampleState, toolStepState, unmountAll } from "./fixtures.js";

afterEach(unmountAll);

describe("symbols", () => {
  it("keeps every tick label of the timeline inside its drawing, the last one too", () => {
    for (const width of [320, 720, 1100]) {
      const timeline = createTimeline();
      Object.defineProperty(timeline.el, "clientWidth", { configurable: true, get: () => width });
      timeline.update(sampleState());
      const svg = /** @type {SVGSVGElement} */ (timeline.el.querySelector("svg"));
      const right = Number(svg.getAttribute("viewBox")?.split(" ")[2]);
      const ticks = [...svg.querySelectorAll(".dagmagic-timeline-tick-label")];
      expect(ticks.length).toBe(5);
      for (const tick of ticks) {
        const x = Number(tick.getAttribute("x"));
        const w = textWidth(String(tick.textContent), 10);
        const anchor = tick.getAttribute("text-anchor");
        const [left, end] = anchor === "end" ? [x - w, x] : anchor === "middle" ? [x - w / 2, x + w / 2] : [x, x + w];
        expect(left, String(tick.textContent)).toBeGreaterThanOrEqual(0);
        expect(end, `${tick.textContent} at ${width} px`).toBeLessThanOrEqual(right);
      }
    }
  });

  it("says in a step's tooltip what its status glyph means", () => {
    const round = sampleState().rounds[0];
    round.nodes[0].status = "skipped";
    const svg = renderGraph(round, 0, null);
    for (const node of round.nodes) {
      const box = svg.querySelector(`[data-step-id="${node.id}"]`);
      const glyph = STATUS_GLYPH[/** @type {keyof typeof STATUS_GLYPH} */ (node.status)];
      expect(box?.querySelector(".dagmagic-node-id")?.textContent?.startsWith(glyph)).toBe(true);
      expect(box?.querySelector("title")?.textContent).toContain(`${glyph} ${node.status}`);
    }
  });

  it("explains each glyph of a round's summary in its tooltip", async () => {
    const state = sampleState();
    state.rounds[0].nodes[0].status = "skipped";
    const { el } = mount(state);
    await nextRedraw();
    const summaries = [...el.querySelectorAll(".dagmagic-round-summary")];
    expect(summaries.length).toBeGreaterThan(0);
    for (const summary of summaries) {
      const glyphs = Object.entries(STATUS_GLYPH).filter(([, glyph]) => summary.textContent?.includes(glyph));
      expect(glyphs.length).toBeGreaterThan(0);
      for (const [status, glyph] of glyphs) expect(summary.getAttribute("title")).toMatch(`${glyph} ${status}`);
    }
    expect(el.querySelector(".dagmagic-round-summary")?.textContent).toContain("⤼");
  });

  it("says what the trace's streamed mark means", async () => {
    const { el, model } = mount();
    const trace = /** @type {HTMLDetailsElement} */ (el.querySelector(".dagmagic-trace"));
    trace.open = true;
    trace.dispatchEvent(new Event("toggle"));
    model.set("calls", [{ ...model.get("calls")[0], stream: true }]);
    await nextRedraw();
    const mark = [...trace.querySelectorAll("tbody td span")].find((span) => span.textContent?.includes("⇣"));
    expect(mark?.getAttribute("title")).toMatch(/streamed/);
  });

  it("says what the arrow of a tool step's call means", () => {
    const node = toolStepState().state.rounds[1].nodes.find((n) => n.id === "b");
    const [code] = renderCall(/** @type {any} */ (node));
    const arrow = code.querySelector(".dagmagic-toolstep-became");
    expect(arrow?.textContent).toBe(" → ");
    expect(arrow?.getAttribute("title")).toMatch(/^became: /);
  });
});
