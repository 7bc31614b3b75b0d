// One round's DAG as inline SVG. The layout (boxes and edge end points) comes from Python; this only draws.
// No ids, no random values, no clock: the same round gives byte-identical markup.

import { s } from "./dom.js";
import { coord, formatCompact, formatCost, formatDuration, num, shorten, shortModel } from "./format.js";
import { stepTimes } from "./state.js";

/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").DagNode} DagNode */
/** @typedef {import("./types.js").DagEdge} DagEdge */

/** A glyph per status, so colour is not the only cue. */
export const STATUS_GLYPH = /** @type {const} */ ({
  pending: "○",
  queued: "◔",
  running: "◉",
  retrying: "↻",
  paused: "‖", // U+2016: the usual pause sign (U+23F8) is missing from common Linux fonts
  completed: "✓",
  failed: "✗",
  skipped: "⤼",
  cancelled: "⊘",
});

const ARROW = 6; // arrowhead length, px
const CHAR = 6.2; // rough width of a character at the node font size (no layout engine to measure in tests)
const BADGE_CHAR = 5.4;
const SUBRUN_LABEL = "sub-DAG";

/**
 * @param {Round} round
 * @param {number} now
 * @param {string | null} selected  id of the step whose detail is open
 * @param {{interactive?: boolean}} [options]  interactive: false draws steps that cannot be selected (a
 *   sub-run's): no focus stop, no button role
 * @returns {SVGSVGElement}
 */
export function renderGraph(round, now, selected, { interactive = true } = {}) {
  const width = Math.max(num(round.width) ?? 0, 1);
  const height = Math.max(num(round.height) ?? 0, 1);
  const status = new Map(round.nodes.map((n) => [n.id, n.status]));
  return s(
    "svg",
    {
      class: "dagmagic-graph",
      xmlns: "http://www.w3.org/2000/svg",
      width: coord(width),
      height: coord(height),
      viewBox: `0 0 ${coord(width)} ${coord(height)}`,
      role: "group",
      "aria-label": `Round ${round.index} plan: ${round.nodes.length} steps`,
    },
    [
      s(
        "g",
        { class: "dagmagic-edges" },
        round.edges.map((e) => renderEdge(e, status.get(e.source))),
      ),
      s(
        "g",
        { class: "dagmagic-nodes" },
        round.nodes.map((n) => renderNode(n, now, n.id === selected, interactive)),
      ),
    ],
  );
}

/**
 * A vertical S-curve from (x1, y1) to just above (x2, y2), then an arrowhead whose tip is (x2, y2).
 * @param {DagEdge} edge
 * @param {string | undefined} sourceStatus
 */
function renderEdge(edge, sourceStatus) {
  const x1 = num(edge.x1) ?? 0;
  const y1 = num(edge.y1) ?? 0;
  const x2 = num(edge.x2) ?? 0;
  const y2 = num(edge.y2) ?? 0;
  const end = y2 - ARROW;
  const mid = (y1 + end) / 2;
  /** @type {(x: number, y: number) => string} */
  const pt = (x, y) => `${coord(x)},${coord(y)}`;
  const d = `M${pt(x1, y1)} C${pt(x1, mid)} ${pt(x2, mid)} ${pt(x2, end)}`;
  const head = `${pt(x2 - ARROW / 2, end)} ${pt(x2 + ARROW / 2, end)} ${pt(x2, y2)}`;
  return s(
    "g",
    {
      class: "dagmagic-edge",
      "data-source": edge.source,
      "data-target": edge.target,
      "data-source-status": sourceStatus ?? "pending",
    },
    [s("path", { class: "dagmagic-edge-line", d }), s("polygon", { class: "dagmagic-edge-head", points: head })],
  );
}

/**
 * A step's box: id, status glyph, duration and tokens; the task, shortened; model and tool badges, and a
 * composite step's sub-DAG badge at the right.
 * @param {DagNode} node
 * @param {number} now
 * @param {boolean} selected
 * @param {boolean} interactive
 */
function renderNode(node, now, selected, interactive) {
  const x = num(node.x) ?? 0;
  const y = num(node.y) ?? 0;
  const w = num(node.w) ?? 160;
  const h = num(node.h) ?? 52;
  const chars = Math.max(Math.floor((w - 16) / CHAR), 4);

  const stats = nodeStats(node, now);
  const head = shorten(`${STATUS_GLYPH[node.status] ?? "?"} ${node.id}`, Math.max(chars - stats.length - 1, 4));
  const tool = toolLabel(node);
  const model = shortModel(node.model ?? node.model_hint);

  const subrun = node.subrun ?? null;
  const described = subrun ? `${node.status}, sub-DAG ${subrun.status}` : node.status;

  const children = [
    s("title", {}, [`${node.id} (${described}): ${node.task}`]),
    s("rect", { class: "dagmagic-node-box", x: coord(x), y: coord(y), width: coord(w), height: coord(h), rx: 6 }),
    s("text", { class: "dagmagic-node-id", x: coord(x + 8), y: coord(y + 15) }, [head]),
    stats &&
      s("text", { class: "dagmagic-node-stats", x: coord(x + w - 8), y: coord(y + 15), "text-anchor": "end" }, [stats]),
    s("text", { class: "dagmagic-node-task", x: coord(x + 8), y: coord(y + 30) }, [shorten(node.task, chars)]),
  ];
  const top = y + h - 16;
  // a composite step's badge is always drawn, at the right: the model and tool badges make room for it
  const subrunWidth = SUBRUN_LABEL.length * BADGE_CHAR + 8;
  const room = x + w - 8 - (subrun ? subrunWidth + 4 : 0);
  if (h >= 44) {
    let left = x + 8;
    for (const [kind, label] of /** @type {const} */ ([
      ["model", model],
      ["tool", tool],
    ])) {
      if (!label) continue;
      const fit = shorten(label, Math.floor((room - left - 8) / BADGE_CHAR));
      if (fit.length < Math.min(3, label.length)) break; // a short name ("ls") shows whole; a long one needs room
      const bw = fit.length * BADGE_CHAR + 8;
      children.push(
        s("g", { class: `dagmagic-badge dagmagic-badge-${kind}` }, [
          s("rect", { x: coord(left), y: coord(top), width: coord(bw), height: 12, rx: 3 }),
          s("text", { x: coord(left + 4), y: coord(top + 9) }, [fit]),
        ]),
      );
      left += bw + 4;
    }
    const cost = num(node.cost);
    const price = cost === null ? "" : formatCost(cost);
    if (price && !subrun && left + price.length * BADGE_CHAR <= room) {
      children.push(
        s("text", { class: "dagmagic-node-cost", x: coord(x + w - 8), y: coord(top + 9), "text-anchor": "end" }, [
          price,
        ]),
      );
    }
  }
  if (subrun) {
    const left = x + w - 8 - subrunWidth;
    children.push(
      s("g", { class: "dagmagic-badge dagmagic-node-subrun", "data-status": subrun.status }, [
        s("rect", { x: coord(left), y: coord(top), width: coord(subrunWidth), height: 12, rx: 3 }),
        s("text", { x: coord(left + 4), y: coord(top + 9) }, [SUBRUN_LABEL]),
      ]),
    );
  }
  const classes = ["dagmagic-node", `dagmagic-node--${node.status}`];
  if (selected) classes.push("dagmagic-node--selected");
  return s(
    "g",
    {
      class: classes.join(" "),
      "data-step-id": node.id,
      "data-status": node.status,
      "data-layer": num(node.layer) ?? 0,
      tabindex: interactive ? 0 : null,
      role: interactive ? "button" : "img",
      "aria-pressed": interactive ? (selected ? "true" : "false") : null,
      "aria-label": `Step ${node.id}, ${described}: ${shorten(node.task, 80)}`,
    },
    children,
  );
}

/**
 * "3.2s · 1.2k tok" (run time, tokens in + out); a retry countdown when Python says when the retry is.
 * @param {DagNode} node
 * @param {number} now
 */
function nodeStats(node, now) {
  const parts = [];
  const retryAt = num(node.retry_at);
  if (node.status === "retrying" && retryAt !== null && now) {
    parts.push(`retry ${formatDuration(Math.max(retryAt - now, 0))}`);
  } else {
    const { run } = stepTimes(node, now);
    if (run !== null) parts.push(formatDuration(run));
  }
  const tokens = (num(node.input_tokens) ?? 0) + (num(node.output_tokens) ?? 0);
  if (tokens > 0) parts.push(`${formatCompact(tokens)} tok`);
  return parts.join(" · ");
}

/**
 * The tools actually called (first one, "+n" more), else the planner's hint.
 * @param {DagNode} node
 */
function toolLabel(node) {
  const names = [...new Set(node.tool_calls.map((c) => c?.name).filter(Boolean))];
  if (names.length) return names.length > 1 ? `${names[0]} +${names.length - 1}` : String(names[0]);
  if (node.subrun && node.tool_hint === "subplan") return ""; // the sub-DAG badge says it
  return node.tool_hint ?? "";
}
