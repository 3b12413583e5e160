"""The playground's first search on a fresh server: how long after start-up it answers.

    python benchmarks/app_first_search.py                  # 3 fresh servers, one after another
    python benchmarks/app_first_search.py --runs 1 --wait 10

Each run starts `python -m app` (the shipped checkpoints, defaults: no --preload) in a new
process on a loopback port, waits until the page answers, waits `--wait` seconds more (a user
reading the page; default 0: the search is sent at once), then sends the Search tab's first
example (`app.examples.SEARCH[0]`, the tab's defaults) through gradio_client's /search and
times it: from the server's start to the answer, and the search itself (the call, from the
moment it is sent). Prints the line the tab showed while it waited (if any), a second search on
the same document for comparison, the server's memory (RSS) at the end and its log's lines on
the Search tab's checkpoints loaded in the background.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _wait_for_page(url: str, server: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if server.poll() is not None:
            sys.exit(f"the server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"{url} did not answer in {timeout:.0f} s")


def one_run(wait: float) -> dict:
    """{"page", "answer", "search", "second", "waiting", "rss", "log"}: seconds from the
    server's start to its page and to the first search's answer, the first and a second search's
    own times, the tab's lines while it waited, the server's memory in MB and its log (a file)."""
    from gradio_client import Client

    from app import examples
    question, document = examples.SEARCH[0]
    port = _free_port()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRADIO_ANALYTICS_ENABLED="False")
    log = tempfile.TemporaryFile("w+")
    start = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "app", "--port", str(port)], cwd=ROOT,
                              env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        url = f"http://127.0.0.1:{port}/"
        _wait_for_page(url, server)
        page = time.perf_counter() - start
        time.sleep(wait)
        sent = time.perf_counter()
        client = Client(url, verbose=False)
        job = client.submit(question=question, document=document, api_name="/search")
        out = job.result(timeout=600)
        answered = time.perf_counter()
        if out[3] is None:
            sys.exit(f"the search failed: {out[-1]}")
        waiting = [o[-1] for o in job.outputs()[:-1]]
        begun = time.perf_counter()
        client.predict(question=examples.SEARCH[1][0], document=document, api_name="/search")
        second = time.perf_counter() - begun
        return {"page": page, "answer": answered - start, "search": answered - sent,
                "second": second, "waiting": waiting, "answer_text": out[0],
                "rss": _rss_mb(server.pid), "log": log}
    finally:
        server.terminate()
        server.wait(60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="fresh servers, one after another")
    p.add_argument("--wait", type=float, default=0.0,
                   help="seconds between the page answering and the first search (default 0)")
    args = p.parse_args()
    sys.path.insert(0, ROOT)
    from kbert import hardware
    print(hardware.describe(), flush=True)          # the CPU every number ran on
    runs = []
    for i in range(args.runs):
        run = one_run(args.wait)
        runs.append(run)
        print(f"run {i + 1}: page up {run['page']:.1f} s; first search answered "
              f"{run['answer']:.1f} s after the server's start, {run['search']:.1f} s after it "
              f"was sent; a second search {run['second'] * 1000:.0f} ms; server RSS "
              f"{run['rss']:.0f} MB; answer {run['answer_text']!r}", flush=True)
        for line in run["waiting"]:
            print(f"    while it waited: {line}")
        run["log"].seek(0)
        for line in run["log"]:
            if "Search tab:" in line:
                print(f"    server log: {line.strip()}")
        run["log"].close()
    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs)
    print(f"median of {len(runs)}: page up {median('page'):.1f} s, first answer "
          f"{median('answer'):.1f} s after start, the first search {median('search'):.1f} s "
          f"(sent {args.wait:g} s after the page was up), a second "
          f"{median('second') * 1000:.0f} ms; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
