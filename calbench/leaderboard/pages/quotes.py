"""Numbers that hand-written prose quotes from the rendered tables, rendered with them.

A page's hand-written text (around its board markers, and the top-level README) never types a
number the records give: it quotes a cell of a table ``calbench leaderboard render`` wrote, by a
marker before the number::

    scores <!--q generalization-gemma ; # `gemma-3-270m-hard-wide` / 187 ; unseen score ; ±.1f-->42.2 ± 2.3

The marker's fields, split at ``;``:

* the page, under the leaderboard's folder, without ``.md`` (``README`` is the board): its
  rendered tables (of a page with hand-written text, those between its board markers);
* the row: its cells joined by `` / ``, and a piece of the heading above its table after ``#``
  (``# Headline / oracle``), naming exactly one row with that column;
* the column: its header, without the direction arrow;
* optionally, how to print it: ``value`` (the cell without its interval), or a Python format
  specification for the value (``.1f``, ``.0%``, ``,.0f``), ``±`` before it to keep the interval.

A page names a row it quotes often once, anywhere in it (``<!--q @lora = generalization-gemma ;
Gemma-3-270M, hard, fresh parameters, ranges widened 2x-->``), and its quotes then read
``<!--q @lora ; unseen score-->``: the alias stands for the page and the row.

The render rewrites the number after every marker from its cell (``fill``): a number in the prose
is the table's, so it changes when the records do, and a quote of no cell, or of several, is
refused in one line. The tables are read as written (GitHub markdown), so a quote works for every
page, whichever module drew it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.pages.board import BOARD_END, BOARD_START
from calbench.provenance import atomic_write

NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?%?"  # 5,964 but not the comma after 83,
VALUE = rf"n/a|{NUMBER}(?: ± {NUMBER})?"  # what a quote prints: a cell's number, with its interval or not
ALIAS = re.compile(r"<!--q (?P<alias>@[\w.-]+) = (?P<target>[^>]*?)-->")
MARKER = re.compile(rf"<!--q (?!@[\w.-]+ =)(?P<key>[^>]*?)-->(?P<value>{VALUE})?")
PAGE_NAME = re.compile(r"[\w.-]+")
ARROWS = (" ↑", " ↓")


@dataclass(frozen=True)
class Table:
    """A markdown table as written: the heading above it, its header cells and its rows' cells."""

    heading: str
    headers: list[str]
    rows: list[list[str]]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(text: str) -> list[Table]:
    """Every GitHub-markdown table of a page, each with the last heading above it."""
    out: list[Table] = []
    heading, lines = "", text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|[-|: ]+\|", lines[i + 1].strip()):
            headers = [h.removesuffix(ARROWS[0]).removesuffix(ARROWS[1]) for h in _cells(line)]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append(Table(heading, headers, rows))
            continue
        i += 1
    return out


def formatted(cell: str, how: str) -> str:
    """A cell printed as a quote asks (module docstring): itself, its value, or formatted."""
    if not how or cell == "n/a":
        return cell
    value, _, half = cell.partition(" ± ")
    if how == "value":
        return value
    spec = how.removeprefix("±")
    try:
        number = format(float(value.replace(",", "")), spec)
        if how.startswith("±") and half:
            return f"{number} ± {format(float(half), spec)}"
    except ValueError as e:
        raise ValueError(f"cannot print {cell!r} as {how!r} ({e})") from None
    return number


def _part_of(part: str, row: list[str], heading: str) -> bool:
    return part.removeprefix("#").strip() in heading if part.startswith("#") else part in row


class Quotes:
    """The cells of the rendered tables of the pages in a folder, read once each, looked up by a
    quote's key (a table in hand-written text is no source: it would quote itself)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._tables: dict[str, list[Table]] = {}

    def page(self, name: str) -> list[Table]:
        if name not in self._tables:
            path = self.folder / f"{name}.md"
            if not PAGE_NAME.fullmatch(name) or not path.is_file():
                raise ValueError(f"no page {name}.md in {self.folder}")
            text = path.read_text()
            if BOARD_START in text and BOARD_END in text:  # a page with hand-written text: its tables are the board's
                text = text.split(BOARD_START, 1)[1].split(BOARD_END, 1)[0]
            self._tables[name] = tables(text)
        return self._tables[name]

    def cell(self, page: str, row: str, column: str) -> str:
        parts = [p.strip() for p in row.split(" / ")]
        found = [
            r[t.headers.index(column)]
            for t in self.page(page)
            if column in t.headers
            for r in t.rows
            if len(r) == len(t.headers) and all(_part_of(p, r, t.heading) for p in parts)
        ]
        if len(found) != 1:
            raise ValueError(f"{len(found)} cells of {page}.md in a row {row!r} and a column {column!r} (need one)")
        return found[0]

    def __call__(self, key: str) -> str:
        fields = [f.strip() for f in key.split(";")]
        if len(fields) not in (3, 4):
            raise ValueError("a quote is 'page ; row ; column' and optionally '; format'")
        text = formatted(self.cell(*fields[:3]), fields[3] if len(fields) == 4 else "")
        if not re.fullmatch(VALUE, text):
            raise ValueError(f"the cell prints as {text!r}, not a number: give a format")
        return text


def aliases(text: str) -> dict[str, str]:
    """A page's row aliases: ``@name`` -> ``page ; row``; one defined twice is refused."""
    found = [(m["alias"], m["target"].strip()) for m in ALIAS.finditer(text)]
    twice = sorted({a for a, _ in found if sum(a == b for b, _ in found) > 1})
    if twice:
        raise ValueError(f"the quote alias {twice[0]} is defined twice")
    return dict(found)


def fill(text: str, quote: Callable[[str], str]) -> str:
    """``text`` with the number after each quote marker printed afresh by ``quote`` (from its key,
    an alias in it replaced by the page and row it stands for)."""
    named = aliases(text)

    def key(k: str) -> str:
        first, _, rest = k.partition(";")
        if not first.strip().startswith("@"):
            return k
        if first.strip() not in named:
            raise ValueError(f"no quote alias {first.strip()} on the page (<!--q {first.strip()} = page ; row-->)")
        return f"{named[first.strip()]} ;{rest}"

    return MARKER.sub(lambda m: f"<!--q {m['key']}-->{quote(key(m['key']))}", text)


def write(pages: Sequence[Path], folder: Path) -> list[Path]:
    """Fill the quotes of ``pages`` from the tables of the pages in ``folder``; the pages changed.
    Every page is filled before any is written: a quote refused leaves them all as they were."""
    quote = Quotes(folder)
    changed = {}
    for path in dict.fromkeys(p for p in pages if p.suffix == ".md" and p.is_file()):
        text = path.read_text()

        def checked(key: str, path: Path = path) -> str:
            try:
                return quote(key)
            except ValueError as e:
                raise RefusedRunError(f"{path}: the quote '<!--q {key}-->': {e}; no quote was written") from None

        try:
            new = fill(text, checked)
        except ValueError as e:
            raise RefusedRunError(f"{path}: {e}; no quote was written") from None
        if new != text:
            changed[path] = new
    for path, text in changed.items():
        atomic_write(path, text)
    return list(changed)
