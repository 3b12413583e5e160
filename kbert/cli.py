"""The `kbert` command: parses arguments and calls the library. No logic of its own.

Each subcommand is one `_add_<name>` function (its arguments) and one `_run_<name>` function
(the call into kbert). Any error the library raises for bad input becomes one line on stderr
and a non-zero exit status.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


class CliError(Exception):
    """A bad input the user can fix; printed as one line."""


# --- convert -------------------------------------------------------------------------------------
def _add_convert(sub):
    p = sub.add_parser("convert", help="import weights from another library into a checkpoint")
    p.add_argument("--from", dest="source", required=True,
                   help="source format: hf, google, model-garden or keras-hub")
    p.add_argument("src", help="the source checkpoint (directory or file)")
    p.add_argument("--output", required=True, help="the kbert checkpoint directory to write")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16"),
                   help="storage dtype of the written weights")
    p.set_defaults(func=_run_convert)


def _run_convert(args):
    from kbert import convert
    ckpt = convert.convert(args.source, args.src, args.output, dtype=args.dtype)
    print(f"wrote {args.output}: {ckpt.summary()}")


# -------------------------------------------------------------------------------------------------
def build_parser():
    parser = argparse.ArgumentParser(prog="kbert", description="BERT in Keras 3")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_convert,):
        add(sub)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (CliError, ValueError, FileNotFoundError, NotADirectoryError, KeyError,
            UnicodeDecodeError) as e:
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"kbert {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"kbert {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
