"""BERT's basic tokenization as TensorFlow ops: the first two steps of `kbert.tokenizer`'s
pipeline, before WordPiece.

1. split the ORIGINAL text on whitespace (Rust's `char::is_whitespace`), keeping punctuation
   (ASCII symbols and Unicode `P*`) and CJK ideographs as one-character words, so word offsets
   are exact byte offsets into the input (`split_and_normalize`);
2. normalize each word character by character (`normalize_chars`): drop control and format
   characters (`\\p{C}`, U+FFFD) and, for uncased vocabularies, NFD, drop combining marks (`Mn`),
   lower-case, in the order HF `tokenizers`' `BertNormalizer` does.

`normalize_texts` normalizes whole texts the same way for the ids-only route, where tf-text's
`FastWordpieceTokenizer` splits. Twins: HF `tokenizers`' `BertNormalizer` + `BertPreTokenizer`
(the Rust route of `kbert.tokenizer`); tests/model/test_tokenizer.py holds every route to HF's
ids and offsets. Only ops that TF Serving 2.20 ships, so exported graphs run them.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
import tensorflow_text as tf_text

from kbert.hints import Tensor

# Rust's char::is_whitespace minus the control characters HF deletes before splitting.
_WHITESPACE = r"[\t\n\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]"
_PUNCTUATION = r"[!-/:-@\[-`{-~]|\p{P}"
_CJK = "|".join(r"[\x{%X}-\x{%X}]" % r for r in (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))
_MASK_LITERAL = r"\[MASK\]"
_DROPPED = r"[\p{C}\x{FFFD}]"
# In whole texts: what HF's `clean_text` deletes (controls but tab/newline/CR, which are spaces).
_DROPPED_IN_TEXT = r"[^\P{C}\t\n\r]|\x{FFFD}"


def normalize_chars(chars: Tensor, lower_case: bool) -> Tensor:
    """One string per character → its normalized form ("" when HF drops it)."""
    chars = tf.strings.regex_replace(chars, _DROPPED, "")
    if lower_case:
        chars = tf_text.normalize_utf8(chars, "NFD")
        chars = tf.strings.regex_replace(chars, r"\p{Mn}", "")
        chars = tf.strings.lower(chars, encoding="utf-8")
    return chars


def normalize_texts(texts: Tensor | Sequence[str], lower_case: bool) -> Tensor:
    """Whole strings [B] normalized as HF's `BertNormalizer`: controls deleted and, uncased, NFD
    without combining marks, lower-cased character by character (no final-sigma rule: `Σ` is
    always `σ`, as in Rust's `char::to_lowercase`). Whitespace is left for
    `FastWordpieceTokenizer`, which splits on every Unicode `White_Space` character that remains.

    >>> normalize_texts(["Héllo WÖRLD\\x00 ΟΔΟΣ"], True).numpy()[0].decode()
    'hello world οδοσ'
    """
    texts = tf.strings.regex_replace(texts, _DROPPED_IN_TEXT, "")
    if lower_case:
        texts = tf_text.normalize_utf8(texts, "NFD")
        texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
        texts = tf.strings.lower(tf.strings.regex_replace(texts, "\u03a3", "\u03c3"), "utf-8")
    return texts


def split_and_normalize(texts: Tensor | Sequence[str], lower_case: bool,
                        mask_literal: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Strings [B] → words [B, (W)] of the original text, their byte starts, their characters
    [N, (C)] and the normalized characters [NC]."""
    texts = tf.convert_to_tensor(texts, tf.string)
    # RegexSplit stops at a NUL byte; \x01 has the same length and is dropped the same way.
    texts = tf.strings.regex_replace(texts, r"\x00", "\x01")
    delim = f"{_WHITESPACE}|{_PUNCTUATION}|{_CJK}"
    keep = f"{_PUNCTUATION}|{_CJK}"
    if mask_literal:
        delim, keep = f"{_MASK_LITERAL}|{delim}", f"{_MASK_LITERAL}|{keep}"
    words, word_starts, _ = tf_text.regex_split_with_offsets(texts, delim, keep)  # [B, (W)]
    chars = tf.strings.unicode_split(words.flat_values, "UTF-8", errors="replace")  # [N, (C)]
    return words, word_starts, chars, normalize_chars(chars.flat_values, lower_case)


def basic_tokenize(texts: Tensor | Sequence[str], lower_case: bool = True) -> Tensor:
    """BERT's basic tokenization: strings [B] → normalized words, a RaggedTensor [B, (W)].

    >>> basic_tokenize(["Héllo, WORLD!"]).to_list()
    [[b'hello', b',', b'world', b'!']]
    """
    words, _, chars, norm = split_and_normalize(texts, lower_case)
    norm_words = tf.strings.reduce_join(chars.with_flat_values(norm), axis=-1)
    words = words.with_flat_values(norm_words)
    return tf.ragged.boolean_mask(words, tf.strings.length(words) > 0)


__all__ = ["basic_tokenize", "normalize_chars", "normalize_texts", "split_and_normalize"]
