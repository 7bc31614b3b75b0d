"""The notebook layer: magics, input transformer, widget and static fallbacks.

It reads the engine's events and calls its public API; the engine never imports it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext dagmagic``: register the magics, the transformer and the display of runs, and start importing
    in the background what a ``%%dag`` cell uses, and litellm once a litellm model is in sight
    (``dagmagic.notebook.preload``).
    """
    from dagmagic.notebook import magics, preload, transformer

    registered = magics.register(shell)
    transformer.install(shell)
    # by name: the engine (and pydantic) load with the first run, not with the extension
    shell.display_formatter.mimebundle_formatter.for_type_by_name("dagmagic.engine.run.dag_run", "DagRun", _display_run)
    shell.display_formatter.mimebundle_formatter.for_type_by_name(
        "dagmagic.evaluation.experiment", "Experiment", _display_experiment
    )
    for name in ("RunComparison", "ExperimentComparison"):
        shell.display_formatter.mimebundle_formatter.for_type_by_name(
            "dagmagic.side_by_side", name, _display_comparison
        )
    preload.preload_in_background(shell, registered)


def _display_run(run: Any, include: Any = None, exclude: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    from dagmagic.notebook.display import marker, run_bundle

    return run_bundle(run, include, exclude), marker(run)


def _display_experiment(
    experiment: Any, include: Any = None, exclude: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    from dagmagic.notebook.experiment_widget import experiment_display

    return experiment_display(experiment)


def _display_comparison(
    comparison: Any, include: Any = None, exclude: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    from dagmagic.notebook.compare_cell import compare_display

    return compare_display(comparison)


def unload_ipython_extension(shell: Any) -> None:
    """``%unload_ext dagmagic``: remove the transformer (the magics stay registered, as IPython does)."""
    from dagmagic.notebook import transformer

    transformer.uninstall(shell)
