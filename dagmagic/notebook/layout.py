"""The layered layout of a plan: one layer per topological level, nodes ordered by the barycentre of their
parents, coordinates in pixels. The static SVG (``fallbacks.py``) draws from it; the live widget lays its
graphs out in the browser (dagre, or its own layered layout should dagre fail), so none of this is synced.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagmagic.models import ExecutionPlan, natural_key

__all__ = ["NODE_HEIGHT", "NODE_WIDTH", "Edge", "Layout", "Node", "layout"]

NODE_WIDTH = 168
NODE_HEIGHT = 52
GAP_X = 28
GAP_Y = 44
MARGIN = 12


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
    """A dependency, from the bottom centre of the source to the top centre of the target."""

    source: str
    target: str
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True)
class Layout:
    """Where everything goes, and the size of the drawing."""

    nodes: list[Node]
    edges: list[Edge]
    width: float
    height: float


def layout(plan: ExecutionPlan) -> Layout:
    """The plan's layered layout: deterministic, non-overlapping, edges always pointing down."""
    try:
        layers = plan.layers()
    except ValueError:  # a plan that never validated: one row, no edges, still drawable
        layers = [sorted((step.id for step in plan.steps), key=natural_key)]
    parents = {step.id: [d for d in step.dependencies if d in {s.id for s in plan.steps}] for step in plan.steps}
    ordered = _order(layers, parents)
    widest = max((len(layer) for layer in ordered), default=0)
    width = MARGIN * 2 + widest * NODE_WIDTH + max(widest - 1, 0) * GAP_X
    nodes: dict[str, Node] = {}
    for depth, layer in enumerate(ordered):
        row = len(layer) * NODE_WIDTH + max(len(layer) - 1, 0) * GAP_X
        left = (width - row) / 2
        for position, step_id in enumerate(layer):
            nodes[step_id] = Node(
                step_id,
                left + position * (NODE_WIDTH + GAP_X),
                MARGIN + depth * (NODE_HEIGHT + GAP_Y),
                NODE_WIDTH,
                NODE_HEIGHT,
                depth,
            )
    edges = [
        Edge(p, c, nodes[p].x + NODE_WIDTH / 2, nodes[p].y + NODE_HEIGHT, nodes[c].x + NODE_WIDTH / 2, nodes[c].y)
        for c in sorted(parents)
        for p in sorted(parents[c])
        if p in nodes and c in nodes and nodes[p].layer < nodes[c].layer
    ]
    height = MARGIN * 2 + len(ordered) * NODE_HEIGHT + max(len(ordered) - 1, 0) * GAP_Y
    return Layout([nodes[i] for layer in ordered for i in layer], edges, width, height)


def _order(layers: list[list[str]], parents: dict[str, list[str]]) -> list[list[str]]:
    """Each layer sorted by the mean position of its nodes' parents (ties by id, s2 before s10): fewer
    crossings.
    """
    ordered: list[list[str]] = []
    position: dict[str, float] = {}
    for layer in layers:

        def barycentre(step_id: str) -> tuple[float, tuple[tuple[int, int | str], ...]]:
            placed = [position[p] for p in parents.get(step_id, []) if p in position]
            return (sum(placed) / len(placed) if placed else float("inf"), natural_key(step_id))

        row = sorted(layer, key=barycentre) if ordered else sorted(layer, key=natural_key)
        for index, step_id in enumerate(row):
            position[step_id] = index
        ordered.append(row)
    return ordered
