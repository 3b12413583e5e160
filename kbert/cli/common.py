"""What every subcommand shares: the one-line error, an argument type, the --output checks."""

from __future__ import annotations

import argparse
import os


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
