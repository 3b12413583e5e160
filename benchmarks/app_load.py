"""Load test of the playground: N concurrent `/fill_mask` requests over loopback.

    python benchmarks/app_load.py                       # starts the app on saved_models/
    python benchmarks/app_load.py --model CKPT          # ... on a given checkpoint
    python benchmarks/app_load.py --url http://127.0.0.1:7860/ --model-name NAME

Every request must succeed (a result, no warning); prints the server time of one `/fill_mask`
(the event handler alone: tokenize, model, chart; median of 20, app started here), then p50/p95
latency and throughput of the concurrent requests, against the targets (one request <= 100 ms
of server time; 50 concurrent requests p95 <= 3 s).
"""

import argparse
import concurrent.futures
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

SENTENCES = ["The capital of France is [MASK].", "The man went to the [MASK].",
             "She poured the [MASK] into a cup.", "Doctors work in a [MASK].",
             "The [MASK] sat on the [MASK]."]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_time(fill, name, n=20):
    """Median seconds of the fill-mask handler alone (tokenize, model, chart), in ms."""
    times = []
    for i in range(n + 3):
        start = time.perf_counter()
        fill(name, SENTENCES[i % len(SENTENCES)], 5)
        times.append(time.perf_counter() - start)
    return statistics.median(times[3:]) * 1000


def _wait_for(url, process, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"the app exited with status {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=5).read(1)
            return
        except OSError:
            time.sleep(1)
    sys.exit(f"the app did not answer at {url} within {timeout} s")


CLIENTS = ("http", "gradio", "gradio-shared")


def _http_predict(url, data):
    """The result of one `/fill_mask` event over Gradio's REST API (a POST that queues the
    event, then its server-sent events until `complete` or `error`)."""
    body = json.dumps({"data": data}).encode()
    post = urllib.request.Request(url + "gradio_api/call/fill_mask", data=body,
                                  headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(post, timeout=120) as response:
        event_id = json.load(response)["event_id"]
    event = None
    with urllib.request.urlopen(f"{url}gradio_api/call/fill_mask/{event_id}",
                                timeout=120) as stream:
        for line in stream:
            line = line.decode().strip()
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event in ("complete", "error"):
                if event == "error":
                    raise RuntimeError(f"the app answered an error: {line[5:].strip()}")
                return json.loads(line[5:])
    raise RuntimeError("the event stream ended without a result")


def _requester(kind, url, name, clients):
    """request(i) → seconds of the i-th `/fill_mask` request, through the chosen client.

    The load generator shares the machine with the app: gradio_client is heavy (per request,
    threads and an event-stream reader in Python), so by default plain HTTP requests stand in
    for the browsers, which would run elsewhere. One gradio_client shared by all reads every
    result of its session from one stream and runs at most 40 jobs at once.
    """
    if kind == "http":
        predict = lambda i, data: _http_predict(url, data)  # noqa: E731
    else:
        from gradio_client import Client
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            clients = list(pool.map(lambda _: Client(url, verbose=False),
                                    range(1 if kind == "gradio-shared" else clients)))
        predict = lambda i, data: clients[i % len(clients)].predict(  # noqa: E731
            *data, api_name="/fill_mask")

    def request(i):
        start = time.perf_counter()
        masks, best, _, notice = predict(i, [name, SENTENCES[i % len(SENTENCES)], 5])
        elapsed = time.perf_counter() - start
        if not masks or (notice or "").startswith("⚠️"):
            raise RuntimeError(f"request {i} failed: {notice}")
        return elapsed
    return request


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="a running app (default: start one here)")
    p.add_argument("--model", action="append", default=[], help="checkpoint to serve")
    p.add_argument("--model-name", help="the model picker's name (default: first with MLM)")
    p.add_argument("--requests", type=int, default=50)
    p.add_argument("--concurrency", type=int, help="the app's concurrency limit "
                                                    "(default: the app's)")
    p.add_argument("--client", choices=CLIENTS, default="http",
                   help="http (default): each request a POST and its event stream on Gradio's "
                        "REST API (stdlib, as curl would); gradio: one gradio_client per "
                        "request; gradio-shared: one gradio_client for all")
    args = p.parse_args()
    from kbert import hardware
    print(hardware.describe(), flush=True)          # the CPU every number ran on

    server_process, name, url, server_ms = None, args.model_name, args.url, None
    if url is None:
        # The app runs in its own process, as it would serve real clients: the 50 client
        # threads here must not share its interpreter (and GIL).
        from app import handlers, server
        from app.registry import Registry, discover
        registry = Registry(discover(server.models_dir_or_default(), args.model))
        name = name or (registry.with_head("mlm") or [None])[0]
        if name is None:
            sys.exit("no checkpoint with an MLM head: pass --model CKPT")
        server_ms = _server_time(handlers.fill_mask(registry), name)
        port = _free_port()
        command = [sys.executable, "-m", "app", "--port", str(port), "--preload",
                   *(["--model", *args.model] if args.model else []),
                   *(["--concurrency", str(args.concurrency)] if args.concurrency else [])]
        server_process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}/"
        _wait_for(url, server_process)

    request = _requester(args.client, url, name, args.requests)
    single = min(request(0) for _ in range(3))   # warm-up; the first call builds the graph
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.requests) as pool:
        latencies = sorted(pool.map(request, range(args.requests)))
    wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    print(f"{args.requests} concurrent /fill_mask requests on {name} "
          f"(client: {args.client}): all succeeded")
    print(f"latency p50 {q[49] * 1000:.0f} ms, p95 {q[94] * 1000:.0f} ms, "
          f"max {latencies[-1] * 1000:.0f} ms; throughput {args.requests / wall:.1f} req/s "
          f"({wall:.1f} s wall, {os.cpu_count()} CPUs); one request alone {single * 1000:.0f} ms")
    if server_ms is not None:
        print(f"server time of one /fill_mask (handler: tokenize, model, chart): "
              f"{server_ms:.0f} ms (target <= 100 ms); load average {os.getloadavg()[0]:.1f}")
    print(f"p95 of {args.requests} concurrent requests: {q[94]:.2f} s (target <= 3 s)")
    if server_process is not None:
        server_process.terminate()
        server_process.wait(30)


if __name__ == "__main__":
    main()
