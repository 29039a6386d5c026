"""``calbench train`` / ``python -m calbench.training``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from calbench.training.config import add_arguments, from_args


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="calbench train", description=__doc__)
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = from_args(args)
    except ValueError as err:
        print(f"calbench train: {err}", file=sys.stderr)
        return 2
    from calbench.training.run_folder import RunFolderError
    from calbench.training.trainer import NonFiniteLossError, run

    try:
        run(config)
    except (RunFolderError, NonFiniteLossError) as err:
        print(f"calbench train: {err}", file=sys.stderr)
        return 2
    return 0
