"""kbert export: each SavedModel, loaded in a fresh process with only TensorFlow + TF Text, gives
`kbert.load(...)`'s answers on raw strings, lists string-input signatures, and uses only ops that
TF Serving 2.20 (TF core + TF Text 2.20) registers."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

import kbert
from helpers import WORDS, tiny_vocab
from kbert import BertConfig, checkpoint, serving

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
TOL = 1e-4


def _long_text(n_words=700, seed=0):
    rng = np.random.default_rng(seed)
    words = [str(w) for w in rng.choice([w for w in WORDS if w.isalpha()], n_words)]
    for i in range(11, n_words, 12):
        words[i] += "."
    return " ".join(words)


LONG = _long_text()
TEXTS = ["the [MASK] sat on the [MASK] .", "", "Paris is the capital of [MASK]!",
         "Héllo wörld — naïve café 東京 [MASK]", "[MASK] " + LONG, "[MASK] " * 7]
PAIRS = (["the man went to the store .", "", LONG, "Héllo [MASK] wörld"],
         ["he bought milk .", "", "a dog sat .", LONG])
QUESTIONS = ["what did he buy ?", "who ?", "", "where is the cat ?", "Wo ist das Café?"]
CONTEXTS = ["the man went to the store . he bought milk .", "", "the dog sat .", LONG,
            "Das Café liegt in Paris, nahe dem Fluss."]
IDS = {"input_ids": [[2, 10, 11, 4, 3, 0], [2, 12, 4, 3, 13, 3]],
       "segment_ids": [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1]],
       "input_mask": [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]}
INPUTS = {"fill_mask": {"text": TEXTS}, "embed": {"text": TEXTS},
          "next_sentence": {"sentence_a": PAIRS[0], "sentence_b": PAIRS[1]},
          "answer": {"question": QUESTIONS, "context": CONTEXTS},
          "classify": {"text": TEXTS}, "classify_pair": {"text": PAIRS[0], "text_pair": PAIRS[1]},
          "tag": {"text": TEXTS[1:] + ["Mr. Quick Brown went to Paris , France ."]}}

# Runs in a fresh interpreter: no kbert, no Keras — what TF Serving has.
CLIENT = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the TF Text ops
spec = json.load(open(sys.argv[1]))
out = {}
for directory, calls in spec["models"].items():
    model = tf.saved_model.load(directory)
    out[directory] = {"signatures": sorted(model.signatures)}
    for name, fn in model.signatures.items():
        out[directory]["io:" + name] = [sorted(fn.structured_input_signature[1]),
                                        sorted(fn.structured_outputs)]
        if name == "serving_default":  # the main task's function: compared by its inputs/outputs
            continue
        if name.endswith("_ids"):
            args = {k: tf.constant(v, tf.int32) for k, v in spec["ids"].items()}
        else:
            args = {k: tf.constant(v) for k, v in calls[name].items()}
        result = fn(**args)
        out[directory][name] = {
            k: (np.char.decode(v.numpy().astype(bytes), "utf-8").tolist()
                if v.dtype == tf.string else v.numpy().tolist()) for k, v in result.items()}
json.dump(out, open(sys.argv[2], "w"))
"""


def _tiny_checkpoints(root):
    """Tiny random checkpoints with every exportable head; head weights scaled up so that the
    labels, spans and fillers are decided by clear margins, not by float noise. The real MiniLM
    encoder, vocabulary and scale come from the shipped checkpoints (see `exported`)."""
    vocab, cfg = tiny_vocab(size=120), lambda: BertConfig.preset("tiny", vocab_size=120)
    keras.utils.set_random_seed(0)
    made = {}

    def save(name, model, options=None, scale=None):
        if scale:
            model.head.dense.kernel.assign(model.head.dense.kernel.numpy() * scale)
        made[name] = checkpoint.save(root / name, model, vocab=vocab, head_options=options)
    save("pretrained", kbert.BertPretrainer(cfg()))
    save("squad", kbert.BertQuestionAnswerer(cfg()), {"span": {"version": "1.1"}}, 100)
    save("squad2", kbert.BertQuestionAnswerer(cfg()),
         {"span": {"version": "2.0", "null_score_diff_threshold": 0.5}}, 100)
    save("classifier", kbert.BertClassifier(cfg(), num_labels=3),
         {"classifier": {"labels": ["neg", "neutral", "pos"]}}, 50)
    save("tagger", kbert.BertTokenClassifier(cfg(), num_labels=5),
         {"tagger": {"labels": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]}}, 50)
    made["encoder"] = checkpoint.save(root / "encoder", kbert.BertBackbone(cfg()), vocab=vocab)
    return made


def _shipped():
    return sorted(str(p.parent) for p in (REPO / "saved_models").glob("*/config.json"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{name: (checkpoint dir, SavedModel version dir)} and the fresh-process results."""
    root = tmp_path_factory.mktemp("export")
    ckpts = _tiny_checkpoints(root)
    ckpts.update({"shipped-" + os.path.basename(p): p for p in _shipped()})
    models = {name: (str(path), serving.export(str(path), str(root / "sm" / name)))
              for name, path in ckpts.items()}
    spec = {"models": {sm: INPUTS for _, sm in models.values()}, "ids": IDS}
    (root / "spec.json").write_text(json.dumps(spec))
    subprocess.run([sys.executable, "-c", CLIENT, str(root / "spec.json"), str(root / "out.json")],
                   check=True, env=ENV, cwd=root)
    return models, json.loads((root / "out.json").read_text())


def _close(a, b, what):
    a, b = np.asarray(a, "float64"), np.asarray(b, "float64")
    assert a.shape == b.shape, f"{what}: shapes {a.shape} != {b.shape}"
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    assert diff <= TOL, f"{what}: max difference {diff}"
    return diff


def _check_fill_mask(m, out):
    for i, text in enumerate(TEXTS):
        try:
            ref = m.fill_mask(text, top_k=5)
        except ValueError:
            assert out["num_masks"][i] == text.count("[MASK]") == 0, text
            assert set(np.ravel(out["tokens"][i])) == {""}
            continue
        assert out["num_masks"][i] == len(ref)
        for q, ranked in enumerate(ref[:5]):
            assert out["tokens"][i][q] == [r["token"] for r in ranked], (text, q)
            _close(out["scores"][i][q], [r["score"] for r in ranked], f"fill_mask {text[:30]}")
        assert all(t == "" for row in out["tokens"][i][len(ref):] for t in row)


def _check_answer(m, out):
    for i, (q, c) in enumerate(zip(QUESTIONS, CONTEXTS)):
        try:
            ref = m.answer(q, c, top_k=5)
        except ValueError:
            assert (out["text"][i], out["score"][i], out["start"][i]) == ("", 0.0, -1)
            continue
        assert out["top_text"][i][:len(ref)] == [r["text"] for r in ref], (q, c[:40])
        assert out["top_start"][i][:len(ref)] == [r["start"] for r in ref]
        assert out["top_end"][i][:len(ref)] == [r["end"] for r in ref]
        _close(out["top_score"][i][:len(ref)], [r["score"] for r in ref], f"answer {q}")
        assert out["text"][i] == ref[0]["text"] and out["start"][i] == ref[0]["start"]
        assert c[out["start"][i]:out["end"][i]] == out["text"][i] or out["start"][i] == -1


def _check_tag(m, out):
    for i, ref in enumerate(m.tag(INPUTS["tag"]["text"])):
        n = out["num_entities"][i]
        got = [{"text": out["entity_text"][i][k], "label": out["entity_label"][i][k],
                "start": out["entity_start"][i][k], "end": out["entity_end"][i][k]}
               for k in range(n)]
        assert got == [{k: e[k] for k in ("text", "label", "start", "end")} for e in ref]
        _close(out["entity_score"][i][:n], [e["score"] for e in ref], "tag")


def _check_strings(m, result):
    """Each string signature against the Keras pipeline; returns the max score differences."""
    diffs = {}
    if "fill_mask" in result:
        _check_fill_mask(m, result["fill_mask"])
    if "next_sentence" in result:
        # The pipeline refuses an empty sentence (no next sentence to judge); the signature
        # answers every row of its batch, so only the non-empty pairs are compared.
        rows = [i for i, (a, b) in enumerate(zip(*PAIRS)) if a.strip() and b.strip()]
        ref = m.next_sentence([PAIRS[0][i] for i in rows], [PAIRS[1][i] for i in rows])
        got = [result["next_sentence"]["is_next"][i] for i in rows]
        diffs["next_sentence"] = _close(got, [r["is_next"] for r in ref], "is_next")
    if "answer" in result:
        _check_answer(m, result["answer"])
    if "classify" in result:
        labels = m.checkpoint.head_options["classifier"]["labels"]
        ref = [[r[k] for k in labels] for r in m.classify(TEXTS)]
        _close(result["classify"]["probabilities"], ref, "classify")
        ref = [[r[k] for k in labels] for r in m.classify(PAIRS[0], text_pair=PAIRS[1])]
        _close(result["classify_pair"]["probabilities"], ref, "classify_pair")
        assert result["classify"]["label"] == [labels[int(np.argmax(r))] for r in
                                               result["classify"]["probabilities"]]
    if "tag" in result:
        _check_tag(m, result["tag"])
    _check_embed(m, result["embed"])
    return diffs


def _cosines(a, b):
    a, b = np.asarray(a, "float64"), np.asarray(b, "float64")
    return np.sum(a * b, -1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1),
                                          1e-12)


def _check_embed(m, out):
    """`embed` is `Bert.embed` with its defaults: the length a sentence encoder records (256
    for minilm-l6-v2, where the long text is cut) and its pooling; `embedding` at unit length."""
    for pooling in ("cls", "mean"):
        _close(out[pooling], m.embed(TEXTS, pooling=pooling), f"embed {pooling}")
    ref = m.embed(TEXTS, normalize=True)                         # the in-graph twin's reference
    assert np.allclose(np.linalg.norm(out["embedding"], axis=-1), 1.0, atol=1e-5)
    assert _cosines(out["embedding"], ref).min() >= 0.9999
    longest = m.embedding_defaults["max_seq_length"]
    assert len(m.tokenizer.encode(TEXTS[4])) > longest           # a text past the length
    if longest < m.max_seq_length:                               # ... which matters here
        full = m.embed(TEXTS[4:5], max_seq_length=m.max_seq_length)
        assert _cosines(out["embedding"][4:5], full)[0] < 0.9999


def _check_ids(m, result):
    features = {k: np.asarray(v, "int32") for k, v in IDS.items()}
    out = m.backbone(features)
    _close(result["embed_ids"]["sequence_output"], out["sequence_output"], "embed_ids")
    heads = m.heads
    if "mlm" in heads:
        _close(result["fill_mask_ids"]["logits"], heads["mlm"](out["sequence_output"]), "mlm")
    if "nsp" in heads:
        _close(result["next_sentence_ids"]["logits"], heads["nsp"](out["pooled_output"]), "nsp")
    if "span" in heads:
        start, _ = heads["span"](out["sequence_output"])
        _close(result["answer_ids"]["start_logits"], start, "span")
    if "classifier" in heads:
        _close(result["classify_ids"]["logits"], heads["classifier"](out["pooled_output"]), "cls")
    if "tagger" in heads:
        _close(result["tag_ids"]["logits"], heads["tagger"](out["sequence_output"]), "tagger")


def test_savedmodels_give_the_pipeline_answers(exported):
    models, results = exported
    for name, (ckpt, sm) in models.items():
        m = kbert.load(ckpt)
        result = results[sm]
        expected = set(serving.signatures_for(m.heads))
        expected |= {f"{n}_ids" for n in expected if n != "classify_pair"} | {"serving_default"}
        assert set(result["signatures"]) == expected, name
        _check_strings(m, result)
        _check_ids(m, result)
        main = next(n for n in serving.MAIN_ORDER if n in result)
        assert result["io:serving_default"] == result["io:" + main], name


def test_saved_model_cli_lists_string_signatures(exported):
    models, _ = exported
    shown = {name: subprocess.Popen([str(BIN / "saved_model_cli"), "show", "--all", "--dir",
                                     models[name][1]], stdout=subprocess.PIPE, text=True, env=ENV)
             for name in ("pretrained", "squad")}
    for name, process in shown.items():
        out = process.communicate()[0]
        assert process.returncode == 0
        names = ["fill_mask", "next_sentence", "embed"] if name == "pretrained" else ["answer"]
        for sig in names + ["serving_default"]:
            block = out.split(f"signature_def['{sig}']:")[1].split("signature_def[")[0]
            assert "dtype: DT_STRING" in block.split("outputs:")[0], sig


OPS = r"""
import json
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session as c
def registered():
    ops = op_def_pb2.OpList.FromString(c.TF_GetBuffer(c.TF_GetAllOpList()))
    return {op.name for op in ops.op}
core = registered()
import tensorflow_text  # loads every op library of TF Text
print(json.dumps({"core": sorted(core), "text": sorted(registered() - core)}))
"""


def test_graphs_use_only_tf_serving_ops(exported):
    models, _ = exported
    registry = json.loads(subprocess.run([sys.executable, "-c", OPS], capture_output=True,
                                         text=True, env=ENV, check=True).stdout)
    python_only = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}   # not in the model server
    allowed = (set(registry["core"]) - python_only) | set(registry["text"])
    used = set()
    for _, sm in models.values():
        ops = serving.saved_model_ops(sm)
        assert not ops - allowed, f"{sm}: ops outside TF core + TF Text 2.20: {ops - allowed}"
        used |= ops
    text_ops = used & set(registry["text"])
    assert text_ops <= {"RegexSplitWithOffsets", "NormalizeUTF8", "WordpieceTokenizeWithOffsets"}


def test_export_errors_are_one_line(tmp_path, exported, capsys):
    from kbert import cli
    models, _ = exported
    assert cli.main(["export", str(tmp_path / "nope"), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["export", models["pretrained"][0], "--output", str(tmp_path / "o"),
                     "--signatures", "answer"]) == 2
    assert "no 'span' head" in capsys.readouterr().err


# Every field differs from its default; the answer-side ones are those `Bert.answer` also takes.
OPTIONS = serving.ExportOptions(top_k=3, max_masks=2, answer_seq_length=96, doc_stride=32,
                                max_query_length=48, max_answer_length=7, n_best=18,
                                window_batch=4)


def _recorded_options(version_dir):
    with open(os.path.join(version_dir, "assets.extra", "export_options.json")) as f:
        return json.load(f)


def test_every_export_option_reaches_the_saved_model_in_process(tmp_path, exported):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the TF Text ops the graph uses)

    models, _ = exported
    assert all(f.default != getattr(OPTIONS, f.name)
               for f in dataclasses.fields(serving.ExportOptions))
    sm = serving.export(models["squad"][0], tmp_path / "sm", signatures=["answer"],
                        options=OPTIONS)
    assert _recorded_options(sm) == dataclasses.asdict(OPTIONS)
    questions = QUESTIONS + [LONG]                   # a question past max_query_length
    contexts = CONTEXTS + [CONTEXTS[0]]
    out = tf.saved_model.load(sm).signatures["answer"](question=tf.constant(questions),
                                                       context=tf.constant(contexts))
    assert out["top_text"].shape == (len(questions), OPTIONS.top_k)
    m = kbert.load(models["squad"][0])
    for i, (q, c) in enumerate(zip(questions, contexts)):   # windows, stride, answer length
        if not q or not c:
            continue
        ref = m.answer(q, c, top_k=OPTIONS.top_k, max_seq_length=OPTIONS.answer_seq_length,
                       doc_stride=OPTIONS.doc_stride, max_answer_length=OPTIONS.max_answer_length,
                       max_query_length=OPTIONS.max_query_length, n_best=OPTIONS.n_best)
        got = [t.decode() for t in out["top_text"][i].numpy()[:len(ref)]]
        assert got == [r["text"] for r in ref], (q, c[:40])
        assert out["top_start"][i].numpy()[:len(ref)].tolist() == [r["start"] for r in ref]


def test_other_backend_exports_every_option_through_a_tensorflow_subprocess(tmp_path, exported):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the TF Text ops the graph uses)

    models, _ = exported
    code = ("import sys, kbert.serving as s\n"
            f"o = s.ExportOptions(**{dataclasses.asdict(OPTIONS)!r})\n"
            "print(s.export(sys.argv[1], sys.argv[2], version=3, signatures=['fill_mask'], "
            "options=o))\n")
    env = dict(ENV, KERAS_BACKEND="jax")
    done = subprocess.run([sys.executable, "-c", code, models["pretrained"][0],
                           str(tmp_path / "sm")], capture_output=True, text=True, env=env,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    sm = done.stdout.strip().splitlines()[-1]
    assert sm == str(tmp_path / "sm" / "3") and _recorded_options(sm) == dataclasses.asdict(OPTIONS)
    out = tf.saved_model.load(sm).signatures["fill_mask"](text=tf.constant(TEXTS))
    assert out["tokens"].shape == (len(TEXTS), OPTIONS.max_masks, OPTIONS.top_k)
    m = kbert.load(models["pretrained"][0])
    ref = m.fill_mask(TEXTS[0], top_k=OPTIONS.top_k)
    assert [[t.decode() for t in row] for row in out["tokens"][0].numpy()] == [
        [r["token"] for r in ranked] for ranked in ref[:OPTIONS.max_masks]]


def test_other_backend_export_errors_come_back_as_one_line(tmp_path, exported):
    models, _ = exported
    env = dict(ENV, KERAS_BACKEND="jax")
    done = subprocess.run([sys.executable, "-m", "kbert", "export", models["pretrained"][0],
                           "--output", str(tmp_path / "sm"), "--signatures", "answer"],
                          capture_output=True, text=True, env=env, cwd=REPO)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1 and "no 'span' head" in err[0], done.stderr
    assert not (tmp_path / "sm" / "1").exists()


def test_export_shows_its_steps_on_stderr_unless_quiet(tmp_path, capsys):
    """Each signature traced, then the saving: a count of the steps and the time left on
    stderr; --quiet none; stdout the same."""
    from helpers import save_tiny_encoder
    from kbert import cli
    ckpt = save_tiny_encoder(tmp_path / "encoder", tiny_vocab(size=120))
    command = ["export", ckpt, "--output", str(tmp_path / "sm"), "--overwrite"]
    assert cli.main(command) == 0
    shown = capsys.readouterr()
    lines = shown.err.strip().splitlines()
    assert len(lines) == 1, shown.err                      # a quick run: its last line only
    assert lines[-1].startswith("export: saving: 3/3 step (100%)") and " left" in lines[-1]
    assert cli.main(command + ["--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == shown.out
