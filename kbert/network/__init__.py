"""The network: the encoder (`BertBackbone`) and its heads, and the parts they are made of —
Model Garden's layers → networks, below the task models (`kbert.models`).

    config.py        `BertConfig` (the checkpoint's hyper-parameters), the presets, the
                     vocabulary file's reading and writing
    attention.py     the key mask, the masked softmax, the fused kernels per backend
    dropout.py       `Dropout`'s masks per backend
    tf_gradients.py  TensorFlow's gradient of the fused kernels
    layers.py        `BertEmbeddings`, `TransformerEncoderBlock`, `Pooler`
    backbone.py      `BertBackbone`: embeddings → N transformer blocks → pooler
    heads.py         the heads: masked LM, NSP, left-to-right LM, classifier, tagger, span,
                     multiple choice

Nothing here reads text or files but the vocabulary; `kbert.checkpoint` reads and writes the
weights.
"""

from kbert._lazy import lazy_attributes

# On first use (PEP 562): the config (which the tokenizer reads) must not import Keras.
_LAZY = {
    **dict.fromkeys(["PRESETS", "BertConfig"], "kbert.network.config"),
    **dict.fromkeys(["BertEmbeddings", "Pooler", "TransformerEncoderBlock"],
                    "kbert.network.layers"),
    "BertBackbone": "kbert.network.backbone",
    **dict.fromkeys(["ClassificationHead", "LeftToRightLMHead", "MaskedLMHead",
                     "MultipleChoiceHead", "NextSentenceHead", "SpanHead",
                     "TokenClassificationHead"], "kbert.network.heads"),
}
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)
