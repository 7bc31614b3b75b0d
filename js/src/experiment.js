// The experiment grid's front end (anywidget): cases × configs, each grid cell the status of its runs, the score
// shown, cost and latency; a progress bar with the line Python writes (its estimate of the time left included);
// the summary per config. Clicking a grid cell asks the kernel to open that cell's run, whose own widget (the
// run view of index.js) is then drawn under the grid through anywidget's widget composition (`host.getWidget`).
// "Compare…" lets the user choose two grid cells, or two config columns: the kernel then opens their comparison (the
// compare view of compare.js) under the grid the same way.
//
// The grid can hold thousands of cells: its rows are made once per set of cases and configs, and a sync only
// rewrites the grid cells whose text changed. Redraws are coalesced into one per animation frame.

import { h, log } from "./dom.js";
import { formatCost, formatDuration } from "./format.js";
import { createRequests } from "./requests.js";

/**
 * The synced state (see dagmagic/notebook/experiment_widget.py).
 * @typedef {object} ExperimentTraits
 * @property {string} name
 * @property {string[]} configs
 * @property {[string, string][]} cases  [id, goal]
 * @property {[number, number, string, number | null, number | null, number | null][]} cells
 *   [case, config, status, score, cost, latency] per cell, in grid order
 * @property {number} repeat
 * @property {string} score_column
 * @property {string[]} score_columns
 * @property {string} progress
 * @property {{total?: number, ended?: number, failed?: number, running?: number}} counts
 * @property {boolean} running
 * @property {string[]} summary_header
 * @property {string[][]} summary_rows
 * @property {string | null} opened  a widget reference ("anywidget:<id>") to the opened cell's run widget
 * @property {number} opened_cell
 * @property {string} opened_label
 * @property {string | null} comparison  a widget reference to the compare widget of the cells or configs compared
 * @property {string} comparison_label
 */

/** @typedef {import("@anywidget/types").AnyModel<ExperimentTraits>} Model */
/**
 * anywidget's host (0.11 and later): draws another widget's view where this one says.
 * @typedef {{getWidget: (ref: string) => Promise<{render: (props: {el: HTMLElement, signal?: AbortSignal}) => Promise<void>}>}} Host
 */

const TRAITS = /** @type {const} */ ([
  "name",
  "configs",
  "cases",
  "cells",
  "repeat",
  "score_column",
  "score_columns",
  "progress",
  "counts",
  "running",
  "summary_header",
  "summary_rows",
  "opened",
  "opened_cell",
  "opened_label",
  "comparison",
  "comparison_label",
]);

const MARKS = /** @type {Record<string, string>} */ ({
  pending: "·",
  running: "…",
  done: "✓",
  failed: "✗",
  cancelled: "⏸",
  not_started: "–",
});

/**
 * @param {Model} model
 * @returns {ExperimentTraits}
 */
function readState(model) {
  /** @type {Record<string, unknown>} */
  const state = {};
  for (const trait of TRAITS) state[trait] = model.get(trait);
  const read = /** @type {ExperimentTraits} */ (state);
  return {
    ...read,
    configs: Array.isArray(read.configs) ? read.configs : [],
    cases: Array.isArray(read.cases) ? read.cases : [],
    cells: Array.isArray(read.cells) ? read.cells : [],
    score_columns: Array.isArray(read.score_columns) ? read.score_columns : [],
    summary_header: Array.isArray(read.summary_header) ? read.summary_header : [],
    summary_rows: Array.isArray(read.summary_rows) ? read.summary_rows : [],
    counts: read.counts ?? {},
  };
}

/**
 * What one grid cell shows of its runs (one per repetition): their marks, the overall status, the mean score,
 * the cost and the mean latency.
 * @param {ExperimentTraits["cells"]} runs
 * @param {boolean} scored
 * @returns {{status: string, text: string, title: string}}
 */
export function gridCell(runs, scored) {
  const statuses = new Set(runs.map((cell) => cell[2]));
  const status = statuses.size === 1 ? [...statuses][0] : "mixed";
  const word = status.replace("_", " ");
  const parts = [`${runs.map((cell) => MARKS[cell[2]] ?? "?").join("")} ${word}`];
  const scores = runs.map((cell) => cell[3]).filter((value) => typeof value === "number");
  if (scored && scores.length) parts.push(mean(scores).toFixed(2));
  else if (scored && runs.some((cell) => cell[2] === "done" || cell[2] === "failed")) parts.push("no score");
  const costs = runs.map((cell) => cell[4]).filter((value) => typeof value === "number");
  if (costs.length) parts.push(formatCost(costs.reduce((a, b) => a + b, 0)));
  const latencies = runs.map((cell) => cell[5]).filter((value) => typeof value === "number");
  if (latencies.length) parts.push(formatDuration(mean(latencies)));
  // a mixed cell's marks are not said in words in its text: its title says them
  const marks = [...statuses].map((each) => `${MARKS[each] ?? "?"} ${each.replace("_", " ")}`).join(", ");
  return { status, text: parts.join(" · "), title: status === "mixed" ? `mixed: ${marks}` : word };
}

/** @param {number[]} values */
function mean(values) {
  return values.reduce((a, b) => a + b, 0) / values.length;
}

/**
 * @param {{model: Model, el: HTMLElement, host?: Host}} props
 * @returns {() => void} cleanup
 */
function render({ model, el, host }) {
  const controller = new AbortController();
  const { signal } = controller;
  const requests = createRequests(/** @type {any} */ (model));
  let alive = true;
  /** @type {number | null} */
  let frame = null;

  const title = h("b", { class: "dagmagic-experiment-name" });
  const scoreChoice = h("select", { class: "dagmagic-experiment-score", "aria-label": "score shown" });
  const compareButton = h(
    "button",
    {
      class: "dagmagic-btn dagmagic-experiment-compare-button",
      type: "button",
      "aria-pressed": "false",
      title: "choose two cells, or two config columns, to see them side by side",
    },
    ["Compare…"],
  );
  const compareHint = h("span", { class: "dagmagic-experiment-compare-hint", hidden: true });
  const header = h("div", { class: "dagmagic-experiment-header" }, [title, scoreChoice, compareButton, compareHint]);
  const bar = h("div", { class: "dagmagic-experiment-bar-done" });
  const failedBar = h("div", { class: "dagmagic-experiment-bar-failed" });
  const progressBar = h("div", { class: "dagmagic-experiment-bar", role: "progressbar" }, [bar, failedBar]);
  const progressText = h("div", { class: "dagmagic-experiment-progress" });
  const headRow = h("tr");
  const body = h("tbody");
  const grid = h("table", { class: "dagmagic-experiment-grid" }, [h("thead", {}, [headRow]), body]);
  const gridBox = h("div", { class: "dagmagic-experiment-grid-box" }, [grid]);
  const summary = h("table", { class: "dagmagic-experiment-summary" });
  const message = h("div", { class: "dagmagic-experiment-message", role: "status" });
  const openedLabel = h("span", { class: "dagmagic-experiment-opened-label" });
  const repetitions = h("span", {
    class: "dagmagic-experiment-repetitions",
    role: "group",
    "aria-label": "repetition",
  });
  const closeButton = h("button", { class: "dagmagic-btn", type: "button" }, ["Close"]);
  const openedView = h("div", { class: "dagmagic-experiment-run" });
  const opened = h("div", { class: "dagmagic-experiment-opened", hidden: true }, [
    h("div", { class: "dagmagic-experiment-opened-header" }, [openedLabel, repetitions, closeButton]),
    openedView,
  ]);
  const comparisonLabel = h("span", { class: "dagmagic-experiment-opened-label" });
  const closeComparison = h("button", { class: "dagmagic-btn", type: "button" }, ["Close comparison"]);
  const comparisonView = h("div", { class: "dagmagic-experiment-comparison-view" });
  const comparisonBox = h("div", { class: "dagmagic-experiment-comparison", hidden: true }, [
    h("div", { class: "dagmagic-experiment-opened-header" }, [comparisonLabel, closeComparison]),
    comparisonView,
  ]);
  const root = h("div", { class: "dagmagic dagmagic-experiment-view", "data-lm-suppress-shortcuts": "true" }, [
    header,
    progressBar,
    progressText,
    gridBox,
    message,
    comparisonBox,
    opened,
    summary,
  ]);

  /** The grid's cells by "case:config", and the cell indices each one holds (its repetitions). */
  /** @type {Map<string, HTMLTableCellElement>} */
  let gridCells = new Map();
  let shape = "";
  /** @type {string | null} */
  let shownRef = null;
  /** @type {AbortController | null} */
  let childView = null;
  /** @type {string | null} */
  let comparedRef = null;
  /** @type {AbortController | null} */
  let comparedView = null;
  /** What the user has chose to compare so far (while "Compare…" is pressed): cell indices, or config names. */
  /** @type {{kind: "cells", values: number[]} | {kind: "configs", values: string[]} | null} */
  let picking = null;

  /** @param {ExperimentTraits} state */
  function drawShape(state) {
    const next = JSON.stringify([state.configs, state.cases]);
    if (next === shape) return;
    shape = next;
    headRow.replaceChildren(
      h("th", {}, ["case"]),
      ...state.configs.map((config) => h("th", { scope: "col", "data-config": config }, [config])),
    );
    gridCells = new Map();
    body.replaceChildren(
      ...state.cases.map(([id, goal], caseIndex) =>
        h("tr", {}, [
          h("th", { scope: "row", title: goal }, [h("span", { class: "dagmagic-experiment-case-id" }, [id]), goal]),
          ...state.configs.map((config, configIndex) => {
            const td = h("td", {
              class: "dagmagic-experiment-cell",
              "data-case": id,
              "data-config": config,
              tabindex: "0",
            });
            gridCells.set(`${caseIndex}:${configIndex}`, td);
            return td;
          }),
        ]),
      ),
    );
  }

  /** @param {ExperimentTraits} state */
  function drawCells(state) {
    /** @type {Map<string, {runs: ExperimentTraits["cells"], first: number}>} */
    const groups = new Map();
    state.cells.forEach((cell, index) => {
      const key = `${cell[0]}:${cell[1]}`;
      const group = groups.get(key) ?? { runs: [], first: -1 };
      group.runs.push(cell);
      if (group.first < 0 && !["pending", "not_started"].includes(cell[2])) group.first = index;
      groups.set(key, group);
    });
    const scored = Boolean(state.score_column);
    for (const [key, td] of gridCells) {
      const group = groups.get(key) ?? { runs: [], first: -1 };
      const shown = gridCell(group.runs, scored);
      if (td.textContent !== shown.text) td.textContent = shown.text;
      td.dataset.status = shown.status;
      td.dataset.cell = String(group.first);
      td.title = group.first >= 0 ? `${shown.title}: open its run` : shown.title;
      td.classList.toggle("dagmagic-experiment-cell--openable", group.first >= 0);
      td.classList.toggle("dagmagic-experiment-cell--opened", group.first >= 0 && group.first === state.opened_cell);
    }
  }

  /** @param {ExperimentTraits} state */
  function drawHeader(state) {
    title.textContent = `Experiment ${state.name}`;
    const columns = state.score_columns;
    scoreChoice.hidden = columns.length < 2;
    if (scoreChoice.dataset.columns !== JSON.stringify(columns)) {
      scoreChoice.dataset.columns = JSON.stringify(columns);
      scoreChoice.replaceChildren(...columns.map((column) => h("option", { value: column }, [column])));
    }
    scoreChoice.value = state.score_column;
    const total = state.counts.total ?? state.cells.length;
    const ended = state.counts.ended ?? 0;
    const failed = state.counts.failed ?? 0;
    bar.style.width = `${total ? (100 * (ended - failed)) / total : 0}%`;
    failedBar.style.width = `${total ? (100 * failed) / total : 0}%`;
    progressBar.setAttribute("aria-valuenow", String(ended));
    progressBar.setAttribute("aria-valuemax", String(total));
    progressBar.dataset.running = String(state.running);
    progressText.textContent = state.progress;
  }

  /** @param {ExperimentTraits} state */
  function drawSummary(state) {
    summary.replaceChildren(
      h("thead", {}, [
        h(
          "tr",
          {},
          state.summary_header.map((name) => h("th", {}, [name])),
        ),
      ]),
      h(
        "tbody",
        {},
        state.summary_rows.map((row) =>
          h(
            "tr",
            {},
            row.map((value) => h("td", {}, [value])),
          ),
        ),
      ),
    );
  }

  /**
   * Draws the widget `ref` names (through the host) in `into`; the returned controller stops that view.
   * @param {string} ref
   * @param {HTMLElement} into
   * @param {string} what
   */
  function drawChild(ref, into, what) {
    const view = new AbortController();
    if (!host?.getWidget) {
      into.textContent = `This front end cannot draw a ${what} inside another widget.`;
      return view;
    }
    host
      .getWidget(ref)
      .then((child) => (view.signal.aborted ? undefined : child.render({ el: into, signal: view.signal })))
      .catch((/** @type {unknown} */ err) => {
        if (view.signal.aborted) return;
        log.error(`could not draw the ${what}`, err);
        into.textContent = `Could not draw the ${what}: ${err instanceof Error ? err.message : String(err)}`;
      });
    return view;
  }

  /** @param {ExperimentTraits} state */
  function drawComparison(state) {
    const ref = typeof state.comparison === "string" && state.comparison ? state.comparison : null;
    comparisonBox.hidden = ref === null;
    comparisonLabel.textContent = state.comparison_label ? `Comparing ${state.comparison_label}` : "";
    if (ref === comparedRef) return;
    comparedRef = ref;
    comparedView?.abort();
    comparedView = null;
    comparisonView.replaceChildren();
    if (ref !== null) comparedView = drawChild(ref, comparisonView, "comparison");
  }

  /** The cells and columns chosen so far, marked; the hint says what is left to choose. */
  function drawPicking() {
    compareButton.setAttribute("aria-pressed", String(picking !== null));
    compareHint.hidden = picking === null;
    const chosen = picking?.values.length ?? 0;
    compareHint.textContent =
      picking === null
        ? ""
        : chosen === 0
          ? "Choose two cells (of one case), or two config columns."
          : `Choose one more ${picking.kind === "cells" ? "cell" : "config column"}.`;
    for (const td of gridCells.values()) {
      const index = Number(td.dataset.cell ?? "-1");
      td.classList.toggle(
        "dagmagic-experiment-cell--picked",
        picking?.kind === "cells" && picking.values.includes(index),
      );
    }
    for (const th of headRow.querySelectorAll("th[data-config]")) {
      const config = th.getAttribute("data-config") ?? "";
      th.classList.toggle(
        "dagmagic-experiment-config--picked",
        picking?.kind === "configs" && picking.values.includes(config),
      );
    }
  }

  /** @param {ExperimentTraits} state */
  function drawOpened(state) {
    const ref = typeof state.opened === "string" && state.opened ? state.opened : null;
    opened.hidden = ref === null;
    openedLabel.textContent = state.opened_label;
    drawRepetitions(state);
    if (ref === shownRef) return;
    shownRef = ref;
    childView?.abort();
    childView = null;
    openedView.replaceChildren();
    if (ref === null) return;
    if (!host?.getWidget) {
      openedView.textContent =
        "This front end cannot draw a run inside another widget: show it with %dag show and the run id above.";
      return;
    }
    childView = drawChild(ref, openedView, "run");
  }

  /**
   * With repetitions, a button for each repetition of the opened cell's case and config that has a run.
   * @param {ExperimentTraits} state
   */
  function drawRepetitions(state) {
    const openedCell = state.cells[state.opened_cell];
    if (!openedCell || state.repeat < 2) {
      repetitions.replaceChildren();
      return;
    }
    /** @type {HTMLButtonElement[]} */
    const buttons = [];
    let repetition = 0;
    state.cells.forEach((cell, index) => {
      if (cell[0] !== openedCell[0] || cell[1] !== openedCell[1]) return;
      repetition += 1;
      const started = !["pending", "not_started"].includes(cell[2]);
      buttons.push(
        h(
          "button",
          {
            class: "dagmagic-btn",
            type: "button",
            "data-cell": index,
            "aria-pressed": index === state.opened_cell ? "true" : "false",
            disabled: !started,
            title: `repetition ${repetition}: ${cell[2].replace("_", " ")}`,
          },
          [String(repetition)],
        ),
      );
    });
    repetitions.replaceChildren("repetition ", ...buttons);
  }

  function draw() {
    frame = null;
    if (!alive) return;
    const state = readState(model);
    try {
      drawHeader(state);
      drawShape(state);
      drawCells(state);
      drawSummary(state);
      drawOpened(state);
      drawComparison(state);
      drawPicking();
    } catch (err) {
      log.error("could not draw the experiment", err);
    }
  }

  function schedule() {
    if (!alive || frame !== null) return;
    frame = typeof requestAnimationFrame === "function" ? requestAnimationFrame(draw) : Number(setTimeout(draw, 16));
  }

  /**
   * Asks the kernel for something; its refusal shows under the grid.
   * @param {string} name
   * @param {Record<string, unknown>} msg
   */
  function ask(name, msg) {
    message.textContent = "";
    requests.request(name, msg).catch((/** @type {Error} */ err) => {
      if (alive) message.textContent = err.message;
    });
  }

  /** @param {Event} event */
  function openFrom(event) {
    const target = event.target instanceof Element ? event.target.closest("td.dagmagic-experiment-cell") : null;
    if (!(target instanceof HTMLTableCellElement)) return;
    const index = Number(target.dataset.cell ?? "-1");
    if (index < 0) {
      message.textContent = `This cell has not started: it has no run to ${picking ? "compare" : "open"} yet.`;
      return;
    }
    if (picking) {
      pick("cells", index);
      return;
    }
    if (index === model.get("opened_cell")) ask("close", {});
    else ask("open", { cell: index });
  }

  /**
   * Adds a cell or a config to those chosen to compare; with two, asks the kernel for their comparison.
   * @param {"cells" | "configs"} kind
   * @param {number | string} value
   */
  function pick(kind, value) {
    if (!picking) return;
    const values = picking.kind === kind ? [...picking.values] : [];
    const at = values.indexOf(/** @type {never} */ (value));
    if (at >= 0) values.splice(at, 1);
    else values.push(/** @type {never} */ (value));
    picking = /** @type {typeof picking} */ ({ kind, values });
    if (values.length === 2) {
      picking = null;
      ask("compare", { [kind]: values });
    }
    drawPicking();
  }

  compareButton.addEventListener(
    "click",
    () => {
      picking = picking ? null : { kind: "cells", values: [] };
      message.textContent = "";
      drawPicking();
    },
    { signal },
  );
  headRow.addEventListener(
    "click",
    (event) => {
      const th = event.target instanceof Element ? event.target.closest("th[data-config]") : null;
      if (picking && th) pick("configs", th.getAttribute("data-config") ?? "");
    },
    { signal },
  );
  closeComparison.addEventListener("click", () => ask("close_comparison", {}), { signal });
  body.addEventListener("click", openFrom, { signal });
  body.addEventListener(
    "keydown",
    (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        event.stopPropagation();
        openFrom(event);
      }
    },
    { signal },
  );
  closeButton.addEventListener("click", () => ask("close", {}), { signal });
  repetitions.addEventListener(
    "click",
    (event) => {
      const button = event.target instanceof Element ? event.target.closest("button[data-cell]") : null;
      if (button instanceof HTMLButtonElement) ask("open", { cell: Number(button.dataset.cell) });
    },
    { signal },
  );
  scoreChoice.addEventListener("change", () => ask("show_score", { column: scoreChoice.value }), { signal });

  const handlers = TRAITS.map((trait) => /** @type {const} */ ([`change:${trait}`, schedule]));
  for (const [event, handler] of handlers) model.on(event, handler);
  draw(); // the first drawing is synchronous: the view is complete when render returns
  el.append(root);

  return () => {
    alive = false;
    if (frame !== null) {
      if (typeof cancelAnimationFrame === "function") cancelAnimationFrame(frame);
      clearTimeout(frame);
    }
    childView?.abort();
    comparedView?.abort();
    requests.dispose();
    for (const [event, handler] of handlers) model.off(event, handler);
    controller.abort();
    root.remove();
  };
}

/**
 * The widget's definition: `initialize` tells the kernel a front end holds it, `render` draws one view.
 * @returns {{initialize: (props?: {model?: Model}) => void, render: (props: {model: Model, el: HTMLElement, host?: Host}) => () => void}}
 */
export default function experimentWidget() {
  return {
    initialize({ model } = {}) {
      // As the run widget does: a notebook executed headless, where nothing would draw it, shows the static grid.
      model?.send({ kind: "dagmagic-front-end" });
    },
    render,
  };
}
