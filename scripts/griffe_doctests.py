"""A Griffe extension for the API reference (mkdocs.yml): thresher's docstrings carry
their examples as bare doctest lines (`>>> …`, which the house rules' test runs); this
fences each run of them as a `pycon` block, so the site shows code rather than Markdown's
reading of `>>>` as nested quotes."""

from __future__ import annotations

import re
from typing import Any

import griffe

DOCTEST_RUN = re.compile(r"(?m)^(?P<indent>[ \t]*)>>> .*(?:\n(?P=indent)(?!\s*$).*)*")


def fence(text: str) -> str:
    """Each run of `>>>` lines (and the output lines right after them) as a fenced block."""

    def wrap(match: re.Match[str]) -> str:
        indent = match.group("indent")
        code = match.group(0).replace("  # doctest: +SKIP", "").replace(" # doctest: +SKIP", "")
        return f"{indent}```pycon\n{code}\n{indent}```"

    return DOCTEST_RUN.sub(wrap, text)


class FenceDoctests(griffe.Extension):
    """Fence the doctest lines of every docstring Griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        text = obj.docstring.value if obj.docstring is not None else ""
        if obj.docstring is not None and ">>> " in text and "Examples:" not in text:
            obj.docstring.value = fence(text)
