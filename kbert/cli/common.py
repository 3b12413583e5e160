"""What every subcommand shares: the parser and its help format, the one-line error, an argument
type, the --output checks, the training precision option."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

# the standard library only, both: the parser stays light
from kbert import outputs
from kbert.hardware import MIXED_PRECISION


class HelpFormatter(argparse.RawDescriptionHelpFormatter,
                    argparse.ArgumentDefaultsHelpFormatter):
    """Every command's --help: epilogs (the examples) keep their line breaks, and an option that
    takes a value ends with "(default: VALUE)".

    Nothing is added where it would say less than the help does: a switch (off unless given), a
    required option, an option whose help already states its default (as one whose default is
    None or [] must: e.g. "default: as the index was built")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (action.nargs == 0 or action.required or action.default in (None, [])
                or "default" in text.lower()):
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """The `kbert` parser and, through `add_subparsers`, every subcommand's: `HelpFormatter`,
    and an option whose value may be left out (`--hybrid [{on,off}]`) takes the next word only
    when it is one of its choices, so `--hybrid FILE ...` still reads as the bare option
    followed by a file. A bad argument is one line, as every other error."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None,
                         namespace: Any = None) -> Any:   # (typeshed overloads it)
        words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._bare_options(words), namespace)

    def error(self, message: str) -> Any:   # (typeshed: NoReturn)
        """A bad argument: `kbert COMMAND: error: ...` in one line (no usage), exit status 2."""
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")

    def _bare_options(self, words: list[str]) -> list[str]:
        """`--hybrid FILE` -> `--hybrid=on FILE`: the option's const where the next word is not
        one of its choices (nor another option)."""
        out = list(words)
        for i, word in enumerate(words[:-1]):
            if word == "--":
                break
            action = self._option_string_actions.get(word)
            following = words[i + 1]
            if (action is not None and action.nargs == argparse.OPTIONAL and action.choices
                    and following not in action.choices and not following.startswith("-")):
                out[i] = f"{word}={action.const}"
        return out


def examples(*commands: str) -> str:
    """A command's epilog: example command lines, each starting with `kbert ` and wrapped as a
    shell continues them (` \\`), to fit a terminal (a test parses every one)."""
    return "examples:\n" + "\n".join(_wrapped(command) for command in commands)


def _wrapped(command: str, width: int = 80) -> str:
    """`  kbert ...` cut between words (a quoted text is one word, an option and its value
    stay together) into lines of at most `width` characters where the words allow, each but
    the last ending with ` \\`, the next indented."""
    lines = ["  "]
    for word in re.findall(r'--?[\w-]+ (?:"[^"]*"|[^-\s]\S*)|"[^"]*"|\S+', command):
        if len(lines[-1]) > 6 and len(lines[-1]) + len(word) + 3 > width:
            lines[-1] += " \\"
            lines.append("      ")
        lines[-1] += word if lines[-1].isspace() else " " + word
    return "\n".join(lines)


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


def output_named(error: BaseException, line: str, output: str | None) -> str:
    """`line`, an error's, as `--output PATH ...` where it is an `OutputError` about the
    command's --output (or a path in it)."""
    path = getattr(error, "path", None)
    if (not isinstance(error, outputs.OutputError) or path is None or output is None
            or not line.startswith(path)):
        return line
    given, named = (os.path.realpath(os.path.expanduser(p)) for p in (output, path))
    if named == given or named.startswith(given.rstrip(os.sep) + os.sep):
        return f"--output {line}"
    return line


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


def add_log_dir(p: argparse.ArgumentParser) -> None:
    """--log-dir: TensorBoard logs of a training command."""
    p.add_argument("--log-dir", help="TensorBoard log directory (default: none, no logs)")


def check_log_dir(log_dir: str | None, output: str) -> None:
    """A --log-dir outside --output: a folder inside the checkpoint would not be kbert's (the
    checkpoint could not be replaced whole)."""
    if log_dir is None:
        return
    log, out = os.path.realpath(log_dir), os.path.realpath(output)
    if log == out or log.startswith(out.rstrip(os.sep) + os.sep):
        raise CliError(f"--log-dir {log_dir} is inside --output {output}; choose a directory "
                       "outside the checkpoint")


def check_output_file(path: str, overwrite: bool = False) -> None:
    """An --output that names a file to write: refused up front if it cannot be one, or if it
    exists and --overwrite is not given."""
    outputs.check_file(path, overwrite)
