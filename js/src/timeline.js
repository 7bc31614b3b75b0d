// The timeline: every step and every LLM call of the run on one time axis (a Gantt chart), so the parallelism
// and the stragglers show. A step's row has its wait for a slot (queued, pale) and its run (its status colour);
// a step tried more than once says so. LLM calls outside steps (routing, planning, judging, the answer) get a
// row per purpose. Collapsed by default; drawn as inline SVG from the synced state only (no clock of its own:
// a running bar ends at the state's `now`), as wide as the widget (one unit a pixel: its text keeps its size),
// each row's label cut to end before the time axis starts, the whole of it in its bars' tooltips.

import { h, s } from "./dom.js";
import { formatDuration, num } from "./format.js";
import { textWidth } from "./layout.js";

/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./types.js").DagNode} DagNode */
/** @typedef {import("./types.js").CallRecord} CallRecord */

const ROW = 18;
const WIDTH = 720; // px, when the widget's width is unknown (not on the page yet)
const MIN_WIDTH = 320;
const AXIS = 18;
const FONT = 10; // px, the labels' font size (widget.css)
const TITLE_CHARS = 500;

/**
 * The width of the labels' column: a quarter of the drawing, between 150 and 280 px.
 * @param {number} width
 */
const labelWidth = (width) => Math.round(Math.min(Math.max(width * 0.25, 150), 280));

/**
 * `text` cut (with an ellipsis) to `width` px at the labels' font size.
 * @param {string} text
 * @param {number} width
 */
function fitLabel(text, width) {
  if (textWidth(text, FONT) <= width) return text;
  const chars = [...text];
  while (chars.length > 1 && textWidth(`${chars.join("").trimEnd()}…`, FONT) > width) chars.pop();
  return `${chars.join("").trimEnd()}…`;
}

/**
 * One bar: from `start` to `end` (epoch seconds) in a row, with a class and a tooltip.
 * @typedef {{row: number, start: number, end: number, kind: string, title: string}} Bar
 */

/**
 * The rows and bars of a run, in the order they started; each row's label whole (the drawing cuts it).
 * @param {Traits} state
 * @returns {{labels: string[], bars: Bar[], start: number, end: number}}
 */
export function timelineOf(state) {
  const firsts = [
    num(state.started_at),
    ...state.rounds.flatMap((round) => round.nodes.map((node) => num(node.queued_at) ?? num(node.started_at))),
    ...state.calls.map((call) => num(call.started_at)),
  ].filter((t) => t !== null && t > 0);
  const start = firsts.length ? Math.min(.../** @type {number[]} */ (firsts)) : 0;
  const now = Math.max(num(state.now) ?? 0, start);
  /** @type {string[]} */
  const labels = [];
  /** @type {Bar[]} */
  const bars = [];
  let end = start;
  const rounds = state.rounds;
  for (const round of rounds) {
    const prefix = rounds.length > 1 ? `r${round.index}.` : "";
    const nodes = [...round.nodes].sort((a, b) => (num(a.queued_at) ?? Infinity) - (num(b.queued_at) ?? Infinity));
    for (const node of nodes) {
      const queued = num(node.queued_at);
      const started = num(node.started_at);
      if (queued === null && started === null) continue;
      const row = labels.length;
      const attempts = node.attempts > 1 ? ` (${node.attempts} tries)` : "";
      labels.push(`${prefix}${node.id}${attempts} · ${node.task.replace(/\s+/g, " ").trim()}`);
      const finished = num(node.completed_at) ?? (node.status === "running" ? now : null);
      if (queued !== null && (started ?? finished ?? now) > queued) {
        bars.push({ row, start: queued, end: started ?? finished ?? now, kind: "queued", title: "waiting for a slot" });
      }
      if (started !== null) {
        const stop = finished ?? now;
        bars.push({ row, start: started, end: stop, kind: node.status, title: `${node.status}` });
        end = Math.max(end, stop);
      }
    }
  }
  /** @type {Map<string, number>} */
  const purposeRows = new Map();
  for (const call of state.calls) {
    if (call.step_id) continue; // drawn inside its step's bar
    const began = num(call.started_at);
    if (began === null) continue;
    let row = purposeRows.get(call.purpose);
    if (row === undefined) {
      row = labels.length;
      purposeRows.set(call.purpose, row);
      labels.push(call.purpose);
    }
    const stop = began + (num(call.latency) ?? 0);
    bars.push({
      row,
      start: began,
      end: stop,
      kind: `call-${call.status ?? "ok"}`,
      title: `${call.purpose} · ${call.model} · ${formatDuration(call.latency)}${call.stream ? " · streamed" : ""}`,
    });
    end = Math.max(end, stop);
  }
  // calls under way (a plan being written for minutes, say) grow up to now, like a running step
  for (const call of state.status === "running" ? (state.live_calls ?? []) : []) {
    if (call.step_id) continue;
    let row = purposeRows.get(call.purpose);
    if (row === undefined) {
      row = labels.length;
      purposeRows.set(call.purpose, row);
      labels.push(call.purpose);
    }
    const arrived = call.tokens
      ? ` · ${call.tokens} tokens so far`
      : call.stream
        ? " · waiting for the first token"
        : "";
    bars.push({
      row,
      start: call.started_at,
      end: now,
      kind: "call-running",
      title: `${call.purpose} · ${call.model}${arrived}`,
    });
  }
  if (state.status === "running") end = Math.max(end, now);
  return { labels, bars, start, end: Math.max(end, start + 0.001) };
}

/**
 * @returns {{el: HTMLElement, update: (state: Traits) => void}}
 */
export function createTimeline() {
  const summary = h("summary", { class: "dagmagic-timeline-summary" }, ["Timeline"]);
  const body = h("div", { class: "dagmagic-timeline-body" });
  const el = h("details", { class: "dagmagic-timeline" }, [summary, body]);
  /** @type {string | null} */
  let drawn = null;
  /** @type {Traits | null} */
  let last = null;
  // drawn again when the widget's width changes (a side panel opened, the window resized)
  if (typeof ResizeObserver === "function") {
    let seen = 0;
    new ResizeObserver(() => {
      if (last && el.clientWidth !== seen && el.clientWidth > 0) {
        seen = el.clientWidth;
        update(last);
      }
    }).observe(el);
  }

  /** @param {Traits} state */
  function update(state) {
    last = state;
    const { labels, bars, start, end } = timelineOf(state);
    const span = end - start;
    summary.textContent = labels.length
      ? `Timeline · ${formatDuration(span)} · ${labels.length} row${labels.length === 1 ? "" : "s"}`
      : "Timeline";
    const width = el.clientWidth > 0 ? Math.max(el.clientWidth, MIN_WIDTH) : WIDTH;
    const key = JSON.stringify([labels, bars.map((b) => [b.row, b.start, b.end, b.kind]), start, end, width]);
    if (key === drawn) return;
    drawn = key;
    if (!labels.length) {
      body.replaceChildren(h("div", { class: "dagmagic-muted" }, ["Nothing has run yet."]));
      return;
    }
    const height = AXIS + labels.length * ROW + 4;
    const column = labelWidth(width);
    /** @param {number} t */
    const x = (t) => column + ((t - start) / span) * (width - column - 8);
    const ticks = [];
    for (let i = 0; i <= 4; i++) {
      const t = start + (span * i) / 4;
      // the last label ends on its line: centred, its second half would leave the drawing
      ticks.push(
        s("line", { class: "dagmagic-timeline-tick", x1: x(t), y1: AXIS - 4, x2: x(t), y2: height }),
        s(
          "text",
          { class: "dagmagic-timeline-tick-label", x: x(t), y: AXIS - 6, "text-anchor": i === 4 ? "end" : "middle" },
          [formatDuration(t - start)],
        ),
      );
    }
    // the label ends 8 px before the 0 s line (and its tick label, centred on it)
    const rows = labels.map((label, row) =>
      s("text", { class: "dagmagic-timeline-label", x: 4, y: AXIS + row * ROW + 12 }, [
        fitLabel(label, column - 12 - textWidth(formatDuration(0), FONT) / 2),
      ]),
    );
    const drawnBars = bars.map((bar) =>
      s(
        "rect",
        {
          class: `dagmagic-timeline-bar dagmagic-timeline-bar--${bar.kind}`,
          x: x(bar.start),
          y: AXIS + bar.row * ROW + 3,
          width: Math.max(x(bar.end) - x(bar.start), 1.5),
          height: ROW - 6,
          rx: 2,
          "data-row": bar.row,
        },
        [s("title", {}, [`${cut(labels[bar.row])}: ${bar.title}, ${formatDuration(bar.end - bar.start)}`])],
      ),
    );
    body.replaceChildren(
      s(
        "svg",
        {
          class: "dagmagic-timeline-svg",
          viewBox: `0 0 ${width} ${height}`,
          width,
          height,
          role: "img",
          "aria-label": `Timeline of ${labels.length} steps and calls over ${formatDuration(span)}`,
        },
        [...ticks, ...rows, ...drawnBars],
      ),
    );
  }

  return { el, update };
}

/**
 * A tooltip's text, up to TITLE_CHARS characters.
 * @param {string} text
 */
function cut(text) {
  return text.length > TITLE_CHARS ? `${text.slice(0, TITLE_CHARS)}…` : text;
}
