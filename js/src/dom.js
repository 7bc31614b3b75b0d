// Tiny DOM helpers. Text only ever goes in through textContent; the one way to insert HTML is markdown.js.

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * @typedef {Record<string, string | number | boolean | null | undefined>} Attrs
 * @typedef {Node | string | null | undefined | false} Child
 */

/**
 * An HTML element with attributes and children (strings become text nodes).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Attrs} [attrs]
 * @param {Child[]} [children]
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attrs = {}, children = []) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/**
 * An SVG element with attributes and children.
 * @template {keyof SVGElementTagNameMap} K
 * @param {K} tag
 * @param {Attrs} [attrs]
 * @param {Child[]} [children]
 * @returns {SVGElementTagNameMap[K]}
 */
export function s(tag, attrs = {}, children = []) {
  const el = /** @type {SVGElementTagNameMap[K]} */ (document.createElementNS(SVG_NS, tag));
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/**
 * Attributes in insertion order (deterministic markup); false/null/undefined are left out, true is "".
 * @param {Element} el
 * @param {Attrs} attrs
 */
function setAttrs(el, attrs) {
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    el.setAttribute(name, value === true ? "" : String(value));
  }
}

/**
 * @param {Element} el
 * @param {Child[]} children
 */
function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
}

/**
 * Console output, always prefixed so users can filter it.
 */
export const log = {
  /** @param {...unknown} args */
  debug: (...args) => console.debug("[dagmagic]", ...args),
  /** @param {...unknown} args */
  warn: (...args) => console.warn("[dagmagic]", ...args),
  /** @param {...unknown} args */
  error: (...args) => console.error("[dagmagic]", ...args),
};
