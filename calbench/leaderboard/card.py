"""Adapter model cards: the evaluation section, written from run records.

``calbench.training.card`` writes a card when it saves an adapter, with an empty
``## Evaluation`` section before the paragraph on the training configuration; ``update_card``
fills that section with the adapter's record beside others (e.g. its base model's).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from calbench.leaderboard.checks import RefusedRunError
from calbench.leaderboard.numbers import Scored, scored
from calbench.leaderboard.record_types import RunRecord
from calbench.leaderboard.render import HEADLINE, split_score_columns, table_rows
from calbench.leaderboard.store import named_records
from calbench.provenance import atomic_write


def card_evaluation(records: Sequence[RunRecord | Scored]) -> str:
    """An adapter card's evaluation section: its record beside the others given (e.g. its base), the
    headline and where it stands on each prompt set (training prompts, interpolation, unseen,
    held-out, widened ranges)."""
    ready = scored(records)  # once, for both tables
    parts = []
    for columns in (HEADLINE, split_score_columns()):
        headers, rows = table_rows(ready, columns)
        parts.append(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
    commands = "\n".join(f"- {s.name}: `{s.record['command'].strip()}`" for s in ready)
    note = "calbench leaderboard run records; value ± 95% interval half-width. Reproduce with:"
    return "\n\n".join(parts) + f"\n\n{note}\n\n{commands}"


CARD_EVALUATION = "## Evaluation"
CARD_AFTER_EVALUATION = "The resolved training configuration"


def splice_card(card: str, evaluation: str) -> str:
    """A model card with ``evaluation`` between its evaluation heading and the paragraph after it."""
    start, end = f"\n{CARD_EVALUATION}\n\n", f"\n\n{CARD_AFTER_EVALUATION}"
    if start not in card or end not in card.split(start, 1)[1]:
        raise RefusedRunError(
            f"the model card has no {CARD_EVALUATION!r} section followed by {CARD_AFTER_EVALUATION!r}"
        )
    head, rest = card.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}{evaluation}{end}{tail}"


def update_card(adapter: Path, names: Sequence[str], results_dir: Path) -> Path:
    """Write the run records ``names`` (the adapter's, then e.g. its base's) into the adapter's card."""
    return write_card(adapter, named_records(results_dir, names))


def write_card(adapter: Path, records: Sequence[RunRecord | Scored]) -> Path:
    """Write ``records`` (the adapter's, then e.g. its base's) into the adapter's card."""
    card = Path(adapter) / "README.md"
    if not card.is_file():
        raise RefusedRunError(f"{adapter} has no model card (README.md): is it an adapter calbench trained?")
    atomic_write(card, splice_card(card.read_text(), card_evaluation(records)))
    return card
