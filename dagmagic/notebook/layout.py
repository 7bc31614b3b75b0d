"""The layered layout of a plan (Sugiyama's method): one layer per topological level; an edge that skips layers
passes each of them through a slot of its own (a dummy node) in the gap between two boxes; layers ordered by
barycentre sweeps that keep the ordering with the fewest crossings; x positions pulled towards their neighbours
under the order's spacing. Every edge is then a route of points that never enters a box: down from a port on the
bottom of its source, through its slots, to a port on the top of its target. Coordinates are pixels.

The static SVG (``fallbacks.py``) draws from it; the live widget lays its graphs out in the browser (dagre, or its
own layered layout should dagre fail), so none of this is synced.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from dagmagic.models import ExecutionPlan, natural_key

__all__ = ["NODE_HEIGHT", "NODE_WIDTH", "Edge", "Layout", "Node", "layout"]

NODE_WIDTH = 168
NODE_HEIGHT = 52
GAP_X = 28
"""Between two boxes, or a box and an edge passing it."""
EDGE_GAP = 12
"""Between two edges passing through the same layer."""
GAP_Y = 44
MARGIN = 12
PORT_SPACING = 14
"""Between the ends of two edges leaving (or entering) the same box."""

_SWEEPS = 8
_PULLS = 12


@dataclass(frozen=True)
class Node:
    """A step's box: top-left corner, size, and its layer."""

    id: str
    x: float
    y: float
    w: float
    h: float
    layer: int


@dataclass(frozen=True)
class Edge:
    """A dependency's route, top to bottom: a port on the bottom of the source, then for each layer it skips the
    top and bottom of its slot there (a gap between boxes), then a port on the top of the target.
    """

    source: str
    target: str
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Layout:
    """Where everything goes, and the size of the drawing."""

    nodes: list[Node]
    edges: list[Edge]
    width: float
    height: float


@dataclass(frozen=True)
class _Slot:
    """Where the edge ``source -> target`` crosses ``layer``."""

    source: str
    target: str
    layer: int


_Item = str | _Slot
"""What a layer holds: a step's box (its id) or an edge's slot."""


def layout(plan: ExecutionPlan) -> Layout:
    """The plan's layered layout: deterministic, non-overlapping, edges pointing down and around the boxes."""
    try:
        layers = plan.layers()
    except ValueError:  # a plan that never validated: one row, no edges, still drawable
        layers = [sorted((step.id for step in plan.steps), key=natural_key)]
    depth = {step_id: index for index, layer in enumerate(layers) for step_id in layer}
    ids = {step.id for step in plan.steps}
    links = sorted(
        {(p, step.id) for step in plan.steps for p in step.dependencies if p in ids and depth[p] < depth[step.id]},
        key=lambda link: (natural_key(link[1]), natural_key(link[0])),
    )
    slots = {(p, c): [_Slot(p, c, layer) for layer in range(depth[p] + 1, depth[c])] for p, c in links}
    chains: dict[tuple[str, str], list[_Item]] = {link: [link[0], *slots[link], link[1]] for link in links}
    above, below = _neighbours(chains.values())
    rows: list[list[_Item]] = [list(layer) for layer in layers]
    for slot in (slot for passing in slots.values() for slot in passing):
        rows[slot.layer].append(slot)
    rows = _order(rows, above, below)
    centre = _positions(rows, above, below)
    left = min((centre[item] - _width(item) / 2 for row in rows for item in row), default=0.0)
    shift = MARGIN - left
    centre = {item: round(x + shift, 1) for item, x in centre.items()}
    width = max((centre[item] + _width(item) / 2 for row in rows for item in row), default=0.0) + MARGIN
    top = [MARGIN + index * (NODE_HEIGHT + GAP_Y) for index in range(len(rows))]
    nodes = [
        Node(item, centre[item] - NODE_WIDTH / 2, top[index], NODE_WIDTH, NODE_HEIGHT, index)
        for index, row in enumerate(rows)
        for item in row
        if isinstance(item, str)
    ]
    leaving = _ports(links, chains, centre, end=False)
    entering = _ports(links, chains, centre, end=True)
    edges = []
    for link in links:
        route = [(leaving[link], top[depth[link[0]]] + NODE_HEIGHT)]
        for slot in slots[link]:
            route += [(centre[slot], top[slot.layer]), (centre[slot], top[slot.layer] + NODE_HEIGHT)]
        route.append((entering[link], top[depth[link[1]]]))
        edges.append(Edge(link[0], link[1], tuple(route)))
    height = MARGIN * 2 + len(rows) * NODE_HEIGHT + max(len(rows) - 1, 0) * GAP_Y
    return Layout(nodes, edges, round(width, 1), height)


def _neighbours(chains: Iterable[list[_Item]]) -> tuple[dict[_Item, list[_Item]], dict[_Item, list[_Item]]]:
    """Each item's neighbours in the layer above and in the layer below."""
    above: dict[_Item, list[_Item]] = {}
    below: dict[_Item, list[_Item]] = {}
    for chain in chains:
        for upper, lower in pairwise(chain):
            below.setdefault(upper, []).append(lower)
            above.setdefault(lower, []).append(upper)
    return above, below


def _width(item: _Item) -> float:
    return NODE_WIDTH if isinstance(item, str) else 0.0


def _key(item: _Item) -> tuple[object, ...]:
    """Ties in order: boxes by id (s2 before s10), slots by their edge."""
    if isinstance(item, str):
        return (natural_key(item),)
    return (natural_key(item.source), natural_key(item.target))


def _order(
    rows: list[list[_Item]], above: dict[_Item, list[_Item]], below: dict[_Item, list[_Item]]
) -> list[list[_Item]]:
    """The first layer by id (plan order); each other layer sorted by the mean position of its neighbours, sweeping
    down, then up and down again; the sweep that gave the fewest crossings wins (the first of them on a tie).
    """
    current = [sorted(rows[0], key=_key)] if rows else []
    for row in rows[1:]:  # the first sweep: ties by id, so siblings read in plan order
        current.append(_by_barycentre(sorted(row, key=_key), current[-1], above))
    best, fewest = [list(row) for row in current], _crossings(current, below)
    for sweep in range(_SWEEPS):
        if fewest == 0:
            break
        if sweep % 2 == 0:
            for index in range(len(current) - 2, 0, -1):  # the first layer stays in plan order
                current[index] = _by_barycentre(current[index], current[index + 1], below)
        else:
            for index in range(1, len(current)):
                current[index] = _by_barycentre(current[index], current[index - 1], above)
        count = _crossings(current, below)
        if count < fewest:
            best, fewest = [list(row) for row in current], count
    return best


def _by_barycentre(row: list[_Item], fixed: list[_Item], neighbours: dict[_Item, list[_Item]]) -> list[_Item]:
    """The row sorted by the mean position of its neighbours in ``fixed``; an item without any keeps its place."""
    position = {item: index for index, item in enumerate(fixed)}

    def barycentre(indexed: tuple[int, _Item]) -> tuple[float, int]:
        index, item = indexed
        placed = [position[n] for n in neighbours.get(item, []) if n in position]
        return (sum(placed) / len(placed) if placed else index * len(fixed) / max(len(row), 1), index)

    return [item for _, item in sorted(enumerate(row), key=barycentre)]


def _crossings(rows: list[list[_Item]], below: dict[_Item, list[_Item]]) -> int:
    count = 0
    for upper, lower in pairwise(rows):
        position = {item: index for index, item in enumerate(lower)}
        segments = [(i, position[n]) for i, item in enumerate(upper) for n in below.get(item, []) if n in position]
        count += sum(1 for a, b in _pairs(segments) if (a[0] - b[0]) * (a[1] - b[1]) < 0)
    return count


def _pairs(items: list[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    return [(a, b) for index, a in enumerate(items) for b in items[index + 1 :]]


def _gap(left: _Item, right: _Item) -> float:
    """The least distance between two neighbours' centres in a layer."""
    space = EDGE_GAP if isinstance(left, _Slot) and isinstance(right, _Slot) else GAP_X
    return (_width(left) + _width(right)) / 2 + space


def _positions(
    rows: list[list[_Item]], above: dict[_Item, list[_Item]], below: dict[_Item, list[_Item]]
) -> dict[_Item, float]:
    """Centres: each layer packed, then pulled in turns towards the mean of each item's neighbours (a slot pulls
    harder, so long edges run straight), keeping the layer's order and spacing.
    """
    centre: dict[_Item, float] = {}
    for row in rows:
        x = 0.0
        for index, item in enumerate(row):
            x += _gap(row[index - 1], item) if index else 0.0
            centre[item] = x
        middle = x / 2
        for item in row:
            centre[item] -= middle
    order = list(range(len(rows)))
    for turn in range(_PULLS):
        for index in order if turn % 2 == 0 else reversed(order):
            row = rows[index]

            def wanted(item: _Item) -> float:
                near = above.get(item, []) + below.get(item, [])
                return sum(centre[n] for n in near) / len(near) if near else centre[item]

            weights = [4.0 if isinstance(item, _Slot) else 1.0 for item in row]
            placed = _closest_in_order([wanted(item) for item in row], weights, [_gap(a, b) for a, b in pairwise(row)])
            centre.update(zip(row, placed, strict=True))
    return centre


def _closest_in_order(wanted: list[float], weights: list[float], gaps: list[float]) -> list[float]:
    """The positions closest to ``wanted`` (weighted least squares) such that each is at least its gap right of
    the one before: an isotonic regression (pool adjacent violators) on the positions less their offsets.
    """
    offsets = [0.0]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    blocks: list[list[float]] = []  # [weighted mean, total weight, count]
    for value, weight, offset in zip(wanted, weights, offsets, strict=True):
        blocks.append([value - offset, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, total, count = blocks.pop()
            previous = blocks[-1]
            merged = previous[1] + total
            blocks[-1] = [(previous[0] * previous[1] + mean * total) / merged, merged, previous[2] + count]
    shifted = [mean for mean, _, count in blocks for _ in range(int(count))]
    return [value + offset for value, offset in zip(shifted, offsets, strict=True)]


def _ports(
    links: list[tuple[str, str]],
    chains: dict[tuple[str, str], list[_Item]],
    centre: dict[_Item, float],
    *,
    end: bool,
) -> dict[tuple[str, str], float]:
    """Where each edge leaves its source (``end=False``) or enters its target: a box's edges side by side around
    its centre, in the order of where they come from or go to, so arrowheads do not sit on one another.
    """
    by_box: dict[str, list[tuple[str, str]]] = {}
    for link in links:
        by_box.setdefault(link[1] if end else link[0], []).append(link)

    def towards(link: tuple[str, str]) -> tuple[float, tuple[object, ...]]:
        """Where the edge comes from (or goes to) next to the box: its neighbour in the layer beyond."""
        return (centre[chains[link][-2 if end else 1]], _key(link[0] if end else link[1]))

    ports: dict[tuple[str, str], float] = {}
    for box, group in by_box.items():
        group.sort(key=towards)
        spacing = min(PORT_SPACING, (NODE_WIDTH - 24) / max(len(group) - 1, 1))
        for index, link in enumerate(group):
            ports[link] = round(centre[box] + (index - (len(group) - 1) / 2) * spacing, 1)
    return ports
