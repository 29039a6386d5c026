"""The run folder: which run it holds, its complete checkpoints, and the adapter replaced atomically.

A run folder (``--output``) belongs to one run. ``calbench_run.json`` holds the run's
resolved options (those that change what is trained: not ``--output``, ``--resume``,
``--overwrite``, ``--save-steps``, ``--logging-steps``, ``--keep-checkpoints``), the number of processes, and
whether the run finished. A run resumes only with the same options; a new run never
starts over another one unless told to (``--overwrite``).

transformers writes a checkpoint in several files; a kill in the middle leaves a folder
that looks like a checkpoint but is not one. calbench marks a checkpoint complete only
after transformers is done with it (``calbench_checkpoint.json``, which also carries the
run's tokens and wall time so far), and resumes from the newest complete one.

The final adapter is written beside ``adapter/`` and swapped in with one atomic
exchange of the two folders (Linux ``renameat2``), so ``adapter/`` always holds a
complete adapter, the old or the new one; elsewhere two renames, and a missing
``adapter/`` is restored from its kept predecessor on the next start.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from calbench.provenance import atomic_write
from calbench.training.config import TrainConfig

RUN_FILE = "calbench_run.json"
CHECKPOINT_FILE = "calbench_checkpoint.json"
ADAPTER = "adapter"
PARTIAL = ".adapter.partial"  # the new adapter while it is written
PREVIOUS = ".adapter.previous"  # the replaced adapter until it is deleted
# Options that do not change what is trained: they may differ between a run's segments.
NOT_IDENTITY = ("output", "resume", "overwrite", "save_steps", "logging_steps", "keep_checkpoints")
_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


class RunFolderError(ValueError):
    """The run folder cannot be used as asked (another run in it, other options, ...)."""


def identity(config: TrainConfig, world_size: int) -> dict[str, Any]:
    """What makes two segments one run: the resolved options that change training, and the processes."""
    options = {k: v for k, v in config.resolve().to_dict().items() if k not in NOT_IDENTITY}
    return {"options": options, "world_size": world_size}


def read_run(folder: Path) -> dict[str, Any] | None:
    path = folder / RUN_FILE
    if not path.is_file():
        return None
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as err:
        raise RunFolderError(f"{path}: unreadable run file ({err}); pass --overwrite to start a new run") from err


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")


def checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """Every ``checkpoint-N`` folder, newest first."""
    found = [(int(m.group(1)), p) for p in folder.glob("checkpoint-*") if (m := _CHECKPOINT.search(p.name))]
    return sorted(found, reverse=True)


def is_complete(checkpoint: Path) -> bool:
    return (checkpoint / CHECKPOINT_FILE).is_file()


def latest_complete(folder: Path) -> Path | None:
    """The newest complete checkpoint; the incomplete ones newer than it are deleted."""
    for _, path in checkpoints(folder):
        if is_complete(path):
            return path
        shutil.rmtree(path, ignore_errors=True)  # a kill during its save: not a checkpoint
    return None


def mark_complete(checkpoint: Path, progress: dict[str, Any]) -> None:
    write_json(checkpoint / CHECKPOINT_FILE, progress)


def progress_of(checkpoint: Path | None) -> dict[str, Any]:
    """Tokens and wall time of the run up to ``checkpoint`` (zeros for a fresh start)."""
    if checkpoint is None:
        return {"tokens_seen_rank0": 0, "wall_seconds": 0.0, "segments": 0}
    return dict(json.loads((checkpoint / CHECKPOINT_FILE).read_text()))


def holds_a_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in (RUN_FILE, ADAPTER, "runs")) or bool(checkpoints(folder))


def restore_adapter(folder: Path) -> None:
    """Undo a replacement cut short: bring back the old adapter if no new one took its place."""
    final, previous = folder / ADAPTER, folder / PREVIOUS
    if previous.is_dir() and not final.exists():
        previous.rename(final)
    shutil.rmtree(previous, ignore_errors=True)
    shutil.rmtree(folder / PARTIAL, ignore_errors=True)


def clear_for_new_run(folder: Path) -> None:
    """Delete another run's checkpoints, logs and run file (its adapter stays until replaced)."""
    for _, path in checkpoints(folder):
        shutil.rmtree(path)
    shutil.rmtree(folder / "runs", ignore_errors=True)
    (folder / RUN_FILE).unlink(missing_ok=True)


def start(config: TrainConfig, world_size: int) -> tuple[Path | None, dict[str, Any] | None]:
    """Prepare the run folder for ``config``: (the checkpoint to resume from, the finished run's file).

    A finished run that is resumed returns its run file and nothing is to be trained.
    Raises ``RunFolderError`` when the folder holds another run.
    """
    folder = Path(config.output)
    if folder.is_symlink() and not folder.exists():
        raise RunFolderError(
            f"{folder} links to {os.readlink(folder)}, which does not exist: create it or pass another --output"
        )
    folder.mkdir(parents=True, exist_ok=True)
    restore_adapter(folder)
    wanted = identity(config, world_size)
    previous = read_run(folder)
    if config.resume and previous is not None:
        differ = _differences(previous, wanted)
        if differ:
            raise RunFolderError(
                f"{folder} holds a run with other options ({'; '.join(differ)}): resume it with its own "
                "options, or start a new run elsewhere (or here with --overwrite)"
            )
        if previous.get("finished"):
            return None, previous
        return latest_complete(folder), None
    if holds_a_run(folder):
        if config.resume:  # checkpoints or an adapter without a run file: whose are they?
            raise RunFolderError(f"{folder} holds checkpoints or an adapter but no {RUN_FILE}: nothing to resume")
        if not config.overwrite:
            what = "a finished run" if previous and previous.get("finished") else "another run"
            raise RunFolderError(
                f"{folder} holds {what}: pass --resume to continue it, --overwrite to replace it, "
                "or choose another --output"
            )
        clear_for_new_run(folder)
    write_json(folder / RUN_FILE, {**wanted, "finished": False})
    return None, None


def finished_run(folder: Path) -> dict[str, Any] | None:
    previous = read_run(folder)
    return previous if previous is not None and previous.get("finished") else None


def decided(config: TrainConfig) -> Path | None:
    """The checkpoint ``start`` chose, read back without changing anything (the other processes of
    a DDP run; a finished run never gets here: no process joins the process group)."""
    if not config.resume:
        return None
    return next((p for _, p in checkpoints(Path(config.output)) if is_complete(p)), None)


def finish(folder: Path, summary: dict[str, Any]) -> None:
    run = read_run(folder) or {}
    write_json(folder / RUN_FILE, {**run, "finished": True, "steps": summary["steps"]})


def _differences(previous: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    out = []
    old, new = previous.get("options", {}), wanted["options"]
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            out.append(f"--{key.replace('_', '-')}: run {old.get(key)!r}, now {new.get(key)!r}")
    if previous.get("world_size") != wanted["world_size"]:
        out.append(f"processes: run {previous.get('world_size')}, now {wanted['world_size']}")
    return out


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one atomic step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return int(renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)) == 0


def install_adapter(folder: Path, written: Path) -> Path:
    """Make the complete adapter folder ``written`` the run's ``adapter/``, atomically (module docstring)."""
    final, previous = folder / ADAPTER, folder / PREVIOUS
    if not final.exists():
        written.rename(final)
    elif _exchange(written, final):
        shutil.rmtree(written)  # now the old adapter
    else:
        shutil.rmtree(previous, ignore_errors=True)
        final.rename(previous)
        written.rename(final)
        shutil.rmtree(previous)
    return final
