"""mkdocs hooks: docstring examples (``>>>`` lines and their output) render as code blocks, and
the home page is the README.

Docstrings are plain text with doctests; without the first, an output such as ``[0.5, 0.5]`` would
be read as a Markdown link.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from markdown import Extension
from markdown.preprocessors import Preprocessor
from mkdocs.plugins import event_priority

_PROMPT = re.compile(r"^(\s*)>>> ")


class _Doctests(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        fenced = False
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.lstrip().startswith("```"):
                fenced = not fenced
            m = None if fenced else _PROMPT.match(line)
            if m is None:
                out.append(line)
                i += 1
                continue
            indent = m.group(1)
            out += ["", indent + "```pycon"]
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out += [indent + "```", ""]
        return out


class DoctestBlocks(Extension):
    def extendMarkdown(self, md: Any) -> None:  # noqa: N802 - Python-Markdown's name
        md.preprocessors.register(_Doctests(md), "doctest_blocks", 40)


@event_priority(100)  # before mkdocstrings reads the Markdown configuration
def on_config(config: Any) -> Any:
    config.markdown_extensions.append(DoctestBlocks())
    return config


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """The home page is the README (one text for both), its links made site-relative."""
    if page.file.src_uri != "index.md":
        return markdown
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    return _LINK.sub(_site_link, readme)


_LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|#)([^)]+)\)")


def _site_link(m: re.Match[str]) -> str:
    text, target = m.groups()
    if target.startswith("docs/"):
        return f"[{text}]({target[5:]})"
    return f"{text} (`{target}` in the repository)"  # a file outside the site
