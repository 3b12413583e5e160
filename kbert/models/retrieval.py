"""Retrieval models: a bi-encoder (one sentence vector per text, trained with in-batch
negatives) and a cross-encoder reranker (one relevance score per (query, passage) pair).

`BertBiEncoder` is what sentence-transformers trains with `MultipleNegativesRankingLoss`: each
query's positive is the right answer among every passage of the batch (the other queries'
positives, and hard negatives when given), scored by cosine similarity / temperature. Its
checkpoint is a sentence encoder: `kbert.load(...).embed`, `.search` and `kbert index` use it
with the pooling and length it was trained with.

`BertReranker` is a pair classifier with the labels ("irrelevant", "relevant"), trained
pointwise (cross-entropy per pair); `kbert.load(...).rerank` orders passages by P(relevant).
Started from a checkpoint with a next-sentence head (`minilm-l6-mlm-nsp`) and no reranker,
its head begins as the NSP head ("relevant" = IsNext), which already ranks passages well.
"""

from typing import Any

import keras
from keras import ops

from kbert.checkpoint.files import Contents, make_head, write
from kbert.hints import Inputs, Tensor
from kbert.models.base import sparse_ce
from kbert.models.classification import BertClassifier
from kbert.models.finetuned import FineTunedModel, head_dtype
from kbert.network.backbone import BertBackbone
from kbert.network.config import RELEVANCE_LABELS, BertConfig
from kbert.network.heads import sentence_embedding


@keras.saving.register_keras_serializable(package="kbert")
class BertBiEncoder(FineTunedModel):
    """A sentence encoder trained with in-batch negatives (multiple-negatives ranking).

    Called on features it returns unit-length vectors [B, H] (`pooling` "mean" or "cls").
    Called on `{"query", "positive"[, "negative"], "document_keys"}` features (what its
    preprocessor makes of `x=(queries, positives[, negatives])`) it returns the scores
    [B, D] of each query against every positive and negative of the batch: cosine similarity
    / `temperature` (0.05, sentence-transformers' scale 20). The loss is the cross-entropy of
    query i's own positive, column i; a copy of that positive elsewhere in the batch is left
    out of its negatives.

    Example:
    >>> enc = BertBiEncoder.from_checkpoint("minilm-l6-v2")                # doctest: +SKIP
    >>> enc.compile()                                                      # doctest: +SKIP
    >>> enc.fit(x=(queries, passages), batch_size=32, epochs=1)            # doctest: +SKIP
    >>> enc.save_checkpoint("out/retriever")     # kbert.load("out/retriever").search(...)
    ... # doctest: +SKIP
    """

    head_name = None
    default_learning_rate = 2e-5

    def __init__(self, backbone: "BertBackbone | BertConfig | dict | str", pooling: str = "mean",
                 temperature: float = 0.05, **kwargs: Any) -> None:
        super().__init__(backbone, **kwargs)
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', got {pooling!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        self.pooling, self.temperature = pooling, float(temperature)

    def get_config(self) -> dict:
        return {**super().get_config(), "pooling": self.pooling,
                "temperature": self.temperature}

    @classmethod
    def from_checkpoint(cls, path: str, num_labels: int | None = None,
                        labels: list | None = None, max_seq_length: int | None = None,
                        pooling: str | None = None, temperature: float = 0.05,
                        dtype: str | None = None, **kwargs: Any) -> "BertBiEncoder":
        """The encoder of checkpoint `path` (any heads are left out) with its preprocessor.

        pooling, max_seq_length: default the checkpoint's sentence-embedding settings (a
        converted sentence-transformers model's), else mean pooling and 256 tokens.
        dtype: the encoder's Keras dtype policy (e.g. "mixed_bfloat16"; the sentence vectors
        and scores are float32 either way).
        """
        from kbert.checkpoint import files as checkpoint_files
        from kbert.tasks import preprocessing  # TensorFlow, on use
        if num_labels is not None or labels:
            raise ValueError("a bi-encoder has no labels")
        from kbert import hub
        ckpt: Contents = checkpoint_files.read(hub.resolve(path), dtype)
        recorded = ckpt.embedding
        length = max_seq_length or min(int(recorded.get("max_seq_length", 256)),
                                       ckpt.config.max_position_embeddings)
        model = cls(ckpt.backbone, pooling=pooling or recorded.get("pooling", "mean"),
                    temperature=temperature)
        model.preprocessor = preprocessing.BertBiEncoderPreprocessor(
            ckpt.vocab, ckpt.do_lower_case, length, **kwargs)
        return model

    def save_checkpoint(self, directory: str, vocab: list | str | None = None,
                        do_lower_case: bool | None = None, dtype: str = "float32",
                        model_card: str | None = None, overwrite: bool = True) -> str:
        """A sentence-encoder checkpoint: the encoder, no heads, and the pooling and length
        it embeds with (`kbert.load(directory).embed` / `.search` use them); `overwrite` as
        `FineTunedModel.save_checkpoint`."""
        p = self.preprocessor
        vocab, do_lower_case = self._vocabulary(vocab, do_lower_case)
        length = p.max_seq_length if p is not None else self.config.max_position_embeddings
        embedding = {"pooling": self.pooling, "normalize": True, "max_seq_length": length}
        return write(directory, self.backbone, {}, vocab, do_lower_case, {}, dtype,
                     model_card, embedding=embedding, overwrite=overwrite)

    def default_loss(self) -> dict:
        return {"loss": sparse_ce()}

    def encode(self, features: Inputs, training: bool = False) -> Tensor:
        """Unit-length float32 vectors [B, H] of a batch of features."""
        out = self.backbone(features, training=training)["sequence_output"]
        vectors = sentence_embedding(out, features["input_mask"], self.pooling)
        # unit rows: twin of kbert.inference.embeddings.l2_normalize (a zero row stays zero)
        return vectors / ops.maximum(ops.norm(vectors, axis=-1, keepdims=True), 1e-12)

    def call(self, inputs: Inputs, training: bool = False) -> Any:
        if "query" not in inputs:
            return self.encode(inputs, training=training)
        queries = self.encode(inputs["query"], training=training)                  # [B, H]
        documents = ops.concatenate(
            [self.encode(inputs[k], training=training)
             for k in ("positive", "negative") if k in inputs], axis=0)           # [D, H]
        scores = ops.matmul(queries, ops.transpose(documents)) / self.temperature  # [B, D]
        if "document_keys" in inputs:        # another copy of query i's positive: no negative
            keys = inputs["document_keys"]
            batch = ops.shape(queries)[0]
            own = ops.equal(keys[:batch][:, None], keys[None, :])                   # [B, D]
            same = ops.equal(ops.arange(batch)[:, None], ops.arange(ops.shape(keys)[0])[None])
            scores = ops.where(ops.logical_and(own, ops.logical_not(same)),
                               ops.full_like(scores, -1e4), scores)
        return scores


@keras.saving.register_keras_serializable(package="kbert")
class BertReranker(BertClassifier):
    """A cross-encoder: `[CLS] query [SEP] passage [SEP]` → logits for ("irrelevant",
    "relevant"), trained pointwise on labelled pairs (`y` 1/0 or the label names).

    `from_checkpoint` keeps a reranker head the checkpoint has; else, where the checkpoint has
    an NSP head, the new head starts from it ("relevant" = IsNext, the same probabilities).

    Example:
    >>> rr = BertReranker.from_checkpoint("minilm-l6-mlm-nsp")              # doctest: +SKIP
    >>> rr.compile()                                                       # doctest: +SKIP
    >>> rr.fit(x=(queries, passages), y=[1, 0, ...], epochs=1)             # doctest: +SKIP
    >>> rr.save_checkpoint("out/reranker")  # kbert.load("out/reranker").rerank(q, passages)
    ... # doctest: +SKIP
    """

    default_learning_rate = 2e-5

    @classmethod
    def from_checkpoint(cls, path: str, num_labels: int | None = None,
                        labels: list | None = None, max_seq_length: int | None = None,
                        **kwargs: Any) -> "FineTunedModel":
        """The reranker on checkpoint `path` (max_seq_length default 256) with its
        preprocessor; the labels are always ("irrelevant", "relevant")."""
        if (labels is not None and list(labels) != RELEVANCE_LABELS) or num_labels not in (
                None, 2):
            raise ValueError(f"a reranker's labels are {RELEVANCE_LABELS}")
        return super().from_checkpoint(path, labels=RELEVANCE_LABELS,
                                       max_seq_length=max_seq_length or 256, **kwargs)

    @classmethod
    def new_head(cls, ckpt: Contents, options: dict) -> keras.layers.Layer:
        head = make_head("classifier", ckpt.backbone, options, dtype=head_dtype(ckpt.backbone))
        nsp = ckpt.heads.get("nsp")
        if nsp is not None:             # columns (NotNext, IsNext) of the NSP dense layer
            kernel, bias = (ops.convert_to_numpy(w) for w in nsp.dense.weights)
            head.dense.set_weights([kernel[:, ::-1], bias[::-1]])
        return head
