"""Numbers the hand-written prose quotes from the rendered tables (``calbench.leaderboard.pages.quotes``):
the lookup and its refusals on made-up pages, and the committed pages: every quoted number is its
cell's, and no number of a table is typed into the prose by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.pages import quotes

ROOT = Path(__file__).resolve().parents[1]
BOARD = ROOT / "leaderboards"
# the pages with hand-written text around their rendered blocks, and those blocks' markers
PROSE = (
    "README.md",
    "leaderboards/README.md",
    "leaderboards/generalization.md",
    "leaderboards/generalization-gemma.md",
)
TYPED_ON_PURPOSE = "<!--typed-->"  # before a number no table prints: a command's printout, or arithmetic on quoted ones
BLOCKS = (
    ("<!-- board:start -->", "<!-- board:end -->"),
    ("<!-- leaderboard:start -->", "<!-- leaderboard:end -->"),
    ("<!-- protocols:start -->", "<!-- protocols:end -->"),
)

PAGE = """# A page

## Headline

| #   | system    | score ↑     | valid_rate ↑   |
|-----|-----------|-------------|----------------|
| 1   | oracle    | 99.6 ± 0.23 | 1 ± 0.00046    |
| 2   | collapsed | 0           | 0.5            |

### soft (`run-a`: method=soft)

| step   | examples   | unseen score   |
|--------|------------|----------------|
| 40     | 1280       | 23 ± 4.2       |
| 80     | 2560       | 31.5 ± 3       |

### hard (`run-b`: method=hard)

| step   | examples   | unseen score   |
|--------|------------|----------------|
| 40     | 1280       | 12 ± 2         |
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "board.md").write_text(PAGE)
    return tmp_path


def test_tables_are_read_with_their_headings_and_without_arrows():
    found = quotes.tables(PAGE)
    assert [t.heading for t in found] == ["Headline", "soft (`run-a`: method=soft)", "hard (`run-b`: method=hard)"]
    assert found[0].headers == ["#", "system", "score", "valid_rate"]
    assert found[1].rows == [["40", "1280", "23 ± 4.2"], ["80", "2560", "31.5 ± 3"]]


@pytest.mark.parametrize(
    ("key", "printed"),
    [
        ("board ; oracle ; score", "99.6 ± 0.23"),
        ("board ; oracle ; score ; value", "99.6"),
        ("board ; oracle ; score ; .0f", "100"),
        ("board ; collapsed ; valid_rate ; .0%", "50%"),
        ("board ; # `run-a` / 40 ; unseen score ; ±.1f", "23.0 ± 4.2"),
        ("board ; # `run-a` / 80 ; unseen score ; .2f", "31.50"),
        ("board ; # `run-b` / 40 ; examples ; ,.0f", "1,280"),
        ("board ; # Headline / 2 ; score", "0"),
    ],
)
def test_a_quote_prints_its_cell_as_asked(folder, key, printed):
    assert quotes.Quotes(folder)(key) == printed


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("board ; # `run-c` / 40 ; unseen score", "0 cells of board.md"),
        ("board ; 40 ; unseen score", "2 cells of board.md"),  # the step is in both run tables
        ("board ; oracle ; drift", "0 cells"),
        ("other ; oracle ; score", "no page other.md"),
        ("../board ; oracle ; score", "no page ../board.md"),
        ("board ; oracle", "a quote is 'page ; row ; column'"),
        ("board ; oracle ; system", "not a number"),
        ("board ; oracle ; system ; .1f", "cannot print 'oracle' as '.1f'"),
    ],
)
def test_a_quote_of_no_cell_or_of_several_is_refused(folder, key, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        quotes.Quotes(folder)(key)


def test_fill_prints_each_quoted_number_afresh_through_aliases(folder):
    text = (
        "<!--q @a = board ; # `run-a` / 80-->\n"
        "The oracle scores <!--q board ; oracle ; score-->12.0 ± 9 (stale), run a <!--q @a ; unseen score ; value-->31.5"
        " and then <!--q @a ; examples ; ,.0f--> examples (new, no number yet), at step <!--q @a ; step-->80, still.\n"
    )
    filled = quotes.fill(text, quotes.Quotes(folder))
    assert "scores <!--q board ; oracle ; score-->99.6 ± 0.23 (stale)" in filled
    assert "run a <!--q @a ; unseen score ; value-->31.5 and" in filled
    assert "then <!--q @a ; examples ; ,.0f-->2,560 examples" in filled
    assert "step <!--q @a ; step-->80, still." in filled  # the comma after a number is the prose's
    assert quotes.fill(filled, quotes.Quotes(folder)) == filled  # printed again: the same
    with pytest.raises(ValueError, match="no quote alias @b"):
        quotes.fill("<!--q @b ; score-->1", quotes.Quotes(folder))
    with pytest.raises(ValueError, match="@a is defined twice"):
        quotes.fill(text + "<!--q @a = board ; oracle-->\n", quotes.Quotes(folder))


def test_write_refuses_a_bad_quote_in_one_line_and_writes_no_page(folder):
    good, bad = folder / "good.md", folder / "bad.md"
    good.write_text("<!--q board ; oracle ; score-->1\n")
    bad.write_text("<!--q board ; nobody ; score-->1\n")
    with pytest.raises(RefusedRunError, match=r"bad\.md: the quote .*0 cells.*no quote was written") as e:
        quotes.write([good, bad], folder)
    assert "\n" not in str(e.value)
    assert good.read_text() == "<!--q board ; oracle ; score-->1\n"  # filled, but not written: all or none
    assert quotes.write([good], folder) == [good]
    assert good.read_text() == "<!--q board ; oracle ; score-->99.6 ± 0.23\n"


def _prose(text: str) -> str:
    """A page's hand-written text: without its rendered blocks, code, link targets and quotes."""
    for start, end in BLOCKS:
        while start in text and end in text:
            head, rest = text.split(start, 1)
            text = head + rest.split(end, 1)[1]
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = quotes.ALIAS.sub("", text)
    text = re.sub(
        rf"{TYPED_ON_PURPOSE}(?:{quotes.VALUE})(?:\u2013(?:{quotes.VALUE}))?", "", text
    )  # and a range: 21.1 to 21.7
    return quotes.MARKER.sub("", text)


def _rendered_cells() -> set[str]:
    """Every number of every rendered table of the leaderboard's pages as printed there, with
    its interval and without."""
    cells = set()
    for page in sorted(BOARD.glob("*.md")):
        text = page.read_text()
        name = page.relative_to(ROOT).as_posix()
        if name in PROSE:  # only its rendered block is tables of records
            text = text.split(BLOCKS[0][0], 1)[1].split(BLOCKS[0][1], 1)[0]
        for table in quotes.tables(text):
            for row in table.rows:
                cells |= {x for c in row if re.fullmatch(quotes.VALUE, c) for x in (c, c.partition(" ± ")[0])}
    return cells - {"n/a"}


def test_every_number_quoted_in_the_committed_prose_is_its_cell():
    """Printed afresh from the committed tables, every page's prose stays as it is: each quoted
    number is its cell's (the byte-for-byte render test holds the tables to the records)."""
    source = quotes.Quotes(BOARD)
    quoted = 0
    for name in PROSE:
        text = (ROOT / name).read_text()
        quoted += len(quotes.MARKER.findall(text))
        assert quotes.fill(text, source) == text, (
            f"{name}: a quoted number is not its cell's: calbench leaderboard render"
        )
    assert quoted >= 300


TYPED = re.compile(
    r"(?<![\w.=/+\u2013-])\d+\.\d+(?: ± \d+(?:\.\d+)?(?:e-?\d+)?)?(?![\w.]\d|\w|%)"
)  # a table prints no %


def test_no_number_of_a_table_is_typed_into_the_prose():
    """A decimal number in the hand-written text that a rendered table prints (a value with its
    interval, or a value alone) is quoted from it (``<!--q page ; row ; column-->``), not typed:
    typed, it would go stale when the records change. A number no record holds is marked so."""
    rendered = _rendered_cells()
    assert {"99.6 ± 0.23", "99.6", "42.2", "0.836"} <= rendered
    typed = []
    for name in PROSE:
        prose = _prose((ROOT / name).read_text())
        for m in TYPED.finditer(prose):
            if m.group() in rendered:
                line = prose.count("\n", 0, m.start()) + 1
                typed.append(f"{name} (prose line {line}): {m.group()}")
    assert not typed, f"{len(typed)} typed numbers, first: {typed[:5]}"
