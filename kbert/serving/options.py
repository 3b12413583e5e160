"""`ExportOptions`: how a SavedModel's graph post-processes (top-k, SQuAD windows), a value
that the export (`saved_model`) writes and the graph code (`signatures`, `squad_graph`) reads."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ExportOptions:
    """How the serving graph post-processes; each field is baked into the SavedModel."""

    top_k: int = 5                # fillers per mask, answers per question
    max_masks: int = 5            # [MASK]s answered per text (M)
    answer_seq_length: int = 384  # SQuAD window, as `Bert.answer`
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20
    window_batch: int = 32        # windows per model call inside `answer`

    def __post_init__(self) -> None:
        """Every option is a positive integer (a `doc_stride` of 0 would never end)."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            minimum = 8 if field.name == "answer_seq_length" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"ExportOptions: {field.name} must be an integer >= {minimum}, "
                                 f"got {value!r}")
