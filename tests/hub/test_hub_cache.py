"""Hub loading as a user meets it, against a Hub on 127.0.0.1 with the real huggingface_hub
client: only the needed files downloaded, converted once and kept, offline after that,
revisions pinned, every failure one line, a cut download completed, a damaged cache converted
again, two processes converting once, and `kbert cache list|remove`."""

import json
import os
import re
import subprocess
import sys

import pytest
from hub_repos import DECOYS, make_repos
from hub_server import TOKEN, hub_server_fixture, online_hub_fixture  # noqa: F401  (fixtures)

import kbert
from kbert import hub
from kbert.cli import main

REPO = "hf://kbert-test/bert-mlm"
TEXT = "the man went to the [MASK] ."


@pytest.fixture(scope="module")
def repos(tmp_path_factory, hub_server):
    folders = make_repos(str(tmp_path_factory.mktemp("repos")))
    for name, folder in folders.items():
        hub_server.add_repo(f"kbert-test/{name}", folder, tags=["v1"])
    hub_server.add_repo("kbert-test/gated", folders["bert-mlm"], gated=True)
    hub_server.add_repo("kbert-test/private", folders["bert-mlm"], private=True)
    return folders


@pytest.fixture
def server(online_hub, repos, tmp_path, monkeypatch):
    """The Hub, with kbert's cache in this test's folder."""
    monkeypatch.setenv("KBERT_CACHE", str(tmp_path / "kbert-cache"))
    return online_hub


def _files_asked(server):
    return {path.split("/resolve/", 1)[1].split("/", 1)[1] for _, path in server.requests
            if "/resolve/" in path}


def _offline(monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_only_the_files_a_conversion_needs_are_downloaded(server):
    kbert.load(REPO)
    asked = _files_asked(server)
    assert asked == {"config.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt",
                     "model.safetensors"}, asked
    assert not asked & set(DECOYS)


def test_a_second_load_asks_neither_the_hub_nor_the_converter(server, monkeypatch):
    first = kbert.load(REPO).fill_mask(TEXT)
    server.reset_requests()

    def refuse(*args, **kwargs):
        raise AssertionError("converted again")
    monkeypatch.setattr("kbert.convert.convert", refuse)
    assert kbert.load(REPO).fill_mask(TEXT) == first
    assert kbert.load("hf://kbert-test/bert-mlm@main").fill_mask(TEXT) == first
    assert server.requests == []


def test_offline_a_kept_model_loads_and_one_not_kept_is_one_line(server, monkeypatch):
    path = hub.resolve(REPO)
    server.stop()
    try:
        assert hub.resolve(REPO) == path                       # the server is down
        _offline(monkeypatch)
        assert hub.resolve(REPO) == path
        with pytest.raises(hub.HubError, match="bert-qa is not cached, and HF_HUB_OFFLINE is "
                                               "set; load it once"):
            hub.resolve("hf://kbert-test/bert-qa")
    finally:
        server.start()


def test_a_download_transformers_made_is_converted_offline(server, monkeypatch, tmp_path):
    from huggingface_hub import snapshot_download
    snapshot_download("kbert-test/bert-qa", endpoint=server.url)   # as transformers would
    server.stop()
    try:
        path = hub.resolve("hf://kbert-test/bert-qa")                  # the server is down
        assert "span" in kbert.load(path).checkpoint.heads
    finally:
        server.start()


def test_unreachable_hub_and_nothing_kept_is_one_line(server):
    server.stop()
    try:
        with pytest.raises(hub.HubError, match=r"not cached, and http://127.0.0.1:\d+ cannot "
                                               r"be reached"):
            hub.resolve("hf://kbert-test/bert-ner")
    finally:
        server.start()


def test_local_files_only_never_asks(server):
    with pytest.raises(hub.HubError, match="local_files_only was asked"):
        hub.resolve(REPO, local_files_only=True)
    assert server.requests == []


def test_revisions_branch_tag_commit_and_pinning(server, repos):
    old = hub.resolve(REPO)
    commit = os.path.basename(old).split(".")[0]
    new_commit = server.add_repo("kbert-test/bert-mlm", repos["bert-classifier"])
    try:
        assert hub.resolve(REPO) == old               # a branch stays on the commit it gave
        assert hub.resolve(f"hf://kbert-test/bert-mlm@{commit}") == old
        assert hub.resolve("hf://kbert-test/bert-mlm@v1") == old           # the tag
        newer = hub.resolve(REPO, revision=new_commit)
        assert "classifier" in kbert.load(newer).checkpoint.heads
        server.reset_requests()
        server.fail_all(None)                         # a pinned, kept commit asks nothing
        assert hub.resolve(f"hf://kbert-test/bert-mlm@{new_commit}") == newer
        assert server.requests == []
        server.restore()
        hub.remove(REPO)                              # to move on: forget what it gave
        assert hub.resolve(REPO) != old
        with pytest.raises(ValueError, match="give one"):
            hub.resolve(REPO + "@v1", revision="main")
    finally:
        server.restore()
        server.add_repo("kbert-test/bert-mlm", repos["bert-mlm"])


@pytest.mark.parametrize("name,message", [
    ("hf://kbert-test/missing", "no such repository on the Hub"),
    ("hf://kbert-test/private", "no such repository on the Hub"),
    ("hf://kbert-test/bert-mlm@no-such-branch", "has no revision 'no-such-branch'"),
    ("hf://kbert-test/gated", "is gated: accept its terms on http.* and set HF_TOKEN"),
    ("hf://kbert-test/not-bert", "is a distilbert model; kbert converts BERT"),
])
def test_each_failure_is_one_line(server, name, message):
    with pytest.raises(hub.HubError, match=message) as caught:
        hub.resolve(name)
    assert "\n" not in str(caught.value)


def test_a_token_opens_gated_and_private_repositories(server, monkeypatch):
    assert hub.resolve("hf://kbert-test/gated", token=TOKEN)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert hub.resolve("hf://kbert-test/private")


def test_bin_weights_without_torch_are_one_line(server, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(hub.HubError, match=r"PyTorch's only \(pytorch_model.bin\).*pip install "
                                           r"torch"):
        hub.resolve("hf://kbert-test/bert-bin")


def test_a_download_cut_off_is_completed_by_the_next_load(server):
    server.cut("kbert-test/bert-qa", "model.safetensors", times=20, after_bytes=100)
    with pytest.raises(hub.HubError, match="cut off.*load it again"):
        hub.resolve("hf://kbert-test/bert-qa")
    server.restore()
    assert "span" in kbert.load("hf://kbert-test/bert-qa").checkpoint.heads


def test_a_damaged_kept_checkpoint_is_converted_again(server, capfd):
    path = hub.resolve(REPO)
    weights = os.path.join(path, "model.safetensors")
    with open(weights, "r+b") as f:
        f.truncate(os.path.getsize(weights) // 2)
    assert hub.resolve(REPO) == path
    assert "cut short; converting hf://kbert-test/bert-mlm again" in capfd.readouterr().err
    assert kbert.load(REPO).fill_mask(TEXT)


def test_bare_names_map_to_hub_repositories_and_local_ones_win(server, tmp_path, monkeypatch):
    assert hub.parse("bert-base-uncased").repo == "google-bert/bert-base-uncased"
    assert hub.parse("all-MiniLM-L6-v2").repo == "sentence-transformers/all-MiniLM-L6-v2"
    assert hub.resolve("minilm-l6-v2").endswith(os.path.join("saved_models", "minilm-l6-v2"))
    monkeypatch.setitem(hub.NAMES, "tiny-mlm", "kbert-test/bert-mlm")
    assert kbert.load("tiny-mlm").fill_mask(TEXT)
    monkeypatch.chdir(tmp_path)               # a local directory of that name wins
    local = hub.resolve("minilm-l6-v2")
    os.symlink(local, tmp_path / "tiny-mlm")
    assert hub.resolve("tiny-mlm") == "tiny-mlm"


def test_cache_dir_holds_downloads_and_checkpoints(server, tmp_path):
    path = hub.resolve(REPO, cache_dir=tmp_path / "mine")
    assert path.startswith(str(tmp_path / "mine" / "checkpoints"))
    assert os.path.isdir(tmp_path / "mine" / "downloads" / "models--kbert-test--bert-mlm")


def test_two_processes_convert_one_repository_once(server, tmp_path):
    script = ("import sys, kbert.convert as c, kbert.hub as h\n"
              "real = c.convert\n"
              "def convert(*a, **k):\n"
              "    print('CONVERTED', flush=True)\n"
              "    return real(*a, **k)\n"
              "c.convert = convert\n"
              "print(h.resolve('hf://kbert-test/bert-pretraining'))\n")
    env = {**os.environ, "KERAS_BACKEND": "numpy", "HF_HUB_OFFLINE": "0"}
    runs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [run.communicate(timeout=300) for run in runs]
    assert all(run.returncode == 0 for run in runs), [err for _, err in outs]
    assert sum(out.count("CONVERTED") for out, _ in outs) == 1
    assert len({out.split()[-1] for out, _ in outs}) == 1


def test_cache_list_and_remove_commands(server, capsys):
    hub.resolve(REPO)
    hub.resolve("hf://kbert-test/bert-qa")
    assert main(["cache", "list"]) == 0
    listing = capsys.readouterr().out
    assert "kbert-test/bert-mlm" in listing and "kbert-test/bert-qa" in listing
    assert "2 checkpoints" in listing
    assert main(["cache", "remove", "kbert-test/bert-qa", "--downloads"]) == 0
    removed = capsys.readouterr().out
    assert removed.count("removed ") == 2                   # the checkpoint and the download
    assert main(["cache", "remove", "kbert-test/bert-qa"]) == 2
    assert "nothing of it is kept" in capsys.readouterr().err
    assert [e["repo"] for e in hub.cached_models()] == ["kbert-test/bert-mlm"]


def test_convert_command_takes_a_hub_address(server, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["convert", "--from", "hf", REPO, "--output", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["heads"] == {"mlm": {}}
    assert main(["export", "hf://kbert-test/missing", "--output", str(tmp_path / "e")]) == 2
    assert "no such repository on the Hub" in capsys.readouterr().err


def test_the_name_table_is_the_documented_one():
    docs = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "checkpoints.md"),
                encoding="utf-8").read()
    rows = set(re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|$", docs, re.M))
    assert rows == set(hub.NAMES.items())


def test_a_damaged_download_is_one_line_and_cache_remove_downloads_fixes_it(server, tmp_path):
    from huggingface_hub import constants
    hub.resolve("hf://kbert-test/bert-qa")
    hub.remove("hf://kbert-test/bert-qa")                     # the converted checkpoint only
    snapshots = os.path.join(constants.HF_HUB_CACHE, "models--kbert-test--bert-qa", "snapshots")
    weights = os.path.realpath(os.path.join(snapshots, os.listdir(snapshots)[0],
                                            "model.safetensors"))
    with open(weights, "r+b") as f:
        f.truncate(1000)
    with pytest.raises(hub.HubError, match=r"a downloaded file is damaged .*kbert cache remove "
                                           r"hf://kbert-test/bert-qa --downloads"):
        hub.resolve("hf://kbert-test/bert-qa")
    assert hub.remove("hf://kbert-test/bert-qa", downloads=True)
    assert "span" in kbert.load("hf://kbert-test/bert-qa").checkpoint.heads
