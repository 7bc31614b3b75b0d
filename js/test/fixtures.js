// A fake anywidget model, views of it rendered the way anywidget renders them (the widget's definition made
// once per model, `initialize` before `render`), and sample states as Python syncs them (no coordinates).

import { vi } from "vitest";
import widget from "../src/index.js";

/**
 * A fake model: get/set/on/off/save_changes/send, `fire` for change events, `receive` for custom messages;
 * `requests()` lists the requests the views sent ({type: name, ...msg}), `answer` answers one as Python would.
 * @param {Record<string, any>} initial
 */
export function fakeModel(initial) {
  const state = structuredClone(initial);
  /** @type {Map<string, Set<Function>>} */
  const listeners = new Map();
  const model = {
    sent: /** @type {any[]} */ ([]),
    get: vi.fn((name) => state[name]),
    set: vi.fn((name, value) => {
      state[name] = value;
      model.fire(`change:${name}`);
    }),
    on: vi.fn((event, fn) => {
      if (!listeners.has(event)) listeners.set(event, new Set());
      listeners.get(event)?.add(fn);
    }),
    off: vi.fn((event, fn) => {
      if (!event) listeners.clear();
      else if (!fn) listeners.delete(event);
      else listeners.get(event)?.delete(fn);
    }),
    save_changes: vi.fn(),
    send: vi.fn((msg) => model.sent.push(msg)),
    widget_manager: { get_model: vi.fn() },
    /** @param {string} event @param {...any} args */
    fire(event, ...args) {
      for (const fn of [...(listeners.get(event) ?? [])]) fn(...args);
    },
    /** @param {any} msg */
    receive(msg) {
      model.fire("msg:custom", msg, []);
    },
    /** The requests sent so far, as `{type: name, ...msg}` (their ids left out). */
    requests() {
      return model.sent.filter((m) => m?.kind === "anywidget-command").map((m) => ({ type: m.name, ...m.msg }));
    },
    /** The last request sent, as `{type: name, ...msg}`. */
    lastRequest() {
      return model.requests().at(-1);
    },
    /**
     * Answers a request as Python does (by default the last one): taken, or refused with `error`.
     * @param {{error?: string, value?: any, index?: number}} [answer]
     */
    answer({ error, value = null, index = -1 } = {}) {
      const sent = model.sent.filter((m) => m?.kind === "anywidget-command").at(index);
      if (!sent) throw new Error("no request to answer");
      const response = error === undefined ? { ok: true, value } : { ok: false, error };
      model.receive({ id: sent.id, kind: "anywidget-command-response", response });
    },
    listenerCount() {
      let n = 0;
      for (const set of listeners.values()) n += set.size;
      return n;
    },
  };
  return model;
}

/** Resolves once the answers given so far have reached the parts that asked (promise callbacks). */
export async function answered() {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

/** Resolves after the widget's coalesced redraw (an animation frame, or its timer fallback). */
export function nextRedraw() {
  return new Promise((resolve) => setTimeout(resolve, 40));
}

const T0 = 1_700_000_000;

/**
 * @param {string} id
 * @param {Record<string, any>} extra
 */
function node(id, extra = {}) {
  return {
    id,
    task: `Task for ${id}`,
    status: "pending",
    dependencies: [],
    model: null,
    tool_hint: null,
    model_hint: null,
    result: null,
    error: null,
    attempts: 0,
    queued_at: null,
    started_at: null,
    completed_at: null,
    input_tokens: 0,
    output_tokens: 0,
    cost: null,
    tool_calls: [],
    warnings: [],
    ...extra,
  };
}

/** A two-round run: round 1 replanned; round 2 (three layers, a diamond and a cross-round dependency) is running. */
export function sampleState() {
  const round1 = {
    index: 1,
    error: null,
    warnings: [],
    nodes: [
      node("s1", {
        status: "completed",
        task: "Find the population of France",
        model: "openai/gpt-4o-mini",
        result: "About **68 million**.",
        attempts: 1,
        queued_at: T0,
        started_at: T0 + 0.5,
        completed_at: T0 + 3.5,
        input_tokens: 420,
        output_tokens: 80,
        cost: 0.0012,
      }),
      node("s2", {
        status: "failed",
        dependencies: ["s1"],
        task: "Compare with Germany",
        error: "provider timeout",
        attempts: 3,
        queued_at: T0 + 3.5,
        started_at: T0 + 3.6,
        completed_at: T0 + 9,
      }),
    ],
    analysis: { achieved: false, confidence: 0.35, reasoning: "The comparison is missing." },
    decision: { action: "replan", reason: "Step s2 failed; retry the comparison with another source." },
  };

  const T1 = T0 + 12;
  const round2 = {
    index: 2,
    error: null,
    warnings: [],
    nodes: [
      node("a", {
        status: "completed",
        task: "Search the web for Germany's population in 2024",
        model: "openai/gpt-4o-mini",
        tool_hint: "web_search",
        attempts: 1,
        queued_at: T1,
        started_at: T1,
        completed_at: T1 + 2,
        input_tokens: 1500,
        output_tokens: 300,
        cost: 0.002,
        result: "Germany: 84.5 million (2024).",
        tool_calls: [
          {
            name: "web_search",
            arguments: { query: "Germany population 2024", max_results: 3 },
            observation: "Destatis: 84.5 million",
            error: null,
            duration: 0.8,
          },
        ],
      }),
      node("b", {
        status: "completed",
        task: "Look up France's 2024 population",
        model: "anthropic/claude-3-5-haiku",
        attempts: 1,
        queued_at: T1,
        started_at: T1,
        completed_at: T1 + 1.5,
        input_tokens: 300,
        output_tokens: 50,
        cost: null,
      }),
      node("c", {
        status: "running",
        dependencies: ["a", "b"],
        task: "Compute the ratio of the two populations",
        model: "openai/gpt-4o",
        attempts: 1,
        queued_at: T1 + 2,
        started_at: T1 + 2.2,
      }),
      node("d", {
        status: "retrying",
        dependencies: ["a"],
        task: "Explain the trend",
        attempts: 2,
        queued_at: T1 + 2,
        started_at: T1 + 2.1,
        retry_at: T1 + 8,
      }),
      node("e", { status: "pending", dependencies: ["c", "d", "r1.s1"], task: "Write the comparison" }),
    ],
    analysis: null,
    decision: null,
  };

  return {
    run_id: "run-1",
    goal: "Compare the populations of France and Germany",
    status: "running",
    phase: "executing",
    error: "",
    warnings: [],
    answer: "",
    answer_fallback: false,
    answer_partial: false,
    answer_unreached: false,
    resumable: false,
    usage: { input_tokens: 2220, output_tokens: 430, requests: 6, cost: 0.0123 },
    rounds: [round1, round2],
    calls: [
      {
        purpose: "plan",
        model: "openai/gpt-4o",
        round: 1,
        step_id: null,
        level: "json_schema",
        retries: 0,
        input_tokens: 500,
        output_tokens: 120,
        latency: 1.2,
        cost: 0.004,
        error: null,
        stream: false,
      },
      {
        purpose: "step",
        model: "openai/gpt-4o-mini",
        round: 1,
        step_id: "s1",
        level: null,
        retries: 0,
        input_tokens: 420,
        output_tokens: 80,
        latency: 3.0,
        cost: 0.0012,
        error: null,
        stream: false,
      },
      {
        purpose: "step",
        model: "openai/gpt-4o-mini",
        round: 1,
        step_id: "s2",
        level: null,
        retries: 2,
        input_tokens: 0,
        output_tokens: 0,
        latency: 5.4,
        cost: null,
        error: "timeout",
        stream: false,
      },
      {
        purpose: "analyze",
        model: "openai/gpt-4o",
        round: 1,
        step_id: null,
        level: "tool",
        retries: 1,
        input_tokens: 800,
        output_tokens: 60,
        latency: 0.9,
        cost: 0.005,
        error: null,
        stream: false,
      },
    ],
    now: T1 + 5,
  };
}

/** Round 2 stopped at a breakpoint: step c is paused, about to send two messages with two tools offered. */
export function pausedState() {
  const state = sampleState();
  const c = state.rounds[1].nodes[2];
  Object.assign(c, {
    status: "paused",
    started_at: null,
    paused_messages: [
      { role: "system", content: "You are one step of a plan. Answer the task; cite sources." },
      { role: "user", content: 'Task: Compute the ratio\n\nContext from a: <img src=x onerror="alert(1)">' },
    ],
    paused_tools: ["web_search", "fetch_url"],
  });
  return state;
}

/** Round 2's plan waits for the user's approval: s1, then s2 (after s1) and s3 (after s1 and round 1's s1). */
export function approvalState() {
  const state = sampleState();
  const deps = { s1: [], s2: ["s1"], s3: ["s1", "r1.s1"] };
  state.phase = "awaiting_approval";
  state.rounds[0] = { ...state.rounds[0], rerun_of: null, rerun_step: null, approval: "approved", diff: null };
  state.rounds[1] = {
    index: 2,
    error: null,
    warnings: [],
    nodes: [
      node("s1", { task: "Find Germany's population", tool_hint: "web_search" }),
      node("s2", { task: "Compare it with France's", dependencies: deps.s2, model_hint: "fast" }),
      node("s3", { task: "Explain the trend", dependencies: deps.s3 }),
    ],
    analysis: null,
    decision: null,
    rerun_of: null,
    rerun_step: null,
    approval: "pending",
    diff: null,
  };
  return state;
}

/** An ended run that can re-run a step; its round 3 re-ran step c of round 2. */
export function rerunState() {
  const state = sampleState();
  const round2 = state.rounds[1];
  for (const n of round2.nodes) {
    Object.assign(n, { status: "completed", completed_at: n.completed_at ?? T0 + 30, result: `Result of ${n.id}` });
    delete n.retry_at;
  }
  round2.analysis = { achieved: true, confidence: 0.8, reasoning: "Both populations are there." };
  round2.decision = { action: "synthesize", reason: "Done." };
  const round3 = {
    ...structuredClone(round2),
    index: 3,
    rerun_of: 2,
    rerun_step: "c",
    approval: null,
    diff: [
      { id: "c", change: "changed", fields: ["task", "result"] },
      { id: "e", change: "changed", fields: ["result"] },
      { id: "f", change: "added", fields: [] },
    ],
  };
  round3.nodes[2].task = "Compute the ratio, to two decimals";
  return {
    ...state,
    status: "done",
    phase: "finished",
    can_rerun: true,
    answer: "Germany has about 1.24 times as many people.",
    rounds: [state.rounds[0], round2, round3],
  };
}

/**
 * Round 2's step c is composite: it runs as a nested DAG whose step ids (a, b, c) repeat the run's own. Running,
 * its nested c runs; done, it has a verdict and an answer that is also c's result.
 * @param {"running" | "done"} [status]
 */
export function subrunState(status = "running") {
  const state = sampleState();
  const deps = { a: [], b: [], c: ["a", "b"] };
  const T = state.now - 2;
  const done = status === "done";
  const answer = "Germany has about 1.24 times as many people as France.";
  const c = state.rounds[1].nodes[2];
  if (done) Object.assign(c, { status: "completed", completed_at: state.now, result: answer });
  c.subrun = {
    status,
    answer: done ? answer : "",
    error: "",
    rounds: [
      {
        index: 1,
        error: null,
        warnings: [],
        nodes: [
          node("a", { status: "completed", task: "Take Germany's population", subrun: null }),
          node("b", { status: "completed", task: "Take France's population", subrun: null }),
          node("c", {
            status: done ? "completed" : "running",
            dependencies: deps.c,
            task: "Divide the first by the second",
            model: "openai/gpt-4o-mini",
            attempts: 1,
            queued_at: T,
            started_at: T,
            completed_at: done ? state.now : null,
            subrun: null,
          }),
        ],
        analysis: done ? { achieved: true, confidence: 0.9, reasoning: "The ratio is computed." } : null,
        decision: done ? { action: "synthesize", reason: "Enough to answer." } : null,
        rerun_of: null,
        rerun_step: null,
        approval: null,
        diff: null,
      },
    ],
  };
  for (const round of state.rounds) for (const n of round.nodes) if (n !== c) n.subrun = null;
  return state;
}

/** The views mounted by `mount`/`mountView`, and the widgets' cleanups, undone by `unmountAll` after each test. */
const mounted = /** @type {Array<() => void>} */ ([]);

/** @type {WeakMap<object, ReturnType<typeof widget>>} each model's widget definition, as anywidget keeps it */
const definitions = new WeakMap();

/**
 * The widget definition of `model`, made and initialized on first use (anywidget calls the module's default
 * export once per model, then `initialize`, then `render` per view).
 * @param {ReturnType<typeof fakeModel>} model
 */
export function definitionOf(model) {
  let definition = definitions.get(model);
  if (!definition) {
    definition = widget();
    definitions.set(model, definition);
    mounted.push(definition.initialize());
  }
  return definition;
}

/**
 * Renders a view of `model` into a fresh element on the page. Its `cleanup` runs the render's cleanup and
 * removes the element, once (a second call, or `unmountAll`, does nothing more).
 * @param {ReturnType<typeof fakeModel>} model
 * @param {any} [host]  anywidget's host (draws another widget inside this one), when the test gives one
 */
export function mountView(model, host) {
  const el = document.createElement("div");
  document.body.append(el);
  const cleanupRender = definitionOf(model).render({ model: /** @type {any} */ (model), el, host });
  let done = false;
  const cleanup = () => {
    if (done) return;
    done = true;
    cleanupRender();
    el.remove();
  };
  mounted.push(cleanup);
  return { el, cleanup };
}

/**
 * A fake model holding `state`, and a view of it on the page.
 * @param {Record<string, any>} [state]
 */
export function mount(state = sampleState()) {
  const model = fakeModel(state);
  return { model, ...mountView(model) };
}

/** Cleans up every view mounted so far (an `afterEach` in each test file). */
export function unmountAll() {
  for (const cleanup of mounted.splice(0).reverse()) cleanup();
}

/**
 * An ended run with tool steps (each one direct call of its tool, no LLM): b called `add` directly; c's direct
 * call of `search` failed on its arguments, so an agent ran it; d passed a long result on. a is an agent step.
 */
export function toolStepState() {
  const state = sampleState();
  const T = state.now - 10;
  const report = `Population report: ${"France has about 68.4 million people. ".repeat(6)}`.trim();
  const fallback = "ValidationError: limit: not an integer";
  state.rounds[1] = {
    ...state.rounds[1],
    nodes: [
      node("a", {
        status: "completed",
        task: "Find France's population in millions",
        model: "openai/gpt-4o-mini",
        result: "68.4",
        attempts: 1,
        queued_at: T,
        started_at: T,
        completed_at: T + 2,
        input_tokens: 300,
        output_tokens: 20,
      }),
      node("b", {
        status: "completed",
        dependencies: ["a"],
        task: "Add the two figures",
        tool_hint: "add",
        tool_args: { a: "$a", b: 12 },
        result: "80.4",
        attempts: 1,
        queued_at: T + 2,
        started_at: T + 2,
        completed_at: T + 2.25,
        tool_calls: [
          { name: "add", arguments: { a: "68.4", b: 12 }, observation: "80.4", error: null, duration: 0.25, turn: 0 },
        ],
      }),
      node("c", {
        status: "completed",
        dependencies: ["a"],
        task: "Search for the source",
        tool_hint: "search",
        tool_args: { query: "population of $a million", limit: "many" },
        model: "openai/gpt-4o-mini",
        result: "INSEE",
        attempts: 1,
        queued_at: T + 2,
        started_at: T + 2,
        completed_at: T + 5,
        input_tokens: 500,
        output_tokens: 40,
        warnings: [`the direct call of search failed (${fallback}); an agent ran the step`],
        tool_calls: [
          {
            name: "search",
            arguments: { query: "population of 68.4 million", limit: "many" },
            observation: "",
            error: fallback,
            duration: 0.01,
            turn: 0,
          },
          {
            name: "search",
            arguments: { query: "population of 68.4 million", limit: 3 },
            observation: "INSEE",
            error: null,
            duration: 0.5,
            turn: 1,
          },
        ],
      }),
      node("d", {
        status: "completed",
        dependencies: ["c"],
        task: "Count the report's words",
        tool_hint: "count_words",
        tool_args: { text: "$c" },
        result: "42",
        attempts: 1,
        queued_at: T + 5,
        started_at: T + 5,
        completed_at: T + 5.1,
        tool_calls: [
          { name: "count_words", arguments: { text: report }, observation: "42", error: null, duration: 0.1, turn: 0 },
        ],
      }),
      node("e", {
        dependencies: ["b", "d"],
        task: "Divide the sum by the count",
        tool_hint: "divide",
        tool_args: { x: "$b", y: "$d" },
      }),
    ],
    analysis: { achieved: true, confidence: 0.9, reasoning: "Enough to answer." },
    decision: { action: "synthesize", reason: "Enough to answer." },
  };
  return { state, report, fallback };
}
