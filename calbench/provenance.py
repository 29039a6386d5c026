"""Where a result came from: package versions, file hashes, calbench's commit, and safe writes.

The one home of what run records, adapter cards and training runs say about themselves
(``calbench.leaderboard.records.store``, ``calbench.training``), and of the write that never
leaves a half-written file behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

# Every package a result's numbers depend on: run records and adapters' training records list them
# (accelerate runs the training loop).
PACKAGES = ("calbench", "lm_eval", "transformers", "torch", "peft", "accelerate", "numpy", "scipy")


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (``lm_eval`` and ``lm-eval`` alike); missing ones left out."""
    out = {}
    for name in names:
        try:
            out[name] = importlib_metadata.version(name.replace("_", "-"))
        except importlib_metadata.PackageNotFoundError:
            continue
    return out


def sha256_file(path: Path, limit: int | None = None) -> str:
    """The SHA-256 of a file's bytes (hex; its first ``limit`` characters if given)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:limit]


def sha256_json(data: Any, limit: int | None = None) -> str:
    """The SHA-256 of a JSON value in canonical form (sorted keys, no spaces)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:limit]


def weights_hash(folder: str | Path | None) -> str | None:
    """SHA-256 (16 hex) of a local model or adapter folder's weight files; None for hub ids."""
    if not folder or not Path(folder).is_dir():
        return None
    files = sorted(Path(folder).glob("*.safetensors")) or sorted(Path(folder).glob("*.bin"))
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + sha256_file(f).encode())
    return digest.hexdigest()[:16]


def calbench_commit() -> str | None:
    """The git commit of the calbench checkout this code runs from (None outside a checkout)."""
    root = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return done.stdout.strip() or None


class LinkedPathError(ValueError):
    """A write would go through a symbolic link inside a folder calbench owns."""


def check_no_links(path: Path, root: Path) -> None:
    """Refuse ``path`` if it, or a folder between ``root`` (which may itself be a link) and it, is a
    symbolic link: a write there could land outside ``root``."""
    path, root = Path(path), Path(root)
    try:
        parts = path.relative_to(root).parts
    except ValueError as err:
        raise LinkedPathError(f"{path} is not inside {root}") from err
    here = root
    for part in parts:
        here = here / part
        if here.is_symlink():
            raise LinkedPathError(
                f"{here} is a symbolic link (to {os.readlink(here)}): calbench does not write through links "
                f"inside {root}; remove it"
            )


def atomic_write(path: Path, text: str, no_links: Path | None = None) -> None:
    """Write ``text`` to ``path`` through a new temporary file beside it, renamed over it: never
    half written. The temporary file is created exclusively (never an existing file or link).
    With ``no_links`` (a folder above ``path``), nothing between it and ``path`` may be a
    symbolic link (``check_no_links``)."""
    path = Path(path)
    if no_links is not None:
        check_no_links(path, no_links)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make a committed file unreadable to others
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Mapping[str, Any], no_links: Path | None = None) -> None:
    """``atomic_write`` of a JSON object, indented."""
    atomic_write(path, json.dumps(data, indent=2) + "\n", no_links)


def check_adapter_folder(folder: Path) -> None:
    """A LoRA adapter folder that peft can load and whose weights are finite (``ValueError`` if not)."""
    if not folder.is_dir():
        return  # a hub adapter id: peft fetches and checks it
    config = folder / "adapter_config.json"
    try:
        json.loads(config.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"not a LoRA adapter folder: {config.name} is missing or not JSON ({err})") from None
    weights = folder / "adapter_model.safetensors"
    if not weights.is_file():
        return  # a .bin adapter: peft reads it
    import torch
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(weights))
    except Exception as err:  # safetensors' own error types: a truncated or corrupt file
        raise ValueError(f"{weights.name} cannot be read ({type(err).__name__}: {err})") from None
    for name, tensor in tensors.items():
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{weights.name}: {name} holds NaN or infinite weights")


@contextlib.contextmanager
def exclusive_lock(path: Path, wait: bool) -> Iterator[int]:
    """Hold an exclusive ``flock`` on ``path`` (created, never through a link) for the block; the
    kernel drops it when its holder dies. ``wait=False`` raises ``BlockingIOError`` at once if
    another process holds it; a path that cannot be opened raises ``OSError``. Yields the fd."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        yield fd
    finally:
        os.close(fd)
