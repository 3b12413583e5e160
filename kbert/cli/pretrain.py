"""`kbert pretrain`: `kbert.training.pretrain`."""

from __future__ import annotations

import argparse

from kbert.cli.common import (
    add_log_dir,
    add_mixed_precision,
    add_overwrite,
    check_log_dir,
    check_output_dir,
    examples,
)


def add_pretrain(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pretrain", help="masked LM + next sentence pretraining with model.fit",
                       epilog=examples(
                           "kbert pretrain --data shards/ --config mini --vocab vocab.txt "
                           "--output ckpt/ --steps 10000",
                           "kbert pretrain --data shards-128/ shards-512/ --phase-steps 9000 "
                           "1000 --config base --vocab vocab.txt --output ckpt/",
                           "kbert pretrain --text corpus/*.txt --init minilm-l6-mlm-nsp "
                           "--output ckpt/ --batch-size 64 --learning-rate 5e-5"))
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", nargs="+", metavar="DIR",
                        help="TFRecord shard directory (two for the 128-then-512 two-phase "
                             "schedule)")
    source.add_argument("--text", nargs="+", metavar="FILE",
                        help="text files, read, packed and masked anew each epoch in tf.data "
                             "(no shards)")
    p.add_argument("--text-mode", default="nsp", choices=("nsp", "full_sentences"),
                   help="--text: BERT's sentence pairs with NSP, or RoBERTa's FULL-SENTENCES "
                        "packing without NSP")
    p.add_argument("--data-service", metavar="ADDRESS",
                   help="--text: a tf.data service dispatcher (grpc://host:port) whose workers "
                        "prepare the batches (kbert data-service; default: none, this process "
                        "prepares them)")
    p.add_argument("--config", help="tiny, mini, small, medium, base, large or a config.json "
                                    "(default: base, or the --init checkpoint's)")
    p.add_argument("--init", help="checkpoint to continue from (missing MLM/NSP heads are new; "
                                  "default: none, random weights)")
    p.add_argument("--vocab", help="vocab.txt for a model trained from scratch (default: the "
                                   "--init checkpoint's)")
    p.add_argument("--output", required=True, help="the checkpoint directory to write")
    add_overwrite(p, "a checkpoint")
    p.add_argument("--batch-size", type=int, default=32, help="global batch per update")
    p.add_argument("--steps", type=int, default=1000, help="optimizer updates")
    p.add_argument("--phase-steps", type=int, nargs="+",
                   help="updates per --data phase (default: --steps, for one phase)")
    p.add_argument("--warmup-steps", type=int, help="default: 1%% of --steps")
    p.add_argument("--learning-rate", type=float, default=1e-4, help="peak learning rate")
    p.add_argument("--weight-decay", type=float, default=0.01,
                   help="AdamW/LAMB weight decay (not on biases and LayerNorm)")
    p.add_argument("--max-seq-length", type=int,
                   help="check the shards have this length (--text: the length, default 128)")
    p.add_argument("--max-predictions-per-seq", type=int,
                   help="check the shards have this P (--text: P, default 20)")
    p.add_argument("--optimizer", default="adamw", choices=("adamw", "lamb"),
                   help="adamw (the paper's Adam with decoupled weight decay) or lamb (large "
                        "batches)")
    add_mixed_precision(p)
    p.add_argument("--jit-compile", choices=("auto", "on", "off"), default="auto",
                   help="compile the train step: XLA on TensorFlow and JAX, torch.compile on "
                        "PyTorch (auto: on a GPU, and always on JAX; on a CPU, XLA is faster "
                        "than TensorFlow's graph on some CPUs and slower on others)")
    p.add_argument("--checkpoint-every", type=int, default=1000, help="updates between backups")
    p.add_argument("--accumulate", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--dynamic-masking", action="store_true", help="new masks for every batch")
    p.add_argument("--objective", default="mlm_nsp", choices=("mlm_nsp", "mlm", "ltr"),
                   help="mlm_nsp (the paper's), mlm (no NSP) or ltr (left-to-right LM on a "
                        "causal encoder): the section 5.1 ablations")
    p.add_argument("--strategy", default="auto",
                   choices=("auto", "default", "mirrored", "multi-worker", "tpu", "data-parallel"),
                   help="how training is distributed over devices and hosts (auto: from the "
                        "devices and the cluster environment)")
    p.add_argument("--tpu", help="TPU name or address for the cluster resolver (default: "
                                 "$TPU_NAME, or the local TPU)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--shuffle-buffer", type=int, default=10000,
                   help="examples shuffled together (records of the shards, or --text rows)")
    add_log_dir(p)
    p.add_argument("--save-dtype", default="float32", choices=("float32", "float16"),
                   help="dtype of the written weights")
    p.set_defaults(func=run_pretrain)


def run_pretrain(args: argparse.Namespace) -> None:
    from kbert import training
    check_output_dir(args.output, "checkpoint", args.overwrite)
    check_log_dir(args.log_dir, args.output)
    jit_modes: dict[str, str | bool] = {"auto": "auto", "on": True, "off": False}
    jit = jit_modes[args.jit_compile]
    result = training.pretrain(
        args.data, args.output, text=args.text, text_mode=args.text_mode,
        data_service=args.data_service, config=args.config, init=args.init, vocab=args.vocab,
        batch_size=args.batch_size, steps=args.steps, warmup_steps=args.warmup_steps,
        learning_rate=args.learning_rate, max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq, optimizer=args.optimizer,
        weight_decay=args.weight_decay, mixed_precision=args.mixed_precision, jit_compile=jit,
        checkpoint_every=args.checkpoint_every, accumulate=args.accumulate,
        dynamic_masking=args.dynamic_masking, phase_steps=args.phase_steps, seed=args.seed,
        strategy=args.strategy, tpu=args.tpu, log_dir=args.log_dir, save_dtype=args.save_dtype,
        shuffle_buffer=args.shuffle_buffer, objective=args.objective, overwrite=args.overwrite,
        verbose=0 if args.quiet else 1)
    if result.interrupted:
        raise KeyboardInterrupt
    print(f"wrote {result.output}: {result.steps} steps in {result.wall_seconds:.0f}s")
