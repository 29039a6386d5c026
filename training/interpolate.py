"""WiSE-FT: a fully fine-tuned model's weights interpolated toward its base model's.

    calbench interpolate --base smollm2-135m-instruct --tuned RUN/adapter --alpha 0.5 --output DIR

Every floating-point weight becomes ``(1 - alpha) * base + alpha * tuned`` (Wortsman et al., 2022:
alpha = 1 is the fine-tuned model, 0 the base); the tuned folder's config, tokenizer and chat
template are copied, and ``calbench_interpolated.json`` records the two models, alpha and the
tuned run's ``calbench_train.json``. The output is a whole model folder, evaluated as
``pretrained=DIR`` like any full fine-tune. A LoRA adapter is no full model: merge it first, or
interpolate its scale instead (alpha times the adapter is LoRA's own ``scaling``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

from calbench import model_catalogue
from calbench.provenance import write_json
from calbench.train_record import INTERPOLATED, TRAIN_RECORD

WEIGHTS = "model.safetensors"
RECORD = INTERPOLATED
COPIED = (
    *("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"),
    *("special_tokens_map.json", TRAIN_RECORD),
)


class InterpolationError(ValueError):
    """Two models that cannot be interpolated, or a bad alpha."""


def interpolate(base: Path, tuned: Path, alpha: float, output: Path) -> dict[str, Any]:
    """Write the interpolated model folder; its record (what ``RECORD`` holds)."""
    from safetensors.torch import load_file, save_file

    if not (isinstance(alpha, int | float) and math.isfinite(alpha) and 0 <= alpha <= 1):
        raise InterpolationError(f"--alpha must lie in [0, 1], got {alpha!r}")
    for name, folder in (("--base", base), ("--tuned", tuned)):
        if not (folder / WEIGHTS).is_file():
            raise InterpolationError(
                f"{name} {folder}: no {WEIGHTS} (a whole model folder: a full fine-tune or a base)"
            )
    base_weights, tuned_weights = load_file(str(base / WEIGHTS)), load_file(str(tuned / WEIGHTS))
    if set(base_weights) != set(tuned_weights):
        extra = sorted(set(base_weights) ^ set(tuned_weights))[:3]
        raise InterpolationError(f"{base} and {tuned} have different weights ({', '.join(extra)}, ...): not one model")
    mixed = {}
    for key, weight in tuned_weights.items():
        other = base_weights[key]
        if other.shape != weight.shape:
            raise InterpolationError(f"{key}: shape {tuple(other.shape)} in {base}, {tuple(weight.shape)} in {tuned}")
        mixed[key] = (1 - alpha) * other + alpha * weight if weight.is_floating_point() else weight
    output.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (tuned / name).is_file():
            shutil.copy2(tuned / name, output / name)
    save_file(mixed, str(output / WEIGHTS), metadata={"format": "pt"})
    record: dict[str, Any] = {"base": model_catalogue.base_model(str(base)), "alpha": alpha}
    summary = tuned / TRAIN_RECORD
    if summary.is_file():
        record["tuned_run"] = json.loads(summary.read_text())
    write_json(output / RECORD, record)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="calbench interpolate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the base model: a calbench catalogue name or a model folder")
    parser.add_argument(
        "--tuned", required=True, type=Path, help="the fully fine-tuned model folder (a run's adapter/)"
    )
    parser.add_argument("--alpha", required=True, type=float, help="the fine-tuned weights' share, in [0, 1]")
    parser.add_argument("--output", required=True, type=Path, help="the interpolated model folder to write")
    args = parser.parse_args(argv)
    base = Path(model_catalogue.resolve(args.base))
    try:
        interpolate(base, args.tuned, args.alpha, args.output)
    except InterpolationError as err:
        print(f"calbench interpolate: {err}", file=sys.stderr)
        return 2
    print(f"interpolated model: {args.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
