"""The training losses, on rows of logits.

A *row* is one position whose next-token distribution is trained: a position along a
sampled answer (soft path loss), a trie node (full-trie loss) or an answer token (hard
loss). Soft targets are sparse: the row's trie children and their probabilities q.

* ``soft_kl``: Σ_rows w_r KL(q̃_r ‖ softmax(z_r / τ)) over the **full** vocabulary, with
  q̃ = q clamped at ``eps`` and renormalised over the children. Probability the model
  puts on tokens outside the trie lowers the children's log-probabilities, so it is
  penalised, not renormalised away. Weights w give the path loss (1 / (L + 1) per
  position, averaged over examples) or the full-trie expectation (``node_weights``).
* ``hard_ce``: mean cross-entropy of the sampled answer's tokens and terminator.
"""

from __future__ import annotations

import numpy as np
import torch

from calbench.trie import Trie

EPS = 1e-8


def soft_kl(
    logits: torch.Tensor,
    child_ids: torch.Tensor,
    child_q: torch.Tensor,
    weights: torch.Tensor,
    tau: float = 1.0,
    eps: float = EPS,
) -> torch.Tensor:
    """Weighted sum over rows of KL(q̃ ‖ softmax(logits / τ)).

    Args:
        logits: (R, V) logits of the trained rows.
        child_ids: (R, K) token ids of each row's children, padded with any id.
        child_q: (R, K) target probabilities q of the children; 0 marks padding.
        weights: (R,) row weights.
    """
    real = child_q > 0
    q = torch.where(real, child_q.clamp_min(eps), torch.zeros_like(child_q))
    q = q / q.sum(dim=-1, keepdim=True)
    logp = torch.log_softmax(logits.float() / tau, dim=-1).gather(-1, child_ids)
    per_row = torch.where(real, q * (torch.log(torch.where(real, q, torch.ones_like(q))) - logp), 0.0).sum(-1)
    return (per_row * weights).sum()


def hard_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the answer tokens (labels -100 elsewhere)."""
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def node_weights(trie: Trie) -> np.ndarray:
    """Row weights that make the full-trie loss the exact expectation of the path loss.

    The path loss of a string y of L + 1 tokens is the mean of the KL at the L + 1 nodes
    it visits; its expectation under P_Y is Σ_nodes KL(node) Σ_{y visits node} P_Y(y) / (L_y + 1),
    the walk ``calbench.likelihood_metrics.logit_kl`` also takes (``Trie.path_weights``).
    """
    return trie.path_weights(trie.mass[trie.ends] / trie.mass[0])


def children_targets(trie: Trie, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(child ids, child q) of trie nodes ``rows``, padded to the widest (q = 0 pads)."""
    q = trie.q()
    width = max(int((trie.child_ptr[rows + 1] - trie.child_ptr[rows]).max(initial=1)), 1)
    ids = np.zeros((rows.size, width), dtype=np.int64)
    probs = np.zeros((rows.size, width))
    for r, node in enumerate(rows.tolist()):
        kids = trie.children(node)
        ids[r, : kids.size] = trie.tokens[kids]
        probs[r, : kids.size] = q[kids]
    return ids, probs
