// The timeline: every step and every LLM call of the run on one time axis (a Gantt chart), so the parallelism
// and the stragglers show. A step's row has its wait for a slot (queued, pale) and its run (its status colour);
// a step tried more than once says so. LLM calls outside steps (routing, planning, judging, the answer) get a
// row per purpose. Collapsed by default; drawn as inline SVG from the synced state only (no clock of its own:
// a running bar ends at the state's `now`).

import { h, s } from "./dom.js";
import { formatDuration, num, shorten } from "./format.js";

/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./types.js").DagNode} DagNode */
/** @typedef {import("./types.js").CallRecord} CallRecord */

const ROW = 18;
const LABEL = 150;
const WIDTH = 720;
const AXIS = 18;

/**
 * One bar: from `start` to `end` (epoch seconds) in a row, with a class and a tooltip.
 * @typedef {{row: number, start: number, end: number, kind: string, title: string}} Bar
 */

/**
 * The rows and bars of a run, in the order they started.
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
      labels.push(`${prefix}${node.id}${attempts} · ${shorten(node.task, 28)}`);
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

  /** @param {Traits} state */
  function update(state) {
    const { labels, bars, start, end } = timelineOf(state);
    const span = end - start;
    summary.textContent = labels.length
      ? `Timeline · ${formatDuration(span)} · ${labels.length} row${labels.length === 1 ? "" : "s"}`
      : "Timeline";
    const key = JSON.stringify([labels, bars.map((b) => [b.row, b.start, b.end, b.kind]), start, end]);
    if (key === drawn) return;
    drawn = key;
    if (!labels.length) {
      body.replaceChildren(h("div", { class: "dagmagic-muted" }, ["Nothing has run yet."]));
      return;
    }
    const height = AXIS + labels.length * ROW + 4;
    /** @param {number} t */
    const x = (t) => LABEL + ((t - start) / span) * (WIDTH - LABEL - 8);
    const ticks = [];
    for (let i = 0; i <= 4; i++) {
      const t = start + (span * i) / 4;
      ticks.push(
        s("line", { class: "dagmagic-timeline-tick", x1: x(t), y1: AXIS - 4, x2: x(t), y2: height }),
        s("text", { class: "dagmagic-timeline-tick-label", x: x(t), y: AXIS - 6, "text-anchor": "middle" }, [
          formatDuration(t - start),
        ]),
      );
    }
    const rows = labels.map((label, row) =>
      s("text", { class: "dagmagic-timeline-label", x: 4, y: AXIS + row * ROW + 12 }, [label]),
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
        [s("title", {}, [`${labels[bar.row]}: ${bar.title}, ${formatDuration(bar.end - bar.start)}`])],
      ),
    );
    body.replaceChildren(
      s(
        "svg",
        {
          class: "dagmagic-timeline-svg",
          viewBox: `0 0 ${WIDTH} ${height}`,
          width: "100%",
          role: "img",
          "aria-label": `Timeline of ${labels.length} steps and calls over ${formatDuration(span)}`,
        },
        [...ticks, ...rows, ...drawnBars],
      ),
    );
  }

  return { el, update };
}
