// The only path by which LLM text becomes markup: Markdown -> HTML (marked) -> sanitized DOM (DOMPurify).
// Everything else the LLM wrote goes in through textContent. Code blocks are highlighted (highlight.js) on the
// sanitized DOM, from their text, and sanitized again.

import DOMPurify from "dompurify";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import python from "highlight.js/lib/languages/python";
import sql from "highlight.js/lib/languages/sql";
import { Marked } from "marked";

// The few languages an answer's code blocks are highlighted in (with their aliases: py, js, sh, ...).
hljs.registerLanguage("python", python);
hljs.registerLanguage("javascript", javascript);
hljs.registerLanguage("json", json);
hljs.registerLanguage("bash", bash);
hljs.registerLanguage("sql", sql);

const marked = new Marked({ gfm: true, breaks: false });

/** @type {import("dompurify").Config & {RETURN_DOM_FRAGMENT: true}} */
const PURIFY = {
  RETURN_DOM_FRAGMENT: true,
  // <style> and style="" would restyle (or overlay) the whole notebook page; forms have no business here.
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "option"],
  FORBID_ATTR: ["style"],
};

/** @type {import("dompurify").Config & {RETURN_DOM_FRAGMENT: true}} */
const HIGHLIGHTED = { RETURN_DOM_FRAGMENT: true, ALLOWED_TAGS: ["span"], ALLOWED_ATTR: ["class"] };

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

/**
 * Highlights the code blocks of rendered (already sanitized) Markdown whose language is one of ours: each
 * block's text is highlighted, and the highlighted markup is sanitized again (only classed spans) before it
 * replaces the block's content. Other blocks stay as they are.
 * @param {Element} root
 */
export function highlightCode(root) {
  for (const code of root.querySelectorAll("pre > code")) {
    const language = /(?:^|\s)language-([\w+-]+)/.exec(code.className)?.[1]?.toLowerCase();
    if (!language || !hljs.getLanguage(language)) continue;
    try {
      const { value } = hljs.highlight(code.textContent ?? "", { language, ignoreIllegals: true });
      code.replaceChildren(DOMPurify.sanitize(value, HIGHLIGHTED));
      code.classList.add("hljs");
      code.setAttribute("data-language", language);
    } catch (err) {
      console.warn("[dagmagic] code highlighting failed; showing the code as is", err);
    }
  }
}
