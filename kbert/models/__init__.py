"""BertBackbone and the task models built on it (pretraining, classifier, tagger, QA, choice).

    base.py                TaskModel: a backbone plus heads; `sparse_ce`
    pretraining.py         BertPretrainer (masked LM + NSP), BertLeftToRightLM
    finetuned.py           FineTunedModel: raw-text fit/evaluate/predict through a preprocessor,
                           `compile()` with the paper's recipe, `from_checkpoint`/`save_checkpoint`
    classification.py      BertClassifier (sequence), BertTokenClassifier (tokens)
    question_answering.py  BertQuestionAnswerer (SQuAD spans)
    multiple_choice.py     BertMultipleChoice (SWAG)
    retrieval.py           BertBiEncoder (sentence vectors, in-batch negatives), BertReranker
    task_models.py         `task_model(ckpt, task)`: the task model of a loaded checkpoint
    optimization.py        the optimizers of `compile()`'s recipe (AdamW, LAMB, warmup + decay)
    compilation.py         how the train step compiles (XLA, per shape); torch_step.py: the
                           PyTorch train step compiled as one graph

The encoder itself is `kbert.network.backbone.BertBackbone` (re-exported here). Inputs follow the
original BERT feature names: `input_ids`, `segment_ids`, `input_mask` (1 = real token,
0 = padding), and for pretraining `masked_lm_positions`.
"""

from kbert.models.classification import BertClassifier, BertTokenClassifier
from kbert.models.multiple_choice import BertMultipleChoice
from kbert.models.pretraining import BertLeftToRightLM, BertPretrainer
from kbert.models.question_answering import BertQuestionAnswerer
from kbert.models.retrieval import BertBiEncoder, BertReranker
from kbert.models.task_models import TASK_MODELS, task_model
from kbert.network.backbone import BertBackbone

__all__ = ["BertBackbone", "BertBiEncoder", "BertClassifier", "BertLeftToRightLM",
           "BertMultipleChoice", "BertPretrainer", "BertQuestionAnswerer", "BertReranker",
           "BertTokenClassifier", "TASK_MODELS", "task_model"]
