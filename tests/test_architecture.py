"""The module structure: rooms by role, imports only downward, no import cycle, a pure core
and pure metrics, and the core never imports the training add-on."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"calbench": ROOT / "calbench", "calbench.training": ROOT / "training"}


def _module_name(package: str, folder: Path, path: Path) -> str:
    parts = path.relative_to(folder).with_suffix("").parts
    return ".".join([package, *parts]).removesuffix(".__init__")


def _imports(path: Path, name: str) -> set[str]:
    """The calbench modules a file imports, at any depth of the file (lazy imports count too)."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("calbench")}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative import
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{module}".rstrip(".")
            if module.startswith("calbench"):
                out.add(module)
                out |= {f"{module}.{a.name}" for a in node.names}
    return out


def graph() -> dict[str, set[str]]:
    files = {
        _module_name(pkg, folder, p): p
        for pkg, folder in PACKAGES.items()
        for p in folder.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    return {m: {d for d in _imports(p, m) if d in files and d != m} for m, p in files.items()}


def test_graph_sees_the_modules():
    g = graph()
    assert {"calbench.cli", "calbench.leaderboard.pages.board", "calbench.training.trainer"} <= set(g)
    assert "calbench.leaderboard.pages.numbers" in g["calbench.leaderboard.pages.board"]


def test_no_import_cycle():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g[m]):
            if state.get(d) == 1:
                cycles.append([*stack[stack.index(d) :], d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert not cycles, cycles


def test_the_core_never_imports_the_training_addon():
    core = {m: deps for m, deps in graph().items() if not m.startswith("calbench.training")}
    offenders = {m: sorted(d for d in deps if d.startswith("calbench.training")) for m, deps in core.items()}
    assert not {m: d for m, d in offenders.items() if d}


@pytest.mark.integration
def test_importing_the_core_leaves_the_addon_unloaded():
    core = [m for m in graph() if not m.startswith("calbench.training")]
    modules = sorted(m for m in core if not m.endswith("__main__"))  # __main__ runs the CLI
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.startswith('calbench.training')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.integration
def test_calbench_train_reaches_the_addon_through_its_entry_point():
    from importlib import metadata

    (entry,) = [e for e in metadata.entry_points(group="calbench.commands") if e.name == "train"]
    assert entry.value == "calbench.training.cli:main"
    done = subprocess.run([sys.executable, "-m", "calbench", "train", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--method" in done.stdout


# The rooms, lowest first: a module imports only its own room and those below it.
CORE = {
    "calbench",
    "cache",
    "laws",
    "law_transforms",
    "families",
    "extra_families",
    "name_pairs",
    "param_ranges",
    "train_record",
    "space",
    "prompt",
    "parse",
    "protocols",
    "policy",
    "stats",
    "trie",
    "answer_tokens",
    "task_names",
}
LAYERS = [
    ("core", lambda m: m.removeprefix("calbench.") in CORE or m == "calbench"),
    ("metrics", lambda m: m.startswith("calbench.metrics")),
    (
        "io",
        lambda m: (
            m
            in {
                f"calbench.{n}"
                for n in (
                    "lm_eval_io",
                    "provenance",
                    "eval_report",
                    "markdown",
                    "model_catalogue",
                    "retention_delta",
                    "vllm_support",
                    "api_support",
                    "endpoint",
                )
            }
        ),
    ),
    (
        "lm-eval side",
        lambda m: (
            m.startswith(("calbench.harness", "calbench.backends"))
            or m in ("calbench.drift", "calbench.tiny", "calbench.cost")
        ),
    ),
    ("evaluation", lambda m: m == "calbench.evaluation"),
    ("training add-on", lambda m: m.startswith("calbench.training")),  # it imports nothing of the leaderboard
    ("leaderboard", lambda m: m.startswith("calbench.leaderboard")),
    ("front", lambda m: m in ("calbench.demo", "calbench.cli", "calbench.__main__")),
]


def layer(module: str) -> int:
    found = [i for i, (_, member) in enumerate(LAYERS) if member(module)]
    assert len(found) == 1, f"{module} is in {len(found)} rooms: add it to LAYERS"
    return found[0]


def test_every_module_has_a_room_and_imports_only_downward():
    upward = {
        m: sorted(d for d in deps if layer(d) > layer(m)) for m, deps in graph().items() if not m.endswith("__main__")
    }
    assert not {m: d for m, d in upward.items() if d}, "imports that run back up a room"


def test_the_core_is_flat():
    assert {p.stem for p in (ROOT / "calbench").glob("*.py")} >= CORE - {"calbench"}
    for package in ("metrics", "harness", "backends", "leaderboard"):
        assert (ROOT / "calbench" / package / "__init__.py").is_file()


def test_the_core_and_the_metrics_are_pure():
    """Importing them loads neither torch nor lm-eval, transformers or datasets (no model, no harness)."""
    modules = sorted(m for m in graph() if layer(m) <= 1)
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(sorted(m for m in ('torch', 'lm_eval', 'transformers', 'datasets') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


def _outside_imports(path: Path) -> set[str]:
    """The top-level names of the packages a file imports, at any depth of the file (lazy imports count too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


MODEL_AND_HARNESS = {"lm_eval", "transformers", "torch"}


def test_the_metrics_import_no_model_and_no_harness_at_any_depth():
    """No module under calbench/metrics, nor any calbench module it imports, imports lm-eval,
    transformers or torch anywhere in its file: reading lm-eval's files is ``calbench.lm_eval_io``'s,
    loading a model ``calbench.backends``'. (The subprocess test above sees only top-level imports.)"""
    g = graph()
    files = {
        _module_name(pkg, folder, p): p
        for pkg, folder in PACKAGES.items()
        for p in folder.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    metrics = sorted(m for m in g if m.startswith("calbench.metrics"))
    assert "calbench.metrics.noveltybench" in metrics
    reached, todo = set(metrics), list(metrics)
    while todo:
        for d in g[todo.pop()] - reached:
            reached.add(d)
            todo.append(d)
    offenders = {m: sorted(_outside_imports(files[m]) & MODEL_AND_HARNESS) for m in sorted(reached)}
    assert not {m: d for m, d in offenders.items() if d}


# The brackets keep this file from matching itself.
MACHINE_PATH = re.compile(r"/r[o]ot/|/h[o]me/[a-z_][a-z0-9_-]*/|/U[s]ers/[^/\s]+/|[A-Z]:\\U[s]ers\\")


def test_no_committed_file_holds_a_machine_path():
    """Records, adapters, cards and docs are portable: no home directory or machine path in any
    committed text file (a model's folder is named by its catalogue entry or hub id)."""
    listed = subprocess.run(["git", "ls-files", "-z"], capture_output=True, text=True, cwd=ROOT, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    offenders = []
    for name in filter(None, listed.stdout.split("\0")):
        path = ROOT / name
        if not path.is_file() or path.suffix in (".safetensors", ".png"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        offenders += [f"{name}: {m.group(0)}" for m in MACHINE_PATH.finditer(text)]
    assert not offenders, offenders[:10]


LEADERBOARD = ROOT / "calbench" / "leaderboard"


def _listed(doc: str | None) -> list[str]:
    return re.findall(r"^\* ``(\w+)``:", doc or "", re.MULTILINE)


def test_the_leaderboard_package_lists_its_modules():
    """``calbench/leaderboard/__init__.py`` names each of its rooms and modules once, with its job, and
    no other; each room's ``__init__.py`` names each of its modules so."""
    import importlib

    import calbench.leaderboard

    rooms = sorted(p.name for p in LEADERBOARD.iterdir() if (p / "__init__.py").is_file())
    modules = {p.stem for p in LEADERBOARD.glob("*.py")} - {"__init__"}
    assert sorted(_listed(calbench.leaderboard.__doc__)) == sorted([*rooms, *modules])
    for room in rooms:
        doc = importlib.import_module(f"calbench.leaderboard.{room}").__doc__
        assert sorted(_listed(doc)) == sorted({p.stem for p in (LEADERBOARD / room).glob("*.py")} - {"__init__"}), room


# The leaderboard's rooms and the rooms each may import (besides itself and leaderboard.errors):
# records and recipes at the bottom, pages drawn from them, run on top; nothing runs back up.
LEADERBOARD_ROOMS = {
    "records": set(),
    "recipes": {"records"},
    "pages": {"records", "recipes"},
    "run": {"records", "recipes", "pages"},
}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["calbench", "leaderboard"] else None


def test_the_leaderboard_rooms_import_only_downward():
    """Pages never import run, records never import pages (nor recipes or run), recipes never import
    pages or run: the store and the recipes are read without the pages, the pages drawn without running."""
    g = graph()
    assert set(LEADERBOARD_ROOMS) == {p.name for p in LEADERBOARD.iterdir() if (p / "__init__.py").is_file()}
    offenders = {
        m: sorted(d for d in deps if _room(d) in LEADERBOARD_ROOMS and _room(d) not in {_room(m), *allowed})
        for m, deps in g.items()
        if (allowed := LEADERBOARD_ROOMS.get(_room(m) or "")) is not None
    }
    assert not {m: d for m, d in offenders.items() if d}
    assert "calbench.leaderboard.pages.render" in g and "calbench.leaderboard.run.rows" in g


def test_the_training_addon_imports_nothing_of_the_leaderboard():
    """The add-on takes what it shares with the leaderboard (run-folder files, card sections, recorded
    options) from ``calbench.train_record``, so its room sits below the leaderboard's."""
    offenders = {
        m: sorted(d for d in deps if d.startswith("calbench.leaderboard"))
        for m, deps in graph().items()
        if m.startswith("calbench.training")
    }
    assert not {m: d for m, d in offenders.items() if d}
    assert [n for n, _ in LAYERS].index("training add-on") < [n for n, _ in LAYERS].index("leaderboard")


def test_the_leaderboard_imports_its_errors_not_its_checks_for_an_error():
    """An error class is ``calbench.leaderboard.errors``': no module imports the store's checks or a
    recipe module for ``RefusedRunError`` or ``RecipeError``."""
    errors = {"calbench.leaderboard.errors.RefusedRunError", "calbench.leaderboard.errors.RecipeError"}
    found = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            names = _imports(path, _module_name(pkg, folder, path))
            found[path.name] = {n for n in names if n.rpartition(".")[2] in ("RefusedRunError", "RecipeError")}
    assert not {f: sorted(n - errors) for f, n in found.items() if n - errors}
    assert any(n & errors for n in found.values())
