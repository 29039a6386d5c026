"""What every leaderboard recipe is made of: its YAML, read safely, and its fields, checked.

A recipe (``leaderboards/rows/*.yaml``, ``calbench.leaderboard.recipes.loader``) is read with
``read_yaml``: at most ``MAX_RECIPE_BYTES``, no aliases, no duplicate keys, plain values only.
Over it lie its folder's ``defaults.yaml`` (``defaults_of``, ``merge``). Its fields are checked
one by one, each refusal a ``RecipeError`` naming the file and the field (``need``): model
arguments, ``calbench train`` options, names that become folders, and evaluations (``Evaluation``:
one lm-eval run, or an adapter's drift), which rows and curves share.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from calbench.leaderboard.errors import RecipeError, RefusedRunError
from calbench.leaderboard.records.checks import check_name
from calbench.policy import MAX_SAMPLES
from calbench.train_record import NOT_IDENTITY, OPTIONS, train_arguments

DEFAULTS = "defaults.yaml"
EVALUATION_KEYS = {"kind", "tasks", "samples_per_prompt", "metadata", "chat_template"}


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a row: an lm-eval run of ``tasks``, or the adapter's drift."""

    name: str
    kind: str  # "lm-eval" or "drift"
    tasks: tuple[str, ...] = ()
    samples_per_prompt: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    chat_template: bool = False

    def spec(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tasks": list(self.tasks),
            "samples_per_prompt": self.samples_per_prompt,
            "metadata": dict(self.metadata),
            "chat_template": self.chat_template,
        }


MAX_RECIPE_BYTES = 256 * 1024  # the largest recipe is a few KB
MAX_DEPTH = 32  # mappings and lists nested deeper than any recipe needs
PLAIN = (str, int, float, bool, type(None))


class _RecipeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without aliases (a few hundred bytes of nested aliases expand to
    gigabytes) and without duplicate keys (the last would silently win)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a recipe", mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, PLAIN) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key if isinstance(key, PLAIN) else id(key))
        return super().construct_mapping(node, deep=deep)


def _plain(path: Path, value: Any, where: str = "", depth: int = 0) -> None:
    """Only strings, numbers, booleans, null, lists and mappings of them, not too deep."""
    if depth > MAX_DEPTH:
        raise RecipeError(f"{path}: {where or 'the recipe'}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, PLAIN):
                raise RecipeError(f"{path}: {where}: a key must be a plain value, got {type(key).__name__}")
            _plain(path, item, f"{where}.{key}" if where else str(key), depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _plain(path, item, f"{where}[{i}]", depth + 1)
    elif not isinstance(value, PLAIN):
        raise RecipeError(
            f"{path}: {where}: {type(value).__name__} values are not recipe values (write it as a quoted string)"
        )


def read_yaml(path: Path) -> dict[str, Any]:
    """A recipe file's mapping, or a ``RecipeError`` naming the file: at most ``MAX_RECIPE_BYTES``,
    no aliases, no duplicate keys, plain values only (no dates, binary or sets)."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_RECIPE_BYTES:
            raise RecipeError(f"{path}: {size} bytes: a recipe is at most {MAX_RECIPE_BYTES} bytes")
        data = yaml.load(Path(path).read_text(), Loader=_RecipeLoader)  # a SafeLoader: nothing is executed
    except OSError as err:
        raise RecipeError(f"{path}: cannot read the recipe ({err.strerror or err})") from err
    except yaml.YAMLError as err:
        raise RecipeError(f"{path}: not valid YAML ({err})".replace("\n", " ")) from err
    except RecursionError:
        raise RecipeError(f"{path}: not valid YAML (nested too deeply)") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping of fields, got {type(data).__name__}")
    _plain(path, data)
    return data


def defaults_of(folder: Path) -> dict[str, Any]:
    path = folder / DEFAULTS
    return read_yaml(path) if path.is_file() else {}


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, mappings merged key by key (a ``false`` evaluation removes it)."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


ARG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_model_args(path: Path, model_args: Mapping[str, Any]) -> None:
    """lm-eval's ``--model_args`` are ``key=value`` joined by commas: each key a name, each value a
    plain value without a comma (``dtype: 'float32,peft=/x'`` would add an adapter the recipe does
    not declare); calbench never runs a model's own code (no ``trust_remote_code``)."""
    for key, value in model_args.items():
        where = f"model_args.{key}"
        need(
            isinstance(key, str) and bool(ARG_NAME.fullmatch(key)), path, where, "a key is a name (letters, digits, _)"
        )
        need(isinstance(value, str | int | float | bool), path, where, f"must be a plain value, got {value!r}")
        need("," not in str(value) and "=" not in str(value), path, where, f"{value!r}: a value has no ',' or '='")
        need(
            key != "trust_remote_code",
            path,
            where,
            "calbench runs no model's own code: use a model transformers knows (leave trust_remote_code out)",
        )


def check_train_options(
    path: Path, where: str, train: Mapping[str, Any], model: str, allowed: Sequence[str] = ()
) -> None:
    """A recipe's ``train:`` names ``calbench train`` options exactly (no abbreviation, nothing
    unknown), and none of the run's own (``train_record.NOT_IDENTITY``) but those ``allowed``
    (a curve sets its checkpoints' spacing); then the training config itself types and validates
    them on ``model`` (``train_arguments``), before anything runs."""
    unknown = sorted(str(k) for k in train if k not in OPTIONS)
    need(not unknown, path, where, f"unknown calbench train option(s) {unknown} (see calbench train --help)")
    bad = sorted(set(train) & set(NOT_IDENTITY) - set(allowed))
    need(not bad, path, where, f"{bad} are the run's, not the recipe's")
    for key, value in train.items():
        # each becomes command-line words: a list's items or a value that reads as an option
        # ({max_steps: [1, --overwrite]}) would add options the recipe does not name
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            need(
                item is None or (isinstance(item, str | int | float | bool) and not str(item).startswith("-")),
                path,
                f"{where}.{key}",
                f"must be a plain value (a list of them where the option takes several), got {value!r}",
            )
    try:
        train_arguments(model, train)
    except ValueError as err:
        raise RecipeError(f"{path}: {where}: {err}") from None


def check_model_path(path: Path, where: str, value: str) -> None:
    """A model or adapter folder becomes ``pretrained=`` / ``peft=`` in lm-eval's comma-joined
    ``--model_args``: a ',' or '=' in it would add arguments the recipe does not declare."""
    need("," not in value and "=" not in value, path, where, f"{value!r}: a model or adapter path has no ',' or '='")


def need(ok: bool, path: Path, field_name: str, why: str) -> None:
    if not ok:
        raise RecipeError(f"{path}: {field_name}: {why}")


RESERVED = ("train", "points")  # a row's training run, a curve run's scored checkpoints: <workdir>/<row>/<name>


def folder_name(path: Path, where: str, name: Any, seen: set[str]) -> str:
    """A name that becomes a folder (an evaluation's, a curve run's): one safe path component,
    not a reserved one, unique in its recipe; a ``RecipeError`` naming the field otherwise."""
    need(isinstance(name, str), path, where, f"the name {name!r} must be a string of letters, digits and . _ + -")
    try:
        check_name(name)
    except RefusedRunError:
        need(False, path, where, f"{name!r} is not a folder name: letters, digits and . _ + - (at most 100)")
    need(name not in RESERVED, path, where, f"{name!r} is reserved ({'/'.join(RESERVED)} are the run's own folders)")
    need(name not in seen, path, where, f"{name!r} is named twice")
    seen.add(name)
    return name


# A task as a recipe names it: a name of calbench's or lm-eval's task index (checked before a run:
# runner.check), never a path to a YAML file, whose `!function` lm-eval imports from the Python
# file beside it.
TASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}")
TASK_FILES = (".yaml", ".yml", ".json", ".py")


def evaluations_of(path: Path, specs: Any, chat: bool, has_adapter: bool) -> tuple[Evaluation, ...]:
    need(isinstance(specs, Mapping) and bool(specs), path, "evaluations", "name at least one evaluation")
    out = []
    seen: set[str] = set()
    for name, spec in specs.items():
        where = f"evaluations.{name}"
        folder_name(path, where, name, seen)
        if spec is False or spec is None:
            continue  # skipped by this row
        need(isinstance(spec, Mapping), path, where, "must be a mapping of fields (or false to skip it)")
        unknown = set(spec) - EVALUATION_KEYS
        need(not unknown, path, where, f"unknown field(s) {sorted(unknown)}; known: {sorted(EVALUATION_KEYS)}")
        kind = spec.get("kind", "lm-eval")
        need(kind in ("lm-eval", "drift"), path, f"{where}.kind", f"{kind!r} is not lm-eval or drift")
        if kind == "drift":
            if has_adapter:
                out.append(Evaluation(str(name), "drift"))
            continue  # the drift of a row without an adapter is 0 by definition: nothing to run
        tasks = spec.get("tasks")
        need(
            isinstance(tasks, list) and bool(tasks) and all(isinstance(t, str) for t in tasks),
            path,
            f"{where}.tasks",
            "must be a list of task names",
        )
        for task in tasks:
            need(
                bool(TASK_NAME.fullmatch(task)) and not task.lower().endswith(TASK_FILES),
                path,
                f"{where}.tasks",
                f"{task!r} is not a task name: a recipe names tasks of calbench's or lm-eval's task index, never "
                "a file (lm-eval imports the Python beside a task file: a recipe runs no code)",
            )
        n = spec.get("samples_per_prompt")
        need(
            n is None or (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_SAMPLES),
            path,
            f"{where}.samples_per_prompt",
            f"must be a whole number from 1 to {MAX_SAMPLES}, got {n!r}",
        )
        metadata = spec.get("metadata") or {}
        need(isinstance(metadata, Mapping), path, f"{where}.metadata", "must be a mapping")
        own_chat = spec.get("chat_template", chat)
        need(isinstance(own_chat, bool), path, f"{where}.chat_template", "must be true or false")
        out.append(Evaluation(str(name), "lm-eval", tuple(tasks), n, dict(metadata), own_chat))
    need(bool(out), path, "evaluations", "every evaluation is skipped: nothing to run")
    return tuple(out)
