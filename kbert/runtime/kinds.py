"""The passes' names ("kinds") and what each reads: plain data, shared by the Keras runner
(`kbert.runtime.passes`), the graph makers (`kbert.runtime.graphs`) and the graph runners
(`kbert.runtime.engines`), which need no Keras. The kinds themselves are listed in
`kbert.runtime.passes`.
"""

from __future__ import annotations

from typing import Any

Kind = str | tuple[str, Any]     # "span", ("mlm", 5), ("hidden", (0, 6)): see above
TOKEN_INPUTS = ("input_ids", "segment_ids", "input_mask")
POOLED_KINDS = ("nsp", "classifier", "embed_cls")
# What each method's pass is called in exported graphs, where it differs (see `graph_kind`).
GRAPH_OF = {"embed_cls": "embed", "embed_mean": "embed"}
# The passes an export writes for each head (embedding passes need no head).
HEAD_KINDS = {"mlm": ("mlm_logits",), "nsp": ("nsp",), "classifier": ("classifier",),
              "tagger": ("tagger",), "span": ("span",)}
EMBED_KINDS = ("embed",)
# The exported graphs' names (`kbert.runtime.graph_io`): each input's dynamic dimensions, and
# each graph's one output with its own (None: a fixed size, as the number of labels).
INPUT_DIMS = {name: ("batch", "sequence") for name in TOKEN_INPUTS} | {
    "masked_lm_positions": ("batch", "masks")}
OUTPUT_OF = {"embed": ("embeddings", ("batch", None, None)),
             "mlm_logits": ("logits", ("batch", "masks", None)),
             "nsp": ("logits", ("batch", None)),
             "classifier": ("logits", ("batch", None)),
             "tagger": ("logits", ("batch", "sequence", None)),
             "span": ("span_logits", ("batch", "sequence", None)),
             "hidden": ("hidden_states", ("batch", "sequence", None, None))}


def input_names(kind: Kind) -> tuple[str, ...]:
    """The features a pass reads."""
    if kind == "mlm_logits" or (isinstance(kind, tuple) and kind[0] == "mlm"):
        return (*TOKEN_INPUTS, "masked_lm_positions")
    return TOKEN_INPUTS


def output_of(kind: Kind) -> tuple[str, tuple[str | None, ...]]:
    """The name of the graph `kind`'s output and the names of its dynamic dimensions.

    >>> output_of(("hidden", (0, 6)))
    ('hidden_states', ('batch', 'sequence', None, None))
    """
    return OUTPUT_OF[kind[0] if isinstance(kind, tuple) else kind]


def graph_kind(kind: Kind) -> Kind:
    """The exported graph that serves `kind`: ("mlm", k) reads "mlm_logits" (the k best are
    taken outside it, so one graph serves every k), both embeddings read "embed"."""
    if isinstance(kind, tuple) and kind[0] == "mlm":
        return "mlm_logits"
    return GRAPH_OF.get(kind, kind) if isinstance(kind, str) else kind


def kind_name(kind: Kind) -> str:
    """A file-name-safe name for a kind: "span", "mlm_logits", "hidden_5_6"."""
    if isinstance(kind, tuple):                  # ("hidden", (0, 6)) -> "hidden_0_6"
        parts = [kind[0], *(kind[1] if isinstance(kind[1], tuple) else [kind[1]])]
        return "_".join(str(part) for part in parts)
    return kind


def needed_head(kind: Kind) -> str | None:
    """The head a pass runs (None for the embedding and hidden-state passes)."""
    if isinstance(kind, tuple):
        return "mlm" if kind[0] == "mlm" else None
    return {"mlm_logits": "mlm", "nsp": "nsp", "classifier": "classifier",
            "tagger": "tagger", "span": "span"}.get(kind)
