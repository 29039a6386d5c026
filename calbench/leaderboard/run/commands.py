"""The ``calbench`` commands a recipe's run starts, each in a fresh process, and its progress lines.

``train`` starts or resumes a recipe's training run (``calbench train``, its options translated
once by ``train_record.train_arguments``), ``not_trained_as`` asks ``calbench train --same-as``
whether an adapter was trained so; rows and learning curves both train through them. The
training add-on is never imported here: it runs in its own process.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from calbench.leaderboard.errors import RefusedRunError
from calbench.train_record import RUN_FILE, train_arguments


def say(message: str) -> None:
    """A progress line of ``calbench leaderboard run`` (on stderr)."""
    print(f"[calbench leaderboard run] {message}", file=sys.stderr, flush=True)


def run_calbench(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``calbench ARGS`` in a fresh process, its output passing through (progress bars included)."""
    return subprocess.run([sys.executable, "-m", "calbench", *args], check=False, text=True)


def train(name: str, model: str, options: Mapping[str, Any], folder: Path, *extra: str, what: str = "training") -> None:
    """Train ``model`` with a recipe's ``options`` in the run folder ``folder`` (``calbench train``;
    resumed if the folder holds a run), or ``RefusedRunError`` saying what the failure left."""
    args = [*train_arguments(model, options), "--output", str(folder), *extra]
    if (folder / RUN_FILE).is_file():
        args.append("--resume")
    say(f"{name}: {what}: calbench train {shlex.join(args)}")
    if run_calbench(["train", *args]).returncode != 0:
        raise RefusedRunError(training_failed(name, folder))


def not_trained_as(model: str, options: Mapping[str, Any], adapter: Path) -> str | None:
    """Why ``adapter`` was not trained as a recipe's ``options`` say (``calbench train --same-as``,
    in a fresh process: the training add-on is not imported here), or None."""
    done = subprocess.run(
        [sys.executable, "-m", "calbench", "train", *train_arguments(model, options), "--same-as", str(adapter)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 0:
        return None
    return "; ".join(line.removeprefix("calbench train: ") for line in done.stderr.strip().splitlines())


def training_failed(name: str, run: Path) -> str:
    """What a failed ``calbench train`` left: a run folder to resume, or nothing (it never started:
    a missing model, a bad option; calbench train said why above)."""
    if (run / RUN_FILE).is_file():
        return f"{name}: training failed (its run folder {run} is kept: rerun to resume)"
    return f"{name}: training did not start (nothing was written; calbench train's message above says why)"
