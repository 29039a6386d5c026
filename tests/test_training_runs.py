"""A training run is one run: refused options, run folders, resume after kills, atomic adapters.

The first tests are fast (no model: the options and the run folder alone). The others train
the tiny model; the kill tests run training in a real subprocess and kill it by its PID
(SIGKILL) at a chosen point: while transformers writes a checkpoint, and while the final
adapter replaces an old one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from calbench.training import run_folder
from calbench.training.cli import main as train_main
from calbench.training.config import TrainConfig
from calbench.training.run_folder import RunFolderError

ROOT = Path(__file__).resolve().parent.parent


def tiny_config(tiny, output, **kw):
    base = {"model": str(tiny), "output": str(output), "prompts": 12, "batch_size": 2, "effective_batch": 4}
    base |= {"use_cpu": True, "logging_steps": 1, "save_steps": 1, "max_steps": 4, "method": "soft"}
    return TrainConfig(**(base | kw))


def as_flags(config: TrainConfig) -> list[str]:
    flags = []
    for key, value in config.to_dict().items():
        default = getattr(TrainConfig, key)
        default = list(default) if isinstance(default, tuple) else default
        if value == default or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif isinstance(value, list):
            flags += [flag, *map(str, value)]
        else:
            flags += [flag, str(value)]
    return flags


def weights_hash(adapter: Path) -> str:
    return hashlib.sha256((adapter / "adapter_model.safetensors").read_bytes()).hexdigest()


# ---- options refused before anything is loaded -------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--tau", "0"], "--tau 0.0"),
        (["--tau", "nan"], "--tau nan"),
        (["--epochs", "0"], "--epochs 0"),
        (["--epochs", "-2"], "--epochs -2"),
        (["--prompts", "-3"], "--prompts -3"),
        (["--prompts", "0"], "--prompts 0"),
        (["--samples-per-prompt", "0"], "--samples-per-prompt 0"),
        (["--max-bins", "0"], "--max-bins 0"),
        (["--max-steps", "0"], "--max-steps 0"),
        (["--lr=-1e-4"], "--lr -0.0001"),
        (["--lr", "nan"], "--lr nan"),
        (["--weight-decay", "-0.1"], "--weight-decay -0.1"),
        (["--max-grad-norm", "nan"], "--max-grad-norm nan"),
        (["--lora-dropout", "1"], "--lora-dropout 1.0"),
        (["--lora-dropout", "-0.1"], "--lora-dropout -0.1"),
        (["--warmup-ratio", "1.5"], "--warmup-ratio 1.5"),
        (["--resume", "--overwrite"], "--overwrite True"),
    ],
)
def test_bad_options_are_refused_with_their_name(flags, named, capsys, tmp_path):
    assert train_main([*flags, "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("calbench train: ") and named in err, err
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_an_output_that_is_a_file_is_refused(capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    assert train_main(["--output", str(tmp_path / "f")]) == 2
    assert "must be a folder, not a file" in capsys.readouterr().err


def test_an_output_that_links_to_a_missing_folder_is_refused(tmp_path):
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunFolderError, match=r"links to .*elsewhere, which does not exist"):
        run_folder.start(TrainConfig(output=str(tmp_path / "run")).resolve(), 1)
    (tmp_path / "elsewhere").mkdir()
    assert run_folder.start(TrainConfig(output=str(tmp_path / "run")).resolve(), 1) == (None, None)


def test_defaults_are_only_filled_where_an_option_is_missing():
    soft = TrainConfig(method="soft").resolve()
    assert (soft.max_bins, soft.epochs, soft.samples_per_prompt) == (1001, 3, 1)
    assert TrainConfig(method="hard", epochs=1).resolve().epochs == 1
    assert TrainConfig(method="hard", max_bins=0).problems()  # 0 is refused, not replaced by 16384
    # The training prompts: fresh parameters in ranges widened 2x (the winner of
    # leaderboards/generalization.md), the paper's grid on request (never widened).
    assert (soft.parameters, soft.widen) == ("fresh", 2.0)
    assert TrainConfig(parameters="fresh", widen=1).resolve().widen == 1.0
    assert TrainConfig(parameters="grid").resolve().widen == 1.0
    assert TrainConfig(parameters="grid", widen=1).problems() == []
    assert TrainConfig(parameters="grid", widen=2).problems() == [
        "--widen 2: widens fresh parameters' ranges: add --parameters fresh"
    ]


def _before_the_options(options):
    """A record written before calbench train had --parameters and --widen (and so trained the grid)."""
    return {k: v for k, v in options.items() if k not in ("parameters", "widen")}


def test_a_record_older_than_the_training_prompts_options_reads_as_the_grid(tmp_path):
    """An adapter's calbench_train.json and a run file that lack --parameters and --widen were
    trained on the paper's grid: read so, not as today's default (fresh parameters, widened 2x)."""
    from calbench.training.cli import same_as

    grid = TrainConfig(output=str(tmp_path / "run"), parameters="grid")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "calbench_train.json").write_text(json.dumps({"config": _before_the_options(grid.resolve().to_dict())}))
    assert same_as(grid, adapter) == []
    assert same_as(TrainConfig(parameters="grid", widen=1.0), adapter) == []
    assert same_as(TrainConfig(), adapter) == [
        "parameters: asked 'fresh', adapter 'grid'",
        "widen: asked 2.0, adapter 1.0",
    ]
    # A run folder of such a run resumes as the grid run it is, and refuses today's defaults.
    run_folder.start(grid.resolve(), 1)
    state = json.loads((tmp_path / "run" / run_folder.RUN_FILE).read_text())
    state["options"] = _before_the_options(state["options"])
    (tmp_path / "run" / run_folder.RUN_FILE).write_text(json.dumps(state))
    assert run_folder.start(dataclasses.replace(grid, resume=True).resolve(), 1) == (None, None)
    with pytest.raises(RunFolderError) as err:
        run_folder.start(TrainConfig(output=str(tmp_path / "run"), resume=True).resolve(), 1)
    assert "--parameters: run 'grid', now 'fresh'" in str(err.value) and "--widen: run 1.0, now 2.0" in str(err.value)


def test_a_record_older_than_accumulation_reads_as_the_legacy_sum(tmp_path):
    """An adapter or run file without --accumulation was trained before it: a hard step summed its
    micro-batches (legacy), and it checks and resumes so, never as today's mean."""
    from calbench.training.cli import same_as

    legacy = TrainConfig(output=str(tmp_path / "run"), method="hard", accumulation="legacy")
    older = {k: v for k, v in legacy.resolve().to_dict().items() if k != "accumulation"}
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "calbench_train.json").write_text(json.dumps({"config": older}))
    assert same_as(legacy, adapter) == []
    assert same_as(dataclasses.replace(legacy, accumulation="mean"), adapter) == [
        "accumulation: asked 'mean', adapter 'legacy'"
    ]
    run_folder.start(legacy.resolve(), 1)
    state = json.loads((tmp_path / "run" / run_folder.RUN_FILE).read_text())
    state["options"] = {k: v for k, v in state["options"].items() if k != "accumulation"}
    (tmp_path / "run" / run_folder.RUN_FILE).write_text(json.dumps(state))
    assert run_folder.start(dataclasses.replace(legacy, resume=True).resolve(), 1) == (None, None)
    with pytest.raises(RunFolderError, match="--accumulation: run 'legacy', now 'mean'"):
        run_folder.start(dataclasses.replace(legacy, accumulation="mean", resume=True).resolve(), 1)


# ---- the run folder, without training --------------------------------------------------------


def test_a_run_resumes_only_with_its_own_options(tmp_path):
    first = TrainConfig(output=str(tmp_path), method="soft", lr=2e-4)
    assert run_folder.start(first.resolve(), 1) == (None, None)
    saved = json.loads((tmp_path / run_folder.RUN_FILE).read_text())
    assert saved["options"]["method"] == "soft" and saved["world_size"] == 1 and not saved["finished"]
    other = TrainConfig(output=str(tmp_path), method="hard", lr=1e-3, model="x", resume=True)
    with pytest.raises(RunFolderError) as err:
        run_folder.start(other.resolve(), 1)
    for named in ("--method: run 'soft', now 'hard'", "--lr: run 0.0002, now 0.001", "--model"):
        assert named in str(err.value)
    with pytest.raises(RunFolderError, match="processes: run 1, now 2"):
        run_folder.start(TrainConfig(output=str(tmp_path), resume=True).resolve(), 2)
    # Options that do not change training may differ.
    same = TrainConfig(output=str(tmp_path), resume=True, save_steps=7, logging_steps=3)
    assert run_folder.start(same.resolve(), 1) == (None, None)


def test_a_new_run_never_starts_over_another(tmp_path):
    run_folder.start(TrainConfig(output=str(tmp_path)).resolve(), 1)
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "adapter").mkdir()
    with pytest.raises(RunFolderError, match="holds another run: pass --resume"):
        run_folder.start(TrainConfig(output=str(tmp_path), lr=1e-3).resolve(), 1)
    run_folder.start(TrainConfig(output=str(tmp_path), lr=1e-3, overwrite=True).resolve(), 1)
    assert not (tmp_path / "checkpoint-3").exists()  # the old run's checkpoints are gone
    assert (tmp_path / "adapter").exists()  # its adapter stays until a new one replaces it
    assert json.loads((tmp_path / run_folder.RUN_FILE).read_text())["options"]["lr"] == 1e-3
    stray = tmp_path / "stray"
    (stray / "checkpoint-1").mkdir(parents=True)
    with pytest.raises(RunFolderError, match=r"no calbench_run\.json: nothing to resume"):
        run_folder.start(TrainConfig(output=str(stray), resume=True).resolve(), 1)


def test_resume_takes_the_newest_complete_checkpoint(tmp_path):
    config = TrainConfig(output=str(tmp_path))
    run_folder.start(config.resolve(), 1)
    for step in (1, 2, 3):
        (tmp_path / f"checkpoint-{step}").mkdir()
    for step in (1, 2):
        run_folder.mark_complete(tmp_path / f"checkpoint-{step}", run_folder.progress_of(None))
    checkpoint, finished = run_folder.start(TrainConfig(output=str(tmp_path), resume=True).resolve(), 1)
    assert checkpoint == tmp_path / "checkpoint-2" and finished is None
    assert not (tmp_path / "checkpoint-3").exists()  # cut short while it was written


def test_an_interrupted_replacement_is_undone(tmp_path):
    (tmp_path / run_folder.PREVIOUS).mkdir()
    (tmp_path / run_folder.PREVIOUS / "adapter_model.safetensors").write_text("old")
    (tmp_path / run_folder.PARTIAL).mkdir()
    run_folder.restore_adapter(tmp_path)
    assert (tmp_path / "adapter" / "adapter_model.safetensors").read_text() == "old"
    assert not (tmp_path / run_folder.PREVIOUS).exists() and not (tmp_path / run_folder.PARTIAL).exists()


def test_the_new_adapter_replaces_the_old_in_one_exchange(tmp_path):
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "w").write_text("old")
    new = tmp_path / run_folder.PARTIAL
    new.mkdir()
    (new / "w").write_text("new")
    assert run_folder._exchange(tmp_path / "missing", new) is False  # a failed exchange changes nothing
    if sys.platform == "linux":  # renameat2 is there: the swap is one exchange, not two renames
        calls = []
        exchange = run_folder._exchange
        run_folder._exchange = lambda a, b: calls.append(exchange(a, b)) or calls[-1]
        try:
            assert run_folder.install_adapter(tmp_path, new) == tmp_path / "adapter"
        finally:
            run_folder._exchange = exchange
        assert calls == [True]
    else:
        assert run_folder.install_adapter(tmp_path, new) == tmp_path / "adapter"
    assert (tmp_path / "adapter" / "w").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]


# ---- real runs ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def straight(tiny_split, tmp_path_factory):
    """An uninterrupted 4-step run: what every interrupted and resumed run must equal."""
    from calbench.training.trainer import run

    folder = tmp_path_factory.mktemp("straight")
    adapter = run(tiny_config(tiny_split, folder))
    return json.loads((adapter / "calbench_train.json").read_text()), adapter


def _losses(summary):
    return [h["loss"] for h in summary["loss_history"]]


def _train_in_subprocess(config: TrainConfig, patch: str, sentinel: Path) -> subprocess.Popen[str]:
    """``calbench train`` in a child process; ``patch`` (Python) runs first and may pause it."""
    code = (
        "import sys, time\nfrom pathlib import Path\n"
        f"SENTINEL = Path({str(sentinel)!r})\n"
        f"{patch}\n"
        "from calbench.training.cli import main\n"
        f"sys.exit(main({as_flags(config)!r}))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, text=True)


def _kill_when(proc: subprocess.Popen[str], sentinel: Path, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not sentinel.exists():
        assert proc.poll() is None, f"the training process ended ({proc.returncode}) before the kill point"
        assert time.time() < deadline, "the kill point was never reached"
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


PAUSE_IN_CHECKPOINT_2 = """
from transformers import Trainer
_save_rng_state = Trainer._save_rng_state
def paused(self, output_dir):
    if self.state.global_step == 2:  # model and optimizer written, RNG and trainer state not yet
        SENTINEL.write_text(output_dir)
        time.sleep(600)
    return _save_rng_state(self, output_dir)
Trainer._save_rng_state = paused
"""


@pytest.mark.integration
def test_a_kill_during_a_checkpoint_save_resumes_from_the_last_complete_one(tiny_split, tmp_path, straight):
    from calbench.training.trainer import run

    expected, straight_adapter = straight
    config = tiny_config(tiny_split, tmp_path / "run")
    proc = _train_in_subprocess(config, PAUSE_IN_CHECKPOINT_2, tmp_path / "sentinel")
    _kill_when(proc, tmp_path / "sentinel")
    assert (tmp_path / "run" / "checkpoint-2").is_dir() and not run_folder.is_complete(
        tmp_path / "run" / "checkpoint-2"
    )
    adapter = run(dataclasses.replace(config, resume=True))
    summary = json.loads((adapter / "calbench_train.json").read_text())
    # The same run: every step's loss, the steps, the tokens and the final loss of the whole run.
    assert summary["steps"] == 4 and summary["segments"] == 2
    assert _losses(summary) == pytest.approx(_losses(expected), rel=1e-6)
    assert summary["tokens_seen_rank0"] == expected["tokens_seen_rank0"]
    assert summary["mean_train_loss"] == pytest.approx(expected["mean_train_loss"], rel=1e-6)
    assert summary["mean_train_loss"] == pytest.approx(sum(_losses(expected)) / 4, rel=1e-6)
    assert summary["last_train_loss"] == pytest.approx(_losses(expected)[-1], abs=1e-4)
    card = (adapter / "README.md").read_text()
    assert "4 optimizer steps" in card
    assert f"mean training loss {expected['mean_train_loss']:.4f} over the run" in card
    assert f"last logged {_losses(expected)[-1]:.4f}" in card
    assert weights_hash(adapter) == weights_hash(straight_adapter)  # bit-identical weights


@pytest.mark.integration
def test_resuming_a_finished_run_does_nothing(tiny_split, tmp_path, capsys):
    from calbench.training.trainer import run

    config = tiny_config(tiny_split, tmp_path, max_steps=2)
    adapter = run(config)
    before = weights_hash(adapter), (adapter / "calbench_train.json").read_text()
    again = run(dataclasses.replace(config, resume=True))
    assert again == adapter and (weights_hash(adapter), (adapter / "calbench_train.json").read_text()) == before
    assert "finished already (2 steps): nothing to do" in capsys.readouterr().out
    assert not (tmp_path / "checkpoint-3").exists()  # no step past --max-steps
    # A new run into the finished run's folder is refused, not mixed in.
    assert train_main(as_flags(tiny_config(tiny_split, tmp_path, max_steps=3))) == 2
    assert "holds a finished run" in capsys.readouterr().err


PAUSE_BEFORE_EXCHANGE = """
from calbench.training import run_folder
_exchange = run_folder._exchange
def paused(a, b):
    SENTINEL.write_text(str(a))
    time.sleep(600)
run_folder._exchange = paused
"""
PAUSE_AFTER_EXCHANGE = """
import shutil
from calbench.training import run_folder
_rmtree = shutil.rmtree
def paused(path, *args, **kwargs):
    if Path(path).name == run_folder.PARTIAL and Path(path).is_dir() and (Path(path).parent / "adapter").exists():
        SENTINEL.write_text(str(path))  # the exchange is done; the old adapter is about to be deleted
        time.sleep(600)
    return _rmtree(path, *args, **kwargs)
run_folder.shutil.rmtree = paused
"""


@pytest.mark.integration
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_while_the_adapter_is_replaced_leaves_a_complete_adapter(tiny_split, tmp_path, when):
    from calbench.training.trainer import run

    old = run(tiny_config(tiny_split, tmp_path, max_steps=1))
    old_hash = weights_hash(old)
    new_config = tiny_config(tiny_split, tmp_path, max_steps=2, overwrite=True)
    patch = PAUSE_BEFORE_EXCHANGE if when == "before" else PAUSE_AFTER_EXCHANGE
    proc = _train_in_subprocess(new_config, patch, tmp_path / "sentinel")
    _kill_when(proc, tmp_path / "sentinel")
    adapter = tmp_path / "adapter"
    summary = json.loads((adapter / "calbench_train.json").read_text())
    assert (adapter / "adapter_config.json").is_file() and (adapter / "README.md").is_file()
    if when == "before":
        assert weights_hash(adapter) == old_hash and summary["steps"] == 1
    else:
        assert weights_hash(adapter) != old_hash and summary["steps"] == 2
    # The next start tidies what the kill left beside it.
    run_folder.restore_adapter(tmp_path)
    assert not (tmp_path / run_folder.PARTIAL).exists() and not (tmp_path / run_folder.PREVIOUS).exists()
    assert (adapter / "adapter_model.safetensors").is_file()


@pytest.mark.integration
def test_a_non_finite_loss_stops_training_with_a_clear_error(tiny_split, tmp_path, monkeypatch, capsys):
    from calbench.training import methods

    monkeypatch.setattr(methods, "soft_kl", lambda *a, **k: torch.tensor(math.nan, requires_grad=True))
    assert train_main(as_flags(tiny_config(tiny_split, tmp_path))) == 2
    err = capsys.readouterr().err
    assert "the training loss is nan at step 1: stopping" in err
    assert not (tmp_path / "adapter").exists()


EXIT_AFTER_CHECKPOINT_2 = """
import os
from calbench.training import run_folder
_mark = run_folder.mark_complete
def marked(checkpoint, progress):
    _mark(checkpoint, progress)
    if checkpoint.name == "checkpoint-2":
        SENTINEL.write_text(str(checkpoint))
        os._exit(9)  # the process ends right after a complete checkpoint
run_folder.mark_complete = marked
"""


@pytest.mark.integration
@pytest.mark.parametrize("parameters", ["grid", "fresh"])
def test_a_resumed_run_logs_what_an_uninterrupted_one_logs(tiny_split, tmp_path, parameters):
    # Checkpoints every 2 steps, logs every 3: the resumed run's history must still be the run's.
    # With fresh parameters too: the losses match only if the resumed run sees the same prompts.
    from calbench.training.trainer import run

    fresh = {"parameters": "fresh", "widen": 2.0} if parameters == "fresh" else {}
    config = tiny_config(tiny_split, tmp_path / "a", logging_steps=3, save_steps=2, max_steps=5, **fresh)
    expected = json.loads((run(config) / "calbench_train.json").read_text())
    cut = dataclasses.replace(config, output=str(tmp_path / "b"))
    proc = _train_in_subprocess(cut, EXIT_AFTER_CHECKPOINT_2, tmp_path / "sentinel")
    assert proc.wait(timeout=300) == 9 and (tmp_path / "sentinel").exists()
    summary = json.loads((run(dataclasses.replace(cut, resume=True)) / "calbench_train.json").read_text())
    assert [h["step"] for h in summary["loss_history"]] == [h["step"] for h in expected["loss_history"]]
    assert _losses(summary) == pytest.approx(_losses(expected), rel=1e-6)
    assert summary["mean_train_loss"] == pytest.approx(expected["mean_train_loss"], rel=1e-6)


@pytest.mark.integration
def test_a_full_fine_tune_trains_every_weight_and_resumes_from_its_last_step(tiny_split, tmp_path, capsys):
    """--finetune full: the output is a whole model (with its tokenizer) that loads as pretrained=,
    its checkpoints are complete ones, and a kill after the last checkpoint resumes to the end."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from calbench.training.trainer import run

    config = tiny_config(tiny_split, tmp_path / "full", finetune="full", lr=1e-3, max_steps=2, method="hard")
    adapter = run(config)
    assert (adapter / "model.safetensors").is_file() and not (adapter / "adapter_config.json").exists()
    assert (adapter / "tokenizer.json").is_file() and "full fine-tune" in (adapter / "README.md").read_text()
    tuned, base = load_file(str(adapter / "model.safetensors")), load_file(str(tiny_split / "model.safetensors"))
    changed = [k for k in base if k in tuned and not torch.equal(tuned[k], base[k])]
    assert len(changed) > len(base) // 2  # every weight trains, not a few adapters
    assert run_folder.missing_parts(tmp_path / "full" / "checkpoint-2") == []
    AutoModelForCausalLM.from_pretrained(adapter)  # loads as a model of its own
    before = load_file(str(adapter / "model.safetensors"))
    import shutil

    shutil.rmtree(adapter)  # killed after the last checkpoint, before the model was written
    state = json.loads((tmp_path / "full" / run_folder.RUN_FILE).read_text())
    (tmp_path / "full" / run_folder.RUN_FILE).write_text(json.dumps({**state, "finished": False}))
    run(dataclasses.replace(config, resume=True))
    assert "is the run's last step: nothing left to train" in capsys.readouterr().out
    after = load_file(str(tmp_path / "full" / "adapter" / "model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert TrainConfig(finetune="full", retain_weight=1.0).validate().retain_weight == 1.0  # a frozen base copy


# ---- issue 49: options typed and bounded by the config itself, before anything loads ----------


@pytest.mark.parametrize("widen", ["3.5", "50", "100", "1000", "1e308"])
def test_a_widening_no_run_can_finish_is_refused_before_anything_loads(widen, capsys, tmp_path):
    """Case 1: past 3.1 (at 5 decimals) some draws have no canonical space and the run died mid-training
    (``--widen 100`` at the first step, 1000 and 1e308 with an OverflowError after the model loaded)."""
    argv = [
        "--parameters",
        "fresh",
        "--widen",
        widen,
        "--model",
        "no/such/model-folder",
        "--output",
        str(tmp_path / "r"),
    ]
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"calbench train: --widen {float(widen):g}: the ranges widened") and "Traceback" not in err
    assert "the largest widening that trains at 5 decimals is 3.1" in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()
    # the limit is the decimals' (a finer lattice overflows sooner): 2 trains at 5 decimals, not at 12
    assert TrainConfig(widen=2.0).problems() == []
    assert "--widen 2: the ranges widened 2x" in "; ".join(TrainConfig(widen=2.0, decimals=12).problems())


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ({"target_modules": 5}, "target_modules 5: must be a list of module names"),
        ({"widen": "two"}, "widen 'two': must be a number"),
        ({"effective_batch": True}, "effective_batch True: must be a whole number"),
    ],
)
def test_same_as_names_the_record_and_the_option_of_a_hand_edited_value(edit, named, capsys, tmp_path):
    """Case 11: ``target_modules: 5`` was a TypeError traceback; ``widen: "two"`` said "could not
    convert string to float" naming no file."""
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    config = {**TrainConfig(output=str(tmp_path / "run")).resolve().to_dict(), **edit}
    (adapter / "calbench_train.json").write_text(json.dumps({"config": config}))
    assert train_main(["--same-as", str(adapter)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert str(adapter / "calbench_train.json") in err and named in err, err


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"parameters": "grid", "widen": 1.0, "accumulation": "legacy", "use_cpu": True, "method": "soft"},
        {"method": "hard", "parameters": "fresh", "widen": 2, "lr": 5e-5, "finetune": "full", "chat": False},
        {"target_modules": ["q_proj", "v_proj"], "lora_alpha": 16, "max_bins": 64, "max_steps": 3, "chat": True},
        {"effective_batch": 16, "batch_size": 4, "decimals": 3, "tau": 0.5, "seed": 0, "save_steps": 7},
    ],
)
def test_a_recipes_options_are_checked_by_the_config_and_parse_back_to_it(options):
    """The deliverable shared with issue 50: a recipe's ``train:`` becomes one ``TrainConfig``
    (typed, validated) and its command line parses back to that very config."""
    from calbench.train_record import as_trained, train_arguments
    from calbench.training.cli import build_parser
    from calbench.training.config import from_args, from_options

    argv = train_arguments("some/model", options)
    assert from_args(build_parser().parse_args(argv)) == from_options({**as_trained(options), "model": "some/model"})


def test_a_batch_size_left_out_divides_the_effective_batch():
    """A step is whole micro-batches: left out, the batch size is 8 or the largest number below it
    that divides the effective batch (every valid config of before keeps 8); given, it must divide."""
    assert [TrainConfig(effective_batch=e).resolve().batch_size for e in (32, 16, 8, 30, 12, 7, 2, 1)] == [
        8, 8, 8, 6, 6, 7, 2, 1,
    ]  # fmt: skip
    assert TrainConfig(effective_batch=2).problems() == []
    assert TrainConfig(effective_batch=30, batch_size=8).problems() == [
        "--effective-batch 30 is not a multiple of --batch-size 8"
    ]
