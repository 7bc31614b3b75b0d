// The state contract synced from Python (traits), as JSDoc types. Nothing here runs.

/** @typedef {"running" | "done" | "failed" | "cancelled"} RunStatus */
/** @typedef {"pending" | "queued" | "running" | "retrying" | "completed" | "failed" | "skipped" | "cancelled"} StepStatus */

/**
 * @typedef {object} ToolCall
 * @property {string} name
 * @property {Record<string, unknown>} arguments
 * @property {string} observation  capped by Python
 * @property {string | null} error
 * @property {number | null} duration  seconds
 */

/**
 * @typedef {object} DagNode
 * @property {string} id
 * @property {string} task
 * @property {StepStatus} status
 * @property {number} x  top-left corner
 * @property {number} y
 * @property {number} w
 * @property {number} h
 * @property {number} layer
 * @property {string[]} dependencies  may name earlier rounds' steps ("r1.s2")
 * @property {string | null} model
 * @property {string | null} tool_hint
 * @property {string | null} model_hint
 * @property {string | null} result  capped by Python
 * @property {string | null} error
 * @property {number} attempts
 * @property {number | null} queued_at  epoch seconds
 * @property {number | null} started_at
 * @property {number | null} completed_at
 * @property {number | null} [retry_at]  optional: when a retrying step tries again (drives the countdown)
 * @property {number} input_tokens
 * @property {number} output_tokens
 * @property {number | null} cost
 * @property {ToolCall[]} tool_calls
 * @property {string[]} warnings  what to know about its result (e.g. citations not verified)
 */

/**
 * @typedef {object} DagEdge  from the bottom centre of the source to the top centre of the target
 * @property {string} source
 * @property {string} target
 * @property {number} x1
 * @property {number} y1
 * @property {number} x2
 * @property {number} y2
 */

/** @typedef {{achieved: boolean, confidence: number, reasoning: string}} Analysis */
/** @typedef {{action: "synthesize" | "replan" | "stop", reason: string}} Decision */

/**
 * @typedef {object} Round
 * @property {number} index
 * @property {string | null} error
 * @property {string[]} warnings  what was fixed on the way (a dependency dropped, a plan repaired)
 * @property {number} width
 * @property {number} height
 * @property {DagNode[]} nodes
 * @property {DagEdge[]} edges
 * @property {Analysis | null} analysis
 * @property {Decision | null} decision
 */

/**
 * @typedef {object} CallRecord  one LLM call
 * @property {string} purpose
 * @property {string} model
 * @property {number | null} round
 * @property {string | null} step_id
 * @property {string | null} level  structured-output level
 * @property {number} retries
 * @property {number} input_tokens
 * @property {number} output_tokens
 * @property {number} latency  seconds
 * @property {number | null} cost
 * @property {string | null} error
 * @property {boolean} stream
 * @property {"ok" | "failed" | "cancelled"} [status]  cancelled: the run moved on before the reply (usage unknown)
 */

/** @typedef {{input_tokens: number, output_tokens: number, requests: number, cost: number | null}} Usage */

/** @typedef {"starting" | "planning" | "executing" | "analyzing" | "synthesizing" | "finished"} RunPhase */

/**
 * @typedef {object} Traits
 * @property {string} run_id  identifies the run: a newer view of the same run hides the older
 * @property {string} goal
 * @property {RunStatus} status
 * @property {RunPhase} phase  what a running run is doing now
 * @property {string} error
 * @property {string} answer  Markdown, grows while streaming
 * @property {boolean} answer_fallback
 * @property {boolean} answer_partial  the user stopped the run: the answer covers what completed
 * @property {boolean} resumable  the run did not end (its kernel died, it was cancelled): it can be resumed
 * @property {Usage} usage
 * @property {Round[]} rounds
 * @property {CallRecord[]} calls
 * @property {number} now  epoch seconds at the last sync: running durations use it, not the browser clock
 * @property {number | null} [started_at]  optional: when the run started (elapsed falls back to the steps)
 */

/** @typedef {import("@anywidget/types").AnyModel<Traits>} Model */

/**
 * @typedef {{type: "stop"} | {type: "cancel"} | {type: "follow_up", text: string} | {type: "retry_now", step: string}
 *   | {type: "resume"} | {type: "restart"}} OutgoingMessage
 */

export {};
