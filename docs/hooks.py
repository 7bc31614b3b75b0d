"""MkDocs hooks: the pages the site takes from elsewhere, so that nothing is written twice.

- ``index.md`` is the README, its links made the site's (``docs/x.md`` is the page ``x.md``, a tutorial its
  rendered page, any other file of the repository its page on GitHub).
- ``configuration.md``'s ``<!-- settings-table -->`` is the table of ``DagSettings``' fields, made at build time.
- The tutorials link to each other and to ``../docs/*.md`` as files, which is what JupyterLab opens; on the
  site those links go to the rendered pages. A link that leads nowhere on the site is a warning, so
  ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.dagmagic")

REPOSITORY = "https://github.com/dagmagic/dagmagic/blob/main/"
"""Where a README link to a file the site does not hold goes."""
SETTINGS_TABLE = "<!-- settings-table -->"
_MARKDOWN_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
_HREF = re.compile(r'href="([^"#:]*\.(?:ipynb|md))(#[^"]*)?"')


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    """The front page from the README, the configuration reference from ``DagSettings``."""
    if page.file.src_uri == "index.md":
        return front_page(Path(config.config_file_path).parent / "README.md")
    if page.file.src_uri == "configuration.md":
        if markdown.count(SETTINGS_TABLE) != 1:
            log.warning("configuration.md needs exactly one %s line", SETTINGS_TABLE)
            return markdown
        from dagmagic.settings import settings_table

        return markdown.replace(SETTINGS_TABLE, settings_table())
    return markdown


def front_page(readme: Path) -> str:
    """The README with its links made the site's."""
    return _MARKDOWN_LINK.sub(lambda m: m.group(1) + _site_link(m.group(2)) + m.group(3), readme.read_text("utf-8"))


def _site_link(target: str) -> str:
    if "://" in target or target.startswith(("#", "mailto:")):
        return target
    if target.startswith("docs/"):
        return target.removeprefix("docs/")
    if re.fullmatch(r"notebooks/\d\d_\w+\.ipynb", target):
        return "tutorials/" + target.removeprefix("notebooks/")
    if target == "CHANGELOG.md":
        return "changelog.md"
    return REPOSITORY + target


def on_page_content(html: str, page: Page, config: Any, files: Files) -> str:
    """A tutorial's links to files (another tutorial, a documentation page) go to their pages on the site."""
    if not page.file.src_uri.startswith("tutorials/") or not page.file.src_uri.endswith(".ipynb"):
        return html

    def replace(match: re.Match[str]) -> str:
        target, fragment = match.group(1), match.group(2) or ""
        # the notebook lives in notebooks/; its ../docs/ is the documentation's own folder
        path = posixpath.normpath(posixpath.join("notebooks", target))
        src_uri = None
        if path.startswith("docs/"):
            src_uri = path.removeprefix("docs/")
        elif re.fullmatch(r"notebooks/[^/]+\.ipynb", path):
            src_uri = "tutorials/" + posixpath.basename(path)
        linked = files.get_file_from_path(src_uri) if src_uri else None
        if linked is None:
            log.warning("%s links to %s, which is not a page of the site", page.file.src_uri, target)
            return match.group(0)
        return f'href="{get_relative_url(linked.url, page.url)}{fragment}"'

    return _HREF.sub(replace, html)
