"""Pretraining batches straight from text: the local tf.data pipeline against the same pipeline
served by a tf.data service (a dispatcher and N workers started in this process), one pass
over the corpus, side by side: rows per second and the masking / NSP statistics.

    python benchmarks/text_stream.py --corpus ../shared/data/corpus --vocab VOCAB --files 200

Workers in this process share its CPUs, so the ratio shows the service's overhead, not the
scale-out a cluster gives (there each worker is another host's CPUs).
"""

import argparse
import glob
import os
import time

import numpy as np

from kbert.data import text


def one_pass(files, vocab, mode, service=None, batch_size=64):
    ds = text.text_pretraining_dataset(files, vocab, batch_size, mode=mode, epochs=1,
                                       data_service=service, drop_remainder=False)
    started = time.perf_counter()
    mask_id, sep_id = vocab.index("[MASK]"), vocab.index("[SEP]")
    rows = masked = eligible = as_mask = as_same = not_next = 0
    for b in ds.as_numpy_iterator():
        real = b["masked_lm_weights"] > 0
        shown = np.take_along_axis(b["input_ids"], b["masked_lm_positions"], 1)[real]
        labels = b["masked_lm_ids"][real]
        masked += real.sum()
        as_mask += (shown == mask_id).sum()
        as_same += (shown == labels).sum()
        specials = 1 + (b["input_ids"] == sep_id).sum(1)         # [CLS] and the [SEP]s
        eligible += ((b["input_mask"] > 0).sum(1) - specials).sum()
        not_next += b["next_sentence_labels"].sum()
        rows += len(b["input_ids"])
    seconds = time.perf_counter() - started
    return {"rows": rows, "rows_per_s": rows / seconds, "masked": masked / eligible,
            "as_mask": as_mask / masked, "as_same": as_same / masked, "not_next": not_next / rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "shared", "data", "corpus"))
    parser.add_argument("--vocab", required=True, help="an uncased BERT vocab.txt")
    parser.add_argument("--files", type=int, default=200, help="the first N files")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from kbert import hardware
    print(hardware.describe(), flush=True)          # the CPU every number ran on
    from kbert.network.config import read_vocab
    vocab = read_vocab(args.vocab)
    files = sorted(glob.glob(os.path.join(args.corpus, "*", "*.txt")))[:args.files]
    dispatcher = text.serve_dispatcher(0)
    workers = [text.serve_worker(dispatcher.target) for _ in range(args.workers)]
    print(f"{len(files)} files, {args.workers} in-process workers")
    print(f"{'mode':15} {'where':8} {'rows':>7} {'rows/s':>8} {'masked':>7} {'[MASK]':>7} "
          f"{'same':>6} {'NotNext':>8}")
    for mode in text.MODES:
        results = {}
        for where, service in (("local", None), ("service", dispatcher.target)):
            r = results[where] = one_pass(files, vocab, mode, service)
            print(f"{mode:15} {where:8} {r['rows']:7d} {r['rows_per_s']:8.0f} "
                  f"{r['masked']:7.2%} {r['as_mask']:7.1%} {r['as_same']:6.1%} "
                  f"{r['not_next']:8.1%}")
        print(f"{'':15} service/local rows per second: "
              f"{results['service']['rows_per_s'] / results['local']['rows_per_s']:.2f}")
    del workers


if __name__ == "__main__":
    main()
