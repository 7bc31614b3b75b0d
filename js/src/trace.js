// The trace: every LLM call with its purpose, model, structured level, retries, tokens, latency and cost,
// and totals per purpose. Collapsed by default; its open state survives redraws (the <details> stays).

import { h } from "./dom.js";
import { formatCost, formatDuration, formatInt, num } from "./format.js";

/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./types.js").CallRecord} CallRecord */

const COLUMNS = ["purpose", "model", "round", "step", "level", "retries", "in", "out", "latency", "cost"];

/**
 * @typedef {{calls: number, input: number, output: number, latency: number, cost: number | null, errors: number, cancelled: number}} Totals
 */

export function createTrace() {
  const summary = h("summary", { class: "dagmagic-trace-summary" });
  const body = h("div", { class: "dagmagic-trace-body" });
  const el = h("details", { class: "dagmagic-trace" }, [summary, body]);
  /** @type {CallRecord[] | null} */
  let shown = null;

  /** @param {Traits} state */
  function update(state) {
    if (state.calls === shown) return;
    shown = state.calls;
    const calls = state.calls.filter((c) => c && typeof c === "object");
    const byPurpose = new Map();
    const all = emptyTotals();
    for (const call of calls) {
      const purpose = String(call.purpose ?? "?");
      if (!byPurpose.has(purpose)) byPurpose.set(purpose, emptyTotals());
      add(byPurpose.get(purpose), call);
      add(all, call);
    }
    const noun = calls.length === 1 ? "call" : "calls";
    const tokens = `${formatInt(all.input)} in · ${formatInt(all.output)} out`;
    summary.textContent = `Trace: ${calls.length} LLM ${noun} · ${tokens} · ${formatCost(all.cost)}`;
    if (!calls.length) {
      body.replaceChildren(h("div", { class: "dagmagic-muted" }, ["No LLM calls yet."]));
      return;
    }
    const rows = calls.map((call) =>
      h("tr", rowAttributes(call), [
        h("td", {}, [String(call.purpose ?? "")]),
        h("td", {}, [String(call.model ?? "")]),
        h("td", { class: "dagmagic-num" }, [call.round === null || call.round === undefined ? "" : String(call.round)]),
        h("td", {}, [call.step_id ?? ""]),
        h("td", {}, [call.level ?? ""]),
        h("td", { class: "dagmagic-num" }, [formatInt(num(call.retries) ?? 0)]),
        h("td", { class: "dagmagic-num" }, [formatInt(num(call.input_tokens) ?? 0)]),
        h("td", { class: "dagmagic-num" }, [formatInt(num(call.output_tokens) ?? 0)]),
        h("td", { class: "dagmagic-num" }, [formatDuration(call.latency) + (call.stream ? " ⇣" : "")]),
        h("td", { class: "dagmagic-num" }, [formatCost(call.cost)]),
      ]),
    );
    const totals = [...byPurpose.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([purpose, t]) => totalsRow(`${purpose} (${t.calls})`, t, "dagmagic-trace-purpose"));
    totals.push(totalsRow(`all (${all.calls})`, all, "dagmagic-trace-total"));
    body.replaceChildren(
      h("table", { class: "dagmagic-trace-table" }, [
        h("thead", {}, [
          h(
            "tr",
            {},
            COLUMNS.map((c) => h("th", { scope: "col" }, [c])),
          ),
        ]),
        h("tbody", {}, rows),
        h("tfoot", {}, totals),
      ]),
    );
  }

  return { el, update };
}

/** @returns {Totals} */
function emptyTotals() {
  return { calls: 0, input: 0, output: 0, latency: 0, cost: null, errors: 0, cancelled: 0 };
}

/**
 * A failed call is marked with its error, a cancelled one with why its usage is missing.
 * @param {CallRecord} call
 */
function rowAttributes(call) {
  if (call.status === "cancelled") {
    return { class: "dagmagic-trace-cancelled", title: "Cancelled before its reply: its usage is unknown." };
  }
  return { class: call.error ? "dagmagic-trace-error" : null, title: call.error ? String(call.error) : null };
}

/**
 * @param {Totals} t
 * @param {CallRecord} call
 */
function add(t, call) {
  t.calls += 1;
  t.input += num(call.input_tokens) ?? 0;
  t.output += num(call.output_tokens) ?? 0;
  t.latency += num(call.latency) ?? 0;
  const cost = num(call.cost);
  if (cost !== null) t.cost = (t.cost ?? 0) + cost;
  if (call.error) t.errors += 1;
  if (call.status === "cancelled") t.cancelled += 1;
}

/**
 * @param {string} label
 * @param {Totals} t
 * @param {string} cls
 */
function totalsRow(label, t, cls) {
  return h("tr", { class: cls }, [
    h("th", { scope: "row", colspan: 6 }, [
      label + (t.errors ? ` · ${t.errors} failed` : "") + (t.cancelled ? ` · ${t.cancelled} cancelled` : ""),
    ]),
    h("td", { class: "dagmagic-num" }, [formatInt(t.input)]),
    h("td", { class: "dagmagic-num" }, [formatInt(t.output)]),
    h("td", { class: "dagmagic-num" }, [formatDuration(t.latency)]),
    h("td", { class: "dagmagic-num" }, [formatCost(t.cost)]),
  ]);
}
