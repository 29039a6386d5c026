"""Offline capability drift: how far an adapter moves the model on ordinary text.

Drift is the mean, over every position of a fixed set of neutral paragraphs shipped with
calbench, of KL(base ‖ tuned) between the two next-token distributions (nats per
token). It needs no hub data, so it runs anywhere; 0 means the adapter leaves ordinary
text untouched. Its standard error comes from the spread over paragraphs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from calbench.stats import sample_mean

# Plain expository paragraphs written for calbench: no numbers to sample, no instructions.
NEUTRAL_TEXT = (
    "The river rises in the hills to the north and runs south through farmland before it reaches the sea. "
    "In spring the water is high and brown; by late summer it is clear enough to see the stones on the bottom.",
    "Bread is made from flour, water, salt and yeast. The dough is kneaded, left to rise, shaped, and baked "
    "until the crust is brown and the loaf sounds hollow when it is tapped underneath.",
    "A library lends books, but it also keeps newspapers, maps and recordings, and many libraries offer "
    "quiet rooms where people can read or study without being disturbed.",
    "Bees visit flowers to collect nectar and pollen. As they move from one flower to the next they carry "
    "pollen with them, which helps many plants produce fruit and seeds.",
    "The old railway station was built of red brick, with a clock above the entrance and a long platform "
    "covered by an iron roof. Today it houses a small museum about the town's history.",
    "When the weather turns cold, many birds fly south to warmer regions where food is easier to find. "
    "They often return to the same nesting places in the spring.",
    "A good map shows roads, rivers and towns, but it also uses symbols and colours to show forests, "
    "hills and marshes, and a scale that tells the reader how far one place is from another.",
    "Tea is prepared by pouring hot water over dried leaves and letting them steep for a few minutes. "
    "Some people add milk or lemon, while others prefer it plain.",
    "The committee met on Tuesday to discuss the new park. Residents asked for more trees, benches near "
    "the pond, and a path wide enough for bicycles and pushchairs.",
    "Glass is made by melting sand with soda and lime at a very high temperature. While it is hot it can "
    "be blown, pressed or rolled into shape, and it hardens as it cools.",
    "In the evening the market closes and the stalls are packed away. The square becomes quiet, and only "
    "a few people cross it on their way home.",
    "Letters were once the main way to keep in touch with distant friends. Writing one took time, and "
    "waiting for the reply could take weeks.",
)


def _token_kl(base_logits: torch.Tensor, tuned_logits: torch.Tensor) -> torch.Tensor:
    """KL(base ‖ tuned) at each position, over the full vocabulary."""
    lb = torch.log_softmax(base_logits.double(), dim=-1)
    lt = torch.log_softmax(tuned_logits.double(), dim=-1)
    return (lb.exp() * (lb - lt)).sum(dim=-1)


@torch.no_grad()
def drift(base: Any, tuned: Any, tokenizer: Any, texts: tuple[str, ...] = NEUTRAL_TEXT) -> dict[str, float]:
    """Mean per-token KL(base ‖ tuned) over ``texts``, with its standard error over texts."""
    if len(texts) < 2:
        raise ValueError("drift needs at least two texts (its standard error is the spread over texts)")
    per_text, tokens = [], 0
    for text in texts:
        ids = torch.tensor([tokenizer(text)["input_ids"]], device=next(base.parameters()).device)
        kl = _token_kl(base(ids).logits[0], tuned(ids).logits[0])
        per_text.append(float(kl.mean()))
        tokens += int(kl.numel())
    mean = sample_mean(per_text, nan="propagate")
    if not (math.isfinite(mean.value) and math.isfinite(mean.se)):
        raise ValueError(f"drift is not finite ({mean.value} ± {mean.se}): a model's logits are not finite")
    return {"drift_kl": mean.value, "drift_kl_se": mean.se, "tokens": tokens}


def model_identity(reference: str) -> str:
    """A model reference as comparable text: the hub id where one can be told (a hub id itself, a
    calbench catalogue name or folder, a Hugging Face cache snapshot), else the resolved folder."""
    from calbench import model_catalogue

    ref = reference.rstrip("/")
    path = Path(ref).expanduser()
    name = path.name
    if ref in model_catalogue.CATALOGUE:
        return model_catalogue.CATALOGUE[ref].hub_id
    if path.parent.name == "models" and name in model_catalogue.CATALOGUE:  # calbench's cache, any machine
        return model_catalogue.CATALOGUE[name].hub_id
    for part in path.parts:  # .../models--org--name/snapshots/<sha>
        if part.startswith("models--") and part.count("--") >= 2:
            return part.removeprefix("models--").replace("--", "/", 1)
    if path.exists():
        return str(path.resolve())
    return ref


def same_model(a: str, b: str) -> bool:
    """Whether two model references name the same model (``model_identity``); two existing folders
    with the same config.json count as copies of one model."""
    if model_identity(a) == model_identity(b):
        return True
    configs = [Path(x).expanduser() / "config.json" for x in (a, b)]
    return all(c.is_file() for c in configs) and configs[0].read_text() == configs[1].read_text()


def drift_of_adapter(base_path: str, adapter: str, device: str = "cpu") -> dict[str, float]:
    """Drift of a PEFT adapter on its base model (one copy of the weights: the adapter is toggled)."""
    from peft import PeftModel

    config_file = Path(adapter) / "adapter_config.json"
    if not config_file.is_file():
        raise ValueError(f"{adapter} is not a PEFT adapter folder (no adapter_config.json)")
    trained_on = json.loads(config_file.read_text()).get("base_model_name_or_path")
    if trained_on and not same_model(str(trained_on), base_path):
        raise ValueError(f"{adapter} was trained on {trained_on}, not on {base_path}: its drift would mean nothing")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_path)
    model: Any = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    tuned = PeftModel.from_pretrained(model.to(device).eval(), adapter).eval()

    class _Base(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = tuned

        def forward(self, ids: torch.Tensor) -> Any:
            with self.inner.disable_adapter():
                return self.inner(ids)

    return drift(_Base(), tuned, tokenizer)


def describe(adapter: str, d: dict[str, float]) -> str:
    return f"{adapter}: drift KL(base || tuned) = {d['drift_kl']:.4g} ± {d['drift_kl_se']:.2g} nats/token ({d['tokens']} tokens)"
