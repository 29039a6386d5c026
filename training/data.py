"""Training data: the 1,988 training prompts, templated as the evaluation templates them.

``TrainingSet`` is a list of examples (prompt, epoch, repeat) in family-balanced order:
within each epoch, families take turns (their order reshuffled every round) and each
family's examples are shuffled, all from ``seed``. Every example draws its answer from
its own seed, so a run is reproducible and a resumed run sees the same data.

With fresh parameters (``parameters="fresh"``) the order is the same, but each example's
prompt is a fresh draw of its grid prompt's family (``calbench.param_ranges.draw``, from the
example's own seed, in the ranges widened by ``widen``, drawn again where the run's decimals
give its law no canonical space): the same families and number of examples as the grid, every
prompt new, and the same prompts on resume.

The collators turn examples into tensors, left-padded so that every answer ends at the
last position and the model only computes logits for the trained window
(``logits_to_keep``):

* ``SoftPathCollator``: one sampled answer y ~ P_Y; the rows are the L + 1 positions
  along Tok(y)∘terminator, each with its trie children and q;
* ``FullTrieCollator``: the whole trie packed after the prompt (each node attends to the
  prompt and its ancestors, at position prompt + depth), in rows of a few hundred nodes
  (sub-tries), every inner node trained once, weighted so the loss is the exact
  expectation of the path loss;
* ``HardCollator``: one sampled answer from the 16384-string space, tokenized in context
  (no trie needed), with cross-entropy labels on its tokens and terminator.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from calbench.answer_tokens import answer_tokens, terminator
from calbench.extra_families import EXTRA_FAMILIES, EXTRA_WIDEN, training_order
from calbench.families import ALL_FAMILIES, FAMILIES, Family, Target, split_points
from calbench.param_ranges import draw
from calbench.prompt import encode, prompt_text, render
from calbench.space import canonical_space
from calbench.stats import seed_for
from calbench.training.losses import children_targets, node_weights
from calbench.trie import Trie, build_trie


@dataclass(frozen=True)
class Example:
    prompt: int  # index into TrainingSet.targets
    seed: int


def family_balanced(
    targets: Sequence[Target | Slot], repeats: int, epochs: int, seed: int
) -> list[tuple[int, int, int]]:
    """(prompt, epoch, repeat) triples: per epoch, families take turns in a reshuffled order."""
    out: list[tuple[int, int, int]] = []
    for epoch in range(epochs):
        rng = random.Random(seed_for("order", seed, epoch))
        groups: dict[str, list[tuple[int, int, int]]] = {}
        for i, t in enumerate(targets):
            groups.setdefault(t.family.name, []).extend((i, epoch, r) for r in range(repeats))
        for items in groups.values():
            rng.shuffle(items)
        while any(groups.values()):
            names = [n for n, items in groups.items() if items]
            rng.shuffle(names)
            out.extend(groups[n].pop() for n in names)
    return out


class Slot(NamedTuple):
    """An extra family's place in an epoch (``with_extra_families``): its family only, drawn afresh
    for every example."""

    family: Family


def with_extra_families(grid: Sequence[Target], extra: int) -> list[Target | Slot]:
    """An epoch's slots with ``extra`` extra families (``calbench.extra_families.training_order``'s
    first): as many slots as ``grid`` has, shared by the families in proportion to their weights,
    a training family's weight its number of grid prompts, an extra family's the training families'
    mean (largest remainders; ties to the earlier family). A training family's slots are its first
    grid prompts, an extra family's a ``Slot`` (fresh parameters replace both: only the family of a
    slot counts)."""
    if extra == 0:
        return list(grid)
    counts: dict[str, list[Target]] = {}
    for t in grid:
        counts.setdefault(t.family.name, []).append(t)
    names = training_order()[:extra]
    mean = len(grid) / len(counts)
    weights = {**{f: float(len(ts)) for f, ts in counts.items()}, **dict.fromkeys(names, mean)}
    total = sum(weights.values())
    exact = {f: len(grid) * w / total for f, w in weights.items()}
    slots = {f: math.floor(x) for f, x in exact.items()}
    order = sorted(exact, key=lambda f: -(exact[f] - slots[f]))  # stable: ties keep the earlier family
    for f in order[: len(grid) - sum(slots.values())]:
        slots[f] += 1
    out: list[Target | Slot] = [t for f, ts in counts.items() for t in ts[: slots[f]]]
    for name in names:
        out += [Slot(EXTRA_FAMILIES[name])] * slots[name]
    return out


def distribution(targets: Sequence[Target | Slot], order: Sequence[tuple[int, int, int]]) -> dict[str, int]:
    """Examples per family over a run's order (the training distribution a run records), in
    first-seen order of the table (the 30, then the extra families)."""
    seen: dict[str, int] = {}
    for p, _, _ in order:
        name = targets[p].family.name
        seen[name] = seen.get(name, 0) + 1
    return {f: seen[f] for f in ALL_FAMILIES if f in seen}


def fresh_targets(
    grid: Sequence[Target | Slot],
    order: Sequence[tuple[int, int, int]],
    seed: int,
    widen: float,
    decimals: int | None = None,
) -> list[Target]:
    """Example by example (``order``'s (grid prompt, epoch, repeat) triples), a fresh draw of the grid
    prompt's family from a generator seeded by the run's seed and the triple: a training family's
    from its range widened by ``widen``, an extra family's from its box widened by ``EXTRA_WIDEN``
    whatever ``widen`` (its box is no paper's range, and some of it lies within the held-out margin);
    with ``decimals`` (the run's), each draw has a canonical space at them (``calbench.param_ranges.draw``)."""
    return [
        draw(
            grid[p].family,
            np.random.default_rng(seed_for("parameters", seed, e, p, r)),
            widen if grid[p].family.name in FAMILIES else EXTRA_WIDEN,
            decimals=decimals,
        )
        for p, e, r in order
    ]


class TrainingSet(torch.utils.data.Dataset):
    """Training prompts rendered for one tokenizer, and the example order of a run."""

    def __init__(
        self,
        tokenizer: Any,
        chat: bool,
        repeats: int,
        epochs: int,
        seed: int,
        prompts: int | None = None,
        parameters: str = "grid",
        widen: float = 1.0,
        extra_families: int = 0,
        decimals: int | None = None,
    ) -> None:
        grid = with_extra_families(split_points("train"), extra_families)
        if prompts is not None:  # a family-balanced subset for smoke runs
            grid = [grid[i] for i, _, _ in family_balanced(grid, 1, 1, seed)[:prompts]]
        order = family_balanced(grid, repeats, epochs, seed)
        self.distribution = distribution(grid, order)  # examples per family over the run
        if parameters == "fresh":  # one prompt per example, drawn from its grid prompt's family
            targets = fresh_targets(grid, order, seed, widen, decimals)
            self.examples = [Example(i, seed_for("example", seed, e, p, r)) for i, (p, e, r) in enumerate(order)]
        else:
            targets = [t for t in grid if isinstance(t, Target)]  # no slots: extra families are fresh only
            self.examples = [Example(p, seed_for("example", seed, e, p, r)) for p, e, r in order]
        self.targets = targets
        self.tokenizer = tokenizer
        self.rendered = [render(tokenizer, prompt_text(t)) if chat else prompt_text(t) + "\n" for t in targets]
        self.prompt_ids = [encode(tokenizer, r) for r in self.rendered]
        self.end = terminator(tokenizer, chat)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Example:
        return self.examples[i]

    def trie(self, prompt: int, decimals: int, max_bins: int) -> Trie:
        space = canonical_space(self.targets[prompt], decimals, max_bins)
        seqs = answer_tokens(self.tokenizer, self.rendered[prompt], space.strings, self.end)
        return build_trie(seqs, space.masses)

    def sample_answer(self, example: Example, decimals: int, max_bins: int) -> list[int]:
        """Tokens of one answer y ~ P_Y (and the terminator), without building a trie."""
        space = canonical_space(self.targets[example.prompt], decimals, max_bins)
        index = np.random.default_rng(example.seed).choice(len(space), p=space.masses)
        return answer_tokens(self.tokenizer, self.rendered[example.prompt], [space.strings[index]], self.end)[0]


def _left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask and position_ids, padded on the left."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r) :] = torch.tensor(r)
        mask[b, width - len(r) :] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp_min(0)
    return ids, mask, positions


@dataclass
class SoftPathCollator:
    data: TrainingSet
    decimals: int
    max_bins: int

    def __call__(self, batch: list[Example]) -> dict[str, Any]:
        rows: list[list[int]] = []
        child_ids: list[np.ndarray] = []
        child_q: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        index: list[int] = []
        keep = 0
        for ex in batch:
            trie = self.data.trie(ex.prompt, self.decimals, self.max_bins)
            s = np.random.default_rng(ex.seed).choice(trie.n_strings, p=trie.mass[trie.ends] / trie.mass[0])
            path = trie.string_nodes()[s]
            path = path[path >= 0]
            visited = np.concatenate([[0], path[:-1]])  # the L + 1 nodes whose children are trained
            ids, q = children_targets(trie, visited)
            rows.append(self.data.prompt_ids[ex.prompt] + trie.tokens[path[:-1]].tolist())
            child_ids.append(ids)
            child_q.append(q)
            weights.append(np.full(visited.size, 1.0 / (visited.size * len(batch))))
            keep = max(keep, visited.size)
        input_ids, attention_mask, position_ids = _left_pad(rows, self.data.tokenizer.pad_token_id or 0)
        for b, w in enumerate(weights):  # row r of example b sits at the end of the kept window
            index.extend(b * keep + keep - w.size + np.arange(w.size))
        return _soft_batch(input_ids, attention_mask, position_ids, keep, index, child_ids, child_q, weights)


@dataclass
class FullTrieCollator:
    """Every inner trie node of each example's prompt, packed into rows of about ``row_nodes``
    nodes that all attend to their example's prompt, computed once.

    The batch holds the prompts (left-padded, one row per example) and the rows: the nodes on
    the paths of a run of consecutive strings (a sub-trie), each at position prompt + depth and
    attending to its prompt's keys and values and to its ancestors only. The trainer computes
    the prompts first and feeds the rows after their prompt's cache, in one autograd graph, so
    the gradient reaches the prompt positions exactly as in one long sequence, and no prompt
    token is fed twice. A node's next-token distribution depends on nothing else, so it is
    trained in the first row that holds it, with its children in the whole trie as targets;
    the root at its prompt's last token. Rows keep tree attention cheap: a row of n nodes
    costs n (prompt + n) attention; the price is a few shared ancestors repeated per row.
    """

    data: TrainingSet
    decimals: int
    max_bins: int
    row_nodes: int = 256

    def __call__(self, batch: list[Example]) -> dict[str, Any]:
        prompts = [self.data.prompt_ids[ex.prompt] for ex in batch]
        rows: list[tuple[int, list[int], list[int], np.ndarray]] = []  # (example, ids, positions, tree mask)
        trained: list[tuple[int, list[int]]] = []  # (row, node columns trained there; -1: the prompt's root)
        child_ids, child_q, weights = [], [], []
        for e, ex in enumerate(batch):
            trie = self.data.trie(ex.prompt, self.decimals, self.max_bins)
            w = node_weights(trie) / len(batch)
            for nodes, owned in _sub_tries(trie, self.row_nodes):
                column = np.full(trie.n_nodes, -1, dtype=np.int64)
                column[nodes] = np.arange(nodes.size)
                tree = np.zeros((nodes.size, nodes.size), dtype=bool)  # node i sees itself and its ancestors
                trie.mark_paths(nodes, column, tree)
                positions = (len(prompts[e]) - 1 + trie.depth[nodes]).tolist()
                rows.append((e, trie.tokens[nodes].tolist(), positions, tree))
                trained.append((len(rows) - 1, np.where(owned == 0, -1, column[owned]).tolist()))
                ids, q = children_targets(trie, owned)
                child_ids.append(ids)
                child_q.append(q)
                weights.append(w[owned])
        pad = self.data.tokenizer.pad_token_id or 0
        prompt_ids, prompt_mask, _ = _left_pad(prompts, pad)  # the trainer takes positions from the mask
        width = prompt_ids.shape[1]
        n = max(len(tokens) for _, tokens, _, _ in rows)
        input_ids = torch.full((len(rows), n), pad, dtype=torch.long)
        position_ids = torch.zeros((len(rows), n), dtype=torch.long)
        allowed = np.zeros((len(rows), 1, n, width + n), dtype=bool)
        allowed[:, 0, np.arange(n), width + np.arange(n)] = True  # every node (padding too) sees itself
        for r, (e, tokens, pos, tree) in enumerate(rows):
            input_ids[r, : len(tokens)] = torch.tensor(tokens)
            position_ids[r, : len(tokens)] = torch.tensor(pos)
            allowed[r, 0, : len(tokens), :width] = prompt_mask[e].numpy().astype(bool)[None, :]
            allowed[r, 0, : len(tokens), width : width + len(tokens)] = tree
        # Logits come as the prompts' last positions, then every row position: root e is row e.
        index: list[int] = []
        for r, ks in trained:
            index.extend(rows[r][0] if k < 0 else len(batch) + r * n + k for k in ks)
        out = _soft_batch(input_ids, torch.from_numpy(allowed), position_ids, n, index, child_ids, child_q, weights)
        out |= {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask}
        out["row_example"] = torch.tensor([e for e, _, _, _ in rows], dtype=torch.long)
        return out


def _sub_tries(trie: Trie, row_nodes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Rows of a trie: (the inner nodes on the paths of a run of strings, the nodes trained there).

    Strings are taken in order, and a row closes when the next string's new nodes would
    take it past ``row_nodes``. Node lists are in id order (parents before children).
    The root (trained at the prompt's last token) is trained in the first row, listed as 0.
    """
    paths = trie.string_nodes()
    out: list[tuple[np.ndarray, np.ndarray]] = []
    seen: set[int] = {0}
    row: set[int] = set()

    def close() -> None:
        nodes = np.array(sorted(row), dtype=np.int64)
        owned = [0] if not out else []
        owned += [n for n in nodes.tolist() if n not in seen]
        seen.update(owned)
        if owned:
            out.append((nodes, np.array(owned, dtype=np.int64)))
        row.clear()

    for path in paths:
        inner = {int(n) for n in path[path >= 0][:-1]}  # the end node is a leaf: nothing to predict after it
        if row and len(row | inner) > row_nodes:
            close()
        row |= inner
    if row or not out:
        close()
    return out


def _soft_batch(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    keep: int,
    index: list[int],
    child_ids: list[np.ndarray],
    child_q: list[np.ndarray],
    weights: list[np.ndarray],
) -> dict[str, Any]:
    width = max(ids.shape[1] for ids in child_ids)

    def stack(parts: list[np.ndarray], dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1]))) for p in parts])).to(dtype)

    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "logits_to_keep": keep,
        "row_index": torch.tensor(index, dtype=torch.long),
        "child_ids": stack(child_ids, torch.long),
        "child_q": stack(child_q, torch.float32),
        "row_weights": torch.from_numpy(np.concatenate(weights)).float(),
    }


@dataclass
class HardCollator:
    data: TrainingSet
    decimals: int
    max_bins: int

    def __call__(self, batch: list[Example]) -> dict[str, Any]:
        answers = [self.data.sample_answer(ex, self.decimals, self.max_bins) for ex in batch]
        rows = [self.data.prompt_ids[ex.prompt] + a[:-1] for ex, a in zip(batch, answers, strict=True)]
        input_ids, attention_mask, position_ids = _left_pad(rows, self.data.tokenizer.pad_token_id or 0)
        keep = max(len(a) for a in answers)
        labels = torch.full((len(batch), keep), -100, dtype=torch.long)
        for b, a in enumerate(answers):
            labels[b, keep - len(a) :] = torch.tensor(a)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "logits_to_keep": keep,
            "labels": labels,
        }
