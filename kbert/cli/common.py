"""What every subcommand shares: the one-line error, an argument type, the --output checks, the
training precision option."""

from __future__ import annotations

import argparse
import os

# the standard library only, both: the parser stays light
from kbert import outputs
from kbert.hardware import MIXED_PRECISION


class CliError(Exception):
    """A bad input the user can fix; printed as one line."""


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_mixed_precision(p: argparse.ArgumentParser, default: str | None = None) -> None:
    """--mixed-precision, as `finetune` and `pretrain` take it (`kbert.hardware`'s names,
    checked by `kbert.hardware.mixed_precision_policy`)."""
    # no argparse `choices`: a bad name is `mixed_precision_policy`'s one-line error
    p.add_argument("--mixed-precision", default=default,
                   metavar="{" + ",".join(MIXED_PRECISION) + "}",
                   help="train in mixed precision (float32 weights, bfloat16/float16 "
                        "compute; the checkpoint is written in --save-dtype): auto picks "
                        "mixed_bfloat16 where the CPU has AMX or AVX-512 BF16 (or on a GPU with "
                        "bfloat16), else float32, as bfloat16 without those instructions is "
                        "slower than float32; mixed_float16 scales the loss "
                        f"(default {default or 'float32'})")


def add_overwrite(p: argparse.ArgumentParser,
                  what: str = "an output of this command's kind") -> None:
    """--overwrite, as every command that writes an --output takes it."""
    p.add_argument("--overwrite", action="store_true",
                   help=f"replace {what} already at --output (your other files in it are "
                        f"kept); anything else there is always refused")


def check_output_dir(path: str, kind: str, overwrite: bool = False,
                     resume: bool = False) -> None:
    """An --output that names a directory to write as a `kind` output (`kbert.outputs.KINDS`):
    refused up front, in one line, if it cannot be one or holds something it must not replace
    (`kbert.outputs.check`)."""
    outputs.check(path, kind, overwrite, resume)
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"--output {path}: cannot create it in {parent} (not a writable "
                       "directory)")


def check_output_file(path: str, overwrite: bool = False) -> None:
    """An --output that names a file to write: refused up front if it cannot be one, or if it
    exists and --overwrite is not given."""
    outputs.check_file(path, overwrite)
