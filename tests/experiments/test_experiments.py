"""`kbert experiments ablations --quick` end to end on a tiny corpus: every unit written once,
numbers in range, the table and curves, a second run that only reads back."""

import json
import math
import os

from helpers import WORDS, tiny_vocab, write_vocab
from kbert.experiments import ablations

SENTENCES = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(6 + i % 4)) + "."
             for i in range(60)]


def _tiny_shared(root):
    """A corpus of 16 short documents and a small SST-2 in the shared data layout."""
    for d in range(16):
        folder = root / "corpus" / f"part{d % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        paragraphs = [" ".join(SENTENCES[(d * 5 + p * 3 + k) % 60] for k in range(4))
                      for p in range(4)]
        (folder / f"doc{d:02d}.txt").write_text("\n\n".join(paragraphs) + "\n")
    glue = root / "glue" / "SST-2"
    glue.mkdir(parents=True)
    for name, n in (("train", 24), ("dev", 24)):
        rows = [f"{SENTENCES[i]}\t{i % 2}" for i in range(n)]
        (glue / f"{name}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")


def test_quick_ablations_run_once_then_resume(tmp_path):
    # The two variants with their own code paths: the left-to-right LM (a causal encoder) and
    # RoBERTa's full sentences (pretraining straight from text), each fine-tuned once.
    shared = tmp_path / "shared"
    _tiny_shared(shared)
    vocab = write_vocab(str(tmp_path), tiny_vocab())
    out, logged = tmp_path / "results", []
    results = ablations.run(out, quick=True, variants=["ltr", "roberta"], tasks=["sst2"],
                            shared=str(shared), vocab=vocab, log=logged.append)

    ltr = results["variants"]["ltr"]["pretraining"]
    assert ltr["steps"] == ablations.QUICK.steps
    assert len(ltr["curve"]["loss"]) == ablations.QUICK.curve_points
    assert sorted(ltr["heldout"]) == ["examples", "lm_accuracy", "lm_loss"]
    assert 0 <= ltr["heldout"]["lm_accuracy"] <= 1
    # A barely trained LM: its loss is about log(vocabulary size), neither 0 nor huge.
    assert 0.5 * math.log(len(tiny_vocab())) < ltr["heldout"]["lm_loss"] < 1.5 * math.log(
        len(tiny_vocab()))
    with open(os.path.join(out, "work", "checkpoints", "ltr", "config.json")) as f:
        assert json.load(f)["causal"] is True
    (scores,) = results["variants"]["ltr"]["finetuning"]["sst2"]
    assert 0 <= scores["accuracy"] <= 100
    roberta = results["variants"]["roberta"]["pretraining"]
    assert roberta["steps"] == ablations.QUICK.steps and roberta["objective"] == "mlm"
    assert sorted(roberta["heldout"]) == ["examples", "mlm_accuracy", "mlm_loss"]
    assert roberta["heldout"]["examples"] == ltr["heldout"]["examples"]   # one held-out set
    assert 0 <= roberta["heldout"]["mlm_accuracy"] <= 1

    table = (out / "ablations.md").read_text()
    assert "| LTR & No NSP | — | — |" in table                 # no MLM or NSP head to score
    assert "| 92.1 |" in table and "| 92.5 |" in table   # the papers' SST-2 beside ours
    assert (out / "curves.png").stat().st_size > 1000
    assert sorted(os.listdir(out / "units")) == [
        "data.json", "finetune-ltr-sst2-seed0.json", "finetune-roberta-sst2-seed0.json",
        "plan.json", "pretrain-ltr.json", "pretrain-roberta.json", "task-files-sst2.json"]

    logged.clear()                                              # a second run only reads back
    again = ablations.run(out, quick=True, variants=["ltr"], tasks=["sst2"], shared=str(shared),
                          vocab=vocab, log=logged.append)
    assert logged and all(line.endswith("done already, skipped") for line in logged), logged
    assert again["variants"] == {"ltr": results["variants"]["ltr"]}


def test_exported_plan_runs_without_tensorflow_and_reads_back_here(tmp_path):
    """`--export` (tokenizing, here) then `--arrays` in a JAX process that cannot import
    TensorFlow (a GPU machine): every unit, the table; then the same results folder read back
    here without running anything, and a run with another plan refused."""
    import subprocess
    import sys

    import pytest
    shared = tmp_path / "shared"
    _tiny_shared(shared)
    vocab = write_vocab(str(tmp_path), tiny_vocab())
    folder, out = tmp_path / "export", tmp_path / "results"
    size = ablations.export(folder, quick=True, variants=["no_nsp", "roberta"], tasks=["sst2"],
                            shared=str(shared), vocab=vocab, log=lambda line: None)
    assert sorted(os.listdir(folder)) == [".kbert-output.json", "corpus-train.npz",
                                          "full-sentences.npz", "heldout.npz", "plan.json",
                                          "tasks", "vocab.txt"]
    assert 0 < size < 2 ** 20
    code = ("import sys, runpy\n"
            "sys.modules['tensorflow'] = None  # any import of it fails\n"
            "sys.argv = ['kbert', 'experiments', 'ablations', '--output', sys.argv[1], "
            "'--arrays', sys.argv[2], '--work', sys.argv[3]]\n"
            "runpy.run_module('kbert', run_name='__main__')\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=root)
    done = subprocess.run([sys.executable, "-c", code, str(out), str(folder),
                           str(tmp_path / "device-work")], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(os.listdir(out / "units")) == [
        "finetune-no_nsp-sst2-seed0.json", "finetune-roberta-sst2-seed0.json", "plan.json",
        "pretrain-no_nsp.json", "pretrain-roberta.json"]
    with open(out / "ablations.json") as f:
        results = json.load(f)
    no_nsp, roberta = (results["variants"][v]["pretraining"] for v in ("no_nsp", "roberta"))
    assert no_nsp["feed"] == roberta["feed"] == "arrays"
    assert no_nsp["steps"] == roberta["steps"] == ablations.QUICK.steps
    assert no_nsp["heldout"]["examples"] == roberta["heldout"]["examples"] > 0
    for r in (no_nsp, roberta):        # barely trained: an MLM loss near log(vocabulary)
        assert 0.5 * math.log(len(tiny_vocab())) < r["heldout"]["mlm_loss"] < 1.5 * math.log(
            len(tiny_vocab()))
    assert "| No NSP |" in (out / "ablations.md").read_text()

    logged = []           # here: the device's units read back, nothing run, the table again
    again = ablations.run(out, quick=True, variants=["no_nsp", "roberta"], tasks=["sst2"],
                          shared=str(shared), vocab=vocab, log=logged.append)
    assert logged and all(line.endswith("done already, skipped") for line in logged), logged
    assert again["variants"] == results["variants"]
    with pytest.raises(ValueError, match="another plan: steps 4 \\(now 6\\)"):
        ablations.run(out, quick=True, steps=6, variants=["no_nsp"], tasks=["sst2"],
                      shared=str(shared), vocab=vocab, log=logged.append)


def test_feature_based_ner_reads_each_words_first_piece():
    """Table 7's features: word i's row is the chosen hidden layers at its first piece, and
    the rows combine (sum / concat) as the paper's table names them."""
    import numpy as np
    from keras import ops

    from kbert import BertBackbone, BertConfig
    from kbert.experiments import features
    from kbert.tasks import ner
    from kbert.tokenizer import Tokenizer

    vocab = tiny_vocab()
    backbone = BertBackbone(BertConfig.preset("tiny", vocab_size=len(vocab), num_layers=4))
    sentences = [ner.Sentence(["the", "cat", "jumps"], ["O", "B-PER", "O"]),
                 ner.Sentence(["paris", "is", "quickly", "good"], ["B-LOC", "O", "O", "O"])]
    labels = ner.label_list(sentences)
    encoded = ner.encode_ner(Tokenizer(vocab), sentences, labels, 16)
    cached, counts = features.word_features(features.HiddenLayers(backbone), encoded)
    assert counts == [3, 4] and cached.shape == (7, len(features.CACHED_LAYERS), 128)
    states = backbone({k: encoded.features[k] for k in ("input_ids", "segment_ids",
                                                        "input_mask")},
                      output_hidden_states=True)["hidden_states"]
    last = ops.convert_to_numpy(states[-1])
    second = encoded.word_positions[1]
    np.testing.assert_allclose(cached[3:, -1], last[1, second], atol=2e-2)   # float16 cache
    four = np.stack([ops.convert_to_numpy(states[i])[1, second] for i in (-4, -3, -2, -1)], 1)
    how, layers = features.COMBINATIONS["sum_last_four_hidden"]
    np.testing.assert_allclose(features.combine(cached, how, layers)[3:], four.sum(1), atol=5e-2)
    how, layers = features.COMBINATIONS["concat_last_four_hidden"]
    assert features.combine(cached, how, layers).shape == (7, 4 * 128)
    index = {t: i for i, t in enumerate(labels)}
    assert features._kept_labels(sentences, counts, index).tolist() == [
        index[t] for s in sentences for t in s.tags]
