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
from kbert.data.inputs import pretraining_targets
from kbert.pipeline import Bert, load

__version__ = "0.1.0"
