"""kbert: BERT (Devlin et al., 2018) as a complete Keras 3 system.

    import kbert
    m = kbert.load("saved_models/NAME")
    m.fill_mask("The man went to the [MASK].")
"""

import os

# TensorFlow's C++ start-up chatter (CUDA probing, CPU flags) drowns the CLI's output; a value
# the user sets still wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from kbert.config import PRESETS, BertConfig  # noqa: E402
from kbert.heads import (ClassificationHead, MaskedLMHead, MultipleChoiceHead, NextSentenceHead,
                         SpanHead, TokenClassificationHead)
from kbert.layers import BertEmbeddings, Pooler, TransformerEncoderBlock
from kbert.models import (BertBackbone, BertClassifier, BertMultipleChoice, BertPretrainer,
                          BertQuestionAnswerer, BertTokenClassifier)

__all__ = ["PRESETS", "BertConfig", "ClassificationHead", "MaskedLMHead", "MultipleChoiceHead",
           "NextSentenceHead", "SpanHead", "TokenClassificationHead", "BertEmbeddings", "Pooler",
           "TransformerEncoderBlock", "BertBackbone", "BertClassifier", "BertMultipleChoice",
           "BertPretrainer", "BertQuestionAnswerer", "BertTokenClassifier", "Bert", "load",
           "pretraining_targets"]
__version__ = "0.1.0"

# The tokenizer, the pipeline and the tf.data inputs need TensorFlow (and tensorflow-text); they
# load on first use, so the models, heads, checkpoints and optimizers import without TensorFlow
# (e.g. training on JAX or PyTorch from arrays that were tokenized elsewhere).
_LAZY = {"Bert": "kbert.pipeline", "load": "kbert.pipeline",
         "pretraining_targets": "kbert.data.inputs"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kbert' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
