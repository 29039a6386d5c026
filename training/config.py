"""The training run's configuration: one frozen dataclass, exposed as CLI flags.

Defaults are the paper's final settings. Method-dependent defaults (``None`` below) are
resolved by ``resolve``: soft targets use 1001 strings, 1 sampled path per prompt per
epoch and 3 epochs; hard targets use 16384 strings, 16 samples per prompt per epoch and
2 epochs. The resolved config is printed and written beside the adapter.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

Method = Literal["soft", "hard"]


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
    trie_row_nodes: int = _flag(
        "soft-paths all: trie nodes per packed row (a row is the prompt plus a sub-trie; smaller rows make "
        "tree attention cheaper and repeat the prompt more often)",
        default=256,
    )
    decimals: int = _flag("decimals of the canonical answers", default=5)
    max_bins: int | None = _flag("strings per canonical space (default: 1001 soft, 16384 hard)", default=None)
    epochs: int | None = _flag("passes over the training prompts (default: 3 soft, 2 hard)", default=None)
    samples_per_prompt: int | None = _flag("examples per prompt per epoch (default: 1 soft, 16 hard)", default=None)
    max_steps: int = _flag(
        "optimizer steps; overrides epochs. Give both methods the same value (and batch) to compare them "
        "at equal compute",
        default=-1,
    )
    prompts: int | None = _flag("use only the first N training prompts, family-balanced (smoke runs)", default=None)
    batch_size: int = _flag("examples per device per forward", default=8)
    effective_batch: int = _flag("examples per optimizer step, over devices and accumulation", default=32)
    lr: float = _flag("AdamW learning rate", default=2e-4)
    weight_decay: float = _flag("AdamW weight decay", default=0.01)
    warmup_ratio: float = _flag("share of steps spent warming up the cosine schedule", default=0.03)
    max_grad_norm: float = _flag("gradient clipping (the paper clipped nothing)", default=1.0)
    tau: float = _flag("soft targets: temperature of the model's softmax", default=1.0)
    lora_r: int = _flag("LoRA rank", default=16)
    lora_alpha: int = _flag("LoRA alpha", default=32)
    lora_dropout: float = _flag("LoRA dropout", default=0.05)
    target_modules: tuple[str, ...] = _flag(
        "modules that get LoRA adapters", default=("q_proj", "k_proj", "v_proj", "o_proj")
    )
    seed: int = _flag("seed of the data order, the sampled answers and the LoRA init", default=11)
    save_steps: int = _flag("checkpoint every N optimizer steps", default=50)
    logging_steps: int = _flag("log the loss every N optimizer steps", default=5)
    resume: bool = _flag("continue from the newest checkpoint in the run folder", default=False)
    use_cpu: bool = _flag("train on the CPU even if a GPU is present (fp32)", default=False)
    chat: bool | None = _flag("wrap prompts in the chat template (default: when the tokenizer has one)", default=None)

    def resolve(self) -> TrainConfig:
        """Fill the method-dependent defaults."""
        soft = self.method == "soft"
        return dataclasses.replace(
            self,
            max_bins=self.max_bins or (1001 if soft else 16384),
            epochs=self.epochs or (3 if soft else 2),
            samples_per_prompt=self.samples_per_prompt or (1 if soft else 16),
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata["help"]
        if f.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", help=help_text)
        elif f.name == "target_modules":
            parser.add_argument(flag, nargs="+", default=list(TrainConfig.target_modules), help=help_text)
        elif f.name in ("method", "soft_paths"):
            choices = ["soft", "hard"] if f.name == "method" else ["sample", "all"]
            parser.add_argument(flag, choices=choices, default=f.default, help=help_text)
        elif f.name == "chat":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        else:
            kind = {"int": int, "float": float, "str": str, "int | None": int}.get(str(f.type), str)
            parser.add_argument(flag, type=kind, default=f.default, help=help_text)


def from_args(args: argparse.Namespace) -> TrainConfig:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)}
    values["target_modules"] = tuple(values["target_modules"])
    config = TrainConfig(**values)
    for name in (
        "decimals",
        "batch_size",
        "effective_batch",
        "lora_r",
        "save_steps",
        "logging_steps",
        "trie_row_nodes",
    ):
        if getattr(config, name) < (0 if name == "decimals" else 1):
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(config, name)}")
    if config.effective_batch % config.batch_size:
        raise ValueError(
            f"--effective-batch {config.effective_batch} is not a multiple of --batch-size {config.batch_size}"
        )
    return config
