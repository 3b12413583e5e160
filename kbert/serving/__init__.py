"""Serving: a TensorFlow SavedModel for TF Serving whose signatures take raw UTF-8 strings.

    saved_model.py  `export` (checkpoint → DIR/<version>/), ExportOptions, list_signatures, used_ops
    signatures.py   the tf.functions: tokenize in the graph, run the model, post-process
    graph_ops.py    in-graph packing, offsets and entity grouping (twins of the Python code)
    squad_graph.py  in-graph SQuAD windows and n-best spans (twin of kbert.finetune.squad*)

Needs TensorFlow and tensorflow-text.
"""

from kbert.serving.saved_model import (HEAD_OF, MAIN_ORDER, ExportError, ExportOptions, export,
                                       list_signatures, signatures_for, used_ops)

__all__ = ["HEAD_OF", "MAIN_ORDER", "ExportError", "ExportOptions", "export", "list_signatures",
           "signatures_for", "used_ops"]
