"""Install check: in a venv holding only `kbert[onnx]` (keras, ONNX Runtime, tokenizers: no
TensorFlow, JAX or PyTorch), serve a `kbert export --format onnx` directory made by the full
install — every method, an index built, saved and searched, the `kbert index` commands — and get
the full install's answers.

    .venv/bin/python .ci/serve_only.py export DIR         the full install: DIR/export + answers
    .venv-serve/bin/python .ci/serve_only.py serve DIR    the serving-only install
(make test runs both)
"""

import importlib.util
import json
import os
import subprocess
import sys

WORDS = ("the man went to store he bought milk and it was good quick brown fox jumps over lazy "
         "dog cat sat on mat paris is capital of france who what where").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", *WORDS]
TEXTS = ["the man went to the store .", "the quick brown fox jumps over the lazy dog",
         "paris is the capital of france", "a"] * 3          # over the Rust tokenizer's "small"
MASKED = ["the man went to the [MASK] .", "paris is the [MASK] of [MASK] ."] * 5
HEADS = {"mlm": {}, "nsp": {}, "classifier": {"labels": ["neg", "pos"]},
         "tagger": {"labels": ["O", "B-LOC", "I-LOC"]}, "span": {"version": "1.1"}}


def answers(model, folder):
    """Every method's answers, and an index's, as JSON-ready values rounded to 5 decimals."""
    from kbert.retrieval import Index

    index = Index.build(model, TEXTS)
    index.save(os.path.join(folder, "index"))
    out = {"embed": model.embed(TEXTS, pooling="mean").tolist(),
           "fill_mask": model.fill_mask(MASKED, top_k=2), "classify": model.classify(TEXTS),
           "tag": model.tag(TEXTS), "next_sentence": model.next_sentence(TEXTS, TEXTS),
           "answer": model.answer(["who went ?"] * len(TEXTS), TEXTS),
           "search": Index.load(os.path.join(folder, "index")).search(TEXTS[1], model, top_k=3)}
    return json.loads(json.dumps(out), parse_float=lambda x: round(float(x), 5))


def export(folder):
    """The full install: a tiny checkpoint with every head, exported to ONNX, and its answers."""
    import keras

    import kbert
    from kbert import checkpoint

    keras.utils.set_random_seed(0)
    backbone = kbert.BertBackbone(kbert.BertConfig.preset("tiny", vocab_size=len(VOCAB)))
    heads = {name: checkpoint.make_head(name, backbone, opts) for name, opts in HEADS.items()}
    ckpt = checkpoint.save(os.path.join(folder, "ckpt"), backbone=backbone, heads=heads,
                           vocab=VOCAB, head_options=HEADS)
    done = subprocess.run([sys.executable, "-m", "kbert", "export", ckpt, "--format", "onnx",
                           "--output", os.path.join(folder, "export")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(os.path.join(folder, "answers.json"), "w") as f:
        json.dump(answers(kbert.load(os.path.join(folder, "export")), folder), f)


def serve(folder):
    """The serving-only install: the export's answers equal the full install's."""
    for package in ("tensorflow", "jax", "torch"):
        assert importlib.util.find_spec(package) is None, f"{package} is installed in this venv"
    import kbert

    model = kbert.load(os.path.join(folder, "export"))
    assert (model.runtime, model.dtype) == ("onnx", "float32")
    got = answers(model, os.path.join(folder, "served"))
    with open(os.path.join(folder, "answers.json")) as f:
        want = json.load(f)
    for method, value in want.items():
        assert got[method] == value, f"{method}: {got[method]} != {value}"
    kbert_cli = [sys.executable, "-m", "kbert", "index"]
    texts = os.path.join(folder, "texts.jsonl")
    with open(texts, "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in TEXTS[:4])
    for args in (["build", texts, "--model", os.path.join(folder, "export"), "--output",
                  os.path.join(folder, "cli-index")],
                 ["search", os.path.join(folder, "cli-index"), "the capital of france",
                  "--top-k", "1"]):
        done = subprocess.run(kbert_cli + args, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    assert "paris is the capital of france" in done.stdout, done.stdout
    assert not {"tensorflow", "keras", "jax", "torch"} & set(sys.modules), sorted(sys.modules)
    print(f"serving-only install: {len(want)} answers from an ONNX export equal the full "
          f"install's, and `kbert index build/search` ran, without TensorFlow or Keras")


if __name__ == "__main__":
    {"export": export, "serve": serve}[sys.argv[1]](sys.argv[2])
