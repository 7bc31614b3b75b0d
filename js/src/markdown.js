// The only path by which LLM text becomes markup: Markdown -> HTML (marked) -> sanitized DOM (DOMPurify).
// Everything else the LLM wrote goes in through textContent.

import DOMPurify from "dompurify";
import { Marked } from "marked";

const marked = new Marked({ gfm: true, breaks: false });

/** @type {import("dompurify").Config & {RETURN_DOM_FRAGMENT: true}} */
const PURIFY = {
  RETURN_DOM_FRAGMENT: true,
  // <style> and style="" would restyle (or overlay) the whole notebook page; forms have no business here.
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "option"],
  FORBID_ATTR: ["style"],
};

let hooked = false;

function addLinkHook() {
  if (hooked) return;
  hooked = true;
  // Links open outside the notebook and cannot reach back into it.
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A" && node.hasAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  });
}

/**
 * Sanitized DOM for a Markdown text; if anything fails, the text itself (inert).
 * @param {string} text
 * @returns {DocumentFragment | Text}
 */
export function markdownFragment(text) {
  try {
    addLinkHook();
    const html = marked.parse(text, { async: false });
    return DOMPurify.sanitize(html, PURIFY);
  } catch (err) {
    console.warn("[dagmagic] markdown rendering failed; showing the text as is", err);
    return document.createTextNode(text);
  }
}

/**
 * Replace `el`'s content with the sanitized rendering of `text`.
 * @param {Element} el
 * @param {string} text
 */
export function renderMarkdown(el, text) {
  el.replaceChildren(markdownFragment(text));
}
