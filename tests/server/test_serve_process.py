"""`kbert serve` as a user runs it: a process on Ray Serve, on 127.0.0.1 and a free port. Bad
traffic (1,000 requests at once, garbage, a client that leaves mid-request, a slow client) is
answered or refused and the server serves after; SIGTERM lets the requests in flight finish and
exits 0, leaving no process behind; bad arguments are one line before anything starts."""

import asyncio
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from helpers import REPO, start_server

KBERT = [sys.executable, "-m", "kbert"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    proc, url = start_server(["minilm-l6-v2", "minilm-l6-squad", "--runtime", "keras",
                              "--dtype", "float32", "--max-queued", "256"], log)
    yield proc, url, log
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def healthy(url):
    r = httpx.post(url + "/embed", json={"inputs": "still here?"}, timeout=30)
    return r.status_code == 200 and len(r.json()["results"]) == 384


def test_a_thousand_requests_at_once(server):
    proc, url, _ = server
    # a connection is a file: 1,000 of them need the room
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))

    async def go():
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
            return await asyncio.gather(*(client.post("/embed", json={
                "inputs": [f"request {i} asks for a vector"]}) for i in range(1000)),
                return_exceptions=True)
    got = asyncio.run(go())
    failed = [g for g in got if isinstance(g, Exception)]
    assert not failed, failed[:3]
    codes = [r.status_code for r in got]
    assert set(codes) <= {200, 429}, sorted(set(codes))
    assert codes.count(200) >= 256
    for r in got:
        if r.status_code == 429:
            assert "queue is full" in r.json()["error"]
    assert healthy(url)


def test_garbage_and_clients_that_leave(server):
    _, url, _ = server
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:      # not HTTP at all
        s.sendall(b"\x00\x01garbage\r\n\r\n")
        s.settimeout(10)
        reply = s.recv(200)
    assert reply == b"" or reply.startswith(b"HTTP/1.") and b" 400 " in reply.split(b"\r\n")[0]
    # a client that sends a large request and leaves before the answer
    body = ('{"inputs": [' + ",".join(['"' + "word " * 200 + '"'] * 64) + "]}").encode()
    for _ in range(3):
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    # a slow client: half a request, trickled, while others are answered
    slow = socket.create_connection((host, int(port)))
    slow.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n{\"inp")
    started = time.monotonic()
    assert healthy(url) and time.monotonic() - started < 10
    slow.close()
    assert healthy(url)


def test_sigterm_finishes_the_requests_in_flight(server):
    proc, url, log = server
    folder = re.search(r"logs in (\S+)/ray", log.read_text()).group(1)
    texts = ["a longer text to embed, many words in it " * 20] * 32

    async def go():
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            flying = [asyncio.ensure_future(client.post("/embed", json={"inputs": texts}))
                      for _ in range(4)]
            await asyncio.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            return await asyncio.gather(*flying, return_exceptions=True)
    started = time.monotonic()
    got = asyncio.run(go())
    assert [getattr(r, "status_code", r) for r in got] == [200] * 4
    assert proc.wait(timeout=60) == 0
    assert time.monotonic() - started < 45
    assert "stopped in" in log.read_text()
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", timeout=2)
    time.sleep(1)
    left = [p for p in os.listdir("/proc") if p.isdigit() and _names(p, folder)]
    assert not left, f"processes left behind: {left}"
    assert not os.path.exists(folder)


def _names(pid, folder):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return folder.encode() in f.read()
    except OSError:
        return False


@pytest.mark.parametrize("args, words", [
    (["no-such-model"], "no-such-model"),
    (["minilm-l6-v2", "minilm-l6-v2"], "two models are named"),
    (["minilm-l6-v2", "--index", "/nonexistent"], "--index /nonexistent"),
])
def test_bad_arguments_are_one_line(args, words):
    started = time.monotonic()
    r = subprocess.run([*KBERT, "serve", *args, "--port", str(free_port())],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert time.monotonic() - started < 60


def test_a_port_in_use_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([*KBERT, "serve", "minilm-l6-v2", "--port", str(port)],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr


def test_the_ray_cluster_application():
    """deploy/rayservice.yaml's import path builds the deployment `kbert serve` runs, with the
    options given as args."""
    import yaml

    from kbert.server.replica import app_builder
    manifest = yaml.safe_load((REPO / "deploy" / "rayservice.yaml").read_text())
    config = yaml.safe_load(manifest["spec"]["serveConfigV2"])["applications"][0]
    assert config["import_path"] == "kbert.server.replica:app_builder"
    app = app_builder(config["args"])
    deployment = app._bound_deployment
    assert deployment.name == "kbert" and deployment.num_replicas == 4
    serve_config = deployment.init_args[0]
    assert serve_config.models == ["minilm-l6-v2", "minilm-l6-squad"]
    assert serve_config.max_batch_tokens == 16384
