"""Leaderboard plots (matplotlib, the ``plots`` extra): a ranking chart, each system's PIT
histogram (all 30 families at once), and, per family, each system's samples against the
target density or pmf. Each takes run records or records already scored (``numbers.Scored``)."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from calbench.families import FAMILIES, ppf, target_from_key
from calbench.leaderboard.pages.numbers import Scored, ranked, scored
from calbench.leaderboard.records.record_types import RunRecord, StoredPrompt
from calbench.metrics import pit
from calbench.metrics.calibration import Prompt
from calbench.stats import Z95, Estimate
from calbench.task_names import SAMPLING_TASKS

RANKING = "plots/ranking.png"
PIT = "plots/pit.png"
PIT_BINS = 20


def _first_prompt(record: RunRecord, family: str) -> StoredPrompt | None:
    """The family's first selected prompt in the record's numeric sampling task."""
    task = record["tasks"].get(SAMPLING_TASKS[FAMILIES[family].eval_split])
    samples = task.get("samples", []) if task is not None else []
    return next((p for p in samples if p["family"] == family), None)


def plot_paths(records: Sequence[RunRecord | Scored]) -> list[str]:
    """Relative paths of the plots ``draw_all`` writes for these records (ranking first)."""
    families = [f for f in FAMILIES if any(_first_prompt(s.record, f) for s in scored(records))]
    return [RANKING, PIT, *(f"plots/families/{f}.png" for f in families)]


def save(fig: Any, path: Path, dpi: int = 110) -> None:
    """A figure as a PNG of at most 256 colours (a plot has a handful, and their anti-aliased
    edges): about 40% of matplotlib's RGBA file, and the same picture to the eye."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format="png", metadata={"Software": None})
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(256).save(path, format="PNG", optimize=True)


def draw_ranking(records: Sequence[RunRecord | Scored], path: Path) -> None:
    import matplotlib.pyplot as plt

    with_score = [(r, s) for r in ranked(scored(records)) if isinstance(s := r.calibration_score, Estimate)]
    order = [r for r, s in with_score if math.isfinite(s.value)]
    scores = [s for _, s in with_score if math.isfinite(s.value)]
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(order) + 1.2))
    y = np.arange(len(order))[::-1]
    ax.barh(y, [s.value for s in scores], color="#4c72b0", alpha=0.8)
    ax.errorbar([s.value for s in scores], y, xerr=[Z95 * s.se for s in scores], fmt="none", ecolor="black", capsize=3)
    ax.set_yticks(y, [r.name for r in order])
    ax.set_xlim(0, 105)
    ax.set_xlabel("calibration score (0-100, sample-size-free; bars: 95% interval)")
    ax.set_title("calbench: numeric sampling, 30 families")
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def pit_histogram(intervals: Sequence[tuple[np.ndarray, np.ndarray]], bins: int = PIT_BINS) -> np.ndarray:
    """The density of the pooled PIT values on ``bins`` equal bins of [0, 1] (integer laws: each
    sample spread uniformly over its non-randomized PIT interval [a, b], exactly); 1 everywhere
    for an exact sampler."""
    a = np.concatenate([lo for lo, _ in intervals]) if intervals else np.zeros(0)
    b = np.concatenate([hi for _, hi in intervals]) if intervals else np.zeros(0)
    if a.size == 0:
        return np.full(bins, np.nan)
    edges = np.linspace(0.0, 1.0, bins + 1)
    left, right = edges[None, :-1], edges[None, 1:]
    width = (b - a)[:, None]
    overlap = np.clip(np.minimum(b[:, None], right) - np.maximum(a[:, None], left), 0.0, None)
    spread = np.where(width > 0, overlap / np.where(width > 0, width, 1.0), 0.0)
    points = np.flatnonzero(b == a)  # a point PIT value falls in one bin (u = 1: the last)
    spread[points, np.minimum(np.floor(a[points] * bins).astype(int), bins - 1)] = 1.0
    return spread.sum(axis=0) / a.size * bins


def draw_pit(records: Sequence[RunRecord | Scored], path: Path) -> None:
    """One panel per system with valid answers: its PIT histogram against the flat line."""
    draw_pit_systems([(s.name, s.prompts or {}) for s in scored(records)], path)


def draw_pit_systems(systems: Sequence[tuple[str, Mapping[str, Sequence[Prompt]]]], path: Path) -> None:
    """``draw_pit`` for (name, family -> prompts) pairs; systems without a valid answer are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = []
    for name, rows in systems:
        intervals = [pit.pit_intervals(p.values, p.target) for fam in rows.values() for p in fam if p.values.size]
        if intervals:
            shown.append((name, sum(a.size for a, _ in intervals), pit_histogram(intervals)))
    fig, axes = plt.subplots(1, max(len(shown), 1), figsize=(2.6 * max(len(shown), 1), 2.6), squeeze=False)
    centres = (np.arange(PIT_BINS) + 0.5) / PIT_BINS
    for ax, (name, n, density) in zip(axes[0], shown, strict=False):
        ax.bar(centres, density, width=1 / PIT_BINS, color="#4c72b0", alpha=0.8)
        ax.axhline(1.0, color="black", lw=1)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, max(3.0, float(np.nanmax(density)) * 1.05))
        ax.set_title(f"{name}\n{n} valid answers", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle("PIT values u = F(answer), 30 families pooled (exact sampling: the flat line)", fontsize=9)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def _target_curve(target_key: str, family: str) -> tuple[np.ndarray, np.ndarray, bool]:
    target = target_from_key(target_key)
    law = target.law
    lo, hi = (float(x) for x in ppf(law, [0.005, 0.995]))
    if target.integer:
        grid = np.arange(math.floor(lo), math.ceil(hi) + 1, dtype=float)
        return grid, law.pmf(grid), True
    grid = np.linspace(lo, hi, 400)
    return grid, law.pdf(grid), False


FAMILY_DPI = 80  # thirty wide strips of panels: at the other plots' 110 dpi they weighed 3 MB


def draw_family(records: Sequence[RunRecord | Scored], family: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    shown = [(s.record, p) for s in scored(records) if (p := _first_prompt(s.record, family))]
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
    save(fig, path, dpi=FAMILY_DPI)
    plt.close(fig)


def draw_all(records: Sequence[RunRecord | Scored], out: Path) -> list[Path]:
    """Write every plot of ``plot_paths`` under ``out``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    paths = plot_paths(records)
    order = ranked(scored(records))
    draw_ranking(order, out / paths[0])
    draw_pit(order, out / paths[1])
    for rel in paths[2:]:
        draw_family(order, Path(rel).stem, out / rel)
    return [out / p for p in paths]
