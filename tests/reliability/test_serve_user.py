"""`kbert serve` as an ordinary user (the as-user pass runs this file as `nobody`): it starts,
answers, and on SIGTERM exits 0 leaving nothing behind: no process, no folder of its own, no
file in the working directory."""

import os
import re
import signal

import httpx

from helpers import start_server


def test_serve_starts_answers_and_stops_clean(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    log = tmp_path / "stderr.txt"
    proc, url = start_server(["minilm-l6-v2", "--runtime", "keras", "--dtype", "float32"], log)
    try:
        got = httpx.post(url + "/embed", json={"inputs": ["hello"]}, timeout=60)
        assert got.status_code == 200 and len(got.json()["results"][0]) == 384
        folder = re.search(r"logs in (\S+)/ray", log.read_text()).group(1)
        assert os.stat(folder).st_uid == os.getuid()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not os.path.exists(folder)
    assert os.listdir(work) == []
