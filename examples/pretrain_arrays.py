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
import multiprocessing
import os
import random
import sys
import time

import numpy as np

from kbert.data.pretraining import FEATURES  # pure Python: no TensorFlow

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
INPUTS = ("input_ids", "segment_ids", "input_mask", "masked_lm_positions")  # the model's inputs


# --- prepare (needs TensorFlow) -----------------------------------------------------------------
def prepare(args):
    if args.shards:
        from kbert.data import inputs
        ds = inputs.pretraining_dataset(args.shards, 4096, is_training=False)
        parts = [{k: v.numpy() for k, v in batch.items()} for batch in ds]
        arrays = {k: np.concatenate([p[k] for p in parts]) for k in FEATURES}
        np.savez_compressed(args.output, **arrays)
        print(f"{len(arrays['input_ids'])} instances → {args.output}")
        return
    from kbert.config import read_vocab
    from kbert.data.pretraining import iter_blocks, tokenize_documents
    from kbert.tokenizer import Tokenizer
    tokenizer = Tokenizer(read_vocab(args.vocab), not args.cased)
    tokens, sentence_lengths, document_lengths = [], [], []
    for block in iter_blocks(args.input):
        for document in tokenize_documents(block, tokenizer):
            document_lengths.append(len(document))
            for sentence in document:
                sentence_lengths.append(len(sentence))
                tokens.extend(sentence)
    np.savez_compressed(args.output, tokens=np.asarray(tokens, np.uint16),
                        sentence_lengths=np.asarray(sentence_lengths, np.int32),
                        document_lengths=np.asarray(document_lengths, np.int32),
                        vocab=np.asarray(read_vocab(args.vocab)))
    print(f"{len(document_lengths)} documents, {len(sentence_lengths)} sentences, "
          f"{len(tokens)} tokens → {args.output}")


# --- instances (pure Python, the code of `kbert create-pretraining-data`) ------------------------
_DOCUMENTS = None


class _Vocabulary:
    def __init__(self, vocab):
        from kbert.data.pretraining import Vocabulary
        self.vocab = list(vocab)
        self.cls_id, self.sep_id, self.mask_id = (self.vocab.index(t) for t in
                                                  ("[CLS]", "[SEP]", "[MASK]"))
        self.masking = Vocabulary(self)


def _instances(job):
    from kbert.data.pretraining import create_instances_from_document
    seed, dupe, start, stop, options, vocab = job
    rng = random.Random(f"{seed}/{dupe}/{start}")
    out = []
    for d in range(start, stop):
        out.extend(create_instances_from_document(_DOCUMENTS, d, options, vocab.masking, rng))
    return out


def make_instances(corpus, dupe_factor, seed, max_seq_length=128, max_predictions=20,
                   whole_word_mask=False, workers=None):
    """Token-id documents → padded feature arrays, `dupe_factor` passes with different masks."""
    global _DOCUMENTS
    from kbert.data.pretraining import Options
    data = np.load(corpus)
    tokens = data["tokens"].astype(np.int64).tolist()
    ends = np.cumsum(data["sentence_lengths"])
    sentences = [tokens[e - n:e] for e, n in zip(ends, data["sentence_lengths"])]
    doc_ends = np.cumsum(data["document_lengths"])
    _DOCUMENTS = [sentences[e - n:e] for e, n in zip(doc_ends, data["document_lengths"])]
    vocab = _Vocabulary(data["vocab"].tolist())
    options = Options(max_seq_length, max_predictions, 0.15, 0.1, dupe_factor, whole_word_mask,
                      seed)
    step = 16
    jobs = [(seed, dupe, s, min(s + step, len(_DOCUMENTS)), options, vocab)
            for dupe in range(dupe_factor) for s in range(0, len(_DOCUMENTS), step)]
    with multiprocessing.get_context("fork").Pool(workers or os.cpu_count()) as pool:
        instances = [i for part in pool.imap(_instances, jobs, chunksize=4) for i in part]
    random.Random(f"{seed}/shuffle").shuffle(instances)
    n, T, P = len(instances), max_seq_length, max_predictions
    arrays = {k: np.zeros((n, P if k.startswith("masked") else T), np.int32) for k in FEATURES}
    arrays["masked_lm_weights"] = np.zeros((n, P), np.float32)
    arrays["next_sentence_labels"] = np.zeros((n, 1), np.int32)
    for i, inst in enumerate(instances):
        k, m = len(inst.input_ids), len(inst.masked_lm_positions)
        arrays["input_ids"][i, :k] = inst.input_ids
        arrays["segment_ids"][i, :k] = inst.segment_ids
        arrays["input_mask"][i, :k] = 1
        arrays["masked_lm_positions"][i, :m] = inst.masked_lm_positions
        arrays["masked_lm_ids"][i, :m] = inst.masked_lm_ids
        arrays["masked_lm_weights"][i, :m] = 1.0
        arrays["next_sentence_labels"][i, 0] = int(inst.is_random_next)
    return arrays, vocab.vocab


def split(arrays):
    x = {k: arrays[k] for k in INPUTS}
    y = {"mlm_logits": arrays["masked_lm_ids"], "nsp_logits": arrays["next_sentence_labels"]}
    w = {"mlm_logits": arrays["masked_lm_weights"],
         "nsp_logits": np.ones(len(arrays["input_ids"]), np.float32)}
    return x, y, w


def batches(arrays, batch_size, seed):
    """Endless (x, y, sample_weight) batches of `arrays` for `fit`, reshuffled every pass (one
    fancy index per array and batch)."""
    x, y, w = split(arrays)
    n = len(arrays["input_ids"])
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(n)
        for s in range(0, n - batch_size + 1, batch_size):
            idx = order[s:s + batch_size]
            yield tuple({k: v[idx] for k, v in part.items()} for part in (x, y, w))


def evaluate(model, arrays, batch_size=256):
    """Held-out MLM and NSP accuracy, counted exactly (every real prediction once)."""
    correct = total = nsp = 0
    n = len(arrays["input_ids"])
    for s in range(0, n, batch_size):
        x, y, w = split({k: v[s:s + batch_size] for k, v in arrays.items()})
        out = model.predict_on_batch(x)
        mlm = np.argmax(np.asarray(out["mlm_logits"], np.float32), -1)
        real = w["mlm_logits"] > 0
        correct += int(((mlm == y["mlm_logits"]) & real).sum())
        total += int(real.sum())
        nsp += int((np.argmax(np.asarray(out["nsp_logits"], np.float32), -1)
                    == y["nsp_logits"][:, 0]).sum())
    return {"mlm_accuracy": correct / total, "nsp_accuracy": nsp / n, "examples": n}


# --- train (no TensorFlow needed on JAX/PyTorch) ------------------------------------------------
def train(args):
    import keras

    from kbert import checkpoint
    from kbert.optimization import create_optimizer
    from kbert.training import build_pretrainer
    from kbert.training.callbacks import StopAfter, TrainingMetrics

    started = time.perf_counter()
    keras.utils.set_random_seed(args.seed)
    arrays, vocab = make_instances(args.corpus, args.dupe_factor, args.seed,
                                   args.max_seq_length, args.max_predictions_per_seq,
                                   args.whole_word_mask)
    n = len(arrays["input_ids"])
    print(f"{n} instances ({args.dupe_factor} passes over the documents) in "
          f"{time.perf_counter() - started:.0f} s; NotNext "
          f"{arrays['next_sentence_labels'].mean():.3f}", flush=True)
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy(args.mixed_precision)
    model, _, lower = build_pretrainer(args.config, args.init, vocab, dtype=args.mixed_precision)
    warmup = args.warmup_steps if args.warmup_steps is not None else args.steps // 100
    model.compile(create_optimizer("adamw", args.learning_rate, args.steps, warmup,
                                   args.weight_decay),
                  jit_compile=keras.backend.backend() != "torch")
    heldout = dict(np.load(args.eval)) if args.eval else None
    if heldout:
        print("held-out before:", json.dumps(evaluate(model, heldout)), flush=True)

    class Deadline(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if args.max_seconds and time.perf_counter() - started > args.max_seconds:
                print(f"\nstopping at the {args.max_seconds} s limit", flush=True)
                self.model.stop_training = True

    epoch_steps = args.log_every
    history = model.fit(batches(arrays, args.batch_size, args.seed), steps_per_epoch=epoch_steps,
                        epochs=-(-args.steps // epoch_steps),
                        callbacks=[TrainingMetrics(args.batch_size), StopAfter(args.steps),
                                   Deadline()], verbose=2)
    steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    result = {"updates": steps, "batch_size": args.batch_size, "instances": n,
              "wall_seconds": round(time.perf_counter() - started, 1),
              "history": {k: [round(float(v), 4) for v in vs] for k, vs in
                          history.history.items()}}
    if heldout:
        result["heldout"] = evaluate(model, heldout)
    checkpoint.save(args.output, model, vocab=vocab, do_lower_case=lower, dtype=args.save_dtype)
    print(json.dumps(result), flush=True)


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
    t.add_argument("--mixed-precision", choices=("mixed_bfloat16", "mixed_float16"))
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
