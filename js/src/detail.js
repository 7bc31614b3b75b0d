// The detail panel of one step: what it was asked, how it ran, what it called (a tool step: its one call, each
// argument as planned and the value it became; a composite step: the nested DAG it ran as) and what it produced. A result or observation that Python cut offers to show all of it.

import { copyButton } from "./copy.js";
import { h } from "./dom.js";
import { formatCost, formatDuration, formatInt, num, prettyJson } from "./format.js";
import { STATUS_GLYPH } from "./graph.js";
import { markdownFragment } from "./markdown.js";
import { messageBox } from "./message.js";
import { expandable } from "./more.js";
import { stepTimes } from "./state.js";
import { renderSubrun } from "./subrun.js";
import { fellBack, isToolStep, renderCall } from "./toolstep.js";

/** @typedef {import("./types.js").DagNode} DagNode */
/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").ToolCall} ToolCall */
/** @typedef {import("./dom.js").Child} Child */

/**
 * Why Python refused an action on the step, shown under the buttons that sent it: the re-run box's, the paused
 * step's, or Retry now's (in the status).
 * @typedef {{where: "rerun" | "whatif" | "paused" | "status", text: string}} StepError
 */

/**
 * What the user can do from the panel, and the view state that outlives its redraws.
 * @typedef {object} DetailActions
 * @property {boolean} rerun  offer to re-run the step, and a completed one to go on with its result edited (the run
 *   ended; the step is in its latest round)
 * @property {boolean} busy  an action on this step was sent: its buttons wait for the answer and the next state
 * @property {boolean} retrying  Retry now was sent: it waits likewise
 * @property {StepError | null} error  why Python refused the last action on the step
 * @property {(key: string) => string | undefined} draft  text the user typed and has not sent yet
 * @property {(key: string) => boolean | undefined} messageOpen  which of the paused step's messages are open
 * @property {(key: string) => boolean | undefined} subrunOpen  which sub-runs are open (by `subrunKey`)
 * @property {(key: string, cut: string) => string | undefined} fullText  the whole text fetched for a cut one (by
 *   `textKey`), while the step still shows that cut text
 * @property {(key: string) => boolean} loading  the whole text was asked for and has not come yet
 * @property {(key: string) => string | undefined} textError  why the whole text did not come
 */

/** @type {DetailActions} */
const NO_ACTIONS = {
  rerun: false,
  busy: false,
  retrying: false,
  error: null,
  draft: () => undefined,
  messageOpen: () => undefined,
  subrunOpen: () => undefined,
  fullText: () => undefined,
  loading: () => false,
  textError: () => undefined,
};

/** How Python ends a text it cut: "… (1234 more characters)". */
const CUT = /… \((\d+) more characters\)$/;

/**
 * How many characters Python cut off the end of `text` (null: it is whole).
 * @param {string | null | undefined} text
 * @returns {number | null}
 */
export function cutLength(text) {
  const match = text ? CUT.exec(text) : null;
  return match ? Number(match[1]) : null;
}

/**
 * What is left of a cut text without the note of what was cut (the start of the whole text).
 * @param {string} text
 */
export function uncut(text) {
  return text.replace(CUT, "");
}

/**
 * The key of a text that can be fetched whole: a step's result, or the observation of its tool call `call`
 * (its position in `tool_calls`).
 * @param {number} round
 * @param {string} step
 * @param {"result" | "observation"} field
 * @param {number | null} [call]
 */
export function textKey(round, step, field, call = null) {
  return JSON.stringify([round, step, field, field === "observation" ? call : null]);
}

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
 * @param {DetailActions} [actions]
 * @returns {HTMLElement}
 */
export function renderDetail(node, round, rounds, now, actions = NO_ACTIONS) {
  const { queue, run } = stepTimes(node, now);
  const toolStep = isToolStep(node);
  const rows = [
    field("Task", h("div", { class: "dagmagic-detail-task" }, [node.task])),
    toolStep && field("Tool call", h("div", { class: "dagmagic-toolstep" }, renderCall(node))),
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
            disabled: actions.retrying,
          },
          ["Retry now"],
        ),
      refusal(actions, "status"),
    ]),
    node.error && errorField(node),
    node.warnings.length > 0 &&
      field(
        "Note",
        node.warnings.map((w, i) =>
          h("div", { class: "dagmagic-detail-warning" }, [
            expandable(w, JSON.stringify(["note", round.index, node.id, i]), actions.messageOpen),
          ]),
        ),
      ),
    field(
      "Model",
      node.edited
        ? `none: the ${EDITED}`
        : (node.model ?? (toolStep && !fellBack(node) ? "none (a direct tool call)" : "—")),
    ),
    (node.model_hint || node.tool_hint) &&
      field(
        "Hints",
        [node.model_hint && `model: ${node.model_hint}`, node.tool_hint && `tool: ${node.tool_hint}`]
          .filter(Boolean)
          .join(" · "),
      ),
    field(
      "Timings",
      node.edited
        ? "none: the step did not run, its result is yours"
        : `queued ${formatDuration(queue)} · ran ${formatDuration(run)}${node.status === "running" ? " (running)" : ""}`,
    ),
    field(
      "Usage",
      node.edited
        ? "none: no model call"
        : `${tokens(node.input_tokens)} in · ${tokens(node.output_tokens)} out tokens · ${formatCost(node.cost)}`,
    ),
  ];
  const calls = node.tool_calls.map((call, i) => toolCall(call, i, node, round, actions));
  const resultKey = textKey(round.index, node.id, "result");
  const result = node.result ? (actions.fullText(resultKey, node.result) ?? node.result) : node.result;
  return h("section", { class: "dagmagic-detail", "data-step-id": node.id, "aria-label": `Step ${node.id} detail` }, [
    h("header", { class: "dagmagic-detail-head" }, [
      h("span", { class: "dagmagic-detail-title" }, [`Step ${node.id}`]),
      h("span", { class: "dagmagic-pill", "data-status": node.status }, [
        `${STATUS_GLYPH[node.status] ?? ""} ${node.status}`,
      ]),
      node.edited && h("span", { class: "dagmagic-pill dagmagic-edited-pill" }, [EDITED]),
      h(
        "button",
        { type: "button", class: "dagmagic-detail-close", title: "Close", "aria-label": "Close the step detail" },
        ["×"],
      ),
    ]),
    node.status === "paused" && pausedSection(node, round, actions),
    h("dl", { class: "dagmagic-detail-fields" }, rows.flat()),
    actions.rerun && rerunSection(node, round, actions),
    calls.length > 0 &&
      h("div", { class: "dagmagic-detail-tools" }, [h("h4", {}, [`Tool calls (${calls.length})`]), ...calls]),
    node.subrun && renderSubrun(node.subrun, [round.index, node.id], now, actions.subrunOpen),
    h("div", { class: "dagmagic-detail-result-wrap" }, [
      h("div", { class: "dagmagic-detail-result-head" }, [
        h("h4", {}, [node.edited ? "Result (edited by you)" : "Result"]),
        result && copyButton(`the result of step ${node.id}`, { "data-copy": "result" }),
      ]),
      result
        ? h("div", { class: "dagmagic-detail-result dagmagic-markdown" }, [markdownFragment(result)])
        : h("div", { class: "dagmagic-muted dagmagic-detail-no-result" }, [noResult(node)]),
      expandButton(result, "result", null, resultKey, actions),
    ]),
    actions.rerun && node.status === "completed" && whatIfSection(node, round, result ?? "", actions),
  ]);
}

/** What the views say of a step whose result the user wrote. */
export const EDITED = "result edited by you";

/**
 * "What if this step had said…": an editable copy of a completed step's result, and a button that continues the
 * ended run with it (the steps that depend on it run again, in a new round; the others are kept).
 * @param {DagNode} node
 * @param {Round} round
 * @param {string} result  as the detail shows it (whole, if fetched)
 * @param {DetailActions} actions
 */
function whatIfSection(node, round, result, actions) {
  const key = draftKey("whatif", round.index, node.id);
  const cut = cutLength(result) !== null; // Python cut it and the whole has not been fetched: edit what is shown
  const text = actions.draft(key) ?? (cut ? uncut(result) : result);
  return h("div", { class: "dagmagic-whatif-box" }, [
    h("h4", {}, [`What if ${node.id} had said…`]),
    h("div", { class: "dagmagic-muted dagmagic-whatif-hint" }, [
      "Edit the result, then continue: the steps that use it run again with your text, the others are kept.",
      cut ? " The result above is cut: Show all loads the whole of it first." : "",
    ]),
    h(
      "textarea",
      {
        class: "dagmagic-task-input dagmagic-whatif-result",
        "data-draft": key,
        rows: 4,
        "aria-label": `Result to continue step ${node.id} with`,
      },
      [text],
    ),
    h("div", { class: "dagmagic-actions" }, [
      h(
        "button",
        {
          type: "button",
          class: "dagmagic-button dagmagic-whatif",
          title:
            "Continue the run as if this step had given the text above: the steps after it run again in a new round",
          disabled: actions.busy || !text.trim(),
        },
        ["Continue with this result"],
      ),
    ]),
    refusal(actions, "whatif"),
  ]);
}

/**
 * The key of a draft (a task typed and not sent yet): the textarea carries it as `data-draft`.
 * @param {"rerun" | "whatif" | "paused"} kind
 * @param {number} round
 * @param {string} step
 */
export function draftKey(kind, round, step) {
  return JSON.stringify([kind, round, step]);
}

/**
 * The key of one of a paused step's messages (whether it is open): its `<details>` carries it as `data-open-key`.
 * @param {number} round
 * @param {string} step
 * @param {number} index
 */
export function messageKey(round, step, index) {
  return JSON.stringify([round, step, index]);
}

/**
 * A task the user can edit before sending an action, prefilled with the step's (or what they typed before).
 * @param {string} cls
 * @param {string} key
 * @param {DagNode} node
 * @param {DetailActions} actions
 * @param {string} label
 */
function taskEditor(cls, key, node, actions, label) {
  const text = actions.draft(key) ?? node.task;
  return h("textarea", { class: `dagmagic-task-input ${cls}`, "data-draft": key, rows: 3, "aria-label": label }, [
    text,
  ]);
}

/**
 * A paused step, stopped at a breakpoint: the messages it is about to send, its tools, and what to do next.
 * @param {DagNode} node
 * @param {Round} round
 * @param {DetailActions} actions
 */
function pausedSection(node, round, actions) {
  const messages = node.paused_messages;
  const last = (messages?.length ?? 0) - 1;
  const key = draftKey("paused", round.index, node.id);
  const empty = !(actions.draft(key) ?? node.task).trim();
  /**
   * @param {string} cls
   * @param {string} label
   * @param {string} title
   * @param {boolean} needsTask
   */
  const button = (cls, label, title, needsTask) =>
    h(
      "button",
      { type: "button", class: `dagmagic-button ${cls}`, title, disabled: actions.busy || (needsTask && empty) },
      [label],
    );
  return h("div", { class: "dagmagic-paused", "aria-label": `Step ${node.id} is paused before it runs` }, [
    h("h4", {}, ["About to send"]),
    messages === null && h("div", { class: "dagmagic-muted" }, ["The messages are not available."]),
    ...(messages ?? []).map((message, i) => {
      const open = actions.messageOpen(messageKey(round.index, node.id, i)) ?? i === last;
      return h(
        "details",
        {
          class: "dagmagic-paused-message",
          "data-role": message.role,
          "data-open-key": messageKey(round.index, node.id, i),
          open,
        },
        [
          h("summary", {}, [
            h("span", { class: "dagmagic-paused-role" }, [message.role || "message"]),
            h("span", { class: "dagmagic-muted" }, [` · ${formatInt(message.content.length)} characters`]),
          ]),
          h("div", { class: "dagmagic-paused-message-tools" }, [
            copyButton(`this ${message.role || "message"} message`, { "data-copy": "message", "data-index": i }),
          ]),
          h("pre", { class: "dagmagic-paused-content" }, [message.content]),
        ],
      );
    }),
    h("div", { class: "dagmagic-paused-tools-row" }, [
      h("span", { class: "dagmagic-label" }, ["tools offered "]),
      h("span", { class: "dagmagic-paused-tools" }, [
        node.paused_tools.length ? node.paused_tools.join(", ") : "no tools",
      ]),
    ]),
    h("div", { class: "dagmagic-label" }, ["task (edit it before it runs)"]),
    taskEditor("dagmagic-paused-task", key, node, actions, `Task of step ${node.id}`),
    h("div", { class: "dagmagic-actions" }, [
      button("dagmagic-continue", "Continue", "Run this step; the run goes on to the next breakpoint", true),
      button("dagmagic-step", "Step", "Run this step, then pause before the next one", true),
      button("dagmagic-skip", "Skip", "Do not run this step (the steps that need it are skipped too)", false),
    ]),
    refusal(actions, "paused"),
  ]);
}

/**
 * Re-run the step of an ended run, perhaps with an edited task: a new round compares with this one.
 * @param {DagNode} node
 * @param {Round} round
 * @param {DetailActions} actions
 */
function rerunSection(node, round, actions) {
  const key = draftKey("rerun", round.index, node.id);
  const empty = !(actions.draft(key) ?? node.task).trim();
  return h("div", { class: "dagmagic-rerun-box" }, [
    h("h4", {}, ["Re-run"]),
    taskEditor("dagmagic-rerun-task", key, node, actions, `Task to re-run step ${node.id} with`),
    h("div", { class: "dagmagic-actions" }, [
      h(
        "button",
        {
          type: "button",
          class: "dagmagic-button dagmagic-rerun",
          title:
            "Run this step and the steps after it again, with the task above, in a new round that keeps the other results",
          disabled: actions.busy || empty,
        },
        ["Re-run this step"],
      ),
    ]),
    refusal(actions, "rerun"),
  ]);
}

/** @param {unknown} n */
const tokens = (n) => formatInt(num(n) ?? 0);

/** Why a step that has not ended has no result yet, by its status. */
const NOT_YET = /** @type {Record<string, string>} */ ({
  pending: "the step has not run.",
  queued: "the step waits for a free slot.",
  paused: "the step is paused before it runs.",
  running: "the step is running.",
  retrying: "the step waits to be tried again.",
});

/** What happened to a step that ended without a result. */
const ENDED = /** @type {Record<string, string>} */ ({
  failed: "failed",
  skipped: "was skipped",
  cancelled: "was cancelled",
});

/** The longest reason the Result section repeats (the whole error is in its field above). */
const REASON_CHARS = 200;

/**
 * Why a step shows no result: its error, why it was skipped or cancelled, or that it has not run (yet).
 * @param {DagNode} node
 */
export function noResult(node) {
  if (node.status === "completed") return "(empty)";
  const ended = ENDED[node.status];
  if (!ended) return `No result yet: ${NOT_YET[node.status] ?? "the step has not finished."}`;
  const line = String(node.error ?? "")
    .split("\n")[0]
    .trim();
  // the engine's reasons begin "Skipped — …" or "Cancelled before…": said once, not "was skipped — Skipped — …"
  const reason = line.replace(/^(?:skipped|cancelled)\b\s*(?:[—–:-]\s*)?/i, "");
  if (!reason) return `No result: the step ${ended}.`;
  const short = reason.length > REASON_CHARS ? `${reason.slice(0, REASON_CHARS - 1)}…` : reason;
  const joined = reason !== line && /^(by|before|after|because)\b/.test(short) ? ` ${short}` : ` — ${short}`;
  return `No result: the step ${ended}${joined}${node.status === "failed" || /[.!?…]$/.test(short) ? "" : "."}`;
}

/**
 * @param {string} label
 * @param {Child | Child[]} value
 * @returns {HTMLElement[]}
 */
function field(label, value) {
  return [h("dt", {}, [label]), h("dd", {}, Array.isArray(value) ? value : [value])];
}

/** Why a step has no result, when it did not fail: the reason in neutral words, not as an error. */
const WHY = /** @type {Record<string, string>} */ ({ skipped: "Why skipped", cancelled: "Why cancelled" });

/**
 * A failed step's error (in red), or why a step was skipped or cancelled, or the last error of a step that
 * has not failed (yet).
 * @param {DagNode} node
 */
function errorField(node) {
  if (node.status === "failed") {
    return field("Error", h("pre", { class: "dagmagic-detail-error" }, [String(node.error)]));
  }
  return field(WHY[node.status] ?? "Last error", [
    h("pre", { class: "dagmagic-detail-reason", "data-status": node.status }, [String(node.error)]),
  ]);
}

/**
 * Why Python refused the step's last action, if it was sent from `where`.
 * @param {DetailActions} actions
 * @param {StepError["where"]} where
 */
function refusal(actions, where) {
  return actions.error?.where === where ? messageBox(actions.error.text, { "data-dismiss": "step" }) : null;
}

/**
 * "Show all" under a text Python cut: asks for the whole text (step-actions.js sends it); why it did not come.
 * @param {string | null | undefined} text  as shown
 * @param {"result" | "observation"} name
 * @param {number | null} call  an observation's tool call
 * @param {string} key  its `textKey`
 * @param {DetailActions} actions
 */
function expandButton(text, name, call, key, actions) {
  const more = cutLength(text);
  if (more === null) return null;
  const loading = actions.loading(key);
  const error = actions.textError(key);
  const button = h(
    "button",
    {
      type: "button",
      class: "dagmagic-button dagmagic-expand",
      "data-field": name,
      "data-call": call,
      title: `Show the whole ${name}: ${formatInt(more)} more characters`,
      "aria-busy": loading ? "true" : null,
      disabled: loading,
    },
    [loading ? "Loading…" : "Show all"],
  );
  if (!error) return button;
  const both = document.createDocumentFragment();
  both.append(button, messageBox(error, { "data-dismiss": key }));
  return both;
}

/** @param {DagNode} node */
function statusLine(node) {
  if (node.edited) return `${node.status} · ${EDITED}`;
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
 * @param {number} i  its position in the step's `tool_calls`
 * @param {DagNode} node
 * @param {Round} round
 * @param {DetailActions} actions
 */
function toolCall(call, i, node, round, actions) {
  const duration = num(call?.duration);
  const key = textKey(round.index, node.id, "observation", i);
  const cut = String(call?.observation ?? "");
  const observation = actions.fullText(key, cut) ?? cut;
  return h("div", { class: "dagmagic-toolcall", "data-tool": String(call?.name ?? "") }, [
    h("div", { class: "dagmagic-toolcall-head" }, [
      h("span", { class: "dagmagic-toolcall-name" }, [`${i + 1}. ${call?.name ?? "?"}`]),
      duration !== null && h("span", { class: "dagmagic-muted" }, [` ${formatDuration(duration)}`]),
    ]),
    h("div", { class: "dagmagic-label" }, ["arguments"]),
    h("pre", { class: "dagmagic-toolcall-args" }, [prettyJson(call?.arguments ?? {})]),
    call?.error && h("pre", { class: "dagmagic-toolcall-error" }, [String(call.error)]),
    h("div", { class: "dagmagic-label" }, ["observation"]),
    h("pre", { class: "dagmagic-toolcall-obs" }, [observation]),
    expandButton(observation, "observation", i, key, actions),
  ]);
}
