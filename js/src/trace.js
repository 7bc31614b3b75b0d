// The trace: every LLM call in the order they started, with when it started (from the run's start), its
// purpose, model, structured level, retries, tokens, latency and cost, and totals per purpose. Collapsed by
// default; its open state survives redraws (the <details> stays). A click (or Enter) on a call opens what it
// sent and got back under it: Python sends that on request (`call_detail`), once per call; should it refuse, the
// opened row says why. Rows are kept by call and moved only when they change, so focus, opened rows and opened
// messages survive the syncs.

import { h } from "./dom.js";
import { formatCost, formatDuration, formatInt, num, prettyJson, shorten } from "./format.js";

/** @typedef {import("./types.js").Traits} Traits */
/** @typedef {import("./types.js").CallRecord} CallRecord */
/** @typedef {import("./types.js").CallDetail} CallDetail */

const COLUMNS = ["purpose", "model", "round", "step", "level", "retries", "in", "out", "latency", "cost"];

/** The columns of numbers: their heads align with them. */
const NUMBERS = new Set(["start", "round", "retries", "in", "out", "latency", "cost"]);

/** What a streamed call's mark (⇣, after its latency) means: its tooltip. */
const STREAMED = "streamed: the reply arrived token by token";

/** The columns before the numbers the totals add up (purpose to retries, and the start when shown). */
const LABEL_COLUMNS = 6;

/**
 * @typedef {{calls: number, input: number, output: number, latency: number, cost: number | null, errors: number, cancelled: number, cached: number}} Totals
 */

/**
 * A call as listed: `index` is null for calls from older kernels (they cannot be opened).
 * @typedef {{call: CallRecord, key: string, index: number | null, started: number | null, position: number}} Listed
 */

/** How long a call's detail is waited for before it can be asked for again (ms). */
const DETAIL_TIMEOUT = 30000;

/**
 * @param {{signal: AbortSignal, requests: import("./requests.js").Requests, redraw: () => void}} options
 */
export function createTrace({ signal, requests, redraw }) {
  const summary = h("summary", { class: "dagmagic-trace-summary" });
  const thead = h("thead");
  const tbody = h("tbody");
  const tfoot = h("tfoot");
  const table = h("table", { class: "dagmagic-trace-table" }, [thead, tbody, tfoot]);
  const empty = h("div", { class: "dagmagic-muted" }, ["No LLM calls yet."]);
  const body = h("div", { class: "dagmagic-trace-body" });
  const el = h("details", { class: "dagmagic-trace" }, [summary, body]);

  /** The calls (by index) whose detail the user opened. */
  const opened = new Set();
  /** @type {Map<number, CallDetail>} details Python sent, by call index */
  const fetched = new Map();
  /** @type {Map<number, string>} details Python refused, and why: opening the call again asks again */
  const refused = new Map();
  /** @type {Map<string, {sig: string, el: HTMLTableRowElement}>} a call's row, by `Listed.key` */
  const rows = new Map();
  /** @type {Map<number, {sig: string, el: HTMLTableRowElement}>} an opened call's detail row, by index */
  const detailRows = new Map();
  /** @type {boolean | null} whether the start column shows (the head and every row depend on it) */
  let startColumn = null;
  /** @type {string | null} */
  let runId = null;

  /** @param {number} index */
  function toggle(index) {
    if (opened.has(index)) {
      opened.delete(index);
    } else {
      opened.add(index);
      if (!fetched.has(index) && !requests.busy(`call:${runId}:${index}`)) ask(index);
    }
    redraw();
  }

  /** @param {number} index */
  function ask(index) {
    const run = runId;
    refused.delete(index);
    requests
      .request("call_detail", { index }, { key: `call:${run}:${index}`, timeout: DETAIL_TIMEOUT })
      .then(
        (detail) => run === runId && fetched.set(index, normalizeDetail(detail, index)),
        (/** @type {Error} */ error) => run === runId && refused.set(index, error.message),
      )
      .finally(() => {
        detailRows.delete(index);
        redraw();
      });
  }

  /** @param {EventTarget | null} target */
  function rowOf(target) {
    const row = target instanceof Element ? target.closest(".dagmagic-trace-row[data-index]") : null;
    return row && tbody.contains(row) ? row : null;
  }

  el.addEventListener(
    "click",
    (event) => {
      const row = rowOf(event.target);
      if (row) toggle(Number(row.getAttribute("data-index")));
    },
    { signal },
  );
  el.addEventListener(
    "keydown",
    (event) => {
      const row = rowOf(event.target);
      if (!row || event.target !== row || (event.key !== "Enter" && event.key !== " ")) return;
      event.preventDefault();
      event.stopPropagation(); // keep the notebook from running the cell on Enter
      toggle(Number(row.getAttribute("data-index")));
    },
    { signal },
  );

  /** A different run: its calls' indices mean other calls. */
  function reset() {
    for (const store of [opened, fetched, refused, rows, detailRows]) store.clear();
  }

  /**
   * @param {Listed} item
   * @param {number | null} origin
   */
  function rowFor(item, origin) {
    const { call, index } = item;
    const offset =
      startColumn && item.started !== null && origin !== null
        ? `+${formatDuration(Math.max(item.started - origin, 0))}`
        : "";
    const sig = JSON.stringify([call, offset, startColumn]);
    const cached = rows.get(item.key);
    if (cached && cached.sig === sig) return cached.el;
    const opens = index !== null;
    const row = h(
      "tr",
      {
        ...rowAttributes(call, opens),
        "data-index": index,
        tabindex: opens ? 0 : null,
        role: opens ? "button" : null,
        "aria-expanded": opens ? "false" : null,
      },
      [
        startColumn && h("td", { class: "dagmagic-num dagmagic-trace-offset" }, [offset]),
        h("td", {}, [String(call.purpose ?? "")]),
        h("td", {}, [String(call.model ?? "")]),
        h("td", { class: "dagmagic-num" }, [call.round === null || call.round === undefined ? "" : String(call.round)]),
        h("td", {}, [call.step_id ?? ""]),
        h("td", {}, [call.level ?? ""]),
        h("td", { class: "dagmagic-num" }, [formatInt(num(call.retries) ?? 0)]),
        h("td", { class: "dagmagic-num" }, [formatInt(num(call.input_tokens) ?? 0)]),
        h("td", { class: "dagmagic-num" }, [formatInt(num(call.output_tokens) ?? 0)]),
        h("td", { class: "dagmagic-num" }, [
          formatDuration(call.latency),
          call.stream && h("span", { class: "dagmagic-trace-streamed", title: STREAMED }, [" ⇣"]),
        ]),
        h("td", { class: "dagmagic-num" }, [
          call.cached ? h("span", { class: "dagmagic-trace-cached" }, ["cached"]) : null,
          formatCost(call.cost),
        ]),
      ],
    );
    rows.set(item.key, { sig, el: row });
    return row;
  }

  /**
   * @param {CallRecord} call
   * @param {number} index
   */
  function detailFor(call, index) {
    const detail = fetched.get(index);
    const why = refused.get(index);
    const kind = detail ? "fetched" : why !== undefined ? "refused" : "loading";
    const colspan = COLUMNS.length + (startColumn ? 1 : 0);
    const sig = JSON.stringify([kind, colspan, call.error ?? null, why ?? null]);
    const cached = detailRows.get(index);
    if (cached && cached.sig === sig) return cached.el;
    const content =
      kind === "fetched" && detail
        ? renderDetail(detail, call)
        : kind === "refused"
          ? [
              h("div", { class: "dagmagic-muted" }, [
                `Could not load this call: ${String(why).replace(/\.$/, "")}. Close it and open it again to retry.`,
              ]),
            ]
          : [h("div", { class: "dagmagic-muted dagmagic-trace-loading" }, ["Loading…"])];
    const row = h("tr", { class: "dagmagic-trace-detail", "data-index": index }, [h("td", { colspan }, content)]);
    detailRows.set(index, { sig, el: row });
    return row;
  }

  /** @param {Traits} state */
  function update(state) {
    if (state.run_id !== runId) {
      if (runId !== null) reset();
      runId = state.run_id;
    }
    const listed = listCalls(state.calls);
    const all = emptyTotals();
    /** @type {Map<string, Totals>} */
    const byPurpose = new Map();
    for (const { call } of listed) {
      const purpose = String(call.purpose ?? "?");
      const totals = byPurpose.get(purpose) ?? emptyTotals();
      byPurpose.set(purpose, totals);
      add(totals, call);
      add(all, call);
    }
    const noun = listed.length === 1 ? "call" : "calls";
    const tokens = `${formatInt(all.input)} in · ${formatInt(all.output)} out`;
    summary.textContent = `Trace: ${listed.length} LLM ${noun} · ${tokens} · ${formatCost(all.cost)}`;
    if (!listed.length) {
      if (body.firstChild !== empty) body.replaceChildren(empty);
      return;
    }
    if (body.firstChild !== table) body.replaceChildren(table);

    const withStart = listed.some((item) => item.started !== null);
    if (withStart !== startColumn) {
      startColumn = withStart;
      rows.clear();
      detailRows.clear();
      thead.replaceChildren(
        h(
          "tr",
          {},
          [...(startColumn ? ["start"] : []), ...COLUMNS].map((c) =>
            h(
              "th",
              {
                scope: "col",
                class: NUMBERS.has(c) ? "dagmagic-num" : null,
                title: c === "start" ? "When the call was sent, from the run's start" : null,
              },
              [c],
            ),
          ),
        ),
      );
    }
    let origin = state.started_at ?? null;
    if (origin === null) {
      for (const { started } of listed) if (started !== null && (origin === null || started < origin)) origin = started;
    }

    const focused = rowOf(document.activeElement)?.getAttribute("data-index") ?? null;
    /** @type {HTMLTableRowElement[]} */
    const wanted = [];
    const keys = new Set();
    const indices = new Set();
    for (const item of listed) {
      const row = rowFor(item, origin);
      keys.add(item.key);
      wanted.push(row);
      if (item.index === null) continue;
      indices.add(item.index);
      const open = opened.has(item.index);
      row.setAttribute("aria-expanded", open ? "true" : "false");
      row.classList.toggle("dagmagic-trace-row--open", open);
      if (open) wanted.push(detailFor(item.call, item.index));
    }
    for (const key of [...rows.keys()]) if (!keys.has(key)) rows.delete(key);
    for (const index of [...detailRows.keys()]) if (!indices.has(index)) detailRows.delete(index);
    for (const index of opened) if (!indices.has(index)) opened.delete(index);
    reconcile(tbody, wanted);
    if (focused !== null) {
      const again = tbody.querySelector(`.dagmagic-trace-row[data-index="${focused}"]`);
      if (again instanceof HTMLElement && again !== document.activeElement) again.focus();
    }

    const labelSpan = LABEL_COLUMNS + (startColumn ? 1 : 0);
    const totals = [...byPurpose.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([purpose, t]) => totalsRow(`${purpose} (${callCount(t.calls)})`, t, "dagmagic-trace-purpose", labelSpan));
    totals.push(totalsRow(`all (${callCount(all.calls)})`, all, "dagmagic-trace-total", labelSpan));
    tfoot.replaceChildren(
      h("tr", { class: "dagmagic-trace-totals-head" }, [
        h("th", { scope: "col", colspan: labelSpan }, ["per purpose"]),
        h("th", { scope: "col", class: "dagmagic-num" }, ["in"]),
        h("th", { scope: "col", class: "dagmagic-num" }, ["out"]),
        h(
          "th",
          {
            scope: "col",
            class: "dagmagic-num",
            title: "The calls' latencies added up, not wall-clock time: calls running at once all count",
          },
          ["latency (sum)"],
        ),
        h("th", { scope: "col", class: "dagmagic-num" }, ["cost"]),
      ]),
      ...totals,
    );
  }

  return { el, update };
}

/**
 * The calls as objects, in the order they started (calls without a start keep their place after those with
 * one), keyed by index, or by position for older kernels' calls.
 * @param {CallRecord[]} calls
 * @returns {Listed[]}
 */
function listCalls(calls) {
  const seen = new Set();
  /** @type {Listed[]} */
  const listed = [];
  calls.forEach((call, position) => {
    if (!call || typeof call !== "object") return;
    let index = num(call.index);
    if (index !== null && seen.has(index)) index = null; // a repeated index cannot ask for its own detail
    if (index !== null) seen.add(index);
    const key = index === null ? `p${position}` : `i${index}`;
    listed.push({ call, key, index, started: num(call.started_at), position });
  });
  return listed.sort(
    (a, b) =>
      (a.started ?? Infinity) - (b.started ?? Infinity) ||
      (a.index ?? a.position) - (b.index ?? b.position) ||
      a.position - b.position,
  );
}

/**
 * Makes `parent`'s children `wanted`, moving as few as possible (a focused row stays where it is).
 * @param {HTMLElement} parent
 * @param {HTMLElement[]} wanted
 */
function reconcile(parent, wanted) {
  const keep = new Set(wanted);
  for (const child of [...parent.children]) if (!keep.has(/** @type {HTMLElement} */ (child))) child.remove();
  let cursor = parent.firstElementChild;
  for (const child of wanted) {
    if (child === cursor) cursor = cursor.nextElementSibling;
    else parent.insertBefore(child, cursor);
  }
}

/**
 * Python's answer to a `call_detail` request, read defensively.
 * @param {any} msg
 * @param {number} index
 * @returns {CallDetail}
 */
function normalizeDetail(msg, index) {
  const list = (/** @type {unknown} */ value) => (Array.isArray(value) ? value : []);
  msg ??= {};
  return {
    index,
    messages: list(msg.messages).map((/** @type {any} */ m) => ({
      role: String(m?.role ?? ""),
      content: String(m?.content ?? ""),
    })),
    reply: String(msg.reply ?? ""),
    tool_calls: list(msg.tool_calls).map(String),
    error: String(msg.error ?? ""),
  };
}

/**
 * What a call sent and got back, all as text: each message collapsible under its role, the reply, the tool
 * calls it asked for, and the error of a failed call.
 * @param {CallDetail} detail
 * @param {CallRecord} call
 */
function renderDetail(detail, call) {
  const error = detail.error || (call.error ? String(call.error) : "");
  return [
    h("div", { class: "dagmagic-label" }, [
      detail.messages.length === 1 ? "1 message sent" : `${formatInt(detail.messages.length)} messages sent`,
    ]),
    ...detail.messages.map((message) =>
      h("details", { class: "dagmagic-trace-message", "data-role": message.role }, [
        h("summary", {}, [
          h("span", { class: "dagmagic-trace-role" }, [message.role || "message"]),
          h("span", { class: "dagmagic-muted" }, [` · ${shorten(message.content, 100) || "(empty)"}`]),
        ]),
        h("pre", {}, [message.content]),
      ]),
    ),
    // a failed call, or one that only asked for tools, has no reply to show
    detail.reply || (!error && !detail.tool_calls.length)
      ? h("div", { class: "dagmagic-trace-reply" }, [
          h("div", { class: "dagmagic-label" }, ["reply"]),
          detail.reply ? h("pre", {}, [detail.reply]) : h("div", { class: "dagmagic-muted" }, ["(empty)"]),
        ])
      : null,
    detail.tool_calls.length
      ? h("div", { class: "dagmagic-trace-tool-calls" }, [
          h("div", { class: "dagmagic-label" }, ["tool calls"]),
          ...detail.tool_calls.map(toolCall),
        ])
      : null,
    error
      ? h("div", { class: "dagmagic-trace-error" }, [h("span", { class: "dagmagic-label" }, ["error "]), error])
      : null,
  ];
}

/**
 * A tool call a model asked for: its name, then its arguments pretty-printed as the step detail shows them. Python
 * sends the call as JSON whose `arguments` is the JSON text the model wrote; a text that is not that (cut, or not
 * JSON) is shown as it is.
 * @param {string} text
 */
function toolCall(text) {
  const call = parsed(text);
  if (call === undefined || call === null || typeof call !== "object" || Array.isArray(call)) {
    return h("pre", { class: "dagmagic-trace-tool-call" }, [text]);
  }
  const { name, arguments: args } = /** @type {{name?: unknown, arguments?: unknown}} */ (call);
  const value = typeof args === "string" ? (parsed(args) ?? args) : (args ?? {});
  return h("div", { class: "dagmagic-trace-tool-call" }, [
    h("div", { class: "dagmagic-toolcall-name" }, [String(name ?? "?")]),
    h("pre", { class: "dagmagic-toolcall-args" }, [typeof value === "string" ? value : prettyJson(value)]),
  ]);
}

/**
 * JSON text's value; undefined when it is not JSON.
 * @param {string} text
 * @returns {unknown}
 */
function parsed(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** @param {number} n */
function callCount(n) {
  return n === 1 ? "1 call" : `${formatInt(n)} calls`;
}

/** @returns {Totals} */
function emptyTotals() {
  return { calls: 0, input: 0, output: 0, latency: 0, cost: null, errors: 0, cancelled: 0, cached: 0 };
}

/**
 * A failed call is marked with its error, a cancelled one with why its usage is missing.
 * @param {CallRecord} call
 * @param {boolean} opens  whether a click opens its detail
 */
function rowAttributes(call, opens) {
  if (call.status === "cancelled") {
    return {
      class: "dagmagic-trace-row dagmagic-trace-cancelled",
      title: "Cancelled before its reply: its usage is unknown.",
    };
  }
  if (call.error) return { class: "dagmagic-trace-row dagmagic-trace-error", title: String(call.error) };
  if (call.cached) {
    const more = opens ? " Show what it sent and got back." : "";
    return {
      class: "dagmagic-trace-row",
      title: `Answered from the response cache: no call was made, no cost.${more}`,
    };
  }
  return { class: "dagmagic-trace-row", title: opens ? "Show what this call sent and got back" : null };
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
  if (call.cached) t.cached += 1;
}

/**
 * @param {string} label
 * @param {Totals} t
 * @param {string} cls
 * @param {number} span  the columns the label spans
 */
function totalsRow(label, t, cls, span) {
  return h("tr", { class: cls }, [
    h("th", { scope: "row", colspan: span }, [
      label +
        (t.errors ? ` · ${t.errors} failed` : "") +
        (t.cancelled ? ` · ${t.cancelled} cancelled` : "") +
        (t.cached ? ` · ${t.cached} cached` : ""),
    ]),
    h("td", { class: "dagmagic-num" }, [formatInt(t.input)]),
    h("td", { class: "dagmagic-num" }, [formatInt(t.output)]),
    h("td", { class: "dagmagic-num" }, [formatDuration(t.latency)]),
    h("td", { class: "dagmagic-num" }, [formatCost(t.cost)]),
  ]);
}
