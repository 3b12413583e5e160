"""The paper's ablations, re-runnable at small scale with error bars (`kbert experiments`).

    ablations.py   Table 5 (+ RoBERTa's FULL-SENTENCES row): pretraining variants on one corpus
                   (MLM + NSP, No NSP, LTR & No NSP, full sentences with dynamic masking), each
                   fine-tuned on SST-2, MRPC and SQuAD v1.1 with several seeds; `export`
    sources.py     where their data and training come from: `Shards` (TensorFlow: shards,
                   tf.data, the task files) or `Arrays` (an exported folder, no TensorFlow)
    features.py    Table 7: feature-based NER on CoNLL-2003 from a frozen encoder's layers
    units.py       resumable units of work: one JSON result each, written atomically
    report.py      mean ± std tables (Markdown) and the pretraining curves' plot
"""
