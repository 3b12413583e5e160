"""What `kbert.load` returns: a checkpoint with its tokenizer, ready for inference.

Example:
>>> import kbert                                                        # doctest: +SKIP
>>> m = kbert.load("saved_models/minilm-l6-mlm-nsp")                    # doctest: +SKIP
>>> m.fill_mask("The capital of France is [MASK].", top_k=3)           # doctest: +SKIP
"""

import numpy as np
from keras import ops

from kbert import checkpoint as checkpoint_lib
from kbert.tokenizer import Tokenizer


class MissingHeadError(ValueError):
    """The checkpoint lacks the head a method needs."""


def _softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def _batches(items, batch_size):
    for start in range(0, len(items), batch_size):
        yield start, items[start:start + batch_size]


class Bert:
    """A BERT checkpoint for inference: `fill_mask`, `next_sentence`, `embed`, `classify`, `tag`.

    `backbone`, `heads` and `model` (a Keras task model for `fit`, `summary()`, export) share
    the same weights.
    """

    def __init__(self, ckpt):
        self.checkpoint = ckpt
        self.config = ckpt.config
        self.backbone = ckpt.backbone
        self.heads = ckpt.heads
        self.tokenizer = Tokenizer(ckpt.vocab, lower_case=ckpt.do_lower_case)
        self.max_seq_length = self.config.max_position_embeddings
        self._model = None

    @property
    def model(self):
        if self._model is None:
            self._model = self.checkpoint.task_model()
        return self._model

    def task_model(self, task=None):
        return self.checkpoint.task_model(task)

    def _require(self, head, method):
        if head not in self.heads:
            raise MissingHeadError(
                f"{method} needs a '{head}' head, but checkpoint {self.checkpoint.path} has "
                f"{', '.join(self.heads) or 'no heads'}")
        return self.heads[head]

    def _encode(self, features):
        return self.backbone(features, training=False)

    # --- masked LM --------------------------------------------------------------------------
    def fill_mask(self, text, top_k=5):
        """Top-k fillers for each `[MASK]` in `text`: one list per mask, best first.

        Each entry is {"token": str, "score": float} (softmax probability).
        """
        if not isinstance(text, str):
            return [self.fill_mask(t, top_k) for t in text]
        head = self._require("mlm", "fill_mask")
        ids = self.tokenizer.encode(text)
        if self.tokenizer.mask_id not in ids:
            raise ValueError("fill_mask: the text has no [MASK] token to fill")
        features, _ = self.tokenizer.pack([ids], max_seq_length=self.max_seq_length)
        input_ids = features["input_ids"][0]
        positions = np.flatnonzero(input_ids == self.tokenizer.mask_id)
        if len(positions) < ids.count(self.tokenizer.mask_id):
            raise ValueError(f"fill_mask: a [MASK] lies beyond the first {self.max_seq_length} "
                             "tokens, which the model cannot see")
        sequence = self._encode(features)["sequence_output"]
        logits = ops.convert_to_numpy(head(sequence, positions[None].astype("int32")))[0]
        probs = _softmax(logits.astype(np.float64))
        top_k = max(1, min(int(top_k), probs.shape[-1]))
        results = []
        for row in probs:
            best = np.argsort(-row)[:top_k]
            results.append([{"token": self.tokenizer.vocab[i], "score": float(row[i])}
                            for i in best])
        return results

    # --- next sentence ----------------------------------------------------------------------
    def next_sentence(self, sentence_a, sentence_b):
        """{"is_next": P(B follows A)} from the NSP head."""
        head = self._require("nsp", "next_sentence")
        features, _ = self.tokenizer.pack([self.tokenizer.encode(sentence_a)],
                                          [self.tokenizer.encode(sentence_b)],
                                          max_seq_length=self.max_seq_length)
        pooled = self._encode(features)["pooled_output"]
        logits = ops.convert_to_numpy(head(pooled))[0].astype(np.float64)
        return {"is_next": float(_softmax(logits)[0])}

    # --- sentence embeddings ----------------------------------------------------------------
    def embed(self, texts, pooling="cls", batch_size=32):
        """Sentence vectors [n, hidden_size]: the `[CLS]` hidden state or the masked mean."""
        if pooling not in ("cls", "mean"):
            raise ValueError(f"embed: pooling must be 'cls' or 'mean', got {pooling!r}")
        if isinstance(texts, str):
            texts = [texts]
        encoded = [self.tokenizer.encode(t) for t in texts]
        order = np.argsort([len(e) for e in encoded], kind="stable")  # similar lengths together
        out = np.zeros((len(texts), self.config.hidden_size), np.float32)
        for _, idx in _batches(order, batch_size):
            features, _ = self.tokenizer.pack([encoded[i] for i in idx],
                                              max_seq_length=self.max_seq_length)
            seq = ops.convert_to_numpy(self._encode(features)["sequence_output"]).astype(np.float32)
            if pooling == "cls":
                vectors = seq[:, 0]
            else:
                mask = features["input_mask"][..., None].astype(np.float32)
                vectors = (seq * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            out[idx] = vectors
        return out

    # --- fine-tuned heads -------------------------------------------------------------------
    def classify(self, text, text_pair=None):
        """{label: probability} (or {"score": value} for a regression head)."""
        head = self._require("classifier", "classify")
        options = self.checkpoint.head_options.get("classifier", {})
        features, _ = self.tokenizer.pack(
            [self.tokenizer.encode(text)],
            None if text_pair is None else [self.tokenizer.encode(text_pair)],
            max_seq_length=self.max_seq_length)
        logits = ops.convert_to_numpy(head(self._encode(features)["pooled_output"]))[0]
        logits = logits.astype(np.float64)
        if options.get("problem") == "regression":
            return {"score": float(logits[0])}
        labels = options.get("labels") or [f"LABEL_{i}" for i in range(len(logits))]
        return {label: float(p) for label, p in zip(labels, _softmax(logits))}


    def answer(self, question, context, top_k=1, max_seq_length=384, doc_stride=128,
               max_answer_length=30):
        """Extractive QA: the `top_k` best spans of `context`, best first.

        Each is {"text", "score" (probability among the n-best), "start", "end"} with
        character offsets into `context` (end exclusive). Contexts longer than one window are
        read in windows `doc_stride` tokens apart. For a SQuAD v2.0 model the best may be the
        empty answer ("", start = end = -1) when the null score beats the best span by more
        than the checkpoint's `null_score_diff_threshold`.
        """
        from kbert.finetune import squad, squad_postprocess

        head = self._require("span", "answer")
        if not question or not question.strip():
            raise ValueError("answer: the question is empty")
        if not context or not context.strip():
            raise ValueError("answer: the context is empty")
        options = self.checkpoint.head_options.get("span", {})
        version_2 = str(options.get("version", "1.1")) == "2.0"
        example = squad.SquadExample("q", question, context, [])
        features = squad.encode_squad(self.tokenizer, [example], is_training=False,
                                      max_seq_length=min(max_seq_length, self.max_seq_length),
                                      doc_stride=doc_stride)
        starts, ends = [], []
        for _, idx in _batches(np.arange(len(features.example_index)), 16):
            batch = {k: v[idx] for k, v in features.features.items()}
            start, end = head(self._encode(batch)["sequence_output"])
            starts.append(ops.convert_to_numpy(start))
            ends.append(ops.convert_to_numpy(end))
        result = squad_postprocess.postprocess(
            [example], features, np.concatenate(starts), np.concatenate(ends),
            version_2=version_2,
            null_score_diff_threshold=float(options.get("null_score_diff_threshold", 0.0)),
            n_best_size=max(squad_postprocess.N_BEST_SIZE, int(top_k)),
            max_answer_length=max_answer_length)
        nbest = result.nbest["q"]
        if version_2:  # the threshold decides whether "" or the best span comes first
            empty = [e for e in nbest if e["text"] == ""]
            spans = [e for e in nbest if e["text"] != ""]
            nbest = empty + spans if result.predictions["q"] == "" else spans + empty
        return [{"text": e["text"], "score": e["probability"], "start": e["start"],
                 "end": e["end"]} for e in nbest[:max(1, int(top_k))]]

    def tag(self, text):
        """Named entities in `text`: [{"text", "label", "start", "end", "score"}].

        Words are the tokenizer's basic-tokenized words; each is labelled at its first
        WordPiece (as in training) and IOB tags are grouped into entities (conlleval rules).
        """
        from kbert.finetune.metrics import entities

        head = self._require("tagger", "tag")
        labels = self.checkpoint.head_options["tagger"]["labels"]
        ids, starts, ends = self.tokenizer.tokenize_with_char_offsets(text)
        ids = ids[:self.max_seq_length - 2]
        if not ids:
            return []
        tokens = self.tokenizer.convert_ids_to_tokens(ids)
        first = [i for i, t in enumerate(tokens) if i == 0 or not t.startswith("##")]
        word_end = [(first[k + 1] if k + 1 < len(first) else len(ids)) - 1
                    for k in range(len(first))]
        features, _ = self.tokenizer.pack([ids], max_seq_length=self.max_seq_length)
        logits = ops.convert_to_numpy(head(self._encode(features)["sequence_output"]))[0]
        probs = _softmax(logits.astype(np.float64))[1:len(ids) + 1]     # drop [CLS]
        word_labels = [labels[int(probs[i].argmax())] for i in first]
        out = []
        for kind, a, b in entities(word_labels):
            start, end = starts[first[a]], ends[word_end[b]]
            score = float(np.mean([probs[first[k]].max() for k in range(a, b + 1)]))
            out.append({"text": text[start:end], "label": kind, "start": int(start),
                        "end": int(end), "score": score})
        return out


def load(path):
    """Loads a checkpoint directory for inference (see `Bert`)."""
    return Bert(checkpoint_lib.load(path))
