"""The ``calbench`` command line: it parses arguments and calls the library.

calbench demo                         SmolLM2-135M-Instruct and its adapters vs the references
calbench eval <lm_eval arguments>     lm_eval with calbench's tasks and models
calbench models [list|path|install]   the offline model catalogue
calbench tasks-path                   the folder for lm_eval --include_path
calbench train ...                    fine-tune a LoRA adapter (soft or hard targets)
calbench interpolate ...              WiSE-FT: a full fine-tune interpolated toward its base
calbench noveltybench score LOGS...   NoveltyBench partitions and scores (lite or full)
calbench drift --model M --adapter A  KL(base || tuned) on neutral text, offline
calbench retention-delta BASE TUNED   tuned - base on the same items, paired bootstrap interval
calbench leaderboard run|add|render|card|export|tradeoff|compare|choose|rescore   recipes, the store, pages, cards
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from calbench import __version__, policy, tasks_path
from calbench.leaderboard import RESULTS as STORE
from calbench.leaderboard import WORKDIR
from calbench.task_names import CHOICE_SETS

COMMANDS_GROUP = "calbench.commands"  # entry points of add-ons: `calbench train` is the training add-on's


def _fail(command: str, err: BaseException | str) -> int:
    print(f"calbench {command}: {err}", file=sys.stderr)
    return 2


def _write_json(data: Any, output: Path | None) -> None:
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(data, indent=2) + "\n")
        print(f"written: {output}")


def cmd_tasks_path(_: argparse.Namespace) -> int:
    print(tasks_path())
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from calbench import model_catalogue

    if args.action == "list":
        print(model_catalogue.describe())
        return 0
    if not args.names:
        return _fail("models", "name a model, e.g. `calbench models path smollm2-135m-instruct`")
    for name in args.names:
        try:
            print(model_catalogue.model_path(name))
        except KeyError as err:
            return _fail("models", err.args[0])
    return 0


def cmd_eval(args: argparse.Namespace, passthrough: Sequence[str]) -> int:
    from calbench import eval_report, evaluation

    try:
        latest = evaluation.eval_cli(passthrough, num_samples=args.num_samples, preview=args.dry_run)
    except (evaluation.EvalArgumentError, evaluation.EvalRunError) as err:
        return _fail("eval", err)
    if latest is not None:
        print(eval_report.summaries(latest))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from calbench import demo

    if not 1 <= args.num_samples <= policy.MAX_SAMPLES:
        return _fail("demo", f"--num-samples must be from 1 to {policy.MAX_SAMPLES}, got {args.num_samples}")
    report = demo.run(args.output, num_samples=args.num_samples, batch_size=args.batch_size, families=args.families)
    print(report)
    return 0


def cmd_noveltybench(args: argparse.Namespace) -> int:
    from calbench import lm_eval_io
    from calbench.metrics import noveltybench

    try:
        logs = [lm_eval_io.noveltybench_log(path) for path in args.samples]
        items = [
            (split, lm_eval_io.noveltybench_items(samples, str(path)))
            for (split, samples), path in zip(logs, args.samples, strict=True)
        ]
        if args.full:  # the hub models: a download, and a GPU for the reward model
            from calbench.backends import noveltybench as models

            equivalent, rate = models.classifier_equivalence(args.device), models.reward_ratings(args.device)
            scored = noveltybench.score_splits(items, equivalent, rate)
        else:
            scored = noveltybench.score_splits(items)
    except (ValueError, OSError) as err:
        return _fail("noveltybench", err)
    print(noveltybench.summary_text(scored))
    _write_json(scored, args.output)
    return 0


def cmd_drift(args: argparse.Namespace) -> int:
    from calbench import drift, model_catalogue

    model = model_catalogue.resolve(args.model)
    out = {}
    for adapter in args.adapter:
        try:
            out[adapter] = drift.drift_of_adapter(model, adapter, device=args.device)
        except ValueError as err:
            return _fail("drift", err)
        print(drift.describe(adapter, out[adapter]))
    _write_json({"model": args.model, "drift": out}, args.output)
    return 0


def _delta_run(value: str, results_dir: Path) -> Any:
    """A retention-delta side: an lm-eval results file (with its samples logs), or a run record
    (a record file, or a record's name in the store)."""
    from calbench import retention_delta
    from calbench.leaderboard.records import store

    path = Path(value)
    if path.is_file() and store.is_record_file(path):
        return retention_delta.run_of_record(store.load_record(path))
    if path.is_file():
        return retention_delta.run_of_results(path)
    return retention_delta.run_of_record(store.named_records(results_dir, [value])[0])


def cmd_retention_delta(args: argparse.Namespace) -> int:
    from calbench import retention_delta

    try:
        base, tuned = _delta_run(args.base, args.results_dir), _delta_run(args.tuned, args.results_dir)
        print(retention_delta.table(retention_delta.paired_deltas(base, tuned, (args.base, args.tuned))))
    except (OSError, ValueError) as err:
        return _fail("retention-delta", err)
    return 0


LEADERBOARD_ERRORS = (ValueError, OSError, KeyError)  # RefusedRunError and RecipeError are ValueErrors


def cmd_leaderboard_add(args: argparse.Namespace) -> int:
    from calbench.leaderboard.records import store

    path = store.add_record(
        args.name, args.type, args.results, args.command, args.results_dir, args.drift, args.adapter, args.replace
    )
    print(f"written: {path}")
    return 0


def cmd_leaderboard_card(args: argparse.Namespace) -> int:
    from calbench.leaderboard.pages import card

    print(f"written: {card.update_card(args.adapter, args.records, args.results_dir)}")
    return 0


def cmd_leaderboard_export(args: argparse.Namespace) -> int:
    import time

    from calbench.leaderboard.pages import export
    from calbench.leaderboard.records import store

    (record,) = store.named_records(args.results_dir, [args.name])
    output = args.output or Path(f"{args.name}.eee.json")
    _write_json(export.every_eval_ever(record, time.time()), output)
    return 0


def cmd_leaderboard_tradeoff(args: argparse.Namespace) -> int:
    from calbench.leaderboard.pages import tradeoff
    from calbench.leaderboard.records import store

    base, *adapters = store.named_records(args.results_dir, [args.base, *args.adapters])
    command = shlex.join(
        ["calbench", "leaderboard", "tradeoff", args.base, *args.adapters, "--output", str(args.output)]
    )
    for path in tradeoff.write(base, adapters, args.output, command, draw_plot=not args.no_plots):
        print(f"written: {path}")
    return 0


def cmd_leaderboard_compare(args: argparse.Namespace) -> int:
    from calbench.leaderboard.records import store

    a, b = (store.load_record(Path(p)) for p in (args.first, args.second))
    differ = store.differences(a, b)
    for line in differ:
        print(f"differs: {line}")
    if not differ:
        stored = sum(len(e.get("samples", [])) + len(e.get("items", [])) for e in a["tasks"].values())
        print(f"identical numbers: {len(a['tasks'])} tasks, every metric and {stored} stored prompts and items")
        return 0
    apart = store.agreement(a, b)
    for kind in ("z", "relative"):
        found = [(name, x) for name, k, x in apart if k == kind]
        if found:
            what = "standard errors apart (in quadrature)" if kind == "z" else "relative difference (exact metrics)"
            worst = ", ".join(f"{name} {x:.3g}" for name, x in found[:3])
            print(f"{len(found)} metrics differ; the largest {what}: {worst}")
    return 1


def cmd_leaderboard_rescore(args: argparse.Namespace) -> int:
    from calbench.leaderboard.records import rescoring

    if not rescoring.record_files(args.records):
        raise FileNotFoundError(f"no run record in {', '.join(map(str, args.records))}")
    results = rescoring.rescore_files(args.records, args.metric or [])
    lines = rescoring.describe(results)
    for line in lines:
        print(f"differs: {line}")
    what = f"{len(results)} records re-scored from their stored answers"
    print(f"{what}: {len(lines)} stored aggregates disagree beyond rounding" if lines else f"{what}: every one agrees")
    return 1 if lines else 0


def _render(args: argparse.Namespace) -> None:
    from calbench.leaderboard.pages import render

    readme = None if args.no_readme else args.readme
    for path in render.render_all(args.results_dir, args.output, readme, args.rows, draw=not args.no_plots):
        print(f"written: {path}")


def cmd_leaderboard_render(args: argparse.Namespace) -> int:
    _render(args)
    return 0


def _repository_root(paths: Sequence[Path]) -> Path | None:
    """The repository root of recipes in its ``leaderboards/rows`` (None if they are not all in one)."""
    roots = set()
    for path in paths:
        folder = Path(path).resolve().parent
        if not (folder.name == "rows" and folder.parent.name == "leaderboards"):
            return None
        roots.add(folder.parent.parent)
    return roots.pop() if len(roots) == 1 else None


ROOT_PATHS = ("workdir", "results_dir", "output", "readme", "rows")  # relative defaults: from the repository root


def _from_the_root(args: argparse.Namespace) -> None:
    """Recipes name adapters and stores relative to the repository root: a run goes there (the
    paths given on the command line kept as they were meant). A recipe outside a repository's
    ``leaderboards/rows`` needs a store to write to: the current folder's or ``--results-dir``. The
    options left at their defaults (the work folder, the rendered pages) are the root's."""
    from calbench.leaderboard.errors import RefusedRunError

    root = _repository_root(args.recipes)
    if root is None:
        if args.results_dir is None and not Path("leaderboards").is_dir():
            raise RefusedRunError(
                "these recipes are not in a repository's leaderboards/rows and there is no leaderboards/ here: "
                "run from the repository root, or give --results-dir"
            )
        return
    defaults = getattr(args, "path_defaults", {})
    for name in ROOT_PATHS:
        value = getattr(args, name, None)
        if isinstance(value, Path) and value != defaults.get(name):  # given here: meant from here
            setattr(args, name, Path(os.path.abspath(value.expanduser())))
    args.recipes = [Path(p).resolve().relative_to(root) for p in args.recipes]
    if Path.cwd().resolve() != root:
        print(f"calbench leaderboard run: running from the repository root {root}", file=sys.stderr)
        os.chdir(root)


def cmd_leaderboard_run(args: argparse.Namespace) -> int:
    from calbench.leaderboard.errors import RefusedRunError
    from calbench.leaderboard.recipes import loader
    from calbench.leaderboard.run import runner

    only = [e.strip() for e in args.only.split(",") if e.strip()] if args.only is not None else None
    if only == []:
        raise RefusedRunError(f"--only {args.only!r} names nothing: give evaluation or run names, comma-separated")
    _from_the_root(args)
    loaded = [loader.load(path) for path in args.recipes]  # every recipe read and checked before anything runs
    options = runner.RunOptions(args.workdir, args.results_dir, only, args.rerun, args.replace, not args.no_train)
    for path in runner.run_all(loaded, options):
        print(f"written: {path}")
    if args.results_dir is not None:
        print("not rendered: --results-dir is not the leaderboard's store", file=sys.stderr)
    elif not args.no_render:
        _render(argparse.Namespace(**{**vars(args), "results_dir": STORE}))
    return 0


def cmd_leaderboard_choose(args: argparse.Namespace) -> int:
    from calbench.leaderboard.recipes import curves
    from calbench.leaderboard.run import curve_run

    recipe = curves.load(args.recipe)
    out = curve_run.choose(recipe, args.run, args.workdir, args.split)
    print(f"chosen: {out}")
    return 0


LEADERBOARD_ACTIONS = {
    "choose": cmd_leaderboard_choose,
    "add": cmd_leaderboard_add,
    "card": cmd_leaderboard_card,
    "export": cmd_leaderboard_export,
    "tradeoff": cmd_leaderboard_tradeoff,
    "render": cmd_leaderboard_render,
    "run": cmd_leaderboard_run,
    "compare": cmd_leaderboard_compare,
    "rescore": cmd_leaderboard_rescore,
}


def cmd_leaderboard(args: argparse.Namespace) -> int:
    try:
        return LEADERBOARD_ACTIONS[args.action](args)
    except LEADERBOARD_ERRORS as err:
        return _fail("leaderboard", err)


def cmd_addon(command: str, argv: Sequence[str]) -> int:
    """An add-on's command (``calbench train``), found through its ``calbench.commands`` entry point."""
    found = [e for e in metadata.entry_points(group=COMMANDS_GROUP) if e.name == command]
    if not found:
        return _fail(command, f"no add-on provides it (install calbench with pip install -e . to register {command})")
    return int(found[0].load()(list(argv)))


Subparsers = argparse._SubParsersAction  # what add_subparsers returns


def _eval_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "eval",
        help="run lm_eval with calbench's tasks and models (all lm_eval arguments pass through)",
        description="Every argument not listed here goes to lm_eval unchanged, e.g. "
        "calbench eval --model hf --model_args pretrained=DIR --tasks calbench_numeric_unseen --apply_chat_template",
    )
    p.add_argument("--num-samples", type=int, help="samples per prompt for the sampling tasks (default: the task's)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the requests and about how many prompt and answer tokens the run would use; send nothing",
    )
    p.set_defaults(func=cmd_eval)


ADDON_COMMANDS = {  # the training add-on's commands: it parses their options itself (cmd_addon)
    "train": "fine-tune a LoRA adapter with soft or hard targets (calbench train --help)",
    "interpolate": "WiSE-FT: a full fine-tune's weights interpolated toward its base model's",
}


def _train_parser(sub: Subparsers) -> None:
    for name, text in ADDON_COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False).set_defaults(func=None)


def _models_parser(sub: Subparsers) -> None:
    p = sub.add_parser("models", help="the offline model catalogue (install and convert once)")
    p.add_argument("action", nargs="?", choices=["list", "path", "install"], default="list")
    p.add_argument("names", nargs="*", help="catalogue names, e.g. smollm2-135m-instruct")
    p.set_defaults(func=cmd_models)


def _demo_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "demo",
        help="calbench_numeric_quick on SmolLM2-135M-Instruct, its soft and hard adapters, the oracle and a "
        "collapsed sampler",
    )
    p.add_argument(
        "--num-samples", type=int, default=50, help="samples per prompt (default 50: the calibration score's reference)"
    )
    p.add_argument("--families", action="store_true", help="also print the per-family table")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--output", type=Path, default=Path("calbench_results") / "demo")
    p.set_defaults(func=cmd_demo)


def _noveltybench_parser(sub: Subparsers) -> None:
    p = sub.add_parser("noveltybench", help="score NoveltyBench samples logs (lite or full)")
    nb_sub = p.add_subparsers(dest="action", required=True)
    score = nb_sub.add_parser("score", help="partition and score lm-eval samples logs, per split")
    score.add_argument("samples", nargs="+", type=Path, help="samples_calbench_noveltybench_<split>_*.jsonl")
    score.add_argument(
        "--full", action="store_true", help="NoveltyBench's hub models (DeBERTa classifier, Skywork reward; GPU)"
    )
    score.add_argument("--device", default="cpu")
    score.add_argument("--output", type=Path, help="write partitions and scores as JSON")
    score.set_defaults(func=cmd_noveltybench)


def _drift_parser(sub: Subparsers) -> None:
    p = sub.add_parser("drift", help="KL(base || tuned) of next-token distributions on neutral text")
    p.add_argument("--model", required=True, help="base model folder or catalogue name")
    p.add_argument("--adapter", required=True, action="append", help="PEFT adapter folder (repeatable)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--output", type=Path, help="write the results as JSON")
    p.set_defaults(func=cmd_drift)


def _retention_delta_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "retention-delta",
        help="tuned - base on the same items (run records or lm-eval results files), paired bootstrap interval",
    )
    p.add_argument("base", help="the base model's run record (its name, or its file), or its results_*.json")
    p.add_argument("tuned", help="the tuned model's run record (its name, or its file), or its results_*.json")
    p.add_argument("--results-dir", type=Path, default=STORE, help="the store that record names refer to")
    p.set_defaults(func=cmd_retention_delta)


def _render_options(p: argparse.ArgumentParser, results_dir: Path | None = STORE, why: str = "") -> None:
    p.add_argument("--results-dir", type=Path, default=results_dir, help=why or "the results store (%(default)s)")
    p.add_argument("--output", type=Path, default=Path("leaderboards"), help="where the rendered files go")
    p.add_argument("--rows", type=Path, default=Path("leaderboards") / "rows", help="recipes (trade-offs)")
    p.add_argument("--readme", type=Path, default=Path("README.md"), help="README with the headline block")
    p.add_argument("--no-readme", action="store_true", help="leave the top-level README alone")
    p.add_argument("--no-plots", action="store_true")


def _leaderboard_run_parser(lb_sub: Subparsers) -> None:
    p = lb_sub.add_parser(
        "run",
        help="a row from its recipe: train a missing adapter, run unfinished evaluations, store, render",
        description="Run from the repository root. Finished evaluations (in the record, or in the work folder) "
        "are skipped; an interrupted one starts again with the same seeds.",
    )
    p.add_argument("recipes", nargs="+", type=Path, help="leaderboards/rows/<row>.yaml (or protocols.yaml)")
    p.add_argument("--only", help="run only these evaluations (comma-separated names)")
    p.add_argument("--rerun", action="store_true", help="run the chosen evaluations even if finished")
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace a stored record of the same name that another recipe made, or that has evaluations this "
        "recipe no longer has",
    )
    p.add_argument("--workdir", type=Path, default=WORKDIR, help="lm-eval's raw output")
    p.add_argument("--no-render", action="store_true", help="store the record, render nothing")
    p.add_argument(
        "--no-train",
        action="store_true",
        help="train nothing: curves score the checkpoints already there (a run still training elsewhere); "
        "a full fine-tune row whose weights are missing is refused",
    )
    _render_options(p, None, "store the records here instead of the recipe's own store (then nothing is rendered)")
    p.set_defaults(func=cmd_leaderboard, path_defaults={name: p.get_default(name) for name in ROOT_PATHS})


def _leaderboard_add_parser(lb_sub: Subparsers) -> None:
    p = lb_sub.add_parser("add", help="store one system's lm-eval results as a run record")
    p.add_argument("name", help="the system's row name, e.g. smollm2-135m-instruct-soft")
    p.add_argument(
        "--type",
        required=True,
        help="reference, base, instruct, fine-tuned adapter, fine-tuned (every weight), prompting method",
    )
    p.add_argument("--command", required=True, help="the exact command that reproduces the run")
    p.add_argument("results", nargs="+", type=Path, help="results_*.json files of this system")
    p.add_argument("--drift", type=Path, help="calbench drift --output JSON holding this adapter's drift")
    p.add_argument("--adapter", help="the adapter folder to look up in --drift")
    p.add_argument("--replace", action="store_true", help="replace an existing record of the same name")
    p.add_argument("--results-dir", type=Path, default=STORE)
    p.set_defaults(func=cmd_leaderboard)


def _leaderboard_render_parser(lb_sub: Subparsers) -> None:
    p = lb_sub.add_parser(
        "render",
        help="leaderboards/README.md, CSV tables, plots, the protocol table, trade-offs, README tables",
    )
    _render_options(p)
    p.set_defaults(func=cmd_leaderboard)


def _leaderboard_card_parser(lb_sub: Subparsers) -> None:
    p = lb_sub.add_parser("card", help="write run records into an adapter's model card (Evaluation)")
    p.add_argument("adapter", type=Path, help="the adapter folder (with calbench_train.json)")
    p.add_argument("records", nargs="+", help="run record names: the adapter's, then e.g. its base model's")
    p.add_argument("--results-dir", type=Path, default=STORE)
    p.set_defaults(func=cmd_leaderboard)


def _leaderboard_export_parser(lb_sub: Subparsers) -> None:
    p = lb_sub.add_parser("export", help="write a run record as an Every Eval Ever 0.3.0 file")
    p.add_argument("name", help="the run record's name, e.g. smollm2-135m-instruct-soft")
    p.add_argument("--output", "-o", type=Path, help="the file to write (default: NAME.eee.json)")
    p.add_argument("--results-dir", type=Path, default=STORE)
    p.set_defaults(func=cmd_leaderboard)


def _leaderboard_tradeoff_parser(lb_sub: Subparsers) -> None:
    p = lb_sub.add_parser(
        "tradeoff", help="calibration gained against retention lost: a table and a plot, one point per adapter"
    )
    p.add_argument("base", help="the base model's run record name")
    p.add_argument("adapters", nargs="+", help="the adapters' run record names")
    p.add_argument("--output", type=Path, required=True, help="folder for tradeoff.md and plots/tradeoff.png")
    p.add_argument("--results-dir", type=Path, default=STORE)
    p.add_argument("--no-plots", action="store_true")
    p.set_defaults(func=cmd_leaderboard)


def _leaderboard_compare_parser(lb_sub: Subparsers) -> None:
    p = lb_sub.add_parser(
        "compare", help="whether two run records hold the same numbers (a row reproduced from its recipe)"
    )
    p.add_argument("first", type=Path, help="a run record file, e.g. leaderboards/results/oracle.json")
    p.add_argument("second", type=Path, help="another, e.g. the same row run with --results-dir elsewhere")
    p.set_defaults(func=cmd_leaderboard)


def _leaderboard_choose_parser(lb_sub: Subparsers) -> None:
    p = lb_sub.add_parser(
        "choose",
        help="copy a curve run's checkpoint with the best validation score out of its run folder",
        description="Chooses among a curve run's scored points by their calibration score on the validation "
        "families (never the held-out ones) and copies that checkpoint to <workdir>/<run>/chosen. Run from the "
        "repository root.",
    )
    p.add_argument("recipe", type=Path, help="a curve recipe, e.g. leaderboards/rows/transfer.yaml")
    p.add_argument("--run", required=True, help="the run's name in the recipe")
    p.add_argument("--workdir", type=Path, default=WORKDIR, help="where the run's folder is (run's --workdir)")
    p.add_argument("--split", default="validation", choices=CHOICE_SETS)
    p.set_defaults(func=cmd_leaderboard)


def _leaderboard_rescore_parser(lb_sub: Subparsers) -> None:
    p = lb_sub.add_parser(
        "rescore",
        help="score every numeric sampling task of run records again from their stored answers: list the stored "
        "aggregates that disagree (exit 1), or rewrite --metric after its definition changed",
    )
    p.add_argument("records", nargs="*", type=Path, default=[STORE], help=f"record files or folders (default: {STORE})")
    p.add_argument("--metric", action="append", help="rewrite this metric from the stored answers (repeatable)")
    p.set_defaults(func=cmd_leaderboard)


def _leaderboard_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "leaderboard",
        help="the results store: run a row's recipe, add a run record, render, adapter cards, trade-off",
        description="run: a row from its recipe (leaderboards/rows/*.yaml); add: a run record from lm-eval "
        "results files; render: every table and plot from the records; card: records into an adapter's card; "
        "export: a record as an Every Eval Ever 0.3.0 file; "
        "tradeoff: calibration gained against retention lost; compare: whether two records' numbers agree; "
        "choose: a curve run's checkpoint chosen on the validation families; "
        "rescore: stored numbers scored again from the stored answers.",
    )
    lb_sub = p.add_subparsers(
        dest="action", required=True, metavar="{run,add,render,card,export,tradeoff,compare,choose,rescore}"
    )
    for action in (
        _leaderboard_run_parser,
        _leaderboard_choose_parser,
        _leaderboard_add_parser,
        _leaderboard_render_parser,
        _leaderboard_card_parser,
        _leaderboard_export_parser,
        _leaderboard_tradeoff_parser,
        _leaderboard_compare_parser,
        _leaderboard_rescore_parser,
    ):
        action(lb_sub)


def build_parser() -> argparse.ArgumentParser:
    """``calbench``'s parser: one small function builds each subcommand's."""
    parser = argparse.ArgumentParser(
        prog="calbench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"calbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("tasks-path", help="print the task folder for lm_eval --include_path").set_defaults(
        func=cmd_tasks_path
    )
    for command in (
        _eval_parser,
        _train_parser,
        _models_parser,
        _demo_parser,
        _noveltybench_parser,
        _drift_parser,
        _retention_delta_parser,
        _leaderboard_parser,
    ):
        command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "eval":
        return cmd_eval(args, rest)
    if args.command in ADDON_COMMANDS:
        return cmd_addon(args.command, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
