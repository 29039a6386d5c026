"""Run folders under kills, races, tampering and symbolic links (issue 27, cases 1-7).

Fast tests use the run folder alone; the others train the tiny model, some in a real
subprocess that is paused at a chosen point and killed by its PID (SIGKILL).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calbench.provenance import LinkedPathError
from calbench.training import run_folder
from calbench.training.cli import main as train_main
from calbench.training.config import TrainConfig
from calbench.training.run_folder import RunFolderError
from tests.test_training_runs import (
    ROOT,
    _kill_when,
    _losses,
    _train_in_subprocess,
    as_flags,
    tiny_config,
    weights_hash,
)

# ---- case 2: one process per run folder ----------------------------------------------------

HOLD_LOCK = """
import sys, time
from pathlib import Path
from calbench.training import run_folder
with run_folder.locked(Path(sys.argv[1])):
    Path(sys.argv[2]).write_text("held")
    time.sleep(120)
"""


def _hold_lock(folder: Path, sentinel: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(folder), str(sentinel)], cwd=ROOT, text=True)
    deadline = time.time() + 60
    while not sentinel.exists():
        assert proc.poll() is None and time.time() < deadline, "the lock holder never took the lock"
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("mode", ["--resume", "--overwrite"])
def test_a_second_process_on_a_run_folder_is_refused(tmp_path, capsys, mode):
    folder = tmp_path / "run"
    run_folder.start(TrainConfig(output=str(folder), lr=2e-4).resolve(), 1)
    before = (folder / run_folder.RUN_FILE).read_text()
    holder = _hold_lock(folder, tmp_path / "held")
    try:
        assert train_main(["--output", str(folder), "--lr", "1e-3" if mode == "--overwrite" else "2e-4", mode]) == 2
        err = capsys.readouterr().err
        assert f"is in use by another calbench train (process {holder.pid})" in err
        assert err.count("\n") == 1  # one line
        assert (folder / run_folder.RUN_FILE).read_text() == before  # nothing changed
    finally:
        holder.kill()
        holder.wait(timeout=30)
    # The kernel drops the lock of a killed process: the folder is usable again at once.
    with run_folder.locked(folder):
        pass


def test_a_folder_calbench_cannot_write_in_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    def denied(*args, **kwargs):  # a read-only --output (as root, chmod alone would not stop a write)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(run_folder.os, "open", denied)
    assert train_main(["--output", str(tmp_path / "run")]) == 2
    assert (
        capsys.readouterr().err
        == f"calbench train: {tmp_path / 'run'}: cannot write in the run folder (Permission denied)\n"
    )


def test_the_lock_file_is_never_followed_as_a_link(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / run_folder.LOCK).symlink_to(tmp_path / "victim")
    with pytest.raises(RunFolderError, match="cannot write in the run folder"), run_folder.locked(tmp_path / "run"):
        pass
    assert not (tmp_path / "victim").exists()


# ---- case 3: a folder that is not a calbench run ------------------------------------------------


def test_overwrite_deletes_nothing_in_a_folder_that_is_not_a_calbench_run(tmp_path):
    (tmp_path / "f" / "runs" / "exp42").mkdir(parents=True)
    (tmp_path / "f" / "checkpoint-7000").mkdir()
    for overwrite in (False, True):
        with pytest.raises(RunFolderError, match="not a calbench run folder") as err:
            run_folder.start(TrainConfig(output=str(tmp_path / "f"), overwrite=overwrite).resolve(), 1)
        assert "--overwrite to replace" not in str(err.value)
    assert (tmp_path / "f" / "runs" / "exp42").is_dir() and (tmp_path / "f" / "checkpoint-7000").is_dir()
    assert not (tmp_path / "f" / run_folder.RUN_FILE).exists()


# ---- case 4: checkpoints complete by content --------------------------------------------------


def _checkpoint(folder: Path, step: int) -> Path:
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    for name in (*run_folder.CHECKPOINT_PARTS, "rng_state.pth"):
        (path / name).write_bytes(os.urandom(64) + name.encode())
    run_folder.mark_complete(path, {"tokens_seen_rank0": step, "wall_seconds": 1.0, "segments": 1})
    return path


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda p: (p / "optimizer.pt").unlink(), "optimizer.pt is missing"),
        (lambda p: (p / "scheduler.pt").unlink(), "scheduler.pt is missing"),
        (lambda p: (p / "rng_state.pth").unlink(), "rng_state.pth is missing"),
        (lambda p: (p / "adapter_model.safetensors").write_bytes(b"short"), "adapter_model.safetensors has 5 bytes"),
        (lambda p: (p / "optimizer.pt").write_bytes(bytes(len((p / "optimizer.pt").read_bytes()))), "SHA-256 differs"),
    ],
)
def test_a_damaged_checkpoint_falls_back_to_the_previous_complete_one(tmp_path, capsys, damage, why):
    config = TrainConfig(output=str(tmp_path))
    run_folder.start(config.resolve(), 1)
    _checkpoint(tmp_path, 1)
    newest = _checkpoint(tmp_path, 2)
    assert run_folder.checkpoint_problem(newest) is None
    damage(newest)
    assert why in run_folder.checkpoint_problem(newest)
    checkpoint, _ = run_folder.start(dataclasses.replace(config, resume=True).resolve(), 1)
    assert checkpoint == tmp_path / "checkpoint-1" and not newest.exists()
    err = capsys.readouterr().err
    assert "checkpoint-2 is damaged (" in err and why in err and "resuming from an earlier one" in err
    assert run_folder.progress_of(checkpoint) == {"tokens_seen_rank0": 1, "wall_seconds": 1.0, "segments": 1}


def test_a_checkpoint_without_the_files_transformers_writes_is_never_marked(tmp_path):
    path = tmp_path / "checkpoint-3"
    path.mkdir()
    (path / "adapter_model.safetensors").write_bytes(b"w")
    assert set(run_folder.missing_parts(path)) == {
        "optimizer.pt",
        "scheduler.pt",
        "trainer_state.json",
        "rng_state.pth",
    }


# ---- case 5: refused before anything is written ---------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--seed", "-1"], "--seed -1"),
        (["--seed", str(2**32)], "--seed 4294967296"),
        (["--decimals", "400"], "--decimals 400"),
    ],
)
def test_more_bad_options_are_refused_before_anything_is_written(flags, named, capsys, tmp_path):
    assert train_main([*flags, "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("calbench train: ") and named in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"target_modules": ("q_proj", "no_such_proj")}, "no_such_proj"),
        ({"model": "/no/such/model"}, "--model '/no/such/model': no such model folder"),
        ({"model": "no-such-hub-model"}, "cannot set up the run"),
    ],
)
def test_a_run_that_cannot_start_writes_no_run_file(tiny_split, tmp_path, capsys, change, message):
    config = tiny_config(tiny_split, tmp_path / "run", max_steps=1)
    assert train_main(as_flags(dataclasses.replace(config, **change))) == 2
    err = capsys.readouterr().err  # (transformers' progress bar for the weights may come first)
    ours = [line for line in err.splitlines() if line.startswith("calbench train: ")]
    assert len(ours) == 1 and message in ours[0] and "Traceback" not in err, err
    assert not (tmp_path / "run" / run_folder.RUN_FILE).exists()
    assert train_main(as_flags(config)) == 0  # the corrected run is not "another run"


# ---- case 6: an adapter that would break every evaluation is not installed ---------------------------


@pytest.mark.integration
def test_an_absurd_learning_rate_installs_no_adapter(tiny_split, tmp_path, capsys):
    config = tiny_config(tiny_split, tmp_path, max_steps=2, lr=1e30)
    assert train_main(as_flags(config)) == 2
    err = capsys.readouterr().err
    assert "not finite" in err and "not installed" in err, err[-2000:]
    assert not (tmp_path / "adapter").exists()


# ---- case 7: the base model is its weights ----------------------------------------------------


def test_resume_identity_is_the_base_models_weights(tmp_path, monkeypatch):
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights one")
    run = tmp_path / "run"
    run_folder.start(TrainConfig(output=str(run), model=str(model)).resolve(), 1)
    monkeypatch.chdir(tmp_path)
    run_folder.base_identity.cache_clear()
    same = TrainConfig(output=str(run), model="models/m", resume=True)  # another spelling, same weights
    assert run_folder.start(same.resolve(), 1) == (None, None)
    (model / "model.safetensors").write_bytes(b"weights two")  # same path, new weights
    run_folder.base_identity.cache_clear()
    with pytest.raises(RunFolderError, match=r"--model: run .* \(weights [0-9a-f]{16}\), now 'models/m' \(weights"):
        run_folder.start(same.resolve(), 1)


# ---- case 1: a kill after the last checkpoint, before the adapter ----------------------------------

PAUSE_BEFORE_INSTALL = """
from calbench.training import trainer
def paused(*args, **kwargs):
    SENTINEL.write_text("checkpoint-4 written, adapter not yet")
    time.sleep(600)
trainer._install = paused
"""


@pytest.mark.integration
def test_a_kill_after_the_last_checkpoint_resumes_to_exactly_the_last_step(tiny_split, tmp_path):
    from calbench.training.trainer import run

    straight = run(tiny_config(tiny_split, tmp_path / "straight"))
    expected = json.loads((straight / "calbench_train.json").read_text())
    config = tiny_config(tiny_split, tmp_path / "run")
    proc = _train_in_subprocess(config, PAUSE_BEFORE_INSTALL, tmp_path / "sentinel")
    _kill_when(proc, tmp_path / "sentinel")
    assert run_folder.is_complete(tmp_path / "run" / "checkpoint-4") and not (tmp_path / "run" / "adapter").exists()
    adapter = run(dataclasses.replace(config, resume=True))
    summary = json.loads((adapter / "calbench_train.json").read_text())
    assert summary["steps"] == 4 == expected["steps"]
    assert summary["tokens_seen_rank0"] == expected["tokens_seen_rank0"]
    assert _losses(summary) == pytest.approx(_losses(expected), rel=1e-6)
    assert summary["mean_train_loss"] == pytest.approx(expected["mean_train_loss"], rel=1e-6)
    assert weights_hash(adapter) == weights_hash(straight)
    assert "**Run**: 4 optimizer steps" in (adapter / "README.md").read_text()


# ---- case 11 (run folder side): markers never written through links --------------------------------


def test_a_checkpoint_marker_is_never_written_through_a_link(tmp_path):
    path = tmp_path / "checkpoint-1"
    path.mkdir()
    (path / run_folder.CHECKPOINT_FILE).symlink_to(tmp_path / "victim")
    with pytest.raises(LinkedPathError, match="symbolic link"):
        run_folder.mark_complete(path, run_folder.progress_of(None))
    assert not (tmp_path / "victim").exists()
