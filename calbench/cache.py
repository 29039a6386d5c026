"""Where calbench keeps what it converts or simulates once: ``$CALBENCH_CACHE`` (default
``~/.cache/calbench``): converted models (``models/``) and Monte-Carlo nulls that every scoring
process would otherwise simulate again (``simulated/``).

A simulated entry is keyed by what it depends on (its name and parameters, and numpy's and
scipy's versions, whose generators and samplers make it), written atomically, and simulated
afresh when it is missing or unreadable: a cached value is the value a fresh simulation gives.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy


def cache_dir() -> Path:
    return Path(os.environ.get("CALBENCH_CACHE", Path.home() / ".cache" / "calbench"))


def simulated(key: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``compute()`` (named arrays), kept under ``simulated/``; an unwritable cache only costs time."""
    tag = f"{key}|numpy {np.__version__}|scipy {scipy.__version__}"
    path = cache_dir() / "simulated" / f"{hashlib.sha256(tag.encode()).hexdigest()[:40]}.npz"
    try:
        with np.load(path, allow_pickle=False) as stored:
            if str(stored["key"]) == tag:
                return {name: stored[name] for name in stored.files if name != "key"}
    except (OSError, ValueError, KeyError, EOFError):
        pass  # missing or damaged: simulated afresh and rewritten
    arrays = compute()
    buffer = io.BytesIO()
    named: dict[str, Any] = {"key": np.array(tag), **arrays}
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
    return arrays
