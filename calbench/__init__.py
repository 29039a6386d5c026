"""calbench: does a language model sample from the distribution it is asked for?"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"


def tasks_path() -> Path:
    """The folder of calbench's lm-eval task YAML, for ``lm_eval --include_path``.

    In an installed wheel the YAML sits in ``calbench/tasks``; in a clone (or an editable
    install) it is the repository's top-level ``tasks/``.
    """
    package = Path(__file__).resolve().parent
    for candidate in (package / "tasks", package.parent / "tasks"):
        if (candidate / "_numeric_sampling.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"calbench's task YAML was not found next to {package}")
