"""dagmagic's import graph, hidden imports included, and the layer rules CI holds it to.

Every ``import`` statement of the package counts: at module level, under ``if TYPE_CHECKING:`` and inside
functions (a function-local import is an arrow all the same; it only hides it). ``python -m tests.import_graph``
prints the layers' report (modules, cycles, hidden imports, the largest modules and classes) and exits 1 when a
rule is broken; ``tests/test_layers.py`` asserts the same in the suite.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "dagmagic"

# Layers from the bottom up: a module may import its own layer and those below it, never one above.
# The first matching prefix names a module's layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "data",
        (
            "dagmagic._secrets",
            "dagmagic.models",
            "dagmagic.diff",
            "dagmagic.comparison",
            "dagmagic.comparison_views",
            "dagmagic.messages",
            "dagmagic.events",
            "dagmagic.errors",
            "dagmagic.settings",
            "dagmagic._settings_env",
            "dagmagic.store_url",
        ),
    ),
    ("llm", ("dagmagic.llm",)),
    ("store", ("dagmagic.store",)),
    ("engine", ("dagmagic.engine",)),
    (
        "session",
        (
            "dagmagic.session",
            "dagmagic._session",
            "dagmagic.evaluation",
            "dagmagic.tracing",
            "dagmagic.testing",
            "dagmagic.side_by_side",
            "dagmagic.temporal",
        ),
    ),
    ("notebook", ("dagmagic.notebook", "dagmagic.server")),
    ("package", ("dagmagic", "dagmagic.__main__")),
]
# Arrows forbidden besides those pointing up: (importer prefix, imported prefix, why).
FORBIDDEN: list[tuple[str, str, str]] = [
    ("dagmagic.engine", "dagmagic.store", "the engine saves a run through its own protocol, never the store's code"),
    ("dagmagic.store", "dagmagic.engine", "the store takes a run's id, state and events, never the engine's run"),
    ("dagmagic.evaluation", "dagmagic.session", "evaluation depends on a protocol of the session, not on DagSession"),
    ("dagmagic.session", "dagmagic.testing", "production code does not import the test doubles"),
    ("dagmagic.evaluation", "dagmagic.testing", "production code does not import the test doubles"),
    ("dagmagic.tracing", "dagmagic.testing", "production code does not import the test doubles"),
]
# The notebook (and the command line) use the public API: top-level modules and package fronts, never a module
# inside a subpackage.
FRONT_ONLY = ("dagmagic.notebook", "dagmagic.server", "dagmagic.__main__")
# The one place a cycle is allowed: the loop's state machine (a phase names the phases it may return).
CYCLES_ALLOWED_UNDER = "dagmagic.engine.loop"


@dataclass(frozen=True)
class Import:
    """One import statement's arrow: who imports what, where and how hidden."""

    source: str
    target: str
    line: int
    hidden: str  # "" (module level), "type_checking" or "function"


@dataclass
class Graph:
    """The package's modules, their line counts and every arrow between them."""

    modules: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)
    root: Path = ROOT

    def edges(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {name: set() for name in self.modules}
        for imp in self.imports:
            if imp.target != imp.source:
                out[imp.source].add(imp.target)
        return out


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, hidden: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, hidden
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), hidden or "type_checking")
            for stmt in child.orelse:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), hidden)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk(child, hidden or "function")
        else:
            yield from _walk(child, hidden)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The package module an imported name lives in (``a.b.c`` is module ``a.b.c`` or a name in ``a.b``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def build(package_dir: Path | None = None, root: Path = ROOT) -> Graph:
    """The graph of the package at ``package_dir`` (default: this checkout's), module names relative to ``root``."""
    graph = Graph(root=root)
    for path in sorted((package_dir or root / PACKAGE).rglob("*.py")):
        graph.modules[module_name(path, root)] = path
    for name, path in graph.modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node, hidden in _walk(tree, ""):
            for target in _targets(node, name, is_package):
                resolved = _resolve(target, graph.modules)
                if resolved is not None and resolved != name:
                    graph.imports.append(Import(name, resolved, node.lineno, hidden))
    return graph


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterable[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    if base.split(".")[0] != PACKAGE:
        return []
    return [f"{base}.{alias.name}" for alias in node.names]


def _reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for child in edges[todo.pop()]:
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def cycles(graph: Graph) -> list[list[str]]:
    """The import cycles: each group of two or more modules that all reach one another, sorted."""
    edges = graph.edges()
    reach = {name: _reachable(edges, name) for name in edges}
    groups = {frozenset({name, *(other for other in reach[name] if name in reach[other])}) for name in edges}
    return sorted(sorted(group) for group in groups if len(group) > 1)


def _under(module: str, prefixes: str | tuple[str, ...]) -> bool:
    return any(
        module == p or module.startswith(p + ".") for p in ((prefixes,) if isinstance(prefixes, str) else prefixes)
    )


def is_front(graph: Graph, module: str) -> bool:
    """A top-level module or a package's ``__init__``: what other layers' users may import."""
    return module.count(".") <= 1 or graph.modules[module].name == "__init__.py"


def layer_of(module: str) -> tuple[int, str]:
    best: tuple[int, int, str] | None = None
    for rank, (layer, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix), layer)
    if best is None:
        raise ValueError(f"{module} belongs to no layer: add it to LAYERS in tests/import_graph.py")
    return best[0], best[2]


def violations(graph: Graph) -> list[str]:
    """Every arrow that points up the layers or across two siblings kept apart, and every forbidden cycle."""
    found: list[str] = []
    for imp in graph.imports:
        (src_rank, src_layer), (dst_rank, dst_layer) = layer_of(imp.source), layer_of(imp.target)
        where = (
            f"{imp.source}:{imp.line} ({src_layer}) imports {imp.target} ({dst_layer}), {imp.hidden or 'module level'}"
        )
        if dst_rank > src_rank:
            found.append(f"{where}: an arrow up the layers")
        for importer, imported, why in FORBIDDEN:
            if _under(imp.source, importer) and _under(imp.target, imported):
                found.append(f"{where}: {why}")
        if _under(imp.source, FRONT_ONLY) and not _under(imp.target, FRONT_ONLY) and not is_front(graph, imp.target):
            found.append(f"{where}: the notebook uses the public API (a package's front), not its insides")
    for component in cycles(graph):
        if not all(m == CYCLES_ALLOWED_UNDER or m.startswith(CYCLES_ALLOWED_UNDER + ".") for m in component):
            found.append(f"import cycle: {' <-> '.join(component)}")
    return list(dict.fromkeys(found))


def _largest_classes(graph: Graph, top: int) -> list[tuple[int, str]]:
    sizes: list[tuple[int, str]] = []
    for name, path in graph.modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                sizes.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    return sorted(sizes, reverse=True)[:top]


def report(graph: Graph) -> str:
    lines_of = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in graph.modules.items()}
    folders: dict[str, list[str]] = {}
    for name, path in graph.modules.items():
        folders.setdefault(str(path.parent.relative_to(graph.root)), []).append(name)
    biggest_folder = max(folders, key=lambda f: sum(lines_of[m] for m in folders[f]))
    hidden = {
        kind: len({(i.source, i.line) for i in graph.imports if i.hidden == kind})
        for kind in ("type_checking", "function")
    }
    no_underscore = [m for m in graph.modules if not any(part.startswith("_") for part in m.split(".")[1:])]
    looks_public = [m for m in no_underscore if is_front(graph, m)]
    found = cycles(graph)
    out = [
        f"modules: {len(graph.modules)}, lines: {sum(lines_of.values())}",
        f"largest folder: {biggest_folder}/ ({len(folders[biggest_folder])} modules, "
        f"{sum(lines_of[m] for m in folders[biggest_folder])} lines, direct files only)",
        f"arrows between modules: {sum(len(v) for v in graph.edges().values())}",
        f"hidden import statements of package modules: TYPE_CHECKING {hidden['type_checking']}, "
        f"function-local {hidden['function']}",
        f"import cycles (hidden imports counted): {len(found)}",
        *(f"  {len(c)}: {', '.join(c)}" for c in found),
        f"modules that look public (a top-level module or a package's front, no underscore): {len(looks_public)}"
        f" of {len(graph.modules)}; with no underscore in their path: {len(no_underscore)}",
        "largest modules: " + ", ".join(f"{m} {n}" for n, m in sorted(((n, m) for m, n in lines_of.items()))[-5:]),
        "largest classes: " + ", ".join(f"{c} {n}" for n, c in _largest_classes(graph, 5)),
    ]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    """``python -m tests.import_graph [CHECKOUT]``: the report of this checkout (or another one's)."""
    root = Path(argv[0]).resolve() if argv else ROOT
    graph = build(root=root)
    print(report(graph))
    broken = violations(graph)
    for line in broken:
        print("LAYER RULE BROKEN:", line)
    print(f"layer check: {len(broken)} rule(s) broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
