"""Adapter model cards: the evaluation section, written from run records.

``calbench.training.card`` writes a card when it saves an adapter, with an empty
``## Evaluation`` section before the paragraph on the training configuration; ``update_card``
fills that section with the adapter's record beside others (e.g. its base model's), and ends the
card's front matter with a ``model-index`` of the adapter's numbers, which the Hub renders.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from tabulate import tabulate

from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.pages.board import HEADLINE, split_score_columns, table_rows
from calbench.leaderboard.pages.export import model_index
from calbench.leaderboard.pages.numbers import Scored, scored
from calbench.leaderboard.records.record_types import RunRecord
from calbench.leaderboard.records.store import named_records
from calbench.provenance import atomic_write
from calbench.train_record import CARD_AFTER_EVALUATION, CARD_EVALUATION


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


MODEL_INDEX = "model-index:"


def splice_model_index(card: str, index: list[dict[str, Any]]) -> str:
    """A model card whose YAML front matter ends with ``index`` as its ``model-index`` (replacing
    the one calbench wrote before: it is always the front matter's last key)."""
    if not card.startswith("---\n") or "\n---\n" not in card[4:]:
        raise RefusedRunError("the model card has no YAML front matter (--- ... ---) for its model-index")
    front, rest = card[4:].split("\n---\n", 1)
    front = front.split(f"\n{MODEL_INDEX}", 1)[0] if not front.startswith(MODEL_INDEX) else ""
    block = yaml.safe_dump({"model-index": index}, sort_keys=False, allow_unicode=True, width=1000).rstrip("\n")
    return f"---\n{front}\n{block}\n---\n{rest}"


def write_card(adapter: Path, records: Sequence[RunRecord | Scored]) -> Path:
    """Write ``records`` (the adapter's, then e.g. its base's) into the adapter's card, and the
    adapter's headline numbers as its front matter's ``model-index`` (``export.model_index``)."""
    card = Path(adapter) / "README.md"
    if not card.is_file():
        raise RefusedRunError(f"{adapter} has no model card (README.md): is it an adapter calbench trained?")
    ready = scored(records)
    text = splice_card(card.read_text(), card_evaluation(ready))
    atomic_write(card, splice_model_index(text, model_index(ready[0])))
    return card
