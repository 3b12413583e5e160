"""The playground takes Hub models: `kbert app --model hf://...` mixes them with the shipped
checkpoints, and a Hub name typed in the model box (or passed to the API) is downloaded,
converted and served; offline and not kept, it is one line on the page."""

import pytest
from hub_repos import make_repos
from hub_server import hub_server_fixture, online_hub_fixture  # noqa: F401  (fixtures)

pytest.importorskip("gradio")


@pytest.fixture(scope="module")
def repos(tmp_path_factory, hub_server):
    folders = make_repos(str(tmp_path_factory.mktemp("repos")))
    for name in ("bert-mlm", "cross-encoder", "bert-qa"):
        hub_server.add_repo(f"kbert-test/{name}", folders[name])
    return folders


@pytest.fixture
def server(online_hub, repos, tmp_path, monkeypatch):
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "kbert-cache"))
    return online_hub


def test_app_models_mix_hub_names_with_shipped_ones(server, tmp_path):
    from app import handlers
    from app import server as app_server
    _, registry = app_server.build(models=["hf://kbert-test/bert-mlm", "minilm-l6-squad",
                                           "hf://kbert-test/cross-encoder"],
                                   models_dir=str(tmp_path / "none"))
    assert registry.names == ["hf://kbert-test/bert-mlm", "minilm-l6-squad",
                              "hf://kbert-test/cross-encoder"]
    assert "reranker" in registry.models["hf://kbert-test/cross-encoder"]["heads"]
    masks, best, _, notes = handlers.fill_mask(registry)("hf://kbert-test/bert-mlm",
                                                          "the man went to the [MASK] .", 3)
    assert best and not notes


def test_a_hub_name_typed_in_the_model_box_is_served(server, tmp_path):
    from app import handlers
    from app import server as app_server
    _, registry = app_server.build(models=["minilm-l6-mlm-nsp"],
                                   models_dir=str(tmp_path / "none"))
    assert handlers.head_status(registry, "hf://kbert-test/bert-qa", "qa") == ""
    assert "hf://kbert-test/bert-qa" in registry.names
    out = handlers.answer(registry)("hf://kbert-test/bert-qa", "who went ?",
                                    "the man went to the store .", 1)
    assert not str(out[-1]).startswith("⚠️")
    status = handlers.head_status(registry, "hf://kbert-test/missing", "qa")
    assert status.startswith("⚠️ Could not get the model 'hf://kbert-test/missing': ")
    assert "no such repository on the Hub" in status and "\n" not in status
