"""The transfer experiment's training pieces on the tiny model: extra families in a run (its recorded
distribution, never a validation family, the same draws on resume), the retain loss of a full
fine-tune, WiSE-FT interpolation, and the recorded distribution on the card."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from calbench.extra_families import EXTRA_FAMILIES, VALIDATION, training_order
from calbench.training.config import EXTRA_AVAILABLE, TrainConfig
from tests.test_training_runs import tiny_config


def _training_set(tiny_split, extra: int, seed: int = 11):
    from transformers import AutoTokenizer

    from calbench.training.data import TrainingSet

    tokenizer = AutoTokenizer.from_pretrained(tiny_split)
    return TrainingSet(tokenizer, True, 1, 1, seed, 200, "fresh", 2.0, extra)


def test_extra_families_share_an_epoch_and_never_include_a_validation_family(tiny_split):
    data = _training_set(tiny_split, EXTRA_AVAILABLE)
    assert len(data) == 200 and sum(data.distribution.values()) == 200
    trained = {t.family.name for t in data.targets}
    assert not trained & set(VALIDATION)
    assert trained & set(EXTRA_FAMILIES)  # a family-balanced subset reaches the extras early
    assert all(name in training_order() for name in trained if name in EXTRA_FAMILIES)
    again = _training_set(tiny_split, EXTRA_AVAILABLE)  # a resumed run rebuilds the same prompts
    assert [t.key for t in again.targets] == [t.key for t in data.targets]
    assert [e.seed for e in again.examples] == [e.seed for e in data.examples]


def test_a_whole_epoch_keeps_the_grid_size_and_weights_extras_as_an_average_family():
    from calbench.families import split_points
    from calbench.training.data import with_extra_families

    grid = split_points("train")
    slots = with_extra_families(grid, 24)
    assert len(slots) == len(grid) == 1988
    counts: dict[str, int] = {}
    for s in slots:
        counts[s.family.name] = counts.get(s.family.name, 0) + 1
    assert len(counts) == 48 and set(training_order()[:24]) <= set(counts)
    mean = 1988 / 24
    share = 1988 * mean / (1988 + 24 * mean)  # an extra family's exact slots, before rounding
    assert all(abs(counts[n] - share) < 1 for n in training_order()[:24])
    assert with_extra_families(grid, 0) == list(grid)  # no extras: the paper's grid, unchanged


def test_extra_families_need_fresh_parameters_and_a_count_in_range():
    assert "--extra-families 3" in "; ".join(TrainConfig(extra_families=3, parameters="grid").problems())
    assert f"must lie in 0..{EXTRA_AVAILABLE}" in "; ".join(TrainConfig(extra_families=EXTRA_AVAILABLE + 1).problems())
    assert not TrainConfig(extra_families=EXTRA_AVAILABLE).problems()


@pytest.mark.integration
def test_a_run_with_extra_families_records_its_distribution_on_the_card(tiny_split, tmp_path):
    from calbench.training.trainer import run

    config = tiny_config(tiny_split, tmp_path / "x", parameters="fresh", widen=2.0, extra_families=5, max_steps=2)
    adapter = run(config)
    summary = json.loads((adapter / "calbench_train.json").read_text())
    counts = summary["distribution"]
    assert sum(counts.values()) > 0 and not set(counts) & set(VALIDATION)
    card = (adapter / "README.md").read_text()
    assert "**Training distribution**" in card and f"{len(counts)} families" in card
    assert "5 training-only extra families" in card


@pytest.mark.integration
def test_a_full_fine_tune_trains_with_the_retain_loss_against_a_frozen_base(tiny_split, tmp_path):
    from calbench.training.retain import retain_kl
    from calbench.training.trainer import build

    config = tiny_config(tiny_split, tmp_path / "r", finetune="full", retain_weight=1.0, lr=1e-3, max_steps=2)
    trainer, _ = build(config.validate().resolve())
    base = trainer.retain_base
    assert base is not None and not any(p.requires_grad for p in base.parameters())
    batch = trainer.retain.batch(0, 2)
    before = retain_kl(trainer.model, batch["input_ids"], batch["attention_mask"], batch["trained"], base=base)
    assert float(before) == pytest.approx(0.0, abs=1e-6)  # the model is its base before any step
    trainer.train()
    after = retain_kl(trainer.model, batch["input_ids"], batch["attention_mask"], batch["trained"], base=base)
    assert float(after) > 0  # the weights moved; the frozen copy did not
    frozen = zip(base.state_dict().values(), trainer.retain_base.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in frozen)


@pytest.mark.integration
def test_interpolation_is_the_weighted_mean_of_base_and_tuned(tiny_split, tmp_path, capsys):
    from safetensors.torch import load_file

    from calbench.training.interpolate import RECORD, main
    from calbench.training.trainer import run

    tuned = run(tiny_config(tiny_split, tmp_path / "full", finetune="full", lr=1e-2, max_steps=2, method="hard"))
    base_w, tuned_w = (
        load_file(str(Path(tiny_split) / "model.safetensors")),
        load_file(str(tuned / "model.safetensors")),
    )
    for alpha in (0.0, 0.25, 1.0):
        out = tmp_path / f"wise-{alpha}"
        assert (
            main(["--base", str(tiny_split), "--tuned", str(tuned), "--alpha", str(alpha), "--output", str(out)]) == 0
        )
        mixed = load_file(str(out / "model.safetensors"))
        for key, weight in tuned_w.items():
            expected = (1 - alpha) * base_w[key] + alpha * weight if weight.is_floating_point() else weight
            assert torch.allclose(mixed[key], expected, atol=1e-7), key
        record = json.loads((out / RECORD).read_text())
        assert record["alpha"] == alpha and record["tuned_run"]["steps"] == 2
    assert (
        main(["--base", str(tiny_split), "--tuned", str(tuned), "--alpha", "1.5", "--output", str(tmp_path / "o")]) == 2
    )
    assert "--alpha must lie in [0, 1]" in capsys.readouterr().err
    lora = run(tiny_config(tiny_split, tmp_path / "lora", max_steps=1))
    assert (
        main(["--base", str(tiny_split), "--tuned", str(lora), "--alpha", "0.5", "--output", str(tmp_path / "p")]) == 2
    )
    assert "no model.safetensors" in capsys.readouterr().err
