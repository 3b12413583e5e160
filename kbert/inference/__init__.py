"""Inference, one task a module: what each `kbert.load(...)` method does, as a function of a
`TextRunner` (tokenizer + the runtime's forward passes) and the checkpoint.

    runner.py              TextRunner: texts → length-sorted packed batches → a pass of
                           `kbert.runtime` on each (precision and runtime chosen there, once)
    arguments.py           the methods' input checks (one-line ValueErrors), the head check
    masked_lm.py           fill_mask
    next_sentence.py       next_sentence
    embeddings.py          embed (and its defaults), hidden_states
    classification.py      classify
    question_answering.py  answer (SQuAD windows, n-best spans)
    tagging.py             tag (IOB tags grouped into entities)

`kbert.pipeline.Bert` is the facade over them; search and rerank are `kbert.retrieval`'s.
"""
