"""Tiny random BERT repositories as transformers and sentence-transformers write them: every head
kind, a sharded one, a `.bin`-only one, a cased one, a sentence encoder, a cross-encoder, and
one that is no BERT. Each also holds the files kbert must never download (TensorFlow, Flax,
ONNX and Rust weights, decoys of a few bytes)."""

import json
import os

import torch
import transformers

from helpers import tiny_vocab

DECOYS = ("tf_model.h5", "flax_model.msgpack", "onnx/model.onnx", "rust_model.ot")
CASED_WORDS = ("Paris London Berlin Anna Peter The He It France Germany").split()

HEADS = {           # repository -> (transformers class, kbert heads, config options)
    "bert-pretraining": (transformers.BertForPreTraining, {"mlm", "nsp"}, {}),
    "bert-mlm": (transformers.BertForMaskedLM, {"mlm"}, {}),
    "bert-classifier": (transformers.BertForSequenceClassification, {"classifier"},
                        {"id2label": {0: "negative", 1: "neutral", 2: "positive"}}),
    "bert-ner": (transformers.BertForTokenClassification, {"tagger"},
                 {"id2label": dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]))}),
    "bert-qa": (transformers.BertForQuestionAnswering, {"span"}, {}),
    "bert-choice": (transformers.BertForMultipleChoice, {"choice"}, {}),
    "bert-encoder": (transformers.BertModel, set(), {}),
}


def _config(vocab, **options):
    return transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=37,
                                   max_position_embeddings=64, **options)


def _model(cls, vocab, seed, **options):
    torch.manual_seed(seed)
    model = cls(_config(vocab, **options)).eval()
    with torch.no_grad():            # off the initialisation, so that every mapping shows
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model


def _tokenizer(folder, vocab, lower_case=True):
    path = os.path.join(folder, "vocab.txt")
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    tok = transformers.BertTokenizer(path, do_lower_case=lower_case)
    tok.save_pretrained(folder)
    return tok


def _decoys(folder):
    for name in DECOYS:
        os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(b"never downloaded")


def make_repos(root):
    """{repository name: folder} of every test repository, written under `root`."""
    vocab = tiny_vocab(size=120)
    out = {}
    for seed, (name, (cls, _, options)) in enumerate(HEADS.items()):
        folder = os.path.join(root, name)
        _model(cls, vocab, seed, **options).save_pretrained(folder)
        _tokenizer(folder, vocab)
        _decoys(folder)
        out[name] = folder
    mlm = transformers.BertForMaskedLM.from_pretrained(out["bert-mlm"])

    folder = out["bert-sharded"] = os.path.join(root, "bert-sharded")
    mlm.save_pretrained(folder, max_shard_size="20KB")
    _tokenizer(folder, vocab)
    assert os.path.isfile(os.path.join(folder, "model.safetensors.index.json"))

    folder = out["bert-bin"] = os.path.join(root, "bert-bin")
    mlm.config.save_pretrained(folder)
    torch.save(mlm.state_dict(), os.path.join(folder, "pytorch_model.bin"))
    _tokenizer(folder, vocab)

    cased = tiny_vocab(size=100)[:90] + list(CASED_WORDS)
    folder = out["bert-cased"] = os.path.join(root, "bert-cased")
    _model(transformers.BertForMaskedLM, cased, 11).save_pretrained(folder)
    _tokenizer(folder, cased, lower_case=False)

    out["sentence-encoder"] = _sentence_encoder(os.path.join(root, "sentence-encoder"), vocab)
    out["cross-encoder"] = _cross_encoder(os.path.join(root, "cross-encoder"), vocab)

    folder = out["not-bert"] = os.path.join(root, "not-bert")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "distilbert", "architectures": ["DistilBertModel"]}, f)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(b"not read")
    return out


def _sentence_encoder(folder, vocab):
    """A sentence-transformers bi-encoder: mean pooling, Normalize, 32 tokens at most."""
    from sentence_transformers import SentenceTransformer, models
    base = folder + "-base"
    _model(transformers.BertModel, vocab, 21).save_pretrained(base)
    _tokenizer(base, vocab)
    transformer = models.Transformer(base, max_seq_length=32)
    pooling = models.Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    SentenceTransformer(modules=[transformer, pooling, models.Normalize()],
                        device="cpu").save(folder)
    _decoys(folder)
    return folder


def _cross_encoder(folder, vocab):
    """A sentence-transformers cross-encoder: one output, scored through the sigmoid."""
    from sentence_transformers import CrossEncoder
    base = folder + "-base"
    _model(transformers.BertForSequenceClassification, vocab, 31, num_labels=1).save_pretrained(
        base)
    _tokenizer(base, vocab)
    CrossEncoder(base, num_labels=1, device="cpu").save(folder)
    return folder
