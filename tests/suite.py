"""How the suite runs, apart from what it tests: the bytecode it compiles first and the order it
sends modules in. ``conftest.py`` takes these hooks; it keeps only fixtures.

* ``compile_stale``: the README's install skips pip's byte-compilation (``--no-compile``); the
  controller compiles what has no bytecode, on every core, before any worker starts.
* Module order: the modules measured longest go first, so that on two workers
  (``-n 2 --dist loadfile``) each runs beside the others instead of alone after them. The
  seconds come from ``durations.json``, which ``pytest --record-durations`` writes from the run it
  finishes (each module's setup, call and teardown summed): rerun it after a module grows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = Path(__file__).with_name("durations.json")  # module file name -> seconds, written by --record-durations
_measured: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each module's measured seconds to {DURATIONS.relative_to(ROOT)} (the modules run longest first)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Compiled once here, by the controller, before any worker starts (compile_stale): calbench's own
    # source tree (each `calbench` subprocess of the suite compiled it again, 0.2-0.3 s of its start)
    # and the environment's packages (compileall writes bytecode whatever PYTHONDONTWRITEBYTECODE says).
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        import sys
        import sysconfig

        folders = [ROOT / "calbench", ROOT / "training"]
        if sys.prefix != sys.base_prefix:  # a virtual environment's packages (the system's are not ours to write)
            folders.append(Path(sysconfig.get_paths()["purelib"]))
        compile_stale(folders)
    # xdist reorders --dist loadfile's modules by their number of tests (most first) unless told not to:
    # the two-test enumeration module, the longest, then ran last, one worker idle beside it.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def compile_stale(folders: list[Path]) -> None:
    """Compiles the modules under ``folders`` that have no up-to-date bytecode, on every core.

    Without compiled modules every process of the suite would compile what it imports, again and
    again under PYTHONDONTWRITEBYTECODE (set on CI machines; calbench's own editable source tree is
    never compiled by pip at all); pip compiles one file at a time (the install fell by 40-45 s
    without it). After a plain ``pip install`` nothing is stale and the scan costs about a second.
    Files that do not compile (torch ships a few in Python 3.12 syntax) are left as pip leaves them."""
    import compileall
    import importlib.util
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial

    stale = []
    for folder in folders:
        for source in Path(folder).rglob("*.py"):
            compiled = Path(importlib.util.cache_from_source(str(source)))
            if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
                stale.append(str(source))
    if len(stale) < 200:  # a few (an edited module, the ones that never compile): not worth a pool
        for name in stale:
            compileall.compile_file(name, quiet=2)
        return
    with ProcessPoolExecutor() as pool:
        list(pool.map(partial(compileall.compile_file, quiet=2), stale, chunksize=64))


def longest_first(names: list[str], seconds: dict[str, float]) -> list[str]:
    """``names`` (module file names) by measured seconds, longest first; unmeasured ones after, in
    the order given (stable)."""
    return sorted(names, key=lambda name: -seconds.get(name, -1.0))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    order = {name: i for i, name in enumerate(longest_first(list(dict.fromkeys(i.path.name for i in items)), seconds))}
    items.sort(key=lambda item: order[item.path.name])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller sees every worker's reports
        name = Path(report.fspath).name
        _measured[name] = _measured.get(name, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: Any) -> None:
    if session.config.getoption("--record-durations") and not os.environ.get("PYTEST_XDIST_WORKER") and _measured:
        kept = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
        merged = kept | {name: round(s, 1) for name, s in _measured.items()}
        DURATIONS.write_text(json.dumps(dict(sorted(merged.items(), key=lambda kv: -kv[1])), indent=1) + "\n")
