// Pure formatting helpers: locale-independent so output is the same on every machine (tests, CI, users).

/**
 * A finite number or null.
 * @param {unknown} value
 * @returns {number | null}
 */
export function num(value) {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

/**
 * "12,345" (grouping without the locale, which differs between browsers and CI).
 * @param {unknown} value
 */
export function formatInt(value) {
  const n = num(value);
  if (n === null) return "—";
  const sign = n < 0 ? "-" : "";
  return sign + String(Math.round(Math.abs(n))).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/**
 * Compact token counts for tight spaces: 950, 1.2k, 34k, 1.5M.
 * @param {unknown} value
 */
export function formatCompact(value) {
  const n = num(value);
  if (n === null) return "—";
  const abs = Math.abs(n);
  if (abs < 1000) return String(Math.round(n));
  if (abs < 10_000) return `${(n / 1000).toFixed(1)}k`;
  if (abs < 1_000_000) return `${Math.round(n / 1000)}k`;
  return `${(n / 1_000_000).toFixed(1)}M`;
}

/**
 * "$0.0123", or "—" when the cost is unknown (null: a model without a price).
 * @param {unknown} value
 */
export function formatCost(value) {
  const n = num(value);
  if (n === null) return "—";
  return `$${n.toFixed(n >= 100 ? 2 : 4)}`;
}

/**
 * Seconds as "0.4s", "12s", "3m 05s", "1h 02m"; "—" when unknown.
 * @param {unknown} value
 */
export function formatDuration(value) {
  const n = num(value);
  if (n === null || n < 0) return "—";
  if (n < 10) return `${n.toFixed(1)}s`;
  if (n < 60) return `${Math.floor(n)}s`;
  const total = Math.floor(n);
  if (total < 3600) return `${Math.floor(total / 60)}m ${String(total % 60).padStart(2, "0")}s`;
  return `${Math.floor(total / 3600)}h ${String(Math.floor((total % 3600) / 60)).padStart(2, "0")}m`;
}

/**
 * A confidence in [0, 1] as a whole percentage.
 * @param {unknown} value
 */
export function formatPercent(value) {
  const n = num(value);
  return n === null ? "—" : `${Math.round(n * 100)}%`;
}

/**
 * Whitespace collapsed, cut to at most `max` characters with an ellipsis.
 * @param {unknown} text
 * @param {number} max
 */
export function shorten(text, max) {
  const flat = String(text ?? "")
    .replace(/\s+/g, " ")
    .trim();
  if (flat.length <= max) return flat;
  return `${flat.slice(0, Math.max(max - 1, 0)).trimEnd()}…`;
}

/**
 * A coordinate for an SVG attribute: at most two decimals, no float noise, so drawings are byte-identical.
 * @param {unknown} value
 */
export function coord(value) {
  const n = num(value) ?? 0;
  return String(Math.round(n * 100) / 100);
}

/**
 * A model name short enough for a badge: the provider prefix ("openai/") dropped.
 * @param {string | null | undefined} model
 */
export function shortModel(model) {
  if (!model) return "";
  const slash = model.lastIndexOf("/");
  return slash >= 0 ? model.slice(slash + 1) : model;
}

/**
 * Arguments of a tool call as readable JSON; never throws (cycles, BigInt).
 * @param {unknown} value
 */
export function prettyJson(value) {
  try {
    return JSON.stringify(value, null, 2) ?? String(value);
  } catch {
    return String(value);
  }
}
