"""BERT's tokenizer: text → WordPiece ids, in Python and in the TensorFlow graph.

    wordpiece.py  `Tokenizer` (basic split + WordPiece, one vocabulary; `encode`, `pack`, the
                  offsets back into the text), the text checks every method runs (`check_texts`)
    graph.py      the tokenizer's TensorFlow routes (tf-text's WordPiece in the graph), built
                  on first use
    basic.py      BERT's basic split and normalization as TensorFlow ops
    packing.py    `[CLS] A [SEP] (B [SEP])` rows from ragged ids in the graph (the twin of
                  `Tokenizer.pack`), for the preprocessors and the SavedModel's signatures

A process that has not imported TensorFlow tokenizes with the Rust tokenizer (`tokenizers`);
nothing here imports a model.
"""

from kbert.tokenizer.wordpiece import (
    MAX_CHARS_PER_WORD,
    SPECIAL_TOKENS,
    Tokenizer,
    char_index,
    char_offsets,
    check_texts,
    check_unicode,
    read_vocab,
    unicode_problem,
    write_vocab,
)

__all__ = ["MAX_CHARS_PER_WORD", "SPECIAL_TOKENS", "Tokenizer", "char_index", "char_offsets",
           "check_texts", "check_unicode", "read_vocab", "unicode_problem", "write_vocab"]
