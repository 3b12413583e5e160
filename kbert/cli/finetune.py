"""`kbert finetune` and `kbert evaluate`: `kbert.training.finetuning` (and
`kbert.retrieval.metrics` for `evaluate retrieve|rerank`)."""

from __future__ import annotations

import argparse

from kbert.cli import retrieval
from kbert.cli.common import (
    CliError,
    add_log_dir,
    add_mixed_precision,
    add_overwrite,
    check_log_dir,
    check_output_dir,
    examples,
    positive_int,
)
from kbert.cli.export import DTYPE_NAMES, RUNTIME_NAMES
from kbert.hardware import mixed_precision_policy

# The parser imports nothing heavy: `kbert --help`, every subcommand's `--help` and argument
# errors answer without TensorFlow or Keras (seconds and ~1 GB). Each `run_*` imports what it
# calls. The task names are therefore spelled out here; a test checks them against the registry
# (`kbert.tasks.registry.TASKS`).
JIT_COMPILE: dict[str, str | bool] = {"auto": "auto", "on": True, "off": False}  # --jit-compile
TASK_NAMES = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "squad",
              "squad2", "conll2003", "swag", "classify", "regress", "tag", "qa")


def add_columns(p: argparse.ArgumentParser) -> None:
    """The own-data tasks' column options (classify, regress, tag)."""
    p.add_argument("--text-column", help="classify/regress: the text column (default text); "
                                         "tag JSONL: the tokens key (default tokens)")
    p.add_argument("--text-pair-column", help="classify/regress: the second text's column "
                                              "(default: none, single texts)")
    p.add_argument("--label-column", help="classify/regress: the label column (default label); "
                                          "tag JSONL: the tags key (default tags)")


def task_options(args: argparse.Namespace) -> dict[str, str | None]:
    return {"text_column": args.text_column, "text_pair_column": args.text_pair_column,
            "label_column": args.label_column}


def add_finetune(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("finetune", help="fine-tune a checkpoint on a GLUE, SQuAD, CoNLL-2003 or "
                                        "SWAG task, or on your own CSV/TSV/JSONL, CoNLL or SQuAD "
                                        "file (classify, regress, tag, qa), keeping the best dev "
                                        "epoch",
                       epilog=examples(
                           "kbert finetune sst2 --init minilm-l6-mlm-nsp --train SST-2/train.tsv "
                           "--dev SST-2/dev.tsv --output out/sst2",
                           "kbert finetune classify --init minilm-l6-mlm-nsp --train reviews.csv "
                           "--dev dev.csv --text-column review --label-column stars "
                           "--output out/reviews",
                           "kbert finetune squad --init minilm-l6-mlm-nsp --train "
                           "train-v1.1.json --dev dev-v1.1.json --output out/squad "
                           "--batch-size 16 --epochs 2",
                           "kbert finetune retrieve --init minilm-l6-v2 --train pairs.jsonl "
                           "--mine-negatives 1 --output out/ret"))
    p.add_argument("task", metavar="TASK", choices=TASK_NAMES + retrieval.TRAINING_TASKS,
                   help=" ".join(TASK_NAMES + retrieval.TRAINING_TASKS))
    p.add_argument("--init", required=True, help="the checkpoint to start from")
    p.add_argument("--train", required=True, help="the training file")
    p.add_argument("--dev", help="the dev file scored after each epoch (needed, no default; "
                                 "retrieve, rerank: optional, else the last epoch is kept)")
    p.add_argument("--output", required=True, help="the checkpoint directory to write")
    add_overwrite(p, "a checkpoint")
    p.add_argument("--epochs", type=positive_int, help="default 3 (retrieve, rerank: 1)")
    p.add_argument("--learning-rate", type=float,
                   help="peak learning rate (default 3e-5; retrieve, rerank: 2e-5)")
    p.add_argument("--batch-size", type=int, default=32, help="examples per update")
    p.add_argument("--warmup", type=float, default=0.1, help="fraction of updates warming up")
    p.add_argument("--weight-decay", type=float, default=0.01,
                   help="AdamW weight decay (not on biases and LayerNorm)")
    p.add_argument("--max-seq-length", type=int, help="default 128 (SQuAD 384)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--tune-null-threshold", action="store_true",
                   help="squad2: store the null-score threshold with the best dev F1")
    p.add_argument("--max-train-examples", type=int,
                   help="train on the first N examples only (default: all)")
    p.add_argument("--no-bucketing", dest="bucketing", action="store_false",
                   help="shuffle freely instead of grouping similar lengths into a batch "
                        "(each batch is still padded to its longest row)")
    p.add_argument("--jit-compile", choices=("auto", "on", "off"), default="auto",
                   help="compile the train step: XLA on TensorFlow and JAX, torch.compile on "
                        "PyTorch (auto: XLA on a TensorFlow GPU and on JAX; PyTorch eager)")
    p.add_argument("--save-dtype", default="float32", choices=("float32", "float16"),
                   help="dtype of the written weights")
    p.add_argument("--label-names", type=label_names, metavar="NAME,NAME...",
                   help="classifier tasks: what the checkpoint calls its labels, comma "
                        "separated, in the order of the task's labels (sst2's 0,1 → "
                        "negative,positive; classify: the training file's labels, sorted) "
                        "(default: the files' values)")
    add_mixed_precision(p, default="float32")
    add_log_dir(p)
    add_columns(p)
    retrieval.add_retrieval_training(p)
    p.set_defaults(func=run_finetune)


def label_names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if len(names) < 2 or not all(names):
        raise argparse.ArgumentTypeError(f"{text!r}: give two or more comma-separated names")
    return names


def run_finetune(args: argparse.Namespace) -> None:
    import json

    mixed_precision_policy(args.mixed_precision)      # a bad name: one line, before any work
    check_output_dir(args.output, "checkpoint", args.overwrite)
    check_log_dir(args.log_dir, args.output)
    if args.task in retrieval.TRAINING_TASKS:
        if args.label_names:
            raise CliError(f"--label-names is for classifier tasks, not {args.task}")
        return retrieval.run_retrieval_training(args)
    if args.dev is None:
        raise CliError(f"{args.task} needs --dev (the file scored after each epoch)")
    args.epochs = 3 if args.epochs is None else args.epochs
    args.learning_rate = args.learning_rate or 3e-5
    from kbert.training import finetuning as finetune
    result = finetune.finetune(
        args.task, args.init, args.train, args.dev, args.output, epochs=args.epochs,
        learning_rate=args.learning_rate, batch_size=args.batch_size, warmup=args.warmup,
        max_seq_length=args.max_seq_length, seed=args.seed, weight_decay=args.weight_decay,
        tune_null_threshold=args.tune_null_threshold,
        jit_compile=JIT_COMPILE[args.jit_compile],
        save_dtype=args.save_dtype, max_train_examples=args.max_train_examples,
        bucketing=args.bucketing, task_options=task_options(args),
        mixed_precision=args.mixed_precision, overwrite=args.overwrite, log_dir=args.log_dir,
        label_names=args.label_names)
    print(f"wrote {result.output}: best epoch {result.best_epoch} of {args.epochs} "
          f"({result.train_examples} training examples, {result.precision}, "
          f"{result.wall_seconds:.0f}s)")
    print(json.dumps(result.best_scores))


def add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="score a fine-tuned checkpoint on a task's file (prints "
                                        "one JSON object)",
                       epilog=examples(
                           "kbert evaluate sst2 --model out/sst2 --data SST-2/dev.tsv",
                           "kbert evaluate squad --model minilm-l6-squad --data dev-v1.1.json "
                           "--dtype bfloat16",
                           "kbert evaluate retrieve --model minilm-l6-v2 --data dev-v1.1.json "
                           "--hybrid on",
                           "kbert evaluate open-qa --model minilm-l6-squad --retriever "
                           "minilm-l6-v2 --data dev-v1.1.json --passages 5"))
    p.add_argument("task", metavar="TASK", choices=TASK_NAMES + retrieval.RETRIEVAL_TASKS,
                   help=" ".join(TASK_NAMES + retrieval.RETRIEVAL_TASKS))
    p.add_argument("--model", required=True, help="the fine-tuned checkpoint")
    p.add_argument("--data", required=True, help="the file to score")
    retrieval.add_retrieval_evaluate(p)
    p.add_argument("--batch-size", type=int, default=64, help="examples per batch")
    p.add_argument("--max-seq-length", type=int, help="default 128 (SQuAD 384)")
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES,
                   help="the encoder's precision (default float32; auto: bfloat16 where the "
                        "CPU has AMX or AVX-512 BF16; int8 on --runtime openvino); the "
                        "heads stay float32")
    p.add_argument("--runtime", choices=RUNTIME_NAMES,
                   help="score what kbert.load(..., runtime=) serves: keras (default), the "
                        "exported openvino / onnx graphs, or auto (the fastest here)")
    add_columns(p)
    p.set_defaults(func=run_evaluate)


def run_evaluate(args: argparse.Namespace) -> None:
    if args.task in retrieval.RETRIEVAL_TASKS:
        return retrieval.run_retrieval_evaluate(args)
    import json

    from kbert.training import finetuning as finetune
    scores = finetune.evaluate(args.task, args.model, args.data, batch_size=args.batch_size,
                               max_seq_length=args.max_seq_length,
                               task_options=task_options(args), dtype=args.dtype,
                               runtime=args.runtime)
    print(json.dumps(scores))
