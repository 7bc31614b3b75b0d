// The compare widget's front end: two runs side by side from the synced comparison (tests/compare_samples.py's,
// saved as compare-sample.json): one row per step pair, the changed pairs marked with their fields, the words that
// differ in <del>/<ins> built as text, deltas coloured, verdicts, answers and calls; a long result expands; a sync
// redraws; the cleanup removes everything.

import { afterEach, describe, expect, it } from "vitest";
import compareWidget, { deltaBadge, diffText } from "../src/compare.js";
import { fakeModel } from "./fixtures.js";
import sample from "./compare-sample.json";

/** @type {Array<() => void>} */
const cleanups = [];
afterEach(() => {
  while (cleanups.length) cleanups.pop()?.();
  document.body.replaceChildren();
});

/** @param {any} model */
function draw(model) {
  const definition = compareWidget();
  definition.initialize({ model });
  const el = document.createElement("div");
  document.body.append(el);
  cleanups.push(definition.render({ model, el }));
  return el;
}

/** @param {(state: any) => void} [change] */
function state(change) {
  const copy = structuredClone(sample);
  change?.(copy);
  return copy;
}

describe("the compare view", () => {
  it("says a front end holds it, and draws both sides' labels, figures and deltas", () => {
    const model = fakeModel(state());
    const el = draw(model);
    expect(model.sent).toContainEqual({ kind: "dagmagic-front-end" });
    const labels = [...el.querySelectorAll(".dagmagic-compare-header thead th")].map((th) => th.textContent);
    expect(labels).toEqual(["run aaaa1111", "", "run bbbb2222"]);
    const tokens = el.querySelector(".dagmagic-compare-header tr[data-row='tokens']");
    expect(tokens?.querySelector(".dagmagic-compare-delta--up")?.textContent).toBe("+200");
    const time = el.querySelector(".dagmagic-compare-header tr[data-row='time']");
    expect(time?.querySelector(".dagmagic-compare-delta--down")?.textContent).toMatch(/^−3/);
    expect(el.querySelector(".dagmagic-compare-header tr[data-row='setting-max_rounds']")?.textContent).toBe(
      "3max rounds5",
    );
    // same pairs show no delta: nothing differs
    expect(el.querySelector("tr[data-change='same'] .dagmagic-compare-delta")).toBeNull();
  });

  it("aligns the steps one pair a row, marks what changed, leaves an empty cell for a step only one side has", () => {
    const el = draw(fakeModel(state()));
    const rows = el.querySelectorAll("tr.dagmagic-compare-pair");
    expect(rows).toHaveLength(13);
    const changed = el.querySelectorAll("tr[data-change='changed']");
    expect(changed).toHaveLength(2);
    expect([...changed[0].querySelectorAll(".dagmagic-compare-field")].map((f) => f.textContent)).toEqual([
      "model",
      "result",
    ]);
    expect(el.querySelector("tr[data-change='removed'] .dagmagic-compare-step--b")?.classList).toContain(
      "dagmagic-compare-step--empty",
    );
    expect(el.querySelector("tr[data-change='added'] .dagmagic-compare-step--a")?.textContent).toBe("not in a");
    expect(el.querySelectorAll("tr[data-change='same']")).toHaveLength(9);
    expect(el.querySelector(".dagmagic-compare-round h4")?.textContent).toContain("13 step pairs, 4 differ");
  });

  it("marks the words that differ as text: <del> in a, <ins> in b, the hostile markup shown, never parsed", () => {
    const el = draw(fakeModel(state()));
    const row = el.querySelectorAll("tr[data-change='changed']")[0];
    expect(row.querySelector(".dagmagic-compare-step--a del")?.textContent).toBe("3000");
    expect(row.querySelector(".dagmagic-compare-step--a ins")).toBeNull();
    const inserted = [...row.querySelectorAll(".dagmagic-compare-step--b ins")].map((e) => e.textContent);
    expect(inserted).toEqual(["3500", " and <img src=x onerror=alert(1)>."]);
    expect(el.querySelector("img")).toBeNull();
    const deltas = row.querySelectorAll(".dagmagic-compare-step--b .dagmagic-compare-delta");
    expect([...deltas].map((d) => d.textContent)).toEqual(["+50 tok", expect.stringMatching(/^\+/), "−0.5s"]);
  });

  it("shows the edited badge, the verdicts, the answers with their differences and the calls per purpose", () => {
    const el = draw(fakeModel(state()));
    expect(el.querySelectorAll(".dagmagic-compare-edited")).toHaveLength(1);
    const verdicts = el.querySelectorAll(".dagmagic-compare-verdict");
    expect(verdicts[1].textContent).toContain("with the metro");
    const answers = el.querySelector(".dagmagic-compare-answers");
    expect(answers?.querySelector("del")?.textContent).toBe("35000");
    expect(answers?.querySelector("ins")?.textContent).toBe("about 38000");
    expect(answers?.querySelector(".dagmagic-compare-rendered strong")?.textContent).toBe("Paris"); // as it reads
    const analyze = el.querySelector(".dagmagic-compare-calls tr[data-purpose='analyze']");
    expect(analyze?.textContent).toBe("1analyze2+1");
    expect(el.querySelector(".dagmagic-compare-calls tr[data-purpose='step'] .dagmagic-compare-delta")).toBeNull();
  });

  it("says which run a side was forked from", () => {
    const el = draw(fakeModel(state((s) => (s.comparisons[0].comparison.b.forked_from = "aaaa1111"))));
    expect(el.querySelector("tr[data-row='forked from']")?.textContent).toBe("—forked fromrun aaaa1111");
    expect(draw(fakeModel(state())).querySelector("tr[data-row='forked from']")).toBeNull();
  });

  it("renders answers without a difference as sanitized Markdown", () => {
    const el = draw(
      fakeModel(
        state((s) => {
          s.comparisons[0].comparison.answer = [];
          s.comparisons[0].comparison.a.answer = "**bold** <script>alert(1)</script>";
        }),
      ),
    );
    const cell = el.querySelector(".dagmagic-compare-answer[data-side='a']");
    expect(cell?.querySelector("strong")?.textContent).toBe("bold");
    expect(cell?.querySelector("script")).toBeNull();
  });

  it("expands a long result on click and on Enter", () => {
    const el = draw(
      fakeModel(
        state((s) => {
          s.comparisons[0].comparison.rounds[0].steps[0].a.result = "long ".repeat(100);
        }),
      ),
    );
    const cell = /** @type {HTMLElement} */ (el.querySelector(".dagmagic-compare-step--long"));
    expect(cell.getAttribute("aria-expanded")).toBe("false");
    cell.click();
    expect(cell.classList).toContain("dagmagic-compare-step--expanded");
    cell.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
    expect(cell.classList).not.toContain("dagmagic-compare-step--expanded");
  });

  it("redraws on a sync, shows it live, picks a case among several, and cleans up", async () => {
    const model = fakeModel(state());
    const el = draw(model);
    const next = state((s) => {
      s.comparisons[0].comparison.rounds[0].steps.pop();
      s.comparisons.push({ title: "eiffel", comparison: structuredClone(s.comparisons[0].comparison) });
      s.comparisons[1].comparison.rounds[0].steps.splice(3);
      s.live = true;
      s.comparisons[0].title = "louvre";
    });
    for (const name of ["comparisons", "live"]) model.set(name, next[name]);
    await new Promise((resolve) => requestAnimationFrame(() => resolve(null)));
    expect(el.querySelectorAll("tr.dagmagic-compare-pair")).toHaveLength(12);
    expect(/** @type {HTMLElement} */ (el.querySelector(".dagmagic-compare-live")).hidden).toBe(false);
    const picker = /** @type {HTMLSelectElement} */ (el.querySelector(".dagmagic-compare-picker"));
    expect(picker.hidden).toBe(false);
    expect([...picker.options].map((o) => o.textContent)).toEqual(["louvre", "eiffel"]);
    picker.value = "1";
    picker.dispatchEvent(new Event("change"));
    expect(el.querySelectorAll("tr.dagmagic-compare-pair")).toHaveLength(3);
    cleanups.pop()?.();
    expect(el.children).toHaveLength(0);
    expect(model.off).toHaveBeenCalled();
  });
});

describe("pieces", () => {
  it("diffText keeps each side's own pieces", () => {
    const pieces = /** @type {const} */ ([
      { op: "same", text: "a " },
      { op: "removed", text: "b" },
      { op: "added", text: "c" },
    ]);
    expect(diffText([...pieces], "a").innerHTML).toBe("a <del>b</del>");
    expect(diffText([...pieces], "b").innerHTML).toBe("a <ins>c</ins>");
  });

  it("deltaBadge signs and colours", () => {
    expect(deltaBadge(-2, String)?.className).toContain("--down");
    expect(deltaBadge(0, String)).toBeNull();
    expect(deltaBadge(0.00001, (value) => value.toFixed(4))).toBeNull(); // shows as zero: no difference to show
    expect(deltaBadge(null, String)).toBeNull();
  });
});
