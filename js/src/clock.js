// The display clock. Python syncs `now` (its clock, epoch seconds) with every state, but between syncs, a model
// call of eight seconds say, nothing arrives: durations read from `now` alone would freeze and look like a hang.
// While the run runs, the clock carries the last synced `now` forward by the browser time since that sync
// arrived, as of the latest tick of the timer that redraws what shows time. Between two ticks it stands still,
// so every redraw in between (a click, a sync of something else) shows the same time as the tick did.

/** @typedef {import("./types.js").Traits} Traits */

/** How often the parts that show time are redrawn while the run runs. */
export const TICK_MS = 500;

/** A backward step of the clock smaller than this, in seconds (latency jitter between syncs), is not shown. */
const JITTER = 1;

/** Milliseconds from a monotonic browser clock (a change of the system time does not move it). */
function browserMs() {
  return typeof performance !== "undefined" && typeof performance.now === "function" ? performance.now() : Date.now();
}

/**
 * Whether the run is moving, so its clock runs: a run that is running, except one read back after its kernel
 * died (it says it can be resumed), whose last `now` is the last word.
 * @param {Traits} state
 */
export function clockRuns(state) {
  return state.status === "running" && !state.resumable;
}

export function createClock() {
  let synced = 0;
  let arrived = 0;
  let ticked = 0;
  let shown = 0;

  return {
    /**
     * A sync arrived with Python's `now`.
     * @param {number} now
     */
    sync(now) {
      synced = now;
      arrived = browserMs();
      ticked = arrived;
    },

    /** The timer ticked: the clock moves on to this moment. */
    tick() {
      ticked = browserMs();
    },

    /**
     * The time to show: Python's `now` at the last sync plus the browser time from its arrival to the latest
     * tick, while the run runs; `now` itself once it ended (or when it is unknown).
     * @param {Traits} state
     * @returns {number}
     */
    read(state) {
      if (!clockRuns(state) || !synced) return state.now;
      const t = synced + Math.max(ticked - arrived, 0) / 1000;
      // a sync that came quicker than the one before would step the clock back a little: hold it instead
      if (t >= shown || shown - t > JITTER) shown = t;
      return shown;
    },
  };
}
