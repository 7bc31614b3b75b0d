import { describe, expect, it } from "vitest";
import {
  coord,
  formatCompact,
  formatCost,
  formatDuration,
  formatInt,
  formatPercent,
  shorten,
  shortModel,
} from "../src/format.js";

describe("format", () => {
  it("formats numbers without the locale", () => {
    expect(formatInt(1234567)).toBe("1,234,567");
    expect(formatInt(null)).toBe("—");
    expect(formatCompact(950)).toBe("950");
    expect(formatCompact(1830)).toBe("1.8k");
    expect(formatCompact(34_400)).toBe("34k");
    expect(formatCompact(1_500_000)).toBe("1.5M");
  });

  it("formats costs, durations and confidences", () => {
    expect(formatCost(0.0123)).toBe("$0.0123");
    expect(formatCost(null)).toBe("—");
    expect(formatCost(undefined)).toBe("—");
    expect(formatCost(0)).toBe("$0.0000");
    expect(formatDuration(0.44)).toBe("0.4s");
    expect(formatDuration(42.9)).toBe("42s");
    expect(formatDuration(185)).toBe("3m 05s");
    expect(formatDuration(3725)).toBe("1h 02m");
    expect(formatDuration(null)).toBe("—");
    expect(formatPercent(0.853)).toBe("85%");
  });

  it("shortens text, models and coordinates", () => {
    expect(shorten("a  b\n c", 10)).toBe("a b c");
    expect(shorten("abcdefghij", 5)).toBe("abcd…");
    expect(shortModel("openai/gpt-4o")).toBe("gpt-4o");
    expect(shortModel(null)).toBe("");
    expect(coord(0.1 + 0.2)).toBe("0.3");
    expect(coord(12)).toBe("12");
  });
});
