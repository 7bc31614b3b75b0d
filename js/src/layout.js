// Where a round's boxes and edges go, computed in the browser by dagre (a layered layout: ranks, crossing
// reduction, coordinates) from the steps and their `dependencies`. A step's rank is its depth (the steps
// without dependencies at the top, the steps that can run together side by side). Dependencies on an earlier
// round's steps ("r1.s2") become small ghost boxes just above the steps that use them. Should dagre throw,
// the round is drawn in plain layers (layered.js), without ghosts. Python sends no coordinates.
//
// Deterministic: the same steps and dependencies give the same numbers (dagre has no randomness; the names
// it makes up for its dummy nodes never decide an order). Layouts are cached by their input (a memo: the same
// key always gives the same layout, whichever widget asks), so the many redraws of a running round do not lay
// it out again.
//
// Edges follow dagre's route: straight down through each rank an edge crosses (at the x dagre gave its dummy
// node there), with an S-curve in each gap between two ranks, on a track of its own. The gaps hold no boxes
// and a rank is crossed where dagre kept room, so no edge goes through a box it does not connect.

/*! @dagrejs/dagre (with the @dagrejs/graphlib its build includes), MIT License:

Copyright (c) 2012-2014 Chris Pettitt

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in
all copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
THE SOFTWARE.
*/
import { graphlib, layout as dagreLayout } from "@dagrejs/dagre";
import { log } from "./dom.js";
import { num } from "./format.js";
import { layeredBoxes, layers, orderedRows } from "./layered.js";

/** @typedef {import("./types.js").Round} Round */

export const NODE_W = 200;
export const NODE_H = 64;
export const GHOST_H = 22;
export const ARROW = 6; // arrowhead length, px
const MARGIN = 12;
const NODE_SEP = 28;
const RANK_SEP = 44;
const EDGE_SEP = 14;
const END_SPREAD = 16; // apart, px, the ends of the edges that leave (or reach) one box
const CACHE = 64;

/**
 * @typedef {object} Box  top-left corner and size
 * @property {number} x
 * @property {number} y
 * @property {number} w
 * @property {number} h
 */

/**
 * @typedef {Box & {id: string, layer: number}} NodeBox  a step's box; layer: its depth among the round's steps
 * @typedef {Box & {id: string}} GhostBox  an earlier round's step ("r1.s2") a step of this round uses
 */

/**
 * An edge as drawn: `d` ends where the arrowhead starts; the arrowhead's tip is (`tipX`, `tipY`).
 * @typedef {object} EdgePath
 * @property {string} source
 * @property {string} target
 * @property {boolean} ghost  from an earlier round's step
 * @property {string} d  SVG path data
 * @property {number} tipX
 * @property {number} tipY
 */

/**
 * @typedef {object} Layout
 * @property {number} width
 * @property {number} height
 * @property {NodeBox[]} nodes  in the round's order
 * @property {GhostBox[]} ghosts
 * @property {EdgePath[]} edges  by target, then source (ids sorted), ghost edges last
 * @property {boolean} fallback  laid out in plain layers (dagre failed)
 */

/** @typedef {{x: number, y: number}} Point */
/** @typedef {{top: number, bottom: number, mid: number}} Band  a rank: what its boxes span, its middle */
/**
 * An edge being routed: its ends, dagre's points, the ranks it crosses (where), then where it leaves and reaches.
 * @typedef {object} Route
 * @property {{source: string, target: string, ghost: boolean}} link
 * @property {Box} from
 * @property {Box} to
 * @property {Point[]} points
 * @property {Array<{x: number, band: Band}>} crossings
 * @property {number} [startX]
 * @property {number} [endX]
 */

/** @type {Map<string, Layout>} the latest layouts, by the steps and dependencies they were laid out from */
const cache = new Map();

/**
 * The round's layout, from the cache when its steps and dependencies were laid out before.
 * @param {Round} round
 * @returns {Layout}
 */
export function layoutRound(round) {
  const key = JSON.stringify(round.nodes.map((n) => [n.id, n.dependencies]));
  const hit = cache.get(key);
  if (hit) return hit;
  let laid;
  try {
    laid = computeLayout(round);
  } catch (error) {
    log.warn("layout failed; drawing the steps in plain layers", error); // once: the fallback is cached too
    laid = fallbackLayout(round);
  }
  if (cache.size >= CACHE) cache.delete(/** @type {string} */ (cache.keys().next().value));
  cache.set(key, laid);
  return laid;
}

/**
 * dagre's layout of the round. Its graph's node names are prefixed ("n:" a step, "g:" a ghost) so no name
 * reads as an array index (object keys that do come first, whatever their insertion order).
 * @param {Round} round
 * @returns {Layout}
 */
export function computeLayout(round) {
  const ids = new Set(round.nodes.map((n) => n.id));
  if (ids.size !== round.nodes.length) throw new Error("two steps share an id");
  const g = new graphlib.Graph();
  g.setGraph({
    rankdir: "TB",
    nodesep: NODE_SEP,
    ranksep: RANK_SEP,
    edgesep: EDGE_SEP,
    marginx: MARGIN,
    marginy: MARGIN,
  });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of round.nodes) g.setNode(`n:${n.id}`, { width: NODE_W, height: NODE_H });
  /** @type {Array<{source: string, target: string, ghost: boolean}>} */
  const links = [];
  /** @type {string[]} */
  const refs = [];
  for (const target of [...round.nodes].map((n) => n.id).sort()) {
    const node = /** @type {import("./types.js").DagNode} */ (round.nodes.find((n) => n.id === target));
    for (const source of [...new Set(node.dependencies)].sort()) {
      if (source === target) continue;
      const ghost = !ids.has(source);
      if (ghost && !refs.includes(source)) {
        refs.push(source);
        g.setNode(`g:${source}`, { width: ghostWidth(source), height: GHOST_H });
      }
      links.push({ source, target, ghost });
    }
  }
  // the round's own edges first: the ghosts' are drawn under them
  links.sort((a, b) => Number(a.ghost) - Number(b.ghost));
  // Each edge exactly as long as its ends' depths are apart: the optimal ranking is then the depths themselves
  // (a row of steps that can run together, those without dependencies at the top, as Python laid them out);
  // a ghost sits one rank above the step using it.
  const depth = layers(round);
  for (const link of links) {
    const minlen = link.ghost ? 1 : Math.max((depth.get(link.target) ?? 0) - (depth.get(link.source) ?? 0), 1);
    g.setEdge(name(link.source, link.ghost), `n:${link.target}`, { minlen });
  }
  dagreLayout(g, { constraints: planOrder(round, refs, links) });

  /** @param {string} key @returns {Box} */
  const boxOf = (key) => {
    const label = g.node(key);
    const w = Number(label.width);
    const h = Number(label.height);
    return { x: Number(label.x) - w / 2, y: Number(label.y) - h / 2, w, h };
  };
  const nodes = round.nodes.map((n) => ({ id: n.id, layer: depth.get(n.id) ?? 0, ...boxOf(`n:${n.id}`) }));
  const ghosts = refs.map((id) => ({ id, ...boxOf(`g:${id}`) }));
  /** @type {Map<string, Box>} */
  const boxes = new Map();
  for (const b of nodes) boxes.set(`n:${b.id}`, b);
  for (const b of ghosts) boxes.set(`g:${b.id}`, b);
  const bands = rankBands([...boxes.values()]);

  /** @type {Route[]} */
  const routes = links.map((link) => {
    const from = /** @type {Box} */ (boxes.get(name(link.source, link.ghost)));
    const to = /** @type {Box} */ (boxes.get(`n:${link.target}`));
    const points = /** @type {Point[]} */ (g.edge(name(link.source, link.ghost), `n:${link.target}`)?.points ?? []);
    return { link, from, to, points, crossings: crossings(points, from, to, bands) };
  });
  spreadEnds(routes);
  const planned = routes.map((r) => plan(r, bands));
  tracks(planned.flatMap((p) => p.pieces.filter(isLeg)));
  const edges = routes.map((r, i) => ({
    source: r.link.source,
    target: r.link.target,
    ghost: r.link.ghost,
    d: pathOf(planned[i]),
    tipX: planned[i].tipX,
    tipY: planned[i].tipY,
  }));
  const graph = g.graph();
  const width = Math.max(num(graph.width) ?? 0, 1);
  const height = Math.max(num(graph.height) ?? 0, 1);
  return { width, height, nodes, ghosts, edges, fallback: false };
}

/**
 * @param {string} id
 * @param {boolean} ghost
 */
const name = (id, ghost) => `${ghost ? "g" : "n"}:${id}`;

/** @param {string} id */
export function ghostWidth(id) {
  return Math.max(Math.ceil(textWidth(id, 10)) + 14, 40);
}

/**
 * The ranks as horizontal bands, top to bottom: what their boxes span.
 * @param {Box[]} boxes
 * @returns {Band[]}
 */
function rankBands(boxes) {
  /** @type {Map<number, Band>} */
  const bands = new Map();
  for (const b of boxes) {
    const mid = Math.round((b.y + b.h / 2) * 100) / 100;
    const band = bands.get(mid) ?? { top: Infinity, bottom: -Infinity, mid };
    band.top = Math.min(band.top, b.y);
    band.bottom = Math.max(band.bottom, b.y + b.h);
    bands.set(mid, band);
  }
  return [...bands.values()].sort((a, b) => a.mid - b.mid);
}

/**
 * Where an edge crosses the ranks between its ends: the x of dagre's dummy node in each.
 * @param {Point[]} points
 * @param {Box} from
 * @param {Box} to
 * @param {Band[]} bands
 */
function crossings(points, from, to, bands) {
  const top = from.y + from.h;
  const bottom = to.y;
  /** @type {Array<{x: number, band: Band}>} */
  const out = [];
  for (const p of points.slice(1, -1)) {
    const band = bands.find((b) => Math.abs(b.mid - p.y) < 0.5);
    if (band && band.top >= top && band.bottom <= bottom) out.push({ x: p.x, band });
  }
  return out;
}

/**
 * The edges that leave one box start side by side on its bottom, in the order they head off; those that reach
 * one box end side by side on its top, in the order they come from (so they do not cross there).
 * @param {Route[]} routes
 */
function spreadEnds(routes) {
  /** @type {Map<Box, Route[]>} */
  const leaving = new Map();
  /** @type {Map<Box, Route[]>} */
  const reaching = new Map();
  for (const r of routes) {
    leaving.set(r.from, [...(leaving.get(r.from) ?? []), r]);
    reaching.set(r.to, [...(reaching.get(r.to) ?? []), r]);
  }
  const centre = (/** @type {Box} */ b) => b.x + b.w / 2;
  const headed = (/** @type {Route} */ r) => r.crossings[0]?.x ?? centre(r.to);
  const came = (/** @type {Route} */ r) => r.crossings[r.crossings.length - 1]?.x ?? centre(r.from);
  for (const [box, list] of leaving) {
    const order = [...list].sort((a, b) => headed(a) - headed(b) || a.link.target.localeCompare(b.link.target));
    order.forEach((r, i) => (r.startX = centre(box) + offset(i, order.length, box.w)));
  }
  for (const [box, list] of reaching) {
    const order = [...list].sort(
      (a, b) =>
        came(a) - came(b) || Number(a.link.ghost) - Number(b.link.ghost) || a.link.source.localeCompare(b.link.source),
    );
    order.forEach((r, i) => (r.endX = centre(box) + offset(i, order.length, box.w)));
  }
}

/**
 * The i-th of n ends on a side `w` wide, centred.
 * @param {number} i
 * @param {number} n
 * @param {number} w
 */
function offset(i, n, w) {
  if (n < 2) return 0;
  const step = Math.min(END_SPREAD, (w - 16) / (n - 1));
  return (i - (n - 1) / 2) * step;
}

/** @param {number} x @param {number} y */
const pt = (x, y) => `${round2(x)},${round2(y)}`;
/** @param {number} n */
const round2 = (n) => Math.round(n * 100) / 100;

/**
 * A piece of an edge in a gap between two ranks: from (xa, ya) down to (xb, yb), turning at `mid` (the edge's
 * track in the gap; tracks keep edges that run side by side apart).
 * @typedef {{xa: number, ya: number, xb: number, yb: number, mid: number}} Leg
 */
/** @typedef {Leg | Point} Piece  a leg, or a straight line to a point */
/** @typedef {{start: Point, pieces: Piece[], tipX: number, tipY: number}} Planned */

/** @param {Piece} piece @returns {piece is Leg} */
const isLeg = (piece) => "mid" in piece;

/**
 * An edge's pieces: down from the source's bottom, straight through every rank it crosses, a leg in each gap;
 * it stops where the arrowhead starts, above the target. An edge dagre turned upwards (a cycle) follows
 * dagre's points as they are.
 * @param {Route} route
 * @param {Band[]} bands
 * @returns {Planned}
 */
function plan(route, bands) {
  const { from, to } = route;
  const x0 = route.startX ?? from.x + from.w / 2;
  const x1 = route.endX ?? to.x + to.w / 2;
  const start = { x: x0, y: from.y + from.h };
  const tipY = to.y;
  const end = tipY - ARROW;
  if (end <= start.y) {
    return { start, pieces: [...route.points.slice(1, -1), { x: x1, y: end }], tipX: x1, tipY };
  }
  const bandOf = (/** @type {Box} */ b) => bands.find((band) => band.top <= b.y && band.bottom >= b.y + b.h);
  /** @type {Piece[]} */
  const pieces = [];
  let x = x0;
  let y = start.y;
  const below = bandOf(from)?.bottom ?? y;
  if (below > y) pieces.push({ x, y: (y = below) });
  /** @param {number} xb @param {number} yb */
  const leg = (xb, yb) => pieces.push({ xa: x, ya: y, xb, yb, mid: (y + yb) / 2 });
  for (const c of route.crossings) {
    leg(c.x, c.band.top);
    pieces.push({ x: (x = c.x), y: (y = c.band.bottom) });
  }
  const above = Math.min(bandOf(to)?.top ?? to.y, end);
  leg(x1, above);
  if (above < end) pieces.push({ x: x1, y: end });
  return { start, pieces, tipX: x1, tipY };
}

/**
 * Tracks in each gap, so legs that run across it side by side do not run along one line. Of the legs heading
 * right, the one that starts furthest right turns highest (then they do not cross); heading left, the one that
 * starts furthest left. Tracks lie in the middle half of the gap.
 * @param {Leg[]} legs
 */
function tracks(legs) {
  /** @type {Map<string, Leg[]>} */
  const groups = new Map();
  for (const leg of legs) {
    if (Math.abs(leg.xb - leg.xa) < 2) continue;
    const key = `${round2(leg.ya)}:${leg.xb > leg.xa ? "r" : "l"}`;
    groups.set(key, [...(groups.get(key) ?? []), leg]);
  }
  for (const [key, group] of groups) {
    const right = key.endsWith("r");
    group.sort((a, b) => (right ? b.xa - a.xa || b.xb - a.xb : a.xa - b.xa || a.xb - b.xb));
    group.forEach((leg, i) => {
      const f = 0.25 + (0.5 * (i + 0.5)) / group.length;
      leg.mid = leg.ya + f * (leg.yb - leg.ya);
    });
  }
}

/**
 * SVG path data: a leg is a vertical S-curve (it stays within the rectangle of its two ends), or a line when
 * its ends are one above the other.
 * @param {Planned} planned
 */
function pathOf({ start, pieces }) {
  let d = `M${pt(start.x, start.y)}`;
  for (const p of pieces) {
    if (!isLeg(p)) d += ` L${pt(p.x, p.y)}`;
    else if (Math.abs(p.xa - p.xb) < 0.01) d += ` L${pt(p.xb, p.yb)}`;
    else d += ` C${pt(p.xa, p.mid)} ${pt(p.xb, p.mid)} ${pt(p.xb, p.yb)}`;
  }
  return d;
}

/**
 * The round in plain layers (layered.js), each edge an S-curve from its source's bottom to its target's top, for
 * when dagre fails. No ghosts.
 * @param {Round} round
 * @returns {Layout}
 */
export function fallbackLayout(round) {
  const placed = layeredBoxes(round, { w: NODE_W, h: NODE_H, gapX: NODE_SEP, gapY: RANK_SEP, margin: MARGIN });
  /** @type {Map<string, Box>} the first step of an id, should two share it */
  const boxes = new Map();
  for (const b of placed.nodes) if (!boxes.has(b.id)) boxes.set(b.id, b);
  /** @type {EdgePath[]} */
  const edges = [];
  for (const target of [...boxes.keys()].sort()) {
    const to = /** @type {Box} */ (boxes.get(target));
    const node = round.nodes.find((n) => n.id === target);
    for (const source of [...new Set(node?.dependencies ?? [])].sort()) {
      const from = boxes.get(source);
      if (!from || source === target || from.y >= to.y) continue;
      const x1 = from.x + from.w / 2;
      const y1 = from.y + from.h;
      const x2 = to.x + to.w / 2;
      const leg = { xa: x1, ya: y1, xb: x2, yb: to.y - ARROW, mid: (y1 + to.y - ARROW) / 2 };
      const d = pathOf({ start: { x: x1, y: y1 }, pieces: [leg], tipX: x2, tipY: to.y });
      edges.push({ source, target, ghost: false, d, tipX: x2, tipY: to.y });
    }
  }
  return { width: placed.width, height: placed.height, nodes: placed.nodes, ghosts: [], edges, fallback: true };
}

// Text: no layout engine measures in tests (jsdom), and measuring in the browser would make the markup depend
// on the fonts. Widths come from a table of advances (in thousandths of an em) close to DejaVu Sans's, the
// widest of the usual UI fonts: with the others a line ends a little short of the box's edge, never past it.
const NARROW = "ijlI.,:;'|!";
const THIN = 'ftr()[]{} -/\\"';
const WIDE = "mwMW@%";
const CAPS = "ABCDEFGHJKLNOPQRSTUVXYZ&";

/**
 * The width of a text at a font size, estimated.
 * @param {string} text
 * @param {number} size  px
 */
export function textWidth(text, size) {
  let em = 0;
  for (const ch of text) {
    if (NARROW.includes(ch)) em += 280;
    else if (THIN.includes(ch)) em += 400;
    else if (WIDE.includes(ch)) em += 960;
    else if (CAPS.includes(ch)) em += 730;
    else em += 625;
  }
  return (em / 1000) * size;
}

/**
 * A text in at most two lines of `width` px, by words (a word too long for a line is cut); the second line
 * ends with an ellipsis only when the rest still does not fit. Joined with a space, the lines are the shortened
 * text.
 * @param {unknown} text
 * @param {number} width
 * @param {number} size  font size, px
 * @returns {string[]}
 */
export function wrapLabel(text, width, size) {
  const flat = String(text ?? "")
    .replace(/\s+/g, " ")
    .trim();
  /** @param {string} t */
  const fits = (t) => textWidth(t, size) <= width;
  if (fits(flat)) return [flat];
  const first = takeWords(flat, fits);
  const rest = flat.slice(first.length).trimStart();
  if (!rest) return [first];
  if (fits(rest)) return [first, rest];
  const second = takeWords(rest, (t) => fits(`${t}…`));
  return [first, `${second.trimEnd()}…`];
}

/**
 * The longest start of `text` that fits, ending at a word's end (or inside the first word, when even it does
 * not fit).
 * @param {string} text
 * @param {(t: string) => boolean} fits
 */
function takeWords(text, fits) {
  let taken = "";
  for (const word of text.split(" ")) {
    const next = taken ? `${taken} ${word}` : word;
    if (!fits(next)) break;
    taken = next;
  }
  if (taken) return taken;
  let cut = "";
  for (const ch of text) {
    if (!fits(cut + ch)) break;
    cut += ch;
  }
  return cut || [...text][0] || "";
}

/**
 * What holds dagre to the plan's order: left of right, for every two neighbours of a row as layered.js orders
 * it (its order for ties is the plan's, where dagre's own may mirror a row: s5, s4, s3, s2), and for the
 * earlier rounds' steps, by the steps that use them, then by round and id (r1.s2 before r1.s10). dagre merges
 * what a constraint would put the wrong way round, so the order is kept whatever its crossing reduction finds.
 * @param {Round} round
 * @param {string[]} refs  the ghosts
 * @param {Array<{source: string, target: string, ghost: boolean}>} links
 * @returns {Array<{left: string, right: string}>}
 */
function planOrder(round, refs, links) {
  /** @type {Array<{left: string, right: string}>} */
  const constraints = [];
  /** @type {Map<string, number>} */
  const place = new Map();
  for (const row of orderedRows(round)) {
    row.forEach((i, at) => place.set(round.nodes[i].id, at));
    for (let at = 1; at < row.length; at++) {
      constraints.push({ left: `n:${round.nodes[row[at - 1]].id}`, right: `n:${round.nodes[row[at]].id}` });
    }
  }
  const users = (/** @type {string} */ ref) => {
    const at = links.filter((l) => l.ghost && l.source === ref).map((l) => place.get(l.target) ?? 0);
    return at.reduce((a, b) => a + b, 0) / Math.max(at.length, 1);
  };
  const ghosts = [...refs].sort((a, b) => users(a) - users(b) || a.localeCompare(b, "en", { numeric: true }));
  // every pair: ghosts of one rank need not be neighbours in this list
  ghosts.forEach((left, i) =>
    ghosts.slice(i + 1).forEach((right) => constraints.push({ left: `g:${left}`, right: `g:${right}` })),
  );
  return constraints;
}
