"""Ask a document in the playground: indexing time, then the time of each question.

    python benchmarks/app_search.py                        # 200 passages of SQuAD dev
    python benchmarks/app_search.py --passages 500 --questions 40 --hybrid off

The document is SQuAD v1.1 dev paragraphs (../shared/data/squad/dev-v1.1-part-a.json), in
order, blank-line separated, until the Search tab splits it into `--passages` passages. The
first call of the Search tab's handler indexes it; then each question (one per paragraph,
spread over the document) goes through the same handler: search on the cached index, the
SQuAD model reading the top passages, the results page (`--api`: a gradio_client call of the
served app's /search, HTTP and all). Prints indexing time and throughput,
the median, p95 and max of a question against the target (under 1 s), and how often the top
passage holds the answer and the best span matches SQuAD's (exact match, SQuAD's normalization).
"""

import argparse
import json
import os
import re
import socket
import statistics
import string
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "squad", "dev-v1.1-part-a.json")


def _normalize(text):
    """SQuAD's answer normalization: lower case, no punctuation, articles or extra spaces."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def document(path, passages, split):
    """(text, [(question, answers, paragraph start)]): paragraphs until `split` gives
    `passages` passages."""
    with open(path, encoding="utf-8") as f:
        articles = json.load(f)["data"]
    paragraphs = [p for a in articles for p in a["paragraphs"]]
    text, questions, low, high = "", [], 1, len(paragraphs)
    while low < high:                         # the fewest paragraphs that give enough passages
        mid = (low + high) // 2
        if len(split("\n\n".join(p["context"] for p in paragraphs[:mid]))) >= passages:
            high = mid
        else:
            low = mid + 1
    for p in paragraphs[:low]:
        if text:
            text += "\n\n"
        qa = p["qas"][0]
        questions.append((qa["question"], [a["text"] for a in qa["answers"]], len(text)))
        text += p["context"]
    return text, questions


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=DATA, help="SQuAD v1.1 JSON (default: %(default)s)")
    p.add_argument("--passages", type=int, default=200)
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--hybrid", choices=("on", "off"), default="on")
    p.add_argument("--models-dir", help="checkpoints to serve (default: the shipped ones)")
    p.add_argument("--api", action="store_true",
                   help="ask through gradio_client and the served app's /search (started in "
                        "this process on a loopback port) instead of calling the handler")
    args = p.parse_args()
    from kbert import hardware
    print(hardware.describe(), flush=True)          # the CPU every number ran on
    if not os.path.isfile(args.data):
        sys.exit(f"{args.data}: not found (pass --data)")

    sys.path.insert(0, ROOT)
    from app import handlers, server
    from app import search as search_lib
    from app.registry import Registry, discover
    if args.api:
        from gradio_client import Client
        port = _free_port()
        demo, registry = server.serve(models_dir=args.models_dir, port=port, block=False)
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        ask = lambda *inputs: client.predict(*inputs, api_name="/search")  # noqa: E731
    else:
        registry = Registry(discover(server.models_dir_or_default(args.models_dir)))
        steps = handlers.search(registry)
        ask = lambda *inputs: list(steps(*inputs))[-1]  # noqa: E731 - the answer, its last step
    encoder, reader = registry.resolve(None, "embedding"), registry.resolve(None, "span")
    model = registry.get(encoder)
    registry.get(reader)
    max_tokens = search_lib.passage_tokens(model)
    text, questions = document(
        args.data, args.passages,
        lambda t: search_lib.split_document(model.tokenizer, t, max_tokens))
    step = max(1, len(questions) // args.questions)
    questions = questions[::step][:args.questions]
    hybrid = args.hybrid == "on"

    start, start_cpu = time.perf_counter(), time.process_time()
    out = ask(encoder, questions[0][0], text, None, 5, hybrid, reader)
    first, first_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    hits = out[3]
    if hits is None:
        sys.exit(f"the search failed: {out[-1]}")
    n = int(re.search(r"\*\*(\d+) passages", out[4]).group(1))
    ask(encoder, questions[0][0], text, None, 5, hybrid, reader)       # warm: every shape seen
    times, cpu, top_hit, exact = [], [], 0, 0
    for question, answers, _ in questions:
        start, start_cpu = time.perf_counter(), time.process_time()
        best, _, _, hits, info, notice = ask(encoder, question, text, None, 5, hybrid, reader)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        if hits is None or "reused" not in info:
            sys.exit(f"{question!r}: {notice or info}")
        top = hits[0]
        top_hit += any(text.find(a, top["start"], top["end"]) >= 0 for a in answers)
        exact += _normalize(best) in {_normalize(a) for a in answers}
    def ms(values):
        values = sorted(values)
        p95 = statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 \
            else values[0]
        return (f"median {statistics.median(values) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
                f"max {values[-1] * 1000:.0f} ms")
    print(f"document: {len(text):,} characters, {n} passages ({args.data})")
    print(f"encoder {encoder}, reader {reader}, runtime {registry.runtime}, dtype "
          f"{registry.dtype}, hybrid {args.hybrid}, {os.cpu_count()} CPUs "
          f"(this process may use {len(os.sched_getaffinity(0))})")
    print(f"first question (indexing + search + read): {first:.1f} s, {first_cpu:.1f} s of CPU "
          f"({n / first:.1f} passages/s; {n / first_cpu:.1f} per CPU second)")
    print(f"{len(times)} questions on the indexed document: {ms(times)} (target < 1000 ms); "
          f"CPU time (all threads) {ms(cpu)}; load average {os.getloadavg()[0]:.1f}")
    print(f"top passage holds an answer: {top_hit}/{len(times)}; best span = SQuAD answer "
          f"(exact match): {exact}/{len(times)}" + ("; through gradio_client" if args.api else ""))
    if args.api:
        demo.close()


if __name__ == "__main__":
    main()
