"""``--model vllm`` mistakes are one line before any engine starts (calbench.vllm_support), in any
environment: vLLM's presence, its metadata and its build are simulated here; tests/test_vllm.py
runs the real engine."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import re

import pytest

from calbench import vllm_support
from calbench.cli import main

_FIND_SPEC = importlib.util.find_spec  # the real one, before any test replaces it


@pytest.fixture
def fake_vllm(monkeypatch):
    """vLLM 'installed': find_spec finds it; ``versions`` says which distributions have metadata."""
    versions: dict[str, str] = {}

    def find_spec(name, *args, **kwargs):
        if name == "vllm":
            return importlib.machinery.ModuleSpec("vllm", None)
        return _FIND_SPEC(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(vllm_support, "_version", lambda name: versions.get(name))
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    return versions


def _adapter(folder, r, rank_pattern=None):
    folder.mkdir()
    (folder / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "r": r, "rank_pattern": rank_pattern or {}})
    )
    return folder


def test_a_missing_vllm_is_named(monkeypatch):
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a, **k: None if name == "vllm" else _FIND_SPEC(name, *a, **k)
    )
    with pytest.raises(vllm_support.VLLMSetupError, match=r"vLLM is not installed here .*\.ci/vllm-cpu-env"):
        vllm_support.check_vllm_args({"pretrained": "m"})


def test_the_cpu_build_without_vllm_metadata_is_named(fake_vllm):
    fake_vllm["vllm-cpu"] = "0.32.0"
    with pytest.raises(vllm_support.VLLMSetupError, match=r"vllm-cpu 0\.32\.0 is installed under another name"):
        vllm_support.check_vllm_args({})
    del fake_vllm["vllm-cpu"]
    with pytest.raises(vllm_support.VLLMSetupError, match="no vllm package metadata"):
        vllm_support.check_vllm_args({})


@pytest.mark.parametrize(
    ("versions", "target", "cpu"),
    [
        ({"vllm": "0.32.0+cpu", "vllm-cpu": "0.32.0"}, None, True),
        ({"vllm": "0.32.0+cpu"}, None, True),
        ({"vllm": "0.32.0", "vllm-cpu": "0.32.0"}, None, True),
        ({"vllm": "0.32.0"}, "cpu", True),
        ({"vllm": "0.32.0"}, None, False),  # upstream vLLM, a GPU build
    ],
)
def test_the_kv_cache_size_is_asked_for_on_the_cpu_build_only(fake_vllm, monkeypatch, versions, target, cpu):
    fake_vllm.update(versions)
    if target:
        monkeypatch.setenv("VLLM_TARGET_DEVICE", target)
    assert vllm_support.is_cpu_build() is cpu
    if cpu:
        with pytest.raises(vllm_support.VLLMSetupError, match="set VLLM_CPU_KVCACHE_SPACE"):
            vllm_support.check_vllm_args({})
        monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    vllm_support.check_vllm_args({})  # nothing to refuse


def test_adapter_ranks_above_max_lora_rank_are_refused(fake_vllm, tmp_path):
    fake_vllm["vllm"] = "0.32.0"
    r16, r32, patterned = (
        _adapter(tmp_path / "r16", 16),
        _adapter(tmp_path / "r32", 32),
        _adapter(tmp_path / "p", 8, {"q_proj": 64}),
    )
    assert vllm_support.adapter_rank(patterned) == 64 and vllm_support.adapter_rank(tmp_path) is None
    vllm_support.check_vllm_args({"lora_local_path": str(r16)})  # lm-eval's default max_lora_rank is 16
    with pytest.raises(
        vllm_support.VLLMSetupError, match=r"LoRA rank 32 exceeds max_lora_rank=16: add max_lora_rank=32"
    ):
        vllm_support.check_vllm_args({"lora_local_path": str(r32)})
    vllm_support.check_vllm_args({"lora_local_path": str(r32), "max_lora_rank": "32"})
    with pytest.raises(vllm_support.VLLMSetupError, match="LoRA rank 64 exceeds max_lora_rank=32"):
        vllm_support.check_vllm_args({"lora_local_path": str(patterned), "max_lora_rank": 32})
    with pytest.raises(vllm_support.VLLMSetupError, match="max_lora_rank='big': not an integer"):
        vllm_support.check_vllm_args({"lora_local_path": str(r16), "max_lora_rank": "big"})
    with pytest.raises(vllm_support.VLLMSetupError, match="lora_local_path=ADAPTER, not peft="):
        vllm_support.check_vllm_args({"peft": str(r16)})


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("none", "--model vllm: vLLM is not installed here"),
        ("no-kv", "set VLLM_CPU_KVCACHE_SPACE"),
        ("peft", "lora_local_path=ADAPTER, not peft="),
    ],
)
def test_calbench_eval_says_it_in_one_line(setup, message, fake_vllm, monkeypatch, tmp_path, capsys):
    if setup == "none":
        monkeypatch.setattr(
            importlib.util, "find_spec", lambda name, *a, **k: None if name == "vllm" else _FIND_SPEC(name, *a, **k)
        )
    fake_vllm.update({"vllm": "0.32.0+cpu"})
    if setup == "peft":
        monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    monkeypatch.chdir(tmp_path)
    extra = f",peft={tmp_path}" if setup == "peft" else ""
    argv = [
        "eval",
        "--model",
        "vllm",
        "--model_args",
        f"pretrained={tmp_path}{extra}",
        "--tasks",
        "calbench_numeric_quick",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("calbench eval: ") and message in err and "Traceback" not in err, err
    assert err.strip().count("\n") == 0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("[1, 2]", "not an adapter config (a JSON object), got list"),
        ('{"r": NaN}', "a LoRA rank must be a whole number from 1 to 65536, got nan"),
        ('{"r": 1e400}', "a LoRA rank must be a whole number from 1 to 65536, got inf"),
        ('{"r": 8, "rank_pattern": ["q_proj", 64]}', "rank_pattern must be an object of module: rank"),
        ('{"r": 8, "rank_pattern": {"q_proj": 2.5}}', "a LoRA rank must be a whole number"),
    ],
)
def test_a_broken_adapter_config_is_one_line(fake_vllm, tmp_path, config, message):
    """Issue 36, case 12: a list, r: NaN, r: 1e400 or a list rank_pattern gave tracebacks."""
    fake_vllm["vllm"] = "0.32.0"
    (tmp_path / "adapter_config.json").write_text(config)
    with pytest.raises(vllm_support.VLLMSetupError, match=re.escape(message)):
        vllm_support.check_vllm_args({"lora_local_path": str(tmp_path)})
