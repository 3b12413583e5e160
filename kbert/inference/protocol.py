"""What the layers above inference need from a loaded model, as types: `Encoder` (the methods
and attributes `kbert.retrieval` and the fine-tuning evaluation use; `kbert.pipeline.Bert`
satisfies it) and `Loader` (how to load one by path or name: `kbert.load`).

The code that loads a model is above the code that uses one: `kbert.retrieval` (an index that
loads the encoder its manifest names) takes a `Loader` instead of importing the facade. The
root package `kbert` sets `kbert.load` as the default one on import (`set_default_loader`), so
`kbert.retrieval.Index.load(DIR).search("query")` finds its encoder by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, Union

if TYPE_CHECKING:   # type-only: the checkpoint's files and the tokenizer need numpy and TF
    import numpy as np

    from kbert.checkpoint.files import Contents
    from kbert.network.config import BertConfig
    from kbert.tokenizer import Tokenizer

Texts = Union[str, Sequence[str]]


class Encoder(Protocol):
    """A loaded checkpoint as the retrieval and evaluation code use it."""

    checkpoint: Contents
    config: BertConfig
    tokenizer: Tokenizer
    runtime: str
    dtype: str

    @property
    def backbone(self) -> Any: ...

    @property
    def embedding_defaults(self) -> dict: ...

    def embed(self, texts: Texts, pooling: str | None = None, batch_size: int = 32,
              max_seq_length: int | None = None, normalize: bool = False) -> np.ndarray: ...

    def next_sentence(self, sentence_a: Texts, sentence_b: Texts,
                      batch_size: int = 32) -> dict | list[dict]: ...

    def classify(self, text: Texts, text_pair: Texts | None = None,
                 batch_size: int = 32) -> dict[str, float] | list[dict[str, float]]: ...

    def answer(self, question: Texts, context: Texts, top_k: int = 1, max_seq_length: int = 384,
               doc_stride: int = 128, max_answer_length: int = 30, batch_size: int = 32,
               max_query_length: int = 64, n_best: int = 20) -> list[dict] | list[list[dict]]: ...


class Loader(Protocol):
    """Loads a checkpoint (a directory or a shipped name) as `kbert.load` does."""

    def __call__(self, path: str, dtype: str | None = None,
                 runtime: str | None = None) -> Encoder: ...


_default_loader: Loader | None = None


def set_default_loader(loader: Loader) -> None:
    """Makes `loader` the one `default_loader` gives (the root package sets `kbert.load`)."""
    global _default_loader
    _default_loader = loader


def default_loader() -> Loader:
    """The loader set by `set_default_loader`."""
    if _default_loader is None:
        raise RuntimeError("no model loader is set: pass loader= (e.g. kbert.load)")
    return _default_loader
