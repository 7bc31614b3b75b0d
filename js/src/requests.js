// What a view asks of the kernel, and the answers. Each request carries an id, and Python answers that id once,
// a refusal included: the answer reaches only the part that asked (its button works again, its message shows
// where the user acted). The wire is anywidget's command protocol, the one `anywidget.experimental.command`
// and the front end's `invoke` speak:
//
//   {kind: "anywidget-command", id, name, msg}  ->  {kind: "anywidget-command-response", id, response}
//
// with `response` {ok: true, value} or {ok: false, error}. It is spoken here rather than through the host's
// `experimental.invoke`: that one gives up after 3 s by default (a request sent while a cell runs on ipykernel 6
// is answered only when the cell ends), and not every host hands it to `render`.
//
// One tracker per view: what it sent and is waiting for, by id, and by what each request is about (its key), so
// a part draws its button busy while Python has not answered, and, when asked, until the state shows the effect.

import { log } from "./dom.js";

const REQUEST = "anywidget-command";
const ANSWER = "anywidget-command-response";

/**
 * @typedef {object} RequestOptions
 * @property {string} [key]  what it is about (default: its name): `busy(key)` while it waits
 * @property {() => boolean} [until]  once Python took it, it stays busy until this says the state shows it (the
 *   answer comes before the state sync that shows the effect)
 * @property {number} [timeout]  ms to wait for the answer; 0 (the default) waits as long as it takes
 */

/**
 * @typedef {object} Waiting
 * @property {string} key
 * @property {(value: unknown) => void} resolve
 * @property {(error: Error) => void} reject
 * @property {ReturnType<typeof setTimeout> | null} timer
 */

/**
 * @typedef {object} Requests
 * @property {(name: string, msg?: Record<string, unknown>, options?: RequestOptions) => Promise<unknown>} request
 *   sends one; resolves with the answer's value, rejects with Python's refusal (an Error whose message is its text)
 * @property {(key: string) => boolean} busy  a request about `key` waits for its answer, or for its effect
 * @property {() => void} dispose  stops listening; answers still to come are dropped
 */

/**
 * @param {import("./types.js").Model} model
 * @returns {Requests}
 */
export function createRequests(model) {
  const prefix = viewPrefix();
  let count = 0;
  /** @type {Map<string, Waiting>} by id */
  const waiting = new Map();
  /** @type {Map<string, () => boolean>} keys Python took and whose effect the state does not show yet */
  const held = new Map();

  /** @param {any} msg */
  function onMessage(msg) {
    if (!msg || msg.kind !== ANSWER) {
      log.debug("ignored message", msg);
      return;
    }
    const entry = waiting.get(String(msg.id));
    if (!entry) return; // another view's, or given up on
    settle(String(msg.id));
    const response = msg.response ?? {};
    if (response.ok === true) entry.resolve(response.value ?? null);
    else entry.reject(new Error(String(response.error || "The kernel refused without saying why.")));
  }
  model.on("msg:custom", onMessage);

  /** @param {string} id */
  function settle(id) {
    const entry = waiting.get(id);
    if (entry?.timer) clearTimeout(entry.timer);
    waiting.delete(id);
  }

  /** @type {Requests["request"]} */
  function request(name, msg = {}, { key = name, until, timeout = 0 } = {}) {
    const id = `${prefix}-${++count}`;
    return new Promise((resolve, reject) => {
      /** @type {Waiting} */
      const entry = {
        key,
        resolve: (value) => {
          if (until && !until()) held.set(key, until);
          resolve(value);
        },
        reject: (error) => {
          log.warn(`the kernel refused ${name}:`, error.message);
          reject(error);
        },
        timer: null,
      };
      held.delete(key);
      waiting.set(id, entry);
      if (timeout > 0) {
        entry.timer = setTimeout(() => {
          settle(id);
          entry.reject(new Error(`The kernel did not answer within ${Math.round(timeout / 1000)} s; try again.`));
        }, timeout);
      }
      try {
        model.send({ kind: REQUEST, id, name, msg });
      } catch (err) {
        settle(id);
        entry.reject(new Error(`Could not reach the kernel: ${err instanceof Error ? err.message : String(err)}`));
      }
    });
  }

  /** @param {string} key */
  function busy(key) {
    for (const entry of waiting.values()) if (entry.key === key) return true;
    const until = held.get(key);
    if (!until) return false;
    if (!until()) return true;
    held.delete(key);
    return false;
  }

  function dispose() {
    model.off("msg:custom", onMessage);
    for (const id of [...waiting.keys()]) settle(id);
    held.clear();
  }

  return { request, busy, dispose };
}

/** An id prefix no other view on the page uses: the answers of every view's requests come to each of them. */
function viewPrefix() {
  const random = globalThis.crypto?.randomUUID?.() ?? `${Date.now().toString(36)}${Math.random().toString(36)}`;
  return `dagmagic-${random.slice(0, 13)}`;
}
