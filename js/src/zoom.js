// A round's graph in its wrapper; past ZOOM_STEPS steps, with zoom buttons (+, −, fit) above a viewport the
// user pans by dragging (or scrolling). The zoom and the view's position are kept per graph across redraws:
// state syncs rebuild a running round's DOM many times a second, and `createZoom(...).apply()` puts each
// rebuilt graph back where the user left it. A drag is no click: the step under the pointer is not selected.

import { h } from "./dom.js";
import { coord } from "./format.js";
import { MIN_SCALE, renderGraph } from "./graph.js";

/** @typedef {import("./types.js").Round} Round */

/** Graphs with more steps than this get the zoom buttons. */
export const ZOOM_STEPS = 8;
const FACTOR = 1.25;
const MIN = 0.5;
const MAX = 4;
const DRAG = 4; // px the pointer moves before a press is a drag

/**
 * A round's graph in its `.dagmagic-graph-wrap`; with a `zoomKey` (what identifies the graph across redraws)
 * and more than ZOOM_STEPS steps, zoomable.
 * @param {Round} round
 * @param {number} now
 * @param {string | null} selected
 * @param {{interactive?: boolean, zoomKey?: string | null}} [options]
 * @returns {HTMLDivElement}
 */
export function graphView(round, now, selected, { interactive = true, zoomKey = null } = {}) {
  const svg = renderGraph(round, now, selected, { interactive });
  if (zoomKey === null || round.nodes.length <= ZOOM_STEPS) return h("div", { class: "dagmagic-graph-wrap" }, [svg]);
  /** @type {(action: string, label: string, text: string) => HTMLButtonElement} */
  const button = (action, label, text) =>
    h(
      "button",
      { type: "button", class: "dagmagic-zoom-button", "data-zoom-action": action, title: label, "aria-label": label },
      [text],
    );
  return h("div", { class: "dagmagic-graph-wrap", "data-zoom-key": zoomKey, "data-zoom": "1" }, [
    h("div", { class: "dagmagic-zoom", role: "toolbar", "aria-label": `Zoom round ${round.index}'s graph` }, [
      button("in", "Zoom in", "+"),
      button("out", "Zoom out", "−"),
      button("fit", "Fit to width", "fit"),
    ]),
    h("div", { class: "dagmagic-graph-pan" }, [svg]),
  ]);
}

/**
 * @typedef {object} ZoomState
 * @property {number} scale  1: the graph fits the width (or has its natural size, if smaller; or its minimum
 *   size, if larger: it scrolls)
 * @property {number} left  the viewport's scroll position
 * @property {number} top
 */

/**
 * Zooming and panning for the graphs under `root`.
 * @param {HTMLElement} root
 * @param {AbortSignal} signal
 */
export function createZoom(root, signal) {
  /** @type {Map<string, ZoomState>} by zoom key */
  const zooms = new Map();
  /** wrappers already showing their zoom (a section kept across redraws keeps its DOM) */
  /** @type {WeakSet<Element>} */
  const shown = new WeakSet();
  /** a drag just ended: the click it makes is not the user's */
  let dragged = false;

  /** @param {string} key */
  const stateOf = (key) => zooms.get(key) ?? { scale: 1, left: 0, top: 0 };

  /**
   * The wrapper of a zoom key now in the DOM (a redraw may have replaced the one a drag started on).
   * @param {string} key
   */
  function wrapOf(key) {
    return [...root.querySelectorAll("[data-zoom-key]")].find((w) => w.getAttribute("data-zoom-key") === key) ?? null;
  }

  /**
   * Shows a wrapper's zoom: the graph's size, the buttons that still work, the position. Zoomed, the graph is
   * `scale` times as wide as it is fitted to the viewport (its natural width, or less when that is narrower);
   * it is sized by its width and height attributes, so no inline style is needed.
   * @param {Element} wrap
   */
  function show(wrap) {
    const key = String(wrap.getAttribute("data-zoom-key"));
    const { scale, left, top } = stateOf(key);
    const svg = wrap.querySelector("svg.dagmagic-graph");
    const pan = wrap.querySelector(".dagmagic-graph-pan");
    if (!svg || !(pan instanceof HTMLElement)) return;
    const [, , natural, tall] = String(svg.getAttribute("viewBox")).split(" ").map(Number);
    if (!(natural > 0 && tall > 0)) return;
    // fitted: as drawn at scale 1 (the viewport's width, between the graph's minimum and natural widths)
    const fitted = pan.clientWidth > 0 ? Math.max(Math.min(pan.clientWidth, natural), natural * MIN_SCALE) : natural;
    const width = scale === 1 ? natural : fitted * scale;
    svg.setAttribute("width", coord(width));
    svg.setAttribute("height", coord((width * tall) / natural));
    wrap.setAttribute("data-zoom", String(Math.round(scale * 1000) / 1000));
    wrap.toggleAttribute("data-zoomed", scale > 1);
    wrap.toggleAttribute("data-zoomed-out", scale < 1);
    for (const b of wrap.querySelectorAll(".dagmagic-zoom-button")) {
      const action = b.getAttribute("data-zoom-action");
      /** @type {HTMLButtonElement} */ (b).disabled =
        (action === "in" && scale >= MAX) || (action === "out" && scale <= MIN) || (action === "fit" && scale === 1);
    }
    pan.scrollLeft = left;
    pan.scrollTop = top;
    shown.add(wrap);
  }

  /** After a redraw: the graphs drawn anew show their zoom. */
  function apply() {
    for (const wrap of root.querySelectorAll("[data-zoom-key]")) if (!shown.has(wrap)) show(wrap);
  }

  /**
   * +, − or fit: the middle of what the viewport shows stays in the middle.
   * @param {Element} button
   */
  function zoom(button) {
    const wrap = button.closest("[data-zoom-key]");
    const pan = wrap?.querySelector(".dagmagic-graph-pan");
    if (!wrap || !(pan instanceof HTMLElement)) return;
    const key = String(wrap.getAttribute("data-zoom-key"));
    const before = stateOf(key);
    const action = button.getAttribute("data-zoom-action");
    const scale =
      action === "in"
        ? Math.min(before.scale * FACTOR, MAX)
        : action === "out"
          ? Math.max(before.scale / FACTOR, MIN)
          : 1;
    const ratio = scale / before.scale;
    const w = pan.clientWidth;
    const hh = pan.clientHeight;
    const left = scale === 1 ? 0 : Math.max((pan.scrollLeft + w / 2) * ratio - w / 2, 0);
    const top = scale === 1 ? 0 : Math.max((pan.scrollTop + hh / 2) * ratio - hh / 2, 0);
    zooms.set(key, { scale: Math.round(scale * 10000) / 10000, left, top });
    show(wrap);
  }

  root.addEventListener(
    "click",
    (event) => {
      if (dragged) {
        // the end of a drag, not a click on what is under the pointer
        dragged = false;
        event.stopPropagation();
        event.preventDefault();
        return;
      }
      const button = /** @type {Element} */ (event.target).closest?.(".dagmagic-zoom-button");
      if (button && root.contains(button)) zoom(button);
    },
    { signal, capture: true },
  );

  // the position the user scrolled to (by wheel, keys, scroll bars or a drag)
  root.addEventListener(
    "scroll",
    (event) => {
      const pan = event.target;
      if (!(pan instanceof HTMLElement) || !pan.classList.contains("dagmagic-graph-pan")) return;
      const key = pan.parentElement?.getAttribute("data-zoom-key");
      if (!key || !shown.has(/** @type {Element} */ (pan.parentElement))) return;
      zooms.set(key, { ...stateOf(key), left: pan.scrollLeft, top: pan.scrollTop });
    },
    { signal, capture: true },
  );

  // drag to pan (the mouse's main button; touch screens scroll the viewport natively)
  root.addEventListener(
    "mousedown",
    (event) => {
      dragged = false;
      const target = /** @type {Element} */ (event.target);
      const pan = target.closest?.(".dagmagic-graph-pan");
      const key = pan?.parentElement?.getAttribute("data-zoom-key");
      if (event.button !== 0 || !(pan instanceof HTMLElement) || !key) return;
      const start = { x: event.clientX, y: event.clientY, left: pan.scrollLeft, top: pan.scrollTop };
      let moving = false;
      const drag = new AbortController();
      const stop = () => drag.abort();
      signal.addEventListener("abort", stop, { signal: drag.signal });
      window.addEventListener(
        "mousemove",
        (move) => {
          const dx = move.clientX - start.x;
          const dy = move.clientY - start.y;
          if (!moving && Math.hypot(dx, dy) < DRAG) return;
          moving = true;
          move.preventDefault(); // no text selection
          const now = wrapOf(key)?.querySelector(".dagmagic-graph-pan");
          if (!(now instanceof HTMLElement)) return;
          now.setAttribute("data-dragging", "");
          now.scrollLeft = start.left - dx;
          now.scrollTop = start.top - dy;
          zooms.set(key, { ...stateOf(key), left: now.scrollLeft, top: now.scrollTop });
        },
        { signal: drag.signal },
      );
      window.addEventListener(
        "mouseup",
        () => {
          stop();
          wrapOf(key)?.querySelector(".dagmagic-graph-pan")?.removeAttribute("data-dragging");
          if (!moving) return;
          dragged = true; // the click that follows (if the button goes up over the graph) is the drag's
          setTimeout(() => (dragged = false), 0);
        },
        { signal: drag.signal },
      );
    },
    { signal },
  );

  return { apply, zooms };
}
