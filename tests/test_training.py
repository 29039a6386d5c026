"""The training add-on: losses against brute force, trajectories, resume, DDP, adapters load back."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import TrainerCallback

from calbench.training.config import TrainConfig
from calbench.training.data import Example, FullTrieCollator, SoftPathCollator, family_balanced
from calbench.training.losses import soft_kl
from calbench.training.trainer import build, run


def config(tiny, tmp_path, **kw):
    base = {"model": str(tiny), "output": str(tmp_path), "prompts": 12, "batch_size": 2, "effective_batch": 4}
    base |= {"use_cpu": True, "logging_steps": 1, "save_steps": 100, "parameters": "grid"}  # the pinned losses' prompts
    return TrainConfig(**(base | kw))


@torch.no_grad()
def brute_path_loss(model, data, prompt, trie, string, tau=1.0, eps=1e-8):
    """Mean over the L + 1 positions of KL(q~ || softmax(z / tau)) over the whole vocabulary."""
    path = trie.string_nodes()[string]
    path = path[path >= 0]
    ids = data.prompt_ids[prompt] + trie.tokens[path[:-1]].tolist()
    logits = model(torch.tensor([ids])).logits[0, len(data.prompt_ids[prompt]) - 1 :].double()
    logp = torch.log_softmax(logits / tau, dim=-1).numpy()
    q = trie.q()
    total = 0.0
    for k, node in enumerate([0, *path[:-1].tolist()]):
        kids = trie.children(node)
        qk = np.clip(q[kids], eps, None)
        qk /= qk.sum()
        total += float(np.sum(qk * (np.log(qk) - logp[k, trie.tokens[kids]])))
    return total / path.size


def test_family_balanced_order_is_reproducible_and_balanced():
    from calbench.families import split_points

    targets = split_points("train")
    a = family_balanced(targets, 1, 2, seed=11)
    assert a == family_balanced(targets, 1, 2, seed=11) and a != family_balanced(targets, 1, 2, seed=12)
    first = [targets[i].family.name for i, _, _ in a[:24]]
    assert len(set(first)) == 24  # the first round visits every family once
    assert sorted(i for i, e, _ in a if e == 0) == list(range(len(targets)))


def test_soft_path_loss_equals_brute_force(tiny_split, tmp_path):
    trainer, data = build(config(tiny_split, tmp_path, method="soft", tau=1.5).resolve())
    model = trainer.model.eval()
    collator = SoftPathCollator(data, 5, 1001)
    examples = data.examples[:2]
    batch = collator(examples)
    with torch.no_grad():
        trainer.tau = 1.5
        loss = float(trainer.compute_loss(model, batch))
    expected = []
    for ex in examples:
        trie = data.trie(ex.prompt, 5, 1001)
        s = np.random.default_rng(ex.seed).choice(trie.n_strings, p=trie.mass[trie.ends] / trie.mass[0])
        expected.append(brute_path_loss(model, data, ex.prompt, trie, s, tau=1.5))
    assert loss == pytest.approx(np.mean(expected), rel=1e-5)


@pytest.mark.parametrize("row_nodes", [256, pytest.param(9, marks=pytest.mark.integration)])
def test_full_trie_loss_is_the_expected_path_loss(tiny_split, tmp_path, row_nodes):
    # 256: the whole trie in one row; 9: split into many sub-trie rows that share ancestors.
    trainer, data = build(
        config(tiny_split, tmp_path, method="soft", soft_paths="all", max_bins=40, decimals=2).resolve()
    )
    model = trainer.model.eval()
    prompt = 3
    trie = data.trie(prompt, 2, 40)
    batch = FullTrieCollator(data, 2, 40, row_nodes=row_nodes)([Example(prompt, 0)])
    assert (batch["input_ids"].shape[0] == 1) == (row_nodes == 256)
    assert batch["row_index"].numel() == trie.inner().size  # each inner node once
    with torch.no_grad():
        loss = float(trainer.compute_loss(model, batch))
    weights = trie.mass[trie.ends] / trie.mass[0]
    expected = sum(w * brute_path_loss(model, data, prompt, trie, s) for s, w in enumerate(weights))
    assert loss == pytest.approx(expected, rel=1e-5)


def test_full_trie_rows_give_the_same_gradient(tiny_split, tmp_path):
    trainer, data = build(
        config(tiny_split, tmp_path, method="soft", soft_paths="all", max_bins=40, decimals=2).resolve()
    )
    model = trainer.model.eval()
    grads = []
    for row_nodes in (10**6, 7):
        model.zero_grad(set_to_none=True)
        batch = FullTrieCollator(data, 2, 40, row_nodes=row_nodes)([Example(3, 0), Example(5, 0)])
        trainer.compute_loss(model, batch).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert grads[0].abs().max() > 0
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-7)


def test_full_trie_gradient_equals_the_brute_force_expected_path_loss(tiny_split, tmp_path):
    """The prompt computed once, its rows after its cache, in one graph: the gradient is that of
    Σ_s P_Y(s) · path loss(s) written out with one plain forward per string."""
    trainer, data = build(
        config(tiny_split, tmp_path, method="soft", soft_paths="all", max_bins=40, decimals=2).resolve()
    )
    model = trainer.model.eval()
    prompt = 5
    trie = data.trie(prompt, 2, 40)
    model.zero_grad(set_to_none=True)
    trainer.compute_loss(model, FullTrieCollator(data, 2, 40, row_nodes=7)([Example(prompt, 0)])).backward()
    fast = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    q = trie.q()
    n_prompt = len(data.prompt_ids[prompt])
    total = torch.zeros(())
    for s, weight in enumerate(trie.mass[trie.ends] / trie.mass[0]):
        path = trie.string_nodes()[s]
        path = path[path >= 0]
        ids = data.prompt_ids[prompt] + trie.tokens[path[:-1]].tolist()
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, n_prompt - 1 :].float(), dim=-1)
        for k, node in enumerate([0, *path[:-1].tolist()]):
            kids = trie.children(node)
            qk = torch.from_numpy(np.clip(q[kids], 1e-8, None) / np.clip(q[kids], 1e-8, None).sum()).float()
            total = (
                total
                + weight * torch.sum(qk * (torch.log(qk) - logp[k, torch.from_numpy(trie.tokens[kids])])) / path.size
            )
    total.backward()
    brute = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert fast.abs().max() > 0
    torch.testing.assert_close(fast, brute, rtol=1e-4, atol=1e-7)


def test_gradient_vanishes_at_the_target():
    # Logits equal to log q on the children (and -inf-like elsewhere): the model is the target.
    q = torch.tensor([[0.5, 0.3, 0.2], [0.9, 0.1, 0.0]])
    ids = torch.tensor([[1, 4, 6], [2, 3, 0]])
    logits = torch.full((2, 8), -1e4)
    logits[0, [1, 4, 6]] = torch.log(q[0])
    logits[1, [2, 3]] = torch.log(q[1, :2])
    logits.requires_grad_(True)
    loss = soft_kl(logits, ids, q, torch.tensor([0.5, 0.5]))
    loss.backward()
    assert abs(float(loss)) < 1e-6 and float(logits.grad.abs().max()) < 1e-6
    # Away from the target the same loss is positive and pushes.
    worse = soft_kl(torch.zeros(2, 8, requires_grad=True), ids, q, torch.tensor([0.5, 0.5]))
    assert float(worse) > 0.1


def _dense_soft_kl(logits, ids, q, w, tau, rows):  # the definition, with the (R, V) rows copied out
    real = q > 0
    qt = torch.where(real, q.clamp_min(1e-8), torch.zeros_like(q))
    qt = qt / qt.sum(-1, keepdim=True)
    logp = torch.log_softmax(logits.float()[rows] / tau, -1).gather(-1, ids)
    return (
        torch.where(real, qt * (torch.log(torch.where(real, qt, torch.ones_like(qt))) - logp), 0.0).sum(-1) * w
    ).sum()


@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_soft_kl_reads_rows_in_place_with_the_dense_gradient(tau, dtype):
    # Rows picked out of a larger logits matrix (one twice, some never) give the loss and the
    # gradient of the dense definition; bf16 logits are scored in fp32 and get a bf16 gradient.
    gen = torch.Generator().manual_seed(3)
    logits = (3 * torch.randn(6, 40, generator=gen)).to(dtype)
    rows = torch.tensor([4, 0, 4, 2])
    ids = torch.randint(0, 40, (4, 5), generator=gen)
    q = torch.rand(4, 5, generator=gen) * (torch.rand(4, 5, generator=gen) > 0.3)
    q[:, 0] = 0.2  # every row has a child
    w = torch.rand(4, generator=gen)
    fast_in = logits.clone().requires_grad_(True)
    dense_in = logits.clone().requires_grad_(True)
    fast = soft_kl(fast_in, ids, q, w, tau=tau, rows=rows)
    dense = _dense_soft_kl(dense_in, ids, q, w, tau, rows)
    (2.5 * fast).backward()
    (2.5 * dense).backward()
    torch.testing.assert_close(fast, dense, rtol=1e-5, atol=1e-6)
    assert fast_in.grad.dtype == dtype and float(fast_in.grad[[1, 3, 5]].abs().max()) == 0.0  # rows never picked
    torch.testing.assert_close(
        fast_in.grad.float(), dense_in.grad.float(), rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-6
    )


# Losses of the first 4 optimizer steps on the tiny model (seed 11, 12 prompts, batch 2 x 2).
# They move when the data order, the sampling, the collation or the loss changes. "hard-legacy"
# summed each step's 2 micro-batches (--accumulation legacy: calbench's hard steps before the
# option), so its losses are twice the mean's; its steps are the same to 4 digits (AdamW is blind
# to a constant factor; clipping, which binds here only for legacy, varies it by a few percent).
TRAJECTORIES = {
    "soft": [5.4654, 5.4875, 5.4152, 5.4867],
    "soft-all": [5.6463, 5.5942, 5.5057, 5.6873],
    "hard": [6.1834, 6.2079, 6.1290, 6.1950],
    "hard-legacy": [12.3668, 12.4158, 12.2580, 12.3900],
}
OPTIONS = {
    "soft": {"method": "soft"},
    "soft-all": {"method": "soft", "soft_paths": "all", "max_bins": 60, "decimals": 2},
    "hard": {"method": "hard"},
    "hard-legacy": {"method": "hard", "accumulation": "legacy"},
}


def test_every_method_is_one_row_with_its_defaults_and_a_pinned_trajectory():
    """``--method`` offers exactly the rows of ``METHODS``; each has its defaults and a trajectory below."""
    import typing

    from calbench.training.config import CHOICES, METHOD_DEFAULTS, Method
    from calbench.training.methods import METHODS

    assert list(METHODS) == list(METHOD_DEFAULTS) == CHOICES["method"] == list(typing.get_args(Method))
    assert all(METHODS[name].name == name for name in METHODS)
    assert {options["method"] for options in OPTIONS.values()} == set(METHODS)


@pytest.mark.integration
@pytest.mark.parametrize("name", list(TRAJECTORIES))
def test_pinned_loss_trajectory(name, tiny_split, tmp_path):
    trainer, _ = build(config(tiny_split, tmp_path, max_steps=4, **OPTIONS[name]).resolve())
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses == pytest.approx(TRAJECTORIES[name], rel=2e-3), losses


@pytest.mark.integration
@pytest.mark.parametrize("method", ["hard", "soft"])
@pytest.mark.parametrize("accumulation", ["mean", "legacy"])
def test_a_step_is_the_mean_of_its_micro_batches(method, accumulation, tiny_split, tmp_path):
    """The loss a step backpropagates and logs is the mean of what compute_loss returned for its
    micro-batches (batch 2 x 2 here); with --accumulation legacy a hard step's is their sum."""
    trainer, _ = build(
        config(tiny_split, tmp_path, method=method, accumulation=accumulation, max_steps=1, logging_steps=1).resolve()
    )
    returned: list[float] = []
    compute_loss = trainer.compute_loss

    def recording(*args, **kwargs):
        loss = compute_loss(*args, **kwargs)
        returned.append(float(loss.detach()))
        return loss

    trainer.compute_loss = recording
    trainer.train()
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(returned) == 2 and len(logged) == 1
    summed = method == "hard" and accumulation == "legacy"
    assert logged[0] == pytest.approx(sum(returned) / (1 if summed else 2), rel=1e-5)


class StopAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True


@pytest.mark.integration
def test_resume_reaches_the_same_loss(tiny_split, tmp_path):
    straight, _ = build(config(tiny_split, tmp_path / "a", method="soft", max_steps=6, save_steps=3).resolve())
    straight.train()
    interrupted, _ = build(config(tiny_split, tmp_path / "b", method="soft", max_steps=6, save_steps=3).resolve())
    interrupted.add_callback(StopAt(3))
    interrupted.train()
    assert interrupted.state.global_step == 3 and (tmp_path / "b" / "checkpoint-3").is_dir()
    resumed, _ = build(config(tiny_split, tmp_path / "b", method="soft", max_steps=6, save_steps=3).resolve())
    resumed.train(resume_from_checkpoint=True)

    def last_loss(t):
        return [h["loss"] for h in t.state.log_history if "loss" in h][-1]

    assert last_loss(resumed) == pytest.approx(last_loss(straight), rel=1e-5)


@pytest.mark.integration
def test_run_writes_an_adapter_with_its_card(tiny_split, tmp_path):
    final = run(config(tiny_split, tmp_path, method="hard", max_steps=2))
    assert final == tmp_path / "adapter"
    assert {"adapter_model.safetensors", "adapter_config.json", "README.md", "calbench_train.json"} <= {
        p.name for p in final.iterdir()
    }
    summary = json.loads((final / "calbench_train.json").read_text())
    assert summary["steps"] == 2 and summary["config"]["method"] == "hard" and summary["config"]["max_bins"] == 16384
    assert "peft" in summary["versions"]
    card = (final / "README.md").read_text()
    assert "hard targets" in card and "2 optimizer steps" in card and "base_model:" in card
    assert list((tmp_path / "runs").rglob("events.out.tfevents.*"))  # TensorBoard logs
    assert not (tmp_path / ".adapter.partial").exists()  # nothing half-written left behind


def test_card_names_the_hub_model_of_a_catalogue_base(tiny_split, tmp_path):
    from calbench.training import card
    from calbench.training.config import TrainConfig

    summary = json.loads(
        (run(config(tiny_split, tmp_path, method="hard", max_steps=1)) / "calbench_train.json").read_text()
    )
    text = card.render(TrainConfig(method="hard", model="smollm2-135m-instruct").resolve(), summary)
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in text
    assert "pretrained=$(calbench models path smollm2-135m-instruct),peft=" in text
    assert "Retention" not in text
    kept = card.render(
        TrainConfig(method="hard", model=str(tiny_split), retain_weight=2.5, retain_batch=3).resolve(), summary
    )
    assert "plus 2.5 x the mean KL(base ‖ tuned)" in kept and "3 texts per forward" in kept
    local = card.render(TrainConfig(method="hard", model=str(tiny_split)).resolve(), summary)
    assert f"base_model: {Path(tiny_split).name}" in local  # the folder's name and weights, never its path
    assert summary["base_model"]["weights_sha256"] in local and str(Path(tiny_split).parent) not in local


def test_card_states_the_mean_and_the_last_logged_loss():
    from calbench.training import card

    history = [{"loss": 2.0, "step": 5}, {"loss": 1.0, "step": 10}, {"eval_loss": 9.0, "step": 10}]
    new = {"steps": 10, "mean_train_loss": 1.5, "last_train_loss": 1.0, "loss_history": history}
    assert card.loss_text(new) == "mean training loss 1.5000 over the run, last logged 1.0000"
    # A summary written before the two were separated: its "final_train_loss" is the run's mean,
    # and the last logged loss is read from its loss history.
    old = {"steps": 10, "final_train_loss": 1.5, "loss_history": history}
    assert card.loss_text(old) == card.loss_text(new)
    assert card.loss_text({"steps": 3, "final_train_loss": 1.5}) == "mean training loss 1.5000 over the run"


@pytest.mark.integration
def test_adapter_changes_the_scores(tiny_split, tmp_path):
    from calbench import evaluation

    # A few steps at a high learning rate so the adapter is far from the zero init.
    adapter = run(config(tiny_split, tmp_path, method="soft", max_steps=3, lr=5e-2))
    task = "calbench_numeric_heldout_likelihood"
    args = f"pretrained={tiny_split},dtype=float32"
    base = evaluation.evaluate("hf", [task], model_args=args, output_path=None, limit=2, device="cpu")
    tuned = evaluation.evaluate(
        "hf", [task], model_args=f"{args},peft={adapter}", output_path=None, limit=2, device="cpu"
    )
    a, b = base["results"][task]["seq_kl,none"], tuned["results"][task]["seq_kl,none"]
    assert abs(a - b) > 1e-3, (a, b)


@pytest.mark.integration
def test_ddp_two_processes_on_cpu(tiny_split, tmp_path):
    # torchrun as the module it runs: torch ships it, so this never skips for a missing script on PATH.
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517", "-m", "calbench.training",
        "--method", "soft", "--model", str(tiny_split), "--output", str(tmp_path), "--prompts", "8",
        "--batch-size", "2", "--effective-batch", "4", "--max-steps", "2", "--use-cpu",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "adapter" / "calbench_train.json").read_text())
    # 2 processes x batch 2 = the effective batch of 4: no accumulation, 8 examples in 2 steps.
    assert summary["steps"] == 2 and summary["world_size"] == 2 and summary["examples"] == 8


def test_bad_flags_are_refused(capsys):
    from calbench.training.cli import main

    assert main(["--batch-size", "3", "--effective-batch", "8"]) == 2
    assert "not a multiple" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--method", "medium"])


@pytest.mark.integration
def test_module_entry_point():
    done = subprocess.run([sys.executable, "-m", "calbench.training", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--soft-paths" in done.stdout


# ---- retention-aware training: the KL(base || tuned) term -----------------------------------


def test_retain_texts_are_not_the_evaluated_items():
    from calbench.metrics.retention import arithmetic_items, arithmetic_prompt, format_items
    from calbench.training.retain import retain_prompts

    texts = retain_prompts()
    evaluated = {arithmetic_prompt(i["question"]) for i in arithmetic_items()} | {i["prompt"] for i in format_items()}
    assert 60 <= len(texts) <= 76 and len(set(texts)) == len(texts)
    assert not set(texts) & evaluated


def test_retain_term_is_zero_for_a_fresh_adapter(tiny_split, tmp_path):
    from calbench.training.retain import retain_kl

    trainer, _ = build(config(tiny_split, tmp_path, retain_weight=1.0, retain_batch=3).resolve())
    batch = trainer.retain.batch(0, 3)
    assert batch["trained"].any(dim=1).all()  # every text has trained positions
    kl = retain_kl(trainer.model, batch["input_ids"], batch["attention_mask"], batch["trained"])
    assert kl.item() == 0.0


def test_retain_term_equals_a_brute_force_kl(tiny_split, tmp_path):
    """With a nonzero adapter: the term equals Σ_v p log(p / q) written out in float64 against a
    separately loaded base model and the merged tuned one, averaged over the trained positions."""
    import copy

    from transformers import AutoModelForCausalLM

    from calbench.training.retain import retain_kl

    trainer, _ = build(config(tiny_split, tmp_path, retain_weight=1.0, retain_batch=3).resolve())
    model = trainer.model.eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    batch = trainer.retain.batch(5, 3)
    got = retain_kl(model, batch["input_ids"], batch["attention_mask"], batch["trained"]).item()
    base = AutoModelForCausalLM.from_pretrained(tiny_split, dtype=torch.float64).eval()
    tuned = copy.deepcopy(model).merge_and_unload().double().eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for r in range(3):
            n = int(batch["attention_mask"][r].sum())
            ids = batch["input_ids"][r : r + 1, :n]
            p = torch.softmax(base(ids).logits[0], -1)
            q = torch.softmax(tuned(ids).logits[0], -1)
            for t in torch.nonzero(batch["trained"][r]).flatten().tolist():
                total += sum(float(p[t, v] * math.log(p[t, v] / q[t, v])) for v in range(p.shape[1]))
                count += 1
    assert got > 1e-3
    assert got == pytest.approx(total / count, rel=1e-4)


def test_retain_batches_follow_the_step_not_the_call(tiny_split, tmp_path):
    """A resumed run restarts at an optimizer step: the retain batch it draws there is the one the
    straight run drew (the index is step x accumulation + forward within the step)."""
    trainer, _ = build(config(tiny_split, tmp_path, retain_weight=0.5, retain_batch=2).resolve())
    original, seen = trainer.retain.batch, []

    def spy(index, size):
        seen.append(index)
        return original(index, size)

    trainer.retain.batch = spy
    trainer._retain_term(trainer.model)
    trainer.state.global_step = 7
    trainer._retain_term(trainer.model)
    trainer._retain_term(trainer.model)
    accumulation = trainer.args.gradient_accumulation_steps
    assert accumulation == 2 and seen == [0, 7 * accumulation, 7 * accumulation + 1]


def test_a_run_with_the_retain_term_trains_and_records_it(tiny_split, tmp_path):
    adapter = run(config(tiny_split, tmp_path, method="hard", max_steps=2, retain_weight=0.5, retain_batch=2))
    summary = json.loads((adapter / "calbench_train.json").read_text())
    assert summary["config"]["retain_weight"] == 0.5 and summary["config"]["retain_batch"] == 2


def test_the_core_names_exactly_the_add_ons_options_and_the_add_on_reads_them_there():
    """calbench.train_record is the one list of calbench train's options (recipes check against it
    without importing the add-on) and of those that do not change training; the add-on uses it."""
    import dataclasses
    import inspect

    from calbench import train_record
    from calbench.training import cli, run_folder, trainer

    assert tuple(f.name for f in dataclasses.fields(TrainConfig)) == train_record.OPTIONS
    assert set(train_record.NOT_IDENTITY) <= set(train_record.OPTIONS)
    assert run_folder.NOT_IDENTITY is train_record.NOT_IDENTITY and cli.NOT_IDENTITY is train_record.NOT_IDENTITY
    assert trainer.logged_loss is train_record.logged_loss and trainer.mean_logged_loss is train_record.mean_logged_loss
    for module in (cli, run_folder, trainer):  # no second copy of the list or of the loss readers
        source = inspect.getsource(module)
        assert (
            "NOT_IDENTITY = " not in source and "def logged_loss" not in source and "def mean_logged_loss" not in source
        )
