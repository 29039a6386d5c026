"""The model card (README.md) and provenance written beside every adapter."""

from __future__ import annotations

import importlib.metadata
import json
import platform
from pathlib import Path
from typing import Any

from calbench.training.config import TrainConfig

PACKAGES = ("calbench", "torch", "transformers", "peft", "accelerate", "lm-eval", "numpy", "scipy")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def render(config: TrainConfig, summary: dict[str, Any], evaluation: str | None = None) -> str:
    """Markdown model card: base model, method, data, optimisation, steps, evaluation."""
    method = (
        "soft targets: KL from the trie's next-token targets q(·|prefix) to the model, "
        + ("along one sampled answer per example" if config.soft_paths == "sample" else "over every trie node (exact)")
        if config.method == "soft"
        else "hard targets: cross-entropy on sampled answers and their terminator"
    )
    from calbench import models

    entry = models.CATALOGUE.get(config.model)
    if entry is not None:  # a catalogue model: name the hub model, say which weights were trained
        hub, base = entry.hub_id, f"$(calbench models path {config.model})"
        about = (
            f"calbench's `{config.model}` model ({entry.description}, dequantized to fp32; its folder:"
            f" `calbench models path {config.model}`), a quantized copy of `{hub}`,"
        )
    else:
        hub = base = summary["base_model"]
        about = f"`{hub}`"
    lines = [
        "---",
        "library_name: peft",
        f"base_model: {hub}",
        "tags: [calbench, lora, calibration]",
        "---",
        "",
        f"# calbench {config.method}-target LoRA adapter",
        "",
        f"A LoRA adapter that trains {about} to sample numbers from the distribution a prompt",
        "asks for, made with calbench's training add-on.",
        "",
        f"- **Method**: {method}.",
        "- **Data**: the 1,988 training prompts of 24 distribution families"
        + (f" (first {config.prompts}, family-balanced)" if config.prompts else "")
        + f"; canonical answers with {config.decimals} decimals, {config.max_bins} strings per space;"
        f" {config.samples_per_prompt} example(s) per prompt per epoch, "
        + (
            f"stopped at {config.max_steps} optimizer steps (a compute budget)"
            if config.max_steps > 0
            else f"{config.epochs} epoch(s)"
        )
        + f", seed {config.seed}.",
        f"- **LoRA**: r={config.lora_r}, alpha={config.lora_alpha}, dropout={config.lora_dropout}"
        f" on {', '.join(config.target_modules)}.",
        f"- **Optimisation**: AdamW lr {config.lr}, weight decay {config.weight_decay}, cosine schedule with"
        f" {config.warmup_ratio:.0%} warmup, gradient clipping {config.max_grad_norm},"
        f" effective batch {config.effective_batch}.",
        f"- **Run**: {summary['steps']} optimizer steps, {summary['examples']} examples,"
        f" final training loss {summary['final_train_loss']:.4f}, {summary['wall_seconds']} s.",
        f"- **Versions**: {', '.join(f'{k} {v}' for k, v in summary['versions'].items())}.",
        "",
        "## Use",
        "",
        "```bash",
        f"lm_eval --model hf --model_args pretrained={base},peft=<this folder> \\",
        "  --include_path $(calbench tasks-path) --tasks calbench_numeric_unseen --apply_chat_template",
        "```",
        "",
        "## Evaluation",
        "",
        evaluation
        or "Not evaluated yet: `calbench eval --model calbench-hf --model_args pretrained=BASE,peft=ADAPTER ...`.",
        "",
        "The resolved training configuration and the loss history are in `calbench_train.json`.",
        "",
    ]
    return "\n".join(lines)


def update(adapter: Path, evaluation: str) -> Path:
    """Re-render an adapter folder's model card with an evaluation section (atomic write)."""
    import dataclasses

    summary = json.loads((adapter / "calbench_train.json").read_text())
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in summary["config"].items() if k in fields}
    card = adapter / "README.md"
    tmp = card.with_name("README.md.tmp")
    tmp.write_text(render(TrainConfig(**values), summary, evaluation))
    tmp.replace(card)
    return card
