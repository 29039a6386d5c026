"""``calbench train`` / ``python -m calbench.training``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from calbench.train_record import NOT_IDENTITY, TRAIN_RECORD, as_trained
from calbench.training.config import TrainConfig, add_arguments, from_args, typed


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="calbench train", description=__doc__, allow_abbrev=False)
    add_arguments(parser)
    parser.add_argument(
        "--same-as",
        metavar="ADAPTER",
        help="train nothing: check that ADAPTER (its calbench_train.json) was trained with these options, "
        "defaults resolved; exit 0 if so, else 2 listing the options that differ",
    )
    return parser


def same_as(config: TrainConfig, adapter: Path) -> list[str]:
    """``option: asked X, adapter Y`` for each option that decides training where ``config`` and
    the run that made ``adapter`` differ (both resolved; an option the adapter's file lacks was
    added to calbench train later, and had the effect its default had then: ``train_record.BEFORE``)."""
    path = adapter / TRAIN_RECORD
    try:
        recorded = dict(json.loads(path.read_text())["config"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a calbench adapter's training record ({err})") from err
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(recorded) - names)
    if unknown:
        raise ValueError(f"{path}: options this calbench train does not know: {', '.join(unknown)}")
    try:
        theirs = typed(as_trained(recorded)).resolve().to_dict()
    except ValueError as err:  # a hand-edited record: `target_modules: 5`, `widen: "two"`
        raise ValueError(f"{path}: not a calbench adapter's training record ({err})") from None
    ours = config.resolve().to_dict()
    for side in (theirs, ours):  # LoRA targets are a set; chat left out means "if the tokenizer has a template"
        side["target_modules"] = sorted(side["target_modules"])
    if ours["chat"] != theirs["chat"] and None in (ours["chat"], theirs["chat"]):
        has_template = _has_chat_template(config.model)
        ours["chat"], theirs["chat"] = (has_template if v is None else v for v in (ours["chat"], theirs["chat"]))
    out = [
        f"{k}: asked {ours[k]!r}, adapter {theirs[k]!r}" for k in ours if k not in NOT_IDENTITY and ours[k] != theirs[k]
    ]
    base = json.loads(path.read_text()).get("base_model")
    trained_on = base.get("weights_sha256") if isinstance(base, dict) else None
    if trained_on is not None:  # the same name, other weights: an adapter of another base
        from calbench import model_catalogue
        from calbench.provenance import weights_hash

        now = weights_hash(model_catalogue.resolve(config.model))
        if now is not None and now != trained_on:
            out.append(f"base weights: {config.model} is {now} here, the adapter was trained on {trained_on}")
    return out


def _has_chat_template(model: str) -> bool:
    from transformers import AutoTokenizer

    from calbench import model_catalogue

    return bool(AutoTokenizer.from_pretrained(model_catalogue.resolve(model)).chat_template)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = from_args(args)
        differ = same_as(config, Path(args.same_as)) if args.same_as else None
    except ValueError as err:
        print(f"calbench train: {err}", file=sys.stderr)
        return 2
    if differ is not None:
        for line in differ:
            print(f"calbench train: {args.same_as} differs: {line}", file=sys.stderr)
        return 2 if differ else 0
    from calbench.provenance import LinkedPathError
    from calbench.training.run_folder import RunFolderError
    from calbench.training.trainer import BrokenAdapterError, NonFiniteLossError, RunSetupError, run

    try:
        run(config)
    except (RunFolderError, NonFiniteLossError, BrokenAdapterError, RunSetupError, LinkedPathError) as err:
        print(f"calbench train: {err}", file=sys.stderr)
        return 2
    return 0
