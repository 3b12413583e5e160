"""kbert.load(...) inference methods on a small real checkpoint (converted MiniLM) and tiny ones."""

import subprocess
import sys

import keras
import numpy as np
import pytest

import kbert
from helpers import REPO, tiny_vocab
from kbert import BertConfig, checkpoint

pytestmark = pytest.mark.multibackend


@pytest.fixture(scope="module")
def tiny_pretrained(tmp_path_factory):
    keras.utils.set_random_seed(0)      # built before the per-test seed: seeded here
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    model = kbert.BertPretrainer(BertConfig.preset("tiny", vocab_size=120))
    checkpoint.save(path, model, vocab=tiny_vocab(size=120))
    return kbert.load(str(path))


def test_fill_mask_returns_one_ranked_list_per_mask(tiny_pretrained):
    out = tiny_pretrained.fill_mask("the [MASK] sat on the [MASK] .", top_k=4)
    assert len(out) == 2 and all(len(r) == 4 for r in out)
    for ranked in out:
        scores = [r["score"] for r in ranked]
        assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1 + 1e-6
        assert all(isinstance(r["token"], str) for r in ranked)


def test_fill_mask_scores_match_softmax_of_model(tiny_pretrained):
    m = tiny_pretrained
    out = m.fill_mask("the dog [MASK] .", top_k=120)[0]
    assert abs(sum(r["score"] for r in out) - 1.0) < 1e-5


def test_fill_mask_without_mask_says_so(tiny_pretrained):
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        tiny_pretrained.fill_mask("the dog sat .")


def test_next_sentence_is_a_probability(tiny_pretrained):
    p = tiny_pretrained.next_sentence("the man went to the store .", "he bought milk .")
    assert set(p) == {"is_next"} and 0.0 <= p["is_next"] <= 1.0


def test_embed_cls_and_mean(tiny_pretrained):
    texts = ["the dog", "the quick brown fox jumps over the lazy dog", "a"]
    cls = tiny_pretrained.embed(texts, pooling="cls")
    mean = tiny_pretrained.embed(texts, pooling="mean")
    assert cls.shape == mean.shape == (3, 128)
    one = tiny_pretrained.embed(texts[1:2], pooling="mean")   # batching/padding change nothing
    np.testing.assert_allclose(one[0], mean[1], atol=1e-5)
    with pytest.raises(ValueError, match="pooling"):
        tiny_pretrained.embed(texts, pooling="max")


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_embed_normalize_gives_unit_rows_of_the_same_direction(tiny_pretrained, pooling):
    texts = ["the dog", "the quick brown fox jumps over the lazy dog", "a", ""]
    raw = tiny_pretrained.embed(texts, pooling=pooling)
    assert np.array_equal(raw, tiny_pretrained.embed(texts, pooling=pooling, normalize=False))
    norms = np.linalg.norm(raw, axis=1)
    assert not np.allclose(norms, 1.0, atol=1e-3)          # the default is left unnormalized
    unit = tiny_pretrained.embed(texts, pooling=pooling, normalize=True)
    assert unit.dtype == np.float32 and unit.shape == raw.shape
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(unit, raw / norms[:, None], atol=1e-6)
    np.testing.assert_allclose(unit[0], tiny_pretrained.embed("the dog", pooling=pooling,
                                                              normalize=True)[0], atol=1e-5)


def test_embed_normalize_leaves_a_zero_vector_zero(tiny_pretrained, monkeypatch):
    runner = tiny_pretrained.text_runner
    batched = runner.batched

    def zero_second_row(*args, **kwargs):       # the encoder's vector for text 1 is all zeros
        for idx, features, vectors in batched(*args, **kwargs):
            vectors = np.array(vectors)
            vectors[np.asarray(idx) == 1] = 0.0
            yield idx, features, vectors
    monkeypatch.setattr(runner, "batched", zero_second_row)
    with np.errstate(all="raise"):
        unit = tiny_pretrained.embed(["the dog", "a cat", "the mat"], normalize=True)
    assert np.all(np.isfinite(unit)) and not unit[1].any()
    np.testing.assert_allclose(np.linalg.norm(unit[[0, 2]], axis=1), 1.0, atol=1e-6)
    from kbert.inference.embeddings import l2_normalize
    assert not l2_normalize(np.zeros((2, 4))).any()


def _save_task(tmp_path, model, options):
    path = tmp_path / type(model).__name__
    checkpoint.save(path, model, vocab=tiny_vocab(size=120), head_options=options)
    return kbert.load(str(path))


def test_answer_returns_spans_of_the_context(tmp_path):
    m = _save_task(tmp_path, kbert.BertQuestionAnswerer(BertConfig.preset("tiny", vocab_size=120)),
                   {"span": {"version": "1.1"}})
    context = "the man went to the store . he bought milk . " * 60   # several windows
    out = m.answer("what did he buy ?", context, top_k=3)
    assert 1 <= len(out) <= 3
    for a in out:
        assert context[a["start"]:a["end"]] == a["text"] and a["text"]
    assert [a["score"] for a in out] == sorted((a["score"] for a in out), reverse=True)
    with pytest.raises(ValueError, match="context is empty"):
        m.answer("why ?", "  ")


def test_answer_v2_can_abstain(tmp_path):
    m = _save_task(tmp_path, kbert.BertQuestionAnswerer(BertConfig.preset("tiny", vocab_size=120)),
                   {"span": {"version": "2.0", "null_score_diff_threshold": -1e9}})
    assert m.answer("who ?", "the dog sat on the mat .")[0] == {
        "text": "", "score": m.answer("who ?", "the dog sat on the mat .")[0]["score"],
        "start": -1, "end": -1}


def test_tag_groups_words_into_entities(tmp_path):
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    model = kbert.BertTokenClassifier(BertConfig.preset("tiny", vocab_size=120), num_labels=5)
    bias = np.zeros(5, "float32")
    bias[3] = 50.0                               # every word B-LOC: one entity per word
    model.head.dense.bias.assign(bias)
    m = _save_task(tmp_path, model, {"tagger": {"labels": labels}})
    text = "the quick brown fox went to paris , jumping"
    found = m.tag(text)
    assert [e["text"] for e in found] == text.split()
    for entity in found:
        assert entity["label"] in ("PER", "LOC")
        assert text[entity["start"]:entity["end"]] == entity["text"]
        assert 0 < entity["score"] <= 1


# --- lists, batches and compiled buckets ----------------------------------------------------------
TEXTS = ["the [MASK] sat on the mat .", "a dog [MASK] .", "the man went to the [MASK] and he "
         "bought some milk and [MASK] .", "[MASK] the quick brown fox jumps over the lazy dog ."]


def test_a_list_gives_what_each_input_gives_alone_in_order(tiny_pretrained):
    m = tiny_pretrained
    together = m.fill_mask(TEXTS, top_k=3, batch_size=2)   # two batches, sorted by length
    assert len(together) == len(TEXTS)
    for text, got in zip(TEXTS, together):
        alone = m.fill_mask(text, top_k=3)
        assert [[r["token"] for r in ranked] for ranked in got] == \
            [[r["token"] for r in ranked] for ranked in alone]
        np.testing.assert_allclose([[r["score"] for r in ranked] for ranked in got],
                                   [[r["score"] for r in ranked] for ranked in alone], atol=1e-5)
    a, b = ["the man went .", "a dog sat on the mat ."], ["he sat .", "the cat ran ."]
    pairs = m.next_sentence(a, b, batch_size=1)
    for x, y, got in zip(a, b, pairs):
        assert got["is_next"] == pytest.approx(m.next_sentence(x, y)["is_next"], abs=1e-5)
    vectors = m.embed(TEXTS, pooling="mean", batch_size=3)
    for text, vector in zip(TEXTS, vectors):
        np.testing.assert_allclose(vector, m.embed(text, pooling="mean")[0], atol=1e-5)


def test_repeated_calls_in_one_bucket_do_not_retrace(tiny_pretrained):
    m = kbert.load(str(tiny_pretrained.checkpoint.path))    # nothing compiled yet
    m.fill_mask("the dog [MASK] .")                         # builds the (1 text, 6 tokens) bucket
    traces, shapes = m.trace_count, set(m.bucket_shapes)
    for text, k in (("a cat [MASK] .", 5), ("the man [MASK] .", 6),
                    ("a [MASK] sat .", 8)):                  # top_k 5-8 share one graph
        assert len(m.fill_mask(text, top_k=k)[0]) == k      # other texts, same bucket
    assert m.trace_count == traces and set(m.bucket_shapes) == shapes
    m.fill_mask(TEXTS[:3])                                  # a new bucket: 4 rows ...
    m.fill_mask(TEXTS[1:4])                                 # ... reused by other 3-text lists
    new = set(m.bucket_shapes) - shapes
    assert len(new) == 1 and all(dict(s)["input_ids"][0] == 4 for _, s in new)
    # JAX compiles the new bucket once; TensorFlow and PyTorch run it through the same function.
    assert m.trace_count == traces + (keras.backend.backend() == "jax")


def test_a_compiled_bucket_runs_other_shapes_as_the_model_does(tiny_pretrained):
    # TensorFlow and PyTorch run each batch at its own shape through the function traced for
    # the method's first one: later lengths and row counts must give the layers' own numbers.
    m = kbert.load(str(tiny_pretrained.checkpoint.path))
    m.embed(["the dog sat on the mat ."] * 3)                 # traced at 3 rows (bucket 4 x 12)
    for texts in (["a"], ["the dog", "a man went to the store and he"], ["the cat"] * 4):
        got = m.embed(texts)
        features, _ = m.tokenizer.pack(m.tokenizer.encode_batch(texts))
        want = m.backbone(features, training=False)["sequence_output"][:, 0]
        np.testing.assert_allclose(got, keras.ops.convert_to_numpy(want), atol=1e-5)
    assert len({shape for kind, shape in m.bucket_shapes}) == 4     # 1 x 4, 2 x 12, 4 x 4 more
    assert m.trace_count == (4 if keras.backend.backend() == "jax" else 1)


def test_bucket_shapes():
    from kbert.forward import bucket_batch, bucket_length
    assert [bucket_length(n, 512) for n in (1, 16, 17, 33, 65, 500, 512)] == [
        1, 16, 18, 36, 72, 512, 512]
    assert len({bucket_length(n, 512) for n in range(1, 513)}) == 56
    assert all(bucket_length(n, 512) - n < n / 8 for n in range(1, 513))
    assert bucket_length(70, 64) == 64
    assert [bucket_batch(n, 32) for n in (1, 2, 3, 5, 32)] == [1, 2, 4, 8, 32]
    assert bucket_batch(20, 24) == 24


def _classifier(tmp_path, regression=False):
    model = kbert.BertClassifier(BertConfig.preset("tiny", vocab_size=120),
                                 num_labels=1 if regression else 3)
    options = {"problem": "regression"} if regression else {"labels": ["neg", "neu", "pos"]}
    return _save_task(tmp_path, model, {"classifier": options})


def test_classify_lists_and_pairs(tmp_path):
    m = _classifier(tmp_path)
    one = m.classify("the dog sat .")
    assert set(one) == {"neg", "neu", "pos"} and sum(one.values()) == pytest.approx(1.0)
    texts, pairs = ["the dog sat .", "a man went to the store ."], ["he ran .", "the cat ."]
    for text, pair, got in zip(texts, pairs, m.classify(texts, pairs, batch_size=1)):
        alone = m.classify(text, pair)
        assert got == pytest.approx(alone, abs=1e-5)
    with pytest.raises(ValueError, match="same length"):
        m.classify(texts, pairs[:1])


def test_answer_and_tag_take_lists(tmp_path):
    m = _save_task(tmp_path, kbert.BertQuestionAnswerer(BertConfig.preset("tiny", vocab_size=120)),
                   {"span": {"version": "1.1"}})
    questions = ["what did he buy ?", "who sat ?"]
    contexts = ["the man went to the store . he bought milk . " * 40, "the dog sat on the mat ."]
    both = m.answer(questions, contexts, top_k=3, batch_size=2)
    for q, c, got in zip(questions, contexts, both):
        alone = m.answer(q, c, top_k=3)
        assert [a["text"] for a in got] == [a["text"] for a in alone]
        assert [a["score"] for a in got] == pytest.approx([a["score"] for a in alone], abs=1e-5)
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    tagger = kbert.BertTokenClassifier(BertConfig.preset("tiny", vocab_size=120), num_labels=5)
    t = _save_task(tmp_path, tagger, {"tagger": {"labels": labels}})
    texts = ["the quick brown fox went to paris", "a dog", "\x00"]
    assert t.tag(texts, batch_size=1) == [t.tag(x) for x in texts]
    assert t.tag("\x00") == []                              # no tokens: no entities


# --- bad input: one clear ValueError --------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_squad(tmp_path_factory):
    keras.utils.set_random_seed(0)
    path = tmp_path_factory.mktemp("squad") / "tiny"
    model = kbert.BertQuestionAnswerer(BertConfig.preset("tiny", vocab_size=120))
    checkpoint.save(path, model, vocab=tiny_vocab(size=120), head_options={"span": {}})
    return kbert.load(str(path))


@pytest.mark.parametrize("option, value", [
    ("doc_stride", 0), ("doc_stride", -5), ("max_seq_length", 0), ("max_seq_length", -1),
    ("max_answer_length", 0), ("max_query_length", 0), ("n_best", 0), ("top_k", 0),
    ("top_k", -1), ("batch_size", 0),
    ("doc_stride", 1.5), ("top_k", "3"),
])
def test_answer_refuses_bad_options(tiny_squad, option, value):
    with pytest.raises(ValueError, match=f"answer: {option} must be an integer"):
        tiny_squad.answer("who sat ?", "the dog sat on the mat .", **{option: value})


@pytest.mark.parametrize("call", [
    lambda m: m.fill_mask("the [MASK] .", top_k=0),
    lambda m: m.fill_mask("the [MASK] .", batch_size=0),
    lambda m: m.next_sentence("a .", "b .", batch_size=-1),
    lambda m: m.embed(["a ."], batch_size=0),
])
def test_other_methods_refuse_bad_options(tiny_pretrained, call):
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        call(tiny_pretrained)


@pytest.mark.parametrize("call", [
    lambda m: m.next_sentence("", ""),
    lambda m: m.next_sentence("the dog sat .", "  "),
    lambda m: m.fill_mask(""),
    lambda m: m.next_sentence(["the dog sat ."], [""]),
    lambda m: m.embed([]),
    lambda m: m.fill_mask([None]),
])
def test_empty_inputs_are_refused(tiny_pretrained, call):
    with pytest.raises(ValueError, match="empty|not a string"):
        call(tiny_pretrained)


@pytest.mark.parametrize("call, message", [
    (lambda m: m.fill_mask(["the [MASK] .", "a\ud800 [MASK]"]), "fill_mask: text 1 has"),
    (lambda m: m.embed("x\udcff"), "embed: the text has"),
    (lambda m: m.hidden_states(["ok", "t\udcff"]), "hidden_states: text 1 has"),
    (lambda m: m.next_sentence("a .", "b\ud800"), "next_sentence: the sentence_b has"),
    (lambda m: m.search(["ok", "q\ud800"], ["the dog sat"]), "search: query 1 has"),
    (lambda m: m.search("ok", ["the dog", "p\ud800"]), "index: text 1 has"),
    (lambda m: m.rerank("q\ud800", ["the dog"]), "rerank: the query has"),
    (lambda m: m.rerank("q", ["the dog", "p\ud800"]), "rerank: passage 1 has"),
])
def test_a_lone_surrogate_is_one_line_naming_the_text_and_position(tiny_pretrained, call,
                                                                   message):
    with pytest.raises(ValueError) as e:
        call(tiny_pretrained)
    assert str(e.value).startswith(f"{message} a lone surrogate U+")
    assert str(e.value).endswith("at position 1 (not valid Unicode)")


def test_answer_names_the_context_with_a_lone_surrogate(tiny_squad):
    with pytest.raises(ValueError) as e:
        tiny_squad.answer(["who sat ?", "who ?"], ["the dog sat .", "the \ud800 dog"])
    assert str(e.value) == ("answer: context 1 has a lone surrogate U+D800 at position 4 (not "
                            "valid Unicode)")


def test_empty_text_still_has_a_vector(tiny_pretrained):
    # As in HF: "" is [CLS] [SEP], so it has an embedding (only next_sentence/answer refuse it).
    vectors = tiny_pretrained.embed(["the dog", ""])
    assert vectors.shape == (2, tiny_pretrained.config.hidden_size)
    np.testing.assert_allclose(vectors[1], tiny_pretrained.embed([""])[0], atol=1e-5)


def test_export_options_are_checked():
    from kbert.serving import ExportOptions
    for bad in ({"doc_stride": 0}, {"top_k": -1}, {"max_answer_length": 0},
                {"answer_seq_length": 4}, {"window_batch": 0}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be an integer"):
            ExportOptions(**bad)
    assert ExportOptions(doc_stride=64).doc_stride == 64


# --- cold start -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_name_is_named(name):
    with pytest.raises(checkpoint.CheckpointError) as e:
        kbert.load(name)
    blank = f" ({name!r})" if name else ""
    assert str(e.value) == (f"the checkpoint name is empty{blank}: give a checkpoint directory "
                            f"or a name such as minilm-l6-v2")


def test_import_and_cli_parsing_load_no_tensorflow():
    code = ("import sys, kbert; from kbert import cli\n"
            "for argv in (['--help'], ['export', '--help'], ['finetune', '--help'],\n"
            "             ['app', '--help'], ['export', 'x', '--output', 'y', '--top-k', '0'],\n"
            "             ['finetune', 'nosuchtask']):\n"
            "    try:\n"
            "        cli.build_parser().parse_args(argv)\n"
            "    except SystemExit:\n"
            "        pass\n"
            "from kbert.tasks import metrics, squad, squad_postprocess  # what answer/tag read\n"
            "heavy = [m for m in ('tensorflow', 'keras', 'jax', 'torch',\n"
            "                     'kbert.training.finetuning') if m in sys.modules]\n"
            "print('heavy:', heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip().splitlines()[-1] == "heavy: []"
    assert "--top-k: must be >= 1, got 0" in done.stderr
    assert "invalid choice: 'nosuchtask'" in done.stderr


def test_cli_task_names_are_the_registry():
    from kbert.cli import TASK_NAMES
    from kbert.tasks.registry import TASKS
    assert tuple(TASK_NAMES) == tuple(TASKS)


def test_every_public_name_resolves():
    assert kbert.__all__ and all(getattr(kbert, name) is not None for name in kbert.__all__)
    assert set(kbert.__all__) <= set(dir(kbert))


def test_hidden_states_give_the_chosen_layers_per_token(tiny_pretrained):
    m = tiny_pretrained
    texts = ["the dog sat on the mat .", "a cat"]
    out = m.hidden_states(texts, layers=(0, -1, -2), batch_size=1)
    features, _ = m.tokenizer.pack(m.tokenizer.encode_batch(texts))
    states = m.backbone(features, training=False, output_hidden_states=True)["hidden_states"]
    last = m.config.num_layers
    for r, got in enumerate(out):
        n = int(features["input_mask"][r].sum())
        assert got["tokens"][0] == "[CLS]" and got["tokens"][-1] == "[SEP]"
        assert len(got["tokens"]) == n and got["features"].shape == (n, 3, m.config.hidden_size)
        for column, layer in enumerate((0, last, last - 1)):
            want = keras.ops.convert_to_numpy(states[layer])[r, :n]
            np.testing.assert_allclose(got["features"][:, column], want, atol=1e-5)
    np.testing.assert_allclose(m.hidden_states(texts[1])["features"][0, 0], m.embed(texts[1])[0],
                               atol=1e-5)                     # [CLS] of the last layer
    with pytest.raises(ValueError, match="layers must be integers from"):
        m.hidden_states("a", layers=(last + 1,))
