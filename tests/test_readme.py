"""The README stays true: its settings table is generated, and its test command is what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

from dagmagic.settings import DagSettings, settings_table

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"

START = "<!-- settings-table:start -->"
END = "<!-- settings-table:end -->"
TEST_COMMAND = "LITELLM_LOCAL_MODEL_COST_MAP=True python -m pytest"


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _readme_table() -> str:
    text = _readme()
    assert text.count(START) == 1, f"README.md needs exactly one {START} line"
    assert text.count(END) == 1, f"README.md needs exactly one {END} line"
    start, end = text.index(START) + len(START), text.index(END)
    assert start < end, "the settings-table markers are out of order"
    return text[start:end].strip("\n")


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", _readme(), flags=re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def test_settings_table_is_current() -> None:
    assert _readme_table() == settings_table(), (
        "README.md's configuration table is stale: replace the lines between the settings-table markers "
        "with the output of `python -m dagmagic.settings`"
    )


def test_every_setting_is_in_the_table() -> None:
    table = _readme_table()
    for name in DagSettings.model_fields:
        assert f"| `{name}` |" in table, f"setting {name} is missing from README.md's table"


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
    assert linked == stored and len(linked) == 8
