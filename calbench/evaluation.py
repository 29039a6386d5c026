"""Running lm-eval with calbench's tasks and models, from Python or from ``calbench eval``.

``evaluate`` is ``lm_eval.simple_evaluate`` with calbench's task folder and reference
models registered, writing lm-eval's usual results JSON and per-sample logs.
``eval_cli`` hands a command line to lm-eval's own CLI after adding calbench's
defaults, so every lm-eval flag keeps working.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from calbench import api_support, policy, tasks_path
from calbench.policy import THINKING_DEFAULT, needs_thinking_default, run_metadata
from calbench.provenance import check_adapter_folder
from calbench.task_names import ENUMERATION_TASKS
from calbench.vllm_support import VLLMSetupError, check_vllm_args, vllm_cpu_lora

DEFAULT_OUTPUT = Path("calbench_results")
API_TEXT_PROMPT = ("local-completions",)  # completions backends that would otherwise load a tokenizer by model name
API_PACKAGES = ("aiohttp", "tenacity", "requests")  # what lm-eval's API backends import (lm-eval's `api` extra)


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

    from calbench.backends import register
    from calbench.lm_eval_io import args_dict

    offline_defaults()
    register()
    if needs_thinking_default(model, model_args):
        model_args += f",{THINKING_DEFAULT}"  # as `calbench eval` does; see lm_eval_args

    # As lm-eval's CLI does: tasks see the model arguments (the likelihood tasks read the
    # tokenizer's terminator from `pretrained`) and the run's metadata.
    # calbench's run metadata (a reference's terminator: it has no tokenizer) under the user's.
    given = dict(metadata or {})
    metadata = {**args_dict(model_args), **run_metadata(model)}
    if num_samples:
        metadata["num_samples"] = num_samples
    if is_api_backend(model):  # the tasks see the run's metadata, not its model (calbench eval does the same)
        metadata[api_support.METADATA_BACKEND] = model
    metadata.update(given)
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


class EvalArgumentError(ValueError):
    """A ``calbench eval`` command line that cannot run: said in one line, before any model loads."""


class EvalRunError(RuntimeError):
    """A ``calbench eval`` run that failed or lost its results: said in one line, exit non-zero
    (``CALBENCH_TRACEBACK=1`` shows lm-eval's traceback instead)."""


def lm_eval_args(args: Sequence[str], num_samples: int | None = None) -> argparse.Namespace:
    """lm-eval's own parse of a command line, with calbench's defaults added where the user gave none.

    lm-eval's parser reads every form ``lm_eval`` takes (``-M``/``--model``, ``-a``/``--model_args``
    as ``k=v,k2=v2``, several ``k=v`` words or JSON, ``-o``/``--output_path``, ``--metadata`` as
    ``k=v`` or JSON, ...). Then, for a ``run``:

    * ``--include_path``: calbench's task folder;
    * ``--output_path calbench_results`` and ``--log_samples``: results and per-sample logs;
    * ``--batch_size auto`` on ``vllm`` (all requests to the engine at once), except for a LoRA on
      vLLM's CPU build, whose LoRA logits kernel fails on a batch of log-likelihood requests;
    * ``enable_thinking=False`` in the model arguments of the backends that take it, so
      hybrid-reasoning chat templates answer directly (templates without it ignore it);
    * ``num_samples`` and calbench's run metadata (``policy.run_metadata``: a reference
      system's terminator, calbench-hf's first-token support) under the user's ``--metadata``.
    """
    from lm_eval._cli import HarnessCLI

    if num_samples is not None and not 1 <= num_samples <= policy.MAX_SAMPLES:
        raise EvalArgumentError(
            f"--num-samples must be a whole number from 1 to {policy.MAX_SAMPLES}, got {num_samples}"
        )
    saved, sys.argv = sys.argv, ["lm_eval", *args]
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            ns = HarnessCLI().parse_args()  # inserts lm-eval's `run` command when none is given
    except ValueError as err:  # lm-eval's parser raises for malformed JSON
        raise EvalArgumentError(str(err)) from None
    except SystemExit as exit_:  # argparse: usage and "error: ..." (or --help, which exits 0)
        if not exit_.code:
            sys.stdout.write(said.getvalue())
            raise
        lines = [line for line in said.getvalue().splitlines() if ": error: " in line]
        raise EvalArgumentError(lines[-1].split(": error: ", 1)[1] if lines else said.getvalue().strip()) from None
    finally:
        sys.argv = saved
    sys.stderr.write(said.getvalue())
    if ns.command != "run":
        return ns
    if getattr(ns, "config", None):
        _fill_from_config(ns, Path(ns.config))
    if ns.include_path is None:
        ns.include_path = str(tasks_path())
    if ns.output_path is None:
        ns.output_path = str(DEFAULT_OUTPUT)
    ns.log_samples = True
    model = ns.model or "hf"
    if model == "vllm" and getattr(ns, "batch_size", None) is None and not vllm_cpu_lora(ns.model_args or {}):
        ns.batch_size = "auto"  # lm-eval's default 1 hands vLLM's engine one request at a time
    if ns.model_args and needs_thinking_default(model, ns.model_args):
        ns.model_args = {**ns.model_args, "enable_thinking": False}
    if model in API_TEXT_PROMPT and not {"tokenizer", "tokenizer_backend"} & set(ns.model_args or {}):
        # sampling sends the prompt as text: no tokenizer to fetch from the hub (lm-eval would load the model's)
        ns.model_args = {**(ns.model_args or {}), "tokenizer_backend": None}
    extra: dict[str, Any] = dict(run_metadata(model))
    if num_samples is not None:
        extra["num_samples"] = num_samples
    if extra or ns.metadata:
        ns.metadata = {**extra, **(ns.metadata or {})}
    return ns


def _fill_from_config(ns: argparse.Namespace, path: Path) -> None:
    """Take what ``--config`` sets and the command line does not (lm-eval lets the CLI win too),
    so calbench's defaults apply only where neither set anything."""
    import yaml

    from calbench.lm_eval_io import args_dict

    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise EvalArgumentError(f"--config {path}: {err}") from None
    if not isinstance(config, dict):
        raise EvalArgumentError(f"--config {path}: not a mapping of lm-eval options")
    for key in ("tasks", "model", "model_args", "include_path", "output_path", "log_samples", "metadata"):
        if getattr(ns, key, None) is None and config.get(key) is not None:
            value = config[key]
            if key == "tasks" and isinstance(value, str):
                value = [t.strip() for t in value.split(",") if t.strip()]
            if key in ("model_args", "metadata") and isinstance(value, str):
                value = args_dict(value)
            setattr(ns, key, value)


def _looks_local(value: str) -> bool:
    """A path, not a hub id (``org/name``): absolute, relative with a dot, home, or deeper than one slash."""
    return value.startswith(("/", "./", "../", "~")) or value in (".", "..") or value.count("/") > 1


def check_eval_args(ns: argparse.Namespace, contact: bool = True) -> None:
    """Refuse, in one line, what would fail later: no or unknown tasks, an unknown backend, a model
    given to a reference system, model folders that do not exist or are files (or a bare name
    that is neither a folder nor a cached hub model offline), a dtype torch does not have, a broken
    adapter, metadata keys a task sets itself, an output folder calbench cannot write in or whose
    model subfolder name would be too long; on an API backend, what would send one seed to every
    sample, and (``contact``) a server that does not answer, refuses the key or does not serve the
    model."""
    if ns.command != "run":
        return
    ns.tasks = [t for t in (ns.tasks or []) if isinstance(t, str) and t.strip()]
    if not ns.tasks:
        raise EvalArgumentError("name the tasks to run with --tasks (calbench's: calbench tasks-path lists the YAML)")
    known = calbench_task_names(Path(ns.include_path))
    for task in ns.tasks:
        if task.startswith("calbench") and task not in known and not Path(task).exists():
            close = sorted(k for k in known if k.startswith(task.rsplit("_", 1)[0]))[:6]
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise EvalArgumentError(f"unknown task {task!r}{hint}")
    model = ns.model or "hf"
    args = ns.model_args or {}
    if model == "vllm":  # before lm-eval imports it: a missing vLLM is named, not a bare ModuleNotFoundError
        try:
            check_vllm_args(args)
        except VLLMSetupError as err:
            raise EvalArgumentError(str(err)) from None
    _check_backend(model)
    if is_api_backend(model):
        _check_api(ns, model, args, contact)
    if model not in policy.ENUMERATION_BACKENDS and set(ns.tasks) & set(ENUMERATION_TASKS):
        raise EvalArgumentError(
            f"the sample-free tasks ({', '.join(sorted(set(ns.tasks) & set(ENUMERATION_TASKS)))}) walk the "
            f"model's token tree, which --model {model} cannot do: run them with --model calbench-hf "
            f"(or {' / '.join(policy.REFERENCE_MODELS)})"
        )
    given = sorted(set(args) & set(MODEL_ARGS))
    if model in policy.REFERENCE_MODELS and given:  # as a recipe refuses it (recipes.load_row)
        raise EvalArgumentError(
            f"--model {model} is a reference system and takes no model: {', '.join(f'{k}={args[k]}' for k in given)} "
            "would file its results under that model's name (leave them out, or run the model with --model calbench-hf)"
        )
    for key in ("pretrained", "peft", "lora_local_path", "tokenizer"):
        value = args.get(key)
        if isinstance(value, str) and _looks_local(value) and not Path(value).expanduser().exists():
            raise EvalArgumentError(f"{key}={value}: no such file or folder")
        gguf = model == "vllm" and key == "pretrained" and str(value).endswith(".gguf")  # vLLM loads a GGUF file
        if isinstance(value, str) and Path(value).expanduser().is_file() and not gguf:
            raise EvalArgumentError(
                f"{key}={value}: a file, not a folder: name the folder that holds the model's (or adapter's) "
                "config and weights (a name that is no folder here is taken for a hub id)"
            )
    _check_dtype(model, args.get("dtype"))
    pretrained = args.get("pretrained")
    if isinstance(pretrained, str) and model not in policy.REFERENCE_MODELS:
        _check_model_reference(pretrained)
    for key in ("peft", "lora_local_path"):
        if isinstance(args.get(key), str):
            try:
                check_adapter_folder(Path(str(args[key])).expanduser())  # (calbench.provenance)
            except ValueError as err:
                raise EvalArgumentError(f"{key}={args[key]}: {err}") from None
    _check_metadata(ns)
    _check_output(ns, pretrained)


MODEL_ARGS = ("pretrained", "peft", "lora_local_path")  # the model arguments that name a model or an adapter
DTYPE_BACKENDS = ("hf", "calbench-hf", "vllm")  # they load the model in dtype=, a torch dtype's name or auto


def _check_dtype(model: str, dtype: Any) -> None:
    """``dtype=`` names a torch dtype (``float32``, ``bfloat16``, ``half``...) or ``auto``: lm-eval looks
    it up on torch only once the model loads (``dtype=float13``: an AttributeError 14 frames deep)."""
    if dtype is None or model not in DTYPE_BACKENDS:
        return
    import torch

    if not (dtype == "auto" or (isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype))):
        raise EvalArgumentError(f"dtype={dtype}: not a torch dtype (float32, bfloat16, float16, auto, ...)")


def _check_backend(model: str) -> None:
    from lm_eval.api.registry import get_model

    from calbench.backends import register

    register()
    try:
        get_model(model)
    except (ValueError, KeyError, ImportError) as err:
        first = str(err).split("\n", 1)[0]
        raise EvalArgumentError(f"--model {model}: not an lm-eval backend here ({first[:300]})") from None


def is_api_backend(model: str) -> bool:
    """An lm-eval backend that sends requests to a server (lm-eval's ``TemplateAPI``)."""
    if model in api_support.BACKENDS:
        return True
    from lm_eval.api.registry import get_model

    try:
        cls = get_model(model)
    except (ValueError, KeyError, ImportError):
        return False
    from lm_eval.models.api_models import TemplateAPI

    return isinstance(cls, type) and issubclass(cls, TemplateAPI)


def _check_api(ns: argparse.Namespace, model: str, args: dict[str, Any], contact: bool) -> None:
    import importlib.util

    missing = [m for m in API_PACKAGES if importlib.util.find_spec(m) is None]
    if missing:
        raise EvalArgumentError(
            f"--model {model}: lm-eval's API backends need {', '.join(missing)}, not installed here: pip install -e '.[api]'"
        )
    spec = api_support.BACKENDS.get(model)
    if spec is not None and spec.kind == "chat" and not getattr(ns, "apply_chat_template", None):
        raise EvalArgumentError(f"--model {model} sends chat messages: add --apply_chat_template")
    try:
        api_support.check_api_args(model, args)
        if contact:
            from calbench import endpoint

            endpoint.check_endpoint(model, args)
    except api_support.ApiSetupError as err:
        raise EvalArgumentError(str(err)) from None
    # the tasks see the run's metadata, not its model: name the backend for them
    ns.metadata = {**(ns.metadata or {}), api_support.METADATA_BACKEND: model}


def _check_model_reference(pretrained: str) -> None:
    """A bare model name that is no folder here must be a hub model this machine can get."""
    from calbench import model_catalogue

    if Path(pretrained).expanduser().exists() or pretrained in model_catalogue.CATALOGUE:
        return
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
    if not offline:
        return  # the hub may have it: transformers says so if not
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(pretrained, "config.json")
    except (ImportError, ValueError):
        cached = None
    if not isinstance(cached, str):
        raise EvalArgumentError(
            f"pretrained={pretrained}: not a folder here, not a calbench catalogue model "
            f"({', '.join(model_catalogue.CATALOGUE)}), and not in the Hugging Face cache (HF_HUB_OFFLINE is set)"
        )


def _task_settings(include_path: Path) -> dict[str, str]:
    """Keyword arguments calbench's task YAML set themselves (``dataset_kwargs``): key -> a task."""
    out: dict[str, str] = {}
    for path, config in _task_configs(include_path):
        for key in config.get("dataset_kwargs") or {}:
            out.setdefault(str(key), str(config.get("task") or path.stem))
    return out


def _check_metadata(ns: argparse.Namespace) -> None:
    metadata = ns.metadata or {}
    if not isinstance(metadata, dict):
        raise EvalArgumentError(f"--metadata must be key=value pairs or a JSON object, got {metadata!r}")
    own = _task_settings(Path(ns.include_path))
    clash = sorted(set(metadata) & set(own))
    if clash:
        raise EvalArgumentError(
            f"--metadata {', '.join(clash)}: a setting calbench's tasks fix in their YAML (dataset_kwargs, e.g. "
            f"{own[clash[0]]}), not metadata: choose the task that has the setting you want instead"
        )
    count = metadata.get("num_samples")
    if count is not None and (
        isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= policy.MAX_SAMPLES
    ):
        raise EvalArgumentError(
            f"--metadata num_samples must be a positive integer (at most {policy.MAX_SAMPLES}), got {count!r}"
        )


def _check_output(ns: argparse.Namespace, pretrained: Any) -> None:
    """The output folder can be written, and lm-eval's subfolder for the model gets a legal name."""
    from lm_eval.utils import sanitize_model_name

    out = Path(ns.output_path).expanduser()
    folder = out.parent if out.suffix == ".json" else out
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".calbench-write-check-"):
            pass
    except OSError as err:
        raise EvalArgumentError(f"--output_path {ns.output_path}: cannot write there ({err.strerror})") from None
    if isinstance(pretrained, str) and out.suffix != ".json":  # lm-eval's <output>/<model>/results_*.json
        name = sanitize_model_name(pretrained)
        if len(name.encode()) > 255:
            raise EvalArgumentError(
                f"pretrained={pretrained[:60]}...: lm-eval names its output folder after the model path, here "
                f"{len(name.encode())} bytes, longer than a file name may be (255): use a shorter path or a link"
            )


def _task_configs(include_path: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Each task YAML in ``include_path`` with its top-level settings (lm-eval's ``!function``
    tags read as nothing; a file that is not YAML left out: lm-eval reports its own errors)."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    out = []
    for path in sorted(include_path.glob("*.yaml")):
        try:
            config = yaml.load(path.read_text(), Loader=_Loader) or {}
        except yaml.YAMLError:
            continue
        if isinstance(config, dict):
            out.append((path, config))
    return out


def _names_of(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [v for v in value or [] if isinstance(v, str)]


def self_contained_task_names(include_path: Path) -> set[str]:
    """The names in ``include_path`` that lm-eval resolves without its own tasks: every task and tag,
    and each group whose members are all such names (``calbench_retention`` is not: its members
    are lm-eval's tinyBenchmarks and Paloma tasks)."""
    configs = [config for _, config in _task_configs(include_path)]
    # a member that is not a plain name (an inline task) leaves its group to lm-eval's full index
    groups = {str(c["group"]): c.get("task") or [] for c in configs if isinstance(c.get("group"), str)}
    names = {n for c in configs for n in _names_of(c.get("tag")) + ([] if "group" in c else _names_of(c.get("task")))}

    def resolved(members: Any) -> bool:
        return isinstance(members, list) and all(isinstance(m, str) and m in names for m in members)

    while ready := {g for g, members in groups.items() if g not in names and resolved(members)}:
        names |= ready
    return names


def calbench_task_names(include_path: Path) -> set[str]:
    """Task, tag and group names defined by the YAML in ``include_path`` (calbench's, by default),
    and the names its groups list as members."""
    return {
        n for _, c in _task_configs(include_path) for key in ("task", "group", "tag") for n in _names_of(c.get(key))
    }


def unresolved_tasks(names: Sequence[str]) -> list[str]:
    """The ``names`` that are neither a task, tag or group of calbench's YAML nor a name of
    lm-eval's own task index (built only if a name is not calbench's, about 5 s). lm-eval reads
    any other name that is a file as a task YAML and imports the Python its ``!function`` names
    beside it: a recipe's tasks must all resolve here (``calbench.leaderboard.run.runner.check``)."""
    rest = [n for n in names if n not in calbench_task_names(tasks_path())]
    if not rest:
        return []
    offline_defaults()
    index = set(task_manager().all_tasks)
    return [n for n in rest if n not in index]


def dry_run(ns: argparse.Namespace) -> str:
    """``calbench eval --dry-run``: the requests and tokens the run would send (``calbench.cost``)."""
    from calbench import cost

    model = ns.model or "hf"
    args = dict(ns.model_args or {})
    n = int(args.get("n", 1)) if is_api_backend(model) else 1
    metadata = {**args, **(ns.metadata or {})}
    try:
        costs, how = cost.preview(ns.tasks, ns.include_path, metadata, args, getattr(ns, "limit", None), n)
    except (ValueError, KeyError, OSError) as err:
        raise EvalArgumentError(_one_line(err)) from None
    return cost.render(costs, how, model, n)


def _run_errors() -> tuple[type[BaseException], ...]:
    """What a run raises that is said in one line: Python's usual errors, and an API's (HTTP, retries)."""
    errors: list[type[BaseException]] = [ValueError, OSError, RuntimeError, TypeError, KeyError]
    try:
        import aiohttp

        errors.append(aiohttp.ClientError)
    except ImportError:
        pass
    try:
        import requests

        errors.append(requests.RequestException)
    except ImportError:
        pass
    return tuple(errors)


def eval_cli(args: Sequence[str], num_samples: int | None = None, preview: bool = False) -> Path | None:
    """``calbench eval``: lm-eval's CLI with calbench's defaults; the results file it wrote, if any
    (``preview``: print what the run would send, and send nothing)."""
    from lm_eval._cli import HarnessCLI

    from calbench.backends import register
    from calbench.lm_eval_io import latest_results

    ns = lm_eval_args(args, num_samples=num_samples)
    check_eval_args(ns, contact=not preview)
    offline_defaults()
    register()
    if preview:
        if ns.command == "run":
            print(dry_run(ns))
        return None
    started = time.time()
    try:
        with _own_tasks_only(ns):
            HarnessCLI().execute(ns)
    except _run_errors() as err:
        if isinstance(err, ValueError) and str(err).startswith("Tasks not found"):  # lm-eval's, before a model loads
            raise EvalArgumentError(str(err)) from None
        if os.environ.get("CALBENCH_TRACEBACK"):
            raise
        # An API run's other requests failed with it, in asyncio tasks nobody awaits any more: at exit
        # asyncio would print each one's traceback after the one line ("Task exception was never retrieved").
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        raise EvalRunError(_one_line(err)) from err
    if ns.command != "run":
        return None
    latest = latest_results(Path(ns.output_path), since=started)
    if latest is None:
        raise EvalRunError(
            f"lm-eval wrote no results file under {ns.output_path}: this run's results are lost "
            "(see lm-eval's log above: a folder it could not write in, or a file name too long)"
        )
    return latest


@contextlib.contextmanager
def _own_tasks_only(ns: argparse.Namespace) -> Iterator[None]:
    """When every task named is one of the include path's (calbench's), lm-eval's TaskManager is
    built without lm-eval's own task index: the same tasks, without reading its thousands of YAML
    files (about 5 s of every run). Any other name (an lm-eval task, a YAML path) keeps the index."""
    import lm_eval.tasks

    asked = set(ns.tasks or [])  # split on commas and checked by lm_eval_args and check_eval_args
    if ns.command != "run" or not asked or not asked <= self_contained_task_names(Path(ns.include_path)):
        yield
        return
    stock = lm_eval.tasks.TaskManager

    class OwnTasks(stock):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "include_defaults": False})

    lm_eval.tasks.TaskManager = OwnTasks
    try:
        yield
    finally:
        lm_eval.tasks.TaskManager = stock


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:500]} (CALBENCH_TRACEBACK=1 shows the traceback)"
