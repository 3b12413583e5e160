"""`kbert export`: `kbert.serving` (a TF Serving SavedModel) or `kbert.runtime.graphs` (ONNX,
OpenVINO)."""

from __future__ import annotations

import argparse

from kbert.cli.common import add_overwrite, check_output_dir, examples, positive_int

EXPORT_FORMATS = ("saved_model", "onnx", "openvino")
DTYPE_NAMES = ("auto", "float32", "bfloat16", "int8")   # kbert.runtime.DTYPES (a test checks)
RUNTIME_NAMES = ("auto", "keras", "openvino", "onnx")    # kbert.runtime.RUNTIME_CHOICES (tested)


def add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a TF Serving SavedModel (raw-string signatures), "
                                      "or the model's passes as ONNX / OpenVINO graphs",
                       epilog=examples(
                           "kbert export minilm-l6-squad --output /tmp/bert",
                           "kbert export out/sst2 --output /tmp/bert --version 2 --signatures "
                           "classify --dtype bfloat16",
                           "kbert export minilm-l6-v2 --output /tmp/minilm-onnx --format onnx"))
    p.add_argument("checkpoint", metavar="CKPT", help="the checkpoint directory")
    p.add_argument("--output", required=True,
                   help="SavedModel: the model base directory (TF Serving's base path: new, "
                        "empty or holding only kbert's versions), writes OUTPUT/VERSION/; onnx "
                        "and openvino: the export directory, new or empty (kbert.load(OUTPUT) "
                        "runs it)")
    add_overwrite(p, "an export (SavedModel: the same version)")
    p.add_argument("--format", default="saved_model", choices=EXPORT_FORMATS,
                   help="saved_model (TF Serving, default), onnx or openvino")
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES,
                   help="precision: float32 (default), bfloat16 (SavedModel, OpenVINO), int8 "
                        "(OpenVINO, CPUs with VNNI and no bfloat16), auto (bfloat16 where the "
                        "CPU runs it natively)")
    p.add_argument("--version", type=positive_int, default=1,
                   help="version sub-directory (default 1, SavedModel only)")
    p.add_argument("--signatures", nargs="+", metavar="NAME",
                   help="string signatures to write, each with its NAME_ids twin (default: all "
                        "the heads allow); NAME_ids names alone write those only, with TF core "
                        "ops only, for a server without TF Text (clients tokenize)")
    p.add_argument("--top-k", type=positive_int, default=5,
                   help="fillers per mask / answers per question (SavedModel only)")
    p.add_argument("--max-masks", type=positive_int, default=5,
                   help="[MASK]s answered per text (SavedModel only)")
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> None:
    if args.format != "saved_model":
        from kbert.runtime import graphs
        check_output_dir(args.output, "export", args.overwrite)
        path = graphs.export(args.checkpoint, args.output, fmt=args.format, dtype=args.dtype,
                             overwrite=args.overwrite)
        manifest = graphs.read_manifest(path)
        assert manifest is not None          # just written by `export`
        print(f"wrote {path}: {args.format} {manifest['dtype']}, passes "
              f"{', '.join(manifest['kinds'])}")
        return
    from kbert import serving
    options = serving.ExportOptions(top_k=args.top_k, max_masks=args.max_masks)
    path = serving.export(args.checkpoint, args.output, version=args.version,
                         signatures=args.signatures, options=options, dtype=args.dtype,
                         overwrite=args.overwrite)
    print(f"wrote {path}: signatures {', '.join(serving.list_signatures(path))}")
