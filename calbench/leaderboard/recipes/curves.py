"""Learning curves: every checkpoint of a training run scored by one fixed, cheap protocol.

A curve recipe (``kind: curve``, e.g. ``leaderboards/rows/curves.yaml``) names training runs
(each with its ``calbench train`` options, over ``defaults.yaml``'s ``train:``) and one
protocol (evaluations, as a row's). This module reads it (``load``: a ``Curves`` of
``CurveRun``s); ``calbench.leaderboard.run.curve_run`` trains the runs and scores their checkpoints
(each point a row of its own, stored in ``<results>/curves/<run>/step-<N>.json``), and
``calbench.leaderboard.pages.curve_page`` draws the curves from those records alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from calbench.leaderboard import RESULTS
from calbench.leaderboard.recipes.fields import (
    Evaluation,
    check_model_args,
    check_model_path,
    check_train_options,
    defaults_of,
    evaluations_of,
    folder_name,
    merge,
    need,
    read_yaml,
)


@dataclass(frozen=True)
class CurveRun:
    """One training run of a curve: its base model and ``calbench train`` options (defaults merged)."""

    name: str
    label: str
    model: str
    train: Mapping[str, Any]
    group: str | None = None  # runs of one recipe that differ only by seed: their spread is shown
    score_every: int | None = None  # this run's own checkpoint spacing (default: the recipe's)
    interpolate: tuple[str, float] | None = None  # WiSE-FT: (an earlier full fine-tuning run, alpha), not trained


@dataclass(frozen=True)
class Curves:
    """A curve recipe (``kind: curve``): its runs, the protocol scoring each point, and its store."""

    path: Path
    runs: tuple[CurveRun, ...]
    protocol: tuple[Evaluation, ...]
    backend: str
    model_args: Mapping[str, Any]
    chat_template: bool
    results_dir: Path
    declared: Path = RESULTS / "curves"  # the recipe's own store, as the page names it
    score_every: int = 1  # score every this many checkpoints (and the last one)
    title: str = "Learning curves"
    score_base: bool = True  # score the base model too (step 0)
    final: tuple[Evaluation, ...] = ()  # a larger protocol for a finished run's last point (all of protocol's tasks)

    def folder(self, run: str) -> Path:
        """Where a run's points are stored."""
        return self.results_dir / run

    @property
    def page(self) -> tuple[str, str]:
        """The rendered table and plot, named after the recipe (curves.yaml: curves.md, plots/curves.png)."""
        return f"{self.path.stem}.md", f"plots/{self.path.stem}.png"


def load(path: Path) -> Curves:
    """A curve recipe over its folder's defaults, checked field by field."""
    path = Path(path)
    own = read_yaml(path)
    need(own.get("kind") == "curve", path, "kind", "must be curve")
    base = defaults_of(path.parent)
    train_defaults = base.pop("train", {}) or {}
    data = merge({k: v for k, v in base.items() if k != "evaluations"}, {k: v for k, v in own.items() if k != "kind"})
    chat = data.get("chat_template", False)
    runs = data.get("runs") or {}
    need(isinstance(runs, Mapping) and bool(runs), path, "runs", "name at least one training run")
    out: list[CurveRun] = []
    seen: set[str] = set()
    for name, spec in runs.items():
        folder_name(path, f"runs.{name}", name, seen)
        need(isinstance(spec, Mapping), path, f"runs.{name}", "must be a mapping")
        interpolate = _interpolation(path, name, spec, out)
        if interpolate is not None:  # its weights come from its source run: the source's options, and no train:
            source = next(r for r in out if r.name == interpolate[0])
            label = str(spec.get("label", name))
            out.append(CurveRun(str(name), label, source.model, source.train, spec.get("group"), None, interpolate))
            continue
        need(isinstance(spec.get("train"), Mapping), path, f"runs.{name}", "needs train:")
        model = spec.get("model", data.get("model"))
        need(isinstance(model, str), path, f"runs.{name}.model", "name the base model (here or at the top)")
        check_model_path(path, f"runs.{name}.model", model)
        train = merge(train_defaults, spec["train"])
        need("model" not in train, path, f"runs.{name}.train.model", "the base model is the run's model:")
        check_train_options(path, f"runs.{name}.train", train, model, allowed=("save_steps", "logging_steps"))
        need("effective_batch" in train, path, f"runs.{name}.train", "state effective_batch (examples per step)")
        group = spec.get("group")
        need(group is None or isinstance(group, str), path, f"runs.{name}.group", "must be a name")
        own_every = spec.get("score_every")
        if own_every is not None:
            _need_every(own_every, path, f"runs.{name}.score_every")
        out.append(CurveRun(str(name), str(spec.get("label", name)), model, train, group, own_every))
    model_args = data.get("model_args") or {}
    need(isinstance(model_args, Mapping), path, "model_args", "must be a mapping")
    check_model_args(path, model_args)
    protocol = evaluations_of(path, data.get("protocol"), chat, False)
    final = evaluations_of(path, data["final"], chat, False) if data.get("final") is not None else ()
    missing = sorted({t for e in protocol for t in e.tasks} - {t for e in final for t in e.tasks}) if final else []
    need(not missing, path, "final", f"scores the last point instead of protocol: add {missing} (the curve goes on)")
    every = data.get("score_every", 1)
    _need_every(every, path, "score_every")
    score_base = data.get("score_base", True)
    need(isinstance(score_base, bool), path, "score_base", "true or false (score the base model at step 0)")
    raw_results = data.get("results_dir") or RESULTS / "curves"
    need(isinstance(raw_results, str | Path), path, "results_dir", f"must be a folder's path, got {raw_results!r}")
    return Curves(
        path,
        tuple(out),
        protocol,
        str(data.get("backend", "calbench-hf")),
        dict(model_args),
        bool(chat),
        Path(raw_results),
        Path(raw_results),
        every,
        str(data.get("title") or "Learning curves"),
        score_base,
        final,
    )


def _interpolation(path: Path, name: str, spec: Mapping[str, Any], earlier: list[CurveRun]) -> tuple[str, float] | None:
    """A run's ``interpolate: {run: SOURCE, alpha: A}`` (WiSE-FT of an earlier full fine-tuning run of
    the recipe: ``calbench interpolate``), checked; None for a run that trains."""
    raw = spec.get("interpolate")
    if raw is None:
        return None
    where = f"runs.{name}.interpolate"
    need(isinstance(raw, Mapping) and set(raw) == {"run", "alpha"}, path, where, "needs run: and alpha: only")
    sources = {r.name: r for r in earlier}
    need(raw["run"] in sources, path, f"{where}.run", f"must name an earlier run of this recipe, got {raw['run']!r}")
    need(sources[raw["run"]].train.get("finetune") == "full", path, f"{where}.run", "must be a full fine-tuning run")
    alpha = raw["alpha"]
    ok = isinstance(alpha, int | float) and not isinstance(alpha, bool) and 0 <= alpha <= 1
    need(ok, path, f"{where}.alpha", f"must be a number in [0, 1] (the fine-tuned weights' share), got {alpha!r}")
    need("train" not in spec, path, f"runs.{name}.train", "an interpolated run trains nothing: remove train:")
    return str(raw["run"]), float(alpha)


def _need_every(every: Any, path: Path, field: str) -> None:
    need(isinstance(every, int) and not isinstance(every, bool) and every >= 1, path, field, "a whole number >= 1")


def with_results_dir(curves: Curves, results_dir: Path) -> Curves:
    """The recipe with its points stored in ``results_dir`` (``--results-dir``, or the rendered store)."""
    return replace(curves, results_dir=results_dir)
