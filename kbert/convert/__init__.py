"""Importers from the checkpoint formats users hold, and exporters back to them.

Each source module exposes `load(src) -> (BertConfig, tensors, head_options, vocab, lower_case)`
in kbert's checkpoint keys; `convert()` turns that into a checkpoint directory.
"""

import importlib
import os

SOURCES = {"hf": "kbert.convert.hf"}


def convert(source, src, output, dtype="float32"):
    """Converts `src` in format `source` into a kbert checkpoint directory at `output`."""
    from kbert import checkpoint
    from kbert.models import BertBackbone

    if source not in SOURCES:
        raise ValueError(f"unknown source format {source!r}; choose one of "
                         f"{', '.join(sorted(SOURCES))}")
    if not os.path.exists(src):
        raise FileNotFoundError(f"source checkpoint not found: {src}")
    module = importlib.import_module(SOURCES[source])
    config, tensors, head_options, vocab, lower_case = module.load(src)
    backbone = BertBackbone(config)
    heads = {name: checkpoint.make_head(name, backbone, head_options.get(name))
             for name in head_options}
    checkpoint.assign(checkpoint.named_variables(backbone, heads), tensors, source=src)
    path = checkpoint.save(output, vocab=vocab, do_lower_case=lower_case,
                           head_options=head_options, dtype=dtype, backbone=backbone, heads=heads)
    return checkpoint.Checkpoint(config, vocab, lower_case, backbone, heads, head_options, path)
