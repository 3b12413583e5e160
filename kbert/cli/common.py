"""What every subcommand shares: the one-line error, an argument type, the --output checks, the
training precision option."""

from __future__ import annotations

import argparse
import os

from kbert.hardware import MIXED_PRECISION  # the standard library only: the parser stays light


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


def check_output_dir(path: str) -> None:
    """An --output that names a directory to write: refused up front if it cannot be one."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise CliError(f"--output {path} exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"--output {path}: cannot create it in {parent} (not a writable "
                       "directory)")


def check_output_file(path: str) -> None:
    """An --output that names a file to write: refused up front if it cannot be one."""
    if os.path.isdir(path):
        raise CliError(f"--output {path} is a directory; give the file to write")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CliError(f"--output {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise CliError(f"--output {path}: the directory {parent} is not writable")
