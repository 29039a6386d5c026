"""Any text shown as code in a rendered markdown page (the leaderboard's pages, its tables' notes).

A command with backticks or a code fence in it stays code: CommonMark closes a fence or a span
only with a backtick run of its own length, so the delimiters are longer than any run inside.
"""

from __future__ import annotations

import re


def _longest_backticks(text: str) -> int:
    return max((len(m) for m in re.findall(r"`+", text)), default=0)


def code_block(text: str, language: str = "") -> list[str]:
    """The lines of a fenced code block holding ``text``."""
    fence = "`" * max(3, _longest_backticks(text) + 1)
    return [fence + language, text, fence]


def code_span(text: str) -> str:
    """``text`` as inline code (on one line)."""
    text = " ".join(text.split("\n"))
    ticks = "`" * (_longest_backticks(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"
