"""kbert: BERT (Devlin et al., 2018) as a complete Keras 3 system.

    import kbert
    m = kbert.load("saved_models/NAME")
    m.fill_mask("The man went to the [MASK].")
"""

import os
from typing import Any

from kbert._lazy import lazy_attributes
from kbert.inference import protocol

# TensorFlow's C++ start-up chatter (CUDA probing, CPU flags) drowns the CLI's output; a value
# the user sets still wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"

# Every public name loads on first use (PEP 562): importing Keras starts its backend (TensorFlow
# on the default backend, ~1 GB and seconds), which `import kbert`, `kbert --help` and the CLI's
# argument errors must not pay for. The model modules import no TensorFlow on JAX or PyTorch; the
# tokenizer, the pipeline and the tf.data inputs always need TensorFlow (and tensorflow-text).
_LAZY = {
    **dict.fromkeys(["PRESETS", "BertConfig"], "kbert.network.config"),
    **dict.fromkeys(["ClassificationHead", "LeftToRightLMHead", "MaskedLMHead",
                     "MultipleChoiceHead", "NextSentenceHead", "SpanHead",
                     "TokenClassificationHead"], "kbert.network.heads"),
    **dict.fromkeys(["BertEmbeddings", "Pooler", "TransformerEncoderBlock"],
                    "kbert.network.layers"),
    **dict.fromkeys(["BertBackbone", "BertBiEncoder", "BertClassifier", "BertLeftToRightLM",
                     "BertMultipleChoice", "BertPretrainer", "BertQuestionAnswerer",
                     "BertReranker", "BertTokenClassifier"], "kbert.models"),
    **dict.fromkeys(["Bert", "load"], "kbert.pipeline"),
    "pretraining_targets": "kbert.data.inputs",
    "retrieval": "kbert.retrieval",       # kbert.retrieval.Index, search, metrics
}
__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)


def _load(path: str, dtype: str | None = None, runtime: str | None = None) -> Any:
    """`kbert.load`, imported on first call: the loader the layers below the facade use
    (`kbert.inference.protocol`), e.g. an index loading the encoder its manifest names."""
    from kbert.pipeline import load
    return load(path, dtype=dtype, runtime=runtime)


protocol.set_default_loader(_load)
