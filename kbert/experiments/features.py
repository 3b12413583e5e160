"""Feature-based NER (paper, section 5.3 and Table 7): a frozen encoder's hidden layers as
contextual word features for a small BiLSTM tagger on CoNLL-2003, no fine-tuning.

Each word is represented by its first piece's hidden states, extracted once and cached (float16)
for the layers Table 7 compares: the embeddings, the second-to-last and the last hidden layer,
the sum and the concatenation of the last four. The tagger (a BiLSTM, as the paper's two-layer
768-unit one, smaller here) is trained on the training set and scored on the valid set with
conlleval's rules.

Example:
>>> from kbert.experiments import features                                     # doctest: +SKIP
>>> features.run("out/", "saved_models/minilm-l6-mlm-nsp", "conll2003/train.txt",  # doctest: +SKIP
...              "conll2003/valid.txt")
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from kbert import checkpoint as checkpoint_lib
from kbert import hub, outputs
from kbert.experiments.units import Units
from kbert.hints import Tensor
from kbert.tasks import batching, ner
from kbert.tokenizer import Tokenizer

if TYPE_CHECKING:   # type-only
    from kbert.network.backbone import BertBackbone

# One sentence for the tagger: word features [words, F] and their label ids (or None).
Row = tuple[np.ndarray, Any]

# Hidden layers cached per word: the embeddings (0) and the last four (hidden_states[-4:]).
CACHED_LAYERS = (0, -4, -3, -2, -1)
# Table 7's feature-based rows: name -> (how to combine the cached layers, their indexes).
COMBINATIONS = {
    "embeddings": ("first", [0]),
    "second_to_last_hidden": ("first", [3]),
    "last_hidden": ("first", [4]),
    "sum_last_four_hidden": ("sum", [1, 2, 3, 4]),
    "concat_last_four_hidden": ("concat", [1, 2, 3, 4]),
}
# BERT-base dev F1 (paper, Table 7).
PAPER_TABLE_7 = {"fine_tuning": 96.4, "embeddings": 91.0, "second_to_last_hidden": 95.6,
                 "last_hidden": 94.9, "sum_last_four_hidden": 95.9,
                 "concat_last_four_hidden": 96.1}


class HiddenLayers(keras.Model):
    """A frozen encoder's chosen hidden layers per token: [B, T, len(layers), H]."""

    def __init__(self, backbone: BertBackbone, layers: Sequence[int] = CACHED_LAYERS,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backbone, self.layers_wanted = backbone, tuple(layers)

    def call(self, inputs: dict[str, Tensor]) -> Tensor:
        states = self.backbone(inputs, training=False, output_hidden_states=True)["hidden_states"]
        return keras.ops.stack([states[i] for i in self.layers_wanted], axis=2)


def word_features(model: HiddenLayers, encoded: ner.NerFeatures,
                  batch_size: int = 64) -> tuple[np.ndarray, list[int]]:
    """float16 [words, len(layers), H]: each kept word's first-piece hidden states, sentence by
    sentence in order, and the word count of each sentence."""
    inputs = {k: encoded.features[k] for k in ("input_ids", "segment_ids", "input_mask")}
    per_sentence: list = [None] * len(encoded.word_positions)
    for index, batch in batching.batches(inputs, batch_size, bucket=True, multiple=16):
        states = np.asarray(model.predict_on_batch(batch), "float16")       # [B, T, L, H]
        for row, i in enumerate(index):
            per_sentence[i] = states[row, encoded.word_positions[i]]          # [words, L, H]
    counts = [len(p) for p in encoded.word_positions]
    return np.concatenate(per_sentence), counts


def combine(cached: np.ndarray, how: str, layers: Sequence[int]) -> np.ndarray:
    """[words, L, H] cached layers → [words, F] features of one Table 7 row."""
    chosen = cached[:, layers].astype("float32")
    if how == "sum":
        return chosen.sum(1)
    if how == "concat":
        return chosen.reshape(len(chosen), -1)
    return chosen[:, 0]


def _sentences(features: np.ndarray, counts: Sequence[int],
               labels: np.ndarray | None = None) -> list[Row]:
    """Split flat [words, F] rows back into padded per-sentence batches' inputs."""
    starts = np.concatenate([[0], np.cumsum(counts)])
    return [(features[a:b], None if labels is None else labels[a:b])
            for a, b in zip(starts[:-1], starts[1:])]


def _padded(rows: Sequence[Row], index: Sequence[int] | np.ndarray,
            width_multiple: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    width = max(1, max(len(rows[i][0]) for i in index))
    width = -(-width // width_multiple) * width_multiple
    dim = rows[index[0]][0].shape[-1]
    x = np.zeros((len(index), width, dim), "float32")
    y = np.zeros((len(index), width), "int32")
    w = np.zeros((len(index), width), "float32")
    for r, i in enumerate(index):
        f, lab = rows[i]
        x[r, :len(f)], w[r, :len(f)] = f, 1.0
        if lab is not None:
            y[r, :len(f)] = lab
    return x, y, w


def bilstm_tagger(dim: int, num_labels: int, units: int = 128) -> keras.Model:
    """features [B, W, F] → tag logits [B, W, labels]: a one-layer BiLSTM and a dense layer."""
    x = keras.Input((None, dim))
    mask = keras.Input((None,))
    h = keras.layers.Bidirectional(keras.layers.LSTM(units, return_sequences=True))(
        x, mask=keras.ops.cast(mask, "bool"))
    return keras.Model([x, mask], keras.layers.Dense(num_labels)(h))


def train_tagger(train_rows: Sequence[Row], dev_rows: Sequence[Row], num_labels: int,
                 epochs: int = 3, batch_size: int = 32, seed: int = 0) -> list[np.ndarray]:
    """Trains a BiLSTM tagger on [(features, label ids)] sentences; returns dev predictions
    (label ids per sentence)."""
    keras.utils.set_random_seed(seed)
    model = bilstm_tagger(train_rows[0][0].shape[-1], num_labels)
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="mean_with_sample_weight"))
    lengths = [len(f) for f, _ in train_rows]
    for epoch in range(epochs):
        for index in batching.length_batches(lengths, batch_size, shuffle=True,
                                             seed=seed + epoch):
            x, y, w = _padded(train_rows, index)
            model.train_on_batch([x, w], y, sample_weight=w)
    predictions: list = [None] * len(dev_rows)
    for index in batching.length_batches([len(f) for f, _ in dev_rows], 128):
        x, _, w = _padded(dev_rows, index)
        logits = np.asarray(model.predict_on_batch([x, w]))
        for r, i in enumerate(index):
            predictions[i] = logits[r, :len(dev_rows[i][0])].argmax(-1)
    return predictions


def extract(units: Units, name: str, ckpt: checkpoint_lib.Checkpoint,
            sentences: Sequence[ner.Sentence], labels: Sequence[str],
            work: str) -> tuple[np.ndarray, list[int]]:
    """The cached word features of one file (a unit: extracted once)."""
    path = os.path.join(work, f"{name}.npz")

    def run() -> dict[str, Any]:
        tokenizer = Tokenizer(ckpt.vocab, lower_case=ckpt.do_lower_case)
        encoded = ner.encode_ner(tokenizer, sentences, labels, 128)
        started = time.perf_counter()
        cached, counts = word_features(HiddenLayers(ckpt.backbone), encoded)
        tmp = path + ".tmp.npz"
        np.savez(tmp, features=cached, counts=np.asarray(counts))
        os.replace(tmp, path)
        return {"sentences": len(sentences), "words": int(sum(counts)),
                "truncated": encoded.truncated,
                "seconds": round(time.perf_counter() - started, 1)}
    if not os.path.isfile(path):
        units.forget(f"features-{name}")
    units.run(f"features-{name}", run)
    data = np.load(path)
    return data["features"], list(data["counts"])


@outputs.claims("experiments", resume=True)
def run(output: str, model: str, train: str, valid: str, max_train_sentences: int | None = None,
        max_valid_sentences: int | None = None, epochs: int = 3, seeds: Sequence[int] = (0,),
        log: Callable[[str], Any] = print) -> dict[str, dict[str, list]]:
    """Extracts (once) and tags with each Table 7 combination; writes `feature_ner.md` and
    `feature_ner.json` in `output`; returns {combination: {"f1": [...per seed], ...}}."""
    units = Units(output, log)
    work = os.path.join(output, "features")
    os.makedirs(work, exist_ok=True)
    ckpt = checkpoint_lib.load(hub.resolve(model))
    train_sentences = ner.read_conll(train, scheme="iob2")[:max_train_sentences]
    valid_sentences = ner.read_conll(valid, scheme="iob2")[:max_valid_sentences]
    labels = ner.label_list(train_sentences + valid_sentences)
    index = {t: i for i, t in enumerate(labels)}
    train_cached, train_counts = extract(units, "train", ckpt, train_sentences, labels, work)
    valid_cached, valid_counts = extract(units, "valid", ckpt, valid_sentences, labels, work)
    train_labels = _kept_labels(train_sentences, train_counts, index)
    results: dict[str, dict[str, list]] = {}
    for name, (how, layers) in COMBINATIONS.items():
        for seed in seeds:
            def tag(name: str = name, how: str = how, layers: list[int] = layers,
                    seed: int = seed) -> dict[str, Any]:
                train_rows = _sentences(combine(train_cached, how, layers), train_counts,
                                        train_labels)
                dev_rows = _sentences(combine(valid_cached, how, layers), valid_counts)
                started = time.perf_counter()
                predicted = train_tagger(train_rows, dev_rows, len(labels), epochs, seed=seed)
                tags = [[labels[int(i)] for i in p] + ["O"] * (len(s.words) - len(p))
                        for p, s in zip(predicted, valid_sentences)]
                return {**ner.evaluate_ner(valid_sentences, tags),
                        "seconds": round(time.perf_counter() - started, 1)}
            out = units.run(f"tagger-{name}-seed{seed}", tag)
            results.setdefault(name, {"f1": []})["f1"].append(out["f1"])
    write_report(output, results, model, len(train_sentences), len(valid_sentences), epochs)
    return results


def _kept_labels(sentences: Sequence[ner.Sentence], counts: Sequence[int],
                 index: dict[str, int]) -> np.ndarray:
    """Label ids of the words that have features (truncation drops a sentence's tail)."""
    return np.array([index[t] for s, n in zip(sentences, counts) for t in s.tags[:n]])


def write_report(output: str, results: dict[str, dict[str, list]], model: str, n_train: int,
                 n_valid: int, epochs: int) -> None:
    """`feature_ner.md` (the table beside the paper's) and `feature_ner.json`, atomically."""
    from kbert.experiments.report import mean_std, write_atomic
    lines = [f"Feature-based NER on CoNLL-2003 valid ({n_valid} sentences), frozen `{model}`, "
             f"a BiLSTM tagger trained {epochs} epochs on {n_train} sentences; entity F1.", "",
             "| Features | F1 (here) | BERT-base F1 (paper, Table 7) |", "|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name.replace('_', ' ')} | {mean_std(r['f1'])} | "
                     f"{PAPER_TABLE_7[name]} |")
    write_atomic(os.path.join(output, "feature_ner.md"), "\n".join(lines) + "\n")
    write_atomic(os.path.join(output, "feature_ner.json"), json.dumps(results, indent=2) + "\n")
