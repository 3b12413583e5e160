"""WordPiece tokenization in the TensorFlow graph (tensorflow-text), and BERT input packing.

One tokenizer path serves training data, inference, the playground and the exported graph.
"""

import os

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def read_vocab(path):
    """The WordPiece vocabulary: one token a line, the line number is the id."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"vocabulary file not found: {path}")
    with open(path, encoding="utf-8") as f:
        vocab = [line.rstrip("\n").rstrip("\r") for line in f]
    while vocab and vocab[-1] == "":
        vocab.pop()
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise ValueError(f"{path}: vocabulary lacks the special tokens {' '.join(missing)}")
    return vocab


class Tokenizer:
    """BERT's basic tokenization + WordPiece, as tensorflow-text ops.

    Args:
        vocab: a `vocab.txt` path or a list of tokens.
        lower_case: True for uncased vocabularies (lower-case, strip accents).

    Example:
    >>> tok = Tokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s"])
    >>> tok.tokenize(["Hello worlds"]).to_list()
    [[5, 6, 7]]
    """

    def __init__(self, vocab, lower_case=True):
        self.vocab = read_vocab(vocab) if isinstance(vocab, str) else list(vocab)
        missing = [t for t in SPECIAL_TOKENS if t not in self.vocab]
        if missing:
            raise ValueError(f"vocabulary lacks the special tokens {' '.join(missing)}")
        self.lower_case = lower_case
        self.token_to_id = {t: i for i, t in enumerate(self.vocab)}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self.token_to_id[t] for t in SPECIAL_TOKENS)
        table = tf.lookup.StaticVocabularyTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.vocab), tf.range(len(self.vocab), dtype=tf.int64)),
            num_oov_buckets=1)
        self._tf_tokenizer = tf_text.BertTokenizer(
            table, token_out_type=tf.int64, lower_case=lower_case, unknown_token="[UNK]")

    @property
    def vocab_size(self):
        return len(self.vocab)

    def tokenize(self, texts):
        """Strings [B] → token ids, a RaggedTensor [B, (tokens)] of int64."""
        return self._tf_tokenizer.tokenize(texts).merge_dims(-2, -1)

    def tokenize_with_offsets(self, texts):
        """Token ids with the byte offsets [start, end) of each token in its UTF-8 string."""
        ids, starts, ends = self._tf_tokenizer.tokenize_with_offsets(texts)
        return ids.merge_dims(-2, -1), starts.merge_dims(-2, -1), ends.merge_dims(-2, -1)

    def encode(self, text):
        """One string → a Python list of ids; `[MASK]` in the text becomes the mask token."""
        pieces = text.split("[MASK]")
        ids = []
        for i, piece in enumerate(pieces):
            if i:
                ids.append(self.mask_id)
            if piece.strip():
                ids.extend(self.tokenize([piece]).to_list()[0])
        return ids

    def convert_ids_to_tokens(self, ids):
        return [self.vocab[i] if 0 <= i < len(self.vocab) else "[UNK]" for i in ids]

    def pack(self, first, second=None, max_seq_length=512):
        """Id lists → `[CLS] A [SEP] (B [SEP])` features padded to the longest in the batch.

        The longer side is truncated first, as the original `_truncate_seq_pair` does.
        Returns numpy `input_ids`, `segment_ids`, `input_mask` [B, T] and the number of
        tokens cut from each example.
        """
        second = second if second is not None else [None] * len(first)
        rows, truncated = [], []
        for a, b in zip(first, second):
            a, b = list(a), (list(b) if b is not None else None)
            budget = max_seq_length - (3 if b is not None else 2)
            cut = 0
            while len(a) + (len(b) if b is not None else 0) > budget:
                if b is not None and len(b) >= len(a):
                    b.pop()
                else:
                    a.pop()
                cut += 1
            ids = [self.cls_id] + a + [self.sep_id]
            segments = [0] * len(ids)
            if b is not None:
                ids += b + [self.sep_id]
                segments += [1] * (len(b) + 1)
            rows.append((ids, segments))
            truncated.append(cut)
        length = max(len(ids) for ids, _ in rows)
        input_ids = np.full((len(rows), length), self.pad_id, dtype="int32")
        segment_ids = np.zeros((len(rows), length), dtype="int32")
        input_mask = np.zeros((len(rows), length), dtype="int32")
        for i, (ids, segments) in enumerate(rows):
            input_ids[i, :len(ids)] = ids
            segment_ids[i, :len(ids)] = segments
            input_mask[i, :len(ids)] = 1
        return {"input_ids": input_ids, "segment_ids": segment_ids,
                "input_mask": input_mask}, truncated
