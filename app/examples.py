"""Preloaded inputs and the short notes on what BERT learns in each task."""

FILL_MASK = [
    ["The capital of France is [MASK]."],
    ["The man went to the [MASK]. He bought a gallon of [MASK]."],
    ["She poured the [MASK] into a cup and drank it slowly."],
    ["Doctors work in a [MASK]."],
]

NEXT_SENTENCE = [
    ["The man went to the store.", "He bought a gallon of milk."],
    ["The man went to the store.", "Penguins are flightless birds."],
    ["It started raining heavily in the afternoon.", "We stayed indoors and played cards."],
]

# Sentences a "random B" is drawn from (unrelated to any example's A, as NSP's NotNext pairs are).
RANDOM_SENTENCES = [
    "Penguins are flightless birds that live in the Southern Hemisphere.",
    "The stock market closed higher on Friday.",
    "Photosynthesis turns light into chemical energy.",
    "The recipe calls for two cups of flour.",
    "The orchestra tuned their instruments before the concert.",
    "Mount Everest is the highest mountain above sea level.",
    "He forgot his umbrella on the train.",
    "The library opens at nine in the morning.",
]

QUESTION_ANSWERING = [
    ["Where is the Eiffel Tower?",
     "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
     "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
     "from 1887 to 1889."],
    ["Who designed the tower?",
     "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
     "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
     "from 1887 to 1889."],
    ["What do plants need for photosynthesis?",
     "Photosynthesis is the process by which green plants use sunlight, water and carbon dioxide "
     "to make glucose and release oxygen. It takes place mainly in the leaves, inside organelles "
     "called chloroplasts."],
    ["How many moons does Mars have?",
     "Mars is the fourth planet from the Sun. It has two small moons, Phobos and Deimos, which "
     "were discovered by Asaph Hall in 1877."],
]

# Sentiment (the shipped classifier, minilm-l6-sst2, learned it from SST-2's film reviews).
CLASSIFY = [
    ["A wonderful film: the cast is superb and the story kept me hooked.", ""],
    ["Dull, slow and far too long. I wanted my money back.", ""],
    ["The plot is thin, but the performances make it worth watching.", ""],
    ["An ambitious mess that never finds its footing.", ""],
]

ENTITIES = [
    ["Gustave Eiffel's company built the tower in Paris for the 1889 World's Fair."],
    ["Angela Merkel met Emmanuel Macron in Berlin on Tuesday."],
    ["Apple opened a new office in London, said Tim Cook."],
]

EIFFEL_DOCUMENT = """\
The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It \
is named after the engineer Gustave Eiffel, whose company designed and built the tower from \
1887 to 1889 as the entrance arch of the 1889 World's Fair.

The tower is 330 metres tall, about the height of an 81-storey building. It was the tallest \
man-made structure in the world until the Chrysler Building in New York was finished in 1930. \
Its square base measures 125 metres on each side.

Visitors can reach three levels. The first and second levels hold restaurants, and the upper \
platform of the top level, 276 metres above the ground, is the highest observation deck open \
to the public in the European Union. Climbing from the ground to the first level takes more \
than 300 steps.

The tower is repainted every seven years to protect it from rust, with about 60 tonnes of \
paint each time. It is painted in three shades of brown, darker at the bottom and lighter at \
the top, so that it looks evenly coloured against the sky.

About six million people visit the tower each year, which makes it one of the most visited \
monuments that charge for entry in the world.
"""

SEARCH = [
    ["How often is the tower painted?", EIFFEL_DOCUMENT],
    ["How tall is the tower?", EIFFEL_DOCUMENT],
    ["Which building overtook it as the tallest?", EIFFEL_DOCUMENT],
    ["How many people visit it?", EIFFEL_DOCUMENT],
]

ATTENTION = [
    ["The cat sat on the mat because it was tired.", ""],
    ["The man went to the store.", "He bought a gallon of milk."],
]

NOTES = {
    "fill": "**Masked language modelling (MLM).** In pre-training BERT sees text with 15% of its "
            "WordPiece tokens hidden (mostly as `[MASK]`) and learns to predict each one from "
            "the words on *both* sides. Here it ranks the vocabulary for every `[MASK]` you write "
            "(at most 10).",
    "nsp": "**Next sentence prediction (NSP).** The other pre-training task: given `[CLS] A [SEP] "
           "B [SEP]`, is B the sentence that really followed A, or a random one? Half the "
           "training pairs are real, half random; the answer is read from the `[CLS]` vector.",
    "qa": "**Span prediction (SQuAD).** Fine-tuned BERT reads `[CLS] question [SEP] context "
          "[SEP]` and scores every context token as the answer's start and end; the best "
          "start ≤ end pair is the answer. A SQuAD 2.0 model may answer *no answer* (the "
          "`[CLS]` span) when the context does not contain one. Long contexts are read in "
          "overlapping windows.",
    "classify": "**Sequence classification.** A fine-tuned classifier reads `[CLS] text [SEP]` "
                "(or a pair `[CLS] A [SEP] B [SEP]`) and predicts a label from the final "
                "`[CLS]` vector; a regression head predicts one number. The shipped "
                "minilm-l6-sst2 tells a review's sentiment (negative / positive; trained on "
                "SST-2's film-review sentences). Train one on your own CSV with `kbert finetune "
                "classify` (see docs/finetuning.md).",
    "entities": "**Named entities (token classification).** A fine-tuned tagger labels each "
                "word at its first WordPiece with an IOB tag (`B-PER`, `I-PER`, `O`, ...); "
                "consecutive tags of one type form an entity. The shipped minilm-l6-conll2003 "
                "finds persons, organisations, locations and other names (MISC), trained on "
                "CoNLL-2003's Reuters news. Train one with `kbert finetune tag` on CoNLL or "
                "JSONL files.",
    "search": "**Ask a document: retrieve, then read.** The document (pasted, or text files "
              "uploaded) is split into passages of about 128 WordPieces (paragraphs packed "
              "together, long ones cut into overlapping windows), each embedded by the sentence "
              "encoder picked above (minilm-l6-squad-retriever: all-MiniLM-L6-v2 fine-tuned on "
              "SQuAD questions; mean-pooled, unit vectors); the question is embedded "
              "the same way and the passages ranked by cosine similarity, fused with BM25 word "
              "matching when *hybrid* is on; a cross-encoder (minilm-l6-squad-reranker) can "
              "rerank the top 20, reading question and passage together, its score fused with "
              "the search's. A SQuAD model then reads each of the top five passages, "
              "weighs each span by its passage's score, and marks the best answer span. The "
              "index is kept per document: the next question only searches and reads.",
    "attention": "**Self-attention.** Every layer lets each WordPiece token attend to all the "
                 "others; each row of the heatmap is one token's attention distribution for "
                 "the chosen layer and head (it sums to 1). Many heads attend to `[SEP]`, to "
                 "the next or previous token, or to related words.",
}
