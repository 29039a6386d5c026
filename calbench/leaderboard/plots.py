"""Leaderboard plots (matplotlib, the ``plots`` extra): a ranking chart and, per family, each
system's samples against the target density or pmf."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from calbench.families import FAMILIES, make_target, ppf
from calbench.leaderboard.score import SAMPLING_TASKS, calibration_score, ranked
from calbench.stats import Z95

RANKING = "plots/ranking.png"


def _first_prompt(record: Mapping[str, Any], family: str) -> dict[str, Any] | None:
    """The family's first selected prompt in the record's numeric sampling task."""
    split = "heldout" if FAMILIES[family].heldout else "unseen"
    task = record["tasks"].get(SAMPLING_TASKS[split], {})
    return next((p for p in task.get("samples", []) if p["family"] == family), None)


def plot_paths(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Relative paths of the plots ``draw_all`` writes for these records (ranking first)."""
    families = [f for f in FAMILIES if any(_first_prompt(r, f) for r in records)]
    return [RANKING, *(f"plots/families/{f}.png" for f in families)]


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})


def draw_ranking(records: Sequence[Mapping[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    order = [r for r in ranked(records) if math.isfinite(calibration_score(r).value)]
    scores = [calibration_score(r) for r in order]
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(order) + 1.2))
    y = np.arange(len(order))[::-1]
    ax.barh(y, [s.value for s in scores], color="#4c72b0", alpha=0.8)
    ax.errorbar([s.value for s in scores], y, xerr=[Z95 * s.se for s in scores], fmt="none", ecolor="black", capsize=3)
    ax.set_yticks(y, [r["name"] for r in order])
    ax.set_xlim(0, 105)
    ax.set_xlabel("calibration score (CS, 0-100; bars: 95% interval)")
    ax.set_title("calbench: numeric sampling, 30 families")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _target_curve(target_key: str, family: str) -> tuple[np.ndarray, np.ndarray, bool]:
    _, _, inner = target_key.partition("(")
    params = {k: float(v) for k, v in (kv.split("=") for kv in inner.rstrip(")").split(","))}
    target = make_target(family, params)
    law = target.law
    lo, hi = (float(x) for x in ppf(law, [0.005, 0.995]))
    if target.integer:
        grid = np.arange(math.floor(lo), math.ceil(hi) + 1, dtype=float)
        return grid, law.pmf(grid), True
    grid = np.linspace(lo, hi, 400)
    return grid, law.pdf(grid), False


def draw_family(records: Sequence[Mapping[str, Any]], family: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    shown = [(r, p) for r in records if (p := _first_prompt(r, family))]
    target_key = shown[0][1]["target"]
    xs, ys, integer = _target_curve(target_key, family)
    fig, axes = plt.subplots(1, len(shown), figsize=(3.2 * len(shown), 2.8), sharex=True, squeeze=False)
    for ax, (record, prompt) in zip(axes[0], shown, strict=True):
        values = np.asarray(prompt["values"], dtype=float)
        inside = values[(values >= xs[0] - 0.5) & (values <= xs[-1] + 0.5)] if values.size else values
        if integer:
            if inside.size:
                counts = np.bincount((inside - xs[0]).round().astype(int), minlength=xs.size)[: xs.size]
                ax.bar(xs, counts / values.size, width=0.8, color="#dd8452", alpha=0.7)
            ax.plot(xs, ys, "k.", ms=4)
        else:
            if inside.size:
                width = (xs[-1] - xs[0]) / 30
                heights, _ = np.histogram(inside, bins=30, range=(xs[0], xs[-1]))
                centres = xs[0] + width * (np.arange(30) + 0.5)
                ax.bar(centres, heights / (values.size * width), width=width, color="#dd8452", alpha=0.7)
            ax.plot(xs, ys, "k-", lw=1)
        ax.set_title(f"{record['name']}\n{values.size}/{prompt['n']} valid", fontsize=8)
        if not values.size:
            ax.text(0.5, 0.5, "no valid samples", transform=ax.transAxes, ha="center", fontsize=8)
        ax.tick_params(labelsize=7)
    kind = "pmf: dots" if integer else "density: line"
    fig.suptitle(f"{FAMILIES[family].display}: {target_key} (target {kind}; samples: bars)", fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def draw_all(records: Sequence[Mapping[str, Any]], out: Path) -> list[Path]:
    """Write every plot of ``plot_paths`` under ``out``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    paths = plot_paths(records)
    order = ranked(records)
    draw_ranking(order, out / paths[0])
    for rel in paths[1:]:
        draw_family(order, Path(rel).stem, out / rel)
    return [out / p for p in paths]
