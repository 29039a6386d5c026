"""benchmarks/gpu_check.py at its tiny size on the CPU: it passes, names every check, and its checks can fail."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks import gpu_check
from calbench.backends import tree_attention


@pytest.mark.integration
def test_tiny_run_passes_and_names_every_check(capsys):
    assert gpu_check.main(["--tiny", "--device", "cpu", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    counts = {"tree attention": 8, "sampler first token": 4, "sampler second token": 4}  # 2 models x 2 dtypes
    counts |= {"training soft:": 4, "training hard:": 4, "training soft-all:": 4}  # (x 2 chunk sizes for trees)
    assert {name: out.count(name) for name in counts} == counts
    assert "throughput on cpu" in out
    assert out.rstrip().endswith("gpu_check: all checks passed") and "FAIL" not in out


@pytest.mark.integration
def test_a_tree_mask_that_sees_siblings_fails(capsys, monkeypatch):
    # Mutation: every node attends to every node of its chunk, not only to its ancestors.
    def leaky(trie, nodes, outside, n_prompt):
        return np.ones((nodes.size, n_prompt + len(outside) + nodes.size), dtype=bool)

    monkeypatch.setattr(tree_attention, "_tree_mask", leaky)
    argv = ["--tiny", "--device", "cpu", "--repeats", "1", "--models", "smollm2-135m", "--dtypes", "fp32"]
    assert gpu_check.main(argv) == 1
    out = capsys.readouterr().out
    assert "FAIL smollm2-135m fp32 cpu tree attention" in out and out.rstrip().endswith("checks failed")


def test_each_comparison_fails_on_a_perturbed_result():
    rng = np.random.default_rng(0)
    plain = np.append(np.nan, -rng.random(20))
    assert gpu_check.tree_verdict(plain.copy(), plain, plain, "fp32")[0]
    assert not gpu_check.tree_verdict(plain + 1e-3, plain, plain, "fp32")[0]
    bf16 = plain + 1e-3 * rng.standard_normal(21)
    assert not gpu_check.tree_verdict(bf16 + 1e-2, bf16, plain, "bf16")[0]

    probs = torch.softmax(torch.randn(200, generator=torch.Generator().manual_seed(0)) * 2, 0)
    torch.manual_seed(0)
    right = torch.multinomial(probs, 4000, replacement=True)
    assert gpu_check.law_verdict(right, probs)[0]
    assert not gpu_check.law_verdict((right + 1) % 200, probs)[0]  # an off-by-one token
    hot = torch.multinomial(torch.softmax(probs.log() / 1.3, 0), 4000, replacement=True)
    assert not gpu_check.law_verdict(hot, probs)[0]  # a wrong temperature

    grads = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    assert gpu_check.gradient_verdict(2.0, grads, 2.0, grads, "fp32")[0]
    assert not gpu_check.gradient_verdict(2.001, grads, 2.0, grads, "fp32")[0]
    assert not gpu_check.gradient_verdict(2.0, grads + grads.roll(1), 2.0, grads, "bf16")[0]
