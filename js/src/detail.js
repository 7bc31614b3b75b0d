// The detail panel of one step: what it was asked, how it ran, what it called and what it produced.

import { h } from "./dom.js";
import { formatCost, formatDuration, formatInt, num, prettyJson } from "./format.js";
import { STATUS_GLYPH } from "./graph.js";
import { markdownFragment } from "./markdown.js";
import { stepTimes } from "./state.js";

/** @typedef {import("./types.js").DagNode} DagNode */
/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").ToolCall} ToolCall */
/** @typedef {import("./dom.js").Child} Child */

/**
 * Where a dependency lives: "s2" is in this round, "r1.s2" is step s2 of round 1.
 * @param {string} dep
 * @param {number} roundIndex
 * @returns {{round: number, step: string}}
 */
export function resolveDependency(dep, roundIndex) {
  const match = /^r(\d+)\.(.+)$/.exec(dep);
  return match ? { round: Number(match[1]), step: match[2] } : { round: roundIndex, step: dep };
}

/**
 * @param {DagNode} node
 * @param {Round} round
 * @param {Round[]} rounds  all rounds, to make dependencies on earlier rounds clickable
 * @param {number} now
 * @returns {HTMLElement}
 */
export function renderDetail(node, round, rounds, now) {
  const { queue, run } = stepTimes(node, now);
  const rows = [
    field("Task", h("div", { class: "dagmagic-detail-task" }, [node.task])),
    field("Dependencies", dependencies(node, round, rounds)),
    field("Status", [
      statusLine(node),
      node.status === "retrying" &&
        h(
          "button",
          {
            type: "button",
            class: "dagmagic-button dagmagic-retry-now",
            title: "Try this step again now instead of waiting",
          },
          ["Retry now"],
        ),
    ]),
    node.error && field("Error", h("pre", { class: "dagmagic-detail-error" }, [node.error])),
    node.warnings.length > 0 &&
      field(
        "Note",
        node.warnings.map((w) => h("div", { class: "dagmagic-detail-warning" }, [w])),
      ),
    field("Model", node.model ?? "—"),
    (node.model_hint || node.tool_hint) &&
      field(
        "Hints",
        [node.model_hint && `model: ${node.model_hint}`, node.tool_hint && `tool: ${node.tool_hint}`]
          .filter(Boolean)
          .join(" · "),
      ),
    field(
      "Timings",
      `queued ${formatDuration(queue)} · ran ${formatDuration(run)}${node.status === "running" ? " (running)" : ""}`,
    ),
    field(
      "Usage",
      `${tokens(node.input_tokens)} in · ${tokens(node.output_tokens)} out tokens · ${formatCost(node.cost)}`,
    ),
  ];
  const calls = node.tool_calls.map((call, i) => toolCall(call, i));
  return h("section", { class: "dagmagic-detail", "data-step-id": node.id, "aria-label": `Step ${node.id} detail` }, [
    h("header", { class: "dagmagic-detail-head" }, [
      h("span", { class: "dagmagic-detail-title" }, [`Step ${node.id}`]),
      h("span", { class: "dagmagic-pill", "data-status": node.status }, [
        `${STATUS_GLYPH[node.status] ?? ""} ${node.status}`,
      ]),
      h(
        "button",
        { type: "button", class: "dagmagic-detail-close", title: "Close", "aria-label": "Close the step detail" },
        ["×"],
      ),
    ]),
    h("dl", { class: "dagmagic-detail-fields" }, rows.flat()),
    calls.length > 0 &&
      h("div", { class: "dagmagic-detail-tools" }, [h("h4", {}, [`Tool calls (${calls.length})`]), ...calls]),
    h("div", { class: "dagmagic-detail-result-wrap" }, [
      h("h4", {}, ["Result"]),
      node.result
        ? h("div", { class: "dagmagic-detail-result dagmagic-markdown" }, [markdownFragment(node.result)])
        : h("div", { class: "dagmagic-muted" }, [node.status === "completed" ? "(empty)" : "No result yet."]),
    ]),
  ]);
}

/** @param {unknown} n */
const tokens = (n) => formatInt(num(n) ?? 0);

/**
 * @param {string} label
 * @param {Child | Child[]} value
 * @returns {HTMLElement[]}
 */
function field(label, value) {
  return [h("dt", {}, [label]), h("dd", {}, Array.isArray(value) ? value : [value])];
}

/** @param {DagNode} node */
function statusLine(node) {
  const attempts = node.attempts > 1 ? ` · ${node.attempts} attempts` : node.attempts === 1 ? " · 1 attempt" : "";
  // a wall-clock time stays true between kernel messages, where a countdown would freeze
  const retryAt = node.status === "retrying" && typeof node.retry_at === "number" ? node.retry_at : null;
  const next = retryAt === null ? "" : ` · tries again at ${new Date(retryAt * 1000).toLocaleTimeString()}`;
  return `${node.status}${attempts}${next}`;
}

/**
 * @param {DagNode} node
 * @param {Round} round
 * @param {Round[]} rounds
 * @returns {Child[]}
 */
function dependencies(node, round, rounds) {
  if (!node.dependencies.length) return ["none"];
  return node.dependencies.map((dep) => {
    const target = resolveDependency(dep, round.index);
    const exists = rounds.some((r) => r.index === target.round && r.nodes.some((n) => n.id === target.step));
    if (!exists) return h("span", { class: "dagmagic-dep" }, [dep]);
    return h(
      "button",
      {
        type: "button",
        class: "dagmagic-dep",
        "data-goto-round": target.round,
        "data-goto-step": target.step,
        title:
          target.round === round.index
            ? `Show step ${target.step}`
            : `Show step ${target.step} of round ${target.round}`,
      },
      [dep],
    );
  });
}

/**
 * @param {ToolCall} call
 * @param {number} i
 */
function toolCall(call, i) {
  const duration = num(call?.duration);
  return h("div", { class: "dagmagic-toolcall", "data-tool": String(call?.name ?? "") }, [
    h("div", { class: "dagmagic-toolcall-head" }, [
      h("span", { class: "dagmagic-toolcall-name" }, [`${i + 1}. ${call?.name ?? "?"}`]),
      duration !== null && h("span", { class: "dagmagic-muted" }, [` ${formatDuration(duration)}`]),
    ]),
    h("div", { class: "dagmagic-label" }, ["arguments"]),
    h("pre", { class: "dagmagic-toolcall-args" }, [prettyJson(call?.arguments ?? {})]),
    call?.error && h("pre", { class: "dagmagic-toolcall-error" }, [String(call.error)]),
    h("div", { class: "dagmagic-label" }, ["observation"]),
    h("pre", { class: "dagmagic-toolcall-obs" }, [String(call?.observation ?? "")]),
  ]);
}
