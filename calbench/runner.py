"""Running lm-eval with calbench's tasks and models, from Python or from ``calbench eval``.

``evaluate`` is ``lm_eval.simple_evaluate`` with calbench's task folder and reference
models registered, writing lm-eval's usual results JSON and per-sample logs.
``lm_eval_cli`` hands a command line to lm-eval's own CLI after adding calbench's
defaults, so every lm-eval flag keeps working.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from calbench import tasks_path
from calbench.policy import THINKING_DEFAULT, needs_thinking_default, run_metadata

DEFAULT_OUTPUT = Path("calbench_results")


def offline_defaults() -> None:
    """calbench's data are generated locally: keep `datasets` off the hub unless told otherwise."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def task_manager(metadata: dict[str, Any] | None = None, include_defaults: bool = True) -> Any:
    """lm-eval's TaskManager with calbench's tasks (and lm-eval's own unless told otherwise)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(tasks_path()), include_defaults=include_defaults, metadata=metadata or {})


def evaluate(
    model: str,
    tasks: Sequence[str],
    model_args: str = "",
    num_samples: int | None = None,
    apply_chat_template: bool = False,
    output_path: Path | None = DEFAULT_OUTPUT,
    include_defaults: bool = False,
    metadata: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Evaluate ``model`` on calbench tasks and save the results and per-sample logs.

    Args:
        model: an lm-eval model name (``hf``, ``vllm``, ``calbench-oracle``, ...).
        tasks: task names; lm-eval's own tasks need ``include_defaults=True``.
        model_args: lm-eval's ``key=value,...`` model arguments.
        num_samples: samples per prompt for the sampling tasks (default: each task's own).
        apply_chat_template: wrap prompts in the model's chat template.
        output_path: where lm-eval writes ``results_*.json`` and ``samples_*.jsonl``;
            ``None`` writes nothing (the returned dict still holds the samples).
        metadata: more task metadata, as lm_eval's ``--metadata`` (e.g. NoveltyBench's
            ``calbench_data_files``).
        **kwargs: passed to ``lm_eval.simple_evaluate``.
    """
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.utils import simple_parse_args_string

    from calbench.reference_lms import register

    offline_defaults()
    register()
    if needs_thinking_default(model, model_args):
        model_args += f",{THINKING_DEFAULT}"  # as `calbench eval` does; see lm_eval_argv

    # As lm-eval's CLI does: tasks see the model arguments (the likelihood tasks read the
    # tokenizer's terminator from `pretrained`) and the run's metadata.
    extra = dict(metadata or {})
    metadata = simple_parse_args_string(model_args) if model_args else {}
    metadata.update(extra)
    if num_samples:
        metadata["num_samples"] = num_samples
    metadata.update(run_metadata(model))  # e.g. a reference's terminator: it has no tokenizer
    tracker = EvaluationTracker(output_path=str(output_path)) if output_path else None
    results = simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=list(tasks),
        task_manager=task_manager(metadata, include_defaults),
        apply_chat_template=apply_chat_template,
        log_samples=True,
        evaluation_tracker=tracker,
        metadata=metadata,
        **kwargs,
    )
    if tracker is not None:
        samples = results.pop("samples")
        tracker.save_results_aggregated(results=results, samples=samples)
        for task in results["configs"]:
            tracker.save_results_samples(task_name=task, samples=samples[task])
        results["samples"] = samples
    return dict(results)


def _value_of(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _set(args: list[str], flag: str, value: str) -> list[str]:
    """Replace (or append) ``flag value`` in an argument list."""
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == flag and i + 1 < len(args):
            skip = True
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    return [*out, flag, value]


def lm_eval_argv(args: Sequence[str], num_samples: int | None = None) -> list[str]:
    """lm-eval arguments with calbench's defaults added where the user gave none.

    * ``--include_path``: calbench's task folder;
    * ``--output_path calbench_results`` and ``--log_samples``: results and per-sample logs;
    * ``enable_thinking=False`` in ``--model_args`` for the hf and vllm backends, so
      hybrid-reasoning chat templates answer directly (templates without it ignore it);
    * ``num_samples`` and calbench's run metadata (``policy.run_metadata``: a reference
      system's terminator, calbench-hf's first-token support) merged into ``--metadata``.
    """
    out = list(args)
    if _value_of(out, "--include_path") is None:
        out += ["--include_path", str(tasks_path())]
    if _value_of(out, "--output_path") is None:
        out += ["--output_path", str(DEFAULT_OUTPUT)]
    if "--log_samples" not in out and "-s" not in out:
        out.append("--log_samples")
    model = _value_of(out, "--model") or "hf"
    model_args = _value_of(out, "--model_args")
    if model_args and needs_thinking_default(model, model_args):
        if model_args.lstrip().startswith("{"):
            merged = {**json.loads(model_args), "enable_thinking": False}
            out = _set(out, "--model_args", json.dumps(merged))
        else:
            out = _set(out, "--model_args", f"{model_args},{THINKING_DEFAULT}")
    extra: dict[str, Any] = {}
    if num_samples is not None:
        extra["num_samples"] = num_samples
    extra.update(run_metadata(model))
    if extra:
        metadata = json.loads(_value_of(out, "--metadata") or "{}")
        out = _set(out, "--metadata", json.dumps({**extra, **metadata}))
    return out


def lm_eval_cli(args: Sequence[str]) -> None:
    """Run lm-eval's own command line with calbench's models registered."""
    from lm_eval.__main__ import cli_evaluate

    from calbench.reference_lms import register

    offline_defaults()
    register()
    sys.argv = ["lm_eval", *args]
    cli_evaluate()


def eval_cli(args: Sequence[str], num_samples: int | None = None) -> Path | None:
    """``calbench eval``: lm-eval's CLI with calbench's defaults; the results file it wrote, if any."""
    from calbench.results_tables import latest_results

    argv = lm_eval_argv(args, num_samples=num_samples)
    started = time.time()
    lm_eval_cli(argv)
    return latest_results(Path(_value_of(argv, "--output_path") or DEFAULT_OUTPUT), since=started)
