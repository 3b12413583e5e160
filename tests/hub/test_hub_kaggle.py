"""`kaggle://OWNER/MODEL/FRAMEWORK/VARIATION/VERSION` (keras-hub's presets on Kaggle) loads through
kagglehub: a versioned handle kagglehub has cached (written here with kagglehub's own cache API,
as its download leaves it) converts once, with keras-hub's numbers, and never asks Kaggle."""

import numpy as np
import pytest
from keras import ops

import kbert
from helpers import max_abs_diff, random_inputs, tiny_vocab
from kbert import hub

keras_hub = pytest.importorskip("keras_hub")
kagglehub = pytest.importorskip("kagglehub")

HANDLE = "kbert-test/bert/keras/bert_tiny_en_uncased/3"


@pytest.fixture
def kaggle_cache(tmp_path, monkeypatch):
    """A kagglehub cache holding a random keras-hub BertBackbone preset at HANDLE; kbert's
    cache in `tmp_path` too. No Kaggle credentials, and Kaggle's API pointed at this machine:
    kagglehub can only use its cache."""
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path / "kagglehub"))
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "kbert"))
    for name in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "no-kaggle-config"))
    monkeypatch.setenv("KAGGLE_API_ENVIRONMENT", "LOCALHOST")   # never kaggle.com: 127.0.0.1
    from kagglehub.cache import Cache
    from kagglehub.handle import parse_model_handle
    handle = parse_model_handle(HANDLE)
    cache = Cache()
    folder = cache.get_path(handle)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=120, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=64,
        max_sequence_length=64)
    rng = np.random.default_rng(0)
    for v in backbone.weights:
        v.assign(ops.convert_to_numpy(v) + rng.normal(scale=0.2, size=v.shape).astype("float32"))
    backbone.save_to_preset(folder)
    keras_hub.models.BertTokenizer(vocabulary=tiny_vocab(120), lowercase=True).save_to_preset(
        folder)
    cache.mark_as_complete(handle)
    return backbone


def test_a_cached_kaggle_preset_loads_with_keras_hubs_numbers(kaggle_cache):
    m = kbert.load(f"kaggle://{HANDLE}")
    x = random_inputs(2, 12, 120)
    ours = m.backbone(x)["sequence_output"]
    ref = kaggle_cache({"token_ids": x["input_ids"], "segment_ids": x["segment_ids"],
                        "padding_mask": x["input_mask"]})["sequence_output"]
    assert max_abs_diff(ours, ref, x["input_mask"]) < 1e-4
    entries = hub.cached_models()
    assert [(e["repo"], e["commit"]) for e in entries] == [
        ("kaggle://kbert-test/bert/keras/bert_tiny_en_uncased", "3")]


def test_a_kaggle_model_not_cached_is_one_line(kaggle_cache):
    with pytest.raises(hub.HubError, match="kaggle://kbert-test/bert/keras/other/1: kagglehub "
                                           "could not get it") as caught:
        hub.resolve("kaggle://kbert-test/bert/keras/other/1")
    assert "\n" not in str(caught.value)


def test_a_malformed_kaggle_address_says_the_form(kaggle_cache):
    with pytest.raises(ValueError, match="kaggle://OWNER/MODEL/FRAMEWORK/VARIATION/VERSION"):
        hub.resolve("kaggle://keras/bert")
