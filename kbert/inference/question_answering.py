"""answer: extractive QA over SQuAD windows, the n-best spans of the span head (the windows and
the post-processing are `kbert.tasks.squad`'s and `squad_postprocess`'s, as in training)."""

from __future__ import annotations

import numpy as np

from kbert.checkpoint.files import Contents
from kbert.inference.arguments import Texts, pairs, positive_int, require_head
from kbert.inference.runner import TextRunner
from kbert.tasks import squad, squad_postprocess


def answer(runner: TextRunner, ckpt: Contents, question: Texts, context: Texts, top_k: int = 1,
           max_seq_length: int = 384, doc_stride: int = 128, max_answer_length: int = 30,
           batch_size: int = 32, max_query_length: int = 64,
           n_best: int = 20) -> list[dict] | list[list[dict]]:
    """The `top_k` best spans of `context`, best first (see `kbert.pipeline.Bert.answer`)."""
    questions, contexts, single = pairs("answer", question, context, ("question", "context"))
    top_k = positive_int("answer", "top_k", top_k)
    max_seq_length = positive_int("answer", "max_seq_length", max_seq_length, 8)
    doc_stride = positive_int("answer", "doc_stride", doc_stride)
    max_answer_length = positive_int("answer", "max_answer_length", max_answer_length)
    max_query_length = positive_int("answer", "max_query_length", max_query_length)
    n_best = positive_int("answer", "n_best", n_best)
    batch_size = positive_int("answer", "batch_size", batch_size)
    require_head(ckpt, "span", "answer")
    options = ckpt.head_options.get("span", {})
    version_2 = str(options.get("version", "1.1")) == "2.0"
    examples = [squad.SquadExample(str(i), q, c, [])
                for i, (q, c) in enumerate(zip(questions, contexts))]
    features = squad.encode_squad(runner.tokenizer, examples, is_training=False,
                                  max_seq_length=min(max_seq_length, runner.max_seq_length),
                                  doc_stride=doc_stride, max_query_length=max_query_length)
    logits = span_logits(runner, features, batch_size)
    result = squad_postprocess.postprocess(
        examples, features, logits[..., 0], logits[..., 1], version_2=version_2,
        null_score_diff_threshold=float(options.get("null_score_diff_threshold", 0.0)),
        n_best_size=max(n_best, top_k),
        max_answer_length=max_answer_length)
    answers = []
    for example in examples:
        nbest = result.nbest[example.qas_id]
        if version_2:  # the threshold decides whether "" or the best span comes first
            empty = [e for e in nbest if e["text"] == ""]
            spans = [e for e in nbest if e["text"] != ""]
            first = result.predictions[example.qas_id] == ""
            nbest = empty + spans if first else spans + empty
        answers.append([{"text": e["text"], "score": e["probability"], "start": e["start"],
                         "end": e["end"]} for e in nbest[:top_k]])
    return answers[0] if single else answers


def span_logits(runner: TextRunner, features: squad.SquadFeatures, batch_size: int) -> np.ndarray:
    """Start/end logits [W, T, 2] of every window; each window's columns past its own
    example's widest window are -inf (as if the example had been run alone)."""
    inputs = features.features
    n, width = inputs["input_ids"].shape
    lengths = inputs["input_mask"].sum(1)
    example_width = np.zeros(n, int)
    for e in np.unique(features.example_index):
        rows = features.example_index == e
        example_width[rows] = lengths[rows].max()
    out = np.full((n, width, 2), -np.inf, np.float32)
    for idx in runner.plan(example_width, batch_size):
        own = int(example_width[idx].max())
        batch = {k: inputs[k][idx][:, :own] for k in ("input_ids", "segment_ids", "input_mask")}
        logits = runner.run("span", batch, batch_size)
        for r, i in enumerate(idx):
            out[i, :example_width[i]] = logits[r, :example_width[i]]
    return out
