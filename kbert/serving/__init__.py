"""Serving: a TensorFlow SavedModel for TF Serving whose signatures take raw UTF-8 strings.

    saved_model.py  `export` (checkpoint → DIR/<version>/), ExportOptions, list_signatures,
                    saved_model_ops (the ops a written SavedModel uses)
    signatures.py   the tf.functions: tokenize in the graph, run the model, post-process
    graph_ops.py    in-graph offsets, fill-mask positions and entity grouping (twins of the
                    Python code; the packing is `kbert.tokenizer.packing`)
    squad_graph.py  in-graph SQuAD windows and n-best spans (twin of kbert.tasks.squad*)

Writing needs TensorFlow and tensorflow-text; `export` may be called from any backend.
"""

from kbert.serving.saved_model import (
    HEAD_OF,
    MAIN_ORDER,
    ExportError,
    ExportOptions,
    export,
    list_signatures,
    saved_model_ops,
    signatures_for,
)

__all__ = ["HEAD_OF", "MAIN_ORDER", "ExportError", "ExportOptions", "export", "list_signatures",
           "saved_model_ops", "signatures_for"]
