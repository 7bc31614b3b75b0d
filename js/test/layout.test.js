// The graph's layout, computed in the browser (dagre): a 12-step plan with long, similar tasks and a step of an
// earlier round; the task on two lines; zoom and pan past 8 steps.

import { afterEach, describe, expect, it, vi } from "vitest";
import { renderGraph } from "../src/graph.js";
import { computeLayout, fallbackLayout, textWidth, wrapLabel } from "../src/layout.js";
import { mount, nextRedraw, sampleState, unmountAll } from "./fixtures.js";

afterEach(() => {
  unmountAll();
  document.body.replaceChildren();
});

const TASKS = /** @type {Record<string, [string, string[]]>} */ ({
  s1: ["Find the population of France in 2024 using INSEE's census", []],
  s2: ["Find the population of Germany in 2023 using Destatis figures", []],
  s3: ["Find the population of the capital city of France", []],
  s4: ["Find the population of the capital city of Germany", []],
  s5: ["Find the land area of France in square kilometres", []],
  s6: ["Find the land area of Germany in square kilometres", []],
  s7: ["Compute the population density of France from its population and area", ["s1", "s5"]],
  s8: ["Compute the population density of Germany from its population and area", ["s2", "s6"]],
  s9: ["Compare the share of each country's people who live in its capital", ["s1", "s2", "s3", "s4"]],
  s10: ["Compare the two densities and explain the difference", ["s7", "s8", "r1.s1"]],
  s11: ["Check every population figure against a second source", ["s1", "s2"]],
  s12: ["Write the final comparison of France and Germany with every figure cited", ["s3", "s9", "s10", "s11"]],
});

/**
 * A run whose round 2 has 12 steps (their first `count`), running, one of them depending on round 1's s1.
 * @param {number} [count]
 */
function bigState(count = 12) {
  const state = sampleState();
  const ids = Object.keys(TASKS).slice(0, count);
  /** @type {Record<string, string[]>} */
  const deps = Object.fromEntries(
    ids.map((id) => [id, TASKS[id][1].filter((d) => d.startsWith("r") || ids.includes(d))]),
  );
  const template = state.rounds[1].nodes[0];
  state.rounds[1] = {
    ...state.rounds[1],
    nodes: ids.map((id, i) => ({
      ...structuredClone(template),
      id,
      task: TASKS[id][0],
      dependencies: deps[id],
      status: i < 6 ? "completed" : i === 6 ? "running" : "pending",
      started_at: i <= 6 ? template.started_at : null,
      completed_at: i < 6 ? template.completed_at : null,
      tool_calls: [],
    })),
  };
  return state;
}

/** @param {Element} el */
function graph(el) {
  const svg = el.querySelector('.dagmagic-round[data-round="2"] svg.dagmagic-graph');
  if (!svg) throw new Error("no graph");
  return svg;
}

/** @param {Element} g */
function rectOf(g) {
  const r = /** @type {Element} */ (g.querySelector("rect"));
  const [x, y, w, h] = ["x", "y", "width", "height"].map((a) => Number(r.getAttribute(a)));
  return { x, y, w, h };
}

/**
 * Points along a path of M, L and C commands (absolute), every segment sampled.
 * @param {string} d
 */
function sample(d) {
  const tokens = d.match(/[MLC]|-?\d+(\.\d+)?/g) ?? [];
  /** @type {Array<{x: number, y: number}>} */
  const points = [];
  let at = { x: 0, y: 0 };
  let i = 0;
  const next = () => ({ x: Number(tokens[i++]), y: Number(tokens[i++]) });
  while (i < tokens.length) {
    const command = tokens[i++];
    if (command === "M") {
      at = next();
      points.push(at);
    } else if (command === "L") {
      const to = next();
      for (let t = 1; t <= 40; t++)
        points.push({ x: at.x + ((to.x - at.x) * t) / 40, y: at.y + ((to.y - at.y) * t) / 40 });
      at = to;
    } else if (command === "C") {
      const [c1, c2, to] = [next(), next(), next()];
      for (let t = 1; t <= 40; t++) {
        const u = t / 40;
        const v = 1 - u;
        points.push({
          x: v * v * v * at.x + 3 * v * v * u * c1.x + 3 * v * u * u * c2.x + u * u * u * to.x,
          y: v * v * v * at.y + 3 * v * v * u * c1.y + 3 * v * u * u * c2.y + u * u * u * to.y,
        });
      }
      at = to;
    } else throw new Error(`unexpected ${command} in ${d}`);
  }
  return points;
}

/**
 * @param {{x: number, y: number}} p
 * @param {{x: number, y: number, w: number, h: number}} b
 */
const inside = (p, b) => p.x > b.x + 0.5 && p.x < b.x + b.w - 0.5 && p.y > b.y + 0.5 && p.y < b.y + b.h - 0.5;

describe("layout", () => {
  it("places 12 steps and a ghost without overlaps, inside the drawing, by their dependencies", () => {
    const { el } = mount(bigState());
    const svg = graph(el);
    const nodes = [...svg.querySelectorAll(".dagmagic-node")];
    expect(nodes.map((n) => n.getAttribute("data-step-id"))).toEqual(Object.keys(TASKS));
    const boxes = [...nodes, ...svg.querySelectorAll(".dagmagic-node-ghost")].map(rectOf);
    expect(boxes.length).toBe(13);
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const [p, q] = [boxes[i], boxes[j]];
        expect(p.x + p.w <= q.x || q.x + q.w <= p.x || p.y + p.h <= q.y || q.y + q.h <= p.y).toBe(true);
      }
    }
    const [, , width, height] = String(svg.getAttribute("viewBox")).split(" ").map(Number);
    expect([Number(svg.getAttribute("width")), Number(svg.getAttribute("height"))]).toEqual([width, height]);
    for (const b of boxes) {
      expect(b.x).toBeGreaterThanOrEqual(0);
      expect(b.y).toBeGreaterThanOrEqual(0);
      expect(b.x + b.w).toBeLessThanOrEqual(width);
      expect(b.y + b.h).toBeLessThanOrEqual(height);
    }
    // layers: the depth among the round's steps (not moved by the ghost); every dependency sits higher up
    const layer = (/** @type {string} */ id) =>
      Number(svg.querySelector(`[data-step-id="${id}"]`)?.getAttribute("data-layer"));
    expect(Object.keys(TASKS).map(layer)).toEqual([0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 1, 3]);
    for (const [id, [, deps]] of Object.entries(TASKS)) {
      for (const dep of deps.filter((d) => d in TASKS)) {
        const [a, b] = [rectOf(nodes[Object.keys(TASKS).indexOf(dep)]), rectOf(nodes[Object.keys(TASKS).indexOf(id)])];
        expect(a.y + a.h).toBeLessThan(b.y);
      }
    }
  });

  it("routes every edge from its source's bottom to its target's top, through no other box", () => {
    const { el } = mount(bigState());
    const svg = graph(el);
    /** @type {Map<string, {x: number, y: number, w: number, h: number}>} */
    const boxes = new Map();
    for (const n of svg.querySelectorAll(".dagmagic-node"))
      boxes.set(String(n.getAttribute("data-step-id")), rectOf(n));
    for (const g of svg.querySelectorAll(".dagmagic-node-ghost"))
      boxes.set(String(g.getAttribute("data-ref")), rectOf(g));
    const edges = [...svg.querySelectorAll(".dagmagic-edge, .dagmagic-edge-ghost")];
    const expected = Object.entries(TASKS).flatMap(([id, [, deps]]) => deps.map((d) => `${d}->${id}`));
    expect(edges.map((e) => `${e.getAttribute("data-source")}->${e.getAttribute("data-target")}`).sort()).toEqual(
      expected.sort(),
    );
    let crossedRanks = 0;
    for (const edge of edges) {
      const source = String(edge.getAttribute("data-source"));
      const target = String(edge.getAttribute("data-target"));
      const from = /** @type {{x: number, y: number, w: number, h: number}} */ (boxes.get(source));
      const to = /** @type {{x: number, y: number, w: number, h: number}} */ (boxes.get(target));
      const points = sample(String(edge.querySelector("path")?.getAttribute("d")));
      const tip = String(edge.querySelector("polygon")?.getAttribute("points"))
        .split(" ")
        .map((p) => p.split(",").map(Number));
      expect(points[0].y).toBe(from.y + from.h);
      expect(points[0].x).toBeGreaterThan(from.x);
      expect(points[0].x).toBeLessThan(from.x + from.w);
      expect(tip[2][1]).toBe(to.y);
      expect(tip[2][0]).toBeGreaterThan(to.x);
      expect(tip[2][0]).toBeLessThan(to.x + to.w);
      expect(points[points.length - 1].y).toBe(tip[0][1]); // the line stops where the arrowhead starts
      for (const [id, box] of boxes) {
        if (id === source || id === target) continue;
        const through = points.find((p) => inside(p, box));
        expect(through, `${source}->${target} goes through ${id}`).toBeUndefined();
      }
      if (to.y - (from.y + from.h) > 150) crossedRanks++;
    }
    expect(crossedRanks).toBeGreaterThan(0); // (some edges do pass a rank of boxes: s3->s12, s11->s12)
  });

  it("writes each task on two lines, so similar tasks are told apart; the whole task in the tooltip", () => {
    const { el } = mount(bigState());
    /** @param {string} id */
    const lines = (id) =>
      [...graph(el).querySelectorAll(`[data-step-id="${id}"] .dagmagic-node-task tspan`)].map((t) => t.textContent);
    const [a, b] = [lines("s1"), lines("s2")];
    expect(a.length).toBe(2);
    expect(b.length).toBe(2);
    expect(a[0]).not.toBe(b[0]);
    expect(a[1]).not.toBe(b[1]);
    // the same first line, told apart by the second
    const [c, d] = [lines("s3"), lines("s4")];
    expect(c[0]).toBe(d[0]);
    expect(c[1]).not.toBe(d[1]);
    for (const id of Object.keys(TASKS)) {
      const node = /** @type {Element} */ (graph(el).querySelector(`[data-step-id="${id}"]`));
      const text = String(node.querySelector(".dagmagic-node-task")?.textContent);
      const task = TASKS[id][0];
      // the shortened task: whole, or cut at a word with an ellipsis on the second line
      expect(text === task || (text.endsWith("…") && task.startsWith(text.slice(0, -1)))).toBe(true);
      expect(node.querySelector("title")?.textContent).toContain(task);
    }
    expect(lines("s12")[1].endsWith("…")).toBe(true);
  });

  it("wraps by words, cuts only what does not fit in two lines", () => {
    expect(wrapLabel("Explain the trend", 184, 11)).toEqual(["Explain the trend"]);
    expect(wrapLabel("  Compute   the ratio of the two populations ", 184, 11)).toEqual([
      "Compute the ratio of the two",
      "populations",
    ]);
    const [first, second] = wrapLabel("x".repeat(200), 184, 11);
    expect(first.length).toBeGreaterThan(10);
    expect(second.endsWith("…")).toBe(true);
    expect(wrapLabel("", 184, 11)).toEqual([""]);
  });

  it("draws a step of an earlier round as a dashed ghost box, with a dashed edge to the step using it", async () => {
    const { el } = mount(bigState());
    const svg = graph(el);
    const ghosts = [...svg.querySelectorAll(".dagmagic-node-ghost")];
    expect(ghosts.map((g) => g.textContent?.includes("r1.s1"))).toEqual([true]);
    const ghost = ghosts[0];
    expect(ghost.querySelector("text")?.textContent).toBe("r1.s1");
    expect(ghost.classList.contains("dagmagic-node")).toBe(false);
    expect(ghost.hasAttribute("tabindex")).toBe(false);
    expect(ghost.querySelector("rect")?.getAttribute("stroke-dasharray")).toBeTruthy();
    expect(ghost.getAttribute("aria-label")).toContain("step s1 of round 1, used by s10");
    const edge = /** @type {Element} */ (svg.querySelector('.dagmagic-edge-ghost[data-source="r1.s1"]'));
    expect(edge.getAttribute("data-target")).toBe("s10");
    expect(edge.querySelector("path")?.getAttribute("stroke-dasharray")).toBeTruthy();
    expect(svg.querySelectorAll(".dagmagic-edge-ghost").length).toBe(1);
    // not selectable
    /** @type {SVGElement} */ (ghost.querySelector("rect")).dispatchEvent(new MouseEvent("click", { bubbles: true }));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")).toBeNull();
  });

  it("draws the same round to identical SVG, and lays it out the same way whatever came before", async () => {
    const first = mount(bigState());
    const markup = graph(first.el).outerHTML;
    expect(graph(mount(bigState()).el).outerHTML).toBe(markup);
    expect(markup).not.toMatch(/\sid=/);
    first.model.set("rounds", structuredClone(first.model.get("rounds")));
    await nextRedraw();
    expect(graph(first.el).outerHTML).toBe(markup);

    // without the cache: dagre's own names for its dummy nodes (a global counter) change nothing
    const round = bigState().rounds[1];
    const once = JSON.stringify(computeLayout(round));
    for (let i = 0; i < 30; i++) computeLayout(bigState(12 - (i % 6)).rounds[1]);
    expect(JSON.stringify(computeLayout(round))).toBe(once);
  });

  it("falls back to plain layers of its own when the layout fails (Python sends no coordinates)", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const state = sampleState();
    state.rounds[1].nodes[1].id = "a"; // two steps named a: dagre cannot lay that out
    const { el } = mount(state);
    const nodes = [...graph(el).querySelectorAll(".dagmagic-node")];
    const boxes = nodes.map(rectOf);
    expect(boxes.length).toBe(5);
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const [p, q] = [boxes[i], boxes[j]];
        expect(p.x + p.w <= q.x || q.x + q.w <= p.x || p.y + p.h <= q.y || q.y + q.h <= p.y).toBe(true);
      }
    }
    // a, a, c (after a and b), d (after a), e (after c and d): layers 0, 0, 1, 1, 2, each a row below the last
    expect(nodes.map((n) => n.getAttribute("data-layer"))).toEqual(["0", "0", "1", "1", "2"]);
    expect(boxes[2].y).toBeGreaterThan(boxes[0].y + boxes[0].h);
    expect(boxes[4].y).toBeGreaterThan(boxes[2].y + boxes[2].h);
    expect(graph(el).querySelectorAll(".dagmagic-edge").length).toBe(4); // a→c, a→d, c→e, d→e
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0][0])).toBe("[dagmagic]");

    // deterministic, and said once: a redraw takes it from the cache
    const again = mount(structuredClone(state));
    expect(graph(again.el).outerHTML).toBe(graph(el).outerHTML);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(JSON.stringify(fallbackLayout(state.rounds[1]))).toBe(JSON.stringify(fallbackLayout(state.rounds[1])));
  });
});

describe("fit and zoom", () => {
  /** @param {Element} el */
  function wrapOf(el) {
    return /** @type {HTMLElement} */ (el.querySelector('.dagmagic-round[data-round="2"] .dagmagic-graph-wrap'));
  }

  /**
   * @param {Element} el
   * @param {"in" | "out" | "fit"} action
   */
  function press(el, action) {
    const button = /** @type {HTMLButtonElement} */ (wrapOf(el).querySelector(`[data-zoom-action="${action}"]`));
    button.dispatchEvent(new MouseEvent("click", { bubbles: true }));
  }

  it("draws at its natural size, with a viewBox so CSS can scale it down to the widget's width", () => {
    const svg = graph(mount(bigState()).el);
    const [x, y, w, h] = String(svg.getAttribute("viewBox")).split(" ").map(Number);
    expect([x, y]).toEqual([0, 0]);
    expect(svg.getAttribute("width")).toBe(String(w));
    expect(svg.getAttribute("height")).toBe(String(h));
    // and no smaller than 9/11 of it: its 11 px task text stays 9 px high (a wider graph scrolls)
    expect(svg.getAttribute("style")).toBe(`--dm-graph-min-width: ${Math.round(w * (9 / 11) * 100) / 100}px;`);
  });

  it("offers +, − and fit above 8 steps, not at 8 or fewer", () => {
    const big = wrapOf(mount(bigState()).el);
    expect([...big.querySelectorAll(".dagmagic-zoom button")].map((b) => b.textContent)).toEqual(["+", "−", "fit"]);
    expect(big.querySelector(".dagmagic-graph-pan svg.dagmagic-graph")).not.toBeNull();
    expect(wrapOf(mount(bigState(9)).el).querySelector(".dagmagic-zoom")).not.toBeNull();
    expect(wrapOf(mount(bigState(8)).el).querySelector(".dagmagic-zoom")).toBeNull();
    expect(wrapOf(mount(sampleState()).el).querySelector(".dagmagic-zoom")).toBeNull();
  });

  it("zooms in and out, and keeps the zoom of each round across redraws", async () => {
    const { el, model } = mount(bigState());
    const natural = Number(graph(el).getAttribute("width"));
    const height = Number(graph(el).getAttribute("height"));
    expect(wrapOf(el).getAttribute("data-zoom")).toBe("1");
    expect(/** @type {HTMLButtonElement} */ (wrapOf(el).querySelector('[data-zoom-action="fit"]')).disabled).toBe(true);
    press(el, "in");
    press(el, "in");
    expect(wrapOf(el).getAttribute("data-zoom")).toBe("1.563");
    expect(wrapOf(el).hasAttribute("data-zoomed")).toBe(true);
    expect(Number(graph(el).getAttribute("width"))).toBeCloseTo(natural * 1.5625, 1);
    expect(Number(graph(el).getAttribute("height"))).toBeCloseTo(height * 1.5625, 1);

    // a running step: the section is drawn anew at every sync
    const before = graph(el);
    for (let i = 1; i <= 3; i++) {
      model.set("now", model.get("now") + 0.5);
      await nextRedraw();
    }
    expect(graph(el)).not.toBe(before);
    expect(wrapOf(el).getAttribute("data-zoom")).toBe("1.563");
    expect(Number(graph(el).getAttribute("width"))).toBeCloseTo(natural * 1.5625, 1);
    // the other graphs are not zoomed
    const r1 = /** @type {Element} */ (el.querySelector('.dagmagic-round[data-round="1"] .dagmagic-round-toggle'));
    r1.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    await nextRedraw();
    expect(el.querySelector('.dagmagic-round[data-round="1"] .dagmagic-zoom')).toBeNull();

    press(el, "fit");
    expect(wrapOf(el).getAttribute("data-zoom")).toBe("1");
    expect(wrapOf(el).hasAttribute("data-zoomed")).toBe(false);
    expect(Number(graph(el).getAttribute("width"))).toBe(natural);
    press(el, "out");
    expect(wrapOf(el).getAttribute("data-zoom")).toBe("0.8");
    for (let i = 0; i < 10; i++) press(el, "out");
    expect(wrapOf(el).getAttribute("data-zoom")).toBe("0.5");
    expect(/** @type {HTMLButtonElement} */ (wrapOf(el).querySelector('[data-zoom-action="out"]')).disabled).toBe(true);
    expect(el.querySelector(".dagmagic-detail")).toBeNull(); // the buttons select nothing
  });

  it("pans on a drag, which selects no step; a click still does, and so does the keyboard", async () => {
    const { el, model } = mount(bigState());
    press(el, "in");
    /** @param {string} id */
    const node = (id) => /** @type {SVGElement} */ (graph(el).querySelector(`.dagmagic-node[data-step-id="${id}"]`));
    const rect = /** @type {Element} */ (node("s5").querySelector("rect"));
    /** @param {string} type @param {number} x @param {Element | Window} [on] */
    const mouse = (type, x, on = rect) =>
      on.dispatchEvent(new MouseEvent(type, { bubbles: true, button: 0, clientX: x, clientY: 100 }));
    mouse("mousedown", 100);
    mouse("mousemove", 120, window);
    expect(wrapOf(el).querySelector(".dagmagic-graph-pan")?.hasAttribute("data-dragging")).toBe(true);
    mouse("mousemove", 160, window);
    mouse("mouseup", 160);
    mouse("click", 160);
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")).toBeNull();
    expect(node("s5").classList.contains("dagmagic-node--selected")).toBe(false);
    expect(wrapOf(el).querySelector(".dagmagic-graph-pan")?.hasAttribute("data-dragging")).toBe(false);

    // a press that hardly moves is a click
    await new Promise((resolve) => setTimeout(resolve, 0));
    mouse("mousedown", 100);
    mouse("mousemove", 102, window);
    mouse("mouseup", 102);
    mouse("click", 102);
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("s5");
    expect(node("s5").classList.contains("dagmagic-node--selected")).toBe(true);
    expect(wrapOf(el).getAttribute("data-zoom")).toBe("1.25"); // selecting redrew the round, zoomed still

    // the keyboard: focus stays on the step across redraws, Enter opens it
    node("s8").focus();
    model.set("now", model.get("now") + 0.5);
    await nextRedraw();
    expect(document.activeElement).toBe(node("s8"));
    node("s8").dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    await nextRedraw();
    expect(el.querySelector(".dagmagic-detail")?.getAttribute("data-step-id")).toBe("s8");
    expect(model.send).not.toHaveBeenCalled();
  });
});

describe("plan order", () => {
  /** @param {string} id @param {string[]} [dependencies] */
  const step = (id, dependencies = []) => ({ id, dependencies });
  const SHAPES = /** @type {Record<string, Array<{id: string, dependencies: string[]}>>} */ ({
    // one step fans out to four siblings that a last step joins (drawn s5, s4, s3, s2 before)
    "fan out": [
      step("s1"),
      ...["s2", "s3", "s4", "s5"].map((id) => step(id, ["s1"])),
      step("s6", ["s2", "s3", "s4", "s5"]),
    ],
    "fan out below a chain": [
      step("s1"),
      step("s2", ["s1"]),
      ...["s3", "s4", "s5", "s6"].map((id) => step(id, ["s2"])),
    ],
    "two roots, four siblings": [
      step("s1"),
      step("s2"),
      ...["s3", "s4", "s5", "s6"].map((id) => step(id, ["s1", "s2"])),
      step("s7", ["s3", "s4", "s5", "s6"]),
    ],
    "two families": [
      step("s1"),
      step("s2"),
      step("s3", ["s1"]),
      step("s4", ["s1"]),
      step("s5", ["s2"]),
      step("s6", ["s2"]),
      step("s7", ["s3", "s4", "s5", "s6"]),
    ],
    "ten siblings": [
      ...Array.from({ length: 10 }, (_, i) => step(`s${i + 1}`)),
      step("s11", ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10"]),
    ],
  });

  for (const [name, nodes] of Object.entries(SHAPES)) {
    it(`draws siblings left to right in plan order, as the static view and the fallback do: ${name}`, () => {
      const round = /** @type {any} */ ({ index: 1, nodes });
      for (const laid of [computeLayout(round), fallbackLayout(round)]) {
        /** @type {Map<number, Array<{id: string, x: number}>>} */
        const rows = new Map();
        for (const n of laid.nodes) rows.set(n.layer, [...(rows.get(n.layer) ?? []), { id: n.id, x: n.x }]);
        for (const row of rows.values()) {
          const drawn = [...row].sort((a, b) => a.x - b.x).map((n) => n.id);
          expect(drawn, `${laid.fallback ? "fallback" : "dagre"}: ${name}`).toEqual(row.map((n) => n.id));
        }
      }
    });
  }

  it("draws the earlier rounds' steps one step uses left to right in their order (r1.s2 before r1.s10)", () => {
    const nodes = [step("s1", ["r1.s10", "r1.s3", "r1.s2", "r1.s1"]), step("s2", ["s1"])];
    const laid = computeLayout(/** @type {any} */ ({ index: 2, nodes }));
    const drawn = [...laid.ghosts].sort((a, b) => a.x - b.x).map((g) => g.id);
    expect(drawn).toEqual(["r1.s1", "r1.s2", "r1.s3", "r1.s10"]);
  });

  it("lays a small top row out in the plan's order, left to right (dagre may lay it mirrored)", () => {
    for (const count of [2, 3]) {
      const nodes = Array.from({ length: count }, (_, i) => ({ id: `s${i + 1}`, dependencies: [] }));
      nodes.push({ id: "join", dependencies: nodes.map((n) => n.id) });
      const layout = computeLayout(/** @type {any} */ ({ index: 1, nodes, edges: [] }));
      const xs = layout.nodes.filter((n) => n.id !== "join").map((n) => n.x);
      expect(xs).toEqual([...xs].sort((a, b) => a - b));
    }
  });
});

describe("badges", () => {
  it("keeps a step's cost beside a wide tool badge: the badge is shortened, the cost is drawn whole", () => {
    const template = sampleState().rounds[1].nodes[0];
    const node = { ...structuredClone(template), tool_hint: "search_statistics_office_database", tool_calls: [] };
    node.cost = 0.0123;
    const svg = renderGraph(/** @type {any} */ ({ index: 1, nodes: [node] }), 0, null);
    const badge = /** @type {Element} */ (svg.querySelector(".dagmagic-badge-tool rect"));
    const cost = /** @type {Element} */ (svg.querySelector(".dagmagic-node-cost"));
    expect(cost.textContent).toBe("$0.0123");
    expect(svg.querySelector(".dagmagic-badge-tool text")?.textContent).toMatch(/^search_.+…$/);
    const badgeEnd = Number(badge.getAttribute("x")) + Number(badge.getAttribute("width"));
    const costStart = Number(cost.getAttribute("x")) - textWidth("$0.0123", 10); // anchored at its end
    expect(badgeEnd).toBeLessThan(costStart);
  });
});
