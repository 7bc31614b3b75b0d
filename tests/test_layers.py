"""The layers of DESIGN §1, held: every import of the package counts (TYPE_CHECKING and function-local too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import import_graph
from tests.import_graph import Graph, Import, build, cycles, violations


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build()


def test_no_import_points_up_the_layers_and_no_cycle_outside_the_loop(graph: Graph) -> None:
    assert violations(graph) == []


def test_the_only_cycle_is_the_loops_state_machine(graph: Graph) -> None:
    for component in cycles(graph):
        assert all(name.startswith("dagmagic.engine.loop.") for name in component), component


def test_every_module_belongs_to_a_layer(graph: Graph) -> None:
    for name in graph.modules:
        import_graph.layer_of(name)


def _with(graph: Graph, *extra: Import) -> Graph:
    return Graph(modules=graph.modules, imports=[*graph.imports, *extra], root=graph.root)


@pytest.mark.parametrize(
    ("source", "target", "hidden", "says"),
    [
        ("dagmagic.models.usage", "dagmagic.llm.client", "", "an arrow up the layers"),
        ("dagmagic.engine.calls.planner", "dagmagic.session", "function", "an arrow up the layers"),
        ("dagmagic.engine.run.dag_run", "dagmagic.store.run_store", "type_checking", "never the store's code"),
        ("dagmagic.store.rows", "dagmagic.engine.run.dag_run", "type_checking", "never the engine's run"),
        ("dagmagic.session", "dagmagic.testing", "function", "does not import the test doubles"),
        ("dagmagic.notebook.widget", "dagmagic.engine.run.dag_run", "", "a package's front"),
        ("dagmagic.llm.protocol", "dagmagic.llm.client", "type_checking", "import cycle"),
    ],
)
def test_a_back_edge_added_is_caught_however_hidden(
    graph: Graph, source: str, target: str, hidden: str, says: str
) -> None:
    broken = violations(_with(graph, Import(source, target, 1, hidden)))
    assert any(says in line for line in broken), broken


def test_a_function_local_and_a_type_checking_import_are_arrows(tmp_path: Path) -> None:
    package = tmp_path / "dagmagic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dagmagic.b import B\n")
    (package / "b.py").write_text("def f():\n    from dagmagic import a\n    return a\n")
    found = build(package, root=tmp_path)
    assert {(i.source, i.target, i.hidden) for i in found.imports} == {
        ("dagmagic.a", "dagmagic.b", "type_checking"),
        ("dagmagic.b", "dagmagic.a", "function"),
    }
    assert cycles(found) == [["dagmagic.a", "dagmagic.b"]]
