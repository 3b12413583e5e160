"""The checkpoints in saved_models/ load on every backend and give sensible answers."""

import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MLM = REPO / "saved_models" / "minilm-l6-mlm-nsp"
SQUAD = REPO / "saved_models" / "minilm-l6-squad"
CONTEXT = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, "
           "France. It is named after the engineer Gustave Eiffel, whose company designed and "
           "built the tower from 1887 to 1889.")


@pytest.mark.multibackend
def test_masked_lm_and_next_sentence_model():
    if not MLM.is_dir():
        pytest.skip("saved_models/minilm-l6-mlm-nsp is absent")
    import kbert
    m = kbert.load(str(MLM))
    assert m.fill_mask("The United [MASK] of America.", top_k=3)[0][0]["token"] == "states"
    follows = m.next_sentence("The man went to the store.", "He bought a gallon of milk.")
    random = m.next_sentence("The man went to the store.", "Penguins are flightless birds.")
    assert follows["is_next"] > 0.5 > random["is_next"]


@pytest.mark.multibackend
def test_question_answering_model():
    if not SQUAD.is_dir():
        pytest.skip("saved_models/minilm-l6-squad is absent")
    import kbert
    qa = kbert.load(str(SQUAD))
    best = qa.answer("Who is the tower named after?", CONTEXT)[0]
    assert "Eiffel" in best["text"] and CONTEXT[best["start"]:best["end"]] == best["text"]
    assert "1887" in qa.answer("When was the tower built?", CONTEXT)[0]["text"]


@pytest.mark.multibackend
def test_squad_retriever_finds_the_answering_passage_and_reads_its_settings():
    path = REPO / "saved_models" / "minilm-l6-squad-retriever"
    if not path.is_dir():
        pytest.skip("saved_models/minilm-l6-squad-retriever is absent")
    import kbert
    m = kbert.load(str(path))
    assert m.embedding_defaults["max_seq_length"] == 256 and not m.heads
    passages = ["Genghis Khan founded the Mongol Empire in 1206.", CONTEXT,
                "Penguins are flightless birds of the southern hemisphere."]
    hits = m.search(["Who designed the tower in Paris?", "When did the Mongol Empire begin?"],
                    passages, top_k=3)
    assert [h[0]["index"] for h in hits] == [1, 0]
