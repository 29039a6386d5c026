"""Token tries held as arrays.

A ``Trie`` stores one row per node (the root is node 0): the token on the edge into the
node, its parent, its depth and the target mass of all strings through it. Children of
node p are ``child_idx[child_ptr[p]:child_ptr[p + 1]]``. The next-token target at p is

    q(v | p) = mass[child] / mass[p]   for the child reached by token v.

The strings are token sequences, in calbench the canonical answers tokenized in context
and terminated (``calbench.answer_tokens``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Trie:
    tokens: np.ndarray  # (N,) int64, token on the edge into the node; -1 at the root
    parent: np.ndarray  # (N,) int64, parent node; -1 at the root
    depth: np.ndarray  # (N,) int64, 0 at the root
    mass: np.ndarray  # (N,) float64, target mass of the strings through the node (1 at the root)
    ends: np.ndarray  # (S,) int64, the node where string s ends
    child_ptr: np.ndarray  # (N + 1,) int64, CSR offsets into child_idx
    child_idx: np.ndarray  # (N - 1,) int64, children grouped by parent, in node order

    @property
    def n_nodes(self) -> int:
        return int(self.tokens.size)

    @property
    def n_strings(self) -> int:
        return int(self.ends.size)

    def children(self, node: int) -> np.ndarray:
        return self.child_idx[self.child_ptr[node] : self.child_ptr[node + 1]]

    def inner(self) -> np.ndarray:
        """Ids of the nodes with children (the root first): the nodes whose next token is scored."""
        return np.flatnonzero(self.child_ptr[1:] > self.child_ptr[:-1])

    def mark_paths(self, nodes: np.ndarray, column: np.ndarray, out: np.ndarray) -> None:
        """Tree attention: set ``out[i, column[a]]`` for ``nodes[i]`` and each of its ancestors
        ``a`` below the root (``column`` maps node ids to columns of ``out``)."""
        rows = np.arange(nodes.size)
        walk = np.asarray(nodes).copy()
        while np.any(walk > 0):  # the node itself, then one step up per pass
            live = walk > 0
            out[rows[live], column[walk[live]]] = True
            walk = np.where(live, self.parent[np.maximum(walk, 0)], 0)

    def q(self) -> np.ndarray:
        """Target probability of the edge into each node, q(token | parent) (nan at the root)."""
        out = np.full(self.n_nodes, np.nan)
        out[1:] = self.mass[1:] / self.mass[self.parent[1:]]
        return out

    def paths(self) -> list[list[int]]:
        """The token sequence of every string (slow; for tests and debugging)."""
        out = []
        for end in self.ends.tolist():
            path = []
            while end > 0:
                path.append(int(self.tokens[end]))
                end = int(self.parent[end])
            out.append(path[::-1])
        return out

    def path_weights(self, string_mass: np.ndarray | None = None) -> np.ndarray:
        """Per node, Σ over the strings y whose path visits it of m(y) / (L_y + 1).

        A string of L + 1 tokens visits L + 1 nodes: the root and its first L prefixes
        (the nodes whose next token it predicts). So for any per-node term t, the
        m-weighted sum over strings of the mean of t along each string's path is
        Σ_nodes t(node) path_weights(node): the one walk behind ``logit_kl`` and the
        full-trie training loss. ``string_mass`` (one per string) defaults to the
        trie's masses at the strings' ends.
        """
        nodes = self.string_nodes()  # (S, width): the nodes *reached* by each token
        visited = np.concatenate([np.zeros((self.n_strings, 1), dtype=np.int64), nodes[:, :-1]], axis=1)
        length = (nodes >= 0).sum(axis=1)
        keep = np.arange(nodes.shape[1])[None, :] < length[:, None]
        mass = self.mass[self.ends] if string_mass is None else np.asarray(string_mass, dtype=float)
        share = np.broadcast_to((mass / length)[:, None], nodes.shape)
        return np.bincount(visited[keep], weights=share[keep], minlength=self.n_nodes)

    def string_nodes(self) -> np.ndarray:
        """(S, max depth) node ids along each string's path, -1 padded."""
        width = int(self.depth[self.ends].max(initial=0))
        out = np.full((self.n_strings, width), -1, dtype=np.int64)
        nodes = self.ends.copy()
        for col in range(width - 1, -1, -1):
            # Walk up from each end; strings shorter than `width` finish early.
            has = self.depth[nodes] > col
            out[has, col] = nodes[has]
            nodes = np.where(has, self.parent[nodes], nodes)
        return out


def build_trie(
    sequences: Sequence[Sequence[int]], masses: np.ndarray | None = None, allow_prefixes: bool = False
) -> Trie:
    """The prefix trie of token sequences, weighted by ``masses`` (uniform by default).

    Built one depth at a time with ``numpy.unique`` over (parent, token) keys, so a
    16384-string space takes milliseconds. Sequences must be non-empty, and none may be
    a strict prefix of another (a terminator at the end guarantees it) unless
    ``allow_prefixes``: then a string may end at an inner node (scoring lm-eval's
    arbitrary continuations; targets need terminated strings).
    """
    n = len(sequences)
    if n == 0:
        raise ValueError("cannot build a trie of no strings")
    lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=n)
    if lengths.min() == 0:
        raise ValueError("empty token sequence in trie")
    flat = np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int64, count=int(lengths.sum()))
    width = int(lengths.max())
    padded = np.full((n, width), -1, dtype=np.int64)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    padded[np.repeat(np.arange(n), lengths), np.arange(flat.size) - starts] = flat
    w = np.full(n, 1.0 / n) if masses is None else np.asarray(masses, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"{n} sequences but {w.size} masses")

    vocab = int(flat.max()) + 1  # (parent, token) pairs as one integer key
    tokens, parents, depths, mass = [np.array([-1])], [np.array([-1])], [np.array([0])], [np.array([w.sum()])]
    node_of = np.zeros(n, dtype=np.int64)  # current node of each string
    ends = np.full(n, -1, dtype=np.int64)
    next_id = 1
    for d in range(width):
        alive = np.flatnonzero(lengths > d)
        uniq, inverse = np.unique(node_of[alive] * vocab + padded[alive, d], return_inverse=True)
        inverse = inverse.reshape(-1)
        ids = next_id + np.arange(len(uniq))
        tokens.append(uniq % vocab)
        parents.append(uniq // vocab)
        depths.append(np.full(len(uniq), d + 1))
        mass.append(np.bincount(inverse, weights=w[alive], minlength=len(uniq)))
        node_of[alive] = ids[inverse]
        done = alive[lengths[alive] == d + 1]
        ends[done] = node_of[done]
        next_id += len(uniq)

    parent = np.concatenate(parents)
    order = np.argsort(parent[1:], kind="stable") + 1
    counts = np.bincount(parent[1:], minlength=next_id)
    child_ptr = np.concatenate([[0], np.cumsum(counts)])
    trie = Trie(
        tokens=np.concatenate(tokens),
        parent=parent,
        depth=np.concatenate(depths),
        mass=np.concatenate(mass),
        ends=ends,
        child_ptr=child_ptr,
        child_idx=order,
    )
    if not allow_prefixes and np.any(counts[trie.ends] > 0):
        raise ValueError("a sequence is a strict prefix of another; append a terminator")
    return trie
