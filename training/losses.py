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

from typing import Any

import numpy as np
import torch

from calbench.trie import Trie

EPS = 1e-8
CHUNK = 32  # logits rows per pass over the vocabulary in the soft loss (32 x 49k fp32: 6 MB)


def soft_kl(
    logits: torch.Tensor,
    child_ids: torch.Tensor,
    child_q: torch.Tensor,
    weights: torch.Tensor,
    tau: float = 1.0,
    eps: float = EPS,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Weighted sum over rows of KL(q̃ ‖ softmax(logits / τ)).

    Args:
        logits: (N, V) logits; row r's are ``logits[rows[r]]`` (default: ``logits[r]``).
        child_ids: (R, K) token ids of each row's children, padded with any id.
        child_q: (R, K) target probabilities q of the children; 0 marks padding.
        weights: (R,) row weights.
        rows: (R,) which logits row each target row trains (repeats allowed).

    Only the children's logits and each row's log-sum-exp enter the loss, so no (R, V) copy
    of the selected rows is made: the backward writes the gradient once, as
    w_r (softmax(z_r / τ) - q̃_r) / τ (``_SparseSoftKL``).
    """
    real = child_q > 0
    q = torch.where(real, child_q.clamp_min(eps), torch.zeros_like(child_q))
    q = q / q.sum(dim=-1, keepdim=True)
    coef = q * weights[:, None].to(q.dtype)  # w_r q̃_rk; 0 on padding
    entropy = torch.where(real, coef * torch.log(torch.where(real, q, torch.ones_like(q))), 0.0).sum()
    if rows is None:
        rows = torch.arange(child_ids.shape[0], device=child_ids.device)
    cross: torch.Tensor = _SparseSoftKL.apply(logits, rows, child_ids, coef.float(), float(tau))
    return entropy.to(cross.dtype) + cross


class _SparseSoftKL(torch.autograd.Function):
    """Σ_rk c_rk (logsumexp(z_n / τ) - z_nk / τ) with n = rows[r], k = child_ids[r, k]: the
    cross-entropy part of ``soft_kl``, with c = w q̃ (no gradient to c)."""

    @staticmethod
    def forward(
        ctx: Any, logits: torch.Tensor, rows: torch.Tensor, child_ids: torch.Tensor, coef: torch.Tensor, tau: float
    ) -> torch.Tensor:
        z = logits.float()
        lse = torch.cat([torch.logsumexp(z[i : i + CHUNK] / tau, dim=-1) for i in range(0, z.shape[0], CHUNK)])
        picked = z[rows[:, None], child_ids] / tau
        ctx.save_for_backward(logits, rows, child_ids, coef, lse)
        ctx.tau = tau
        return (coef * (lse[rows][:, None] - picked)).sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        logits, rows, child_ids, coef, lse = ctx.saved_tensors
        tau = ctx.tau
        z = logits.float()
        mass = torch.zeros_like(lse).index_add_(0, rows, coef.sum(-1))  # Σ_r w_r per logits row
        scale = grad_out.float() / tau
        row_scale = (mass * scale)[:, None]
        # The one (N, V) tensor of the backward: w softmax(z / τ) / τ, a few rows at a time (they
        # stay in cache), then the children's -w q̃ / τ added.
        grad = torch.empty_like(z)
        for i in range(0, z.shape[0], CHUNK):
            part = grad[i : i + CHUNK]
            torch.div(z[i : i + CHUNK], tau, out=part)
            part.sub_(lse[i : i + CHUNK, None]).exp_().mul_(row_scale[i : i + CHUNK])
        grad.index_put_((rows[:, None].expand_as(child_ids), child_ids), -(coef * scale), accumulate=True)
        return grad.to(logits.dtype), None, None, None, None


def hard_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the answer tokens (labels -100 elsewhere)."""
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


def node_weights(trie: Trie) -> np.ndarray:
    """Row weights that make the full-trie loss the exact expectation of the path loss.

    The path loss of a string y of L + 1 tokens is the mean of the KL at the L + 1 nodes
    it visits; its expectation under P_Y is Σ_nodes KL(node) Σ_{y visits node} P_Y(y) / (L_y + 1),
    the walk ``calbench.metrics.likelihood.logit_kl`` also takes (``Trie.path_weights``).
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
