"""mkdocs hook: the site's home page (docs/index.md) is the repository's README.md.

README.md sits above docs/ and links its pages as ``docs/sweeps.md``; on the site the home page sits beside
them, so each relative link or image that starts with ``docs/`` loses that prefix. Any other relative link
(a file outside docs/) is left as written, and ``mkdocs build --strict`` reports it as not found.
"""
from __future__ import annotations

import re
from pathlib import Path

HOME = "index.md"
README = "README.md"
# an inline link or image target, ](target) or ](target "title"), and a reference definition, [name]: target
_TARGET = re.compile(r"(\]\(\s*<?|^\s*\[[^\]]+\]:\s*<?)docs/", re.MULTILINE)


def site_links(markdown: str) -> str:
    """README.md's text with its ``docs/`` links made relative to docs/index.md."""
    return _TARGET.sub(r"\1", markdown)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != HOME:
        return markdown
    readme = Path(config.config_file_path).parent / README
    return site_links(readme.read_text(encoding="utf-8"))
