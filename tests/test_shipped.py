"""The shipped checkpoints (`saved_models/`): each stored as compactly as the others (float16
weights), described by a MODEL_CARD.md whose data checksums are the shared data's, listed in
docs/results.md's table and counted right in the README; the fine-tuned ones carry the heads the
playground's tabs start on. (README.md's examples run on them and give what it shows:
tests/test_readme.py.)"""

import json
import re
import struct

import pytest

from helpers import REPO

SHIPPED = sorted(p for p in (REPO / "saved_models").iterdir() if p.is_dir())
WORDS = {5: "Five", 6: "Six", 7: "Seven", 8: "Eight", 9: "Nine"}


def _tensor_dtypes(path):
    """The dtypes of a safetensors file's tensors, from its header (nothing else read)."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return {v["dtype"] for k, v in header.items() if k != "__metadata__"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_each_is_complete_float16_and_carded(path):
    for name in ("MODEL_CARD.md", "config.json", "model.safetensors", "vocab.txt"):
        assert (path / name).is_file(), f"{path.name}: no {name}"
    assert _tensor_dtypes(path / "model.safetensors") == {"F16"}
    assert (path / "model.safetensors").stat().st_size < 50e6
    card = (path / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert card.startswith(f"# {path.name}")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_cards_name_their_data_by_the_shared_checksums(path, shared_data):
    known = set(re.findall(r"\b[0-9a-f]{64}\b",
                           (shared_data / "README.md").read_text(encoding="utf-8")))
    card = (path / "MODEL_CARD.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\b[0-9a-f]{64}\b", card))
    assert named <= known, f"{path.name}: checksums not in ../shared/data/README.md: " \
                           f"{named - known}"


def test_readme_and_results_list_every_shipped_checkpoint():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"{WORDS[len(SHIPPED)]} checkpoints ship in `saved_models/`" in readme
    results = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    table = results[results.index("## Shipped checkpoints"):results.index("## Fine-tuning")]
    listed = re.findall(r"^\| `([\w-]+)` \|", table, re.M)
    assert sorted(listed) == [p.name for p in SHIPPED]


def test_the_task_models_answer_in_named_labels():
    heads = {p.name: json.loads((p / "config.json").read_text())["heads"] for p in SHIPPED}
    sentiment = heads["minilm-l6-sst2"]["classifier"]
    assert sentiment["labels"] == ["negative", "positive"]
    assert sentiment["label_values"] == ["0", "1"]          # SST-2's files
    tags = heads["minilm-l6-conll2003"]["tagger"]["labels"]
    assert {t[2:] for t in tags if t != "O"} == {"PER", "ORG", "LOC", "MISC"}
    assert heads["minilm-l6-squad"]["span"]["version"] == "1.1"


def test_the_reader_trains_on_part_a_and_the_fragment_never_on_held_out(shared_data, tmp_path):
    """benchmarks/data_splits.py's training file for the shipped reader: part a's 18 training
    articles and the train fragment's 11 (8,256 questions); no held-out article in it."""
    import sys
    sys.path.insert(0, str(REPO / "benchmarks"))
    import data_splits
    import shipped_models
    train, held, _ = data_splits.split_squad(shared_data / "squad" / "dev-v1.1-part-a.json",
                                             tmp_path)
    plus = data_splits.squad_train_plus(train, shared_data / "squad" / "train-v1.1-fragment.json",
                                        tmp_path)
    articles = json.loads(open(plus, encoding="utf-8").read())["data"]
    held_titles = {a["title"] for a in json.loads(open(held, encoding="utf-8").read())["data"]}
    assert len(articles) == 29 and not held_titles & {a["title"] for a in articles}
    assert sum(len(p["qas"]) for a in articles for p in a["paragraphs"]) == 8256
    with pytest.raises(SystemExit, match="shares articles"):
        data_splits.squad_train_plus(train, train, tmp_path)
    # the recipe each card gives is the script's: float16 weights, named sentiment labels
    task, dev, argv = shipped_models.command("minilm-l6-sst2", "INIT", "DATA", "WORK", 0, "OUT")
    assert task == "sst2" and dev == "DATA/glue/SST-2/dev.tsv"
    assert " --label-names negative,positive " in " ".join(argv) + " "
    for name in shipped_models.MODELS:
        card = (REPO / "saved_models" / name / "MODEL_CARD.md").read_text(encoding="utf-8")
        recipe = shipped_models.MODELS[name][3] + " " + shipped_models.COMMON
        flags = re.findall(r"--[\w-]+ \S+", recipe)
        assert all(f in " ".join(card.split()) for f in flags), (name, flags)
