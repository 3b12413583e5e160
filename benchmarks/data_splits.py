"""The held-out splits the fine-tuning results use, written from ../shared/data (never committed).

    SQuAD v1.1: dev-v1.1-part-a.json's 24 articles split BY ARTICLE: every fourth article
                (indexes 3, 7, 11, 15, 19, 23: Computational_complexity_theory, 1973_oil_crisis,
                Genghis_Khan, Jacksonville,_Florida, Scottish_Parliament, Force) is held out,
                the other 18 are the training set; squad-train-plus.json adds
                train-v1.1-fragment.json's 11 articles (SQuAD v1.1 train, 3,807 questions) to them.
    RTE:        train.tsv split by index: the last 10% of the rows are the dev set.

Run: python benchmarks/data_splits.py --data ../shared/data --output /tmp/kft
"""

import argparse
import json
import os

from kbert.tasks.squad import split_by_article

HELD_OUT_EVERY = 4


def split_squad(src, out_dir):
    train, held = split_by_article(src, HELD_OUT_EVERY)
    paths = {}
    for name, part in (("squad-train.json", train), ("squad-heldout.json", held)):
        paths[name] = os.path.join(out_dir, name)
        with open(paths[name], "w", encoding="utf-8") as f:
            json.dump(part, f)
    titles = [a["title"] for a in held["data"]]
    return paths["squad-train.json"], paths["squad-heldout.json"], titles


def squad_train_plus(train, fragment, out_dir):
    """The 18 training articles and the train fragment's articles in one SQuAD v1.1 file."""
    with open(train, encoding="utf-8") as f:
        merged = json.load(f)
    with open(fragment, encoding="utf-8") as f:
        extra = json.load(f)["data"]
    held_titles = {a["title"] for a in merged["data"]}
    if held_titles & {a["title"] for a in extra}:
        raise SystemExit(f"{fragment}: shares articles with {train}")
    merged["data"] += extra
    path = os.path.join(out_dir, "squad-train-plus.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(merged, f)
    return path


def split_rte(src, out_dir, dev_fraction=0.1):
    with open(src, encoding="utf-8") as f:
        header, *rows = f.read().splitlines()
    rows = [r for r in rows if r.strip()]
    cut = len(rows) - int(round(dev_fraction * len(rows)))
    paths = (os.path.join(out_dir, "rte-train.tsv"), os.path.join(out_dir, "rte-dev.tsv"))
    for path, part in zip(paths, (rows[:cut], rows[cut:])):
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join([header] + part) + "\n")
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                       "shared", "data"))
    parser.add_argument("--output", default="/tmp/kft")
    args = parser.parse_args()
    os.makedirs(args.output, exist_ok=True)
    train, held, titles = split_squad(
        os.path.join(args.data, "squad", "dev-v1.1-part-a.json"), args.output)
    print(f"{train}\n{held} (held-out articles: {', '.join(titles)})")
    fragment = os.path.join(args.data, "squad", "train-v1.1-fragment.json")
    if os.path.exists(fragment):
        print(squad_train_plus(train, fragment, args.output))
    print("\n".join(split_rte(os.path.join(args.data, "glue", "RTE", "train.tsv"), args.output)))


if __name__ == "__main__":
    main()
