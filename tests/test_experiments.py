"""`kbert experiments ablations --quick` end to end on a tiny corpus: every unit written once,
numbers in range, the table and curves, a second run that only reads back."""

import json
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
    shared = tmp_path / "shared"
    _tiny_shared(shared)
    vocab = write_vocab(str(tmp_path), tiny_vocab())
    out, logged = tmp_path / "results", []
    results = ablations.run(out, quick=True, variants=["bert", "ltr", "roberta"],
                            tasks=["sst2"], shared=str(shared), vocab=vocab, log=logged.append)

    bert, ltr = (results["variants"][v]["pretraining"] for v in ("bert", "ltr"))
    assert bert["steps"] == ltr["steps"] == ablations.QUICK.steps
    assert len(bert["curve"]["loss"]) == ablations.QUICK.curve_points
    assert 0 <= bert["heldout"]["mlm_accuracy"] <= 1 and 0 <= bert["heldout"]["nsp_accuracy"] <= 1
    assert sorted(ltr["heldout"]) == ["examples", "lm_accuracy", "lm_loss"]
    # An untrained-ish LM: its loss is near log(vocabulary size), not 0 and not huge.
    assert 1.0 < ltr["heldout"]["lm_loss"] < 2 * __import__("math").log(len(tiny_vocab()))
    with open(os.path.join(out, "work", "checkpoints", "ltr", "config.json")) as f:
        assert json.load(f)["causal"] is True
    for v in ("bert", "ltr"):
        (scores,) = results["variants"][v]["finetuning"]["sst2"]
        assert 0 <= scores["accuracy"] <= 100
    assert "roberta" in results["skipped"] and "roberta" not in results["variants"]

    table = (out / "ablations.md").read_text()
    assert "| BERT (MLM + NSP) |" in table and "| LTR & No NSP |" in table
    assert "92.7" in table and "not run" in table          # the paper's SST-2 beside ours
    assert (out / "curves.png").stat().st_size > 1000
    done = sorted(os.listdir(out / "units"))
    assert done == ["data.json", "finetune-bert-sst2-seed0.json", "finetune-ltr-sst2-seed0.json",
                    "pretrain-bert.json", "pretrain-ltr.json", "task-files-sst2.json"]

    logged.clear()                                          # a second run only reads back
    again = ablations.run(out, quick=True, variants=["bert", "ltr"], tasks=["sst2"],
                          shared=str(shared), vocab=vocab, log=logged.append)
    assert all(line.endswith("done already, skipped") for line in logged), logged
    assert again["variants"] == results["variants"]
