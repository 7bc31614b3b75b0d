from __future__ import annotations

from dagmagic.notebook.terminal_text import terminal_text


def test_markdown_becomes_plain_words_and_aligned_columns() -> None:
    markdown = (
        "## Result\n"
        "**Paris** is *denser*: see `density()` and [the source](https://example.org).\n"
        "* first\n"
        "| name | n |\n|:---|---:|\n| a | 1 |\n| bb | 22 |\n"
        "snake_case_name stays; 2 * 3 * 4 stays"
    )
    assert terminal_text(markdown).splitlines() == [
        "Result",
        "Paris is denser: see density() and the source (https://example.org).",
        "- first",
        "name   n",
        "----  --",
        "a      1",
        "bb    22",
        "snake_case_name stays; 2 * 3 * 4 stays",
    ]
