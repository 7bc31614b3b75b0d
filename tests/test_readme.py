"""The README and the documentation stay true: the configuration reference is generated, the README is the
front page (short, its links lead to pages that exist), and its test command is what CI runs."""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from dagmagic.settings import DagSettings, settings_table

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CI_RUN = ROOT / ".ci" / "run"

TEST_COMMAND = "LITELLM_LOCAL_MODEL_COST_MAP=True python -m pytest"


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dagmagic_docs_hooks", DOCS / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", _readme(), flags=re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def test_the_configuration_reference_is_the_table_of_the_settings_fields() -> None:
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    hooks = _hooks()
    assert page.count(hooks.SETTINGS_TABLE) == 1, "docs/configuration.md needs exactly one settings-table line"
    assert "| `" not in page, "docs/configuration.md holds a hand-written table; the build generates it"
    table = settings_table()
    for name in DagSettings.model_fields:
        assert f"| `{name}` |" in table, f"setting {name} is missing from the generated table"


def test_the_readme_is_a_front_page_whose_links_lead_somewhere() -> None:
    text = _readme()
    assert len(text.splitlines()) <= 200
    assert "%%dag" in text and "(docs/images/widget.png)" in text
    for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
    # on the site the same text is the front page: its links are the site's pages or the repository's files
    front = _hooks().front_page(README)
    assert "](docs/" not in front and "](notebooks/" not in front


def test_the_two_commands_are_the_quickstart_and_what_ci_runs() -> None:
    section = _section("The two commands")
    blocks = [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)]
    assert blocks == ["bash quickstart.sh", "bash .ci/run"], f"'The two commands' should be those two, found {blocks}"
    assert (ROOT / "quickstart.sh").exists()
    assert f"`{TEST_COMMAND}`" in section  # the tests alone, in an installed environment
    ci_lines = [
        line.strip() for line in CI_RUN.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith("#")
    ]
    assert any(TEST_COMMAND in line for line in ci_lines), f".ci/run must run `{TEST_COMMAND}` verbatim"
    assert any("--nbval" in line for line in ci_lines) and not any("--nbval-lax" in line for line in ci_lines)


def test_the_readme_links_every_tutorial_in_reading_order() -> None:
    linked = re.findall(r"\]\((notebooks/\d\d_\w+\.ipynb)\)", _section("Tutorials"))
    stored = sorted(f"notebooks/{path.name}" for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert linked == stored and len(linked) == 9


def test_a_license_a_changelog_and_the_project_urls() -> None:
    import tomllib

    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "Keep a Changelog" in changelog and "## [Unreleased]" in changelog
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert {"Homepage", "Documentation", "Repository", "Changelog"} <= set(project["urls"])


def test_a_tutorials_links_go_to_the_sites_pages_and_one_to_nowhere_is_a_warning(caplog: Any) -> None:
    hooks = _hooks()
    pages = {"tutorials/08_evaluate.ipynb": "tutorials/08_evaluate/", "evaluation.md": "evaluation/"}
    files = SimpleNamespace(
        get_file_from_path=lambda src: SimpleNamespace(url=pages[src]) if src in pages else None,
    )
    page = SimpleNamespace(file=SimpleNamespace(src_uri="tutorials/07_replay.ipynb"), url="tutorials/07_replay/")
    html = '<a href="08_evaluate.ipynb">next</a> <a href="../docs/evaluation.md#cases">cases</a>'
    assert hooks.on_page_content(html, page, None, files) == (
        '<a href="../08_evaluate/">next</a> <a href="../../evaluation/#cases">cases</a>'
    )
    with caplog.at_level(logging.WARNING):
        kept = hooks.on_page_content('<a href="../README.md#cache">x</a>', page, None, files)
    assert kept == '<a href="../README.md#cache">x</a>'
    assert "not a page of the site" in caplog.text  # a warning: mkdocs build --strict fails on it
