"""Leaderboard rows as recipes: one YAML per published row, and what it resolves to.

A row's recipe (``leaderboards/rows/<row>.yaml``; the row is named after the file) says what
system it is and what runs on it; ``defaults.yaml`` beside it holds what every row runs, so a
row states only what differs. ``load`` reads any recipe as its kind's object (a row, the
protocol matrix, a trade-off or a learning curve: ``KINDS``), checked field by field
(``calbench.leaderboard.recipes.fields``); ``calbench leaderboard run`` runs it
(``calbench.leaderboard.run.runner``); a row's record embeds its resolved recipe and its hash.

A row::

    type: fine-tuned adapter          # reference, base, instruct, fine-tuned adapter, prompting method
    model: smollm2-135m-instruct      # a calbench catalogue name, a hub id or a folder (none: a reference)
    backend: calbench-hf              # the lm-eval model (default: defaults.yaml's)
    model_args: {dtype: float32}      # more --model_args (pretrained and peft are filled in)
    chat_template: true               # --apply_chat_template
    adapter:                          # a LoRA adapter, trained from this config if the folder is missing
      path: leaderboards/adapters/smollm2-135m-instruct-soft
      train: {method: soft, max_steps: 60, ...}    # calbench train's options (defaults.yaml's train: under them;
                                                   # no parameters: the paper's grid, as when recipes began)

A full fine-tune (``type: fine-tuned``) is a row whose weights are not committed: ``fine_tune:``
instead of ``adapter:``, its ``train:`` with ``finetune: full``; the weights are trained (or found)
in ``<workdir>/<row>/train`` and evaluated there, and ``card:`` is the committed folder that holds
their card and training record (no weights): the record carries the weights' SHA-256 and the card
says how to rebuild them::

    fine_tune:
      card: leaderboards/fine-tunes/smollm2-135m-instruct-hard-wide-full
      train: {method: hard, finetune: full, lr: 5.0e-5, ...}
    evaluations:                      # over defaults.yaml's: change some fields, or `false` to skip one
      sampling: {samples_per_prompt: 1000}
      likelihood: false

An evaluation is one lm-eval run (``tasks``, ``samples_per_prompt``, ``metadata``, and
``chat_template`` where it differs from the row's), or ``kind: drift`` (``calbench drift``,
adapters only). The protocol matrix (``kind: protocols``: every system under every sampling
protocol), the trade-off (``kind: tradeoff``) and learning curves (``kind: curve``,
``calbench.leaderboard.recipes.curves``) are recipes of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calbench import protocols
from calbench.leaderboard import RESULTS
from calbench.leaderboard.errors import RecipeError, RefusedRunError
from calbench.leaderboard.recipes.curves import Curves
from calbench.leaderboard.recipes.curves import load as load_curve
from calbench.leaderboard.recipes.fields import (
    DEFAULTS,
    Evaluation,
    check_model_args,
    check_model_path,
    check_train_options,
    defaults_of,
    evaluations_of,
    merge,
    need,
    read_yaml,
)
from calbench.leaderboard.records.checks import ENTRY_TYPES, check_name
from calbench.policy import MAX_SAMPLES
from calbench.provenance import sha256_json
from calbench.task_names import QUICK

ROWS = Path("leaderboards") / "rows"
KINDS = ("row", "protocols", "tradeoff", "curve")
ROW_KEYS = {
    "kind",
    "type",
    "model",
    "backend",
    "model_args",
    "chat_template",
    "adapter",
    "fine_tune",
    "evaluations",
    "results_dir",
}
FINE_TUNE_KEYS = {"card", "train"}


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
    fine_tune: str | None = None  # a full fine-tune's committed card folder (its weights in the work folder)

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
            **({"fine_tune": {"card": self.fine_tune, "train": self.train}} if self.fine_tune is not None else {}),
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


def kind_of(path: Path) -> str:
    """A recipe file's kind (``KINDS``; a row unless it says ``kind:``)."""
    kind = read_yaml(path).get("kind", "row")
    if kind not in KINDS:
        raise RecipeError(f"{path}: kind: {kind!r} is not one of {', '.join(KINDS)}")
    return str(kind)


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
    if model is not None:
        check_model_path(path, "model", model)
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
        assert model is not None  # (need)
        adapter = str(spec["path"])
        check_model_path(path, "adapter.path", adapter)
        if spec.get("train") is not None:
            need(
                isinstance(spec["train"], Mapping), path, "adapter.train", "must be a mapping of calbench train options"
            )
            train = merge(train_defaults, spec["train"])
            need("model" not in train, path, "adapter.train.model", "the base model is the row's model:")
            check_train_options(path, "adapter.train", train, model)
    fine_tune = None
    if data.get("fine_tune") is not None:
        fine_tune, train = _fine_tune(path, data, model, train_defaults)
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
        fine_tune=fine_tune,
    )


def _fine_tune(
    path: Path, data: Mapping[str, Any], model: str | None, train_defaults: Mapping[str, Any]
) -> tuple[str, dict[str, Any]]:
    """A row's ``fine_tune: {card, train}`` (a full fine-tune whose weights are rebuilt, not committed), checked."""
    spec = data["fine_tune"]
    need(isinstance(spec, Mapping), path, "fine_tune", "must be a mapping with card: and train:")
    unknown = sorted(set(spec) - FINE_TUNE_KEYS)
    need(not unknown, path, "fine_tune", f"unknown field(s) {unknown}; known: {sorted(FINE_TUNE_KEYS)}")
    need(data.get("adapter") is None, path, "fine_tune", "a row is an adapter or a full fine-tune, not both")
    need(data.get("type") == "fine-tuned", path, "type", "a full fine-tune's row is of type fine-tuned")
    need(model is not None, path, "fine_tune", "a fine-tune needs its base model: set model:")
    assert model is not None  # (need)
    card = spec.get("card")
    need(isinstance(card, str) and bool(card), path, "fine_tune.card", "name the folder for its card (committed)")
    check_model_path(path, "fine_tune.card", str(card))
    raw = spec.get("train")
    need(isinstance(raw, Mapping), path, "fine_tune.train", "the calbench train options that rebuild its weights")
    train = merge(train_defaults, raw)
    need("model" not in train, path, "fine_tune.train.model", "the base model is the row's model:")
    need(train.get("finetune") == "full", path, "fine_tune.train.finetune", "must be full (a LoRA row is adapter:)")
    check_train_options(path, "fine_tune.train", train, model, allowed=("save_steps",))
    return str(card), dict(train)


def quick_task(protocol: str) -> str:
    """The quick selection's task under a sampling protocol."""
    if protocol not in protocols.PROTOCOLS:
        raise RecipeError(f"unknown protocol {protocol!r}; known: {', '.join(protocols.PROTOCOLS)}")
    return QUICK + protocols.PROTOCOLS[protocol].task_suffix


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
        need(
            row.fine_tune is None,
            path,
            "systems",
            f"{system} is a full fine-tune: the matrix takes rows whose weights are committed",
        )
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
class ProtocolMatrix:
    """The protocol matrix (``kind: protocols``): each system's row under every sampling protocol."""

    path: Path
    rows: tuple[Recipe, ...]


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


Loaded = Recipe | ProtocolMatrix | TradeoffRecipe | Curves  # what a recipe file holds, by its kind


def load(path: Path) -> Loaded:
    """A recipe file as its kind's object, checked field by field: a row (``Recipe``), the
    protocol matrix, a trade-off or a learning curve (``calbench.leaderboard.recipes.curves``)."""
    kind = kind_of(path)
    if kind == "row":
        return load_row(path)
    if kind == "protocols":
        return ProtocolMatrix(Path(path), tuple(load_protocols(path)))
    if kind == "tradeoff":
        return load_tradeoff(path)
    return load_curve(path)


def rows_in(folder: Path) -> list[Path]:
    """The row recipes of a folder (its defaults and the other kinds' recipes left out), by name."""
    return [p for p in sorted(Path(folder).glob("*.yaml")) if p.name != DEFAULTS and kind_of(p) == "row"]


def recipe_files(folder: Path) -> list[Path]:
    """Every recipe of a folder (its defaults left out), by name."""
    return [p for p in sorted(Path(folder).glob("*.yaml")) if p.name != DEFAULTS]
