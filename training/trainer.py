"""One training run, top to bottom: model and LoRA, data, Trainer, atomic save, model card.

Everything that is not ours comes from transformers' ``Trainer`` (loop, gradient
accumulation, clipping, cosine schedule with warmup, checkpoints, resume, TensorBoard,
progress bar, DDP/FSDP through ``accelerate launch`` or ``torchrun``) and peft (LoRA).
Ours: the data (``training.data``), the collators and the losses (``training.losses``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    Trainer,
    TrainerCallback,
    TrainerState,
    TrainingArguments,
)
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from calbench import model_catalogue
from calbench.backends.tree_attention import cache_kwarg, output_cache
from calbench.train_record import TRAIN_RECORD, TRAINER_STATE, logged_loss, mean_logged_loss
from calbench.training import card, run_folder
from calbench.training.config import Accumulation, ResolvedTrainConfig, TrainConfig
from calbench.training.data import TrainingSet
from calbench.training.methods import METHODS, Method
from calbench.training.retain import RetainSet, retain_kl


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite: training stops instead of writing a broken adapter."""


class BrokenAdapterError(FloatingPointError):
    """The trained adapter's weights, or the model's logits with it, are not finite: not installed."""


class RunSetupError(ValueError):
    """The run cannot be built (a model that cannot be loaded, LoRA target modules it lacks, ...)."""


class CalibrationTrainer(Trainer):
    """``Trainer`` with calbench's losses; the data order is the TrainingSet's own."""

    def __init__(
        self,
        *args: Any,
        method: Method,
        tau: float,
        retain: RetainSet | None = None,
        retain_base: Any = None,
        retain_weight: float = 0.0,
        retain_batch: int = 4,
        accumulation: Accumulation = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if accumulation == "mean":
            # compute_loss returns its micro-batch's mean and never reads num_items_in_batch; told
            # that the model takes loss kwargs (a PEFT or Llama forward has **kwargs), transformers
            # would take a batch with labels (hard targets) as scaled for accumulation already and
            # sum the micro-batches. "legacy" keeps that.
            self.model_accepts_loss_kwargs = False
        self.method = method
        self.tau = tau
        self.retain, self.retain_weight, self.retain_batch = retain, retain_weight, retain_batch
        self.retain_base = retain_base  # a full fine-tune's frozen base model (LoRA: the adapter disabled)
        self._retain_at = (-1, 0)  # (optimizer step, forwards within it): which retain batch is next
        self.tokens_seen = 0
        self.progress = RunProgress(self)  # the run's tokens and time so far, across segments
        self.add_callback(self.progress)

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
        past: dict[str, Any] = {}
        heads: list[torch.Tensor] = []  # logits computed before the rows' own (the full trie's roots)
        if "prompt_ids" in inputs:  # the full trie: each prompt once, its rows after its cache
            self.tokens_seen += int(inputs["prompt_ids"].numel())
            prompt_mask = inputs["prompt_mask"]
            prompt = model(
                input_ids=inputs["prompt_ids"],
                attention_mask=prompt_mask,
                position_ids=(prompt_mask.cumsum(-1) - 1).clamp_min(0),
                use_cache=True,
                logits_to_keep=1,
            )
            rows_of = inputs["row_example"]
            cache = [(kv[0].index_select(0, rows_of), kv[1].index_select(0, rows_of)) for kv in output_cache(prompt)]
            kwarg = cache_kwarg(self.accelerator.unwrap_model(model))
            past = {"use_cache": True, kwarg: DynamicCache(ddp_cache_data=cache)}
            heads = [prompt.logits[:, -1]]
        out = model(
            input_ids=inputs["input_ids"],
            attention_mask=mask,
            position_ids=inputs["position_ids"],
            logits_to_keep=int(inputs["logits_to_keep"]),
            **past,
        )
        loss = self.method.loss(heads, out.logits, inputs, self.tau)
        if self.retain is not None and self.retain_weight > 0:
            loss = loss + self.retain_weight * self._retain_term(model)
        if not torch.isfinite(loss.detach()):
            raise NonFiniteLossError(
                f"the training loss is {float(loss.detach())} at step {self.state.global_step + 1}: stopping (the checkpoints "
                "written so far are kept); a lower --lr or --max-grad-norm usually helps"
            )
        return (loss, out) if return_outputs else loss

    def _retain_term(self, model: Any) -> torch.Tensor:
        """KL(base ‖ tuned) on the next retain batch, chosen by the optimizer step, the forward
        within it and the process (so a resumed run, which restarts at a step, draws the same)."""
        assert self.retain is not None
        step = self.state.global_step
        forward = self._retain_at[1] if self._retain_at[0] == step else 0
        self._retain_at = (step, forward + 1)
        index = (
            step * self.args.gradient_accumulation_steps + forward
        ) * self.args.world_size + self.args.process_index
        batch = {k: v.to(self.args.device) for k, v in self.retain.batch(index, self.retain_batch).items()}
        self.tokens_seen += int(batch["input_ids"].numel())
        inner = self.accelerator.unwrap_model(model)
        return retain_kl(
            model,
            batch["input_ids"],
            batch["attention_mask"],
            batch["trained"],
            peft_model=inner,
            base=self.retain_base,
        )


class RunProgress(TrainerCallback):
    """Marks each checkpoint complete once transformers is done with it, with the run's tokens and
    wall time so far; logs the last step, so the logged losses cover every step of the run."""

    def __init__(self, trainer: CalibrationTrainer) -> None:
        self.trainer = trainer
        self.before = run_folder.progress_of(None)  # tokens and time of the run's earlier segments
        self.started = time.time()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.started = time.time()
        return control

    def so_far(self) -> dict[str, Any]:
        return {
            "tokens_seen_rank0": self.before["tokens_seen_rank0"] + self.trainer.tokens_seen,
            "wall_seconds": round(self.before["wall_seconds"] + time.time() - self.started, 1),
            "segments": self.before["segments"] + 1,
        }

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        # Log at the last step and at every checkpoint: a resumed run then logs the same
        # intervals as an uninterrupted one (transformers restarts its interval at the checkpoint).
        if state.global_step >= state.max_steps > 0 or control.should_save:
            control.should_log = True
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if args.world_size > 1:  # every process has written its part (e.g. its RNG state)
            self.trainer.accelerator.wait_for_everyone()
        if state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            missing = run_folder.missing_parts(checkpoint)
            if missing:  # never mark what cannot be resumed from
                raise RuntimeError(f"{checkpoint}: transformers did not write {', '.join(missing)}")
            run_folder.mark_complete(checkpoint, self.so_far())
        return control


def _warmup(ratio: float) -> dict[str, Any]:
    """transformers 5.2x takes a warmup ratio as a float ``warmup_steps``; older ones as ``warmup_ratio``."""
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return {"warmup_ratio": ratio} if "warmup_ratio" in names else {"warmup_steps": ratio}


def build(config: ResolvedTrainConfig) -> tuple[CalibrationTrainer, TrainingSet]:
    """The Trainer of a run (model with fresh LoRA adapters, data, collator, arguments)."""
    from peft import LoraConfig, get_peft_model

    path = model_catalogue.resolve(config.model)
    cuda = torch.cuda.is_available() and not config.use_cpu
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    chat = bool(tokenizer.chat_template) if config.chat is None else config.chat
    full = config.finetune == "full"
    # LoRA: bf16 base weights on GPU, LoRA weights and Adam states fp32 (peft keeps adapters fp32).
    # A full fine-tune trains every weight in fp32 (bf16 weights would round away small updates).
    dtype = torch.bfloat16 if cuda and not full else torch.float32
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    torch.manual_seed(config.seed)
    if not full:
        names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        unknown = [m for m in config.target_modules if m not in names]
        if unknown:  # peft would skip them silently when another one matches
            raise ValueError(f"--target-modules {' '.join(unknown)}: no such module in {config.model}")
        lora = LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=list(config.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora, autocast_adapter_dtype=True)
        name = model_catalogue.catalogue_name(config.model)
        if name is not None:  # name the base by the hub model it was quantized from, not this machine's folder
            model.peft_config["default"].base_model_name_or_path = model_catalogue.CATALOGUE[name].hub_id
    retain, frozen = None, None
    if config.retain_weight > 0:  # the base model's answers, before any step (the adapter starts at 0)
        retain = RetainSet(tokenizer, chat, config.seed)
        retain.prepare(model.to("cuda") if cuda else model)
        if full:  # no adapter to disable: the base's distributions come from a frozen copy of its weights
            frozen = copy.deepcopy(model).eval().requires_grad_(False)
    max_bins = config.max_bins
    data = TrainingSet(
        tokenizer,
        chat,
        config.samples_per_prompt,
        config.epochs,
        config.seed,
        config.prompts,
        config.parameters,
        config.widen,
        config.extra_families,
        config.decimals,
    )
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_step = config.batch_size * world
    accumulation = max(1, config.effective_batch // per_step)
    method = METHODS[config.method]
    collator = method.collator(config, data, max_bins)
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
        save_total_limit=config.keep_checkpoints or None,
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
        # A full fine-tune's checkpoints are whole models: with their tokenizer, each one is evaluated as is.
        **({"processing_class": tokenizer} if full else {}),
        method=method,
        tau=config.tau,
        retain=retain,
        retain_base=frozen,
        retain_weight=config.retain_weight,
        retain_batch=config.retain_batch,
        accumulation=config.accumulation,
    )
    return trainer, data


def run(config: TrainConfig) -> Path:
    """Train (or resume, or find finished), then write ``<output>/adapter`` atomically with its
    config, the whole run's summary and its model card.

    The first process holds the run folder's lock throughout. Nothing is written in the folder
    (its run file included) before every option, the model and the LoRA targets have been checked
    and the Trainer built: a run refused or failing to start leaves the folder as it was."""
    resolved = config.resolve().validate()  # the one resolution of the run: everything below takes it
    folder = Path(resolved.output)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    # The first process prepares the run folder; under DDP the others read its decision once
    # all have joined (building the Trainer joins the process group).
    first = int(os.environ.get("RANK", "0")) == 0
    with run_folder.locked(folder) if first else contextlib.nullcontext():
        if first:
            finished = run_folder.check(resolved, world)
        else:  # a finished run is left as it is: the first process will not join the process group
            finished = run_folder.finished_run(folder) if resolved.resume else None
        if finished is not None:
            print(
                f"calbench train: the run in {folder} finished already ({finished.get('steps')} steps): nothing to do"
            )
            return folder / run_folder.ADAPTER
        try:
            trainer, data = build(resolved)
        except (OSError, ValueError, KeyError) as err:  # a model that cannot be loaded, unknown target modules
            raise RunSetupError(f"cannot set up the run ({type(err).__name__}: {err})".replace("\n", " ")) from err
        checkpoint = None
        if first:
            checkpoint, _ = run_folder.start(resolved, world)
            print(json.dumps({"calbench train": resolved.to_dict()}, indent=2), flush=True)
        if world > 1:
            trainer.accelerator.wait_for_everyone()
            if not first:
                checkpoint = run_folder.decided(resolved)
        progress = trainer.progress
        progress.before = run_folder.progress_of(checkpoint)
        if checkpoint is not None:
            print(f"calbench train: resuming from {checkpoint}", flush=True)
        result = _train_or_finish(trainer, checkpoint)
        try:
            if trainer.is_world_process_zero():
                _install(trainer, data, resolved, result)
        finally:
            if world > 1:  # every process leaves the group together: one that exits while gloo's
                trainer.accelerator.wait_for_everyone()  # threads still run aborts ("terminate called")
                torch.distributed.destroy_process_group()
    return folder / run_folder.ADAPTER


def _train_or_finish(trainer: CalibrationTrainer, checkpoint: Path | None) -> Any:
    """``trainer.train``, resuming from ``checkpoint``; a checkpoint at the run's last step (a kill
    after it, before the adapter was written) is not trained on (transformers would take one
    more step): its weights and state are loaded, and the run ends there."""
    if checkpoint is not None:
        state = TrainerState.load_from_json(str(checkpoint / TRAINER_STATE))
        if state.max_steps > 0 and state.global_step >= state.max_steps:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            if (checkpoint / run_folder.FULL_WEIGHTS).is_file():  # a full fine-tune
                model: Any = trainer.model
                model.load_state_dict(load_file(str(checkpoint / run_folder.FULL_WEIGHTS)), strict=False)
            else:
                set_peft_model_state_dict(trainer.model, load_file(str(checkpoint / "adapter_model.safetensors")))
            trainer.state = state
            print(f"calbench train: {checkpoint} is the run's last step: nothing left to train", flush=True)
            return SimpleNamespace(global_step=state.global_step)
    return trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)


def check_adapter(model: Any, tokenizer: Any) -> None:
    """Refuse an adapter that would break every evaluation: non-finite LoRA weights, or logits that
    are not finite on a short text (weights too large, e.g. from an absurd learning rate)."""
    lora = any("lora_" in name for name, _ in model.named_parameters())
    for name, tensor in model.named_parameters():
        if ("lora_" in name or not lora) and not bool(torch.isfinite(tensor).all()):
            raise BrokenAdapterError(f"the trained adapter's {name} is not finite: not installed")
    ids = tokenizer("Sample one number from a Poisson distribution with rate 3.", return_tensors="pt")["input_ids"]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids.to(device)).logits
    model.train(was_training)
    if not bool(torch.isfinite(logits).all()):
        raise BrokenAdapterError(
            "with the trained adapter the model's logits are not finite (its weights are too large): not installed; "
            "a lower --lr usually helps"
        )


def _install(trainer: CalibrationTrainer, data: TrainingSet, resolved: ResolvedTrainConfig, result: Any) -> None:
    """Write the trained adapter, its tokenizer, the run's summary and card, and install it."""
    folder = Path(resolved.output)
    progress = trainer.progress
    tmp = folder / run_folder.PARTIAL
    if tmp.is_symlink():  # never write the adapter through a planted link
        tmp.unlink()
    shutil.rmtree(tmp, ignore_errors=True)
    model: Any = trainer.model
    check_adapter(model, data.tokenizer)
    model.save_pretrained(tmp)
    data.tokenizer.save_pretrained(tmp)
    so_far = progress.so_far()
    summary = {
        "config": resolved.to_dict(),
        "base_model": model_catalogue.base_model(resolved.model),
        "steps": int(result.global_step),
        "world_size": trainer.args.world_size,
        "examples": min(
            len(data),
            int(result.global_step)
            * trainer.args.per_device_train_batch_size
            * trainer.args.gradient_accumulation_steps
            * trainer.args.world_size,
        ),
        "tokens_seen_rank0": so_far["tokens_seen_rank0"],
        "mean_train_loss": mean_logged_loss(trainer.state.log_history),
        "last_train_loss": logged_loss(trainer.state.log_history, int(result.global_step)),
        "loss_history": [h for h in trainer.state.log_history if "loss" in h],
        "wall_seconds": so_far["wall_seconds"],
        "segments": so_far["segments"],
        "versions": card.versions(),
        "distribution": data.distribution,
    }
    (tmp / TRAIN_RECORD).write_text(json.dumps(summary, indent=2))
    (tmp / "README.md").write_text(card.render(resolved, summary))
    final = run_folder.install_adapter(folder, tmp)
    run_folder.finish(folder, summary)
    print(f"adapter: {final}", flush=True)
