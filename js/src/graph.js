// One round's DAG as inline SVG: boxes and edges where layout.js puts them (dagre, in the browser), each box
// with its status, id, stats, its task on two lines and its badges; an earlier round's step a step uses is a
// small dashed ghost box. No ids, no random values, no clock: the same round gives byte-identical markup.
// The SVG scales down to the widget's width, never up past its natural size, and never below MIN_SCALE of it:
// a wider graph scrolls sideways instead of shrinking its text out of reach (zoom.js zooms big graphs).

import { s } from "./dom.js";
import { coord, formatCompact, formatCost, formatDuration, num, shorten, shortModel } from "./format.js";
import { ARROW, layoutRound, textWidth, wrapLabel } from "./layout.js";
import { stepTimes } from "./state.js";
import { callText, fellBack, isToolStep, toolName } from "./toolstep.js";

/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").DagNode} DagNode */
/** @typedef {import("./layout.js").Box} Box */
/** @typedef {import("./layout.js").EdgePath} EdgePath */
/** @typedef {import("./layout.js").GhostBox} GhostBox */

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

const CHAR = 6.2; // rough width of a character at the node font size (no layout engine to measure in tests)
const BADGE_CHAR = 5.4;
const TASK_FONT = 11; // px, the task's font size (widget.css)
const COST_FONT = 10; // px, the cost's font size, as the stats' (widget.css)
const SUBRUN_LABEL = "sub-DAG";
const CALL_CHAR = 6; // a character of a tool step's call (monospace, smaller than the task)
const TITLE_VALUE = 200; // a tool step's argument values in its box's title
/** The smallest a graph is drawn at to fit the widget's width: its task text (11 px) stays 9 px high. */
export const MIN_SCALE = 9 / TASK_FONT;

/**
 * @param {Round} round
 * @param {number} now
 * @param {string | null} selected  id of the step whose detail is open
 * @param {{interactive?: boolean}} [options]  interactive: false draws steps that cannot be selected (a
 *   sub-run's): no focus stop, no button role
 * @returns {SVGSVGElement}
 */
export function renderGraph(round, now, selected, { interactive = true } = {}) {
  const layout = layoutRound(round);
  const width = coord(layout.width);
  const height = coord(layout.height);
  const status = new Map(round.nodes.map((n) => [n.id, n.status]));
  // its width and height are its natural size: CSS scales it down to the widget's width (never up, nor below
  // the minimum width set here), keeping its proportions (viewBox)
  const svg = s(
    "svg",
    {
      class: "dagmagic-graph",
      xmlns: "http://www.w3.org/2000/svg",
      width,
      height,
      viewBox: `0 0 ${width} ${height}`,
      role: "group",
      "aria-label": `Round ${round.index} plan: ${round.nodes.length} steps`,
    },
    [
      s(
        "g",
        { class: "dagmagic-edges" },
        layout.edges.map((e) => renderEdge(e, status.get(e.source))),
      ),
      layout.ghosts.length > 0 &&
        s(
          "g",
          { class: "dagmagic-ghosts" },
          layout.ghosts.map((g) => renderGhost(g, layout.edges)),
        ),
      s(
        "g",
        { class: "dagmagic-nodes" },
        round.nodes.map((n, i) => renderNode(n, layout.nodes[i], now, n.id === selected, interactive)),
      ),
    ],
  );
  // a CSS property set through the CSSOM: no style attribute in the markup (a strict CSP refuses those)
  svg.style.setProperty("--dm-graph-min-width", `${coord(layout.width * MIN_SCALE)}px`);
  return svg;
}

/**
 * An edge along its route, the arrowhead's tip on the target's top; an earlier round's step's is dashed.
 * @param {EdgePath} edge
 * @param {string | undefined} sourceStatus
 */
function renderEdge(edge, sourceStatus) {
  /** @type {(x: number, y: number) => string} */
  const pt = (x, y) => `${coord(x)},${coord(y)}`;
  const { tipX, tipY } = edge;
  const head = `${pt(tipX - ARROW / 2, tipY - ARROW)} ${pt(tipX + ARROW / 2, tipY - ARROW)} ${pt(tipX, tipY)}`;
  return s(
    "g",
    {
      class: edge.ghost ? "dagmagic-edge-ghost" : "dagmagic-edge",
      "data-source": edge.source,
      "data-target": edge.target,
      "data-source-status": edge.ghost ? null : (sourceStatus ?? "pending"),
    },
    [
      // dashed for an earlier round's step, whatever the theme's styles
      s("path", { class: "dagmagic-edge-line", d: edge.d, "stroke-dasharray": edge.ghost ? "4 3" : null }),
      s("polygon", { class: "dagmagic-edge-head", points: head }),
    ],
  );
}

/**
 * An earlier round's step ("r1.s2") a step of this round uses: a small dashed box, not selectable.
 * @param {GhostBox} ghost
 * @param {EdgePath[]} edges
 */
function renderGhost(ghost, edges) {
  const users = edges.filter((e) => e.ghost && e.source === ghost.id).map((e) => e.target);
  const match = /^r(\d+)\.(.+)$/.exec(ghost.id);
  const what = match ? `step ${match[2]} of round ${match[1]}` : `step ${ghost.id}, not in this round`;
  const label = `${ghost.id}: ${what}, used by ${users.join(", ")}`;
  return s("g", { class: "dagmagic-node-ghost", "data-ref": ghost.id, role: "img", "aria-label": label }, [
    s("title", {}, [label]),
    s("rect", {
      x: coord(ghost.x),
      y: coord(ghost.y),
      width: coord(ghost.w),
      height: coord(ghost.h),
      rx: 4,
      "stroke-dasharray": "3 3",
    }),
    s("text", { x: coord(ghost.x + ghost.w / 2), y: coord(ghost.y + ghost.h / 2 + 3.5), "text-anchor": "middle" }, [
      ghost.id,
    ]),
  ]);
}

/**
 * A step's box: id, status glyph, duration and tokens; the task on two lines (a tool step's on one, its call on
 * the next); model and tool badges (a tool step's "tool" badge instead of a model, unless an agent took over),
 * and a composite step's sub-DAG badge at the right; a "reused" badge first on a step a re-run carried over, an
 * "edited by you" one on a step whose result the user wrote.
 * @param {DagNode} node
 * @param {Box & {layer: number}} box
 * @param {number} now
 * @param {boolean} selected
 * @param {boolean} interactive
 */
function renderNode(node, box, now, selected, interactive) {
  const { x, y, w, h } = box;
  const chars = Math.max(Math.floor((w - 16) / CHAR), 4);

  const stats = nodeStats(node, now);
  const glyph = STATUS_GLYPH[node.status] ?? "?"; // its meaning in the box's title
  const head = shorten(`${glyph} ${node.id}`, Math.max(chars - stats.length - 1, 4));
  const toolStep = isToolStep(node);
  const tool = toolStep ? "" : toolLabel(node); // a tool step's call names its tool
  const edited = Boolean(node.edited); // its result is the user's: no model wrote it
  const model = edited || (toolStep && !fellBack(node)) ? "" : shortModel(node.model ?? node.model_hint);
  const call = toolStep ? callText(node, 24) : "";

  const subrun = node.subrun ?? null;
  const reused = node.reused_from ?? null; // carried over by a re-run: its result is round `reused`'s
  const status = subrun ? `${node.status}, sub-DAG ${subrun.status}` : node.status;
  const described =
    reused !== null ? `${status}, reused from round ${reused}` : edited ? `${status}, result edited by you` : status;
  const callNote = toolStep ? `, a direct call of ${toolName(node)}` : "";

  // two lines when the box has room for them above its badges (one for a tool step, its call under it)
  const lines = h >= 60 && !toolStep ? wrapLabel(node.task, w - 16, TASK_FONT) : [shorten(node.task, chars)];
  const task = s(
    "text",
    { class: "dagmagic-node-task", x: coord(x + 8), y: coord(y + 30) },
    lines.map((line, i) =>
      // a space ends every line but the last: the text's content is the task as shortened
      s("tspan", { x: coord(x + 8), dy: i ? 13 : null }, [i < lines.length - 1 ? `${line} ` : line]),
    ),
  );

  const title = `${node.id} (${glyph} ${described}): ${node.task}${toolStep ? `\n${callText(node, TITLE_VALUE)}` : ""}`;
  const children = [
    s("title", {}, [title]),
    s("rect", { class: "dagmagic-node-box", x: coord(x), y: coord(y), width: coord(w), height: coord(h), rx: 6 }),
    s("text", { class: "dagmagic-node-id", x: coord(x + 8), y: coord(y + 15) }, [head]),
    stats &&
      s("text", { class: "dagmagic-node-stats", x: coord(x + w - 8), y: coord(y + 15), "text-anchor": "end" }, [stats]),
    task,
    toolStep &&
      h >= 60 &&
      s("text", { class: "dagmagic-node-call", x: coord(x + 8), y: coord(y + 43) }, [
        shorten(call, Math.max(Math.floor((w - 16) / CALL_CHAR), 4)),
      ]),
  ];
  const top = y + h - 16;
  // a composite step's badge is always drawn, at the right, and so is the cost of other steps: the model and
  // tool badges make room for them (shortened, or left out)
  const subrunWidth = SUBRUN_LABEL.length * BADGE_CHAR + 8;
  const cost = num(node.cost);
  const price = cost === null || subrun ? "" : formatCost(cost);
  const priceWidth = price ? textWidth(price, COST_FONT) + 4 : 0;
  const room = x + w - 8 - (subrun ? subrunWidth + 4 : priceWidth);
  if (h >= 44) {
    let left = x + 8;
    for (const [kind, label] of /** @type {const} */ ([
      ["reused", reused === null ? "" : "reused"],
      ["edited", edited ? "edited by you" : ""],
      ["direct", toolStep ? "tool" : ""],
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
    if (price) {
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
  if (reused !== null) classes.push("dagmagic-node--reused");
  if (edited) classes.push("dagmagic-node--edited");
  return s(
    "g",
    {
      class: classes.join(" "),
      "data-step-id": node.id,
      "data-status": node.status,
      "data-layer": box.layer,
      "data-reused-from": reused,
      "data-edited": edited ? "true" : null,
      tabindex: interactive ? 0 : null,
      role: interactive ? "button" : "img",
      "aria-pressed": interactive ? (selected ? "true" : "false") : null,
      "aria-label": `Step ${node.id}, ${described}${callNote}: ${shorten(node.task, 80)}`,
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
  if (node.edited) return ""; // it did not run: no time, no tokens
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
