"""Held-out masked-LM and next-sentence accuracy of a checkpoint on pretraining shards.

    python benchmarks/eval_pretraining.py --model saved_models/minilm-l6-mlm-nsp --data heldout/

Prints one JSON object: mlm_accuracy, nsp_accuracy (fractions), mlm_loss, nsp_loss, examples.
"""

import argparse
import json
import os

from kbert.models.task_models import task_model

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="kbert checkpoint directory with mlm/nsp heads")
    p.add_argument("--data", required=True, help="TFRecord shard directory (held-out documents)")
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    from kbert import checkpoint, training
    model = task_model(checkpoint.load(args.model), "pretraining")
    print(json.dumps(training.evaluate_pretraining(model, args.data, args.batch_size)))


if __name__ == "__main__":
    main()
