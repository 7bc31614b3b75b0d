// A tool step: one direct call of its tool, no LLM (the planner gave its arguments, `tool_args`). Its call reads
// `add(a=$s1 → 68.4, b=12)`: the arguments as planned, so a reference to another step's result stays visible,
// and once the executor called the tool (its turn-0 tool call), the value each changed argument became. Python's
// static views and `%dag trace` write the same form (dagmagic/notebook/tool_steps.py). Everything is text.

import { h } from "./dom.js";
import { shorten } from "./format.js";

/** @typedef {import("./types.js").DagNode} DagNode */
/** @typedef {import("./types.js").ToolCall} ToolCall */

/** An argument that is one step's result as a whole ("$s1", "$r1.s2"): shown bare, its value as the text it is. */
const WHOLE_REFERENCE = /^\$(?:r\d+\.)?[A-Za-z_][\w.-]*$/;

/**
 * @typedef {object} CallArgument
 * @property {string} name
 * @property {string | null} planned  as the planner wrote it (null: the tool got an argument nobody planned)
 * @property {string | null} value  what it became, when that differs from what was planned
 */

/**
 * Whether the planner made the step one direct call of its tool (older states have no `tool_args`).
 * @param {DagNode} node
 */
export function isToolStep(node) {
  return node.tool_args !== null && typeof node.tool_args === "object" && !Array.isArray(node.tool_args);
}

/**
 * The executor's own call of the tool (turn 0), once it was made.
 * @param {DagNode} node
 * @returns {ToolCall | null}
 */
export function directCall(node) {
  return (Array.isArray(node.tool_calls) ? node.tool_calls : []).find((call) => call?.turn === 0) ?? null;
}

/**
 * Whether the direct call failed, so an agent ran the step instead.
 * @param {DagNode} node
 */
export function fellBack(node) {
  return Boolean(directCall(node)?.error);
}

/**
 * The tool the step calls: the one called, else the planner's hint.
 * @param {DagNode} node
 */
export function toolName(node) {
  return String(directCall(node)?.name ?? node.tool_hint ?? "?");
}

/**
 * A value as the call shows it: a whole reference bare, anything else as JSON.
 * @param {unknown} value
 */
function shown(value) {
  if (typeof value === "string" && WHOLE_REFERENCE.test(value)) return value;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * The step's arguments, each as planned and what it became (uncut).
 * @param {DagNode} node
 * @returns {CallArgument[]}
 */
export function callArguments(node) {
  const planned = /** @type {Record<string, unknown>} */ (node.tool_args ?? {});
  const args = directCall(node)?.arguments;
  const called = /** @type {Record<string, unknown>} */ (args && typeof args === "object" ? args : {});
  const has = (/** @type {object} */ o, /** @type {string} */ k) => Object.prototype.hasOwnProperty.call(o, k);
  /** @type {CallArgument[]} */
  const out = [];
  for (const name of Object.keys(planned)) {
    const before = planned[name];
    let value = null;
    if (has(called, name) && JSON.stringify(called[name]) !== JSON.stringify(before)) {
      const after = called[name];
      const whole = typeof before === "string" && WHOLE_REFERENCE.test(before) && typeof after === "string";
      value = whole ? after : shown(after);
    }
    out.push({ name, planned: shown(before), value });
  }
  for (const name of Object.keys(called)) {
    if (!has(planned, name)) out.push({ name, planned: null, value: shown(called[name]) });
  }
  return out;
}

/**
 * The call as one line, `tool(name=planned → value, …)`, each value cut to `chars`.
 * @param {DagNode} node
 * @param {number} chars
 */
export function callText(node, chars) {
  const parts = callArguments(node).map(({ name, planned, value }) => {
    if (planned === null) return `${name}=${shorten(value, chars)}`;
    return value === null
      ? `${name}=${shorten(planned, chars)}`
      : `${name}=${shorten(planned, chars)} → ${shorten(value, chars)}`;
  });
  return `${toolName(node)}(${parts.join(", ")})`;
}

/** What the arrow between an argument as planned and its value means: its tooltip. */
const BECAME = "became: the value the tool was called with, once the step it names had run";

/** How long a value may be in the detail's call before it is cut (the whole is its title). */
const DETAIL_VALUE = 80;

/**
 * The call in the step's detail: each argument a span of its own (`data-arg`), the value it became cut with the
 * whole of it as its title; under it, how the step ran.
 * @param {DagNode} node
 */
export function renderCall(node) {
  /** @type {(string | HTMLElement)[]} */
  const parts = [`${toolName(node)}(`];
  callArguments(node).forEach(({ name, planned, value }, i) => {
    if (i) parts.push(", ");
    parts.push(
      h("span", { class: "dagmagic-toolstep-arg", "data-arg": name }, [
        `${name}=`,
        planned !== null &&
          h("span", { class: "dagmagic-toolstep-planned", title: planned.length > DETAIL_VALUE ? planned : null }, [
            shorten(planned, DETAIL_VALUE),
          ]),
        planned !== null && value !== null && h("span", { class: "dagmagic-toolstep-became", title: BECAME }, [" → "]),
        value !== null && h("span", { class: "dagmagic-toolstep-value", title: value }, [shorten(value, DETAIL_VALUE)]),
      ]),
    );
  });
  parts.push(")");
  return [
    h("code", { class: "dagmagic-toolstep-call", "data-tool": toolName(node) }, parts),
    h("div", { class: "dagmagic-toolstep-how dagmagic-muted" }, [howItRan(node)]),
  ];
}

/**
 * @param {DagNode} node
 */
function howItRan(node) {
  const call = directCall(node);
  if (!call) return "To be called directly, with its dependencies' results: no LLM call.";
  if (call.error) return `The direct call failed (${call.error}), so an agent ran the step.`;
  return "Called directly: no LLM call.";
}
