"""What `kbert.load` returns: a checkpoint with its tokenizer, ready for inference.

Every method takes one input or a list. A list is tokenized in one graph call, sorted by length
and run in batches of at most `batch_size` through a compiled forward pass, so repeated calls
reuse a few traced graphs instead of dispatching every layer eagerly. JAX compiles for static
shapes: each batch is padded to its bucket shape (see `kbert.forward`; batch a power of two),
one `jax.jit` compilation per method and bucket. TensorFlow (a `tf.function` with unknown sizes)
and PyTorch (a TorchScript trace) compile once per method and run every batch at its own packed
shape, without padding compute.

Example:
>>> import kbert                                                        # doctest: +SKIP
>>> m = kbert.load("saved_models/minilm-l6-mlm-nsp")                    # doctest: +SKIP
>>> m.fill_mask("The capital of France is [MASK].", top_k=3)           # doctest: +SKIP
>>> m.fill_mask(["A [MASK] dog.", "The [MASK] sat."], batch_size=32)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import keras
import numpy as np

from kbert import checkpoint as checkpoint_lib
from kbert import runtime as runtime_lib
from kbert.runtime import graphs
from kbert.runtime.batching import bucket_batch, bucket_length, pad_batch, plan_batches
from kbert.tokenizer import Tokenizer

Texts = Union[str, Sequence[str]]


class MissingHeadError(ValueError):
    """The checkpoint lacks the head a method needs."""


def _softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def _positive_int(method, name, value, minimum=1):
    """`value` as an int >= minimum, or a one-line ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{method}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _texts(method, value, what="text", allow_empty=False):
    """(list of strings, whether one string was given); refuses non-string input, and empty
    text unless `allow_empty` (an empty text still has a [CLS] vector, a class and no entities;
    it has no next sentence and no answer)."""
    single = isinstance(value, str)
    items = [value] if single else value
    if not isinstance(items, Sequence) or isinstance(items, (bytes, dict)):
        raise ValueError(f"{method}: {what} must be a string or a list of strings, "
                         f"got {type(value).__name__}")
    items = list(items)
    if not items:
        raise ValueError(f"{method}: the list of {what}s is empty")
    for i, item in enumerate(items):
        where = f"the {what}" if single else f"{what} {i}"
        if not isinstance(item, str):
            raise ValueError(f"{method}: {where} is a {type(item).__name__}, not a string")
        if not allow_empty and not item.strip():
            raise ValueError(f"{method}: {where} is empty")
    return items, single


def _pairs(method, first, second, what=("sentence_a", "sentence_b"), allow_empty=False):
    """Two parallel lists of texts (both single strings or both lists of the same length)."""
    a, single_a = _texts(method, first, what[0], allow_empty)
    b, single_b = _texts(method, second, what[1], allow_empty)
    if single_a != single_b or len(a) != len(b):
        raise ValueError(f"{method}: {what[0]} and {what[1]} must both be strings or lists of "
                         f"the same length (got {len(a)} and {len(b)})")
    return a, b, single_a


class Bert:
    """A BERT checkpoint for inference: `fill_mask`, `next_sentence`, `answer`, `classify`,
    `tag`, `embed`.

    `backbone`, `heads` and `model` (a Keras task model for `fit`, `summary()`, export) share
    the same weights. `runtime` and `dtype` say what runs the passes (see `kbert.runtime`):
    every method gives the same results on each, within the precision's tolerance.
    """

    def __init__(self, ckpt: checkpoint_lib.Checkpoint, runtime: str = "keras",
                 dtype: str = "float32", graphs_folder: str | None = None,
                 threads: int | None = None):
        self.checkpoint = ckpt
        self.config = ckpt.config
        self.backbone = ckpt.backbone
        self.heads = ckpt.heads
        self.tokenizer = Tokenizer(ckpt.vocab, lower_case=ckpt.do_lower_case)
        self.max_seq_length = self.config.max_position_embeddings
        self._model = None
        self.runtime, self.dtype = runtime, dtype
        self._runner = runtime_lib.make_runner(ckpt, runtime, dtype, graphs_folder, threads)
        tok = self.tokenizer
        self._fill_row = {"input_ids": [tok.cls_id, tok.sep_id], "segment_ids": [0, 0],
                          "input_mask": [1, 1], "masked_lm_positions": [0]}

    @property
    def model(self) -> keras.Model:
        if self._model is None:
            self._model = self.checkpoint.task_model()
        return self._model

    def task_model(self, task: str | None = None) -> keras.Model:
        return self.checkpoint.task_model(task)

    @property
    def trace_count(self) -> int:
        """How many times a compiled forward pass was traced (once per bucket shape)."""
        return self._runner.traces

    @property
    def bucket_shapes(self) -> list:
        """The (method, input shapes) the forward pass has run on: one compiled function each."""
        return sorted(self._runner.shapes, key=repr)

    def _require(self, head, method):
        if head not in self.heads:
            raise MissingHeadError(
                f"{method} needs a '{head}' head, but checkpoint {self.checkpoint.path} has "
                f"{', '.join(self.heads) or 'no heads'}")
        return self.heads[head]

    def _encode_pairs(self, first, second):
        """Id lists of both sides of each pair, tokenized in one graph call."""
        ids = self.tokenizer.encode_batch(list(first) + list(second))
        return ids[:len(first)], ids[len(first):]

    def _run(self, kind, features, batch_size):
        """Runs one batch of packed numpy features padded to its bucket shape; returns the
        output rows of the real examples."""
        n, width = features["input_ids"].shape
        length = max(width, bucket_length(width, self.max_seq_length))
        rows = bucket_batch(n, batch_size)
        out = self._runner(kind, features, pad_batch(features, rows, length, self._fill_row))
        return keras.tree.map_structure(lambda x: x[:n], out)

    def _batched(self, kind, firsts, seconds, batch_size, extra=None, max_seq_length=None):
        """Packs id lists in length-sorted batches and runs `kind` on each: [(indices,
        features, output)] in batch order (truncated at `max_seq_length`, default the
        model's)."""
        cap = (max_seq_length or self.max_seq_length) - 3     # what packing keeps
        lengths = [min(cap, len(a) + (len(b) if b is not None else 0))
                   for a, b in zip(firsts, seconds)]
        out = []
        for idx in plan_batches(lengths, batch_size, self.config.hidden_size,
                                split=not self._runner.pads):
            features, _ = self.tokenizer.pack(
                [firsts[i] for i in idx],
                None if seconds[0] is None else [seconds[i] for i in idx],
                max_seq_length=max_seq_length or self.max_seq_length)
            if extra is not None:
                features.update(extra(idx, features))
            out.append((idx, features, self._run(kind, features, batch_size)))
        return out

    # --- masked LM --------------------------------------------------------------------------
    def fill_mask(self, text: Texts, top_k: int = 5,
                  batch_size: int = 32) -> list[list[dict]] | list[list[list[dict]]]:
        """Top-k fillers for each `[MASK]` in `text`: one list per mask, best first.

        Each entry is {"token": str, "score": float} (softmax probability). A list of texts
        gives one such result per text, in order.
        """
        texts, single = _texts("fill_mask", text)
        top_k = _positive_int("fill_mask", "top_k", top_k)
        batch_size = _positive_int("fill_mask", "batch_size", batch_size)
        self._require("mlm", "fill_mask")
        ids = self.tokenizer.encode_batch(texts)
        mask_id = self.tokenizer.mask_id
        for i, row in enumerate(ids):
            if mask_id not in row:
                where = "the text has" if single else f"text {i} has"
                raise ValueError(f"fill_mask: {where} no [MASK] token to fill")
        positions = {}

        def mask_positions(idx, features):
            found = [np.flatnonzero(row == mask_id) for row in features["input_ids"]]
            for i, p in zip(idx, found):
                if len(p) < ids[i].count(mask_id):
                    where = "a [MASK]" if single else f"a [MASK] of text {i}"
                    raise ValueError(f"fill_mask: {where} lies beyond the first "
                                     f"{self.max_seq_length} tokens, which the model cannot see")
                positions[i] = p
            width = bucket_batch(max(len(p) for p in found), 1 << 30)
            out = np.zeros((len(found), width), "int32")
            for r, p in enumerate(found):
                out[r, :len(p)] = p
            return {"masked_lm_positions": out}

        results = [None] * len(texts)
        vocab = self.tokenizer.vocab
        k = min(top_k, len(vocab))
        kind = ("mlm", min(bucket_batch(k, 1 << 30), len(vocab)))   # few distinct graphs
        for idx, _, (values, best, lse) in self._batched(kind, ids, [None] * len(ids),
                                                         batch_size, mask_positions):
            probs = np.exp(values[..., :k].astype(np.float64) - lse[..., None])
            for r, i in enumerate(idx):
                results[i] = [[{"token": vocab[j], "score": float(p)}
                               for j, p in zip(best[r, m, :k], probs[r, m])]
                              for m in range(len(positions[i]))]
        return results[0] if single else results

    # --- next sentence ----------------------------------------------------------------------
    def next_sentence(self, sentence_a: Texts, sentence_b: Texts,
                      batch_size: int = 32) -> dict | list[dict]:
        """{"is_next": P(B follows A)} from the NSP head (a list of them for lists of pairs)."""
        a, b, single = _pairs("next_sentence", sentence_a, sentence_b)
        batch_size = _positive_int("next_sentence", "batch_size", batch_size)
        self._require("nsp", "next_sentence")
        ids_a, ids_b = self._encode_pairs(a, b)
        results = [None] * len(a)
        for idx, _, logits in self._batched("nsp", ids_a, ids_b, batch_size):
            probs = _softmax(logits.astype(np.float64))
            for r, i in enumerate(idx):
                results[i] = {"is_next": float(probs[r, 0])}
        return results[0] if single else results

    # --- sentence embeddings ----------------------------------------------------------------
    @property
    def embedding_defaults(self) -> dict:
        """{"pooling", "max_seq_length"} `embed` uses when not told: a sentence encoder's
        recorded ones (config.json's `sentence_embedding`), else `[CLS]` and the model's
        longest input (`Checkpoint.embedding_defaults`)."""
        return self.checkpoint.embedding_defaults

    def embed(self, texts: Texts, pooling: str | None = None, batch_size: int = 32,
              max_seq_length: int | None = None) -> np.ndarray:
        """Sentence vectors [n, hidden_size]: the `[CLS]` hidden state or the masked mean.

        A sentence encoder's checkpoint (config.json's `sentence_embedding`, written when
        converting a sentence-transformers model) sets the defaults: its pooling and the
        longest input it was trained on (e.g. 256 tokens for all-MiniLM-L6-v2), where texts
        are truncated; otherwise `[CLS]` pooling and the model's `max_seq_length`. Vectors are
        not normalized (`kbert.retrieval` normalizes them).
        """
        defaults = self.embedding_defaults
        pooling = pooling or defaults["pooling"]
        if pooling not in ("cls", "mean"):
            raise ValueError(f"embed: pooling must be 'cls' or 'mean', got {pooling!r}")
        texts, _ = _texts("embed", texts, allow_empty=True)
        batch_size = _positive_int("embed", "batch_size", batch_size)
        length = min(_positive_int("embed", "max_seq_length",
                                   max_seq_length or defaults["max_seq_length"], 2),
                     self.max_seq_length)
        ids = self.tokenizer.encode_batch(texts)
        out = np.zeros((len(texts), self.config.hidden_size), np.float32)
        for idx, _, vectors in self._batched("embed_" + pooling, ids, [None] * len(ids),
                                             batch_size, max_seq_length=length):
            out[idx] = vectors
        return out

    def hidden_states(self, text: Texts, layers: Sequence[int] = (-1,),
                      batch_size: int = 32) -> dict | list[dict]:
        """Chosen hidden layers per WordPiece token, as google-research's `extract_features.py`
        gives them (the feature-based approach, paper section 5.3 and Table 7).

        Layer 0 is the embedding output and `num_layers` the last; negative numbers count from
        the end (-1 the last, -4 the fourth from last). Returns, per text, {"tokens": the
        pieces with [CLS] and [SEP], "features": float32 [tokens, len(layers), hidden_size]};
        e.g. Table 7's "concat last four" is `features.reshape(len(tokens), -1)` for
        `layers=(-1, -2, -3, -4)` and "sum last four" is `features.sum(axis=1)`.
        """
        texts, single = _texts("hidden_states", text, allow_empty=True)
        batch_size = _positive_int("hidden_states", "batch_size", batch_size)
        count = self.config.num_layers + 1
        layers = [layers] if isinstance(layers, int) else list(layers)
        if not layers or not all(isinstance(i, int) and -count <= i < count for i in layers):
            raise ValueError(f"hidden_states: layers must be integers from {-count} to "
                             f"{count - 1} (0 the embeddings, {count - 1} the last layer), "
                             f"got {layers!r}")
        ids = self.tokenizer.encode_batch(texts)
        vocab, results = self.tokenizer.vocab, [None] * len(texts)
        kind = ("hidden", tuple(i % count for i in layers))
        for idx, features, states in self._batched(kind, ids, [None] * len(ids), batch_size):
            for r, i in enumerate(idx):
                n = int(features["input_mask"][r].sum())
                results[i] = {"tokens": [vocab[j] for j in features["input_ids"][r, :n]],
                              "features": states[r, :n]}
        return results[0] if single else results

    # --- fine-tuned heads -------------------------------------------------------------------
    def classify(self, text: Texts, text_pair: Texts | None = None,
                 batch_size: int = 32) -> dict[str, float] | list[dict[str, float]]:
        """{label: probability} (or {"score": value} for a regression head); a list of them
        for a list of texts."""
        if text_pair is None:
            first, single = _texts("classify", text, allow_empty=True)
            second = [None] * len(first)
        else:
            first, second, single = _pairs("classify", text, text_pair, ("text", "text_pair"),
                                           allow_empty=True)
        batch_size = _positive_int("classify", "batch_size", batch_size)
        self._require("classifier", "classify")
        options = self.checkpoint.head_options.get("classifier", {})
        if text_pair is None:
            ids_a, ids_b = self.tokenizer.encode_batch(first), [None] * len(first)
        else:
            ids_a, ids_b = self._encode_pairs(first, second)
        results = [None] * len(first)
        for idx, _, logits in self._batched("classifier", ids_a, ids_b, batch_size):
            for r, i in enumerate(idx):
                row = logits[r].astype(np.float64)
                if options.get("problem") == "regression":
                    results[i] = {"score": float(row[0])}
                    continue
                labels = options.get("labels") or [f"LABEL_{j}" for j in range(len(row))]
                results[i] = {label: float(p) for label, p in zip(labels, _softmax(row))}
        return results[0] if single else results

    def answer(self, question: Texts, context: Texts, top_k: int = 1, max_seq_length: int = 384,
               doc_stride: int = 128, max_answer_length: int = 30, batch_size: int = 32,
               max_query_length: int = 64, n_best: int = 20) -> list[dict] | list[list[dict]]:
        """Extractive QA: the `top_k` best spans of `context`, best first.

        Each is {"text", "score" (probability among the n-best), "start", "end"} with
        character offsets into `context` (end exclusive). Contexts longer than one window are
        read in windows `doc_stride` tokens apart. For a SQuAD v2.0 model the best may be the
        empty answer ("", start = end = -1) when the null score beats the best span by more
        than the checkpoint's `null_score_diff_threshold`. Lists of questions and contexts give
        one such list per pair; all their windows run in shared batches. Questions keep their
        first `max_query_length` tokens; the spans are built from the `n_best` best starts and
        ends of each window and scored among the `n_best` best (as the SavedModel's options
        of the same names).
        """
        from kbert.finetune import squad, squad_postprocess

        questions, contexts, single = _pairs("answer", question, context,
                                             ("question", "context"))
        top_k = _positive_int("answer", "top_k", top_k)
        max_seq_length = _positive_int("answer", "max_seq_length", max_seq_length, 8)
        doc_stride = _positive_int("answer", "doc_stride", doc_stride)
        max_answer_length = _positive_int("answer", "max_answer_length", max_answer_length)
        max_query_length = _positive_int("answer", "max_query_length", max_query_length)
        n_best = _positive_int("answer", "n_best", n_best)
        batch_size = _positive_int("answer", "batch_size", batch_size)
        self._require("span", "answer")
        options = self.checkpoint.head_options.get("span", {})
        version_2 = str(options.get("version", "1.1")) == "2.0"
        examples = [squad.SquadExample(str(i), q, c, [])
                    for i, (q, c) in enumerate(zip(questions, contexts))]
        features = squad.encode_squad(self.tokenizer, examples, is_training=False,
                                      max_seq_length=min(max_seq_length, self.max_seq_length),
                                      doc_stride=doc_stride, max_query_length=max_query_length)
        logits = self._span_logits(features, batch_size)
        result = squad_postprocess.postprocess(
            examples, features, logits[..., 0], logits[..., 1], version_2=version_2,
            null_score_diff_threshold=float(options.get("null_score_diff_threshold", 0.0)),
            n_best_size=max(n_best, top_k),
            max_answer_length=max_answer_length)
        answers = []
        for example in examples:
            nbest = result.nbest[example.qas_id]
            if version_2:  # the threshold decides whether "" or the best span comes first
                empty = [e for e in nbest if e["text"] == ""]
                spans = [e for e in nbest if e["text"] != ""]
                first = result.predictions[example.qas_id] == ""
                nbest = empty + spans if first else spans + empty
            answers.append([{"text": e["text"], "score": e["probability"], "start": e["start"],
                             "end": e["end"]} for e in nbest[:top_k]])
        return answers[0] if single else answers

    def _span_logits(self, features, batch_size):
        """Start/end logits [W, T, 2] of every window; each window's columns past its own
        example's widest window are -inf (as if the example had been run alone)."""
        inputs = features.features
        n, width = inputs["input_ids"].shape
        lengths = inputs["input_mask"].sum(1)
        example_width = np.zeros(n, int)
        for e in np.unique(features.example_index):
            rows = features.example_index == e
            example_width[rows] = lengths[rows].max()
        out = np.full((n, width, 2), -np.inf, np.float32)
        for idx in plan_batches(example_width, batch_size, self.config.hidden_size,
                                split=not self._runner.pads):
            own = int(example_width[idx].max())
            batch = {k: inputs[k][idx][:, :own]
                     for k in ("input_ids", "segment_ids", "input_mask")}
            logits = self._run("span", batch, batch_size)
            for r, i in enumerate(idx):
                out[i, :example_width[i]] = logits[r, :example_width[i]]
        return out

    def tag(self, text: Texts, batch_size: int = 32) -> list[dict] | list[list[dict]]:
        """Named entities in `text`: [{"text", "label", "start", "end", "score"}] (a list of
        them for a list of texts).

        Words are the tokenizer's basic-tokenized words; each is labelled at its first
        WordPiece (as in training) and IOB tags are grouped into entities (conlleval rules).
        """
        from kbert.finetune.metrics import entities

        texts, single = _texts("tag", text, allow_empty=True)
        batch_size = _positive_int("tag", "batch_size", batch_size)
        self._require("tagger", "tag")
        labels = self.checkpoint.head_options["tagger"]["labels"]
        tokens = self.tokenizer.batch_tokenize_with_char_offsets(texts)
        results = [[] for _ in texts]
        ids = [t[0][:self.max_seq_length - 2] for t in tokens]
        keep = [i for i, row in enumerate(ids) if row]       # no tokens (e.g. only symbols HF
        if not keep:                                         # drops): no entities
            return results[0] if single else results
        batches = self._batched("tagger", [ids[i] for i in keep], [None] * len(keep),
                                batch_size)
        for idx, _, logits in batches:
            for r, j in enumerate(idx):
                i = keep[j]
                results[i] = self._entities(texts[i], ids[i], tokens[i][1], tokens[i][2],
                                            logits[r], labels, entities)
        return results[0] if single else results

    def _entities(self, text, ids, starts, ends, logits, labels, entities):
        pieces = self.tokenizer.convert_ids_to_tokens(ids)
        first = [i for i, t in enumerate(pieces) if i == 0 or not t.startswith("##")]
        word_end = [(first[k + 1] if k + 1 < len(first) else len(ids)) - 1
                    for k in range(len(first))]
        probs = _softmax(logits.astype(np.float64))[1:len(ids) + 1]     # drop [CLS]
        word_labels = [labels[int(probs[i].argmax())] for i in first]
        out = []
        for kind, a, b in entities(word_labels):
            start, end = starts[first[a]], ends[word_end[b]]
            score = float(np.mean([probs[first[k]].max() for k in range(a, b + 1)]))
            out.append({"text": text[start:end], "label": kind, "start": int(start),
                        "end": int(end), "score": score})
        return out

    # --- retrieval (kbert.retrieval does the work) ------------------------------------------
    def search(self, queries: Texts, passages_or_index, top_k: int = 10,
               hybrid: bool | None = None,
               batch_size: int = 16) -> list[dict] | list[list[dict]]:
        """The `top_k` passages nearest each query, best first: [{"index", "text", "score"}]
        (one such list per query for a list of queries). `passages_or_index` is a list of
        texts or a `kbert.retrieval.Index` built with this model; `hybrid` fuses BM25 with
        the dense scores (default: the index's option; off for a list; see
        `kbert.retrieval.search`)."""
        from kbert.retrieval import search
        return search.search(self, queries, passages_or_index, top_k=top_k, hybrid=hybrid,
                             batch_size=batch_size)

    def rerank(self, query: str, passages: Sequence[str], top_k: int | None = None,
               batch_size: int = 32) -> list[dict]:
        """Passages sorted by a cross-encoder's relevance to `query`: [{"index", "text",
        "score"}], best first (a 'classifier' head scoring pairs, or the 'nsp' head)."""
        from kbert.retrieval import rerank
        return rerank.rerank(self, query, passages, top_k=top_k, batch_size=batch_size)


def load(path: str, dtype: str | None = None, runtime: str | None = None,
         threads: int | None = None) -> Bert:
    """Loads a checkpoint directory (or a shipped name) for inference (see `Bert`).

    dtype: "float32" (the default for a checkpoint: the reference, equal to HF transformers to
        1e-5; an export directory's default is the dtype it was exported in),
        "bfloat16", "int8" (runtimes "openvino" and "onnx"), or "auto": bfloat16 where the CPU
        multiplies it natively (AMX, AVX-512 BF16; `kbert.hardware`), else float32.
    runtime: "keras" (the default for a checkpoint), "openvino" or "onnx" (the passes as
        exported graphs, made on first use or read from a `kbert export --format` directory,
        whose format is then the default).
    threads: at most this many threads for the OpenVINO / ONNX Runtime graphs (default: all
        cores).
    """
    directory = checkpoint_lib.resolve(path)
    manifest = graphs.read_manifest(directory)
    if runtime is None:
        runtime = manifest["format"] if manifest else "keras"
    if dtype is None:
        dtype = manifest["dtype"] if manifest and manifest["format"] == runtime else "float32"
    runtime, dtype = runtime_lib.resolve(runtime, dtype)
    # bfloat16 in the encoder; the heads (so the logits) and the poolings stay float32.
    ckpt = checkpoint_lib.load(directory, dtype="bfloat16" if runtime == "keras" and
                               dtype == "bfloat16" else None, head_dtype="float32")
    folder = manifest["folder"] if manifest and manifest["format"] == runtime else None
    return Bert(ckpt, runtime=runtime, dtype=dtype, graphs_folder=folder, threads=threads)


__all__ = ["Bert", "MissingHeadError", "load", "bucket_length", "bucket_batch"]
