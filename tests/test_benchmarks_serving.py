"""benchmarks/serve_latency.py's runtimes section on tiny models: every peer gives HF float32's
answers (strings in, outputs out), kbert's float32 path agrees with them on the same weights,
and the FLOPs, accuracy and floor arithmetic behind the printed lines."""

import json
import sys

import keras
import numpy as np
import pytest

from helpers import REPO, tiny_vocab
from kbert import checkpoint
from kbert.convert import export
from kbert.network.config import BertConfig

sys.path.insert(0, str(REPO / "benchmarks"))
import serve_runtimes  # noqa: E402
import serving_peers as peers  # noqa: E402

TEXTS = ["the man went to the store .", "he bought milk", "paris is the capital of france ."]
MASKED = ["the man went to the [MASK] .", "he [MASK] milk", "paris is the [MASK] of france ."]
QUESTIONS = ["what did he buy ?", "where did the man go ?"]
CONTEXTS = ["the man went to the store . he bought milk and it was good .",
            "the quick brown fox jumps over the lazy dog . the man went to paris ."]


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """Every engine on tiny random kbert checkpoints (MLM + NSP; span) and their HF copies,
    and the lines saying which did not run."""
    import kbert
    root = tmp_path_factory.mktemp("serving")
    vocab, cfg = tiny_vocab(size=120), lambda: BertConfig.preset("tiny", vocab_size=120)
    keras.utils.set_random_seed(0)
    qa = kbert.BertQuestionAnswerer(cfg())
    qa.head.dense.kernel.assign(qa.head.dense.kernel.numpy() * 100)   # spans by clear margins
    paths = {"mlm": checkpoint.save(root / "mlm", kbert.BertPretrainer(cfg()), vocab=vocab),
             "squad": checkpoint.save(root / "squad", qa, vocab=vocab,
                                      head_options={"span": {"version": "1.1"}})}
    paths["hf_mlm"] = export("hf", paths["mlm"], str(root / "hf-mlm"))
    paths["hf_squad"] = export("hf", paths["squad"], str(root / "hf-squad"))
    made, skipped = serve_runtimes.build_peers(paths, str(root / "onnx"), 1, fast_bf16=False)
    kbert_rows, kbert_skipped = serve_runtimes.build_kbert(paths, fast_bf16=False)
    return made + kbert_rows, skipped + kbert_skipped


def test_every_engine_gives_hf_float32_answers(engines):
    engines, skipped = engines
    names = [e.name for e in engines]
    assert names[0] == "HF torch fp32" and "kbert keras float32" in names
    assert "HF torch autocast bf16: skipped: this CPU has neither AMX nor avx512_bf16" in skipped
    reference = engines[0]
    vectors = reference.embed(TEXTS)
    tokens = reference.fill_mask(MASKED)
    answers = reference.answer(QUESTIONS, CONTEXTS)
    assert vectors.shape == (3, 128) and [len(t) for t in tokens] == [5, 5, 5]
    assert all(a and a in c for a, c in zip(answers, CONTEXTS)), answers
    for engine in engines[1:]:
        int8 = "int8" in engine.name
        cos = peers.worst_cosine(engine.embed(TEXTS), vectors)
        assert cos > (0.9 if int8 else 0.9999), (engine.name, cos)
        if engine.fill_mask is None:             # sentence-transformers: embed only
            continue
        filled = engine.fill_mask(MASKED)
        assert [len(t) for t in filled] == [5, 5, 5], engine.name
        if not int8:
            assert peers.top1_agreement(filled, tokens) == 1.0, (engine.name, filled, tokens)
            assert engine.answer(QUESTIONS, CONTEXTS) == answers, engine.name


def test_measure_then_floors_on_tiny_inputs(engines):
    engines, _ = engines
    inputs = {"questions": QUESTIONS, "passages": CONTEXTS, "masked": MASKED,
              "pairs": (QUESTIONS, CONTEXTS)}
    results, refused = serve_runtimes.measure(engines, inputs, rounds=1)
    assert not refused
    assert sorted(results) == sorted(w for _, w, _ in serve_runtimes.WORKLOADS)
    for method, workload, _ in serve_runtimes.WORKLOADS:
        cell = results[workload]["kbert keras float32"]
        assert cell["ms"] > 0 and cell["accuracy"] >= serve_runtimes.ACCURACY[method], workload
    lines, _ = serve_runtimes.floors(results)
    assert any(line.startswith("embed, 32 passages: kbert ") for line in lines), lines


def _cell(ms, accuracy=1.0):
    return {"ms": ms, "accuracy": accuracy}


def test_floor_arithmetic():
    results = {w: {"kbert keras float32": _cell(100), "OpenVINO": _cell(120),
                   "ONNX Runtime fp32": _cell(105), "HF torch fp32": _cell(300)}
               for _, w, _ in serve_runtimes.WORKLOADS}
    lines, failures = serve_runtimes.floors(results, ["HF torch autocast bf16: skipped: x"])
    assert failures == []
    assert "embed, 1 question: kbert keras float32 (100.0 ms) = 0.83x OpenVINO's latency " \
           "(floor <= 1.1x)" in lines
    assert "embed, 32 passages: kbert keras float32 (100.0 ms) vs HF torch autocast bf16: no " \
           "row (HF torch autocast bf16: skipped: x)" in lines
    results["32 passages"]["HF torch fp32"] = _cell(200)           # 2.0x, floor 2.5x
    results["1 pair"]["kbert keras float32"] = _cell(100, 0.5)     # inaccurate: not a path
    results["1 pair"]["kbert onnx float32"] = _cell(130)
    results["32 pairs"]["kbert onnx int8"] = _cell(90, 0.99)       # 1.11x float32: not enough
    _, failures = serve_runtimes.floors(results)
    assert failures == ["embed, 32 passages: 2.00x HF torch fp32 (>= 2.5x)",
                        "answer, 32 pairs: kbert onnx int8 offered at 1.11x kbert keras float32,"
                        " text agree 0.9900",
                        "answer, 1 pair: 1.24x ONNX Runtime fp32 (<= 1.0x)"]


def test_flops_and_accuracy_measures():
    cfg = {"hidden_size": 384, "intermediate_size": 1536, "num_hidden_layers": 6,
           "vocab_size": 30522}
    # MiniLM-L6: 10.6 M multiply-adds a token in the weight products
    assert peers.model_flops([1], cfg) == 2 * 10_616_832 + 4 * 384 * 6
    assert peers.model_flops([10, 20], cfg) == 2 * 10_616_832 * 30 + 4 * 500 * 384 * 6
    assert peers.worst_cosine([[1, 0], [1, 1]], [[2, 0], [1, 0]]) == pytest.approx(0.5 ** 0.5)
    assert peers.top1_agreement([["a", "b"], ["c"]], [["a"], ["b"]]) == 0.5
    assert peers.answer_agreement(["The Denver Broncos.", "x"], ["denver broncos", "y"]) == 0.5


def test_squad_inputs(tmp_path):
    import transformers
    tokenizer = transformers.BertTokenizerFast.from_pretrained(
        str(REPO / "saved_models" / "minilm-l6-mlm-nsp"))           # its vocab.txt
    long = " ".join(["The quick brown fox jumps over the lazy dog near the river bank."] * 40)
    data = {"data": [{"paragraphs": [
        {"context": long, "qas": [{"question": "What jumps?"}, {"question": "Where?"}]},
        {"context": "A man went to the store to buy some fresh milk for his family today.",
         "qas": [{"question": "What did he buy?"}]}]}]}
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data))
    inputs = peers.squad_inputs(str(path), tokenizer, n=2)
    assert inputs["questions"] == ["What jumps?", "What did he buy?"]
    assert inputs["pairs"][1][0] == long and long.startswith(inputs["passages"][0])
    assert peers.token_lengths(tokenizer, inputs["passages"]) == [
        256, len(tokenizer(inputs["pairs"][1][1])["input_ids"])]          # the short one whole
    assert all(m.count("[MASK]") == 1 for m in inputs["masked"]) and len(inputs["masked"]) == 2
    assert np.all(np.array(peers.token_lengths(tokenizer, inputs["masked"])) > 8)
