"""The training run's configuration: one frozen dataclass, exposed as CLI flags.

Defaults are the paper's final settings but for the training prompts: fresh parameters in
ranges widened 2x, which beat the paper's grid on the unseen split and the held-out families at
equal compute for both target kinds (``leaderboards/generalization.md``; ``--parameters grid``
is the paper's). Method-dependent defaults (``None`` below) are resolved by ``resolve``, once
per run: soft targets use 1001 strings, 1 sampled path per prompt per epoch and 3 epochs; hard
targets use 16384 strings, 16 samples per prompt per epoch and 2 epochs; ``widen`` is 2 for
fresh parameters, 1 for the grid. ``resolve`` returns a ``ResolvedTrainConfig``, whose sizes
are numbers: what the trainer, the run folder and the model card take. The resolved config is printed and written
beside the adapter.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from calbench.extra_families import training_order
from calbench.param_ranges import widen_problem
from calbench.space import EVAL_MAX_BINS, HARD_MAX_BINS

Method = Literal["soft", "hard"]  # a row of calbench.training.methods.METHODS
Parameters = Literal["grid", "fresh"]
Finetune = Literal["lora", "full"]
Accumulation = Literal["mean", "legacy"]
MAX_DECIMALS = 12
EXTRA_AVAILABLE = len(training_order())  # --extra-families' largest value
BATCH_SIZE = 8  # examples per forward unless given (a divisor of the effective batch: default_batch_size)


@dataclass(frozen=True)
class MethodDefaults:
    """What a training method fills in where an option is not given (``TrainConfig.resolve``)."""

    max_bins: int
    epochs: int
    samples_per_prompt: int


# Each training method's defaults, the paper's: its collator, loss and card text are its row of
# calbench.training.methods.METHODS (same names; that module needs torch, this one does not).
METHOD_DEFAULTS: dict[str, MethodDefaults] = {
    "soft": MethodDefaults(max_bins=EVAL_MAX_BINS, epochs=3, samples_per_prompt=1),
    "hard": MethodDefaults(max_bins=HARD_MAX_BINS, epochs=2, samples_per_prompt=16),
}


def _flag(help: str, **kw: Any) -> Any:
    return field(metadata={"help": help}, **kw)


@dataclass(frozen=True)
class TrainConfig:
    method: Method = _flag(
        "soft: trie-KL to the target's next-token distribution; hard: cross-entropy on sampled answers", default="soft"
    )
    model: str = _flag(
        "base model: a Hugging Face id, a local folder, or a calbench catalogue name", default="smollm2-135m-instruct"
    )
    output: str = _flag(
        "run folder: checkpoints, TensorBoard logs, and the final adapter in <output>/adapter",
        default="calbench_runs/run",
    )
    soft_paths: Literal["sample", "all"] = _flag(
        "soft only: 'sample' trains along one sampled path per example (the paper); 'all' trains on every "
        "trie node weighted by its share of the path loss, packed in sub-trie rows (exact, no sampling variance)",
        default="sample",
    )
    parameters: Parameters = _flag(
        "training prompts: 'fresh' draws every example's parameters afresh from its family's training range "
        "(calbench.param_ranges: log-uniform for scale-like parameters, uniform for locations), the same "
        "families and number of examples, never within 2%% of a range of an evaluation prompt; 'grid' is the "
        "paper's 1,988 fixed grid prompts",
        default="fresh",
    )
    widen: float | None = _flag(
        "fresh parameters only: widen every training range by this factor about its centre, in the parameter's "
        "scale (1: the paper's ranges; 2 covers the unseen split's region; default: 2 for fresh parameters)",
        default=None,
    )
    extra_families: int = _flag(
        "fresh parameters only: also train on the first K of calbench.extra_families' training-only families "
        "(laws that none of the 30 families is, each draw at least 0.5 W1/IQR from every held-out prompt; "
        "the validation families are never among them). An epoch keeps the grid's 1,988 examples, each extra "
        "family weighted as an average training family (calbench_train.json records the families and weights)",
        default=0,
    )
    trie_row_nodes: int = _flag(
        "soft-paths all: trie nodes per packed row (a sub-trie after its prompt, computed once; smaller rows "
        "make tree attention cheaper and repeat more shared ancestors)",
        default=256,
    )
    decimals: int = _flag("decimals of the canonical answers", default=5)
    max_bins: int | None = _flag(
        f"strings per canonical space (default: {EVAL_MAX_BINS} soft, {HARD_MAX_BINS} hard)", default=None
    )
    epochs: int | None = _flag("passes over the training prompts (default: 3 soft, 2 hard)", default=None)
    samples_per_prompt: int | None = _flag("examples per prompt per epoch (default: 1 soft, 16 hard)", default=None)
    max_steps: int = _flag(
        "optimizer steps; overrides epochs. Give both methods the same value (and batch) to compare them "
        "at equal compute",
        default=-1,
    )
    prompts: int | None = _flag("use only the first N training prompts, family-balanced (smoke runs)", default=None)
    batch_size: int | None = _flag(
        f"examples per device per forward (default: {BATCH_SIZE}, or the largest number below it that divides "
        "--effective-batch)",
        default=None,
    )
    effective_batch: int = _flag("examples per optimizer step, over devices and accumulation", default=32)
    lr: float = _flag("AdamW learning rate", default=2e-4)
    weight_decay: float = _flag("AdamW weight decay", default=0.01)
    warmup_ratio: float = _flag("share of steps spent warming up the cosine schedule", default=0.03)
    max_grad_norm: float = _flag("gradient clipping (the paper clipped nothing)", default=1.0)
    accumulation: Accumulation = _flag(
        "mean: an optimizer step's loss and gradient are the mean over its micro-batches, whatever --batch-size "
        "(the default); legacy: as calbench trained before this option, when transformers took the hard loss "
        "as already scaled for gradient accumulation, so a hard-target step summed its micro-batches: its loss, "
        "gradient and logged loss and gradient norm are --effective-batch / --batch-size times the mean's (AdamW's "
        "steps barely change; --max-grad-norm clips at a smaller true norm); soft targets are the same either way",
        default="mean",
    )
    tau: float = _flag("soft targets: temperature of the model's softmax", default=1.0)
    retain_weight: float = _flag(
        "retention-aware training: weight of a KL(base || tuned) term on generic text with the base model's own "
        "answers (training/retain.py); 0 turns it off",
        default=0.0,
    )
    retain_batch: int = _flag("retain texts per forward when --retain-weight is on", default=4)
    finetune: Finetune = _flag(
        "lora: train LoRA adapters (the paper); full: train every weight of the model (its output is a whole "
        "model folder, evaluated as pretrained=<output>/adapter; a lower --lr suits it, e.g. 2e-5)",
        default="lora",
    )
    lora_r: int = _flag("LoRA rank", default=16)
    lora_alpha: int = _flag("LoRA alpha", default=32)
    lora_dropout: float = _flag("LoRA dropout", default=0.05)
    target_modules: tuple[str, ...] = _flag(
        "modules that get LoRA adapters", default=("q_proj", "k_proj", "v_proj", "o_proj")
    )
    seed: int = _flag("seed of the data order, the sampled answers and the LoRA init", default=11)
    save_steps: int = _flag("checkpoint every N optimizer steps", default=50)
    keep_checkpoints: int = _flag(
        "complete checkpoints kept in the run folder (the newest); 0 keeps every one (for a learning curve)",
        default=3,
    )
    logging_steps: int = _flag("log the loss every N optimizer steps", default=5)
    resume: bool = _flag(
        "continue the run in the output folder from its newest complete checkpoint (the options must be the "
        "run's own; a finished run is left as it is)",
        default=False,
    )
    overwrite: bool = _flag(
        "start a new run in an output folder that holds another one: its checkpoints and logs are deleted, "
        "its adapter is replaced when the new one is written",
        default=False,
    )
    use_cpu: bool = _flag("train on the CPU even if a GPU is present (fp32)", default=False)
    chat: bool | None = _flag("wrap prompts in the chat template (default: when the tokenizer has one)", default=None)

    def resolve(self) -> ResolvedTrainConfig:
        """The config with the method's defaults filled in (only where an option was not given)."""
        # an unknown method (refused by validate) resolves with the hard defaults, as it always has
        method = METHOD_DEFAULTS.get(self.method, METHOD_DEFAULTS["hard"])
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return ResolvedTrainConfig(
            **{
                **given,
                **{
                    name: getattr(method, name) if given[name] is None else given[name]
                    for name in ("max_bins", "epochs", "samples_per_prompt")
                },
                "widen": (2.0 if self.parameters == "fresh" else 1.0) if self.widen is None else float(self.widen),
                "batch_size": default_batch_size(self.effective_batch) if self.batch_size is None else self.batch_size,
            }
        )

    def issues(self) -> list[tuple[str, str]]:
        """(option, what is wrong with it) for every option of another type than its field's (a
        recipe's ``true`` where a number belongs; then nothing else is checked), else for every
        option whose value would fail or silently waste a run; [] if none."""
        typed = [(name, f"{getattr(self, name)!r}: must be {want}") for name, want in _type_problems(self)]
        if typed:
            return typed
        out: list[tuple[str, str]] = []

        def need(ok: bool, name: str, why: str) -> None:
            if not ok:
                out.append((name, f"{getattr(self, name)!r}: {why}"))

        def finite(x: float) -> bool:
            return isinstance(x, int | float) and math.isfinite(x)

        need(self.method in METHOD_DEFAULTS, "method", f"must be {' or '.join(METHOD_DEFAULTS)}")
        need(self.soft_paths in ("sample", "all"), "soft_paths", "must be sample or all")
        need(self.parameters in ("grid", "fresh"), "parameters", "must be grid or fresh")
        need(self.finetune in ("lora", "full"), "finetune", "must be lora or full")
        need(self.accumulation in ("mean", "legacy"), "accumulation", "must be mean or legacy")
        need(self.widen is None or (finite(self.widen) and self.widen >= 1), "widen", "must be a number >= 1")
        need(
            self.widen in (None, 1) or self.parameters == "fresh",
            "widen",
            "widens fresh parameters' ranges: add --parameters fresh",
        )
        need(
            self.extra_families == 0 or self.parameters == "fresh",
            "extra_families",
            "extra families are drawn afresh for every example: add --parameters fresh",
        )
        need(
            isinstance(self.extra_families, int) and 0 <= self.extra_families <= EXTRA_AVAILABLE,
            "extra_families",
            f"must lie in 0..{EXTRA_AVAILABLE} (the training-only families; the validation ones are held back)",
        )
        widen = 2.0 if self.widen is None else self.widen  # resolve's default for fresh parameters
        if self.parameters == "fresh" and finite(widen) and widen >= 1 and 0 <= self.decimals <= MAX_DECIMALS:
            why = widen_problem(float(widen), self.decimals)  # every draw must build its canonical space
            if why is not None:
                out.append(("widen", f"{widen:g}: {why}"))
        need(self.batch_size is None or self.batch_size >= 1, "batch_size", "must be a positive integer")
        for name in (
            "effective_batch",
            "lora_r",
            "save_steps",
            "logging_steps",
            "trie_row_nodes",
            "retain_batch",
        ):
            need(getattr(self, name) >= 1, name, "must be a positive integer")
        need(
            0 <= self.decimals <= MAX_DECIMALS,
            "decimals",
            f"must lie in 0..{MAX_DECIMALS} (a float carries ~15 digits)",
        )
        need(0 <= self.seed < 2**32, "seed", "must lie in 0..2**32-1")
        need(self.keep_checkpoints >= 0, "keep_checkpoints", "must be 0 (keep every one) or more")
        for name in ("max_bins", "epochs", "samples_per_prompt", "prompts"):
            value = getattr(self, name)
            need(value is None or value >= 1, name, "must be a positive integer (leave it out for the default)")
        need(self.max_bins is None or self.max_bins >= 2, "max_bins", "a space needs at least 2 strings")
        need(self.max_steps == -1 or self.max_steps >= 1, "max_steps", "must be positive (or -1: run the epochs)")
        need(finite(self.lr) and self.lr > 0, "lr", "must be a positive number")
        need(finite(self.weight_decay) and self.weight_decay >= 0, "weight_decay", "must be 0 or more")
        need(finite(self.max_grad_norm) and self.max_grad_norm >= 0, "max_grad_norm", "must be 0 (off) or more")
        need(finite(self.warmup_ratio) and 0 <= self.warmup_ratio < 1, "warmup_ratio", "must lie in [0, 1)")
        need(finite(self.tau) and self.tau > 0, "tau", "must be a positive temperature")
        need(finite(self.retain_weight) and self.retain_weight >= 0, "retain_weight", "must be 0 (off) or more")
        need(finite(self.lora_alpha) and self.lora_alpha > 0, "lora_alpha", "must be positive")
        need(finite(self.lora_dropout) and 0 <= self.lora_dropout < 1, "lora_dropout", "must lie in [0, 1)")
        need(bool(self.target_modules), "target_modules", "name at least one module")
        need(not (self.resume and self.overwrite), "overwrite", "cannot be combined with --resume")
        need(bool(self.output) and not Path(self.output).is_file(), "output", "must be a folder, not a file")
        path_like = self.model.startswith(("/", "./", "../", "~")) or self.model.count("/") > 1
        need(not path_like or Path(self.model).expanduser().is_dir(), "model", "no such model folder")
        batch = self.batch_size  # left out: a divisor of the effective batch (default_batch_size)
        if self.effective_batch >= 1 and batch is not None and batch >= 1 and self.effective_batch % batch:
            out.append(("effective_batch", f"{self.effective_batch} is not a multiple of --batch-size {batch}"))
        return out

    def problems(self) -> list[str]:
        """Every option that would fail or silently waste a run, as ``--option value: why``; [] if none."""
        return [f"--{name.replace('_', '-')} {why}" for name, why in self.issues()]

    def validate(self) -> Self:
        """The config itself, or a ``ValueError`` naming every bad option."""
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class ResolvedTrainConfig(TrainConfig):
    """A ``TrainConfig`` with its method's defaults filled in (``TrainConfig.resolve``): the sizes
    are numbers, not "the method's default". What a run trains with, and what its run file, its
    summary and its adapter's card record."""

    max_bins: int = field(kw_only=True)
    epochs: int = field(kw_only=True)
    samples_per_prompt: int = field(kw_only=True)
    widen: float = field(kw_only=True)
    batch_size: int = field(kw_only=True)

    def resolve(self) -> ResolvedTrainConfig:
        return self


def default_batch_size(effective_batch: int) -> int:
    """The examples per forward of a run that gives none: ``BATCH_SIZE``, or the largest number
    below it that divides the effective batch (a step is whole micro-batches; an effective batch
    of 32, 16 or 8 keeps 8, as before the default adapted; 2 takes 2 where 8 was refused)."""
    if not (isinstance(effective_batch, int) and effective_batch >= 1):
        return BATCH_SIZE  # refused by issues()
    return max(d for d in range(1, BATCH_SIZE + 1) if effective_batch % d == 0)


def _type_problems(config: TrainConfig) -> list[tuple[str, str]]:
    """(option, the type it must have) for each option whose value is not of its field's type."""
    hints = typing.get_type_hints(TrainConfig)
    return [
        (f.name, want) for f in dataclasses.fields(config) if (want := _want(getattr(config, f.name), hints[f.name]))
    ]


# What a value of each plain type must be: bool is an int to Python, not to a recipe (`effective_batch:
# true`); a whole number is a number where a float is wanted.
TYPES: dict[Any, tuple[str, Any]] = {
    bool: ("true or false", lambda v: isinstance(v, bool)),
    int: ("a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: ("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    str: ("a string", lambda v: isinstance(v, str)),
}


def _want(value: Any, hint: Any) -> str | None:
    """What ``value`` must be to have the type ``hint`` (None: it has it). A Literal's choices are
    its value's check (``issues``), a string here."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None: the method's default
        inner = next(a for a in args if a is not type(None))
        want = None if value is None else _want(value, inner)
        return None if want is None else f"{want} (or left out for the default)"
    if typing.get_origin(hint) is typing.Literal:
        hint = str
    if typing.get_origin(hint) is tuple:
        ok = isinstance(value, tuple | list) and all(isinstance(v, str) and v and not v.startswith("-") for v in value)
        return None if ok else "a list of module names"
    what, check = TYPES[hint]
    return None if check(value) else what


def typed(options: Mapping[str, Any]) -> TrainConfig:
    """The config of a mapping of options (a recipe's ``train:``, a run's recorded config), each
    value of its option's type (a list where a tuple belongs is taken as one): a ``ValueError``
    naming every unknown option and every value of another type (``effective_batch: true``,
    ``widen: "two"``), as ``option value: must be ...``. Its values are not checked (``issues``)."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(str(k) for k in options if k not in names)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} (see calbench train --help)")
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    config = TrainConfig(**values)
    wrong = _type_problems(config)
    if wrong:
        raise ValueError("; ".join(f"{name} {getattr(config, name)!r}: must be {want}" for name, want in wrong))
    return config


def from_options(options: Mapping[str, Any]) -> TrainConfig:
    """``typed(options)``, validated by the config itself: a ``ValueError`` naming every bad
    option (``issues``) as ``option value: why``."""
    config = typed(options)
    issues = config.issues()
    if issues:
        raise ValueError("; ".join(f"{name} {why}" for name, why in issues))
    return config


def recipe_arguments(model: str, options: Mapping[str, Any]) -> list[str]:
    """``calbench train``'s command line for a recipe's options on ``model``, in the recipe's order,
    once the config has typed and validated them (``from_options``: a ``ValueError`` otherwise).
    The core reaches it through this add-on's ``calbench.training`` entry point (it never imports
    the add-on); ``add_arguments`` parses it back to the same config (``tests/test_training.py``)."""
    from_options({**options, "model": model})
    out = ["--model", model]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):  # a switch; chat's default is not False, so it can be switched off
            out += [flag] if value else ["--no-chat"] if key == "chat" else []
        elif isinstance(value, list | tuple):
            out += [flag, *map(str, value)]
        else:
            out += [flag, str(value)]
    return out


CHOICES = {
    "method": list(METHOD_DEFAULTS),
    "soft_paths": ["sample", "all"],
    "parameters": ["grid", "fresh"],
    "finetune": ["lora", "full"],
    "accumulation": ["mean", "legacy"],
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata["help"]
        if f.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", help=help_text)
        elif f.name == "target_modules":
            parser.add_argument(flag, nargs="+", default=list(TrainConfig.target_modules), help=help_text)
        elif f.name in CHOICES:
            choices = CHOICES[f.name]
            parser.add_argument(flag, choices=choices, default=f.default, help=help_text)
        elif f.name == "chat":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            kind = {"int": int, "float": float, "str": str, "int | None": int, "float | None": float}.get(
                str(f.type), str
            )
            parser.add_argument(flag, type=kind, default=f.default, help=help_text)


def from_args(args: argparse.Namespace) -> TrainConfig:
    """The config of parsed CLI flags, validated (``ValueError`` naming every bad option)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)}
    values["target_modules"] = tuple(values["target_modules"])
    return TrainConfig(**values).validate()
