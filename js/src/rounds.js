// The rounds: one section each (the latest expanded, earlier ones collapsible) holding the DAG, the step
// detail and the verdict. A section is rebuilt only when its round, its view state or (while steps run) the
// clock changed, so earlier rounds keep their DOM.

import { h } from "./dom.js";
import { renderDetail } from "./detail.js";
import { formatPercent } from "./format.js";
import { renderGraph, STATUS_GLYPH } from "./graph.js";
import { isLive } from "./state.js";

/** @typedef {import("./types.js").Round} Round */
/** @typedef {import("./types.js").Traits} Traits */

/**
 * View state that outlives redraws.
 * @typedef {object} RoundsView
 * @property {{round: number, step: string} | null} selected
 * @property {Map<number, boolean>} expanded  explicit choices; otherwise only the latest round is open
 */

/** @typedef {import("./types.js").OutgoingMessage} OutgoingMessage */

/**
 * @param {{signal: AbortSignal, redraw: () => void, send: (msg: OutgoingMessage) => void}} options
 */
export function createRounds({ signal, redraw, send }) {
  const el = h("div", { class: "dagmagic-rounds" });
  /** @type {RoundsView} */
  const view = { selected: null, expanded: new Map() };
  /** @type {Map<number, {sig: string, el: HTMLElement}>} */
  const cache = new Map();
  let latest = -1;

  /** @param {number} index */
  const isExpanded = (index) => view.expanded.get(index) ?? index === latest;

  /**
   * @param {number} round
   * @param {string} step
   */
  function toggleSelection(round, step) {
    const same = view.selected && view.selected.round === round && view.selected.step === step;
    view.selected = same ? null : { round, step };
    if (!same) view.expanded.set(round, true);
    redraw();
  }

  el.addEventListener(
    "click",
    (event) => {
      const target = /** @type {Element} */ (event.target);
      const section = target.closest?.(".dagmagic-round");
      if (!section) return;
      const round = Number(section.getAttribute("data-round"));
      const toggle = target.closest(".dagmagic-round-toggle");
      const node = target.closest(".dagmagic-node");
      const dep = target.closest("[data-goto-step]");
      if (toggle) {
        view.expanded.set(round, !isExpanded(round));
        redraw();
      } else if (target.closest(".dagmagic-retry-now")) {
        const detail = target.closest(".dagmagic-detail");
        send({ type: "retry_now", step: String(detail?.getAttribute("data-step-id")) });
        /** @type {HTMLButtonElement} */ (target.closest(".dagmagic-retry-now")).disabled = true;
      } else if (target.closest(".dagmagic-detail-close")) {
        view.selected = null;
        redraw();
      } else if (dep) {
        view.selected = {
          round: Number(dep.getAttribute("data-goto-round")),
          step: String(dep.getAttribute("data-goto-step")),
        };
        view.expanded.set(view.selected.round, true);
        redraw();
      } else if (node) {
        toggleSelection(round, String(node.getAttribute("data-step-id")));
      }
    },
    { signal },
  );
  el.addEventListener(
    "keydown",
    (event) => {
      const target = /** @type {Element} */ (event.target);
      const node = target.closest?.(".dagmagic-node");
      if (!node || (event.key !== "Enter" && event.key !== " ")) return;
      event.preventDefault();
      event.stopPropagation(); // keep the notebook from running the cell on Enter
      const section = node.closest(".dagmagic-round");
      toggleSelection(Number(section?.getAttribute("data-round")), String(node.getAttribute("data-step-id")));
    },
    { signal },
  );

  /**
   * @param {Traits} state
   */
  function update(state) {
    latest = state.rounds.length ? state.rounds[state.rounds.length - 1].index : -1;
    const focused = focusedNode(el);
    const sections = state.rounds.map((round) => {
      const expanded = isExpanded(round.index);
      const selected = view.selected?.round === round.index ? view.selected.step : null;
      const live = expanded && round.nodes.some(isLive);
      const isLatest = round.index === latest;
      // Everything the section shows: the round, its view state, the clock while steps run, and for the latest
      // round the run status (it decides whether a missing verdict is still coming).
      const sig = JSON.stringify([round, expanded, selected, live ? state.now : 0, isLatest && state.status]);
      const cached = cache.get(round.index);
      if (cached && cached.sig === sig) return cached.el;
      const section = renderRound(round, state, expanded, selected, isLatest);
      cache.set(round.index, { sig, el: section });
      return section;
    });
    for (const index of [...cache.keys()]) {
      if (!state.rounds.some((r) => r.index === index)) cache.delete(index);
    }
    if (sections.length !== el.children.length || sections.some((s, i) => el.children[i] !== s)) {
      el.replaceChildren(...sections);
    }
    if (!state.rounds.length) {
      const text = state.status === "running" ? "Planning…" : "No plan.";
      el.replaceChildren(h("div", { class: "dagmagic-muted dagmagic-planning" }, [text]));
    }
    if (focused) {
      const again = el.querySelector(
        `.dagmagic-round[data-round="${focused.round}"] .dagmagic-node[data-step-id="${CSS_escape(focused.step)}"]`,
      );
      if (again && again !== document.activeElement) /** @type {SVGElement} */ (again).focus?.();
    }
  }

  return { el, update, view };
}

/**
 * Which step has the keyboard focus, so it keeps it across a redraw.
 * @param {HTMLElement} root
 */
function focusedNode(root) {
  const active = document.activeElement;
  if (!active || !root.contains(active)) return null;
  const node = active.closest(".dagmagic-node");
  const section = active.closest(".dagmagic-round");
  if (!node || !section) return null;
  return { round: section.getAttribute("data-round"), step: String(node.getAttribute("data-step-id")) };
}

/** @param {string} value */
function CSS_escape(value) {
  return globalThis.CSS?.escape ? globalThis.CSS.escape(value) : value.replace(/["\\]/g, "\\$&");
}

/**
 * @param {Round} round
 * @param {Traits} state
 * @param {boolean} expanded
 * @param {string | null} selected
 * @param {boolean} isLatest
 */
function renderRound(round, state, expanded, selected, isLatest) {
  const body = expanded
    ? h("div", { class: "dagmagic-round-body" }, [
        round.error && h("div", { class: "dagmagic-round-error", role: "alert" }, [round.error]),
        round.warnings.length
          ? h(
              "ul",
              { class: "dagmagic-round-warnings", "aria-label": "Fixed on the way" },
              round.warnings.map((w) => h("li", {}, [w])),
            )
          : null,
        round.nodes.length
          ? h("div", { class: "dagmagic-graph-wrap" }, [renderGraph(round, state.now, selected)])
          : h("div", { class: "dagmagic-muted" }, ["No steps."]),
        selectedDetail(round, state, selected),
        renderVerdict(round, isLatest && state.status === "running"),
      ])
    : null;
  return h(
    "section",
    { class: "dagmagic-round", "data-round": round.index, "data-expanded": expanded ? "true" : "false" },
    [
      h("button", { type: "button", class: "dagmagic-round-toggle", "aria-expanded": expanded ? "true" : "false" }, [
        h("span", { class: "dagmagic-caret", "aria-hidden": "true" }, [expanded ? "▾" : "▸"]),
        h("span", { class: "dagmagic-round-title" }, [`Round ${round.index}`]),
        h("span", { class: "dagmagic-round-summary" }, [roundSummary(round)]),
      ]),
      body,
    ],
  );
}

/**
 * @param {Round} round
 * @param {Traits} state
 * @param {string | null} selected
 */
function selectedDetail(round, state, selected) {
  const node = selected === null ? undefined : round.nodes.find((n) => n.id === selected);
  return node ? renderDetail(node, round, state.rounds, state.now) : null;
}

/**
 * "4 steps · 3 ✓ · 1 ✗ · achieved 85%"
 * @param {Round} round
 */
function roundSummary(round) {
  /** @type {Record<string, number>} */
  const counts = {};
  for (const n of round.nodes) counts[n.status] = (counts[n.status] ?? 0) + 1;
  const parts = [`${round.nodes.length} step${round.nodes.length === 1 ? "" : "s"}`];
  for (const status of /** @type {const} */ (["completed", "running", "retrying", "failed", "skipped", "cancelled"])) {
    if (counts[status]) parts.push(`${counts[status]} ${STATUS_GLYPH[status]}`);
  }
  if (round.analysis)
    parts.push(`${round.analysis.achieved ? "achieved" : "not achieved"} ${formatPercent(round.analysis.confidence)}`);
  if (round.decision) parts.push(round.decision.action);
  return parts.join(" · ");
}

/**
 * The analyzer's verdict and what the loop decided next (why it replanned, above all).
 * @param {Round} round
 * @param {boolean} pending  the latest round of a running run: a verdict may still come
 */
function renderVerdict(round, pending) {
  const { analysis, decision } = round;
  if (!analysis && !decision) {
    const busy = round.nodes.some((n) => isLive(n) || n.status === "pending");
    return pending && !busy ? h("div", { class: "dagmagic-verdict dagmagic-muted" }, ["Judging the round…"]) : null;
  }
  return h(
    "div",
    { class: "dagmagic-verdict", "data-achieved": analysis ? String(Boolean(analysis.achieved)) : null },
    [
      analysis &&
        h("div", { class: "dagmagic-verdict-head" }, [
          h("span", { class: "dagmagic-verdict-mark" }, [analysis.achieved ? "✓ achieved" : "✗ not achieved"]),
          h("span", { class: "dagmagic-verdict-confidence" }, [`confidence ${formatPercent(analysis.confidence)}`]),
        ]),
      analysis?.reasoning && h("p", { class: "dagmagic-verdict-reasoning" }, [String(analysis.reasoning)]),
      decision &&
        h("p", { class: "dagmagic-decision", "data-action": decision.action }, [
          h("strong", {}, [DECISION_LABEL[decision.action] ?? String(decision.action)]),
          decision.reason ? ` ${decision.reason}` : "",
        ]),
    ],
  );
}

/** @type {Record<string, string>} */
const DECISION_LABEL = {
  replan: "Replanned:",
  synthesize: "Synthesize:",
  stop: "Stopped:",
};
