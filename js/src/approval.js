// A plan waiting for the user's approval: its steps, editable (task, dependencies, hints; steps added or
// removed), then Approve, or Reject with feedback for the planner. The panel keeps its DOM while the same round
// waits, so what the user types survives the state syncs; another round waiting starts a fresh draft. Python's
// refusal of an approval or a rejection shows in the panel, and its buttons work again. A tool step keeps its
// arguments (not edited here) unless its tool hint is changed: then an agent runs it.

import { h } from "./dom.js";
import { createMessage } from "./message.js";

/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").PlanStep} PlanStep */

/**
 * @param {{signal: AbortSignal, requests: import("./requests.js").Requests}} options
 */
export function createApproval({ signal, requests }) {
  const steps = h("div", { class: "dagmagic-approval-steps" });
  const add = h("button", { type: "button", class: "dagmagic-button dagmagic-approval-add" }, ["Add step"]);
  const approve = h(
    "button",
    { type: "button", class: "dagmagic-button dagmagic-approve", title: "Run this plan, with your edits" },
    ["Approve"],
  );
  const note = h("span", { class: "dagmagic-approval-note", role: "status" });
  const feedback = h("textarea", {
    class: "dagmagic-task-input dagmagic-reject-feedback",
    rows: 2,
    placeholder: "Or say what is wrong with it: the planner plans again with your feedback",
    "aria-label": "Why the plan is rejected",
  });
  const reject = h(
    "button",
    { type: "button", class: "dagmagic-button dagmagic-reject", title: "Drop this plan and plan again" },
    ["Reject and replan"],
  );
  const message = createMessage(signal);
  const el = h("section", { class: "dagmagic-approval", "aria-label": "Plan approval", hidden: true }, [
    h("h3", { class: "dagmagic-section-title" }, ["This plan waits for your approval"]),
    h(
      "div",
      { class: "dagmagic-approval-row dagmagic-approval-head", "aria-hidden": "true" },
      ["id", "task", "depends on (ids, comma-separated)", "tool hint", "model hint", ""].map((label) =>
        h("span", { class: "dagmagic-label" }, [label]),
      ),
    ),
    steps,
    h("div", { class: "dagmagic-actions" }, [add, approve, note]),
    message.el, // under Approve, above Reject: beside the buttons whose refusal it says
    h("div", { class: "dagmagic-approval-reject" }, [feedback, reject]),
  ]);

  /** @type {{round: number, original: PlanStep[]} | null} the round waiting, and its plan as Python sent it */
  let draft = null;
  /** @type {Traits | null} */
  let last = null;
  /** An approval or a rejection sent waits for Python's answer, then for the state to change. */
  const busy = () => requests.busy("approval");

  /**
   * @param {string} name
   * @param {Record<string, unknown>} msg
   */
  function decide(name, msg) {
    const sent = approvalState(last);
    message.clear();
    requests
      .request(name, msg, { key: "approval", until: () => approvalState(last) !== sent })
      .catch((/** @type {Error} */ error) => message.show(error.message))
      .finally(sync);
  }

  /** The plan as edited, in the form `approve` sends it. */
  function collect() {
    return [...steps.querySelectorAll(".dagmagic-approval-step")].map((row) => {
      /** @param {string} cls */
      const value = (cls) => /** @type {HTMLInputElement | null} */ (row.querySelector(cls))?.value ?? "";
      const step = planStep(
        value(".dagmagic-approval-id"),
        value(".dagmagic-approval-task"),
        value(".dagmagic-approval-deps").split(","),
        value(".dagmagic-approval-tool"),
        value(".dagmagic-approval-model"),
      );
      const planned = row.hasAttribute("data-added")
        ? undefined
        : draft?.original.find((original) => original.id === step.id);
      if (planned?.tool_args && planned.tool_hint === step.tool_hint) step.tool_args = planned.tool_args;
      return step;
    });
  }

  function edited() {
    return draft !== null && JSON.stringify(collect()) !== JSON.stringify(draft.original);
  }

  function sync() {
    const changed = edited();
    const problem = changed ? planProblem(collect()) : null;
    note.textContent = problem ?? (changed ? "Edited: Approve runs your version." : "");
    note.toggleAttribute("data-problem", problem !== null);
    approve.disabled = busy() || problem !== null;
    reject.disabled = busy() || !feedback.value.trim();
  }

  /**
   * @param {Round} round
   * @param {PlanStep[]} original
   */
  function reset(round, original) {
    draft = { round: round.index, original };
    steps.replaceChildren(...original.map((step) => stepRow(step, false)));
  }

  function addStep() {
    if (!draft) return;
    const ids = [...draft.original, ...collect()].map((step) => step.id);
    const n = Math.max(0, ...ids.map((id) => Number(/^s(\d+)$/.exec(id)?.[1] ?? 0))) + 1;
    const row = stepRow(planStep(`s${n}`, "", [], "", ""), true);
    steps.append(row);
    row.querySelector("textarea")?.focus();
  }

  el.addEventListener(
    "click",
    (event) => {
      const target = /** @type {Element} */ (event.target);
      if (!last || !draft) return;
      if (target.closest(".dagmagic-approval-add")) {
        addStep();
      } else if (target.closest(".dagmagic-approval-remove")) {
        target.closest(".dagmagic-approval-step")?.remove();
      } else if (target.closest(".dagmagic-approve") && !approve.disabled) {
        decide("approve", { plan: edited() ? { steps: collect() } : null });
      } else if (target.closest(".dagmagic-reject") && !reject.disabled) {
        decide("reject", { feedback: feedback.value.trim() });
      } else {
        return;
      }
      sync();
    },
    { signal },
  );
  el.addEventListener(
    "input",
    (event) => {
      const target = /** @type {Element} */ (event.target);
      const row = target.closest(".dagmagic-approval-step[data-added]");
      if (row && target.classList.contains("dagmagic-approval-id")) {
        row.setAttribute("data-step-id", /** @type {HTMLInputElement} */ (target).value.trim());
      }
      sync();
    },
    { signal },
  );

  /** @param {Traits} state */
  function update(state) {
    last = state;
    const round = state.rounds[state.rounds.length - 1];
    const asks = state.status === "running" && state.phase === "awaiting_approval";
    const waiting = asks && round?.approval === "pending" ? round : null;
    if (!waiting) {
      el.hidden = true;
      if (draft) {
        draft = null;
        steps.replaceChildren();
        feedback.value = "";
        message.clear();
      }
      return;
    }
    const original = planOf(waiting);
    if (!draft || draft.round !== waiting.index) {
      reset(waiting, original);
      feedback.value = "";
      message.clear();
    } else if (JSON.stringify(original) !== JSON.stringify(draft.original) && !edited()) {
      reset(waiting, original); // Python changed the plan before the user did
    }
    el.hidden = false;
    sync();
  }

  return { el, update };
}

/**
 * A step as `approve` sends it: trimmed; dependencies without empties; an empty hint is none.
 * @param {string} id
 * @param {string} task
 * @param {string[]} dependencies
 * @param {string | null} toolHint
 * @param {string | null} modelHint
 * @returns {PlanStep}
 */
function planStep(id, task, dependencies, toolHint, modelHint) {
  return {
    id: id.trim(),
    task: task.trim(),
    dependencies: dependencies.map((dep) => dep.trim()).filter(Boolean),
    tool_hint: toolHint?.trim() || null,
    model_hint: modelHint?.trim() || null,
  };
}

/**
 * The plan of a round, the way the panel edits it.
 * @param {Round} round
 * @returns {PlanStep[]}
 */
function planOf(round) {
  return round.nodes.map((n) => {
    const step = planStep(n.id, n.task, n.dependencies, n.tool_hint, n.model_hint);
    if (n.tool_args) step.tool_args = n.tool_args;
    return step;
  });
}

/**
 * What decides whether an approval or a rejection took effect: the run, its phase and the round waiting.
 * @param {Traits | null} state
 */
function approvalState(state) {
  if (!state) return "";
  return JSON.stringify([state.status, state.phase, state.rounds.length, state.rounds[state.rounds.length - 1]]);
}

/**
 * Why an edited plan cannot be approved as it is, or null.
 * @param {PlanStep[]} plan
 * @returns {string | null}
 */
function planProblem(plan) {
  if (!plan.length) return "The plan has no steps: add one, or reject the plan.";
  /** @type {Set<string>} */
  const ids = new Set();
  for (const step of plan) {
    if (!step.id) return "Every step needs an id.";
    if (ids.has(step.id)) return `Two steps are called ${step.id}.`;
    ids.add(step.id);
  }
  for (const step of plan) {
    if (!step.task) return `Step ${step.id} has no task.`;
    for (const dep of step.dependencies) {
      if (dep === step.id) return `Step ${step.id} depends on itself.`;
      // "r1.s2" is a step of an earlier round
      if (!ids.has(dep) && !/^r\d+\./.test(dep)) return `Step ${step.id} depends on ${dep}, which is not in the plan.`;
    }
  }
  return null;
}

/**
 * One step's row: an existing step keeps its id; an added one is named by the user.
 * @param {PlanStep} step
 * @param {boolean} added
 */
function stepRow(step, added) {
  const name = added ? "the new step" : `step ${step.id}`;
  /**
   * @param {string} cls
   * @param {string} value
   * @param {string} label
   * @param {string} placeholder
   */
  const input = (cls, value, label, placeholder) =>
    h("input", { type: "text", class: cls, value, placeholder, "aria-label": label, spellcheck: "false" });
  const id = input("dagmagic-approval-id", step.id, added ? "Id of the new step" : "Step id", "id");
  id.readOnly = !added;
  return h(
    "div",
    { class: "dagmagic-approval-row dagmagic-approval-step", "data-step-id": step.id, "data-added": added || null },
    [
      id,
      h(
        "textarea",
        {
          class: "dagmagic-task-input dagmagic-approval-task",
          rows: 2,
          "aria-label": `Task of ${name}`,
          placeholder: "what this step does",
        },
        [step.task],
      ),
      input(
        "dagmagic-approval-deps",
        step.dependencies.join(", "),
        `Dependencies of ${name} (step ids, comma-separated)`,
        "none",
      ),
      input("dagmagic-approval-tool", step.tool_hint ?? "", `Tool hint of ${name}`, "none"),
      input("dagmagic-approval-model", step.model_hint ?? "", `Model hint of ${name}`, "none"),
      h("button", { type: "button", class: "dagmagic-button dagmagic-approval-remove", title: `Remove ${name}` }, [
        "Remove",
      ]),
    ],
  );
}
