"""The ``calbench`` command line.

calbench demo                         SmolLM2-135M-Instruct vs the reference systems
calbench eval <lm_eval arguments>     lm_eval with calbench's tasks and models
calbench models [list|path|install]   the offline model catalogue
calbench tasks-path                   the folder for lm_eval --include_path
calbench train ...                    fine-tune a LoRA adapter (soft or hard targets)
calbench noveltybench score LOGS...   NoveltyBench partitions and scores (lite or full)
calbench drift --model M --adapter A  KL(base || tuned) on neutral text, offline
calbench retention-delta BASE TUNED   tuned - base for every shared lm-eval metric
calbench leaderboard add|render       the results store, tables and plots
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from calbench import __version__, tasks_path

DEMO_TASK = "calbench_numeric_quick"


def cmd_tasks_path(_: argparse.Namespace) -> int:
    print(tasks_path())
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from calbench import models

    if args.action == "list":
        for name, e in models.CATALOGUE.items():
            state = models.folder(name) if models.is_ready(name) else "not converted yet"
            print(f"{name:24s} {e.description}\n{'':24s} licence: {e.licence}; folder: {state}")
        return 0
    if not args.names:
        print("calbench models: name a model, e.g. `calbench models path smollm2-135m-instruct`", file=sys.stderr)
        return 2
    for name in args.names:
        try:
            path = models.model_path(name)
        except KeyError as err:
            print(f"calbench models: {err.args[0]}", file=sys.stderr)
            return 2
        print(path)
    return 0


def print_summaries(results_file: Path) -> None:
    from calbench import report

    results = report.load(results_file)
    model = report.model_label(results)
    for task in report.calbench_tasks(results):
        print(f"\ncalbench: {task} — {model}")
        print(report.numeric_table([(str(model), results["results"][task])]))
    for task in report.transfer_tasks(results):
        print(f"\ncalbench: {task} — {model}")
        print(report.overall_table([(str(model), results["results"][task])]))
    print(f"\nresults: {results_file}")


def cmd_eval(args: argparse.Namespace, passthrough: Sequence[str]) -> int:
    from calbench import report, runner

    argv = runner.lm_eval_argv(passthrough, num_samples=args.num_samples)
    started = time.time()
    runner.lm_eval_cli(argv)
    output = Path(runner._value_of(argv, "--output_path") or runner.DEFAULT_OUTPUT)
    latest = report.latest_results(output, since=started)
    if latest is not None:
        print_summaries(latest)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from calbench import models, report, runner

    model_dir = models.model_path(models.DEFAULT_MODEL)
    systems = [
        ("SmolLM2-135M-Instruct", "hf", f"pretrained={model_dir},dtype=float32", True),
        ("oracle", "calbench-oracle", "", False),
        ("collapsed", "calbench-collapsed", "", False),
    ]
    rows = []
    for name, model, model_args, chat in systems:
        print(f"\n== {name}: {DEMO_TASK}", file=sys.stderr, flush=True)
        results = runner.evaluate(
            model,
            [DEMO_TASK],
            model_args=model_args,
            num_samples=args.num_samples,
            apply_chat_template=chat,
            output_path=args.output / name,
            batch_size=args.batch_size,
            device="cpu" if model == "hf" else None,
        )
        rows.append((name, results["results"][DEMO_TASK]))
    n = args.num_samples or 10
    print(f"\ncalbench demo: {DEMO_TASK} (42 prompts, {n} samples each), results under {args.output}")
    print(report.numeric_table(rows))
    return 0


def _write_json(data: Any, output: Path | None) -> None:
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(data, indent=2) + "\n")
        print(f"written: {output}")


def cmd_noveltybench(args: argparse.Namespace) -> int:
    from calbench import noveltybench

    try:
        scored = noveltybench.score_files(args.samples, full=args.full, device=args.device)
    except (ValueError, OSError) as err:
        print(f"calbench noveltybench: {err}", file=sys.stderr)
        return 2
    label = "NoveltyBench (DeBERTa partition, Skywork reward)" if args.full else "NoveltyBench-lite (model-free)"
    print(f"{label}; mean ± standard error over prompts, per split")
    for split, result in scored["splits"].items():
        parts = [f"prompts {result['summary']['prompts']}"]
        for key in ("distinct", "distinct_lite", "utility"):
            if result["summary"].get(key):
                parts.append(f"{key} {result['summary'][key]['mean']:.3f} ± {result['summary'][key]['se']:.3f}")
        print(f"  {split}: " + ", ".join(parts))
    _write_json(scored, args.output)
    return 0


def _model_folder(name: str) -> str:
    from calbench import models

    return name if Path(name).exists() or name not in models.CATALOGUE else str(models.model_path(name))


def cmd_drift(args: argparse.Namespace) -> int:
    from calbench import drift

    model = _model_folder(args.model)
    out = {}
    for adapter in args.adapter:
        if not (Path(adapter) / "adapter_config.json").is_file():
            print(f"calbench drift: {adapter} is not a PEFT adapter folder (no adapter_config.json)", file=sys.stderr)
            return 2
        out[adapter] = drift.drift_of_adapter(model, adapter, device=args.device)
        d = out[adapter]
        print(
            f"{adapter}: drift KL(base || tuned) = {d['drift_kl']:.4g} ± {d['drift_kl_se']:.2g} nats/token "
            f"({d['tokens']} tokens)"
        )
    _write_json({"model": args.model, "drift": out}, args.output)
    return 0


def cmd_retention_delta(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from calbench import report

    try:
        base, tuned = report.load(args.base), report.load(args.tuned)
    except (OSError, ValueError) as err:
        print(f"calbench retention-delta: {err}", file=sys.stderr)
        return 2
    rows = report.retention_deltas(base, tuned)
    if not rows:
        print("calbench retention-delta: the two results share no task", file=sys.stderr)
        return 2
    table = [
        [r["task"], r["metric"], report.fmt(r["base"]), report.fmt(r["tuned"]), report.fmt(r["delta"])] for r in rows
    ]
    print(tabulate(table, headers=["task", "metric", "base", "tuned", "tuned - base"], tablefmt="github"))
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from calbench import leaderboard

    try:
        if args.action == "add":
            drift = None
            if args.drift:
                runs = json.loads(args.drift.read_text())["drift"]
                matches = [v for k, v in runs.items() if Path(k).resolve() == Path(args.adapter or "").resolve()]
                if not matches:
                    raise leaderboard.RefusedRunError(f"{args.drift} has no drift for adapter {args.adapter}")
                drift = matches[0]
            record = leaderboard.build_record(args.name, args.type, args.results, args.command, drift)
            print(f"written: {leaderboard.save_record(record, args.results_dir)}")
            return 0
        records = leaderboard.load_records(args.results_dir)
        if args.action == "card":
            from calbench.training import card

            by_name = {r["name"]: r for r in records}
            missing = [n for n in args.records if n not in by_name]
            if missing:
                raise leaderboard.RefusedRunError(f"no run record named {', '.join(missing)} in {args.results_dir}")
            table = leaderboard.card_evaluation([by_name[n] for n in args.records])
            print(f"written: {card.update(args.adapter, table)}")
            return 0
        if not records:
            raise leaderboard.RefusedRunError(f"no run records under {args.results_dir}")
        readme = None if args.no_readme else args.readme
        for path in leaderboard.write_all(records, args.output, readme, plots=not args.no_plots):
            print(f"written: {path}")
        return 0
    except (leaderboard.RefusedRunError, OSError, KeyError, json.JSONDecodeError) as err:
        print(f"calbench leaderboard: {err}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="calbench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"calbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("tasks-path", help="print the task folder for lm_eval --include_path").set_defaults(
        func=cmd_tasks_path
    )

    p_eval = sub.add_parser(
        "eval",
        help="run lm_eval with calbench's tasks and models (all lm_eval arguments pass through)",
        description="Every argument not listed here goes to lm_eval unchanged, e.g. "
        "calbench eval --model hf --model_args pretrained=DIR --tasks calbench_numeric_unseen --apply_chat_template",
    )
    p_eval.add_argument(
        "--num-samples", type=int, help="samples per prompt for the sampling tasks (default: the task's)"
    )
    p_eval.set_defaults(func=cmd_eval)

    p_train = sub.add_parser(
        "train", help="fine-tune a LoRA adapter with soft or hard targets (calbench train --help)", add_help=False
    )
    p_train.set_defaults(func=None)

    p_models = sub.add_parser("models", help="the offline model catalogue (install and convert once)")
    p_models.add_argument("action", nargs="?", choices=["list", "path", "install"], default="list")
    p_models.add_argument("names", nargs="*", help="catalogue names, e.g. smollm2-135m-instruct")
    p_models.set_defaults(func=cmd_models)

    p_demo = sub.add_parser(
        "demo", help="calbench_numeric_quick on SmolLM2-135M-Instruct, the oracle and a collapsed sampler"
    )
    p_demo.add_argument("--num-samples", type=int, default=None, help="samples per prompt (default: the task's 10)")
    p_demo.add_argument("--batch-size", type=int, default=64)
    p_demo.add_argument("--output", type=Path, default=Path("calbench_results") / "demo")
    p_demo.set_defaults(func=cmd_demo)

    p_nb = sub.add_parser("noveltybench", help="score NoveltyBench samples logs (lite or full)")
    nb_sub = p_nb.add_subparsers(dest="action", required=True)
    p_score = nb_sub.add_parser("score", help="partition and score lm-eval samples logs, per split")
    p_score.add_argument("samples", nargs="+", type=Path, help="samples_calbench_noveltybench_<split>_*.jsonl")
    p_score.add_argument(
        "--full", action="store_true", help="NoveltyBench's hub models (DeBERTa classifier, Skywork reward; GPU)"
    )
    p_score.add_argument("--device", default="cpu")
    p_score.add_argument("--output", type=Path, help="write partitions and scores as JSON")
    p_score.set_defaults(func=cmd_noveltybench)

    p_drift = sub.add_parser("drift", help="KL(base || tuned) of next-token distributions on neutral text")
    p_drift.add_argument("--model", required=True, help="base model folder or catalogue name")
    p_drift.add_argument("--adapter", required=True, action="append", help="PEFT adapter folder (repeatable)")
    p_drift.add_argument("--device", default="cpu")
    p_drift.add_argument("--output", type=Path, help="write the results as JSON")
    p_drift.set_defaults(func=cmd_drift)

    p_ret = sub.add_parser("retention-delta", help="tuned - base for every metric two lm-eval results share")
    p_ret.add_argument("base", type=Path, help="results_*.json of the base model")
    p_ret.add_argument("tuned", type=Path, help="results_*.json of the tuned model")
    p_ret.set_defaults(func=cmd_retention_delta)

    p_lb = sub.add_parser("leaderboard", help="the results store: add a run record, render tables and plots")
    lb_sub = p_lb.add_subparsers(dest="action", required=True)
    p_add = lb_sub.add_parser("add", help="store one system's lm-eval results as a run record")
    p_add.add_argument("name", help="the system's row name, e.g. smollm2-135m-instruct-soft")
    p_add.add_argument("--type", required=True, help="reference, base, instruct, fine-tuned adapter, prompting method")
    p_add.add_argument("--command", required=True, help="the exact command that reproduces the run")
    p_add.add_argument("results", nargs="+", type=Path, help="results_*.json files of this system")
    p_add.add_argument("--drift", type=Path, help="calbench drift --output JSON holding this adapter's drift")
    p_add.add_argument("--adapter", help="the adapter folder to look up in --drift")
    p_add.add_argument("--results-dir", type=Path, default=Path("leaderboards") / "results")
    p_add.set_defaults(func=cmd_leaderboard)
    p_render = lb_sub.add_parser("render", help="leaderboards/README.md, CSV tables, plots, README headline")
    p_render.add_argument("--results-dir", type=Path, default=Path("leaderboards") / "results")
    p_render.add_argument("--output", type=Path, default=Path("leaderboards"))
    p_render.add_argument("--readme", type=Path, default=Path("README.md"), help="README with the headline block")
    p_render.add_argument("--no-readme", action="store_true", help="leave the top-level README alone")
    p_render.add_argument("--no-plots", action="store_true")
    p_render.set_defaults(func=cmd_leaderboard)
    p_card = lb_sub.add_parser("card", help="write run records into an adapter's model card (Evaluation)")
    p_card.add_argument("adapter", type=Path, help="the adapter folder (with calbench_train.json)")
    p_card.add_argument("records", nargs="+", help="run record names: the adapter's, then e.g. its base model's")
    p_card.add_argument("--results-dir", type=Path, default=Path("leaderboards") / "results")
    p_card.set_defaults(func=cmd_leaderboard)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "eval":
        return cmd_eval(args, rest)
    if args.command == "train":
        from calbench.training.cli import main as train_main

        return train_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
