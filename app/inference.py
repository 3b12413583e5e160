"""What each tab computes, on kbert's public API, with plain data in and out (no Gradio here).

Every function takes the `Registry` and a model name first (None: the first checkpoint with the
head it needs), raises `InputError` with a message a
user can act on, and returns a dict whose "notes" list says what was cut or changed.
"""

import collections
import re
import threading

import numpy as np

from app.registry import RERANKER, InputError

MAX_MASKS = 10
MAX_TOP_K = 20
MAX_CHARS = 20_000            # fill-mask / next-sentence / attention text
MAX_CONTEXT_CHARS = 50_000    # question answering context (the pipeline slides windows over it)
MAX_ATTENTION_TOKENS = 64     # a heatmap wider than this is unreadable
QA_WINDOW = 384               # `answer`'s default max_seq_length
MASK = "[MASK]"


def _text(value, what, limit=MAX_CHARS):
    text = (value or "").strip()
    if not text:
        raise InputError(f"{what} is empty: type some text first.")
    if len(text) > limit:
        raise InputError(f"{what} has {len(text):,} characters; the playground takes at most "
                         f"{limit:,}.")
    return text


def _cut_note(n_tokens, limit, what="input"):
    return (f"The {what} is {n_tokens} WordPiece tokens; the model reads {limit}, so the rest was "
            "cut off.")


# --- fill mask ---------------------------------------------------------------------------------
def words(text):
    """The words of `text` a user can mask: [(label, index)] in order."""
    found = re.findall(r"\[MASK\]|\w+", text or "")
    return [(f"{w} (word {i + 1})", i) for i, w in enumerate(found) if w != MASK]


def mask_word(text, index):
    """`text` with its `index`-th word (as numbered by `words`) replaced by [MASK]."""
    if index is None or index == "":
        raise InputError("Choose a word to mask first.")
    matches = list(re.finditer(r"\[MASK\]|\w+", text or ""))
    index = int(index)
    if not 0 <= index < len(matches) or matches[index].group() == MASK:
        raise InputError("That word is no longer in the text; choose again.")
    m = matches[index]
    return text[:m.start()] + MASK + text[m.end():]


def _best_fill(text, masks):
    pieces, spans = [], list(re.finditer(re.escape(MASK), text))
    if len(spans) != len(masks):
        return " ".join(r[0]["token"] for r in masks)
    last = 0
    for span, ranked in zip(spans, masks):
        token = ranked[0]["token"]
        if token.startswith("##"):                       # a word piece joins the word before it
            token = token[2:]
        pieces += [text[last:span.start()], token]
        last = span.end()
    return "".join(pieces + [text[last:]])


class Batcher:
    """Runs concurrent calls as one list call: `Batcher(fn)(item)` returns `fn([item, ...])`'s
    result for `item`. A call arriving while a batch runs waits, and the next batch takes every
    waiting item (at most `max_batch`), so under load the model sees padded batches instead of
    one request at a time. A failing batch is retried item by item, so one bad input fails only
    its own request.
    """

    def __init__(self, fn, max_batch=32):
        self.fn, self.max_batch = fn, max_batch
        self._cond = threading.Condition()
        self._pending, self._running = [], False

    def __call__(self, item):
        slot = {"item": item}
        with self._cond:
            self._pending.append(slot)
        while True:
            with self._cond:
                while self._running and "done" not in slot:
                    self._cond.wait()
                if "done" in slot:
                    break
                self._running = True
                batch = self._pending[:self.max_batch]
                del self._pending[:self.max_batch]
            try:
                self._run(batch)
            finally:
                with self._cond:
                    self._running = False
                    self._cond.notify_all()
        if "error" in slot:
            raise slot["error"]
        return slot["result"]

    def _run(self, batch):
        try:
            results = self.fn([s["item"] for s in batch])
            for s, r in zip(batch, results):
                s["result"] = r
        except Exception:                          # noqa: BLE001 - retried one by one below
            for s in batch:
                try:
                    s["result"] = self.fn([s["item"]])[0]
                except Exception as e:             # noqa: BLE001 - re-raised in its own caller
                    s["error"] = e
        for s in batch:
            s["done"] = True


_batchers, _batchers_lock = {}, threading.Lock()


def _fill_batcher(model):
    """The model's fill-mask `Batcher`: items (text, top_k), each answered with its top_k."""
    with _batchers_lock:
        if id(model) not in _batchers:
            def fill(items):
                if len(items) == 1:   # alone (or retried alone): the single-text messages
                    return [model.fill_mask(items[0][0], top_k=items[0][1])]
                k = max(top_k for _, top_k in items)
                masks = model.fill_mask([text for text, _ in items], top_k=k)
                return [[ranked[:top_k] for ranked in m] for m, (_, top_k) in zip(masks, items)]
            _batchers[id(model)] = (model, Batcher(fill))   # holds the model: ids stay unique
        return _batchers[id(model)][1]


def fill_mask(registry, name, text, top_k=5):
    model = registry.require(name, "mlm")
    text = _text(text, "The text")
    ids = model.tokenizer.encode(text)
    n_masks = ids.count(model.tokenizer.mask_id)
    if n_masks == 0 and MASK.lower() in text.lower():
        raise InputError("Write [MASK] in capital letters: '[mask]' is read as ordinary text.")
    if n_masks == 0:
        raise InputError("The text has no [MASK]. Write [MASK] where a word is missing, or pick "
                         "a word below and press 'Mask this word'.")
    if n_masks > MAX_MASKS:
        raise InputError(f"The text has {n_masks} [MASK]s; the playground fills at most "
                         f"{MAX_MASKS} at once.")
    notes, limit = [], model.max_seq_length - 2
    if len(ids) > limit:
        notes.append(_cut_note(len(ids), limit))
    top_k = max(1, min(int(top_k or 5), MAX_TOP_K))
    try:
        masks = _fill_batcher(model)((text, top_k))
    except ValueError as e:                              # e.g. a [MASK] past the model's length
        message = str(e).removeprefix("fill_mask: ")
        raise InputError(message[:1].upper() + message[1:] + ".") from None
    return {"masks": masks, "best": _best_fill(text, masks), "notes": notes}


# --- next sentence -----------------------------------------------------------------------------
def next_sentence(registry, name, sentence_a, sentence_b):
    model = registry.require(name, "nsp")
    a, b = _text(sentence_a, "Sentence A"), _text(sentence_b, "Sentence B")
    n = len(model.tokenizer.encode(a)) + len(model.tokenizer.encode(b))
    notes = [_cut_note(n, model.max_seq_length - 3, "pair")] if n > model.max_seq_length - 3 else []
    return {"is_next": model.next_sentence(a, b)["is_next"], "notes": notes}


# --- question answering ------------------------------------------------------------------------
def answer(registry, name, question, context, top_k=5):
    name = registry.resolve(name, "span")
    model = registry.require(name, "span")
    question = _text(question, "The question")
    _text(context, "The context", MAX_CONTEXT_CHARS)   # offsets stay those of the context as given
    top_k = max(1, min(int(top_k or 5), MAX_TOP_K))
    nbest = model.answer(question, context, top_k=MAX_TOP_K)   # the null answer may rank low
    v2 = str(registry.info(name)["span"].get("version", "")) == "2.0"
    no_answer = next((a["score"] for a in nbest if not a["text"]), None)
    notes, window = [], min(QA_WINDOW, model.max_seq_length)
    n = len(model.tokenizer.encode(question)) + len(model.tokenizer.encode(context)) + 3
    if n > window:
        notes.append(f"Question and context are {n} WordPiece tokens, more than one window of "
                     f"{window}; the model read the context in overlapping windows.")
    return {"answers": nbest[:top_k], "no_answer_score": no_answer if v2 else None,
            "v2": v2, "notes": notes}


# --- attention ---------------------------------------------------------------------------------
_attention_cache = collections.OrderedDict()
_cache_lock = threading.Lock()


def _attentions(model, key, text, text_b):
    """Token ids and attention probabilities [L, N, T, T] for the first tokens of the input."""
    with _cache_lock:
        if key in _attention_cache:
            _attention_cache.move_to_end(key)
            return _attention_cache[key]
    tok = model.tokenizer
    a = tok.encode(text)
    b = tok.encode(text_b) if text_b else None
    n = len(a) + (len(b) + 1 if b is not None else 0) + 2
    limit = min(MAX_ATTENTION_TOKENS, model.max_seq_length)
    features, _ = tok.pack([a], None if b is None else [b], max_seq_length=limit)
    from keras import ops  # the backbone is a Keras model: its outputs are backend tensors
    attentions = model.backbone(features, output_attentions=True)["attentions"]
    value = (features["input_ids"][0].tolist(),
             np.stack([ops.convert_to_numpy(layer)[0] for layer in attentions]), n)
    with _cache_lock:
        _attention_cache[key] = value
        while len(_attention_cache) > 16:
            _attention_cache.popitem(last=False)
    return value


def attention(registry, name, text, text_b="", layer=1, head="mean"):
    """{"tokens", "ids", "matrix" [T, T], "layer", "head", "notes"}; layer is 1-based, head is
    1-based or "mean" (averaged over heads)."""
    name = registry.resolve(name)
    model = registry.require(name, None)
    text = _text(text, "The text")
    text_b = (text_b or "").strip()
    ids, probs, n = _attentions(model, (name, text, text_b), text, text_b)
    num_layers, num_heads = probs.shape[0], probs.shape[1]
    layer = min(max(int(layer or 1), 1), num_layers)
    if head in (None, "", "mean"):
        matrix, head = probs[layer - 1].mean(0), "mean"
    else:
        head = min(max(int(head), 1), num_heads)
        matrix = probs[layer - 1, head - 1]
    notes = [f"The input is {n} tokens; the heatmap shows the first {len(ids)}."] if n > len(ids) \
        else []
    return {"tokens": model.tokenizer.convert_ids_to_tokens(ids), "ids": ids,
            "matrix": matrix, "layer": layer, "head": head, "notes": notes}


# --- classify and entities (checkpoints fine-tuned with a classifier or tagger head) ------------
def _input_note(model, n_tokens, limit):
    return [_cut_note(n_tokens, limit)] if n_tokens > limit else []


def classify(registry, name, text, text_pair=""):
    """{"scores": {label: probability} (best first) or {"score": value}, "regression", "notes"}."""
    model = registry.require(name, "classifier", skip=RERANKER)   # a sentiment model first
    text = _text(text, "The text")
    text_pair = (text_pair or "").strip() or None
    n = len(model.tokenizer.encode(text)) + (len(model.tokenizer.encode(text_pair)) + 1
                                              if text_pair else 0)
    scores = model.classify(text, text_pair)
    regression = list(scores) == ["score"]
    if not regression:
        scores = dict(sorted(scores.items(), key=lambda kv: -kv[1]))
    return {"scores": scores, "regression": regression,
            "notes": _input_note(model, n, model.max_seq_length - (3 if text_pair else 2))}


def entities(registry, name, text):
    """{"entities": [{"text", "label", "start", "end", "score"}], "notes"}."""
    model = registry.require(name, "tagger")
    text = _text(text, "The text")
    n = len(model.tokenizer.encode(text))
    return {"entities": model.tag(text),
            "notes": _input_note(model, n, model.max_seq_length - 2)}
