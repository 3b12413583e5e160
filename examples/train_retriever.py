"""Train a retriever on your own (query, passage) pairs and measure it on held-out queries.

Your pairs: a JSONL (or CSV/TSV) file with a query column and a positive-passage column (and,
if you have them, a negative column). A fraction of the queries is held out; they are searched
against EVERY passage of the file, before and after training, and scored with recall@k, MRR@10
and nDCG@10. Training is `kbert.training.train_retriever`: in-batch negatives, plus hard
negatives mined with BM25 from the training passages.

    python examples/train_retriever.py --data pairs.jsonl --output out/my-retriever
    python examples/train_retriever.py --data faq.csv --query-column question \\
        --positive-column answer --init minilm-l6-v2 --output out/faq-retriever

The trained checkpoint is a sentence encoder: `kbert.load("out/my-retriever").search(...)`,
`kbert index build FILE --model out/my-retriever`.
"""

import argparse
import os
import random

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from kbert.retrieval.metrics import RetrievalData, score  # noqa: E402
from kbert.training import retrievers as training  # noqa: E402


def split(pairs, held_out, seed):
    """(training pairs, held-out retrieval data): the queries are split, the held-out ones
    are searched against every passage of the file."""
    queries = sorted(set(pairs.queries))
    random.Random(seed).shuffle(queries)
    held = set(queries[:max(1, int(round(held_out * len(queries))))])
    keep = [i for i, q in enumerate(pairs.queries) if q not in held]
    train = training.Pairs([pairs.queries[i] for i in keep], [pairs.positives[i] for i in keep],
                           [pairs.negatives[i] for i in keep] if pairs.negatives else None,
                           [pairs.where[i] for i in keep])
    corpus = pairs.passages()
    row = {text: i for i, text in enumerate(corpus)}
    positives = pairs.positives_of()
    asked = [q for q in queries if q in held]
    data = RetrievalData(corpus, asked, [{row[p] for p in positives[q]} for q in asked],
                         [0] * len(asked))
    return train, data


def evaluate(path, data):
    from kbert.models import BertBiEncoder
    encoder = BertBiEncoder.from_checkpoint(path)
    return score(training.retriever_rankings(encoder, data), data.relevant)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="JSONL/CSV/TSV pairs, or SQuAD JSON")
    parser.add_argument("--init", default="minilm-l6-v2", help="the encoder to start from")
    parser.add_argument("--output", required=True, help="the checkpoint to write")
    parser.add_argument("--query-column", default="query")
    parser.add_argument("--positive-column", default="positive")
    parser.add_argument("--negative-column")
    parser.add_argument("--held-out", type=float, default=0.2,
                        help="the fraction of queries held out (default 0.2)")
    parser.add_argument("--negatives", type=int, default=1,
                        help="BM25 hard negatives mined per query (0: in-batch only)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    pairs = training.read_pairs(args.data, args.query_column, args.positive_column,
                                args.negative_column)
    train, held = split(pairs, args.held_out, args.seed)
    print(f"{len(train)} training pairs; {len(held.queries)} held-out queries against "
          f"{len(held.corpus)} passages")
    before = evaluate(args.init, held)
    result = training.train_retriever(
        args.init, train, args.output, epochs=args.epochs, batch_size=args.batch_size,
        learning_rate=args.learning_rate, mine_negatives_count=args.negatives, seed=args.seed)
    after = evaluate(result.output, held)
    print(f"\nheld-out queries ({len(held.queries)}):")
    print("| encoder | " + " | ".join(before) + " |")
    print("|---" * (len(before) + 1) + "|")
    for name, scores in ((args.init, before), (result.output, after)):
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in scores.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
