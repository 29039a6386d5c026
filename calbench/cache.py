"""Where calbench keeps what it converts or simulates once: ``$CALBENCH_CACHE`` (default
``~/.cache/calbench``): converted models (``models/``) and Monte-Carlo nulls that every scoring
process would otherwise simulate again (``simulated/``).

A simulated entry is keyed by what it depends on (its name and parameters, and numpy's and
scipy's versions, whose generators and samplers make it), carries the SHA-256 of its content
(``content_sha256``: every array's name, type, shape and bytes) and is written atomically. It
is used only if it reads whole, its key and checksum agree and its user can use it (``use``);
anything else (a cut or flipped file, arrays edited with their key kept, an array of the wrong
shape) is a missing entry: simulated afresh and rewritten, with one line on stderr saying so.
A cached value is the value a fresh simulation gives, whatever the cache holds.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, overload

import numpy as np
import scipy

FORMAT = 2  # 2: each entry carries its content's checksum (entries of format 1 are never read: other file names)
T = TypeVar("T")


def cache_dir() -> Path:
    return Path(os.environ.get("CALBENCH_CACHE", Path.home() / ".cache" / "calbench"))


def content_sha256(arrays: Mapping[str, np.ndarray]) -> str:
    """The SHA-256 of named arrays: each name, dtype, shape and bytes (C order), names sorted."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


class DamagedEntryError(ValueError):
    """A cache entry that is not the one its key names."""


def _read(path: Path, tag: str) -> dict[str, np.ndarray]:
    """The arrays of the entry at ``path``, or any error of a damaged file (numpy's, zipfile's, or
    ``DamagedEntryError``)."""
    with np.load(path, allow_pickle=False) as stored:
        named = {name: stored[name] for name in stored.files}
    key, checksum = str(named.pop("key", "")), str(named.pop("content_sha256", ""))
    if key != tag:
        raise DamagedEntryError("another key")
    if checksum != content_sha256(named):
        raise DamagedEntryError("its content is not what its checksum says")
    return named


def _write(path: Path, tag: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write an entry atomically; an unwritable cache only costs time."""
    buffer = io.BytesIO()
    named: dict[str, Any] = {"key": np.array(tag), "content_sha256": np.array(content_sha256(arrays)), **arrays}
    np.savez(buffer, **named)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
            tmp.write(buffer.getvalue())
        os.replace(tmp.name, path)
    except OSError:
        if tmp is not None:
            Path(tmp.name).unlink(missing_ok=True)


def floats(name: str, size: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """The ``use`` of an entry that holds ``size`` finite numbers under ``name`` (a scalar is
    one): an entry of another shape or with a NaN is damaged."""

    def use(arrays: dict[str, np.ndarray]) -> np.ndarray:
        values = np.asarray(arrays[name], dtype=float)
        if values.size != size or not np.all(np.isfinite(values)):
            raise DamagedEntryError(f"{name}: expected {size} finite numbers, got shape {values.shape}")
        return values.reshape(-1)

    return use


def _as_is(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return arrays


@overload
def simulated(key: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]: ...


@overload
def simulated(
    key: str, compute: Callable[[], dict[str, np.ndarray]], use: Callable[[dict[str, np.ndarray]], T]
) -> T: ...


def simulated(
    key: str, compute: Callable[[], dict[str, np.ndarray]], use: Callable[[dict[str, np.ndarray]], Any] = _as_is
) -> Any:
    """``use(compute())`` (named arrays), ``compute()`` kept under ``simulated/``: read back when
    its entry is whole and ``use`` takes it; any failure to read or use it (module docstring)
    simulates afresh, rewrites the entry and says so in one line."""
    tag = f"{key}|numpy {np.__version__}|scipy {scipy.__version__}|format {FORMAT}"
    path = cache_dir() / "simulated" / f"{hashlib.sha256(tag.encode()).hexdigest()[:40]}.npz"
    if path.is_file():  # else missing (or no cache folder at all): simulated, and written for the next process
        try:
            return use(_read(path, tag))
        except Exception as err:  # whatever a damaged file makes numpy, zipfile or its user raise
            why = " ".join(f"{type(err).__name__}: {err}".split())[:200]
            print(f"calbench: the cached simulation {path} cannot be used ({why}): simulated afresh", file=sys.stderr)
    arrays = compute()
    _write(path, tag, arrays)
    return use(arrays)
