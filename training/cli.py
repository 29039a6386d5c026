"""``calbench train`` / ``python -m calbench.training``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from calbench.training.config import TrainConfig, add_arguments, from_args


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="calbench train", description=__doc__)
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
    added to calbench train later, and had its default's effect)."""
    from calbench.training.run_folder import NOT_IDENTITY

    path = adapter / "calbench_train.json"
    try:
        recorded = dict(json.loads(path.read_text())["config"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a calbench adapter's training record ({err})") from err
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(recorded) - names)
    if unknown:
        raise ValueError(f"{path}: options this calbench train does not know: {', '.join(unknown)}")
    if isinstance(recorded.get("target_modules"), list):
        recorded["target_modules"] = tuple(recorded["target_modules"])
    theirs = TrainConfig(**recorded).resolve().to_dict()
    ours = config.resolve().to_dict()
    return [
        f"{k}: asked {ours[k]!r}, adapter {theirs[k]!r}" for k in ours if k not in NOT_IDENTITY and ours[k] != theirs[k]
    ]


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
