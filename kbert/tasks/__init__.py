"""Fine-tuning tasks, the data side: readers, features and post-processing.

`glue` (GLUE TSVs), `squad` (SQuAD v1.1/v2.0 JSON), `ner` (CoNLL-2003), `swag` (SWAG CSV), and
`batching` (length-bucketed batches padded only to their own longest row). Nothing here
imports a model: features are numpy dicts with BERT's names (`input_ids`, `segment_ids`,
`input_mask`) plus labels, ready for `tf.data`.
"""
