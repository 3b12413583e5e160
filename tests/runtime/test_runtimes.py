"""Runtimes and precisions: every `kbert.load` method gives the Keras float32 results through
OpenVINO and ONNX Runtime (exported graphs), and within bfloat16's tolerance in bfloat16.

The float32 Keras path is the reference. Graphs are made in a child process on TensorFlow, so
the tests that make them run on every backend."""

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

import kbert
from helpers import REPO, tiny_vocab
from kbert import BertConfig, checkpoint, cli, hardware
from kbert.runtime import RuntimeOptionError, graphs, resolve

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["the man went to the store .", "the quick brown fox jumps over the lazy dog",
         "paris is the capital of france", "a"]
MASKED = ["the man went to the [MASK] .", "paris is the [MASK] of [MASK] .",
          "the [MASK] sat on the mat"]
RUNTIMES = ["openvino", "onnx"]



@pytest.fixture(scope="module")
def every_head(tmp_path_factory):
    """A tiny checkpoint with every head `kbert.load` serves, and a graph cache of its own."""
    keras.utils.set_random_seed(0)
    root = tmp_path_factory.mktemp("runtimes")
    os.environ["KBERT_CACHE"] = str(root / "cache")
    backbone = kbert.BertBackbone(BertConfig.preset("tiny", vocab_size=120))
    options = {"mlm": {}, "nsp": {}, "classifier": {"labels": ["neg", "pos", "mixed"]},
               "tagger": {"labels": LABELS}, "span": {"version": "1.1"}}
    heads = {name: checkpoint.make_head(name, backbone, opts) for name, opts in options.items()}
    path = checkpoint.save(root / "every-head", backbone=backbone, heads=heads,
                           vocab=tiny_vocab(size=120), head_options=options)
    # Every pass `_results` runs, made up front: one child process a format, not one a pass.
    kinds = [*graphs.default_kinds(options), ("hidden", (0, backbone.config.num_layers))]
    for fmt, package in [("openvino", "openvino"), ("onnx", "onnxruntime")]:
        if importlib.util.find_spec(package):
            graphs.convert_checkpoint(str(path), graphs.cache_dir(str(path), fmt), kinds, fmt)
    yield str(path)
    os.environ.pop("KBERT_CACHE", None)


def _results(m):
    return {"fill": m.fill_mask(MASKED, top_k=3),
            "nsp": m.next_sentence(TEXTS[:2], TEXTS[2:]),
            "embed_mean": m.embed(TEXTS, pooling="mean"), "embed_cls": m.embed(TEXTS),
            "classify": m.classify(TEXTS), "tag": m.tag(TEXTS),
            "hidden": m.hidden_states(TEXTS[1], layers=(0, -1))["features"],
            "answer": m.answer(["who went to the store ?"] * 2,
                               ["the man went to the store .", TEXTS[1]], top_k=2)}


def _cosine(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _assert_same(ours, ref, atol):
    """Same top-1 fillers, argmax labels, spans and entities; probabilities and vectors
    within `atol`; embedding cosine >= 0.999."""
    for got, want in zip(ours["fill"], ref["fill"]):
        for g, w in zip(got, want):
            assert g[0]["token"] == w[0]["token"]
            np.testing.assert_allclose([x["score"] for x in g], [x["score"] for x in w],
                                       atol=atol)
    np.testing.assert_allclose([p["is_next"] for p in ours["nsp"]],
                               [p["is_next"] for p in ref["nsp"]], atol=atol)
    for key in ("embed_mean", "embed_cls"):
        assert _cosine(ours[key], ref[key]).min() >= 0.999
    np.testing.assert_allclose(ours["hidden"], ref["hidden"], atol=atol)
    for got, want in zip(ours["classify"], ref["classify"]):
        assert max(got, key=got.get) == max(want, key=want.get)
        np.testing.assert_allclose(list(got.values()), list(want.values()), atol=atol)
    assert [[(e["label"], e["start"], e["end"]) for e in t] for t in ours["tag"]] == \
        [[(e["label"], e["start"], e["end"]) for e in t] for t in ref["tag"]]
    assert [[(a["text"], a["start"]) for a in q] for q in ours["answer"]] == \
        [[(a["text"], a["start"]) for a in q] for q in ref["answer"]]


@pytest.mark.parametrize("runtime", [pytest.param("openvino", marks=pytest.mark.multibackend),
                                     "onnx"])
def test_every_method_gives_the_keras_results_through_the_runtime(every_head, runtime):
    pytest.importorskip("openvino" if runtime == "openvino" else "onnxruntime")
    ref = _results(kbert.load(every_head))
    m = kbert.load(every_head, runtime=runtime)
    assert (m.runtime, m.dtype) == (runtime, "float32")
    ours = _results(m)
    _assert_same(ours, ref, atol=1e-4)
    np.testing.assert_allclose(ours["embed_mean"], ref["embed_mean"], atol=1e-4)
    # Graphs run at the packed shape: a new batch shape needs no new graph.
    loaded = m.trace_count
    m.embed(TEXTS[:1] * 5, pooling="mean")
    assert m.trace_count == loaded


_SIGNAL_AFTER_OPENVINO = """
import gc, os, signal, sys
import kbert
first = kbert.load(sys.argv[1], runtime="openvino")
first.fill_mask(["the [MASK] sat"]), first.embed(["a b"])
second = kbert.load(sys.argv[1], runtime="openvino")
second.embed(["a"])
del first, second
gc.collect()
handled = []
signal.signal(signal.SIGINT, lambda *_: handled.append(1))
os.kill(os.getpid(), signal.SIGINT)
print("handled" if handled else "missed")
"""


def test_a_signal_after_openvino_models_are_freed_is_handled(every_head):
    """OpenVINO's CPU plugin swaps the compiling thread's alternate signal stack per Core; Cores
    freed out of order left it unmapped and the next Ctrl-C a segmentation fault. One Core."""
    pytest.importorskip("openvino")
    done = subprocess.run([sys.executable, "-c", _SIGNAL_AFTER_OPENVINO, every_head],
                          capture_output=True, text=True, timeout=600)
    assert (done.returncode, done.stdout.strip().splitlines()[-1:]) == (0, ["handled"]), \
        done.stderr[-2000:]


def test_graphs_are_made_in_a_child_process(every_head, tmp_path, monkeypatch):
    """tf2onnx peaks at gigabytes and a process that converted keeps them: the caller's process
    never converts, whatever its backend."""
    pytest.importorskip("onnxruntime")

    def here(*args):
        raise AssertionError("converted in the calling process")
    monkeypatch.setattr(graphs, "convert_pass", here)
    graphs.convert_checkpoint(every_head, str(tmp_path), ["embed"], "onnx")
    assert os.listdir(tmp_path) == ["embed.onnx"]


def test_prepare_makes_every_graph_in_one_child_and_no_call_waits(every_head, tmp_path,
                                                                  monkeypatch):
    """`Bert.prepare` (a server's `--preload`): the missing graphs of every head in one child
    process, loaded; the methods then make nothing."""
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path))          # no graph made yet
    made, convert = [], graphs.convert_checkpoint
    monkeypatch.setattr(graphs, "convert_checkpoint",
                        lambda d, f, kinds, fmt: (made.append(list(kinds)), convert(d, f, kinds,
                                                                                    fmt)))
    m = kbert.load(every_head, runtime="onnx")
    assert m.prepare() is m
    assert True in m.tokenizer.graph._compiled                # a large fill_mask's route traced
    assert made == [["embed", "mlm_logits", "nsp", "classifier", "tagger", "span"]]
    assert m.prepare() is m and len(made) == 1                # all there: nothing made again
    monkeypatch.setattr(graphs, "convert_checkpoint", None)   # a call that made one would fail
    m.fill_mask(MASKED), m.next_sentence(TEXTS[0], TEXTS[1]), m.embed(TEXTS)
    m.classify(TEXTS), m.tag(TEXTS), m.answer("who went ?", TEXTS[0])
    assert m.trace_count == 6


def test_a_graph_runtime_builds_no_keras_layers_until_asked(every_head):
    """The graphs hold their own copy of the weights: `kbert.load` on a graph runtime reads the
    checkpoint's description only, and builds the Keras encoder on first use of `backbone`."""
    pytest.importorskip("onnxruntime")
    m = kbert.load(every_head, runtime="onnx")
    assert m.checkpoint.backbone is None
    m.embed(TEXTS), m.fill_mask(MASKED), m.classify(TEXTS), m.answer("who went ?", TEXTS[0])
    assert m.rerank("who went ?", TEXTS)[0]["index"] in range(len(TEXTS))
    assert m.checkpoint.backbone is None                      # every method ran on the graphs
    assert m.backbone is m.checkpoint.backbone is not None    # built on first use
    assert sorted(m.heads) == sorted(m.checkpoint.head_options)
    assert isinstance(m.model, keras.Model)


_WITHOUT_TENSORFLOW = """
import importlib.util, json, sys
import kbert
m = kbert.load(sys.argv[1], runtime="onnx")
texts, masked = json.loads(sys.argv[2])
out = {"embed": m.embed(texts, pooling="mean").tolist(), "fill": m.fill_mask(masked, top_k=2),
       "classify": m.classify(texts), "tag": m.tag(texts), "nsp": m.next_sentence(texts, texts),
       "answer": m.answer(["who went ?"] * len(texts), texts),
       "search": m.search(texts[0], texts, top_k=3), "one": m.embed(texts[0]).tolist()}
if importlib.util.find_spec("openvino"):
    out["openvino"] = kbert.load(sys.argv[1], runtime="openvino").embed(texts).tolist()
index = kbert.retrieval.Index.build(m, texts)
index.save(sys.argv[3])
out["index"] = kbert.retrieval.Index.load(sys.argv[3]).search(texts[1], m, top_k=2)
if importlib.util.find_spec("gradio"):     # the playground on the same runtime
    from app import server
    demo, registry = server.build(models=[sys.argv[1]], models_dir="", runtime="onnx")
    registry.get(registry.names[0]).prepare()
out["imported"] = sorted(set(sys.modules) & {"tensorflow", "keras", "jax", "torch"})
print(json.dumps(out))
"""


def test_a_graph_runtime_process_imports_neither_keras_nor_tensorflow(every_head, tmp_path):
    """With its graphs made, a graph runtime's process reads the checkpoint's description,
    tokenizes with the Rust tokenizer and runs ONNX Runtime: no Keras, no TensorFlow (a fresh
    `kbert index search --runtime onnx` in under a second; the playground too), and the same
    results as a process with TensorFlow's tokenizer routes (batches over the Rust tokenizer's
    small size)."""
    pytest.importorskip("onnxruntime"), pytest.importorskip("tokenizers")
    texts, masked = TEXTS * 3, MASKED * 3
    done = subprocess.run([sys.executable, "-c", _WITHOUT_TENSORFLOW, every_head,
                           json.dumps([texts, masked]), str(tmp_path / "index")],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    def rounded(value):     # ONNX Runtime's floats, compared to 5 decimals
        return json.dumps(json.loads(json.dumps(value), parse_float=lambda x: round(float(x), 5)),
                          sort_keys=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["imported"] == []
    m = kbert.load(every_head, runtime="onnx")
    np.testing.assert_allclose(got["embed"], m.embed(texts, pooling="mean"), atol=1e-6)
    np.testing.assert_allclose(got["one"], m.embed(texts[0]), atol=1e-6)
    if "openvino" in got:
        np.testing.assert_allclose(got["openvino"], m.embed(texts), atol=1e-4)
    want = {"fill": m.fill_mask(masked, top_k=2), "classify": m.classify(texts),
            "tag": m.tag(texts), "nsp": m.next_sentence(texts, texts),
            "search": m.search(texts[0], texts, top_k=3),
            "answer": m.answer(["who went ?"] * len(texts), texts),
            "index": kbert.retrieval.Index.load(tmp_path / "index").search(texts[1], m, top_k=2)}
    for key, value in want.items():
        assert rounded(got[key]) == rounded(value), key


def test_making_graphs_without_tensorflow_is_one_line(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorflow" else real(name, *a))
    with pytest.raises(graphs.ExportError, match=r"needs TensorFlow .*kbert export CKPT"):
        graphs.convert_checkpoint("ckpt", str(tmp_path), ["embed"], "onnx")


def test_a_graph_maker_killed_for_memory_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(graphs.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, -9, "", ""))
    with pytest.raises(graphs.ExportError, match=r"failed: killed by signal 9 \(out of memory"):
        graphs.convert_checkpoint("any", str(tmp_path), ["embed"], "onnx")


def test_onnx_graphs_are_made_without_copies_of_the_weights(monkeypatch, tmp_path):
    """Under upb, tf2onnx kept a copy of the weights for each of its ~36 node rewrites and
    deep-copied the graph before each optimizer: MiniLM's MLM and embed passes peaked at 10 GB.
    The ONNX child runs the pure-Python protobuf without the copies (2.6 GB); OpenVINO's
    converter keeps no copies and runs faster on upb."""
    envs = {}

    def run(command, env, **kwargs):
        envs[command[5]] = env
        return subprocess.CompletedProcess(command, 0, "", "")
    monkeypatch.setattr(graphs.subprocess, "run", run)
    monkeypatch.delenv("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", raising=False)
    for fmt in ("onnx", "openvino"):
        graphs.convert_checkpoint("any", str(tmp_path), ["embed"], fmt)
    assert envs["onnx"]["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] == "python"
    assert "TF2ONNX_CATCH_ERRORS" in envs["onnx"]
    assert "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION" not in envs["openvino"]


def test_onnx_graphs_take_the_forms_onnx_runtime_fuses(every_head, tmp_path):
    """No `GlobalAveragePool` means left from tf2onnx, no reshapes around the products, and
    ONNX Runtime fuses every LayerNorm (2 a layer + the embeddings') and every GELU with its
    bias (`BiasGelu`, one a layer)."""
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from collections import Counter
    out = graphs.export(every_head, tmp_path / "exported", fmt="onnx",
                        kinds=[graphs.parse_kind("embed")])
    path = os.path.join(out, "onnx", "embed.onnx")
    graph = onnx.load(path).graph
    written = Counter(n.op_type for n in graph.node)
    assert written["GlobalAveragePool"] == 0 and written["Reshape"] <= 6, written
    read = {name for n in graph.node for name in n.input}
    assert all(t.name in read for t in graph.initializer)     # ONNX Runtime warns of others
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    ran = Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)
    layers = BertConfig.preset("tiny").num_layers
    assert ran["LayerNormalization"] == 2 * layers + 1, ran
    assert ran["BiasGelu"] == layers and ran["Erf"] == 0, ran


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_export_directory_loads_with_its_runtime_and_refuses_a_changed_vocabulary(
        every_head, runtime, tmp_path):
    pytest.importorskip("openvino" if runtime == "openvino" else "onnxruntime")
    out = graphs.export(every_head, tmp_path / "exported", fmt=runtime)
    manifest = json.loads((tmp_path / "exported" / "export.json").read_text())
    assert manifest["format"] == runtime and manifest["dtype"] == "float32"
    assert set(manifest["kinds"]) == {"embed", "mlm_logits", "nsp", "classifier", "tagger",
                                      "span"}
    m = kbert.load(out)                                   # the manifest's runtime by default
    assert m.runtime == runtime
    np.testing.assert_allclose(m.embed(TEXTS, pooling="mean"),
                               kbert.load(every_head).embed(TEXTS, pooling="mean"), atol=1e-4)
    assert kbert.load(out, runtime="keras").runtime == "keras"   # also a checkpoint
    vocab = tmp_path / "exported" / "vocab.txt"
    lines = vocab.read_text().splitlines()
    vocab.write_text("\n".join(lines[:-1] + ["[unused-other]"]) + "\n")
    with pytest.raises(graphs.ExportError, match="vocab.txt is not the vocabulary"):
        kbert.load(out)


# Each exported graph's output and shape, as a server that knows nothing of kbert reads them.
OUTPUTS = {"embed": ("embeddings", ["batch", 2, 128]), "classifier": ("logits", ["batch", 3]),
           "nsp": ("logits", ["batch", 2]), "tagger": ("logits", ["batch", "sequence", 5]),
           "span": ("span_logits", ["batch", "sequence", 2]),
           "mlm_logits": ("logits", ["batch", "masks", 120])}


def _graph_io(path, runtime):
    """{"inputs" | "outputs": {name: shape}} as the graph file holds them: a dimension's name
    in ONNX, None for a dynamic one in OpenVINO (its IR names no dimensions); every name of
    an OpenVINO output."""
    if runtime == "onnx":
        import onnx
        graph = onnx.load(path).graph

        def dims(value):
            return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
        return {"inputs": {v.name: dims(v) for v in graph.input},
                "outputs": {v.name: dims(v) for v in graph.output}}
    model = graphs.openvino_core().read_model(path)

    def shape(port):
        return [d.get_length() if d.is_static else None for d in port.get_partial_shape()]
    return {"inputs": {p.get_any_name(): shape(p) for p in model.inputs},
            "outputs": {n: shape(p) for p in model.outputs for n in sorted(p.get_names())}}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_exported_graphs_name_their_inputs_outputs_and_dimensions(every_head, runtime,
                                                                 tmp_path):
    """Triton or OpenVINO Model Server read a graph by its names: the features in, what the
    pass gives out (not `Identity:0`), dimensions batch / sequence / masks in ONNX (not
    `unk__N`); export.json lists each graph as its file has it."""
    pytest.importorskip("openvino" if runtime == "openvino" else "onnx")
    out = graphs.export(every_head, tmp_path / "exported", fmt=runtime)
    listed = json.loads((tmp_path / "exported" / "export.json").read_text())["graphs"]
    assert set(listed) == set(OUTPUTS)
    for graph, (output, shape) in OUTPUTS.items():
        inputs = {"input_ids": ["batch", "sequence"], "segment_ids": ["batch", "sequence"],
                  "input_mask": ["batch", "sequence"]}
        if graph == "mlm_logits":
            inputs["masked_lm_positions"] = ["batch", "masks"]
        assert listed[graph]["file"] == os.path.relpath(
            graphs.graph_path(os.path.join(out, runtime), graph, runtime), out)
        assert {i["name"]: i for i in listed[graph]["inputs"]} == {
            name: {"name": name, "dtype": "int32", "shape": dims} for name, dims in inputs.items()}
        assert listed[graph]["outputs"] == [{"name": output, "dtype": "float32", "shape": shape}]
        got = _graph_io(os.path.join(out, listed[graph]["file"]), runtime)
        if runtime == "openvino":                            # dynamic dimensions: unnamed
            inputs = {n: [None, None] for n in inputs}
            shape = [d if isinstance(d, int) else None for d in shape]
        assert got == {"inputs": inputs, "outputs": {output: shape}}, graph


def _serving_snippet():
    """The Python blocks of docs/serving.md's ONNX and OpenVINO section: (tokenize, onnx,
    openvino, read)."""
    text = (REPO / "docs" / "serving.md").read_text(encoding="utf-8")
    section = text.split("## ONNX and OpenVINO graphs on another server")[1].split("\n## ")[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_documented_runtime_only_client_gives_the_keras_probabilities(every_head, runtime,
                                                                         tmp_path):
    """docs/serving.md's client, run as written in a process without kbert on an export of
    `every_head`: the named output's probabilities are `classify`'s (Keras, float32)."""
    pytest.importorskip("openvino" if runtime == "openvino" else "onnxruntime")
    pytest.importorskip("tokenizers")
    out = graphs.export(every_head, tmp_path / runtime, fmt=runtime)
    tokenize, onnx_block, openvino_block, read = _serving_snippet()
    code = "\n".join([tokenize, onnx_block if runtime == "onnx" else openvino_block, read])
    code = code.replace('"/tmp/sst2-onnx"', repr(out)).replace('"/tmp/sst2-openvino"', repr(out))
    code += ("\nimport sys\nassert not any(m.split('.')[0] == 'kbert' for m in sys.modules)"
             "\nprint(json.dumps(texts))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    printed, texts = done.stdout.strip().splitlines()[-2:]
    got = ast.literal_eval(printed)
    want = kbert.load(every_head).classify(json.loads(texts))
    assert [list(g) for g in got] == [list(w) for w in want]
    np.testing.assert_allclose([list(g.values()) for g in got],
                               [list(w.values()) for w in want], atol=1e-4)


def test_an_export_whose_heads_differ_from_its_config_is_refused(every_head, tmp_path):
    pytest.importorskip("openvino")
    out = graphs.export(every_head, tmp_path / "exported", fmt="openvino", kinds=["embed"])
    config = json.loads((tmp_path / "exported" / "config.json").read_text())
    del config["heads"]["tagger"]
    (tmp_path / "exported" / "config.json").write_text(json.dumps(config))
    with pytest.raises(graphs.ExportError, match="heads .* exported with"):
        kbert.load(out)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_evaluate_scores_the_runtime_like_the_keras_task_model(every_head, runtime, tmp_path):
    """`kbert evaluate --runtime`: the exported graphs score what the Keras task model scores,
    on the same features, batches and metric."""
    pytest.importorskip("openvino" if runtime == "openvino" else "onnxruntime")
    from kbert import finetune
    rows = [(t, label) for t, label in zip(TEXTS * 3, ["neg", "pos", "mixed"] * 4)]
    (tmp_path / "c.csv").write_text("text,label\n" + "".join(f'"{t}",{y}\n' for t, y in rows))
    tags = [{"tokens": t.split(), "tags": [LABELS[i % 5] for i in range(len(t.split()))]}
            for t in TEXTS]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tags))
    squad = {"data": [{"paragraphs": [{"context": TEXTS[0], "qas": [
        {"id": "q1", "question": "who went to the store ?",
         "answers": [{"text": "the man", "answer_start": 0}]}]}]}]}
    (tmp_path / "q.json").write_text(json.dumps(squad))
    for task, data in [("classify", "c.csv"), ("tag", "t.jsonl"), ("qa", "q.json")]:
        want = finetune.evaluate(task, every_head, tmp_path / data, batch_size=4)
        got = finetune.evaluate(task, every_head, tmp_path / data, batch_size=4,
                                runtime=runtime)
        assert got == pytest.approx(want, abs=1e-6), task


def test_int8_runs_close_to_float32(every_head, monkeypatch):
    pytest.importorskip("openvino")
    monkeypatch.setattr(hardware, "int8_pays", lambda: True)   # not offered on every CPU
    ref = kbert.load(every_head).embed(TEXTS, pooling="mean")
    m = kbert.load(every_head, runtime="openvino", dtype="int8")
    assert m.dtype == "int8"
    assert _cosine(m.embed(TEXTS, pooling="mean"), ref).min() > 0.95


@pytest.mark.multibackend
def test_keras_bfloat16_keeps_the_heads_and_logits_in_float32(every_head):
    ref = _results(kbert.load(every_head))
    m = kbert.load(every_head, dtype="bfloat16")
    assert m.backbone.dtype_policy.name == "bfloat16"
    assert all(h.dtype_policy.name == "float32" for h in m.heads.values())
    ours = _results(m)
    for key in ("embed_mean", "embed_cls"):
        assert ours[key].dtype == np.float32
        assert _cosine(ours[key], ref[key]).min() >= 0.995
    np.testing.assert_allclose([p["is_next"] for p in ours["nsp"]],
                               [p["is_next"] for p in ref["nsp"]], atol=0.02)


@pytest.mark.multibackend
def test_auto_and_refused_combinations(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_info", lambda *a: {"model": "Test CPU", "bf16_flags": [],
                                                          "int8_flags": []})
    assert resolve("keras", "auto") == ("keras", "float32")
    assert resolve("onnx", "auto") == ("onnx", "float32")
    with pytest.raises(RuntimeOptionError, match="Test CPU"):
        resolve("openvino", "bfloat16")
    with pytest.raises(RuntimeOptionError, match="int8.*runs on runtime 'openvino'"):
        resolve("keras", "int8")
    with pytest.raises(RuntimeOptionError, match="no bfloat16"):
        resolve("onnx", "bfloat16")
    with pytest.raises(RuntimeOptionError, match="int8 runs no faster .*Test CPU.* VNNI"):
        resolve("openvino", "int8")
    with pytest.raises(RuntimeOptionError, match="unknown dtype 'fp8'"):
        resolve("keras", "fp8")
    monkeypatch.setattr(hardware, "cpu_info", lambda *a: {
        "model": "Xeon", "bf16_flags": ["amx_bf16"], "int8_flags": ["amx_int8"]})
    assert resolve("keras", "auto") == ("keras", "bfloat16")
    assert resolve("onnx", "auto") == ("onnx", "float32")     # no bf16 kernels there
    with pytest.raises(RuntimeOptionError, match="int8 is not offered .*Xeon.*'bfloat16'"):
        resolve("openvino", "int8")                           # bfloat16 products either way
    with pytest.raises(RuntimeOptionError, match="ONNX Runtime's int8 .* use runtime 'openvino'"):
        resolve("onnx", "int8")
    monkeypatch.setattr(hardware, "cpu_info", lambda *a: {
        "model": "Xeon Gold 6230", "bf16_flags": [], "int8_flags": ["avx512_vnni"]})
    assert resolve("openvino", "int8") == ("openvino", "int8")
    assert resolve("keras", "auto") == ("keras", "float32")


@pytest.mark.multibackend
@pytest.mark.parametrize("runtime", ["", "tflite", "Keras"])
def test_empty_or_unknown_runtime_is_refused_naming_the_choices(runtime):
    message = f"unknown runtime {runtime!r}: use one of auto, keras, openvino, onnx"
    with pytest.raises(RuntimeOptionError) as e:
        resolve(runtime, "float32")
    assert str(e.value) == message
    with pytest.raises(RuntimeOptionError) as e:        # before any weights are read
        kbert.load(str(REPO / "saved_models" / "minilm-l6-squad"), runtime=runtime)
    assert str(e.value) == message
    with pytest.raises(RuntimeOptionError, match=r"^unknown dtype '': use one of auto, "):
        resolve("keras", "")
    assert resolve(None, None) == ("keras", "float32")


def test_auto_runtime_is_the_fastest_path_measured_for_the_dtype(monkeypatch):
    from kbert.runtime import options
    monkeypatch.setattr(hardware, "gpu_in_use", lambda: False)
    monkeypatch.setattr(hardware, "cpu_info", lambda *a: {"model": "Xeon", "bf16_flags": [
        "amx_bf16"], "int8_flags": ["amx_int8"]})
    monkeypatch.setattr(hardware, "int8_pays", lambda: True)   # the runtime choice alone
    have = {"tensorflow", "onnxruntime", "openvino"}
    monkeypatch.setattr(options.importlib.util, "find_spec",
                        lambda name, *a: object() if name in have else None)
    assert resolve("auto", "float32") == ("onnx", "float32")
    assert resolve("auto", "auto") == ("openvino", "bfloat16")       # AMX: bfloat16, OpenVINO
    assert resolve("auto", "int8") == ("openvino", "int8")
    have.discard("onnxruntime")
    assert resolve("auto", "float32") == ("openvino", "float32")
    have.discard("openvino")
    assert resolve("auto", "float32") == ("keras", "float32")
    assert resolve("auto", "bfloat16") == ("keras", "bfloat16")
    with pytest.raises(RuntimeOptionError, match=r"pip install 'kbert\[openvino\]'"):
        resolve("auto", "int8")
    have.update({"onnxruntime", "openvino"})
    monkeypatch.setattr(hardware, "gpu_in_use", lambda: True)        # graphs run on the CPU
    assert resolve("auto", "float32") == ("keras", "float32")
    monkeypatch.setattr(hardware, "gpu_in_use", lambda: False)
    have.discard("tensorflow")                                       # nothing makes graphs
    assert resolve("auto", "float32") == ("keras", "float32")


def test_a_missing_runtime_package_is_one_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "openvino" else real(name, *a))
    with pytest.raises(RuntimeOptionError, match=r"pip install 'kbert\[openvino\]'"):
        kbert.load("minilm-l6-squad", runtime="openvino")


@pytest.mark.parametrize("flags, want", [
    ("fpu avx2 amx_bf16 amx_int8 amx_tile avx512_bf16 avx512_vnni", (["amx_bf16", "avx512_bf16"],
                                                                    ["amx_int8", "avx512_vnni"])),
    ("fpu avx2 avx512f avx512_bf16 avx512_vnni", (["avx512_bf16"], ["avx512_vnni"])),
    ("fpu avx avx2 fma", ([], [])),
])
def test_cpu_flags_are_read_from_cpuinfo(tmp_path, flags, want):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\n"
                    f"processor\t: 1\nmodel name\t: Some CPU\nflags\t\t: {flags}\n")
    info = hardware.cpu_info.__wrapped__(str(path))
    assert info["model"] == "Some CPU"
    assert (info["bf16_flags"], info["int8_flags"]) == want


def test_shipped_model_through_openvino_matches_keras_on_real_weights():
    """The shipped MiniLM: fill_mask top-1, answer spans and embeddings agree at float32."""
    pytest.importorskip("openvino")
    if not (REPO / "saved_models" / "minilm-l6-squad").is_dir():
        pytest.skip("no shipped checkpoints")
    context = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in "
               "Paris. It is named after the engineer Gustave Eiffel, whose company designed "
               "and built the tower from 1887 to 1889.")
    questions = ["Who is the tower named after?", "Where is the tower?", "When was it built?"]
    ref, m = kbert.load("minilm-l6-squad"), kbert.load("minilm-l6-squad", runtime="openvino")
    assert [a[0]["text"] for a in m.answer(questions, [context] * 3)] == \
        [a[0]["text"] for a in ref.answer(questions, [context] * 3)]
    assert _cosine(m.embed(questions, pooling="mean"),
                   ref.embed(questions, pooling="mean")).min() >= 0.9999


@pytest.mark.multibackend
@pytest.mark.parametrize("causal", [False, True])
def test_the_forms_traced_for_graphs_equal_the_keras_forms(causal):
    """`tracing_for_graphs`' LayerNorm, Dense and attention are twins of the training
    forms."""
    from kbert.network.layers import tracing_for_graphs
    keras.utils.set_random_seed(1)
    backbone = kbert.BertBackbone(BertConfig.preset("tiny", vocab_size=120, causal=causal))
    ids = np.random.default_rng(0).integers(5, 120, (3, 9)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 6:], mask[2, 2:] = 0, 0
    features = {"input_ids": ids, "segment_ids": np.zeros_like(ids), "input_mask": mask}
    want = backbone(features, training=False)
    with tracing_for_graphs():
        got = backbone(features, training=False)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got[key]),
                                   keras.ops.convert_to_numpy(want[key]), atol=2e-6)


def test_the_cli_names_the_runtime_dtypes_and_refuses_a_bad_pair_in_one_line(tmp_path, capsys):
    from kbert import cli
    from kbert.runtime.options import DTYPES, RUNTIME_CHOICES
    assert set(cli.DTYPE_NAMES) == set(DTYPES)
    assert set(cli.RUNTIME_NAMES) == set(RUNTIME_CHOICES)
    out = str(tmp_path / "x")
    assert cli.main(["export", "minilm-l6-squad", "--output", out, "--format", "onnx",
                     "--dtype", "bfloat16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kbert export: error: ONNX Runtime has no bfloat16") and "\n" not in err
    assert cli.main(["export", "minilm-l6-squad", "--output", out, "--dtype", "int8"]) == 2
    assert "--format openvino" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_the_playground_says_what_runs_it():
    pytest.importorskip("gradio")
    from app.registry import InputError, Registry
    registry = Registry({}, runtime="keras", dtype="auto")
    assert (registry.runtime, registry.dtype) == ("keras", hardware.auto_dtype())
    with pytest.raises(InputError, match="int8"):
        Registry({}, runtime="keras", dtype="int8")


def test_damaged_graph_files_are_one_line(every_head, tmp_path, capsys):
    """export.json records each graph file's size and hashes: a deleted, truncated or foreign
    graph is named with the fix, never the runtime's own exception nor a silent rebuild."""
    pytest.importorskip("onnxruntime")
    out = graphs.export(every_head, tmp_path / "exported", fmt="onnx")
    listed = json.loads((tmp_path / "exported" / "export.json").read_text())["graph_files"]
    graph = tmp_path / "exported" / "onnx" / "embed.onnx"
    assert listed["onnx/embed.onnx"]["size"] == graph.stat().st_size
    good = graph.read_bytes()
    damages = {
        "is missing from the export": lambda: graph.unlink(),
        f"is damaged: {len(good) // 2} bytes where the export wrote {len(good)}":
            lambda: graph.write_bytes(good[:len(good) // 2]),
        # another file of the same size (another model's graph differs throughout)
        "is not the graph this export wrote \\(its hash differs\\)":
            lambda: graph.write_bytes(good[::-1]),
    }
    for message, damage in damages.items():
        damage()
        with pytest.raises(graphs.ExportError, match=f"{graph} {message}; run `kbert export` "
                                                     f"again"):
            kbert.load(out)                        # refused at load, not at the first call
        graph.write_bytes(good)
    assert kbert.load(out).embed(TEXTS).shape[0] == len(TEXTS)
    graph.write_bytes(good[:len(good) // 2])
    (tmp_path / "doc.txt").write_text(TEXTS[0])
    assert cli.main(["index", "build", str(tmp_path / "doc.txt"), "--model", out, "--output",
                     str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{graph} is damaged" in err[0], err
