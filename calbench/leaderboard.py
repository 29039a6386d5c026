"""Leaderboards: a store of run records, the calibration score, tables and plots.

A **run record** (one JSON file per system under ``leaderboards/results/``) gathers the
lm-eval results of one system (a model, optionally an adapter, on one backend) over
calbench's tasks, with everything needed to trust and reproduce it: model revision or
weight hash, adapter hash, backend, task versions, generation settings, seeds, calbench
commit, package versions, the exact command, and the metrics with standard errors. Runs
that are not pure T=1 sampling, or that used ``--limit``, are refused.

The **calibration score** (CS, 0-100, higher is better) ranks systems on the numeric
sampling tasks. Per family f (the 24 unseen-parameter families and the 6 held-out ones,
each counted once)::

    s_f = valid_rate_f * min(1, (floor_f + 1.96 se(w1_f)) / w1_f)   (0 without a valid sample)
    CS  = 100 * mean_f s_f

where ``floor_f`` is what exact draws score at the same sample size (``w1 - excess_w1``)
and ``se(w1_f)`` the standard error of the family's W1. A family whose W1 is within its
95% interval of the floor (indistinguishable from exact sampling) scores its valid rate,
so an exact sampler scores about 100 at any sample size; a model that answers every prompt
but collapses onto its favourite answer scores the fraction of the attainable W1 it
reaches; a model that never answers in format scores 0. The score's standard error
propagates the families' standard errors of ``valid_rate`` and ``w1`` (delta method,
families independent).
"""

from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import math
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from calbench import report
from calbench.families import FAMILIES, make_target
from calbench.parse import classify
from calbench.scoring import Z95, Estimate

ENTRY_TYPES = ("reference", "base", "instruct", "fine-tuned adapter", "prompting method")
SCHEMA = 1
NUMERIC_SPLITS = ("unseen", "heldout")
SAMPLING_TASKS = {s: f"calbench_numeric_{s}" for s in NUMERIC_SPLITS}
LIKELIHOOD_TASKS = {s: f"calbench_numeric_{s}_likelihood" for s in NUMERIC_SPLITS}
PACKAGES = ("calbench", "lm_eval", "transformers", "torch", "peft", "numpy", "scipy")
TIERS = {1: "I", 2: "II", 3: "III"}


class RefusedRunError(ValueError):
    """A run the leaderboard does not accept (not pure T=1 sampling, ``--limit``, bad input)."""


# ---------------------------------------------------------------- run records


def check_run(results: Mapping[str, Any], source: str = "run") -> None:
    """Refuse runs that are not comparable: ``--limit``, or sampling other than pure T=1."""
    config = results.get("config", {})
    if config.get("limit") not in (None, 0):
        raise RefusedRunError(f"{source}: run with --limit {config['limit']}; leaderboard runs score every prompt")
    override = config.get("gen_kwargs") or {}
    if isinstance(override, str):
        from lm_eval.utils import simple_parse_args_string

        override = simple_parse_args_string(override)
    for task, task_config in results.get("configs", {}).items():
        if task_config.get("output_type") != "generate_until":
            continue
        gen = {**task_config.get("generation_kwargs", {}), **override}
        wrong = []
        if gen.get("do_sample") is not True:
            wrong.append(f"do_sample={gen.get('do_sample')}")
        if float(gen.get("temperature", 1.0)) != 1.0:
            wrong.append(f"temperature={gen.get('temperature')}")
        if float(gen.get("top_p", 1.0)) != 1.0:
            wrong.append(f"top_p={gen.get('top_p')}")
        if gen.get("top_k") not in (0, -1):  # absent: transformers would default to 50
            wrong.append(f"top_k={gen.get('top_k')}")
        if wrong:
            raise RefusedRunError(
                f"{source}: task {task} did not sample at pure T=1 ({', '.join(wrong)}); "
                "the leaderboard needs do_sample, temperature 1, top_p 1, top_k 0"
            )


def _sha256(path: Path, limit: int | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:limit]


def _weights_hash(folder: str | None) -> str | None:
    """SHA-256 (16 hex) of a local model or adapter folder's weight files; None for hub ids."""
    if not folder or not Path(folder).is_dir():
        return None
    files = sorted(Path(folder).glob("*.safetensors")) or sorted(Path(folder).glob("*.bin"))
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + _sha256(f).encode())
    return digest.hexdigest()[:16]


def _model_args(results: Mapping[str, Any]) -> dict[str, Any]:
    args = results.get("config", {}).get("model_args") or {}
    if isinstance(args, str):
        from lm_eval.utils import simple_parse_args_string

        args = simple_parse_args_string(args)
    return dict(args)


def _calbench_commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return done.stdout.strip() or None


def _versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib_metadata.version(name.replace("_", "-") if name == "lm_eval" else name)
        except importlib_metadata.PackageNotFoundError:
            continue
    return out


def _estimates(e: Mapping[str, Estimate]) -> dict[str, list[float | None]]:
    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {k: [num(v.value), num(v.se)] for k, v in e.items()}


def _task_metrics(task_results: Mapping[str, Any], task: str) -> dict[str, Any]:
    overall = _estimates(report.overall_metrics(task_results))
    if task.startswith("calbench_numeric"):
        _, families = report.read_task(task_results, report.metrics_of(task_results))
        return {"overall": overall, "families": {f: _estimates(e) for f, e in families.items()}}
    return {"overall": overall}


def _sample_values(samples_file: Path) -> list[dict[str, Any]]:
    """Valid parsed answers per prompt of a numeric sampling task's samples log (for plots)."""
    prompts = []
    with samples_file.open() as f:
        for line in f:
            sample = json.loads(line)
            doc = sample["doc"]
            target = make_target(doc["family"], json.loads(doc["params"]))
            answers = [classify(text, target) for text in sample["resps"][0]]
            prompts.append(
                {
                    "family": doc["family"],
                    "target": doc["target"],
                    "n": len(answers),
                    "values": [float(f"{a.value:.6g}") for a in answers if a.valid and a.value is not None],
                }
            )
    return prompts


def build_record(
    name: str,
    entry_type: str,
    results_files: Sequence[Path],
    command: str,
    drift: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One system's run record from its lm-eval ``results_*.json`` files (several runs merge)."""
    if entry_type not in ENTRY_TYPES:
        raise RefusedRunError(f"entry type {entry_type!r} is not one of {', '.join(ENTRY_TYPES)}")
    if not results_files:
        raise RefusedRunError(f"{name}: no results files given")
    record: dict[str, Any] = {"schema": SCHEMA, "name": name, "type": entry_type, "command": command, "tasks": {}}
    systems = set()
    for path in results_files:
        try:
            results = report.load(path)
        except (OSError, ValueError) as err:
            raise RefusedRunError(f"{path}: not a readable lm-eval results file ({err})") from err
        check_run(results, str(path))
        config, args = results.get("config", {}), _model_args(results)
        pretrained = args.get("pretrained")
        adapter = args.get("peft") or args.get("lora_local_path")
        system = (config.get("model"), pretrained and Path(str(pretrained)).name, adapter)
        systems.add(system)
        record["model"] = {
            "backend": config.get("model"),
            "pretrained": Path(str(pretrained)).name if pretrained and Path(str(pretrained)).is_dir() else pretrained,
            "revision": args.get("revision") or config.get("model_revision"),
            "weights_sha256": _weights_hash(pretrained),
            "adapter": Path(str(adapter)).as_posix() if adapter else None,
            "adapter_sha256": _weights_hash(adapter),
            "dtype": args.get("dtype"),
            "chat_template_sha256": results.get("chat_template_sha"),
        }
        record["seeds"] = {k: config.get(k) for k in ("random_seed", "numpy_seed", "torch_seed", "fewshot_seed")}
        for task, task_results in results["results"].items():
            task_config = results.get("configs", {}).get(task, {})
            entry = {
                "version": results.get("versions", {}).get(task),
                "samples_per_prompt": task_config.get("repeats"),
                "generation": task_config.get("generation_kwargs"),
                "prompts": results.get("n-samples", {}).get(task, {}).get("effective"),
                **_task_metrics(task_results, task),
            }
            if task in SAMPLING_TASKS.values():
                logs = sorted(Path(path).parent.glob(f"samples_{task}_*.jsonl"))
                if logs:
                    entry["samples"] = _sample_values(logs[-1])
            record["tasks"][task] = entry
    if len(systems) > 1:
        raise RefusedRunError(f"{name}: the results files come from different systems: {sorted(map(str, systems))}")
    if drift is not None:
        record["drift"] = dict(drift)
    record["calbench_commit"] = _calbench_commit()
    record["packages"] = _versions()
    return record


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def save_record(record: Mapping[str, Any], folder: Path) -> Path:
    """``<folder>/<name>.json`` (readable) and the sampled values in ``<folder>/samples/<name>.json``."""
    head = copy.deepcopy(dict(record))
    samples = {t: e.pop("samples") for t, e in head["tasks"].items() if "samples" in e}
    path = folder / f"{record['name']}.json"
    if samples:
        _atomic_write(folder / "samples" / path.name, json.dumps(samples, sort_keys=True, separators=(",", ":")) + "\n")
    _atomic_write(path, json.dumps(head, indent=1, sort_keys=True) + "\n")
    return path


def load_records(folder: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(Path(folder).glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("schema") != SCHEMA:
            raise RefusedRunError(f"{path}: unknown record schema {record.get('schema')!r}")
        samples = path.parent / "samples" / path.name
        if samples.is_file():
            for task, values in json.loads(samples.read_text()).items():
                record["tasks"][task]["samples"] = values
        records.append(record)
    return records


# ---------------------------------------------------------------- scores


def _est(pair: Sequence[float | None] | None) -> Estimate:
    if not pair:
        return Estimate(math.nan, math.nan)
    value, se = pair
    return Estimate(math.nan if value is None else value, math.nan if se is None else se)


def family_metric(record: Mapping[str, Any], family: str, metric: str) -> Estimate:
    """A sampling metric of one family, from whichever numeric split asks about it."""
    split = "heldout" if FAMILIES[family].heldout else "unseen"
    task = record["tasks"].get(SAMPLING_TASKS[split])
    if task is None:
        return Estimate(math.nan, math.nan)
    return _est(task["families"].get(family, {}).get(metric))


def family_score(valid: Estimate, w1: Estimate, excess: Estimate) -> tuple[float, float]:
    """s_f and its standard error (module docstring)."""
    v = valid.value if math.isfinite(valid.value) else 0.0
    vse = valid.se if math.isfinite(valid.se) else 0.0
    if not (math.isfinite(w1.value) and math.isfinite(excess.value)) or v == 0:
        return 0.0, 0.0
    wse = w1.se if math.isfinite(w1.se) else 0.0
    attainable = max(w1.value - excess.value, 0.0) + Z95 * wse
    if w1.value <= attainable:
        return v, vse  # indistinguishable from exact draws: the ratio is capped at 1
    ratio = attainable / w1.value
    se = math.hypot(ratio * vse, v * attainable / w1.value**2 * wse)
    return v * ratio, se


def calibration_score(record: Mapping[str, Any]) -> Estimate:
    """CS = 100 x mean over the 30 families of s_f; NaN without both numeric sampling tasks."""
    if not all(SAMPLING_TASKS[s] in record["tasks"] for s in NUMERIC_SPLITS):
        return Estimate(math.nan, math.nan)
    parts = [family_score(*(family_metric(record, f, m) for m in ("valid_rate", "w1", "excess_w1"))) for f in FAMILIES]
    values, ses = np.array([p[0] for p in parts]), np.array([p[1] for p in parts])
    return Estimate(100 * float(values.mean()), 100 * float(np.sqrt((ses**2).sum()) / len(parts)))


def tier_metric(record: Mapping[str, Any], tier: int, metric: str) -> Estimate:
    """Equal-weight mean of a sampling metric over one complexity tier's families."""
    values = [family_metric(record, f, metric) for f, fam in FAMILIES.items() if fam.tier == tier]
    if not values or any(not math.isfinite(v.value) for v in values):
        return Estimate(math.nan, math.nan)
    ses = [v.se if math.isfinite(v.se) else 0.0 for v in values]
    return Estimate(float(np.mean([v.value for v in values])), float(math.sqrt(sum(s * s for s in ses)) / len(ses)))


def task_metric(record: Mapping[str, Any], task: str, metric: str) -> Estimate:
    entry = record["tasks"].get(task)
    return _est(entry["overall"].get(metric)) if entry else Estimate(math.nan, math.nan)


def drift_metric(record: Mapping[str, Any]) -> Estimate:
    d = record.get("drift")
    if not d:
        return Estimate(0.0, 0.0) if record["type"] in ("base", "instruct") else Estimate(math.nan, math.nan)
    return Estimate(d["drift_kl"], d["drift_kl_se"])


# ---------------------------------------------------------------- tables

HEADLINE = (
    ("CS ↑", lambda r: calibration_score(r)),
    ("unseen excess_w1_iqr median ↓", lambda r: task_metric(r, SAMPLING_TASKS["unseen"], "excess_w1_iqr_median")),
    ("held-out excess_w1_iqr median ↓", lambda r: task_metric(r, SAMPLING_TASKS["heldout"], "excess_w1_iqr_median")),
    ("unseen valid_rate ↑", lambda r: task_metric(r, SAMPLING_TASKS["unseen"], "valid_rate")),
    ("unseen seq_kl ↓", lambda r: task_metric(r, LIKELIHOOD_TASKS["unseen"], "seq_kl")),
    ("open-ended support_90 ↑", lambda r: task_metric(r, "calbench_open_ended", "support_90")),
    ("MCQ tv_distance ↓", lambda r: task_metric(r, "calbench_mcq_balance", "tv_distance")),
    ("drift ↓", drift_metric),
)


def ranked(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Highest calibration score first; systems without one last, by name."""

    def key(r: Mapping[str, Any]) -> tuple[bool, float, str]:
        cs = calibration_score(r).value
        return (not math.isfinite(cs), -cs if math.isfinite(cs) else 0.0, r["name"])

    return sorted(records, key=key)


def _table(
    records: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, Any]], rank: bool = False
) -> tuple[list[str], list[list[str]]]:
    headers = [*(["#"] if rank else []), "system", "type", *(c for c, _ in columns)]
    rows = []
    for i, r in enumerate(records, 1):
        cells = [report.fmt(fn(r)) for _, fn in columns]
        rows.append([*([str(i)] if rank else []), r["name"], r["type"], *cells])
    return headers, rows


def _split_columns(split: str) -> list[tuple[str, Any]]:
    s, lk = SAMPLING_TASKS[split], LIKELIHOOD_TASKS[split]
    cols = [
        (f"{m} {report.arrow(m)}", lambda r, m=m: task_metric(r, s, m))
        for m in ("w1_iqr", "excess_w1_iqr", "excess_w1_iqr_median", "valid_rate", "gof_pass_rate")
    ]
    cols += [
        (f"{m} {report.arrow(m)}", lambda r, m=m: task_metric(r, lk, m))
        for m in ("seq_kl", "canonical_mass", "exact_w1_iqr", "logit_kl")
    ]
    return cols


def _tier_columns() -> list[tuple[str, Any]]:
    return [
        (f"tier {name} {m} {report.arrow(m)}", lambda r, t=t, m=m: tier_metric(r, t, m))
        for t, name in TIERS.items()
        for m in ("excess_w1_iqr", "valid_rate")
    ]


def _transfer_columns() -> list[tuple[str, Any]]:
    oe, mc = "calbench_open_ended", "calbench_mcq_balance"
    return [
        ("support_90 ↑", lambda r: task_metric(r, oe, "support_90")),
        ("unique_answers ↑", lambda r: task_metric(r, oe, "unique_answers")),
        ("answer_entropy ↑", lambda r: task_metric(r, oe, "answer_entropy")),
        ("MCQ tv_distance ↓", lambda r: task_metric(r, mc, "tv_distance")),
        ("MCQ tv_distance_lenient ↓", lambda r: task_metric(r, mc, "tv_distance_lenient")),
        ("MCQ parse_rate ↑", lambda r: task_metric(r, mc, "parse_rate")),
        ("MCQ parse_rate_lenient ↑", lambda r: task_metric(r, mc, "parse_rate_lenient")),
        ("drift ↓", drift_metric),
    ]


TABLES = {
    "headline": ("Headline", lambda: list(HEADLINE)),
    "unseen": ("Unseen parameters (24 families)", lambda: _split_columns("unseen")),
    "heldout": ("Held-out families (6 families)", lambda: _split_columns("heldout")),
    "tiers": ("Per complexity tier (both splits)", _tier_columns),
    "transfer": ("Transfer and retention", _transfer_columns),
}


def _csv(headers: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return out.getvalue()


def _describe(r: Mapping[str, Any]) -> str:
    m = r.get("model", {})
    bits = [str(m.get("backend")), str(m.get("pretrained"))]
    if m.get("adapter"):
        bits.append(f"adapter {m['adapter']} ({m.get('adapter_sha256')})")
    if m.get("weights_sha256"):
        bits.append(f"weights {m['weights_sha256']}")
    n = {t: e.get("samples_per_prompt") for t, e in r["tasks"].items() if e.get("samples_per_prompt")}
    if n:
        bits.append("samples/prompt " + ", ".join(f"{t.removeprefix('calbench_')}={k}" for t, k in sorted(n.items())))
    return "; ".join(bits)


def render(records: Sequence[Mapping[str, Any]], plots: Sequence[str] = ()) -> dict[str, str]:
    """The leaderboard's text files: ``README.md`` and one CSV per table (name -> content)."""
    order = ranked(records)
    files: dict[str, str] = {}
    lines = [
        "# calbench leaderboard",
        "",
        "Rendered by `calbench leaderboard render` from the run records in `results/`; do not edit by hand.",
        "Value ± 95% interval half-width (1.96 standard errors); `n/a` where a system was not run on a task.",
        "**CS** is calbench's calibration score (0-100, higher is better; see `calbench/leaderboard.py` and the",
        "top-level README): per family, the valid rate times min(1, (floor + 1.96 SE) / W1), where floor is the",
        "W1 that exact draws score at the same sample size; averaged over the 30 families. The excess W1",
        "headline is the median over families (Cauchy's tails make single W1 values erratic at any n).",
        "CS and excess W1 depend on the samples per prompt (the floor and the standard errors shrink as n",
        "grows): compare rows evaluated at the same n (listed per row below); fewer samples favour a row.",
        "",
    ]
    for key, (title, columns) in TABLES.items():
        headers, rows = _table(order, columns(), rank=key == "headline")
        lines += [f"## {title}", "", tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True), ""]
        files[f"tables/{key}.csv"] = _csv(headers, rows)
    if plots:
        lines += ["## Plots", "", f"![ranking]({plots[0]})", "", "Samples against the target, per family:", ""]
        lines += [" · ".join(f"[{Path(p).stem}]({p})" for p in plots[1:]), ""]
    lines += ["## Systems and how to reproduce them", ""]
    for r in order:
        lines += [f"**{r['name']}** ({r['type']}): {_describe(r)}", "", "```bash", r["command"].strip(), "```", ""]
    files["README.md"] = "\n".join(lines).rstrip() + "\n"
    return files


def card_evaluation(records: Sequence[Mapping[str, Any]]) -> str:
    """An adapter card's evaluation section: its record beside the others given (e.g. its base)."""
    headers, rows = _table(records, HEADLINE)
    commands = "\n".join(f"- {r['name']}: `{r['command'].strip()}`" for r in records)
    note = "calbench leaderboard run records; value ± 95% interval half-width. Reproduce with:"
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True) + f"\n\n{note}\n\n{commands}"


def headline_markdown(records: Sequence[Mapping[str, Any]]) -> str:
    headers, rows = _table(ranked(records), HEADLINE, rank=True)
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


README_START, README_END = "<!-- leaderboard:start -->", "<!-- leaderboard:end -->"


def splice_readme(readme: str, headline: str) -> str:
    """The top-level README with the headline table between its leaderboard markers."""
    if README_START not in readme or README_END not in readme:
        raise RefusedRunError(f"the README has no {README_START} ... {README_END} block for the headline table")
    head, rest = readme.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_START}\n{headline}\n{README_END}{tail}"


def write_all(records: Sequence[Mapping[str, Any]], out: Path, readme: Path | None, plots: bool = True) -> list[Path]:
    """Render tables (and plots, if asked) under ``out``; splice the headline into ``readme``."""
    from calbench import plots as plotting

    if plots:
        plotting.draw_all(records, out)
    written = []
    for name, content in render(records, plotting.plot_paths(records)).items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(path)
    if readme is not None:
        readme.write_text(splice_readme(readme.read_text(), headline_markdown(records)))
        written.append(readme)
    return written


def interval(e: Estimate) -> tuple[float, float]:
    return e.value - Z95 * e.se, e.value + Z95 * e.se
