"""Pretraining (MLM + NSP) with `model.fit` from NumPy arrays, on a machine without TensorFlow.

`kbert pretrain` reads TFRecord shards through tf.data. On a GPU box that has JAX or PyTorch but
no TensorFlow, tokenize once where TensorFlow is (`prepare`), carry the small `.npz` over, and
train there (`train`): the instances (sentence pairs, 50% NotNext, 15% masking with 80/10/10)
are made by the same code as `kbert create-pretraining-data`, the model, optimizer (AdamW, no
decay on LayerNorm/bias, warmup + linear decay, clipping 1.0) and loss are kbert's, and the
result is an ordinary kbert checkpoint directory.

    # where TensorFlow is: token ids of the documents; held-out shards as arrays
    python examples/pretrain_arrays.py prepare --input $(cat train.txt) --vocab vocab.txt \\
        --output corpus.npz
    python examples/pretrain_arrays.py prepare --shards heldout/ --output heldout.npz
    # anywhere (KERAS_BACKEND=jax or torch; a GPU with bfloat16)
    python examples/pretrain_arrays.py train --corpus corpus.npz --init minilm-l6-mlm-nsp \\
        --output out/ckpt --batch-size 256 --steps 3000 --learning-rate 2e-4 --eval heldout.npz \\
        --mixed-precision mixed_bfloat16
"""

import argparse
import json
import os
import sys
import time

from kbert.data import arrays  # NumPy and Keras: TensorFlow not needed
from kbert.hardware import MIXED_PRECISION

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def prepare(args):
    """Where TensorFlow is: documents → token ids, or held-out shards → feature arrays."""
    if args.shards:
        from kbert.data import inputs
        data = arrays.from_dataset(inputs.pretraining_dataset(args.shards, 4096,
                                                              is_training=False))
        arrays.save(args.output, data)
        print(f"{len(data['input_ids'])} instances → {args.output}")
        return
    data = arrays.token_documents(args.input, args.vocab, lower_case=not args.cased)
    arrays.save(args.output, data)
    print(f"{len(data['document_lengths'])} documents, {len(data['sentence_lengths'])} "
          f"sentences, {len(data['tokens'])} tokens → {args.output}")


def train(args):
    """Anywhere: BERT's instances from the token ids, then `fit`
    (kbert.training.pretraining_arrays)."""
    from kbert.data.pretraining import Options
    from kbert.training import evaluate_pretraining
    from kbert.training.pretraining_arrays import pretrain_arrays

    started = time.perf_counter()
    corpus = arrays.load(args.corpus)
    data = arrays.segment_pairs(corpus, Options(
        args.max_seq_length, args.max_predictions_per_seq, dupe_factor=args.dupe_factor,
        whole_word_mask=args.whole_word_mask, seed=args.seed))
    print(f"{len(data['input_ids'])} instances ({args.dupe_factor} passes over the documents) "
          f"in {time.perf_counter() - started:.0f} s; NotNext "
          f"{data['next_sentence_labels'].mean():.3f}", flush=True)
    vocab = corpus["vocab"].tolist()
    heldout = arrays.load(args.eval) if args.eval else None
    result = pretrain_arrays(
        data, args.output, config=args.config, init=args.init, vocab=vocab,
        batch_size=args.batch_size, steps=args.steps, warmup_steps=args.warmup_steps,
        learning_rate=args.learning_rate, weight_decay=args.weight_decay,
        log_every=args.log_every, seed=args.seed, mixed_precision=args.mixed_precision,
        max_seconds=args.max_seconds, save_dtype=args.save_dtype)
    summary = {"updates": result.steps, "batch_size": args.batch_size,
               "instances": len(data["input_ids"]),
               "wall_seconds": round(time.perf_counter() - started, 1),
               "history": {k: [round(float(v), 4) for v in vs]
                           for k, vs in result.history.items()}}
    if heldout:
        summary["heldout"] = evaluate_pretraining(result.model, heldout, 256)
    print(json.dumps(summary), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("prepare", help="text files → token ids (.npz); or shards → arrays")
    a.add_argument("--input", nargs="+", help="text files, one document each")
    a.add_argument("--vocab")
    a.add_argument("--cased", action="store_true")
    a.add_argument("--shards", help="TFRecord shard directory to turn into arrays instead")
    a.add_argument("--output", required=True)
    t = sub.add_parser("train", help="pretrain from a prepared corpus")
    t.add_argument("--corpus", required=True)
    t.add_argument("--init", help="checkpoint to continue from")
    t.add_argument("--config", help="preset or config.json for a model from scratch")
    t.add_argument("--output", required=True)
    t.add_argument("--batch-size", type=int, default=256)
    t.add_argument("--steps", type=int, default=1000)
    t.add_argument("--warmup-steps", type=int)
    t.add_argument("--learning-rate", type=float, default=1e-4)
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--dupe-factor", type=int, default=5)
    t.add_argument("--whole-word-mask", action="store_true")
    t.add_argument("--max-seq-length", type=int, default=128)
    t.add_argument("--max-predictions-per-seq", type=int, default=20)
    t.add_argument("--mixed-precision", choices=MIXED_PRECISION,
                   help="auto: mixed_bfloat16 where the machine has fast bfloat16")
    t.add_argument("--eval", help="held-out arrays from `prepare --shards`")
    t.add_argument("--log-every", type=int, default=200)
    t.add_argument("--max-seconds", type=float, help="stop (and save) after this wall time")
    t.add_argument("--save-dtype", default="float32", choices=("float32", "float16"))
    t.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.command == "prepare" and not args.shards and not (args.input and args.vocab):
        p.error("prepare needs --input and --vocab, or --shards")
    if args.command == "train" and (args.init is None) == (args.config is None):
        p.error("train needs exactly one of --init and --config")
    try:
        (prepare if args.command == "prepare" else train)(args)
    except (ValueError, OSError, KeyError) as e:     # bad files or a vocabulary mismatch
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
