"""What `kbert.load` returns: a checkpoint with its tokenizer, ready for inference. `Bert` is a
facade: each method is one function of `kbert.inference` (one task a module), all of them run
through one `TextRunner` over the forward passes `kbert.runtime` chose (precision and runtime,
once, at `load`).

Every method takes one input or a list. A list is tokenized in one graph call, sorted by length
and run in batches of at most `batch_size` through a compiled forward pass, so repeated calls
reuse a few traced graphs instead of dispatching every layer eagerly. JAX compiles for static
shapes: each batch is padded to its bucket shape (see `kbert.runtime.batching`; batch a power
of two), one `jax.jit` compilation per method and bucket. TensorFlow (a `tf.function` with
unknown sizes) and PyTorch (a TorchScript trace) compile once per method and run every batch at
its own packed shape, without padding compute.

Example:
>>> import kbert                                                        # doctest: +SKIP
>>> m = kbert.load("saved_models/minilm-l6-mlm-nsp")                    # doctest: +SKIP
>>> m.fill_mask("The capital of France is [MASK].", top_k=3)           # doctest: +SKIP
>>> m.fill_mask(["A [MASK] dog.", "The [MASK] sat."], batch_size=32)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from kbert import hub
from kbert import runtime as runtime_lib
from kbert.checkpoint import files as checkpoint_files
from kbert.checkpoint.files import Contents, MissingHeadError
from kbert.inference import (
    classification,
    embeddings,
    masked_lm,
    next_sentence,
    question_answering,
    tagging,
)
from kbert.inference.arguments import Texts
from kbert.inference.runner import TextRunner
from kbert.runtime import graphs
from kbert.runtime.batching import bucket_batch, bucket_length  # noqa: F401  (re-exported)
from kbert.tokenizer import Tokenizer

if TYPE_CHECKING:   # the index module loads on first search
    import keras

    from kbert.checkpoint import Checkpoint
    from kbert.network.backbone import BertBackbone
    from kbert.retrieval.index import Index


class Bert:
    """A BERT checkpoint for inference: `fill_mask`, `next_sentence`, `answer`, `classify`,
    `tag`, `embed`.

    `backbone`, `heads` and `model` (a Keras task model for `fit`, `summary()`, export) share
    the same weights. `runtime` and `dtype` say what runs the passes (see `kbert.runtime`):
    every method gives the same results on each, within the precision's tolerance. On the
    graph runtimes the Keras layers are built (and their weights read) on first use of
    `backbone`, `heads` or `model` only: the graphs hold their own copy.
    """

    def __init__(self, ckpt: Contents, runtime: str = "keras",
                 dtype: str = "float32", graphs_folder: str | None = None,
                 threads: int | None = None):
        self.checkpoint = ckpt
        self.config = ckpt.config
        # The tokenizer builds its TensorFlow routes on the first large request only (see
        # `Tokenizer`; `prepare` builds them now): a load does not wait ~1 s for them, small
        # requests take the Rust tokenizer, and with a graph runtime's graphs made, such a
        # process imports neither Keras nor TF.
        self.tokenizer = Tokenizer(ckpt.vocab, lower_case=ckpt.do_lower_case, graph=False)
        self.max_seq_length = self.config.max_position_embeddings
        self._model: keras.Model | None = None
        self.runtime, self.dtype = runtime, dtype
        self._runner = runtime_lib.make_runner(ckpt, runtime, dtype, graphs_folder, threads)
        self.text_runner = TextRunner(self.tokenizer, self._runner, self.max_seq_length,
                                 self.config.hidden_size)

    def _built(self) -> Checkpoint:
        """The checkpoint with its Keras layers (a graph runtime's is read without them)."""
        if self.checkpoint.backbone is None:
            # Imported here: a graph runtime's process imports Keras (and TensorFlow) only
            # when asked for the Keras layers.
            from kbert import checkpoint as checkpoint_lib
            self.checkpoint = checkpoint_lib.load(self.checkpoint.path, head_dtype="float32")
        return self.checkpoint  # type: ignore[return-value]

    @property
    def backbone(self) -> BertBackbone:
        return self._built().backbone

    @property
    def heads(self) -> dict:
        """{name: Keras layer} of the checkpoint's heads."""
        return self._built().heads

    @property
    def model(self) -> keras.Model:
        if self._model is None:
            self._model = self.task_model()
        return self._model

    def task_model(self, task: str | None = None) -> keras.Model:
        from kbert.models.task_models import task_model  # Keras: see `_built`
        return task_model(self._built(), task)

    def prepare(self) -> Bert:
        """Makes ready now what the first call of each method would otherwise wait for: on the
        "openvino" and "onnx" runtimes every graph the checkpoint's heads serve, made once per
        machine (in one child process) and loaded; the tokenizer's TensorFlow routes where a
        large request takes them; then one small call of each method, which traces the Keras
        passes (on JAX, for the smallest bucket).
        A server calls it before taking requests (`kbert app --preload`). Returns the model.

        >>> kbert.load("minilm-l6-v2", runtime="onnx").prepare().embed("hi")  # doctest: +SKIP
        """
        self._runner.prepare(list(self.checkpoint.heads))
        self.tokenizer.prepare()
        self.embed("a")
        calls = {"mlm": lambda: self.fill_mask("a [MASK] ."),
                 "nsp": lambda: self.next_sentence("a", "b"),
                 "classifier": lambda: self.classify("a"), "tagger": lambda: self.tag("a"),
                 "span": lambda: self.answer("a ?", "a .")}
        for head in self.checkpoint.heads:
            calls.get(head, lambda: None)()
        return self

    @property
    def trace_count(self) -> int:
        """How many times a compiled forward pass was traced (once per bucket shape)."""
        return self._runner.traces

    @property
    def bucket_shapes(self) -> list:
        """The (method, input shapes) the forward pass has run on: one compiled function each."""
        return sorted(self._runner.shapes, key=repr)

    # --- masked LM, next sentence -------------------------------------------------------------
    def fill_mask(self, text: Texts, top_k: int = 5,
                  batch_size: int = 32) -> list[list[dict]] | list[list[list[dict]]]:
        """Top-k fillers for each `[MASK]` in `text`: one list per mask, best first.

        Each entry is {"token": str, "score": float} (softmax probability). A list of texts
        gives one such result per text, in order.
        """
        return masked_lm.fill_mask(self.text_runner, self.checkpoint, text, top_k, batch_size)

    def next_sentence(self, sentence_a: Texts, sentence_b: Texts,
                      batch_size: int = 32) -> dict | list[dict]:
        """{"is_next": P(B follows A)} from the NSP head (a list of them for lists of pairs)."""
        return next_sentence.next_sentence(self.text_runner, self.checkpoint, sentence_a,
                                           sentence_b, batch_size)

    # --- vectors ------------------------------------------------------------------------------
    @property
    def embedding_defaults(self) -> dict:
        """{"pooling", "max_seq_length"} `embed` uses when not told: a sentence encoder's
        recorded ones (config.json's `sentence_embedding`), else `[CLS]` and the model's
        longest input (`Checkpoint.embedding_defaults`)."""
        return self.checkpoint.embedding_defaults

    def embed(self, texts: Texts, pooling: str | None = None, batch_size: int = 32,
              max_seq_length: int | None = None, normalize: bool = False) -> np.ndarray:
        """Sentence vectors [n, hidden_size]: the `[CLS]` hidden state or the masked mean.

        A sentence encoder's checkpoint (config.json's `sentence_embedding`, written when
        converting a sentence-transformers model) sets the defaults: its pooling and the
        longest input it was trained on (e.g. 256 tokens for all-MiniLM-L6-v2), where texts
        are truncated; otherwise `[CLS]` pooling and the model's `max_seq_length`.

        normalize: return unit-length (L2) rows, as sentence-transformers'
            `encode(normalize_embeddings=True)`, so that a dot product is the cosine; a zero
            vector stays zero. Off by default: the raw pooled vectors (`kbert.retrieval`
            embeds with it on).

        >>> m = kbert.load("minilm-l6-v2")                                  # doctest: +SKIP
        >>> v = m.embed(["A man plays a guitar.", "Someone plays music."],  # doctest: +SKIP
        ...             normalize=True)
        >>> round(float(v[0] @ v[1]), 2)                # the cosine       # doctest: +SKIP
        0.65
        """
        return embeddings.embed(self.text_runner, self.checkpoint, texts, pooling, batch_size,
                                max_seq_length, normalize)

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
        return embeddings.hidden_states(self.text_runner, self.checkpoint, text, layers, batch_size)

    # --- fine-tuned heads ---------------------------------------------------------------------
    def classify(self, text: Texts, text_pair: Texts | None = None,
                 batch_size: int = 32) -> dict[str, float] | list[dict[str, float]]:
        """{label: probability} (or {"score": value} for a regression head); a list of them
        for a list of texts."""
        return classification.classify(self.text_runner, self.checkpoint, text, text_pair,
                                       batch_size)

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
        return question_answering.answer(
            self.text_runner, self.checkpoint, question, context, top_k, max_seq_length, doc_stride,
            max_answer_length, batch_size, max_query_length, n_best)

    def tag(self, text: Texts, batch_size: int = 32) -> list[dict] | list[list[dict]]:
        """Named entities in `text`: [{"text", "label", "start", "end", "score"}] (a list of
        them for a list of texts).

        Words are the tokenizer's basic-tokenized words; each is labelled at its first
        WordPiece (as in training) and IOB tags are grouped into entities (conlleval rules).
        """
        return tagging.tag(self.text_runner, self.checkpoint, text, batch_size)

    # --- retrieval (kbert.retrieval does the work) ------------------------------------------
    def search(self, queries: Texts, passages_or_index: Sequence[str] | Index, top_k: int = 10,
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
               batch_size: int = 32, first_scores: Sequence[float] | None = None) -> list[dict]:
        """Passages sorted by a cross-encoder's relevance to `query`: [{"index", "text",
        "score"}], best first (a 'classifier' head scoring pairs, or the 'nsp' head); with
        the first stage's `first_scores`, by the two fused (`kbert.retrieval.rerank`)."""
        from kbert.retrieval import rerank
        return rerank.rerank(self, query, passages, top_k=top_k, batch_size=batch_size,
                             first_scores=first_scores)


def load(path: str, dtype: str | None = None, runtime: str | None = None,
         threads: int | None = None, *, revision: str | None = None,
         token: str | None = None, cache_dir: str | None = None,
         local_files_only: bool = False) -> Bert:
    """Loads a checkpoint directory, a shipped name or a hub model (`hf://ORG/NAME@REV`, a
    bare Hub name such as "bert-base-uncased", `kaggle://...`) for inference (see `Bert`).

    A hub model is downloaded and converted once, then kept: later loads ask neither the hub
    nor the converter, and work offline. `revision`, `token`, `cache_dir` and
    `local_files_only` are `kbert.hub.resolve`'s (as transformers' `from_pretrained` has
    them).

    dtype: "float32" (the default for a checkpoint: the reference, equal to HF transformers to
        1e-5; an export directory's default is the dtype it was exported in),
        "bfloat16", "int8" (runtime "openvino"), or "auto": bfloat16 where the CPU
        multiplies it natively (AMX, AVX-512 BF16; `kbert.hardware`), else float32.
    runtime: "keras" (the default for a checkpoint), "openvino" or "onnx" (the passes as
        exported graphs, made on first use or read from a `kbert export --format` directory,
        whose format is then the default), or "auto": the fastest path measured for the dtype
        on this machine (`kbert.runtime.options.auto_runtime`; an export directory's own).
    threads: at most this many threads for the OpenVINO / ONNX Runtime graphs (default: all
        cores).
    """
    directory = hub.resolve(path, revision=revision, token=token, cache_dir=cache_dir,
                            local_files_only=local_files_only)
    manifest = graphs.read_manifest(directory)
    if runtime is None or (runtime == "auto" and manifest):
        runtime = manifest["format"] if manifest else "keras"
    if dtype is None:
        dtype = manifest["dtype"] if manifest and manifest["format"] == runtime else "float32"
    runtime, dtype = runtime_lib.resolve(runtime, dtype)
    # bfloat16 in the encoder; the heads (so the logits) and the poolings stay float32. The
    # graph runtimes need no Keras layers (see `Bert._built`).
    if runtime == "keras":
        from kbert import checkpoint as checkpoint_lib  # Keras: see `Bert._built`
        ckpt: Contents = checkpoint_lib.load(directory, head_dtype="float32",
                                             dtype="bfloat16" if dtype == "bfloat16" else None)
    else:
        ckpt = checkpoint_files.read(directory, weights=False)
    folder = manifest["folder"] if manifest and manifest["format"] == runtime else None
    return Bert(ckpt, runtime=runtime, dtype=dtype, graphs_folder=folder, threads=threads)


__all__ = ["Bert", "MissingHeadError", "Texts", "load", "bucket_length", "bucket_batch"]
