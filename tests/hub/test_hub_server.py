"""HubServer against the real huggingface_hub client: downloads by branch, tag and commit, the
client's typed errors, a connection cut mid-download, and the cache read with the server down."""

import os

import httpx2
import pytest
from hub_server import HubServer, hub_server_fixture, online_hub_fixture  # noqa: F401
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

FILES = {"config.json": b'{"hidden_size": 8}', "vocab.txt": b"[PAD]\n[UNK]\nhello\n",
         "weights/model.weights.h5": bytes(range(256)) * 40, "README.md": b"# tiny\n"}


def read_tree(folder):
    """{relative POSIX path: bytes} of every file below `folder`."""
    return {os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/"):
            open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(folder) for name in names}


def leftovers(cache):
    """Partial downloads left anywhere in a cache."""
    return [name for _, _, names in os.walk(cache) for name in names
            if name.endswith(".incomplete")]


def test_the_fixture_puts_the_client_online_against_the_server(online_hub, tmp_path):
    assert not constants.is_offline_mode() and "HF_HUB_OFFLINE" not in os.environ
    online_hub.add_repo("org/defaults", {"a.txt": b"a"})
    # No endpoint= and no cache_dir=: the server, and the test's own cache.
    path = hf_hub_download("org/defaults", "a.txt")
    assert path.startswith(str(tmp_path)) and open(path, "rb").read() == b"a"
    assert online_hub.requests[0] == ("HEAD", "/org/defaults/resolve/main/a.txt")
    assert "authorization" not in {k.lower() for k in online_hub.request_headers[0]}


def test_downloads_exact_bytes_by_branch_tag_and_commit(online_hub, tmp_path):
    sha = online_hub.add_repo("org/tiny", FILES, tags=["v1"])
    for revision in (None, "main", "v1", sha):
        path = hf_hub_download("org/tiny", "weights/model.weights.h5", revision=revision,
                               endpoint=online_hub.url, cache_dir=tmp_path / "cache")
        assert open(path, "rb").read() == FILES["weights/model.weights.h5"]
        assert f"/snapshots/{sha}/" in path
    folder = snapshot_download("org/tiny", endpoint=online_hub.url, cache_dir=tmp_path / "other")
    assert read_tree(folder) == FILES and folder.endswith(sha)


def test_allow_patterns_and_the_requests_a_snapshot_makes(online_hub, tmp_path):
    sha = online_hub.add_repo("org/patterns", FILES)
    folder = snapshot_download("org/patterns", allow_patterns=["*.json", "*.txt"],
                               endpoint=online_hub.url, cache_dir=tmp_path)
    assert read_tree(folder) == {p: FILES[p] for p in ("config.json", "vocab.txt")}
    assert online_hub.requests[:2] == [("GET", "/api/models/org/patterns/revision/main"),
                                       ("GET", f"/api/models/org/patterns/tree/{sha}")]
    assert sorted(online_hub.requests[2:]) == sorted(
        (method, f"/org/patterns/resolve/{sha}/{p}")
        for p in ("config.json", "vocab.txt") for method in ("HEAD", "GET"))
    online_hub.reset_requests()
    snapshot_download("org/patterns", revision=sha, allow_patterns=["*.json", "*.txt"],
                      endpoint=online_hub.url, cache_dir=tmp_path)
    assert online_hub.requests == []          # a cached commit needs no request
    snapshot_download("org/patterns", allow_patterns=["*.json", "*.txt"],
                      endpoint=online_hub.url, cache_dir=tmp_path)
    assert online_hub.requests == [("GET", "/api/models/org/patterns/revision/main")]


def test_a_new_commit_moves_the_branch_and_the_old_sha_keeps_its_content(online_hub, tmp_path):
    first = online_hub.add_repo("org/moving", {"config.json": b"1"}, tags="v1")
    second = online_hub.add_repo("org/moving", {"config.json": b"2", "new.txt": b"n"})
    assert first != second and len(second) == 40 and int(second, 16) >= 0
    cache = tmp_path / "cache"
    latest = snapshot_download("org/moving", endpoint=online_hub.url, cache_dir=cache)
    assert latest.endswith(second) and read_tree(latest) == {"config.json": b"2",
                                                             "new.txt": b"n"}
    for revision in (first, "v1"):
        old = snapshot_download("org/moving", revision=revision, endpoint=online_hub.url,
                                cache_dir=cache)
        assert old.endswith(first) and read_tree(old) == {"config.json": b"1"}


def test_a_repository_from_a_directory(online_hub, tmp_path):
    source = tmp_path / "model"
    (source / "sub").mkdir(parents=True)
    (source / "config.json").write_bytes(b"{}")
    (source / "sub" / "model.safetensors").write_bytes(b"\0" * 100)
    online_hub.add_repo("folder-only", source)      # an id without an owner, as on the Hub
    folder = snapshot_download("folder-only", endpoint=online_hub.url, cache_dir=tmp_path / "c")
    assert read_tree(folder) == {"config.json": b"{}", "sub/model.safetensors": b"\0" * 100}


def test_model_info_and_refs(online_hub):
    first = online_hub.add_repo("org/info", FILES, tags=["v1"])
    second = online_hub.add_repo("org/info", {"config.json": b"{}"}, branch="dev")
    api = HfApi(endpoint=online_hub.url)
    info = api.model_info("org/info")
    assert (info.id, info.sha, info.private, info.gated) == ("org/info", first, False, False)
    assert sorted(s.rfilename for s in info.siblings) == sorted(FILES)
    assert all(s.size is None for s in info.siblings)
    assert api.model_info("org/info", revision="dev").sha == second
    assert api.repo_info("org/info", revision="v1").sha == first
    sizes = {s.rfilename: (s.size, s.lfs is not None)
             for s in api.model_info("org/info", files_metadata=True).siblings}
    assert sizes["weights/model.weights.h5"] == (len(FILES["weights/model.weights.h5"]), True)
    assert sizes["config.json"] == (len(FILES["config.json"]), False)
    refs = api.list_repo_refs("org/info")
    assert {r.name: r.target_commit for r in refs.branches} == {"main": first, "dev": second}
    assert [(r.name, r.ref) for r in refs.tags] == [("v1", "refs/tags/v1")]


def test_the_client_raises_its_typed_errors(online_hub, tmp_path):
    online_hub.add_repo("org/there", {"config.json": b"{}"})
    url, cache = online_hub.url, tmp_path
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download("org/absent", endpoint=url, cache_dir=cache)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("org/absent", "config.json", endpoint=url, cache_dir=cache,
                        token=HubServer.token)
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=url).model_info("org/absent")
    with pytest.raises(RevisionNotFoundError):
        snapshot_download("org/there", revision="nope", endpoint=url, cache_dir=cache)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("org/there", "config.json", revision="0" * 40, endpoint=url,
                        cache_dir=cache)
    with pytest.raises(RevisionNotFoundError):
        HfApi(endpoint=url).model_info("org/there", revision="nope")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("org/there", "missing.bin", endpoint=url, cache_dir=cache)


def test_gated_and_private_repositories_need_the_token(online_hub, tmp_path):
    online_hub.add_repo("org/gated", {"config.json": b"g"}, gated=True)
    online_hub.add_repo("org/private", {"config.json": b"p"}, private=True)
    url = online_hub.url
    assert HfApi(endpoint=url).model_info("org/gated").gated == "auto"    # metadata is public
    for token in (None, "hf_someone_else"):
        with pytest.raises(GatedRepoError):
            snapshot_download("org/gated", endpoint=url, cache_dir=tmp_path, token=token)
        with pytest.raises(GatedRepoError):
            hf_hub_download("org/gated", "config.json", endpoint=url, cache_dir=tmp_path,
                            token=token)
        with pytest.raises(RepositoryNotFoundError):
            snapshot_download("org/private", endpoint=url, cache_dir=tmp_path, token=token)
        with pytest.raises(RepositoryNotFoundError):
            HfApi(endpoint=url, token=token).model_info("org/private")
    assert leftovers(tmp_path) == []
    for repo, content in (("org/gated", b"g"), ("org/private", b"p")):
        folder = snapshot_download(repo, endpoint=url, cache_dir=tmp_path, token=online_hub.token)
        assert read_tree(folder) == {"config.json": content}
    assert online_hub.request_headers[-1]["authorization"] == f"Bearer {online_hub.token}"


def test_a_cut_download_is_resumed_with_a_range(online_hub, tmp_path):
    # The client writes what it received in 10 MiB chunks: a cut after 11 MiB resumes at 10 MiB.
    big = os.urandom(12 * 1024 * 1024)
    sha = online_hub.add_repo("org/big", {"model.safetensors": big, "config.json": b"{}"})
    online_hub.cut("org/big", "model.safetensors", after_bytes=11 * 1024 * 1024)
    folder = snapshot_download("org/big", endpoint=online_hub.url, cache_dir=tmp_path)
    assert read_tree(folder) == {"model.safetensors": big, "config.json": b"{}"}
    gets = [h.get("range") for (method, path), h in
            zip(online_hub.requests, online_hub.request_headers)
            if method == "GET" and path == f"/org/big/resolve/{sha}/model.safetensors"]
    assert gets == [None, "bytes=10485760-"]
    assert leftovers(tmp_path) == []


def test_a_download_cut_each_time_raises_and_leaves_no_partial_file(online_hub, tmp_path):
    online_hub.add_repo("org/flaky", FILES)
    path = "weights/model.weights.h5"
    # The client tries 6 times, a second apart, while no byte comes through.
    online_hub.cut("org/flaky", path, times=6, after_bytes=100)
    with pytest.raises(httpx2.RemoteProtocolError):
        hf_hub_download("org/flaky", path, endpoint=online_hub.url, cache_dir=tmp_path)
    assert leftovers(tmp_path) == []
    assert not any(name.endswith("model.weights.h5") for name in read_tree(tmp_path))
    folder = snapshot_download("org/flaky", endpoint=online_hub.url, cache_dir=tmp_path)
    assert read_tree(folder) == FILES


def test_the_cache_serves_once_the_server_is_gone(online_hub, tmp_path):
    sha = online_hub.add_repo("org/offline", FILES)
    snapshot_download("org/offline", endpoint=online_hub.url, cache_dir=tmp_path)
    online_hub.stop()
    for local_files_only in (True, False):      # refused connections fall back to the cache
        folder = snapshot_download("org/offline", endpoint=online_hub.url, cache_dir=tmp_path,
                                   local_files_only=local_files_only)
        assert folder.endswith(sha) and read_tree(folder) == FILES
    with pytest.raises(LocalEntryNotFoundError):
        snapshot_download("org/never-fetched", endpoint=online_hub.url, cache_dir=tmp_path,
                          local_files_only=True)
    with pytest.raises(httpx2.ConnectError):
        HfApi(endpoint=online_hub.url).model_info("org/offline")
    online_hub.start()
    assert HfApi(endpoint=online_hub.url).model_info("org/offline").sha == sha


def test_failures_on_every_request(online_hub, tmp_path):
    online_hub.add_repo("org/failing", {"config.json": b"{}"})
    snapshot_download("org/failing", endpoint=online_hub.url, cache_dir=tmp_path / "cached")
    online_hub.fail_all(503)
    with pytest.raises(HfHubHTTPError) as error:
        HfApi(endpoint=online_hub.url).model_info("org/failing")
    assert error.value.response.status_code == 503
    folder = snapshot_download("org/failing", endpoint=online_hub.url,
                               cache_dir=tmp_path / "cached")         # falls back to the cache
    assert read_tree(folder) == {"config.json": b"{}"}
    with pytest.raises(LocalEntryNotFoundError):
        snapshot_download("org/failing", endpoint=online_hub.url, cache_dir=tmp_path / "empty")
    online_hub.fail_all(None)
    # A dropped connection is not a connection error to the client: no fallback to the cache.
    with pytest.raises(httpx2.RemoteProtocolError):
        snapshot_download("org/failing", endpoint=online_hub.url, cache_dir=tmp_path / "cached")
    online_hub.restore()
    assert HfApi(endpoint=online_hub.url).model_info("org/failing").id == "org/failing"
