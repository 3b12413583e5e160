"""`kbert experiments ablations|features`: `kbert.experiments`."""

from __future__ import annotations

import argparse
import os

from kbert.cli.common import CliError, examples, positive_int


def add_experiments(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("experiments", help="re-run the paper's ablations (Table 5 + RoBERTa's "
                                           "NSP finding; Table 7 feature-based NER), resumable",
                       epilog=examples(
                           "kbert experiments ablations --output results/ablations-quick --quick",
                           "kbert experiments features --output results/features --train "
                           "conll2003/train.txt --dev conll2003/valid.txt"))
    which = p.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    a = which.add_parser("ablations", help="pretraining variants x SST-2, MRPC, SQuAD v1.1",
                         epilog=examples(
                             "kbert experiments ablations --output results/ablations-quick "
                             "--quick",
                             "kbert experiments ablations --output results/ablations --variants "
                             "bert no_nsp --tasks sst2 --steps 2000",
                             "kbert experiments ablations --export ablations-data "
                             "--mixed-precision mixed_bfloat16",
                             "kbert experiments ablations --output results/ablations --arrays "
                             "ablations-data"))
    a.add_argument("--output", help="results folder (re-run to resume; needed, no default, "
                                    "except with --export)")
    a.add_argument("--quick", action="store_true", help="tiny model, a few steps (CPU, minutes)")
    a.add_argument("--variants", nargs="+", help="bert no_nsp ltr roberta (default: all)")
    a.add_argument("--tasks", nargs="+", help="sst2 mrpc squad (default: all)")
    a.add_argument("--seeds", type=positive_int,
                   help="fine-tuning seeds per cell (default 3; quick 1)")
    a.add_argument("--steps", type=positive_int,
                   help="pretraining updates (default 10000; quick 4)")
    a.add_argument("--data", help="the shared data folder (corpus/, glue/, squad/; default: "
                                  "$KBERT_SHARED_DATA, else ../shared/data beside the "
                                  "repository)")
    a.add_argument("--vocab", help="vocab.txt (default: the shipped MiniLM checkpoint's)")
    a.add_argument("--export", metavar="DIR",
                   help="only write what a machine without TensorFlow needs to run the plan "
                        "(token ids, held-out features, encoded tasks) into DIR (default: "
                        "none, run the plan here)")
    a.add_argument("--arrays", metavar="DIR",
                   help="run from a folder --export wrote (no TensorFlow needed; default: "
                        "none, prepare the data here)")
    a.add_argument("--work", help="data and checkpoints (default: OUTPUT/work)")
    a.add_argument("--mixed-precision", choices=("mixed_bfloat16", "mixed_float16"),
                   help="pretrain and fine-tune in it (a GPU; default: float32)")
    a.set_defaults(func=run_ablations)
    f = which.add_parser("features", help="feature-based NER on CoNLL-2003 from a frozen "
                                          "encoder's layers (Table 7)",
                         epilog=examples(
                             "kbert experiments features --output results/features --train "
                             "conll2003/train.txt --dev conll2003/valid.txt",
                             "kbert experiments features --output results/features-quick "
                             "--train conll2003/train.txt --dev conll2003/valid.txt "
                             "--max-train-sentences 2000 --epochs 1"))
    f.add_argument("--output", required=True, help="results folder (re-run to resume)")
    f.add_argument("--model", default="minilm-l6-mlm-nsp", help="the frozen encoder")
    f.add_argument("--train", required=True, help="CoNLL-2003 train.txt")
    f.add_argument("--dev", required=True, help="CoNLL-2003 valid.txt")
    f.add_argument("--epochs", type=positive_int, default=3, help="tagger epochs")
    f.add_argument("--seeds", type=positive_int, default=1, help="tagger seeds per row")
    f.add_argument("--max-train-sentences", type=positive_int,
                   help="use the first N training sentences (default: all)")
    f.add_argument("--max-dev-sentences", type=positive_int,
                   help="use the first N dev sentences (default: all)")
    f.set_defaults(func=run_features)


def run_ablations(args: argparse.Namespace) -> None:
    from kbert.experiments import ablations
    if args.export and args.arrays:
        raise CliError("--export writes the folder that --arrays reads: give one of them")
    if args.export:
        size = ablations.export(args.export, quick=args.quick, variants=args.variants,
                                tasks=args.tasks, seeds=args.seeds, steps=args.steps,
                                mixed_precision=args.mixed_precision, shared=args.data,
                                vocab=args.vocab)
        print(f"wrote {args.export} ({size / 2 ** 20:.1f} MiB); run it where TensorFlow is not "
              f"with: kbert experiments ablations --output RESULTS --arrays {args.export}")
        return
    if not args.output:
        raise CliError("--output (the results folder) is required")
    fixed = (args.quick, args.seeds, args.steps, args.mixed_precision, args.data, args.vocab)
    if args.arrays and any(v not in (None, False) for v in fixed):
        raise CliError("--arrays runs the plan --export fixed: give --quick, --seeds, --steps, "
                       "--mixed-precision, --data and --vocab to --export")
    ablations.run(args.output, quick=args.quick, variants=args.variants, tasks=args.tasks,
                  seeds=args.seeds, steps=args.steps, mixed_precision=args.mixed_precision,
                  shared=args.data, vocab=args.vocab, arrays=args.arrays, work=args.work)
    print(f"wrote {os.path.join(args.output, 'ablations.md')}")


def run_features(args: argparse.Namespace) -> None:
    from kbert.experiments import features
    features.run(args.output, args.model, args.train, args.dev,
                 max_train_sentences=args.max_train_sentences,
                 max_valid_sentences=args.max_dev_sentences, epochs=args.epochs,
                 seeds=tuple(range(args.seeds)))
    print(f"wrote {os.path.join(args.output, 'feature_ner.md')}")
