// The compare widget's front end (anywidget): two runs side by side (dagmagic/compare.py's RunComparison, as
// dagmagic/notebook/compare_widget.py syncs it). A header with both sides' labels, goals, statuses, models, tokens,
// cost and time (b's deltas coloured) and the settings that differ; each round's plans aligned step by step in two
// columns, a pair per row (`same` pairs quiet, `changed` pairs say which fields changed, `added`/`removed` pairs
// leave the other side empty), each side's result with the words that differ marked (<del> in a, <ins> in b); a
// step cell expands to its full result; the verdicts; the answers with their differences; calls per purpose.
// An experiment comparison holds one comparison per case, chosen with a picker.
//
// Everything the runs hold is LLM text: it goes in through textContent; answers shown as Markdown go through the
// sanitizing markdown.js. Redraws are coalesced into one per animation frame.

import { h, log } from "./dom.js";
import { formatCost, formatDuration, formatInt } from "./format.js";
import { renderMarkdown } from "./markdown.js";

/**
 * @typedef {{op: "same" | "removed" | "added", text: string}} Piece
 * @typedef {{input_tokens?: number, output_tokens?: number, requests?: number, cost?: number | null}} Usage
 * @typedef {object} Side
 * @property {string} label
 * @property {string} run_id
 * @property {number | null} [round]
 * @property {string} goal
 * @property {string} status
 * @property {boolean} [live]
 * @property {Record<string, unknown>} [settings]
 * @property {string[]} [models]
 * @property {Usage} [usage]
 * @property {number | null} [cost]
 * @property {number | null} [seconds]
 * @property {string} [answer]
 * @property {Record<string, number>} [calls]
 * @property {string | null} [forked_from]
 * @typedef {object} SideStep
 * @property {string} ref
 * @property {string} task
 * @property {string | null} [tool]
 * @property {Record<string, unknown> | null} [tool_args]
 * @property {string} status
 * @property {string | null} [result]
 * @property {string | null} [error]
 * @property {boolean} [edited]
 * @property {string | null} [model]
 * @property {number} [tokens]
 * @property {number | null} [cost]
 * @property {number | null} [seconds]
 * @typedef {object} StepPair
 * @property {SideStep | null} [a]
 * @property {SideStep | null} [b]
 * @property {"same" | "changed" | "added" | "removed"} change
 * @property {string[]} [fields]
 * @property {Piece[]} [result]
 * @property {number | null} [tokens_delta]
 * @property {number | null} [cost_delta]
 * @property {number | null} [seconds_delta]
 * @typedef {{achieved?: boolean, confidence?: number, reasoning?: string}} Verdict
 * @typedef {object} RoundPair
 * @property {number | null} a
 * @property {number | null} b
 * @property {StepPair[]} [steps]
 * @property {Verdict | null} [verdict_a]
 * @property {Verdict | null} [verdict_b]
 * @typedef {object} Comparison
 * @property {Side} a
 * @property {Side} b
 * @property {Record<string, [unknown, unknown]>} [differences]
 * @property {RoundPair[]} [rounds]
 * @property {Piece[]} [answer]
 * @typedef {{title: string, comparison: Comparison}} Entry
 */

/**
 * The synced state (see dagmagic/notebook/compare_widget.py).
 * @typedef {object} CompareTraits
 * @property {string} title
 * @property {Entry[]} comparisons
 * @property {boolean} live
 */

/** @typedef {import("@anywidget/types").AnyModel<CompareTraits>} Model */

const TRAITS = /** @type {const} */ (["title", "comparisons", "live"]);
/** Characters of a result beyond which its cell shows the first lines only, until expanded. */
const PREVIEW = 240;

/**
 * A signed delta, coloured by whether it is more (worse: more tokens, cost, time) or less; nothing when it shows
 * as zero.
 * @param {number | null | undefined} delta
 * @param {(value: number) => string} format
 * @returns {HTMLElement | null}
 */
export function deltaBadge(delta, format) {
  if (typeof delta !== "number" || !Number.isFinite(delta)) return null;
  const text = format(Math.abs(delta));
  if (!/[1-9]/.test(text)) return null; // no difference, or none worth the digits shown
  const [sign, direction] = delta > 0 ? ["+", "up"] : ["−", "down"];
  return h("span", { class: `dagmagic-compare-delta dagmagic-compare-delta--${direction}` }, [`${sign}${text}`]);
}

/**
 * One side's text from a word-level difference: the pieces both have, and its own marked (<del> for a's, <ins>
 * for b's). Text only, through text nodes.
 * @param {Piece[]} pieces
 * @param {"a" | "b"} side
 * @returns {HTMLElement}
 */
export function diffText(pieces, side) {
  const own = side === "a" ? "removed" : "added";
  const box = h("span", { class: "dagmagic-compare-diff" });
  for (const piece of pieces) {
    if (piece.op === "same") box.append(document.createTextNode(piece.text));
    else if (piece.op === own) box.append(h(side === "a" ? "del" : "ins", {}, [piece.text]));
  }
  return box;
}

/** @param {number} value */
const seconds = (value) => formatDuration(value);
/** @param {number} value */
const tokens = (value) => formatInt(value);
/** @param {number} value */
const dollars = (value) => formatCost(value);

/** @param {Usage | undefined} usage */
function totalTokens(usage) {
  return (usage?.input_tokens ?? 0) + (usage?.output_tokens ?? 0);
}

/** @param {unknown} value */
function shown(value) {
  if (value === null || value === undefined) return "—";
  return typeof value === "string" ? value : JSON.stringify(value);
}

/**
 * @param {number | null | undefined} a
 * @param {number | null | undefined} b
 */
function difference(a, b) {
  return typeof a === "number" && typeof b === "number" ? b - a : null;
}

/**
 * A table in the three columns every part of the view shares: a's, what the row is (in the middle), b's.
 * @param {string} name  its class
 * @param {HTMLElement[]} rows
 * @param {HTMLElement | null} [head]
 */
function threeColumns(name, rows, head = null) {
  return h("table", { class: `dagmagic-compare-table ${name}` }, [
    h("colgroup", {}, [
      h("col", { class: "dagmagic-compare-col-a" }),
      h("col", { class: "dagmagic-compare-col-mid" }),
      h("col", { class: "dagmagic-compare-col-b" }),
    ]),
    head ? h("thead", {}, [head]) : null,
    h("tbody", {}, rows),
  ]);
}

/**
 * A row of two values, what they are in the middle, b's delta beside b's.
 * @param {string} name
 * @param {string} a
 * @param {string} b
 * @param {HTMLElement | null} [delta]
 * @param {string} [key]  its data-row
 */
function figureRow(name, a, b, delta = null, key = name) {
  return h("tr", { "data-row": key }, [
    h("td", { class: "dagmagic-compare-a" }, [a]),
    h("th", { scope: "row", class: "dagmagic-compare-what" }, [name]),
    h("td", { class: "dagmagic-compare-b" }, [b, delta]),
  ]);
}

/**
 * The header: labels, goals, statuses, models and the figures of both sides, b's deltas beside them; then the
 * settings that differ.
 * @param {Comparison} comparison
 */
function headerTable(comparison) {
  const { a, b } = comparison;
  /** @param {Side} side */
  const cost = (side) => (typeof side.cost === "number" ? dollars(side.cost) : "—");
  /** @param {Side} side */
  const time = (side) => (typeof side.seconds === "number" ? seconds(side.seconds) : "—");
  /** @param {Side} side */
  const status = (side) => side.status + (side.live ? " (live)" : "");
  const rows = [
    figureRow("goal", a.goal, b.goal),
    figureRow("status", status(a), status(b)),
    figureRow("models", (a.models ?? []).join(", ") || "—", (b.models ?? []).join(", ") || "—"),
    figureRow(
      "tokens",
      tokens(totalTokens(a.usage)),
      tokens(totalTokens(b.usage)),
      deltaBadge(difference(totalTokens(a.usage), totalTokens(b.usage)), tokens),
    ),
    figureRow("cost", cost(a), cost(b), deltaBadge(difference(a.cost, b.cost), dollars)),
    figureRow("time", time(a), time(b), deltaBadge(difference(a.seconds, b.seconds), seconds)),
  ];
  if (a.forked_from || b.forked_from) {
    /** @param {Side} side */
    const fork = (side) => (side.forked_from ? `run ${side.forked_from}` : "—");
    rows.splice(2, 0, figureRow("forked from", fork(a), fork(b)));
  }
  const settings = Object.entries(comparison.differences ?? {}).filter(([name]) => name !== "goal");
  rows.push(
    h("tr", { class: "dagmagic-compare-subhead" }, [
      h("td", { colspan: 3 }, [settings.length ? "settings that differ" : "the same settings"]),
    ]),
    ...settings.map(([name, pair]) =>
      figureRow(name.replace(/_/g, " "), shown(pair?.[0]), shown(pair?.[1]), null, `setting-${name}`),
    ),
  );
  const head = h("tr", {}, [
    h("th", { class: "dagmagic-compare-label", scope: "col" }, [a.label]),
    h("th", { scope: "col" }),
    h("th", { class: "dagmagic-compare-label", scope: "col" }, [b.label]),
  ]);
  return threeColumns("dagmagic-compare-header", rows, head);
}

/**
 * One side's step: its ref, task, status, model and figures, its result (differing words marked), expandable.
 * @param {SideStep | null | undefined} step
 * @param {StepPair} pair
 * @param {"a" | "b"} side
 */
function stepCell(step, pair, side) {
  const td = h("td", { class: `dagmagic-compare-step dagmagic-compare-step--${side}`, "data-side": side });
  if (!step) {
    td.classList.add("dagmagic-compare-step--empty");
    td.append(h("span", { class: "dagmagic-compare-quiet" }, [side === "a" ? "not in a" : "not in b"]));
    return td;
  }
  const figures = [
    step.model ? h("span", { class: "dagmagic-compare-model" }, [step.model]) : null,
    step.tokens ? `${tokens(step.tokens)} tok` : null,
    typeof step.cost === "number" ? dollars(step.cost) : null,
    typeof step.seconds === "number" ? seconds(step.seconds) : null,
  ].filter(Boolean);
  const spaced = figures.flatMap((part, index) => (index ? [" · ", part] : [part]));
  const head = h("div", { class: "dagmagic-compare-step-head" }, [
    h("code", { class: "dagmagic-compare-ref" }, [step.ref]),
    h("span", { class: "dagmagic-compare-status", "data-status": step.status }, [step.status]),
    step.tool ? h("span", { class: "dagmagic-compare-tool" }, [step.tool]) : null,
    step.edited
      ? h("span", { class: "dagmagic-compare-edited", title: "you wrote this result" }, ["result edited by you"])
      : null,
  ]);
  if (side === "b" && pair.a) {
    const deltas = [
      deltaBadge(pair.tokens_delta, (value) => `${tokens(value)} tok`),
      deltaBadge(pair.cost_delta, dollars),
      deltaBadge(pair.seconds_delta, seconds),
    ].filter(Boolean);
    if (deltas.length) spaced.push(" ", h("span", { class: "dagmagic-compare-deltas" }, deltas));
  }
  const text = step.error ? `error: ${step.error}` : (step.result ?? "");
  const pieces = pair.result ?? [];
  const preview = h("div", { class: "dagmagic-compare-result" });
  const long = text.length > PREVIEW;
  if (pieces.length && !step.error) preview.append(diffText(pieces, side));
  else preview.textContent = text || "(no result)";
  td.append(head, h("div", { class: "dagmagic-compare-task" }, [step.task]));
  if (spaced.length) td.append(h("div", { class: "dagmagic-compare-figures" }, spaced));
  td.append(preview);
  if (long) {
    td.classList.add("dagmagic-compare-step--long");
    td.tabIndex = 0;
    td.title = "click: the full result";
    td.setAttribute("aria-expanded", "false");
  }
  return td;
}

/**
 * The middle cell of a pair: what changed.
 * @param {StepPair} pair
 */
function changeCell(pair) {
  const mark = { same: "=", changed: "≠", added: "+", removed: "−" }[pair.change] ?? "?";
  const fields = pair.change === "changed" ? (pair.fields ?? []) : [];
  return h("td", { class: "dagmagic-compare-change", title: pair.change }, [
    h("span", { class: "dagmagic-compare-mark" }, [mark]),
    ...fields.map((field) => h("span", { class: "dagmagic-compare-field" }, [field])),
  ]);
}

/** @param {Verdict | null | undefined} verdict */
function verdictCell(verdict) {
  if (!verdict)
    return h("td", { class: "dagmagic-compare-verdict" }, [
      h("span", { class: "dagmagic-compare-quiet" }, ["no verdict"]),
    ]);
  const confidence = Math.round(100 * (verdict.confidence ?? 0));
  return h("td", { class: "dagmagic-compare-verdict", "data-achieved": String(Boolean(verdict.achieved)) }, [
    h("b", {}, [verdict.achieved ? "✓ achieved" : "✗ not achieved"]),
    ` (${confidence}% sure) `,
    h("span", {}, [verdict.reasoning ?? ""]),
  ]);
}

/**
 * @param {RoundPair} round
 */
function roundSection(round) {
  const steps = round.steps ?? [];
  const changed = steps.filter((pair) => pair.change !== "same").length;
  const name = round.a === round.b ? `round ${round.a}` : `round ${round.a ?? "—"} ↔ round ${round.b ?? "—"}`;
  const rows = steps.map((pair) =>
    h("tr", { class: `dagmagic-compare-pair dagmagic-compare-pair--${pair.change}`, "data-change": pair.change }, [
      stepCell(pair.a, pair, "a"),
      changeCell(pair),
      stepCell(pair.b, pair, "b"),
    ]),
  );
  rows.push(
    h("tr", { class: "dagmagic-compare-verdicts" }, [
      verdictCell(round.verdict_a),
      h("td", { class: "dagmagic-compare-change" }, ["verdict"]),
      verdictCell(round.verdict_b),
    ]),
  );
  return h("section", { class: "dagmagic-compare-round" }, [
    h("h4", {}, [`${name} · ${steps.length} step pairs, ${changed} differ`]),
    threeColumns("dagmagic-compare-steps", rows),
  ]);
}

/** @param {Comparison} comparison */
function answerSection(comparison) {
  const pieces = comparison.answer ?? [];
  const a = comparison.a.answer ?? "";
  const b = comparison.b.answer ?? "";
  const cellA = h("td", { class: "dagmagic-compare-answer", "data-side": "a" });
  const cellB = h("td", { class: "dagmagic-compare-answer", "data-side": "b" });
  const differ = pieces.some((piece) => piece.op !== "same");
  if (differ) {
    cellA.append(diffText(pieces, "a"));
    cellB.append(diffText(pieces, "b"));
  } else {
    renderMarkdown(cellA, a || "(no answer)");
    renderMarkdown(cellB, b || "(no answer)");
  }
  const rows = [
    h("tr", {}, [
      cellA,
      h("th", { scope: "row", class: "dagmagic-compare-what" }, [differ ? "answer" : "the same answer"]),
      cellB,
    ]),
  ];
  if (differ) {
    // the differences are marked in the text as written; here both answers as they read
    const ma = h("td", { class: "dagmagic-answer-body" });
    const mb = h("td", { class: "dagmagic-answer-body" });
    renderMarkdown(ma, a || "(no answer)");
    renderMarkdown(mb, b || "(no answer)");
    rows.push(
      h("tr", { class: "dagmagic-compare-rendered" }, [
        ma,
        h("th", { scope: "row", class: "dagmagic-compare-what" }, ["as it reads"]),
        mb,
      ]),
    );
  }
  return h("section", { class: "dagmagic-compare-answers" }, [
    h("h4", {}, ["answers"]),
    threeColumns("dagmagic-compare-steps", rows),
  ]);
}

/** @param {Comparison} comparison */
function callsTable(comparison) {
  const callsA = comparison.a.calls ?? {};
  const callsB = comparison.b.calls ?? {};
  const purposes = [...new Set([...Object.keys(callsA), ...Object.keys(callsB)])].sort();
  if (!purposes.length) return null;
  return h("section", { class: "dagmagic-compare-calls" }, [
    h("h4", {}, ["LLM calls per purpose"]),
    threeColumns(
      "dagmagic-compare-figures-table",
      purposes.map((purpose) => {
        const a = callsA[purpose] ?? 0;
        const b = callsB[purpose] ?? 0;
        const row = figureRow(purpose, String(a), String(b), deltaBadge(b - a, String));
        row.dataset.purpose = purpose;
        return row;
      }),
    ),
  ]);
}

/**
 * One comparison, drawn whole.
 * @param {Comparison} comparison
 * @returns {HTMLElement}
 */
export function comparisonView(comparison) {
  const rounds = comparison.rounds ?? [];
  return h("div", { class: "dagmagic-compare-body" }, [
    headerTable(comparison),
    ...rounds.map(roundSection),
    rounds.length ? null : h("p", { class: "dagmagic-compare-quiet" }, ["No rounds yet."]),
    answerSection(comparison),
    callsTable(comparison),
  ]);
}

/**
 * @param {Model} model
 * @returns {CompareTraits}
 */
function readState(model) {
  const comparisons = model.get("comparisons");
  return {
    title: String(model.get("title") ?? ""),
    comparisons: Array.isArray(comparisons) ? comparisons : [],
    live: Boolean(model.get("live")),
  };
}

/**
 * @param {{model: Model, el: HTMLElement}} props
 * @returns {() => void} cleanup
 */
function render({ model, el }) {
  const controller = new AbortController();
  const { signal } = controller;
  let alive = true;
  /** @type {number | null} */
  let frame = null;
  let chosen = 0;

  const title = h("b", { class: "dagmagic-compare-title" });
  const liveMark = h("span", { class: "dagmagic-compare-live", hidden: true }, ["live"]);
  const picker = h("select", { class: "dagmagic-compare-picker", "aria-label": "case", hidden: true });
  const body = h("div", { class: "dagmagic-compare-content" });
  const root = h("div", { class: "dagmagic dagmagic-compare-view", "data-lm-suppress-shortcuts": "true" }, [
    h("div", { class: "dagmagic-compare-top" }, [title, liveMark, picker]),
    body,
  ]);
  let drawnKey = "";

  function draw() {
    frame = null;
    if (!alive) return;
    const state = readState(model);
    try {
      const entries = state.comparisons;
      chosen = Math.min(chosen, Math.max(entries.length - 1, 0));
      const entry = entries[chosen];
      title.textContent =
        state.title || (entry ? `Compare ${entry.comparison.a.label} with ${entry.comparison.b.label}` : "Compare");
      liveMark.hidden = !state.live;
      picker.hidden = entries.length < 2;
      const titles = JSON.stringify(entries.map((each) => each.title));
      if (picker.dataset.titles !== titles) {
        picker.dataset.titles = titles;
        picker.replaceChildren(...entries.map((each, index) => h("option", { value: index }, [each.title])));
      }
      picker.value = String(chosen);
      // a sync that changes nothing leaves the view (and the cells the user expanded) as it is
      const key = JSON.stringify(entry ?? null);
      if (key === drawnKey) return;
      drawnKey = key;
      body.replaceChildren(entry ? comparisonView(entry.comparison) : h("p", {}, ["Nothing to compare."]));
    } catch (err) {
      log.error("could not draw the comparison", err);
    }
  }

  function schedule() {
    if (!alive || frame !== null) return;
    frame = typeof requestAnimationFrame === "function" ? requestAnimationFrame(draw) : Number(setTimeout(draw, 16));
  }

  /** @param {Event} event */
  function toggle(event) {
    const target = event.target instanceof Element ? event.target.closest("td.dagmagic-compare-step--long") : null;
    if (!(target instanceof HTMLElement)) return;
    const expanded = target.classList.toggle("dagmagic-compare-step--expanded");
    target.setAttribute("aria-expanded", String(expanded));
  }

  body.addEventListener("click", toggle, { signal });
  body.addEventListener(
    "keydown",
    (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        event.stopPropagation();
        toggle(event);
      }
    },
    { signal },
  );
  picker.addEventListener(
    "change",
    () => {
      chosen = Number(picker.value) || 0;
      draw();
    },
    { signal },
  );

  const handlers = TRAITS.map((trait) => /** @type {const} */ ([`change:${trait}`, schedule]));
  for (const [event, handler] of handlers) model.on(event, handler);
  draw(); // synchronous: the view is complete when render returns
  el.append(root);

  return () => {
    alive = false;
    if (frame !== null) {
      if (typeof cancelAnimationFrame === "function") cancelAnimationFrame(frame);
      clearTimeout(frame);
    }
    for (const [event, handler] of handlers) model.off(event, handler);
    controller.abort();
    root.remove();
  };
}

/**
 * The widget's definition: `initialize` tells the kernel a front end holds it, `render` draws one view.
 * @returns {{initialize: (props?: {model?: Model}) => void, render: (props: {model: Model, el: HTMLElement}) => () => void}}
 */
export default function compareWidget() {
  return {
    initialize({ model } = {}) {
      model?.send({ kind: "dagmagic-front-end" });
    },
    render,
  };
}
