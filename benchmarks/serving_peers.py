"""The engines kbert's CPU runtimes are measured against, and the measures themselves.

Every peer reads the same weights (the HF-format copies `kbert.convert.export("hf", ...)` writes
of the MLM and SQuAD checkpoints) and offers the same three calls, strings in, outputs out,
tokenization (the fast tokenizer) and post-processing included:

- `embed(texts)`: mean-pooled last hidden states, float32 [n, hidden];
- `fill_mask(texts, top_k=5)`: the top-k tokens at each text's first `[MASK]`, as
  `BertForMaskedLM` and `pipeline("fill-mask")` compute them (the decoder at every position);
- `answer(questions, contexts)`: the best span's text, by the question-answering pipeline's
  steps (`QuestionAnsweringSteps`).

- `HfTorch`: transformers' `BertModel` / `BertForMaskedLM` / `BertForQuestionAnswering`,
  float32, or under `torch.autocast("cpu", torch.bfloat16)`;
- `OnnxRuntime`: `torch.onnx.export` of the same torch models (batch and sequence dynamic),
  ONNX Runtime with every graph optimization; int8: `quantize_dynamic` (QInt8 weights);
- `OpenVino`: `openvino.convert_model` of the torch models, compiled for the CPU at its default
  precision, `PERFORMANCE_HINT=LATENCY`;
- `SentenceTransformers`: `SentenceTransformer.encode` (embed only);
- `Kbert`: `kbert.load(..., runtime=, dtype=)`.

Model FLOPs (`model_flops`), the one formula behind every GFLOP/s printed: for a sequence of L
real tokens (padding not counted) through a BERT of `layers` layers, hidden size H and
feed-forward size I,

    2 x (4 H^2 + 2 H I) x L x layers    the matrix products with weights (Q, K, V, attention
                                        output; feed-forward in and out): 2 FLOPs a multiply-add
  + 4 x L^2 x H x layers                the attention products (Q K^T and the weighted sum of V)

plus the head: 2 x (H^2 + H V) per `[MASK]` for fill_mask (transform and decoder at the masks
only, the work the answer needs), 4 H per token for answer's span head, none for embed.
Embeddings, LayerNorm, GELU and softmax are left out (under 1% of the products).
"""

from __future__ import annotations

import json
import os
import re
import string
import warnings

import numpy as np

from kbert.runtime.graphs import openvino_core

MAX_PASSAGE_TOKENS = 256


# -- the measures --------------------------------------------------------------------------


def model_flops(lengths, config, masks=0, head=None):
    """FLOPs of one call on sequences of `lengths` real tokens (see the module docstring).

    >>> cfg = {"hidden_size": 2, "intermediate_size": 4, "num_hidden_layers": 1,
    ...        "vocab_size": 10}
    >>> model_flops([3], cfg)   # 2 x (16 + 16) x 3 + 4 x 9 x 2
    264
    >>> model_flops([3], cfg, masks=1, head="mlm") - 264   # 2 x (4 + 20)
    48
    """
    h, i = config["hidden_size"], config["intermediate_size"]
    layers = config["num_hidden_layers"]
    lengths = np.asarray(lengths, np.int64)
    total = 2 * (4 * h * h + 2 * h * i) * int(lengths.sum()) * layers
    total += 4 * int((lengths ** 2).sum()) * h * layers
    if head == "mlm":
        total += 2 * (h * h + h * config["vocab_size"]) * masks
    elif head == "span":
        total += 4 * h * int(lengths.sum())
    return int(total)


def worst_cosine(vectors, reference):
    """The smallest cosine between matching rows of two [n, d] arrays."""
    a, b = np.asarray(vectors, np.float64), np.asarray(reference, np.float64)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-30)
    return float(cos.min())


def top1_agreement(tokens, reference):
    """Share of texts whose best fill_mask token is the reference's."""
    return float(np.mean([a[0] == b[0] for a, b in zip(tokens, reference)]))


def normalize_answer(text):
    """SQuAD's answer normalisation: lower case, no punctuation, articles or extra spaces."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def answer_agreement(answers, reference):
    """Share of answers equal to the reference's once normalised as SQuAD scores them."""
    return float(np.mean([normalize_answer(a) == normalize_answer(b)
                          for a, b in zip(answers, reference)]))


def matmul_peak(dtype="float32", n=1024, repeats=10):
    """GFLOP/s of torch's n x n x n matrix product at the current thread count (best call)."""
    import time

    import torch
    kind = getattr(torch, dtype)
    a, b = torch.randn(n, n).to(kind), torch.randn(n, n).to(kind)
    for _ in range(2):
        torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


# -- the inputs ----------------------------------------------------------------------------


def _truncate(tokenizer, text, limit=MAX_PASSAGE_TOKENS):
    """`text` cut after the word piece that keeps it at `limit` tokens with [CLS] and [SEP]."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    return text if len(offsets) <= limit - 2 else text[:offsets[limit - 3][1]]


def _masked_sentence(sentence, vocab):
    """`sentence` with its longest whole-vocabulary word of the middle half masked, or None."""
    words = sentence.split()
    if not 8 <= len(words) <= 40:
        return None
    middle = range(len(words) // 4, 3 * len(words) // 4)
    fit = [i for i in middle if words[i].isalpha() and words[i].lower() in vocab]
    if not fit:
        return None
    best = max(fit, key=lambda i: (len(words[i]), -i))
    return " ".join(words[:best] + ["[MASK]"] + words[best + 1:])


def squad_inputs(path, tokenizer, n=32):
    """The benchmark's inputs from a SQuAD v1.1 file: the first question of each of the first
    `n` paragraphs, those paragraphs cut at `MAX_PASSAGE_TOKENS` tokens (passages), the
    (question, whole paragraph) pairs, and `n` of their sentences with one word masked."""
    with open(path, encoding="utf-8") as f:
        articles = json.load(f)["data"]
    paragraphs = [p for a in articles for p in a["paragraphs"] if p["qas"]][:n]
    questions = [p["qas"][0]["question"] for p in paragraphs]
    contexts = [p["context"] for p in paragraphs]
    vocab = tokenizer.get_vocab()
    sentences = [s for c in contexts for s in re.split(r"(?<=[.!?])\s+", c)]
    masked = [m for m in (_masked_sentence(s, vocab) for s in sentences) if m][:n]
    if len(paragraphs) < n or len(masked) < n:
        raise ValueError(f"{path}: fewer than {n} paragraphs or maskable sentences")
    return {"questions": questions, "passages": [_truncate(tokenizer, c) for c in contexts],
            "pairs": (questions, contexts), "masked": masked}


def token_lengths(tokenizer, texts):
    """Real token counts (with [CLS] and [SEP]) of each text, as the peers tokenize them."""
    return [len(ids) for ids in tokenizer(texts, truncation=True, max_length=512)["input_ids"]]


# -- the question-answering pipeline's steps -----------------------------------------------


class QuestionAnsweringSteps:
    """transformers 4's question-answering pipeline, as its steps: the fast tokenizer's
    overflowing windows (384 tokens, stride 128), one forward pass over all windows (any
    engine: `forward(features) -> (start_logits, end_logits)`, numpy), and its n-best span
    search (20 starts x 20 ends, at most 30 tokens)."""

    def __init__(self, tokenizer, forward):
        self.tokenizer, self.forward = tokenizer, forward

    def __call__(self, questions, contexts, n_best=20, max_answer_length=30):
        enc = self.tokenizer(questions, contexts, truncation="only_second", max_length=384,
                             stride=128, return_overflowing_tokens=True,
                             return_offsets_mapping=True, padding="longest", return_tensors="np")
        example = enc.pop("overflow_to_sample_mapping").tolist()
        offsets = enc.pop("offset_mapping").tolist()
        starts, ends = self.forward(dict(enc))
        best = [None] * len(questions)
        for w, e in enumerate(example):
            context = np.array([s == 1 for s in enc.sequence_ids(w)])
            start = np.where(context, starts[w], -np.inf)
            end = np.where(context, ends[w], -np.inf)
            for i in np.argsort(-start)[:n_best]:
                for j in np.argsort(-end)[:n_best]:
                    if context[i] and context[j] and i <= j < i + max_answer_length:
                        score = start[i] + end[j]
                        if best[e] is None or score > best[e][0]:
                            best[e] = (score, offsets[w][i][0], offsets[w][j][1])
        return [{"answer": c[b[1]:b[2]] if b else "", "score": float(b[0]) if b else 0.0}
                for c, b in zip(contexts, best)]


class HfQuestionAnswering(QuestionAnsweringSteps):
    """The steps above on `BertForQuestionAnswering` (PyTorch, float32) from `directory`."""

    def __init__(self, directory):
        import transformers
        self.model = _Forward.load("span", directory)
        super().__init__(transformers.AutoTokenizer.from_pretrained(directory),
                         _torch_forward(self.model))


# -- the peers -----------------------------------------------------------------------------


def _forward_class():
    import torch

    class Forward(torch.nn.Module):
        """One HF model called by keywords, returning one tensor: what the exporters trace."""

        def __init__(self, kind, model):
            super().__init__()
            self.kind, self.model = kind, model

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids)
            if self.kind == "encoder":
                return out.last_hidden_state              # [batch, length, hidden]
            if self.kind == "mlm":
                return out.logits                         # [batch, length, vocab]
            return torch.stack([out.start_logits, out.end_logits], -1)  # [batch, length, 2]

    return Forward


class _Forward:
    MODELS = {"encoder": "BertModel", "mlm": "BertForMaskedLM",
              "span": "BertForQuestionAnswering"}

    @classmethod
    def load(cls, kind, directory):
        import transformers
        model = getattr(transformers, cls.MODELS[kind]).from_pretrained(directory)
        return _forward_class()(kind, model).eval()


def _torch_forward(module, autocast=False):
    import torch

    def forward(features):
        inputs = {k: torch.from_numpy(np.asarray(v)) for k, v in features.items()}
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            out = module(**inputs).float().numpy()
        return (out[..., 0], out[..., 1]) if out.shape[-1] == 2 else out
    return forward


INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Peer:
    """The three calls on any engine: subclasses give `_forward(kind)`, a function from the
    tokenizer's numpy features to the model's numpy output, and `settings`."""

    name = "peer"
    settings = ""

    def __init__(self, mlm_dir, squad_dir):
        import transformers
        self.dirs = {"encoder": mlm_dir, "mlm": mlm_dir, "span": squad_dir}
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(mlm_dir)
        self._forwards = {}

    def forward(self, kind):
        if kind not in self._forwards:
            self._forwards[kind] = self._forward(kind)
        return self._forwards[kind]

    def _encode(self, texts):
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=512,
                             return_tensors="np")
        return {k: enc[k] for k in INPUTS}

    def embed(self, texts):
        features = self._encode(texts)
        hidden = self.forward("encoder")(features)
        mask = features["attention_mask"][..., None].astype(np.float32)
        return (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)

    def fill_mask(self, texts, top_k=5):
        features = self._encode(texts)
        logits = self.forward("mlm")(features)
        rows = np.arange(len(texts))
        where = (features["input_ids"] == self.tokenizer.mask_token_id).argmax(1)
        picked = logits[rows, where]                                   # [batch, vocab]
        best = np.argsort(-picked, axis=-1)[:, :top_k]
        return [self.tokenizer.convert_ids_to_tokens(ids.tolist()) for ids in best]

    def answer(self, questions, contexts):
        if "qa" not in self._forwards:
            import transformers
            tokenizer = transformers.AutoTokenizer.from_pretrained(self.dirs["span"])
            self._forwards["qa"] = QuestionAnsweringSteps(tokenizer, self.forward("span"))
        return [a["answer"] for a in self._forwards["qa"](questions, contexts)]


class HfTorch(Peer):
    """transformers on PyTorch, float32, or under `torch.autocast` bfloat16."""

    def __init__(self, mlm_dir, squad_dir, bfloat16=False):
        import torch
        super().__init__(mlm_dir, squad_dir)
        self.bfloat16 = bfloat16
        self.name = "HF torch autocast bf16" if bfloat16 else "HF torch fp32"
        self.settings = (f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
                         "inference_mode" + (", autocast(cpu, bfloat16)" if bfloat16 else ""))

    def _forward(self, kind):
        return _torch_forward(_Forward.load(kind, self.dirs[kind]), autocast=self.bfloat16)


def _example(tokenizer):
    enc = tokenizer(["a short text", "a somewhat longer text to trace"], ["b", "c d"],
                    padding=True, return_tensors="pt")
    return {k: enc[k] for k in INPUTS}


class OnnxRuntime(Peer):
    """ONNX Runtime on `torch.onnx.export` of the torch models; `int8`: dynamic quantization."""

    def __init__(self, mlm_dir, squad_dir, workdir, threads, int8=False):
        import onnxruntime
        super().__init__(mlm_dir, squad_dir)
        self.workdir, self.threads, self.int8 = workdir, threads, int8
        os.makedirs(workdir, exist_ok=True)
        self.name = "ONNX Runtime int8" if int8 else "ONNX Runtime fp32"
        self.settings = (f"onnxruntime {onnxruntime.__version__}, CPUExecutionProvider, "
                         f"graph optimization ALL, intra_op {threads} threads, inter_op 1"
                         + (", quantize_dynamic QInt8 weights" if int8 else ""))

    def export(self, kind):
        """The fp32 (and int8) .onnx files of one model, written once into `workdir`."""
        import torch
        path = os.path.join(self.workdir, f"{kind}.onnx")
        if not os.path.isfile(path):
            example = _example(self.tokenizer)
            axes = {k: {0: "batch", 1: "sequence"} for k in (*INPUTS, "output")}
            with warnings.catch_warnings():       # the tracer's notes on HF's Python branches
                warnings.simplefilter("ignore")
                torch.onnx.export(_Forward.load(kind, self.dirs[kind]), tuple(example.values()),
                                  path, input_names=list(INPUTS), output_names=["output"],
                                  dynamic_axes=axes, opset_version=17, dynamo=False)
        if not self.int8:
            return path
        quantized = os.path.join(self.workdir, f"{kind}-int8.onnx")
        if not os.path.isfile(quantized):
            from onnxruntime.quantization import QuantType, quantize_dynamic
            from onnxruntime.quantization.shape_inference import quant_pre_process
            prepared = os.path.join(self.workdir, f"{kind}-prepared.onnx")
            here = os.getcwd()
            os.chdir(self.workdir)                # it leaves temporary files where it runs
            try:
                quant_pre_process(path, prepared, skip_symbolic_shape=True)  # recommended step
            finally:
                os.chdir(here)
            quantize_dynamic(prepared, quantized, weight_type=QuantType.QInt8)
        return quantized

    def _forward(self, kind):
        import onnxruntime
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads, options.inter_op_num_threads = self.threads, 1
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(self.export(kind), options,
                                               providers=["CPUExecutionProvider"])

        def forward(features):
            out = session.run(None, features)[0]
            return (out[..., 0], out[..., 1]) if kind == "span" else out
        return forward


class OpenVino(Peer):
    """OpenVINO on `openvino.convert_model` of the torch models, its default CPU precision."""

    def __init__(self, mlm_dir, squad_dir, threads):
        import openvino
        super().__init__(mlm_dir, squad_dir)
        self.threads, self.name = threads, "OpenVINO"
        self.config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
        self.settings = (f"openvino {openvino.__version__}, CPU, PERFORMANCE_HINT LATENCY, "
                         f"INFERENCE_NUM_THREADS {threads}, inference precision "
                         f"{self.precision()} (its default)")

    def precision(self):
        hint = self.compiled("encoder").get_property("INFERENCE_PRECISION_HINT")
        return getattr(hint, "get_type_name", lambda: str(hint))()

    def compiled(self, kind):
        key = "ov-" + kind
        if key not in self._forwards:
            import openvino
            with warnings.catch_warnings():       # the tracer's notes on HF's Python branches
                warnings.simplefilter("ignore")
                model = openvino.convert_model(_Forward.load(kind, self.dirs[kind]),
                                               example_input=_example(self.tokenizer))
            # One Core for the process, as kbert's engines keep (kbert.runtime.graphs).
            self._forwards[key] = openvino_core().compile_model(model, "CPU", self.config)
        return self._forwards[key]

    def _forward(self, kind):
        request = self.compiled(kind).create_infer_request()

        def forward(features):
            out = request.infer(features)[0]
            return (out[..., 0], out[..., 1]) if kind == "span" else out
        return forward


class SentenceTransformers(Peer):
    """`SentenceTransformer.encode` with mean pooling on the same encoder (embed only)."""

    def __init__(self, mlm_dir, squad_dir):
        import sentence_transformers as st
        import torch
        try:
            from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
        except ImportError:                       # sentence-transformers before 6
            from sentence_transformers.models import Pooling, Transformer
        super().__init__(mlm_dir, squad_dir)
        encoder = Transformer(mlm_dir, max_seq_length=512)
        size = getattr(encoder, "get_embedding_dimension", None) or (
            encoder.get_word_embedding_dimension)
        self.model = st.SentenceTransformer(modules=[encoder, Pooling(size(), "mean")],
                                            device="cpu")
        self.name = "sentence-transformers"
        self.settings = (f"sentence-transformers {st.__version__}, encode(batch_size=32), "
                         f"mean pooling, {torch.get_num_threads()} torch threads")

    def embed(self, texts):
        return self.model.encode(texts, batch_size=32, convert_to_numpy=True)

    fill_mask = answer = None


class Kbert:
    """`kbert.load` at one runtime and dtype, its answers in the peers' form.

    Raises what `kbert.load` raises for a combination it does not offer (ValueError,
    ImportError; TypeError from a `kbert.load` without the `runtime`/`dtype` keywords)."""

    def __init__(self, mlm, squad, runtime="keras", dtype="float32"):
        import inspect

        import kbert
        takes = inspect.signature(kbert.load).parameters
        # named whenever `kbert.load` has them: its default dtype may be "auto" (bfloat16 on a
        # CPU with AMX or avx512_bf16), and this row must be the dtype it says
        options = {k: v for k, v in (("runtime", runtime), ("dtype", dtype)) if k in takes}
        missing = [k for k, v in (("runtime", "keras"), ("dtype", "float32"))
                   if k not in takes and {"runtime": runtime, "dtype": dtype}[k] != v]
        if missing:
            raise TypeError(f"this kbert.load takes no {missing[0]}= keyword")
        self.models = [kbert.load(path, **options) for path in (mlm, squad)]
        self.name = f"kbert {runtime} {dtype}"
        self.runtime, self.dtype = runtime, dtype
        self.settings = f"kbert.load(runtime={runtime!r}, dtype={dtype!r}), batch_size=32"

    def embed(self, texts):
        return self.models[0].embed(texts, pooling="mean", batch_size=32)

    def fill_mask(self, texts, top_k=5):
        return [[c["token"] for c in r[0]] for r in self.models[0].fill_mask(texts, top_k=top_k)]

    def answer(self, questions, contexts):
        return [r[0]["text"] for r in self.models[1].answer(questions, contexts)]
