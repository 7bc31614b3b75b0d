// The only path by which LLM text becomes markup: Markdown -> HTML (marked; raw HTML escaped, images as links)
// -> sanitized DOM (DOMPurify, an allowlist of plain tags). Everything else the LLM wrote goes in through
// textContent. Code blocks are highlighted (highlight.js) on the sanitized DOM, from their text, and sanitized again.

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

/** @param {string} text */
const escapeHtml = (text) =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

/** The only link targets kept: absolute http(s) and mailto (no javascript:, data:, or paths on the Jupyter server). */
const SAFE_URL = /^(?:https?:\/\/|mailto:)/i;

// A model's output is untrusted (a prompt-injected model writes payloads): raw HTML in it is shown as the text it
// is, never parsed; an image is never fetched (that would leak whatever its URL carries) but shown as a link
// "[image: alt]" to its address, or as that text alone when the address is not http(s). Plain text, not an emoji:
// not every system has a font for one.
const marked = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    html: ({ text }) => escapeHtml(text),
    image: ({ href, text }) =>
      SAFE_URL.test(href.trim())
        ? `<a href="${escapeHtml(href.trim())}" class="dagmagic-image-link">[image: ${escapeHtml(text || href)}]</a>`
        : `[image: ${escapeHtml(text)}]`,
  },
});

/** @type {import("dompurify").Config & {RETURN_DOM_FRAGMENT: true}} */
const PURIFY = {
  RETURN_DOM_FRAGMENT: true,
  // An allowlist of plain tags: nothing that fetches (img, picture, source, video, audio, iframe, object, embed,
  // link, input, svg, math), runs, restyles the page (style, style="") or submits (form, button).
  ALLOWED_TAGS: [
    "a", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "li", "ol",
    "p", "pre", "s", "span", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
  ], // prettier-ignore
  ALLOWED_ATTR: ["href", "title", "align", "class", "start"],
  ALLOWED_URI_REGEXP: SAFE_URL,
  // attributes that hold no address: DOMPurify would test their values against ALLOWED_URI_REGEXP and drop them
  ADD_URI_SAFE_ATTR: ["align", "start"],
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
};

/** @type {import("dompurify").Config & {RETURN_DOM_FRAGMENT: true}} */
const HIGHLIGHTED = { RETURN_DOM_FRAGMENT: true, ALLOWED_TAGS: ["span"], ALLOWED_ATTR: ["class"] };

let hooked = false;

function addLinkHook() {
  if (hooked) return;
  hooked = true;
  // Links open outside the notebook, cannot reach back into it, and tell nobody where they came from.
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "TH" || node.tagName === "TD") {
      keepAlignment(node);
      return;
    }
    if (node.tagName !== "A") return;
    const href = node.getAttribute("href");
    if (href === null || !SAFE_URL.test(href)) {
      node.removeAttribute("href");
      return;
    }
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  });
}

/** The column alignments a Markdown table can ask for (`:--`, `:-:`, `--:`). */
const ALIGNMENTS = new Set(["left", "center", "right"]);

/**
 * A table cell's Markdown alignment as a class of ours: the `align` attribute marked writes loses to any CSS
 * `text-align` (JupyterLab right-aligns the cells of HTML outputs), and no style attribute is let through.
 * @param {Element} cell
 */
function keepAlignment(cell) {
  const align = cell.getAttribute("align")?.toLowerCase() ?? "";
  cell.removeAttribute("align");
  if (ALIGNMENTS.has(align)) cell.setAttribute("class", `dagmagic-align-${align}`);
  else cell.removeAttribute("class");
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
    const fragment = DOMPurify.sanitize(html, PURIFY);
    // a link whose target was dropped (javascript:, a relative path) is only its text, not a dead link
    for (const dead of fragment.querySelectorAll("a:not([href])")) dead.replaceWith(...dead.childNodes);
    return fragment;
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
