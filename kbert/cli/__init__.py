"""The `kbert` command: parses arguments and calls the library. No logic of its own.

Each subcommand is one `add_<name>` function (its arguments) and one `run_<name>` function (the
call into kbert), in the module named after what it calls:

    common.py       Parser and HelpFormatter (defaults and examples in every --help),
                    CliError, positive_int, the --output checks
    convert.py      convert                          (kbert.convert)
    data.py         build-vocab, create-pretraining-data, data-service
                                                     (kbert.tokenizer, kbert.data)
    pretrain.py     pretrain                         (kbert.training)
    finetune.py     finetune, evaluate               (kbert.training.finetuning)
    retrieval.py    index, evaluate retrieve|rerank  (kbert.retrieval)
    export.py       export                           (kbert.serving, kbert.runtime.graphs)
    cache.py        cache list|remove                (kbert.hub)
    app.py          app                              (the playground, app/)
    serve.py        serve                            (kbert.server)
    experiments.py  experiments                      (kbert.experiments)

Any error the library raises for bad input becomes one line on stderr, `kbert COMMAND: error:
...`, and exit status 2 (`main`, the one place that does it); `--debug` or `KBERT_DEBUG=1`
shows the traceback instead. The parser imports nothing heavy: `kbert --help`, every
subcommand's `--help` and argument errors answer without TensorFlow or Keras (seconds and
~1 GB); each `run_*` imports what it calls.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from kbert import progress  # noqa: E402
from kbert.cli import (  # noqa: E402  (after the environment TensorFlow reads)
    app,
    cache,
    convert,
    data,
    experiments,
    export,
    finetune,
    pretrain,
    retrieval,
    serve,
)
from kbert.cli.common import (  # noqa: E402
    CliError,
    Parser,
    examples,
    output_named,
    positive_int,
)
from kbert.cli.export import DTYPE_NAMES, EXPORT_FORMATS, RUNTIME_NAMES  # noqa: E402
from kbert.cli.finetune import TASK_NAMES  # noqa: E402
from kbert.cli.retrieval import RETRIEVAL_TASKS  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="kbert", description="BERT in Keras 3",
                    epilog=examples(
                        "kbert finetune sst2 --init minilm-l6-mlm-nsp --train SST-2/train.tsv "
                        "--dev SST-2/dev.tsv --output out/sst2",
                        "kbert evaluate sst2 --model out/sst2 --data SST-2/dev.tsv",
                        "kbert index build notes/*.txt --model minilm-l6-v2 --output my-index",
                        "kbert index search my-index \"how do I reset my password?\"")
                    + "\n\nEvery command's --help (kbert COMMAND --help) shows its options, "
                      "their defaults and examples.")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error (also: KBERT_DEBUG=1)")
    parser.set_defaults(quiet=False)           # `--quiet` itself belongs to each command
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (convert.add_convert, data.add_build_vocab, data.add_create_pretraining_data,
                pretrain.add_pretrain, data.add_data_service, finetune.add_finetune,
                finetune.add_evaluate, export.add_export, serve.add_serve, app.add_app,
                experiments.add_experiments, retrieval.add_index, cache.add_cache):
        add(sub)
    for command in _subcommands(sub):           # `kbert COMMAND ... --debug` works too
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help=argparse.SUPPRESS)
        command.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS,
                             help="no progress (count, rate, time left) on stderr")
    return parser


def _subcommands(sub: argparse._SubParsersAction) -> Iterator[argparse.ArgumentParser]:
    """Every command's parser and its actions' (`kbert index build`)."""
    for command in sub.choices.values():
        yield command
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                yield from _subcommands(action)


def expected_errors() -> tuple[type[BaseException], ...]:
    """The error types that mean bad input (or an unusable environment), not a bug in kbert.

    TensorFlow's `OpError`s (e.g. `PermissionDeniedError` writing a file, `InvalidArgumentError`
    on a malformed record) count when TensorFlow is already loaded: looked up, not imported, so
    commands that do not need TensorFlow stay fast and work without it.
    """
    errors = (CliError, ValueError, OSError, KeyError, UnicodeError, pickle.UnpicklingError)
    tf = sys.modules.get("tensorflow")
    op_error = getattr(getattr(tf, "errors", None), "OpError", None)
    return errors + (op_error,) if isinstance(op_error, type) else errors


def error_line(error: BaseException) -> str:
    """The first line of an error's message (its type name when it has none)."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    if isinstance(error, OSError) and error.filename and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    text = text.strip()
    return text.splitlines()[0] if text else type(error).__name__


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (`kill`, a scheduler's stop) unwinds the command as Ctrl-C does, so a writer
    removes what it had half-written and stops its child processes; Python's default would
    end the process on the spot. Both also mark the command interrupted
    (`progress.interrupt`): a KeyboardInterrupt that Python swallows (raised in a
    garbage-collector callback) still stops a long loop at its next step. Only where no
    handler of the caller's is installed."""
    def interrupt(signum: int, frame: object) -> None:
        progress.interrupt()
        raise KeyboardInterrupt
    progress.interrupt(False)
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults: dict[signal.Signals, Any] = {signal.SIGTERM: signal.SIG_DFL,
                                           signal.SIGINT: signal.default_int_handler}
    mine = [s for s, default in defaults.items() if signal.getsignal(s) is default]
    for s in mine:
        signal.signal(s, interrupt)
    try:
        yield
    finally:
        for s in mine:
            signal.signal(s, defaults[s])
        progress.interrupt(False)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command. Bad input: `kbert COMMAND: error: ...` on stderr and exit status 2
    (as argparse does for bad arguments); the traceback only with --debug or KBERT_DEBUG=1."""
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get("KBERT_DEBUG", "") not in ("", "0")
    progress.show(not args.quiet)
    if os.environ.get("KERAS_BACKEND") == "jax":        # a second run compiles nothing
        from kbert.models.compilation import enable_persistent_cache
        enable_persistent_cache()
    try:
        with _terminate_as_interrupt():
            args.func(args)
    except KeyboardInterrupt:
        if debug:
            raise
        progress.clear()
        print(f"kbert {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if debug or not isinstance(e, expected_errors()):
            raise
        progress.clear()
        line = output_named(e, error_line(e), getattr(args, "output", None))
        print(f"kbert {args.command}: error: {line}", file=sys.stderr)
        return 2
    finally:
        progress.show(None)
    return 0


__all__ = ["DTYPE_NAMES", "EXPORT_FORMATS", "RUNTIME_NAMES", "RETRIEVAL_TASKS", "TASK_NAMES",
           "CliError",
           "build_parser", "error_line", "expected_errors", "main", "positive_int"]
