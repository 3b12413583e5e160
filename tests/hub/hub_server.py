"""A Hugging Face Hub on 127.0.0.1 for tests: the routes and headers the real `huggingface_hub`
client reads (model_info/repo_info, list_repo_tree, list_repo_refs, HEAD and GET of
`/resolve/`, its typed errors), over repositories made in memory, with hooks that cut a download
or fail every request. Standard library only. olah (a Hub mirror) is not used: it serves local
mirrors only as git repositories, from a separate FastAPI process with dependencies outside the
pinned set, answered `GET /api/models/{id}` (model_info without a revision) with a 401 when
offline, and has no gated or private repositories nor faults to inject.

What the client sends (huggingface_hub 2.5, `endpoint=` given):
  snapshot_download(id, revision=R)  GET /api/models/{id}/revision/{R} (skipped when R is a
                                     commit sha), GET /api/models/{id}/tree/{sha}?recursive=true
                                     &expand=false (skipped when trees/{sha}.json is cached),
                                     then per file not yet in snapshots/{sha}: HEAD and GET of
                                     /{id}/resolve/{sha}/{path}
  hf_hub_download(id, path, revision=R)  HEAD /{id}/resolve/{R}/{path}, then GET of it unless
                                     the blob is cached; nothing when R is a cached commit sha
  HfApi.model_info(id, revision=R)   GET /api/models/{id}[/revision/{R}]
A revision in a path is URL-quoted with safe="" (`refs%2Fpr%2F1`).
"""

import hashlib
import json
import os
import socket
import socketserver
import sys
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

TOKEN = "hf_kbert_test_token"

# Served like the Hub serves Git LFS files: ETag and X-Linked-Etag the content's sha256,
# X-Linked-Size its size, `lfs` in the tree listing. Suffixes of the Hub's default .gitattributes
# (part of them) and its 10 MB rule.
LFS_SUFFIXES = (".bin", ".h5", ".keras", ".safetensors", ".ckpt", ".pt", ".pth", ".onnx",
                ".msgpack", ".npy", ".npz", ".pb", ".tflite", ".zip", ".gz", ".tar")
LFS_MIN_SIZE = 10 * 1024 * 1024


def _git_blob_oid(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _date(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class _Blob:
    """One file's content and the ids the Hub gives it."""

    def __init__(self, data):
        self.data = data
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.lfs = None

    def finish(self, path):
        if path.endswith(LFS_SUFFIXES) or len(self.data) >= LFS_MIN_SIZE:
            pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
                       f"size {len(self.data)}\n").encode()
            self.lfs = {"oid": self.sha256, "size": len(self.data), "pointerSize": len(pointer)}
            self.oid = _git_blob_oid(pointer)
        else:
            self.oid = _git_blob_oid(self.data)
        return self

    @property
    def etag(self):
        return self.sha256 if self.lfs else self.oid


class _Commit:
    def __init__(self, sha, parent, files, date):
        self.sha, self.parent, self.files, self.date = sha, parent, files, date


class _Repo:
    def __init__(self, repo_id, gated, private):
        self.id, self.gated, self.private = repo_id, gated, private
        self.created = datetime.now(timezone.utc)
        self.commits, self.branches, self.tags = {}, {}, {}

    def resolve(self, revision):
        for prefix, refs in (("refs/heads/", self.branches), ("refs/tags/", self.tags)):
            if revision.startswith(prefix):
                return refs.get(revision[len(prefix):])
        if revision in self.branches:
            return self.branches[revision]
        if revision in self.tags:
            return self.tags[revision]
        return revision if revision in self.commits else None

    def last_commit(self, commit, path):
        """The newest commit up to `commit` that changed `path`."""
        while commit.parent is not None:
            parent = self.commits[commit.parent]
            old = parent.files.get(path)
            if old is None or old.oid != commit.files[path].oid:
                break
            commit = parent
        return commit


def _read_files(files):
    if isinstance(files, dict):
        items = {str(p): d.encode() if isinstance(d, str) else bytes(d) for p, d in files.items()}
    else:
        root = Path(files)
        if not root.is_dir():
            raise ValueError(f"{root} is not a directory")
        items = {p.relative_to(root).as_posix(): p.read_bytes()
                 for p in sorted(root.rglob("*")) if p.is_file()}
    for path in items:
        if path.startswith("/") or "\\" in path or any(
                part in ("", ".", "..") for part in path.split("/")):
            raise ValueError(f"not a relative POSIX path in a repository: {path!r}")
    return {path: _Blob(data).finish(path) for path, data in sorted(items.items())}


class HubServer:
    """The Hub's protocol on http://127.0.0.1:PORT over in-memory repositories.

    `token` opens gated and private repositories (`Authorization: Bearer <token>`); any other
    bearer token is a valid user without access. As on the Hub, a gated repository's metadata,
    tree and refs are public and its files need the token; a private repository answers as
    missing without it. `requests` lists the (method, path) received (the path without its query),
    `request_headers` their headers (names in lower case); `cut` and `fail_all` inject faults.
    """

    token = TOKEN

    def __init__(self):
        self._lock = threading.Lock()
        self._repos = {}
        self._cuts = {}
        self._failure = False      # False: serve; an int: answer that status; None: drop
        self._connections = set()
        self._httpd = None
        self._thread = None
        self._port = 0
        self.requests = []
        self.request_headers = []

    # -- life cycle --------------------------------------------------------------------------

    @property
    def url(self):
        return f"http://127.0.0.1:{self._port}"

    @property
    def running(self):
        return self._httpd is not None

    def start(self):
        """Serve in a daemon thread; after `stop()`, again on the same port."""
        if self._httpd is None:
            self._httpd = _Server(("127.0.0.1", self._port), _Handler, self)
            self._port = self._httpd.server_address[1]
            self._thread = threading.Thread(target=self._httpd.serve_forever,
                                            kwargs={"poll_interval": 0.05}, daemon=True)
            self._thread.start()
        return self

    def stop(self):
        """Stop serving, close the listening socket and every open connection."""
        if self._httpd is None:
            return
        httpd, self._httpd = self._httpd, None
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- content -------------------------------------------------------------------------------

    def add_repo(self, repo_id, files, *, branch="main", tags=(), gated=False, private=False):
        """Commit `files` (a directory, or {path: bytes}) as the whole new content of `branch` of
        `repo_id`, making the repository on first use; `tags` point at the new commit, earlier
        commits stay resolvable by sha. `gated` and `private` set the repository's access (each
        call sets it). Returns the commit's sha (40 hex digits)."""
        blobs = _read_files(files)
        with self._lock:
            repo = self._repos.get(repo_id)
            if repo is None:
                repo = self._repos[repo_id] = _Repo(repo_id, gated, private)
            repo.gated, repo.private = gated, private
            parent = repo.branches.get(branch)
            listing = "".join(f"{path}\0{blob.oid}\n" for path, blob in blobs.items())
            sha = hashlib.sha1(f"{repo_id}\n{branch}\n{parent}\n{len(repo.commits)}\n{listing}"
                               .encode()).hexdigest()
            repo.commits[sha] = _Commit(sha, parent, blobs, datetime.now(timezone.utc))
            repo.branches[branch] = sha
            for tag in [tags] if isinstance(tags, str) else tags:
                repo.tags[tag] = sha
        return sha

    # -- test hooks ------------------------------------------------------------------------------

    def reset_requests(self):
        with self._lock:
            self.requests.clear()
            self.request_headers.clear()

    def cut(self, repo_id, path, times=1, after_bytes=0):
        """The next `times` GETs of `path` in `repo_id` (any revision) send the headers and
        `after_bytes` bytes of the body, then close the connection."""
        with self._lock:
            self._cuts[(repo_id, path)] = [times, after_bytes]

    def fail_all(self, status):
        """Every request is answered with `status` (e.g. 503), or with `None` its connection is
        closed without an answer; `restore()` serves again."""
        self._failure = status

    def restore(self):
        """Serve normally: no failure, no cut pending."""
        with self._lock:
            self._failure = False
            self._cuts.clear()

    # -- requests --------------------------------------------------------------------------------

    def _record(self, handler, path):
        with self._lock:
            self.requests.append((handler.command, path))
            self.request_headers.append({k.lower(): v for k, v in handler.headers.items()})

    def _take_cut(self, repo_id, path):
        with self._lock:
            cut = self._cuts.get((repo_id, path))
            if not cut:
                return None
            cut[0] -= 1
            if cut[0] <= 0:
                del self._cuts[(repo_id, path)]
            return cut[1]

    def _access(self, handler, repo_id, files):
        """(repo, None), or (None, an error answer) for a repository the caller may not read."""
        auth = handler.headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        with self._lock:
            repo = self._repos.get(repo_id)
        if repo is None or (repo.private and token != self.token):
            # The Hub: 401 without a token, 404 with one; a private repository looks missing.
            return None, (401 if token is None else 404, "RepoNotFound", "Repository not found")
        if repo.gated and files and token != self.token:
            if token is None:
                return None, (401, "GatedRepo",
                              f"Access to model {repo_id} is restricted. You must have access to "
                              "it and be authenticated to access it. Please log in.")
            return None, (403, "GatedRepo",
                          f"Access to model {repo_id} is restricted and you are not in the "
                          f"authorized list. Visit {self.url}/{repo_id} to ask for access.")
        return repo, None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, handler, hub):
        self.hub = hub
        super().__init__(address, handler)

    def server_bind(self):
        # HTTPServer.server_bind would look the host name up (getfqdn): not needed here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address):
        # Quiet for a client that went away mid-answer or a connection cut on purpose.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "HubServer"
    timeout = 30

    def setup(self):
        super().setup()
        with self.server.hub._lock:
            self.server.hub._connections.add(self.connection)

    def finish(self):
        with self.server.hub._lock:
            self.server.hub._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    # -- answers ---------------------------------------------------------------------------------

    def _drop(self):
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send(self, status, body=b"", headers=(), content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data, headers=()):
        self._send(200, json.dumps(data).encode(), headers)

    def _error(self, status, code, message, headers=()):
        headers = list(headers)
        if code is not None:
            headers += [("X-Error-Code", code), ("X-Error-Message", message)]
        self._send(status, json.dumps({"error": message}).encode(), headers)

    def _dispatch(self):
        hub = self.server.hub
        split = urlsplit(self.path)
        hub._record(self, split.path)
        if hub._failure is None:
            return self._drop()
        if hub._failure is not False:
            return self._error(hub._failure, None, "Failure injected by the test")
        if self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        query = parse_qs(split.query)
        segments = [unquote(s) for s in split.path.strip("/").split("/")]
        if segments[:2] == ["api", "models"] and len(segments) > 2:
            return self._api(segments[2:], query)
        if "resolve" in segments[1:3] and self.command in ("GET", "HEAD"):
            at = segments.index("resolve", 1)
            if len(segments) > at + 2:
                return self._resolve("/".join(segments[:at]), segments[at + 1],
                                     "/".join(segments[at + 2:]))
        self._error(404, None, "Not Found")

    def _repo_and_rest(self, segments):
        """(repo id, the path segments after it) for /api/models/{id}/..."""
        with self.server.hub._lock:
            known = set(self.server.hub._repos)
        if len(segments) >= 2 and "/".join(segments[:2]) in known:
            return "/".join(segments[:2]), segments[2:]
        if segments[0] in known:
            return segments[0], segments[1:]
        if len(segments) >= 2 and segments[1] not in ("revision", "tree", "refs"):
            return "/".join(segments[:2]), segments[2:]
        return segments[0], segments[1:]

    def _commit(self, repo, revision, headers=()):
        sha = repo.resolve(revision)
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", headers)
            return None
        return repo.commits[sha]

    def _api(self, segments, query):
        hub = self.server.hub
        repo_id, rest = self._repo_and_rest(segments)
        repo, denied = hub._access(self, repo_id, files=False)
        if denied:
            return self._error(*denied)
        if self.command not in ("GET", "HEAD"):
            return self._error(405, None, "Method not allowed")
        if not rest or (rest[0] == "revision" and len(rest) == 2):
            commit = self._commit(repo, rest[1] if rest else "main")
            if commit is not None:
                self._json(self._info(repo, commit, query))
        elif rest[0] == "tree" and len(rest) >= 2:
            commit = self._commit(repo, rest[1])
            if commit is not None:
                self._tree(repo, commit, "/".join(rest[2:]), query)
        elif rest == ["refs"]:
            self._json(self._refs(repo, query))
        else:
            self._error(404, None, "Not Found")

    def _info(self, repo, commit, query):
        blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = []
        for path, blob in commit.files.items():
            sibling = {"rfilename": path}
            if blobs:
                sibling.update(size=len(blob.data), blobId=blob.oid)
                if blob.lfs:
                    sibling["lfs"] = {"size": len(blob.data), "sha256": blob.sha256,
                                      "pointerSize": blob.lfs["pointerSize"]}
            siblings.append(sibling)
        info = {"_id": hashlib.sha1(repo.id.encode()).hexdigest()[:24], "id": repo.id,
                "modelId": repo.id, "author": repo.id.split("/")[0] if "/" in repo.id else None,
                "sha": commit.sha, "lastModified": _date(commit.date),
                "createdAt": _date(repo.created), "private": repo.private,
                "gated": "auto" if repo.gated is True else repo.gated, "disabled": False,
                "downloads": 0, "likes": 0, "tags": [], "library_name": None,
                "siblings": siblings,
                "usedStorage": sum(len(b.data) for b in commit.files.values())}
        expand = query.get("expand") or query.get("expand[]")
        if expand:
            info = {"_id": info["_id"], "id": repo.id,
                    **{key: info[key] for key in expand if key in info}}
        return info

    def _tree(self, repo, commit, folder, query):
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        expand = query.get("expand", ["false"])[0].lower() in ("1", "true")
        prefix = f"{folder}/" if folder else ""
        entries, folders = [], set()
        for path, blob in commit.files.items():
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix):].split("/")
            for depth in range(1, len(parts)):
                if recursive or depth == 1:
                    folders.add(prefix + "/".join(parts[:depth]))
            if not recursive and len(parts) > 1:
                continue
            entry = {"type": "file", "oid": blob.oid, "size": len(blob.data), "path": path}
            if blob.lfs:
                entry["lfs"] = dict(blob.lfs)
            if expand:
                last = repo.last_commit(commit, path)
                entry["lastCommit"] = {"id": last.sha, "title": "Upload", "date": _date(last.date)}
            entries.append(entry)
        if not entries and not folders:
            return self._error(404, "EntryNotFound",
                               f"{folder} does not exist on \"{commit.sha}\"",
                               [("X-Repo-Commit", commit.sha)])
        entries += [{"type": "directory", "oid": hashlib.sha1(f"{commit.sha}/{f}".encode())
                     .hexdigest(), "size": 0, "path": f} for f in sorted(folders)]
        self._json(sorted(entries, key=lambda e: e["path"]))

    def _refs(self, repo, query):
        def refs(kind, names):
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": sha}
                    for n, sha in sorted(names.items())]
        data = {"branches": refs("heads", repo.branches), "converts": [],
                "tags": refs("tags", repo.tags)}
        if query.get("include_prs"):
            data["pullRequests"] = []
        return data

    def _resolve(self, repo_id, revision, path):
        hub = self.server.hub
        repo, denied = hub._access(self, repo_id, files=True)
        if denied:
            return self._error(*denied)
        commit = self._commit(repo, revision)
        if commit is None:
            return
        blob = commit.files.get(path)
        headers = [("X-Repo-Commit", commit.sha)]
        if blob is None:
            return self._error(404, "EntryNotFound", "Entry not found", headers)
        headers += [("ETag", f'"{blob.etag}"'), ("Accept-Ranges", "bytes")]
        if blob.lfs:
            headers += [("X-Linked-Etag", f'"{blob.sha256}"'),
                        ("X-Linked-Size", str(len(blob.data)))]
        data, status = blob.data, 200
        if self.command == "GET" and self.headers.get("Range"):
            span = _byte_range(self.headers["Range"], len(data))
            if span is None:
                return self._error(416, None, "Requested range not satisfiable",
                                   headers + [("Content-Range", f"bytes */{len(data)}")])
            start, end = span
            headers.append(("Content-Range", f"bytes {start}-{end - 1}/{len(data)}"))
            data, status = data[start:end], 206
        cut = hub._take_cut(repo_id, path) if self.command == "GET" else None
        if cut is None:
            return self._send(status, data, headers, "application/octet-stream")
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data[:cut])
        self._drop()


def _byte_range(header, size):
    """(start, end) of a single `bytes=` range, or None when it cannot be served."""
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    try:
        if not first:
            start, end = max(size - int(last), 0), size
        else:
            start, end = int(first), min(int(last) + 1, size) if last else size
    except ValueError:
        return None
    return (start, end) if start < end else None


# -- pytest fixtures `hub_server` and `online_hub`: a test module imports their functions
# (`from hub_server import hub_server_fixture, online_hub_fixture`) for pytest to find them.

@pytest.fixture(scope="module", name="hub_server")
def hub_server_fixture():
    """One running HubServer for the test module."""
    with HubServer() as server:
        yield server


@pytest.fixture(name="online_hub")
def online_hub_fixture(hub_server, monkeypatch, tmp_path):
    """The module's HubServer, running, restored and with no requests recorded, and the
    `huggingface_hub` client configured to use it in this test. Configuration only, no function
    is replaced:

    - `HF_HUB_OFFLINE` and `TRANSFORMERS_OFFLINE` removed from the environment and
      `huggingface_hub.constants.HF_HUB_OFFLINE` set to False: the client reads the variables
      once, at import (the suite sets them), and every request checks the constant.
    - `HF_ENDPOINT` set to the server's url, and `constants.ENDPOINT` and
      `constants.HUGGINGFACE_CO_URL_TEMPLATE` with it (both derive from it at import; a file's url
      is built from the template, then its ENDPOINT prefix replaced by `endpoint=`): a call
      without `endpoint=` reaches this server too, never huggingface.co.
    - `HF_HOME` and `HF_HUB_CACHE` set to folders of `tmp_path`, and the constants derived from
      them at import moved there: `HF_HOME`, `HF_HUB_CACHE`, `HUGGINGFACE_HUB_CACHE`,
      `HF_ASSETS_CACHE`, `HF_XET_CACHE`, `HF_TOKEN_PATH`, `HF_STORED_TOKENS_PATH`,
      `AGENT_HARNESSES_PATH`, `CHECK_FOR_UPDATE_DONE_PATH`, and the copies
      `utils._cache_manager.HF_HUB_CACHE` and `utils._cache_assets.HF_ASSETS_CACHE`.
    - `HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN` and `HF_OIDC_RESOURCE` removed: no token of the
      machine is sent (the token file is under `tmp_path`, and absent).
    - `HF_HUB_DISABLE_TELEMETRY=1` and `constants.HF_HUB_DISABLE_TELEMETRY`: the user agent
      otherwise detects AI agents from a registry the client fetches once per process from
      ENDPOINT.
    The variables reach subprocesses; the constants this process. The rest of the client reads
    the constants where it uses them.
    """
    from huggingface_hub import constants
    from huggingface_hub.utils import _cache_assets, _cache_manager

    hub_server.start()
    hub_server.restore()
    hub_server.reset_requests()
    home = tmp_path / "hf_home"
    cache = home / "hub"
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                 "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (("HF_ENDPOINT", hub_server.url), ("HF_HOME", str(home)),
                        ("HF_HUB_CACHE", str(cache)), ("HF_HUB_DISABLE_TELEMETRY", "1")):
        monkeypatch.setenv(name, value)
    settings = {
        "HF_HUB_OFFLINE": False,
        "ENDPOINT": hub_server.url,
        "HUGGINGFACE_CO_URL_TEMPLATE": hub_server.url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(cache),
        "HUGGINGFACE_HUB_CACHE": str(cache),
        "HF_ASSETS_CACHE": str(home / "assets"),
        "HF_XET_CACHE": str(home / "xet"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "AGENT_HARNESSES_PATH": str(home / ".agent_harnesses.json"),
        "CHECK_FOR_UPDATE_DONE_PATH": str(home / ".check_for_update_done"),
        "HF_HUB_DISABLE_TELEMETRY": True,
    }
    for name, value in settings.items():
        monkeypatch.setattr(constants, name, value)
    monkeypatch.setattr(_cache_manager, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(_cache_assets, "HF_ASSETS_CACHE", str(home / "assets"))
    os.makedirs(cache, exist_ok=True)
    yield hub_server
    hub_server.restore()

