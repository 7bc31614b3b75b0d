// The header: the goal, the run's status, its totals (tokens, requests, cost, elapsed) and its error.

import { h } from "./dom.js";
import { formatCost, formatDuration, formatInt } from "./format.js";
import { runElapsed } from "./state.js";

/** @typedef {import("./types.js").Traits} Traits */

const STATUS_LABEL = /** @type {Record<string, string>} */ ({
  running: "running",
  done: "done",
  failed: "failed",
  cancelled: "cancelled",
});

/** What a running run is doing, in words. */
const PHASE_LABEL = /** @type {Record<string, string>} */ ({
  starting: "starting…",
  planning: "planning…",
  awaiting_approval: "waiting for your approval…",
  executing: "running steps…",
  analyzing: "judging…",
  synthesizing: "writing the answer…",
});

export function createHeader() {
  const goal = h("div", { class: "dagmagic-goal" });
  const status = h("span", { class: "dagmagic-status", role: "status" });
  const totals = h("div", { class: "dagmagic-totals" });
  const error = h("div", { class: "dagmagic-error", role: "alert", hidden: true });
  const el = h("header", { class: "dagmagic-header" }, [
    h("div", { class: "dagmagic-title" }, [h("span", { class: "dagmagic-brand" }, ["dagmagic"]), status, goal]),
    totals,
    error,
  ]);

  /** @param {Traits} state */
  function update(state) {
    goal.textContent = state.goal;
    goal.title = state.goal;
    const doing = state.status === "running" ? PHASE_LABEL[state.phase] : undefined;
    status.textContent = doing ?? STATUS_LABEL[state.status] ?? state.status;
    status.dataset.status = state.status;
    status.dataset.phase = state.phase;
    const { usage } = state;
    const items = [
      ["tokens", `${formatInt(usage.input_tokens)} in · ${formatInt(usage.output_tokens)} out`],
      ["requests", formatInt(usage.requests)],
      ["cost", formatCost(usage.cost)],
      ["elapsed", formatDuration(runElapsed(state))],
    ];
    totals.replaceChildren(
      ...items.map(([name, value]) =>
        h("span", { class: `dagmagic-total dagmagic-total-${name}` }, [
          h("span", { class: "dagmagic-label" }, [name]),
          ` ${value}`,
        ]),
      ),
    );
    error.textContent = state.error;
    error.hidden = !state.error;
  }

  return { el, update };
}
