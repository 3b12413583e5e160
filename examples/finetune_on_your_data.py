"""Fine-tune a classifier on your own texts in memory: lists in, `model.fit`, a checkpoint out.

The preprocessor attached by `from_checkpoint` tokenizes and packs the strings inside the tf.data
pipeline (on TensorFlow, JAX or PyTorch alike); `compile()` sets the paper's recipe (AdamW,
lr 5e-5 with 10% warmup then linear decay over the steps `fit` will take, cross-entropy,
accuracy); `save_checkpoint` writes an ordinary kbert checkpoint whose labels `kbert.load`
reads back.

    python examples/finetune_on_your_data.py --init saved_models/minilm-l6-mlm-nsp --output out/mood
    KERAS_BACKEND=jax python examples/finetune_on_your_data.py --output out/mood-jax
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import kbert  # noqa: E402

TRAIN = [
    ("A wonderful film, moving and funny at once.", "positive"),
    ("I loved every minute of it.", "positive"),
    ("The acting is superb and the story is gripping.", "positive"),
    ("A delightful surprise with a great soundtrack.", "positive"),
    ("Beautifully shot, I would happily watch it again.", "positive"),
    ("One of the best films I have seen this year.", "positive"),
    ("Charming, warm and clever.", "positive"),
    ("The cast is brilliant and the ending is perfect.", "positive"),
    ("A dull, slow and far too long film.", "negative"),
    ("I wanted my money back after half an hour.", "negative"),
    ("The plot makes no sense and the acting is wooden.", "negative"),
    ("Boring from start to finish.", "negative"),
    ("A terrible script and awful dialogue.", "negative"),
    ("I fell asleep twice; nothing happens.", "negative"),
    ("The worst film I have seen in years.", "negative"),
    ("Loud, messy and completely forgettable.", "negative"),
    ("The film runs for two hours and ten minutes.", "neutral"),
    ("It opens in cinemas on Friday.", "neutral"),
    ("The director also wrote the screenplay.", "neutral"),
    ("It was filmed in Spain and Morocco.", "neutral"),
    ("The film is based on a novel from 1962.", "neutral"),
    ("The soundtrack was released as an album.", "neutral"),
    ("It is rated PG-13.", "neutral"),
    ("The cast includes several first-time actors.", "neutral"),
]
TEST = ["An absolute joy, I smiled all the way through.",
        "Tedious and badly acted.",
        "The film was shot over six weeks in 2019."]
LABELS = ["negative", "neutral", "positive"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init", default="saved_models/minilm-l6-mlm-nsp",
                        help="the checkpoint whose encoder is fine-tuned")
    parser.add_argument("--output", default="out/mood", help="the checkpoint to write")
    # 24 examples give 30 updates in 10 epochs: a higher peak rate than the paper's 5e-5
    # (tuned for thousands of examples) gets there.
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    args = parser.parse_args(argv)

    texts, labels = [t for t, _ in TRAIN], [y for _, y in TRAIN]
    clf = kbert.BertClassifier.from_checkpoint(args.init, labels=LABELS)
    clf.compile(learning_rate=args.learning_rate)
    history = clf.fit(texts, labels, batch_size=8, epochs=args.epochs, verbose=2)
    print(f"loss {history.history['loss'][0]:.3f} -> {history.history['loss'][-1]:.3f}")
    clf.save_checkpoint(args.output)

    model = kbert.load(args.output)
    for text in TEST:
        scores = model.classify(text)
        best = max(scores, key=scores.get)
        print(f"{best:>8} {scores[best]:.2f}  {text}")


if __name__ == "__main__":
    main()
