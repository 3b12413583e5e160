"""`kbert convert`: `kbert.convert` (import weights from another library, or export to one)."""

from __future__ import annotations

import argparse
import sys

from kbert.cli.common import check_output_dir


def add_convert(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="import weights from another library into a checkpoint, "
                                       "or export a checkpoint to another library's layout")
    direction = p.add_mutually_exclusive_group(required=True)
    direction.add_argument("--from", dest="source", metavar="FORMAT",
                           help="import SRC from: hf, google, model-garden or keras-hub")
    direction.add_argument("--to", dest="target", metavar="FORMAT",
                           help="export the kbert checkpoint SRC to: hf or keras-hub")
    p.add_argument("src", help="the source checkpoint (directory, file or TF checkpoint prefix)")
    p.add_argument("--output", required=True, help="the directory to write")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16"),
                   help="storage dtype of the written weights (import only)")
    p.set_defaults(func=run_convert)


def run_convert(args: argparse.Namespace) -> None:
    import warnings

    from kbert import convert
    check_output_dir(args.output)
    if args.target:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            convert.export(args.target, args.src, args.output)
        for w in caught:  # the converters' own notes (lossy mappings, dropped heads)
            if "kbert" in w.filename:
                print(f"kbert convert: warning: {w.message}", file=sys.stderr)
        print(f"wrote {args.output} ({args.target})")
        return
    ckpt = convert.convert(args.source, args.src, args.output, dtype=args.dtype)
    print(f"wrote {args.output}: {ckpt.summary()}")
