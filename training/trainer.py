"""One training run, top to bottom: model and LoRA, data, Trainer, atomic save, model card.

Everything that is not ours comes from transformers' ``Trainer`` (loop, gradient
accumulation, clipping, cosine schedule with warmup, checkpoints, resume, TensorBoard,
progress bar, DDP/FSDP through ``accelerate launch`` or ``torchrun``) and peft (LoRA).
Ours: the data (``training.data``), the collators and the losses (``training.losses``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

from calbench import model_catalogue
from calbench.training import card
from calbench.training.config import TrainConfig
from calbench.training.data import FullTrieCollator, HardCollator, SoftPathCollator, TrainingSet
from calbench.training.losses import hard_ce, soft_kl

ADAPTER = "adapter"  # <output>/adapter holds the final adapter, written atomically


class CalibrationTrainer(Trainer):
    """``Trainer`` with calbench's losses; the data order is the TrainingSet's own."""

    def __init__(self, *args: Any, method: str, tau: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.method = method
        self.tau = tau
        self.tokens_seen = 0

    def _get_train_sampler(self, *args: Any, **kwargs: Any) -> torch.utils.data.Sampler:
        # Family-balanced and seeded already: keep it (accelerate still shards it under DDP).
        return torch.utils.data.SequentialSampler(self.train_dataset)  # type: ignore[arg-type]

    def compute_loss(  # type: ignore[override]
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, **kwargs: Any
    ) -> Any:
        mask = inputs["attention_mask"]
        if mask.dim() == 4:  # the packed trie's tree mask, additive in the model's dtype
            dtype = next(model.parameters()).dtype
            mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)
        self.tokens_seen += int(inputs["input_ids"].numel())
        out = model(
            input_ids=inputs["input_ids"],
            attention_mask=mask,
            position_ids=inputs["position_ids"],
            logits_to_keep=int(inputs["logits_to_keep"]),
        )
        if self.method == "hard":
            loss = hard_ce(out.logits, inputs["labels"])
        else:
            rows = out.logits.reshape(-1, out.logits.shape[-1]).index_select(0, inputs["row_index"])
            loss = soft_kl(rows, inputs["child_ids"], inputs["child_q"], inputs["row_weights"], tau=self.tau)
        return (loss, out) if return_outputs else loss


def _warmup(ratio: float) -> dict[str, Any]:
    """transformers 5.2x takes a warmup ratio as a float ``warmup_steps``; older ones as ``warmup_ratio``."""
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return {"warmup_ratio": ratio} if "warmup_ratio" in names else {"warmup_steps": ratio}


def build(config: TrainConfig) -> tuple[CalibrationTrainer, TrainingSet]:
    """The Trainer of a run (model with fresh LoRA adapters, data, collator, arguments)."""
    from peft import LoraConfig, get_peft_model

    config = config.resolve()
    path = model_catalogue.resolve(config.model)
    cuda = torch.cuda.is_available() and not config.use_cpu
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    chat = bool(tokenizer.chat_template) if config.chat is None else config.chat
    # bf16 base weights on GPU; LoRA weights and Adam states stay fp32 (peft keeps adapters fp32).
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if cuda else torch.float32)
    torch.manual_seed(config.seed)
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lora, autocast_adapter_dtype=True)
    data = TrainingSet(tokenizer, chat, config.samples_per_prompt, config.epochs, config.seed, config.prompts)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_step = config.batch_size * world
    accumulation = max(1, config.effective_batch // per_step)
    collator: Any
    if config.method == "hard":
        collator = HardCollator(data, config.decimals, config.max_bins)
    elif config.soft_paths == "all":
        collator = FullTrieCollator(data, config.decimals, config.max_bins, config.trie_row_nodes)
    else:
        collator = SoftPathCollator(data, config.decimals, config.max_bins)
    args = TrainingArguments(
        output_dir=config.output,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=accumulation,
        num_train_epochs=1,  # the TrainingSet already lists every epoch's examples
        max_steps=config.max_steps,
        learning_rate=config.lr,
        weight_decay=config.weight_decay,
        lr_scheduler_type="cosine",
        **_warmup(config.warmup_ratio),
        max_grad_norm=config.max_grad_norm,
        optim="adamw_torch",
        logging_steps=config.logging_steps,
        report_to=["tensorboard"],  # logs in <output>/runs
        save_steps=config.save_steps,
        save_total_limit=3,
        seed=config.seed,
        data_seed=config.seed,
        use_cpu=not cuda,
        ddp_backend="gloo" if world > 1 and not cuda else None,  # CPU DDP (torchrun) needs gloo
        remove_unused_columns=False,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )
    trainer = CalibrationTrainer(
        model=model,
        args=args,
        train_dataset=data,
        data_collator=collator,
        method=config.method,
        tau=config.tau,
    )
    return trainer, data


def run(config: TrainConfig) -> Path:
    """Train, then write ``<output>/adapter`` atomically with its config and model card."""
    resolved = config.resolve()
    print(json.dumps({"calbench train": resolved.to_dict()}, indent=2), flush=True)
    trainer, data = build(resolved)
    started = time.time()
    result = trainer.train(resume_from_checkpoint=True if resolved.resume else None)
    if not trainer.is_world_process_zero():
        return Path(resolved.output) / ADAPTER
    final = Path(resolved.output) / ADAPTER
    tmp = Path(resolved.output) / f".{ADAPTER}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    model: Any = trainer.model
    model.save_pretrained(tmp)
    data.tokenizer.save_pretrained(tmp)
    summary = {
        "config": resolved.to_dict(),
        "base_model": model_catalogue.resolve(resolved.model),
        "steps": int(result.global_step),
        "world_size": trainer.args.world_size,
        "examples": min(
            len(data),
            int(result.global_step)
            * trainer.args.per_device_train_batch_size
            * trainer.args.gradient_accumulation_steps
            * trainer.args.world_size,
        ),
        "tokens_seen_rank0": trainer.tokens_seen,
        "final_train_loss": float(result.training_loss),
        "loss_history": [h for h in trainer.state.log_history if "loss" in h],
        "wall_seconds": round(time.time() - started, 1),
        "versions": card.versions(),
    }
    (tmp / "calbench_train.json").write_text(json.dumps(summary, indent=2))
    (tmp / "README.md").write_text(card.render(resolved, summary))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    print(f"adapter: {final}", flush=True)
    return final
