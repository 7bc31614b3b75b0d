// The state contract synced from Python (traits), as JSDoc types. Nothing here runs.

/** @typedef {"running" | "done" | "failed" | "cancelled"} RunStatus */
/**
 * paused: stopped at a breakpoint, before it runs (its `paused_messages` and `paused_tools` say what it is about to do)
 * @typedef {"pending" | "queued" | "running" | "retrying" | "paused" | "completed" | "failed" | "skipped" | "cancelled"} StepStatus
 */

/**
 * @typedef {object} ToolCall
 * @property {string} name
 * @property {Record<string, unknown>} arguments
 * @property {string} observation  capped by Python
 * @property {string | null} error
 * @property {number | null} duration  seconds
 * @property {number | null} [turn]  the step's model turn that asked for it (1: its first); 0: the executor called it
 *   directly (a tool step); missing from older kernels
 */

/**
 * @typedef {object} DagNode
 * @property {string} id
 * @property {string} task
 * @property {StepStatus} status
 * @property {string[]} dependencies  may name earlier rounds' steps ("r1.s2"); the browser lays the round out
 *   from them (layout.js): Python sends no coordinates
 * @property {string | null} model
 * @property {string | null} tool_hint
 * @property {string | null} model_hint
 * @property {Record<string, unknown> | null} [tool_args]  a tool step's arguments as the planner wrote them ("$s1":
 *   step s1's result): the step is one direct call of its `tool_hint` tool, no LLM; null (or missing, in older
 *   states): an agent runs the step
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
 * @property {PausedMessage[] | null} paused_messages  while paused: the exact messages it is about to send
 * @property {string[]} paused_tools  while paused: the names of the tools it will be offered
 * @property {SubRun | null} subrun  a composite step, planned and run as a nested DAG (null for a plain step;
 *   missing in older states)
 * @property {number | null} reused_from  a re-run round carried this step over, not running it again: the round
 *   where it ran (null otherwise, and in older states)
 * @property {boolean} edited  its result is the user's, not a model's ("what if this step had said…": no call made;
 *   false in older states)
 */

/**
 * The nested run of a composite step: its rounds have the same shape as the run's own (their steps may be
 * composite too), and its answer becomes the step's result.
 * @typedef {object} SubRun
 * @property {RunStatus} status
 * @property {string} answer  plain text here (the step's result shows it rendered)
 * @property {string} error  empty unless it failed
 * @property {Round[]} rounds
 */

/** @typedef {{role: string, content: string}} PausedMessage */

/** @typedef {{achieved: boolean, confidence: number, reasoning: string}} Analysis */
/**
 * @typedef {{action: "synthesize" | "replan" | "stop", reason: string, partial?: boolean}} Decision  `partial`: the
 *   answer that follows covers only what completed (the user stopped the run, a model stopped answering, the budget
 *   was spent), whatever the verdict found
 */

/** @typedef {"pending" | "approved" | "rejected"} Approval */
/** @typedef {"task" | "result" | "status" | "dependencies" | "model"} DiffField */

/**
 * @typedef {object} StepDiff  how a step differs from the round compared with (steps matched by what they are)
 * @property {string} id  its id in round `round`
 * @property {"added" | "removed" | "changed" | "reused"} change  reused: an earlier result the round uses (`r1.s3`)
 * @property {DiffField[]} fields  what changed (empty unless `change` is "changed")
 * @property {number | null} round  the round the step is in (null from older kernels: the compared rounds)
 * @property {string | null} was  a changed step's id in the earlier round, when the replan renumbered it
 */

/**
 * @typedef {object} PlanCut  the planner wrote more steps than plan_max_steps allows: only the first ran
 * @property {number} planned
 * @property {number} kept
 * @property {string[]} dropped  the dropped steps' tasks
 */

/**
 * @typedef {object} Round
 * @property {number} index
 * @property {string | null} error
 * @property {string[]} warnings  what was fixed on the way (a dependency dropped, a plan repaired)
 * @property {DagNode[]} nodes  in plan order
 * @property {Analysis | null} analysis
 * @property {Decision | null} decision
 * @property {number | null} rerun_of  a re-run round: the round whose step it re-ran
 * @property {string | null} rerun_step  ...and that step's id
 * @property {boolean} what_if  a re-run round that continued from round `rerun_of` with step `rerun_step`'s result
 *   edited by the user (its dependents ran again); false in older states
 * @property {Approval | null} approval  the plan's approval, when the run asks for one
 * @property {StepDiff[] | null} diff  a re-run round: what differs from round `rerun_of`
 * @property {number | null} [diff_base]  the round `diff` compares with (the re-run one, or for a follow-up's
 *   round the round before)
 * @property {string[]} [follow_ups]  the user's follow-ups this round's plan was the first to see
 * @property {string[]} [answered_follow_ups]  follow-ups that came after its plan and that its verdict and answer
 *   took into account, no new round following
 * @property {PlanCut | null} [plan_cut]  its plan was cut to plan_max_steps
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
 * @property {number} [index]  its position in the run's calls, stable (what `call_detail` asks for); missing from
 *   older kernels
 * @property {number | null} [started_at]  epoch seconds when it was sent
 * @property {boolean} [cached]  answered from the response cache: no provider was called, cost 0
 */

/**
 * @typedef {object} Usage
 * @property {number} input_tokens
 * @property {number} output_tokens
 * @property {number} requests
 * @property {number | null} cost
 * @property {number} cached_requests  of `requests`, those answered from the response cache (no call, cost 0)
 * @property {number | null} saved_cost  what the cached requests cost when first answered (null: unknown)
 */

/**
 * @typedef {object} LiveCall  an LLM call sent and not ended yet
 * @property {string} purpose
 * @property {string} model
 * @property {number | null} round
 * @property {string | null} step_id
 * @property {number} started_at  epoch seconds when it was sent
 * @property {number} tokens  pieces of its reply so far (about a token each); 0 before the first
 * @property {boolean} stream  whether pieces will come (a call not streamed only ends)
 */

/**
 * @typedef {"starting" | "planning" | "awaiting_approval" | "executing" | "analyzing" | "synthesizing" | "finished"}
 *   RunPhase
 */

/**
 * @typedef {object} Traits
 * @property {string} run_id  identifies the run: a newer view of the same run hides the older
 * @property {string} goal
 * @property {RunStatus} status
 * @property {RunPhase} phase  what a running run is doing now
 * @property {string} error
 * @property {Divergence | null} [divergence]  a replay that left its recording: where, and what changed (shown in
 *   place of `error`; missing from older kernels)
 * @property {string[]} warnings  what to know about the whole run (not saved, code without a sandbox, a silent model)
 * @property {string} answer  Markdown, grows while streaming
 * @property {boolean} answer_fallback
 * @property {boolean} answer_partial  the user stopped the run: the answer covers what completed
 * @property {boolean} answer_unreached  the run ended without reaching the goal: the answer says what is missing
 * @property {boolean} resumable  the run did not end (its kernel died, it was cancelled): it can be resumed
 * @property {boolean} can_rerun  the run ended and a step of its latest round can be re-run here
 * @property {Usage} usage
 * @property {Round[]} rounds
 * @property {CallRecord[]} calls
 * @property {LiveCall[]} [live_calls]  calls under way, oldest first (missing from older kernels)
 * @property {number} now  epoch seconds at the last sync: running durations use it, not the browser clock
 * @property {number | null} [started_at]  optional: when the run started (elapsed falls back to the steps)
 * @property {number | null} phase_since  epoch seconds when the run entered its current phase (null from older
 *   kernels)
 * @property {boolean} stopped_by_user  the user pressed Stop: the ended run says so
 * @property {number} idle  seconds the run stood ended before it went on (a re-run): not part of its elapsed time
 * @property {string | null} [comparison]  a widget reference to the compare widget of two rounds ("Compare with
 *   round N"), or null (missing from older kernels)
 * @property {number} [comparison_round]  the round it shows under (0: none)
 * @property {string} [comparison_label]  "round 1 vs round 2"
 * @property {string} [forked]  where a fork comes from ("fork of run 3f2a… at r1.s2"; "" for a run of its own)
 * @property {string} [detached]  where a run on Temporal's workers runs ("" for a run driven in its kernel)
 */

/**
 * Where a replayed run left its recording: the first model call the recording had no answer for.
 * @typedef {object} Divergence
 * @property {string} headline  "diverged from the recording at the 'plan' call in round 1"
 * @property {string} reason  why, with the closest recorded call and a unified diff (lines starting "-", "+")
 */

/** @typedef {import("@anywidget/types").AnyModel<Traits>} Model */

/**
 * A step of a plan the user edited before approving it.
 * @typedef {object} PlanStep
 * @property {string} id
 * @property {string} task
 * @property {string[]} dependencies
 * @property {string | null} tool_hint
 * @property {string | null} model_hint
 * @property {Record<string, unknown>} [tool_args]  a tool step's arguments, as planned (kept while its tool hint is)
 */

/**
 * What the front end asks of Python: requests in anywidget's command protocol (requests.js), each answered once
 * with its id. A `task` of null keeps the step's task; a `plan` of null approves the plan unedited.
 *
 *   stop {} · cancel {} · follow_up {text} · retry_now {step} · resume {} · restart {}
 *   rerun {step, task} · what_if {step, result} · compare_rounds {a, b}
 *   approve {plan: {steps: PlanStep[]} | null} · reject {feedback}
 *   continue {step, task} · step {step, task} · skip {step}
 *   call_detail {index}  -> CallDetail
 *   full_text {round, step, field: "result"} | {round, step, field: "observation", call}  -> {text}: the whole of
 *     a text Python cut ("… (N more characters)"), `call` the tool call's position in `tool_calls`
 */

/**
 * Python's answer to `call_detail`: one LLM call's messages and reply (the synced `calls` keep only their
 * numbers); texts are capped by Python.
 * @typedef {object} CallDetail
 * @property {number} index
 * @property {PausedMessage[]} messages  what was sent, in order
 * @property {string} reply
 * @property {string[]} tool_calls  each as JSON text
 * @property {string} error  empty unless it failed
 */

export {};
