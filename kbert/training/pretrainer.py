"""The pretraining model of each objective — the paper's MLM + NSP and its section 5.1
ablations — built from a config and vocabulary or from a checkpoint (`build_pretrainer`), and
scored on held-out data (`evaluate_pretraining`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from kbert import checkpoint as checkpoint_lib
from kbert import hub
from kbert.models import BertLeftToRightLM, BertPretrainer
from kbert.network.config import PRESETS, BertConfig, read_vocab

if TYPE_CHECKING:   # type-only
    import keras

# The paper's objective and its section 5.1 ablations: MLM + NSP, MLM alone ("No NSP"), and a
# left-to-right LM on a causal encoder ("LTR & No NSP"). Targets: kbert.data.inputs.targets_for.
OBJECTIVES = ("mlm_nsp", "mlm", "ltr")


def build_pretrainer(config: BertConfig | dict | str | None = None,
                     init: str | os.PathLike | None = None,
                     vocab: str | list[str] | None = None, dtype: str | None = None,
                     objective: str = "mlm_nsp") -> tuple[keras.Model, list[str], bool]:
    """(pretraining model, vocab, do_lower_case) from a config and vocabulary, or from a
    checkpoint: a `BertPretrainer` (with an NSP head for `objective="mlm_nsp"`, without for
    "mlm"), or for "ltr" a `BertLeftToRightLM` on a causal encoder.

    A checkpoint without the objective's heads (e.g. converted encoder weights) gets fresh heads.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown pretraining objective {objective!r}; choose one of "
                         f"{', '.join(OBJECTIVES)}")
    if init is not None:
        ckpt = checkpoint_lib.load(hub.resolve(init), dtype=dtype)
        if config is not None:
            wanted = _config_for_vocab(config, len(ckpt.vocab))
            if wanted.to_dict() != ckpt.config.to_dict():
                raise ValueError(f"--config does not match the checkpoint {init} "
                                 f"({ckpt.summary()}); leave --config out to continue it")
        if vocab is not None and list(read_vocab(vocab)) != list(ckpt.vocab):
            raise ValueError(f"--vocab differs from the vocabulary of {init}")
        if (objective == "ltr") != ckpt.config.causal:
            raise ValueError(f"{init} has a {'causal' if ckpt.config.causal else 'bidirectional'}"
                             f" encoder: it cannot continue with the {objective} objective")
        names = {"mlm_nsp": ("mlm", "nsp"), "mlm": ("mlm",), "ltr": ("ltr",)}[objective]
        heads = {name: ckpt.heads.get(name) or checkpoint_lib.make_head(name, ckpt.backbone)
                 for name in names}
        if objective == "ltr":
            return BertLeftToRightLM(ckpt.backbone, heads["ltr"], dtype=dtype), ckpt.vocab, \
                ckpt.do_lower_case
        model = BertPretrainer(ckpt.backbone, heads["mlm"], heads.get("nsp"),
                               next_sentence=objective == "mlm_nsp", dtype=dtype)
        return model, ckpt.vocab, ckpt.do_lower_case
    if vocab is None:
        raise ValueError("pretraining from scratch needs a vocabulary (--vocab)")
    vocab = read_vocab(vocab)
    config = _config_for_vocab(config or "base", len(vocab))
    if objective == "ltr":
        return BertLeftToRightLM(config, dtype=dtype), vocab, True
    return BertPretrainer(config, next_sentence=objective == "mlm_nsp", dtype=dtype), vocab, True


def _config_for_vocab(config: BertConfig | dict | str, vocab_size: int) -> BertConfig:
    """A preset takes the vocabulary's size; a config file or object must match it."""
    if isinstance(config, str) and config in PRESETS:
        return BertConfig.preset(config, vocab_size=vocab_size)
    config = BertConfig.from_any(config)
    if config.vocab_size != vocab_size:
        raise ValueError(f"config vocab_size {config.vocab_size} does not match the "
                         f"vocabulary's {vocab_size} tokens")
    return config


def objective_of(model: keras.Model) -> str:
    """"mlm_nsp", "mlm" or "ltr": the pretraining objective a model trains."""
    if isinstance(model, BertLeftToRightLM):
        return "ltr"
    return "mlm_nsp" if model.next_sentence else "mlm"


def evaluate_pretraining(model: keras.Model, data: str | dict[str, Any], batch_size: int = 64,
                         max_batches: int | None = None) -> dict[str, float]:
    """Held-out accuracy and loss of a pretraining model (compiled or not) on shards, or on a
    dict of feature arrays (`kbert.data.arrays`, no TensorFlow needed): MLM and NSP for a
    `BertPretrainer` (MLM alone without an NSP head), next-token `lm_` ones for a
    `BertLeftToRightLM` (its loss is the log of the perplexity).

    Reads every record once in order (no shuffling, no repetition).

    Example:
    >>> model = kbert.load("ckpt").task_model("pretraining")          # doctest: +SKIP
    >>> evaluate_pretraining(model, "heldout/")                       # doctest: +SKIP
    {'mlm_accuracy': 0.55, 'nsp_accuracy': 0.9, 'mlm_loss': 2.4, 'nsp_loss': 0.25, 'examples': 1553}
    """
    if not getattr(model, "compiled", False):
        model.compile()
    if isinstance(data, dict):
        from kbert.data import arrays
        ds = arrays.PretrainingBatches(data, batch_size, objective_of(model), shuffle=False)
        examples = len(data["input_ids"])
    else:
        from kbert.data import inputs
        ds = inputs.pretraining_dataset(str(data), batch_size, is_training=False)
        ds = ds.map(inputs.targets_for(objective_of(model)))
        examples = sum(1 for _ in inputs.pretraining_dataset(str(data), 4096, is_training=False)
                       .unbatch())
    out = model.evaluate(ds, steps=max_batches, return_dict=True, verbose=0)
    result, single = {}, len(model.outputs_trained) == 1
    for output in model.outputs_trained:                 # "mlm_logits" -> "mlm_accuracy", ...
        name = output.removesuffix("_logits")
        # Keras names a single output's metrics without the output's name.
        result[f"{name}_accuracy"] = float(out["accuracy" if single else f"{output}_accuracy"])
        result[f"{name}_loss"] = float(out["loss" if single else f"{output}_loss"])
    return {**{k: v for k, v in sorted(result.items(), key=lambda kv: kv[0].endswith("loss"))},
            "examples": int(examples)}
