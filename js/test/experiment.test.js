// The experiment grid's front end: it draws the synced grid (text only), rewrites only the cells that changed,
// asks the kernel to open a cell's run and draws that run's widget through the host, and cleans up.

import { afterEach, describe, expect, it, vi } from "vitest";
import experimentWidget, { gridCell } from "../src/experiment.js";
import { fakeModel } from "./fixtures.js";

const HOSTILE = "<img src=x onerror=alert(1)>";

/** @param {Record<string, any>} [overrides] */
function state(overrides = {}) {
  return {
    name: "towns",
    configs: ["small", "big"],
    cases: [
      ["louvre", "Where is the Louvre?"],
      ["evil", HOSTILE],
    ],
    cells: [
      [0, 0, "done", 0, 0.0012, 1.5],
      [0, 1, "done", 1, 0.0034, 2.5],
      [1, 0, "running", null, null, null],
      [1, 1, "pending", null, null, null],
    ],
    repeat: 1,
    score_column: "says_paris",
    score_columns: ["says_paris", "contains"],
    progress: "2 of 4 cells done · 1 running · about 3.0 s left",
    counts: { total: 4, ended: 2, failed: 0, running: 1 },
    running: true,
    summary_header: ["config", "done", "failed", "says_paris", "cost", "latency p50"],
    summary_rows: [
      ["small", "1/2", "0", "0.00", "$0.0012", "1.5 s"],
      ["big", "1/2", "0", "1.00", "$0.0034", "2.5 s"],
    ],
    opened: null,
    opened_cell: -1,
    opened_label: "",
    ...overrides,
  };
}

/** @type {Array<() => void>} */
const cleanups = [];
afterEach(() => {
  while (cleanups.length) cleanups.pop()?.();
  document.body.replaceChildren();
});

/**
 * @param {any} model
 * @param {any} [host]
 */
function draw(model, host) {
  const definition = experimentWidget();
  definition.initialize({ model });
  const el = document.createElement("div");
  document.body.append(el);
  cleanups.push(definition.render({ model, el, host }));
  return el;
}

/** @param {HTMLElement} el */
function cells(el) {
  return [...el.querySelectorAll("td.dagmagic-experiment-cell")].map((td) => td.textContent);
}

/** Lets the coalesced redraw run. */
async function frame() {
  await new Promise((resolve) => setTimeout(resolve, 40));
}

describe("the experiment grid", () => {
  it("draws cases × configs, the progress and the summary, every text as text", () => {
    const model = fakeModel(state());
    const el = draw(model);
    expect(model.sent[0]).toEqual({ kind: "dagmagic-front-end" });
    expect([...el.querySelectorAll("thead th")].slice(0, 3).map((th) => th.textContent)).toEqual([
      "case",
      "small",
      "big",
    ]);
    expect(cells(el)).toEqual([
      "✓ done · 0.00 · $0.0012 · 1.5s",
      "✓ done · 1.00 · $0.0034 · 2.5s",
      "… running",
      "· pending",
    ]);
    expect(el.querySelector("img")).toBeNull();
    expect(el.textContent).toContain(HOSTILE);
    expect(el.querySelector(".dagmagic-experiment-progress")?.textContent).toContain("about 3.0 s left");
    const bar = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-experiment-bar-done"));
    expect(bar.style.width).toBe("50%");
    expect([...el.querySelectorAll(".dagmagic-experiment-summary tbody tr")].map((tr) => tr.textContent)).toEqual([
      "small1/200.00$0.00121.5 s",
      "big1/201.00$0.00342.5 s",
    ]);
    const select = /** @type {HTMLSelectElement} */ (el.querySelector("select"));
    expect(select.hidden).toBe(false);
    expect(select.value).toBe("says_paris");
  });

  it("rewrites only the cells that changed when a sync comes", async () => {
    const model = fakeModel(state());
    const el = draw(model);
    const [first, , third] = el.querySelectorAll("td.dagmagic-experiment-cell");
    const before = first.firstChild;
    const next = state().cells;
    next[2] = [1, 0, "failed", null, 0.001, 0.5];
    model.set("cells", next);
    model.set("counts", { total: 4, ended: 3, failed: 1, running: 0 });
    await frame();
    expect(first.firstChild).toBe(before); // untouched
    expect(third.textContent).toBe("✗ failed · no score · $0.0010 · 0.5s");
    expect(/** @type {HTMLElement} */ (third).dataset.status).toBe("failed");
    const failed = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-experiment-bar-failed"));
    expect(failed.style.width).toBe("25%");
  });

  it("averages repetitions in one grid cell", () => {
    expect(
      gridCell(
        [
          [0, 0, "done", 1, 0.001, 1],
          [0, 0, "failed", 0, 0.002, 3],
        ],
        true,
      ),
    ).toEqual({ status: "mixed", text: "✓✗ mixed · 0.50 · $0.0030 · 2.0s", title: "mixed: ✓ done, ✗ failed" });
  });

  it("opens a started cell's run through the host, and a cell not started says so", async () => {
    const model = fakeModel(state());
    const rendered = vi.fn(async ({ el }) => el.append("the run view"));
    const host = { getWidget: vi.fn(async () => ({ render: rendered })) };
    const el = draw(model, host);
    const grid = el.querySelectorAll("td.dagmagic-experiment-cell");
    /** @type {HTMLElement} */ (grid[3]).click();
    expect(model.requests()).toEqual([]);
    expect(el.querySelector(".dagmagic-experiment-message")?.textContent).toContain("has not started");
    /** @type {HTMLElement} */ (grid[1]).click();
    expect(model.lastRequest()).toEqual({ type: "open", cell: 1 });
    model.answer({ value: { run_id: "abc" } });
    model.set("opened", "anywidget:child-1");
    model.set("opened_cell", 1);
    model.set("opened_label", "louvre × big · run abc");
    await frame();
    expect(host.getWidget).toHaveBeenCalledWith("anywidget:child-1");
    const opened = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-experiment-opened"));
    expect(opened.hidden).toBe(false);
    expect(opened.textContent).toContain("louvre × big · run abc");
    expect(opened.textContent).toContain("the run view");
    expect(grid[1].classList.contains("dagmagic-experiment-cell--opened")).toBe(true);
    const signal = rendered.mock.calls[0][0].signal;
    /** @type {HTMLElement} */ (grid[1]).click(); // the opened cell again: closes it
    expect(model.lastRequest()).toEqual({ type: "close" });
    model.set("opened", null);
    await frame();
    expect(signal.aborted).toBe(true);
    expect(opened.hidden).toBe(true);
  });

  it("shows the kernel's refusal, and says so where the front end cannot draw a run inside it", async () => {
    const model = fakeModel(state());
    const el = draw(model);
    /** @type {HTMLElement} */ (el.querySelectorAll("td.dagmagic-experiment-cell")[0]).click();
    model.answer({ error: "the run abc is no longer in memory and there is no run store" });
    await frame();
    expect(el.querySelector(".dagmagic-experiment-message")?.textContent).toBe(
      "the run abc is no longer in memory and there is no run store",
    );
    model.set("opened", "anywidget:child-1");
    await frame();
    expect(el.querySelector(".dagmagic-experiment-run")?.textContent).toContain("cannot draw a run");
  });

  it("with repetitions, the opened cell offers each repetition that has a run", async () => {
    const cells = [
      [0, 0, "done", 1, null, 1],
      [0, 0, "done", 0, null, 1],
      [0, 0, "pending", null, null, null],
      [0, 1, "done", 1, null, 1],
      [0, 1, "done", 1, null, 1],
      [0, 1, "done", 1, null, 1],
    ];
    const model = fakeModel(state({ configs: ["small", "big"], cases: [["c1", "goal"]], cells, repeat: 3 }));
    const el = draw(model, { getWidget: async () => ({ render: async () => {} }) });
    model.set("opened", "anywidget:child-1");
    model.set("opened_cell", 0);
    await frame();
    const buttons = [...el.querySelectorAll(".dagmagic-experiment-repetitions button")];
    expect(buttons.map((b) => [b.textContent, b.getAttribute("aria-pressed"), b.hasAttribute("disabled")])).toEqual([
      ["1", "true", false],
      ["2", "false", false],
      ["3", "false", true],
    ]);
    /** @type {HTMLElement} */ (buttons[1]).click();
    expect(model.lastRequest()).toEqual({ type: "open", cell: 1 });
  });

  it("asks for another score column", () => {
    const model = fakeModel(state());
    const el = draw(model);
    const select = /** @type {HTMLSelectElement} */ (el.querySelector("select"));
    select.value = "contains";
    select.dispatchEvent(new Event("change"));
    expect(model.lastRequest()).toEqual({ type: "show_score", column: "contains" });
  });

  it("cleans up: no listener left, the view removed", () => {
    const model = fakeModel(state());
    const el = draw(model);
    cleanups.pop()?.();
    expect(el.children.length).toBe(0);
    const added = model.on.mock.calls.length;
    const removed = model.off.mock.calls.length;
    expect(removed).toBeGreaterThanOrEqual(added);
  });
});

describe("comparing from the grid", () => {
  it("asks for the comparison of two chosen cells, or two config columns, and draws it through the host", async () => {
    const model = fakeModel(state());
    const rendered = vi.fn(async ({ el }) => el.append("the compare view"));
    const host = { getWidget: vi.fn(async () => ({ render: rendered })) };
    const el = draw(model, host);
    const button = /** @type {HTMLButtonElement} */ (el.querySelector(".dagmagic-experiment-compare-button"));
    button.click();
    expect(button.getAttribute("aria-pressed")).toBe("true");
    expect(el.querySelector(".dagmagic-experiment-compare-hint")?.textContent).toContain("two config columns");
    const grid = el.querySelectorAll("td.dagmagic-experiment-cell");
    /** @type {HTMLElement} */ (grid[0]).click();
    expect(grid[0].classList).toContain("dagmagic-experiment-cell--picked");
    expect(model.requests()).toEqual([]); // one cell: not yet, and no run opened
    /** @type {HTMLElement} */ (grid[1]).click();
    expect(model.lastRequest()).toEqual({ type: "compare", cells: [0, 1] });
    expect(button.getAttribute("aria-pressed")).toBe("false");
    expect(grid[0].classList).not.toContain("dagmagic-experiment-cell--picked");

    button.click();
    const headers = el.querySelectorAll("thead th[data-config]");
    /** @type {HTMLElement} */ (headers[1]).click();
    /** @type {HTMLElement} */ (headers[0]).click();
    expect(model.lastRequest()).toEqual({ type: "compare", configs: ["big", "small"] });

    model.set("comparison", "anywidget:compare-1");
    model.set("comparison_label", "config small vs config big, case by case");
    await frame();
    const box = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-experiment-comparison"));
    expect(box.hidden).toBe(false);
    expect(box.textContent).toContain("Comparing config small vs config big");
    expect(host.getWidget).toHaveBeenCalledWith("anywidget:compare-1");
    await frame();
    expect(box.textContent).toContain("the compare view");
    box.querySelector("button")?.click();
    expect(model.lastRequest()).toEqual({ type: "close_comparison" });
    model.set("comparison", null);
    await frame();
    expect(box.hidden).toBe(true);
  });

  it("a cell not started cannot be chosen", () => {
    const model = fakeModel(state());
    const el = draw(model);
    /** @type {HTMLElement} */ (el.querySelector(".dagmagic-experiment-compare-button")).click();
    /** @type {HTMLElement} */ (el.querySelectorAll("td.dagmagic-experiment-cell")[3]).click();
    expect(el.querySelector(".dagmagic-experiment-message")?.textContent).toContain("no run to compare yet");
    expect(model.requests()).toEqual([]);
  });
});
