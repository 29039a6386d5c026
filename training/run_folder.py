"""The run folder: which run it holds, its complete checkpoints, and the adapter replaced atomically.

A run folder (``--output``) belongs to one run. ``calbench_run.json`` holds the run's
resolved options (those that change what is trained: not ``--output``, ``--resume``,
``--overwrite``, ``--save-steps``, ``--logging-steps``, ``--keep-checkpoints``), the base
model's identity (the hash of its weights, or its hub id: not the spelling of ``--model``),
the number of processes, and whether the run finished. A run resumes only with the same
options and base weights; a new run never starts over another one unless told to
(``--overwrite``), and never over a folder that is not a calbench run folder (checkpoints or
logs without a ``calbench_run.json`` are someone else's: calbench deletes nothing there).
One process at a time uses a run folder (``locked``: an exclusive lock on
``.calbench_train.lock``); the others are refused.

transformers writes a checkpoint in several files; a kill in the middle leaves a folder
that looks like a checkpoint but is not one. calbench marks a checkpoint complete only
after transformers is done with it (``calbench_checkpoint.json``, which also carries the
run's tokens and wall time so far and the size and SHA-256 of every file in it), and
resumes from the newest checkpoint whose files still match their marker (a deleted,
truncated or altered file makes it incomplete: the previous complete one is taken).
Files calbench writes in the run folder are never written through a symbolic link.

The final adapter is written beside ``adapter/`` and swapped in with one atomic
exchange of the two folders (Linux ``renameat2``), so ``adapter/`` always holds a
complete adapter, the old or the new one; elsewhere two renames, and a missing
``adapter/`` is restored from its kept predecessor on the next start.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from calbench.provenance import atomic_write, exclusive_lock, sha256_file, weights_hash
from calbench.train_record import (
    ADAPTER,
    CHECKPOINT,
    CHECKPOINT_FILE,
    NOT_IDENTITY,
    RUN_FILE,
    TRAINER_STATE,
    as_trained,
)
from calbench.training.config import ResolvedTrainConfig, TrainConfig

PARTIAL = ".adapter.partial"  # the new adapter while it is written
PREVIOUS = ".adapter.previous"  # the replaced adapter until it is deleted
LOCK = ".calbench_train.lock"  # held (flock) by the process that uses the run folder
# What transformers writes into every checkpoint of a LoRA run (with rng_state*.pth).
CHECKPOINT_PARTS = ("adapter_model.safetensors", "optimizer.pt", "scheduler.pt", TRAINER_STATE)
FULL_WEIGHTS = "model.safetensors"  # a full fine-tune's checkpoint holds the whole model instead of an adapter
_CHECKPOINT = re.compile(rf"{CHECKPOINT}(\d+)$")


class RunFolderError(ValueError):
    """The run folder cannot be used as asked (another run in it, other options, ...)."""


@functools.lru_cache(maxsize=8)
def base_identity(reference: str) -> dict[str, str]:
    """The base model a run trains, however ``--model`` spells it: a calbench catalogue model by
    its name (its folder's path too: each entry is one pinned file); any other local folder by
    the SHA-256 of its weight files, wherever it lies; a hub id as itself."""
    from calbench import model_catalogue

    name = model_catalogue.catalogue_name(reference)
    if name is not None:
        return {"catalogue": name}
    path = Path(reference).expanduser()
    digest = weights_hash(path) if path.is_dir() else None
    return {"weights_sha256": digest} if digest else {"reference": reference}


def identity(config: ResolvedTrainConfig, world_size: int) -> dict[str, Any]:
    """What makes two segments one run: the resolved options that change training, the base
    model's weights, and the processes."""
    options = {k: v for k, v in config.to_dict().items() if k not in NOT_IDENTITY}
    return {"options": options, "base_model": base_identity(config.model), "world_size": world_size}


def _refuse_dangling(folder: Path) -> None:
    if folder.is_symlink() and not folder.exists():
        raise RunFolderError(
            f"{folder} links to {os.readlink(folder)}, which does not exist: create it or pass another --output"
        )


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Use the run folder alone: an exclusive lock held until the block ends (or the process dies:
    the kernel drops it), a second process refused at once. Creates the folder; a folder calbench
    cannot write in is refused here, before anything else."""
    folder = Path(folder)
    _refuse_dangling(folder)
    with contextlib.ExitStack() as held:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = held.enter_context(exclusive_lock(folder / LOCK, wait=False))
        except BlockingIOError:
            holder = (folder / LOCK).read_text().strip() or "?"
            raise RunFolderError(
                f"{folder} is in use by another calbench train (process {holder}): wait for it to end, "
                "or choose another --output"
            ) from None
        except OSError as err:
            raise RunFolderError(f"{folder}: cannot write in the run folder ({err.strerror})") from err
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield


def read_run(folder: Path) -> dict[str, Any] | None:
    path = folder / RUN_FILE
    if not path.is_file():
        return None
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as err:
        raise RunFolderError(f"{path}: unreadable run file ({err}); pass --overwrite to start a new run") from err


def write_json(path: Path, data: dict[str, Any], root: Path | None = None) -> None:
    """Atomically, never through a link between ``root`` (default: the file's folder) and the file."""
    atomic_write(path, json.dumps(data, indent=2) + "\n", no_links=root or path.parent)


def checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """Every ``checkpoint-N`` folder, newest first."""
    found = [(int(m.group(1)), p) for p in folder.glob(f"{CHECKPOINT}*") if (m := _CHECKPOINT.search(p.name))]
    return sorted(found, reverse=True)


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` is not a complete checkpoint (None if it is): no marker, or a file the
    marker lists that is gone, of another size or other bytes. (A marker without a file list,
    from calbench before 0.1's checkpoint hashes, is taken on trust.)"""
    marker = Path(checkpoint) / CHECKPOINT_FILE
    if marker.is_symlink() or not marker.is_file() or Path(checkpoint).is_symlink():
        return "not marked complete"
    try:
        files = json.loads(marker.read_text()).get("files")
    except (OSError, ValueError, AttributeError) as err:
        return f"its marker is unreadable ({err})"
    for name, want in (files or {}).items():
        path = Path(checkpoint) / name
        if path.is_symlink() or not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want.get("bytes"):
            return f"{name} has {path.stat().st_size} bytes, its marker says {want.get('bytes')}"
        if sha256_file(path) != want.get("sha256"):
            return f"{name} is not the file that was saved (SHA-256 differs)"
    return None


def is_complete(checkpoint: Path) -> bool:
    return checkpoint_problem(checkpoint) is None


def latest_complete(folder: Path) -> Path | None:
    """The newest complete checkpoint; the newer ones are deleted: those never marked (a kill
    during their save) and, with a warning, those whose files no longer match their marker."""
    for _, path in checkpoints(folder):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        if problem != "not marked complete":
            print(
                f"calbench train: {path} is damaged ({problem}): deleted, resuming from an earlier one", file=sys.stderr
            )
        shutil.rmtree(path, ignore_errors=True)
    return None


def missing_parts(checkpoint: Path) -> list[str]:
    """The files transformers writes into every checkpoint that ``checkpoint`` lacks."""
    missing = [name for name in CHECKPOINT_PARTS if not (checkpoint / name).is_file()]
    if "adapter_model.safetensors" in missing and (checkpoint / FULL_WEIGHTS).is_file():  # a full fine-tune
        missing.remove("adapter_model.safetensors")
    return missing + ([] if any(checkpoint.glob("rng_state*.pth")) else ["rng_state.pth"])


def mark_complete(checkpoint: Path, progress: dict[str, Any]) -> None:
    """Mark a checkpoint complete: the run's progress and the size and hash of each of its files."""
    files = {
        p.relative_to(checkpoint).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(Path(checkpoint).rglob("*"))
        if p.is_file() and p.name != CHECKPOINT_FILE
    }
    write_json(checkpoint / CHECKPOINT_FILE, {**progress, "files": files}, root=Path(checkpoint).parent)


def progress_of(checkpoint: Path | None) -> dict[str, Any]:
    """Tokens and wall time of the run up to ``checkpoint`` (zeros for a fresh start)."""
    if checkpoint is None:
        return {"tokens_seen_rank0": 0, "wall_seconds": 0.0, "segments": 0}
    marker = json.loads((checkpoint / CHECKPOINT_FILE).read_text())
    return {k: marker[k] for k in ("tokens_seen_rank0", "wall_seconds", "segments")}


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


def check(config: ResolvedTrainConfig, world_size: int) -> dict[str, Any] | None:
    """Whether ``config`` may use its run folder, changing nothing: raises ``RunFolderError`` if
    not; returns the run file of a finished run that is resumed (nothing to train), else None."""
    folder = Path(config.output)
    _refuse_dangling(folder)
    if not folder.is_dir():
        return None
    previous = read_run(folder)
    if config.resume and previous is not None:
        differ = _differences(previous, identity(config, world_size))
        if differ:
            raise RunFolderError(
                f"{folder} holds a run with other options ({'; '.join(differ)}): resume it with its own "
                "options, or start a new run elsewhere (or here with --overwrite)"
            )
        return previous if previous.get("finished") else None
    if holds_a_run(folder):
        if config.resume:  # checkpoints or an adapter without a run file: whose are they?
            raise RunFolderError(f"{folder} holds checkpoints or an adapter but no {RUN_FILE}: nothing to resume")
        if previous is None:
            raise RunFolderError(
                f"{folder} holds checkpoints, logs or an adapter but no {RUN_FILE}: it is not a calbench run "
                "folder, and calbench deletes nothing in it (not even with --overwrite): choose another --output"
            )
        if not config.overwrite:
            what = "a finished run" if previous.get("finished") else "another run"
            raise RunFolderError(
                f"{folder} holds {what}: pass --resume to continue it, --overwrite to replace it, "
                "or choose another --output"
            )
    return None


def start(config: ResolvedTrainConfig, world_size: int) -> tuple[Path | None, dict[str, Any] | None]:
    """Prepare the run folder for ``config``: (the checkpoint to resume from, the finished run's file).

    A finished run that is resumed returns its run file and nothing is to be trained.
    Raises ``RunFolderError`` when the folder holds another run (``check``).
    """
    folder = Path(config.output)
    check(config, world_size)
    folder.mkdir(parents=True, exist_ok=True)
    restore_adapter(folder)
    previous = read_run(folder)
    if config.resume and previous is not None:
        return (None, previous) if previous.get("finished") else (latest_complete(folder), None)
    if holds_a_run(folder):  # check: a calbench run, and --overwrite given
        clear_for_new_run(folder)
    write_json(folder / RUN_FILE, {**identity(config, world_size), "finished": False})
    return None, None


def finished_run(folder: Path) -> dict[str, Any] | None:
    previous = read_run(folder)
    return previous if previous is not None and previous.get("finished") else None


def decided(config: ResolvedTrainConfig) -> Path | None:
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
    # An option the run file lacks was added to calbench train later: the run had the effect its
    # default had then (train_record.as_trained), or today's where that has not changed.
    defaults = {k: v for k, v in TrainConfig().resolve().to_dict().items() if k not in NOT_IDENTITY}
    old, new = {**defaults, **as_trained(previous.get("options", {}))}, wanted["options"]
    by_weights = "base_model" in previous  # the base is its weights, not how --model spells it
    for key in sorted(set(old) | set(new)):
        if key == "model" and by_weights:
            if previous["base_model"] != wanted["base_model"]:
                out.append(
                    f"--model: run {old.get(key)!r} {_weights(previous['base_model'])}, "
                    f"now {new.get(key)!r} {_weights(wanted['base_model'])}"
                )
        elif old.get(key) != new.get(key):
            out.append(f"--{key.replace('_', '-')}: run {old.get(key)!r}, now {new.get(key)!r}")
    if previous.get("world_size") != wanted["world_size"]:
        out.append(f"processes: run {previous.get('world_size')}, now {wanted['world_size']}")
    return out


def _weights(base: dict[str, str]) -> str:
    if "weights_sha256" in base:
        return f"(weights {base['weights_sha256']})"
    return "(calbench's catalogue model)" if "catalogue" in base else "(not a local folder)"


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
