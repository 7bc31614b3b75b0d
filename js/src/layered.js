// The layers of a round's steps, and a plain layered layout of them: what layout.js draws should dagre throw.
// A step's layer is its depth (the longest chain of its dependencies in the round); each layer is a row, its
// steps ordered by the mean position of their dependencies in the rows above (ties in plan order), rows centred.
// That order is the static view's, and dagre is held to it (layout.js).
// Deterministic, and every step gets a box of its own (even two steps that share an id).

/** @typedef {import("./types.js").Round} Round */

/**
 * Each step's depth: 0 without dependencies in the round, else one more than its deepest dependency's.
 * @param {Round} round
 * @returns {Map<string, number>}
 */
export function layers(round) {
  const deps = new Map(round.nodes.map((n) => [n.id, n.dependencies]));
  /** @type {Map<string, number>} */
  const depth = new Map();
  /** @type {Set<string>} */
  const visiting = new Set();
  /** @param {string} id @returns {number} */
  const visit = (id) => {
    const known = depth.get(id);
    if (known !== undefined) return known;
    if (visiting.has(id)) return 0; // a cycle (Python forbids them): cut it here
    visiting.add(id);
    let d = 0;
    for (const dep of deps.get(id) ?? []) if (dep !== id && deps.has(dep)) d = Math.max(d, visit(dep) + 1);
    visiting.delete(id);
    depth.set(id, d);
    return d;
  };
  for (const n of round.nodes) visit(n.id);
  return depth;
}

/**
 * The steps of each layer, left to right: by the mean position of their dependencies in the rows above, ties in
 * plan order (the static view's order, and what layout.js asks dagre for).
 * @param {Round} round
 * @returns {number[][]} positions in `round.nodes`, per layer
 */
export function orderedRows(round) {
  const depth = layers(round);
  /** @type {number[][]} */
  const rows = [];
  round.nodes.forEach((n, i) => (rows[depth.get(n.id) ?? 0] ??= []).push(i));
  /** @type {Map<string, number>} where each step sits in its row (the first of an id, should two share it) */
  const place = new Map();
  return Array.from(rows, (row = []) => {
    const key = (/** @type {number} */ i) => {
      const placed = round.nodes[i].dependencies.map((d) => place.get(d)).filter((p) => p !== undefined);
      return placed.length ? placed.reduce((a, b) => a + b, 0) / placed.length : Infinity;
    };
    const sorted = [...row].sort((a, b) => key(a) - key(b) || a - b);
    sorted.forEach((i, at) => place.has(round.nodes[i].id) || place.set(round.nodes[i].id, at));
    return sorted;
  });
}

/**
 * @typedef {object} Spacing
 * @property {number} w  a box's width
 * @property {number} h  its height
 * @property {number} gapX  between two boxes of a row
 * @property {number} gapY  between two rows
 * @property {number} margin  around the drawing
 */

/**
 * The boxes of the round's steps, in the round's order, and the size of the drawing.
 * @param {Round} round
 * @param {Spacing} spacing
 * @returns {{nodes: Array<{id: string, layer: number, x: number, y: number, w: number, h: number}>, width: number, height: number}}
 */
export function layeredBoxes(round, { w, h, gapX, gapY, margin }) {
  const ordered = orderedRows(round);
  const widest = Math.max(0, ...ordered.map((row) => row.length));
  const width = margin * 2 + widest * w + Math.max(widest - 1, 0) * gapX;
  const height = margin * 2 + ordered.length * h + Math.max(ordered.length - 1, 0) * gapY;
  const boxes = new Array(round.nodes.length);
  ordered.forEach((row, layer) => {
    const left = (width - (row.length * w + Math.max(row.length - 1, 0) * gapX)) / 2;
    row.forEach((i, at) => {
      const x = left + at * (w + gapX);
      boxes[i] = { id: round.nodes[i].id, layer, x, y: margin + layer * (h + gapY), w, h };
    });
  });
  return { nodes: boxes, width, height };
}
