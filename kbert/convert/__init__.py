"""Importers from the checkpoint formats users hold, and exporters back to them.

Each source module exposes `load(src) -> (BertConfig, tensors, head_options, vocab, lower_case)`
in kbert's checkpoint keys; `convert()` turns that into a checkpoint directory. Each target in
`TARGETS` names a function `(checkpoint, output) -> output` that writes another library's layout;
`export()` calls it.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from kbert import checkpoint, outputs
from kbert.network.config import BertConfig

# A converted checkpoint's variables: {kbert key: float32 array}.
Tensors = dict[str, np.ndarray]
# What each source's `load` gives: (config, tensors, head options, vocabulary, lower case).
Loaded = tuple[BertConfig, Tensors, dict[str, dict], list[str], bool]


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's content; broken JSON is one line naming the file."""
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None

SOURCES = {
    "hf": "kbert.convert.hf",
    "google": "kbert.convert.google",
    "model-garden": "kbert.convert.model_garden",
    "keras-hub": "kbert.convert.keras_hub",
}
TARGETS = {
    "hf": "kbert.convert.hf:export_hf",
    "keras-hub": "kbert.convert.keras_hub:export_keras_hub",
}


def convert(source: str, src: str, output: str | os.PathLike,
            dtype: str = "float32", overwrite: bool = False,
            model_card: str | None = None) -> checkpoint.Checkpoint:
    """Converts `src` in format `source` into a kbert checkpoint directory at `output`
    (`overwrite`: replace a checkpoint already there; anything else there is refused;
    `model_card`: the MODEL_CARD.md to write with it)."""
    if source not in SOURCES:
        raise ValueError(f"unknown source format {source!r}; choose one of "
                         f"{', '.join(sorted(SOURCES))}")
    if not (os.path.exists(src) or os.path.exists(src + ".index")):  # a TF checkpoint prefix
        raise FileNotFoundError(f"source checkpoint not found: {src}")
    outputs.check(output, "checkpoint", overwrite)          # before reading the source
    module = importlib.import_module(SOURCES[source])
    config, tensors, head_options, vocab, lower_case = module.load(src)
    if len(vocab) != config.vocab_size:
        raise ValueError(f"{src}: the vocabulary has {len(vocab)} tokens but the word embeddings "
                         f"have {config.vocab_size} rows")
    from kbert.network.backbone import BertBackbone  # Keras, on use: `kbert.hub` imports this
    from kbert.network.layers import weights_to_be_read

    with weights_to_be_read():          # every weight is assigned below: no random draws
        backbone = BertBackbone(config)
        heads = {name: checkpoint.make_head(name, backbone, head_options.get(name))
                 for name in head_options}
    checkpoint.assign(checkpoint.named_variables(backbone, heads), tensors, source=src)
    # A sentence encoder's pooling and trained length (sentence-transformers), where known.
    embedding = getattr(module, "sentence_embedding", lambda src: None)(src) or {}
    path = checkpoint.save(output, vocab=vocab, do_lower_case=lower_case,
                           head_options=head_options, dtype=dtype, backbone=backbone, heads=heads,
                           embedding=embedding, overwrite=overwrite, model_card=model_card)
    return checkpoint.Checkpoint(config, vocab, lower_case, backbone, heads, head_options, path,
                                 sentence_embedding=embedding)


def export(target: str, ckpt: str | os.PathLike | checkpoint.Checkpoint, output: str,
           overwrite: bool = False) -> str:
    """Writes the kbert checkpoint `ckpt` (a directory or a loaded `Checkpoint`) as `target`.

    target: "hf" (a transformers `save_pretrained` directory) or "keras-hub" (a preset directory).
    overwrite: replace an output of this format written by kbert (anything else is refused).
    The directory is written whole, then put in place (`kbert.outputs`).
    """
    if target not in TARGETS:
        raise ValueError(f"unknown export format {target!r}; choose one of "
                         f"{', '.join(sorted(TARGETS))}")
    if not isinstance(ckpt, checkpoint.Checkpoint):
        ckpt = checkpoint.load(ckpt)
    module, function = TARGETS[target].split(":")
    with outputs.writing(output, target.replace("-", "_"), overwrite=overwrite) as tmp:
        getattr(importlib.import_module(module), function)(ckpt, tmp)
    return output


def guess_lower_case(vocab: Sequence[str], directory: str | None = None) -> bool:
    """Whether a vocabulary is uncased: from the directory name (`uncased_`/`cased_`, as Google
    names its releases), else from the vocabulary (an uncased one has no capitalised word).

    >>> guess_lower_case(["[PAD]", "[UNK]", "the", "Paris"]), guess_lower_case(["[CLS]", "the"])
    (False, True)
    >>> guess_lower_case(["Paris"], "models/uncased_L-2_H-128_A-2")
    True
    """
    name = os.path.basename(os.path.normpath(directory or "")).lower()
    if "uncased" in name:
        return True
    if "cased" in name:
        return False
    return not any("A" <= t[:1] <= "Z" for t in vocab)  # not isupper(): uncased has "ℝ"
