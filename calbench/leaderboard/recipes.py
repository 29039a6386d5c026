"""Leaderboard rows as recipes: one YAML per published row, and what it resolves to.

A row's recipe (``leaderboards/rows/<row>.yaml``; the row is named after the file) says what
system it is and what runs on it; ``defaults.yaml`` beside it holds what every row runs, so a
row states only what differs. ``calbench leaderboard run`` executes a recipe
(``calbench.leaderboard.rows``); the record it writes embeds the resolved recipe and its hash.

A row::

    type: fine-tuned adapter          # reference, base, instruct, fine-tuned adapter, prompting method
    model: smollm2-135m-instruct      # a calbench catalogue name, a hub id or a folder (none: a reference)
    backend: calbench-hf              # the lm-eval model (default: defaults.yaml's)
    model_args: {dtype: float32}      # more --model_args (pretrained and peft are filled in)
    chat_template: true               # --apply_chat_template
    adapter:                          # a LoRA adapter, trained from this config if the folder is missing
      path: leaderboards/adapters/smollm2-135m-instruct-soft
      train: {method: soft, max_steps: 60, ...}    # calbench train's options (defaults.yaml's train: under them)
    evaluations:                      # over defaults.yaml's: change some fields, or `false` to skip one
      sampling: {samples_per_prompt: 1000}
      likelihood: false

An evaluation is one lm-eval run (``tasks``, ``samples_per_prompt``, ``metadata``, and
``chat_template`` where it differs from the row's), or ``kind: drift`` (``calbench drift``,
adapters only). The protocol matrix (``kind: protocols``: every system under every sampling
protocol) and the trade-off (``kind: tradeoff``) are recipes of their own.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from calbench import protocols
from calbench.leaderboard.checks import ENTRY_TYPES, RefusedRunError, check_name
from calbench.policy import MAX_SAMPLES
from calbench.provenance import sha256_json
from calbench.train_record import NOT_IDENTITY, OPTIONS

ROWS = Path("leaderboards") / "rows"
DEFAULTS = "defaults.yaml"
RESULTS = Path("leaderboards") / "results"
KINDS = ("row", "protocols", "tradeoff", "curve")
ROW_KEYS = {"kind", "type", "model", "backend", "model_args", "chat_template", "adapter", "evaluations", "results_dir"}
EVALUATION_KEYS = {"kind", "tasks", "samples_per_prompt", "metadata", "chat_template"}


class RecipeError(RefusedRunError):
    """A recipe that cannot be read or run as written (the message names the file and the field)."""


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


@dataclass(frozen=True)
class Recipe:
    """A row's recipe, resolved over the defaults."""

    path: Path
    name: str
    type: str
    backend: str
    model: str | None
    model_args: Mapping[str, Any]
    chat_template: bool
    adapter: str | None
    train: Mapping[str, Any] | None
    evaluations: tuple[Evaluation, ...]
    results_dir: Path = RESULTS
    command: str = ""

    def resolved(self) -> dict[str, Any]:
        """What the record embeds: everything that decides the row's numbers, defaults filled in."""
        return {
            "name": self.name,
            "type": self.type,
            "backend": self.backend,
            "model": self.model,
            "model_args": dict(self.model_args),
            "chat_template": self.chat_template,
            "adapter": None if self.adapter is None else {"path": self.adapter, "train": self.train},
            "evaluations": {e.name: e.spec() for e in self.evaluations},
        }

    def sha256(self) -> str:
        return sha256_json(self.resolved(), 16)

    def evaluation(self, name: str) -> Evaluation:
        for e in self.evaluations:
            if e.name == name:
                return e
        raise RecipeError(f"{self.path}: no evaluation {name!r} (it has {', '.join(self.names())})")

    def names(self) -> list[str]:
        return [e.name for e in self.evaluations]


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


def kind_of(path: Path) -> str:
    kind = read_yaml(path).get("kind", "row")
    if kind not in KINDS:
        raise RecipeError(f"{path}: kind: {kind!r} is not one of {', '.join(KINDS)}")
    return str(kind)


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


def check_train_options(path: Path, where: str, train: Mapping[str, Any], allowed: Sequence[str] = ()) -> None:
    """A recipe's ``train:`` names ``calbench train`` options exactly (no abbreviation, nothing
    unknown), and none of the run's own (``train_record.NOT_IDENTITY``) but those ``allowed``
    (a curve sets its checkpoints' spacing)."""
    unknown = sorted(str(k) for k in train if k not in OPTIONS)
    need(not unknown, path, where, f"unknown calbench train option(s) {unknown} (see calbench train --help)")
    bad = sorted(set(train) & set(NOT_IDENTITY) - set(allowed))
    need(not bad, path, where, f"{bad} are the run's, not the recipe's")


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


def load_row(path: Path, defaults: Mapping[str, Any] | None = None) -> Recipe:
    """A row's recipe over its folder's ``defaults.yaml`` (or ``defaults``), checked field by field."""
    path = Path(path)
    own = read_yaml(path)
    need(own.get("kind", "row") == "row", path, "kind", f"{own.get('kind')!r}: not a row (load it as its kind)")
    unknown = set(own) - ROW_KEYS
    need(not unknown, path, "", f"unknown field(s) {sorted(unknown)}; known: {sorted(ROW_KEYS)}")
    base = dict(defaults_of(path.parent) if defaults is None else defaults)
    train_defaults = base.pop("train", {}) or {}
    data = merge(base, own)
    name = path.stem
    try:
        check_name(name)
    except RefusedRunError as err:
        raise RecipeError(f"{path}: the file name is the row's name: {err}") from None
    entry_type = data.get("type")
    need(entry_type in ENTRY_TYPES, path, "type", f"{entry_type!r} is not one of {', '.join(ENTRY_TYPES)}")
    backend = data.get("backend")
    need(isinstance(backend, str) and bool(backend), path, "backend", "name the lm-eval model (e.g. calbench-hf)")
    raw_model = data.get("model")
    need(
        raw_model is None or isinstance(raw_model, str), path, "model", "must be a catalogue name, a hub id or a folder"
    )
    model = str(raw_model) if raw_model is not None else None
    model_args = data.get("model_args") or {}
    need(isinstance(model_args, Mapping), path, "model_args", "must be a mapping")
    need(
        not {"pretrained", "peft", "lora_local_path"} & set(model_args),
        path,
        "model_args",
        "pretrained and peft come from model: and adapter:, not model_args",
    )
    check_model_args(path, model_args)
    chat = data.get("chat_template", False)
    need(isinstance(chat, bool), path, "chat_template", "must be true or false")
    adapter, train = None, None
    if data.get("adapter") is not None:
        spec = data["adapter"]
        need(isinstance(spec, Mapping) and isinstance(spec.get("path"), str), path, "adapter", "needs a path")
        need(model is not None, path, "adapter", "an adapter needs its base model: set model:")
        adapter = str(spec["path"])
        if spec.get("train") is not None:
            need(
                isinstance(spec["train"], Mapping), path, "adapter.train", "must be a mapping of calbench train options"
            )
            train = merge(train_defaults, spec["train"])
            check_train_options(path, "adapter.train", train)
            need("model" not in train, path, "adapter.train.model", "the base model is the row's model:")
    backend = str(backend)
    if backend.startswith("calbench-") and backend != "calbench-hf":
        need(model is None, path, "model", f"the reference {backend} takes no model")
    else:
        need(model is not None, path, "model", f"--model {backend} needs a model")
    evaluations = evaluations_of(path, data.get("evaluations"), chat, adapter is not None)
    raw_results = data.get("results_dir") or RESULTS
    need(isinstance(raw_results, str | Path), path, "results_dir", f"must be a folder's path, got {raw_results!r}")
    results_dir = Path(raw_results)
    return Recipe(
        path,
        name,
        str(entry_type),
        backend,
        model,
        dict(model_args),
        chat,
        adapter,
        train,
        evaluations,
        results_dir,
        command=f"calbench leaderboard run {path.as_posix()}",
    )


def quick_task(protocol: str) -> str:
    """The quick selection's task under a sampling protocol."""
    if protocol not in protocols.PROTOCOLS:
        raise RecipeError(f"unknown protocol {protocol!r}; known: {', '.join(protocols.PROTOCOLS)}")
    return "calbench_numeric_quick" + protocols.PROTOCOLS[protocol].task_suffix


def load_protocols(path: Path) -> list[Recipe]:
    """The protocol matrix: each system's row recipe with one evaluation per sampling protocol
    (the quick selection's 42 prompts at ``samples_per_prompt``), stored in its own folder."""
    path = Path(path)
    data = read_yaml(path)
    need(data.get("kind") == "protocols", path, "kind", "must be protocols")
    systems, names = data.get("systems") or [], data.get("protocols") or []
    need(isinstance(systems, list) and bool(systems), path, "systems", "list the rows to run")
    need(isinstance(names, list) and bool(names), path, "protocols", "list the protocols")
    n = data.get("samples_per_prompt")
    need(
        isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_SAMPLES,
        path,
        "samples_per_prompt",
        f"must be a whole number from 1 to {MAX_SAMPLES}, got {n!r}",
    )
    raw_results = data.get("results_dir") or RESULTS / "protocols"
    need(isinstance(raw_results, str | Path), path, "results_dir", f"must be a folder's path, got {raw_results!r}")
    results_dir = Path(raw_results)
    out = []
    for system in systems:
        row = load_row(path.parent / f"{system}.yaml")
        evaluations = tuple(
            Evaluation(str(p), "lm-eval", (quick_task(str(p)),), n, {}, row.chat_template) for p in names
        )
        out.append(
            Recipe(
                path,
                row.name,
                row.type,
                row.backend,
                row.model,
                row.model_args,
                row.chat_template,
                row.adapter,
                None,  # the matrix uses the row's adapter; it never trains one
                evaluations,
                results_dir,
                command=f"calbench leaderboard run {path.as_posix()}",
            )
        )
    return out


@dataclass(frozen=True)
class TradeoffRecipe:
    path: Path
    base: str
    adapters: tuple[str, ...]


def load_tradeoff(path: Path) -> TradeoffRecipe:
    path = Path(path)
    data = read_yaml(path)
    need(data.get("kind") == "tradeoff", path, "kind", "must be tradeoff")
    base, adapters = data.get("base"), data.get("adapters")
    need(isinstance(base, str), path, "base", "name the base model's row")
    need(isinstance(adapters, list) and bool(adapters), path, "adapters", "list the adapters' rows")
    return TradeoffRecipe(path, str(base), tuple(map(str, adapters or [])))


def rows_in(folder: Path) -> list[Path]:
    """The row recipes of a folder (its defaults and the matrix and trade-off recipes left out), by name."""
    return [p for p in sorted(Path(folder).glob("*.yaml")) if p.name != DEFAULTS and kind_of(p) == "row"]


def of_kind(folder: Path, kind: str) -> list[Path]:
    return [p for p in sorted(Path(folder).glob("*.yaml")) if p.name != DEFAULTS and kind_of(p) == kind]


def train_arguments(model: str, train: Mapping[str, Any]) -> list[str]:
    """``calbench train``'s command-line options for a recipe's training config."""
    out = ["--model", model]
    for key, value in train.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if value is True:
            out.append(flag)
        elif value is False:
            if key == "chat":
                out.append("--no-chat")  # the one option whose default is not False
        elif isinstance(value, list | tuple):
            out += [flag, *map(str, value)]
        else:
            out += [flag, str(value)]
    return out


def command_lines(recipes: Sequence[Recipe]) -> list[str]:
    return sorted({r.command for r in recipes})
