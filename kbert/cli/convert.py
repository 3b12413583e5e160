"""`kbert convert`: `kbert.convert` (import weights from another library, or export to one)."""

from __future__ import annotations

import argparse
import os
import sys

from kbert.cli.common import CliError, add_overwrite, check_output_dir, examples


def add_convert(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="import weights from another library into a checkpoint, "
                                       "or export a checkpoint to another library's layout",
                       epilog=examples(
                           "kbert convert --from hf bert-base-uncased/ --output "
                           "saved_models/bert-base-uncased",
                           "kbert convert --from hf hf://google-bert/bert-base-uncased --output "
                           "saved_models/bert-base-uncased",
                           "kbert convert --from google uncased_L-12_H-768_A-12/ --output "
                           "saved_models/bert-base-uncased --dtype float16",
                           "kbert convert --to hf minilm-l6-squad --output /tmp/minilm-squad-hf"))
    direction = p.add_mutually_exclusive_group(required=True)
    direction.add_argument("--from", dest="source", metavar="FORMAT",
                           help="import SRC from: hf, google, model-garden or keras-hub "
                                "(this or --to, no default)")
    direction.add_argument("--to", dest="target", metavar="FORMAT",
                           help="export the kbert checkpoint SRC to: hf or keras-hub (this or "
                                "--from, no default)")
    p.add_argument("src", help="the source checkpoint (directory, file or TF checkpoint "
                               "prefix; with --from hf also a Hub address, hf://ORG/NAME)")
    p.add_argument("--output", required=True, help="the directory to write")
    add_overwrite(p, "an output of the same format")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16"),
                   help="storage dtype of the written weights (import only)")
    p.set_defaults(func=run_convert)


def run_convert(args: argparse.Namespace) -> None:
    import warnings

    from kbert import convert
    if args.target and args.target not in convert.TARGETS:
        raise CliError(f"unknown export format {args.target!r}; choose one of "
                       f"{', '.join(sorted(convert.TARGETS))}")
    kind = args.target.replace("-", "_") if args.target else "checkpoint"
    check_output_dir(args.output, kind, args.overwrite)
    if args.target:
        from kbert import hub
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            convert.export(args.target, hub.resolve(args.src), args.output,
                           overwrite=args.overwrite)
        for w in caught:  # the converters' own notes (lossy mappings, dropped heads)
            if "kbert" in w.filename:
                print(f"kbert convert: warning: {w.message}", file=sys.stderr)
        print(f"wrote {args.output} ({args.target})")
        return
    src = args.src
    if args.source == "hf" and not os.path.exists(src):
        from kbert import hub
        if hub.is_address(src):      # downloaded into huggingface_hub's cache, converted here
            src = hub.download(src).folder
    ckpt = convert.convert(args.source, src, args.output, dtype=args.dtype,
                           overwrite=args.overwrite)
    print(f"wrote {args.output}: {ckpt.summary()}")
