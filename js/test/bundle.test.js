// The committed bundle itself (what the notebook loads), not just the sources: minified, with its own copies
// of marked and DOMPurify. CI runs `npm run build` first, so this checks the fresh bundle.
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { fakeModel, nextRedraw, sampleState } from "./fixtures.js";

const bundle = resolve(__dirname, "../../dagmagic/static/widget.js");

describe.runIf(existsSync(bundle))("bundle", () => {
  it("renders, updates, sanitizes and cleans up", async () => {
    const widget = (await import(/* @vite-ignore */ pathToFileURL(bundle).href)).default();
    const model = fakeModel(sampleState());
    const el = document.createElement("div");
    const dispose = widget.initialize({ model });
    const cleanup = widget.render({ model, el });
    expect(el.querySelectorAll(".dagmagic-node").length).toBe(5);
    model.set("answer", 'ok <script>alert(1)</script><img src=x onerror="alert(1)">');
    await nextRedraw();
    expect(el.querySelector(".dagmagic-answer-body")?.textContent).toContain("<script>alert(1)</script>"); // as text
    expect(el.querySelector("script, [onerror]")).toBeNull();
    cleanup();
    dispose();
    expect(model.listenerCount()).toBe(0);
  });
});

const experimentBundle = resolve(__dirname, "../../dagmagic/static/experiment.js");

describe.runIf(existsSync(experimentBundle))("the experiment grid's bundle", () => {
  it("renders a grid whose texts stay text, and cleans up", async () => {
    const widget = (await import(/* @vite-ignore */ pathToFileURL(experimentBundle).href)).default();
    const model = fakeModel({
      name: "towns",
      configs: ["a"],
      cases: [["c1", '<img src=x onerror="alert(1)">']],
      cells: [[0, 0, "done", 1, null, 1.5]],
      score_column: "s",
      score_columns: ["s"],
      counts: { total: 1, ended: 1 },
      summary_header: [],
      summary_rows: [],
      opened: null,
    });
    const el = document.createElement("div");
    widget.initialize({ model });
    const cleanup = widget.render({ model, el });
    expect(el.querySelector("td")?.textContent).toBe("✓ done · 1.00 · 1.5s");
    expect(el.querySelector("img, [onerror]")).toBeNull();
    cleanup();
    expect(model.listenerCount()).toBe(0);
  });
});
