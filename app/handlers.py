"""Event handlers: `app.inference` results turned into component values, errors into messages.

Each handler's `model` defaults to None, which the API page shows as optional: a `gradio_client`
call that leaves it out runs on the first checkpoint with the endpoint's head
(`Registry.resolve`), as the page does when a tab is opened.
"""

import functools
import logging
import random

import gradio as gr

from app import examples, inference, plots
from app import search as search_lib
from app.registry import RERANKER, InputError, Registry
from kbert.wording import plural

log = logging.getLogger("app")
TAB_HEAD = {"fill": "mlm", "nsp": "nsp", "qa": "span", "classify": "classifier",
            "entities": "tagger", "search": "embedding"}
# The checkpoints a tab leaves out: a cross-encoder is a classifier too, but it scores passage
# relevance (the Search tab's reranker), so the Classify tab lists the other classifiers.
TAB_SKIP = {"classify": RERANKER}
OPTIONAL_TABS = ("classify", "entities", "search")   # shown only where a checkpoint fits them


def _message(error: Exception) -> str:
    """What the page says about `error`: an InputError's own words, else one line (the
    server log keeps the traceback). Called in the `except` block that caught it."""
    if isinstance(error, InputError):
        return str(error)
    log.exception("request failed")
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return f"Something went wrong in the model: {first}"


def _failed(message: str, n_outputs: int) -> tuple:
    gr.Warning(message)
    return (None,) * (n_outputs - 1) + (f"⚠️ {message}",)


def _guard(fn, n_outputs):
    """Runs `fn`; a bad input or a failure becomes a warning and a message as the last output
    (the UI never shows a traceback; the server log keeps it)."""
    @functools.wraps(fn)   # keeps the parameter names the API page shows
    def run(*args):
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - the UI must stay up whatever the model does
            return _failed(_message(e), n_outputs)
    return run


def _guard_steps(fn, n_outputs: int):
    """`_guard` for a handler that yields its outputs in steps (a status line, then the
    answer): a failure is its last step."""
    @functools.wraps(fn)
    def run(*args):
        try:
            yield from fn(*args)
        except Exception as e:  # noqa: BLE001 - the UI must stay up whatever the model does
            yield _failed(_message(e), n_outputs)
    return run


def _notes(notes):
    return "\n".join(f"ℹ️ {n}" for n in notes)


def head_status(registry, name, tab):
    try:
        registry.check(name, TAB_HEAD.get(tab))
    except InputError as e:
        return f"⚠️ {e}"
    return ""


# --- callbacks -----------------------------------------------------------------------------------
def fill_mask(registry):
    def fill(model=None, text="", top_k=5):
        out = inference.fill_mask(registry, model, text, top_k)
        for note in out["notes"]:
            gr.Warning(note)
        return out["masks"], out["best"], plots.fill_mask_html(out["masks"]), _notes(out["notes"])
    return _guard(fill, 4)


def next_sentence(registry):
    def nsp(model=None, sentence_a="", sentence_b=""):
        out = inference.next_sentence(registry, model, sentence_a, sentence_b)
        for note in out["notes"]:
            gr.Warning(note)
        p = out["is_next"]
        return p, {"IsNext": p, "NotNext": 1.0 - p}, _notes(out["notes"])
    return _guard(nsp, 3)


def answer(registry):
    def qa(model=None, question="", context="", top_k=5):
        out = inference.answer(registry, model, question, context, top_k)
        best = out["answers"][0] if out["answers"] else {"text": "", "score": 0.0}
        if best["text"]:
            s, e = best["start"], best["end"]
            spans = [(context[:s], None), (context[s:e], "answer"), (context[e:], None)]
        else:
            spans = [(context, None)]
        rows = [[i + 1, a["text"] or "(no answer)", round(a["score"], 4), a.get("start"),
                 a.get("end")] for i, a in enumerate(out["answers"])]
        no_answer = out["no_answer_score"]
        null = "" if not out["v2"] else (f"No-answer score: **{no_answer:.4f}**"
                                         if no_answer is not None else "No-answer score: —")
        text = best["text"] or "(no answer in the context)"
        return (text, best["score"], spans, rows, null,
                _notes(out["notes"]))
    return _guard(qa, 6)


def classify(registry):
    def run(model=None, text="", text_pair=""):
        out = inference.classify(registry, model, text, text_pair)
        scores = out["scores"]
        if out["regression"]:
            return None, scores["score"], _notes(out["notes"])
        return scores, None, _notes(out["notes"])
    return _guard(run, 3)


def entities(registry):
    def run(model=None, text=""):
        out = inference.entities(registry, model, text)
        spans, last = [], 0
        for e in out["entities"]:
            spans += [(text[last:e["start"]], None), (text[e["start"]:e["end"]], e["label"])]
            last = e["end"]
        spans.append((text[last:], None))
        rows = [[e["text"], e["label"], round(e["score"], 4), e["start"], e["end"]]
                for e in out["entities"]]
        return [s for s in spans if s[0]], rows, _notes(out["notes"])
    return _guard(run, 3)


def search(registry):
    """The Search tab's handler. It yields its outputs: first, while a checkpoint the search
    runs is still loading (at start-up, `search.preload`), a line saying which, then the
    answer (the API's result)."""
    def ask(model=None, question="", document="", files=None, top_k=5, hybrid=True,
            reader=None, reranker=search_lib.NO_RERANKER):
        planned = search_lib.plan(registry, model, reader, document, files, question, top_k,
                                  hybrid, reranker)
        for role, name in planned["models"]:
            if not registry.loaded(name):
                yield (gr.skip(),) * 5 + (loading_line(role, name),)
                registry.get(name)
        out = search_lib.run(registry, planned)
        for note in out["notes"]:
            gr.Warning(note)
        best = out["answer"]
        text = best["text"] if best else ("(no answer found)" if out["read_seconds"]
                                          else "(passages only: no reader)")
        yield (text, best["score"] if best else None,
               plots.search_html(out["hits"], out["index"]["hybrid"], bool(out["reranker"])),
               out["hits"], _search_info(out), _notes(out["notes"]))
    return _guard_steps(ask, 6)


def loading_line(role: str, name: str) -> str:
    """The Search tab's line while it waits for a checkpoint to load (once per server)."""
    return f"Loading the {role} {name} (once: the searches after it do not wait)…"


def _search_info(out):
    index = out["index"]
    documents = plural(index["documents"], "document")
    built = ("reused (indexed before)" if index["cached"]
             else f"indexed in {index['seconds']:.1f} s")
    read = (f", read the top passages in {out['read_seconds'] * 1000:.0f} ms"
            if out["read_seconds"] else "")
    if out["reranker"]:
        read = (f", reranked by {out['reranker']} in {out['rerank_seconds'] * 1000:.0f} ms"
                + read)
    return (f"**{plural(index['passages'], 'passage')}** from {documents}, {built} by "
            f"{index['encoder']}; searched in {out['search_seconds'] * 1000:.0f} ms"
            f"{' (hybrid: BM25 + dense)' if index['hybrid'] else ''}{read}.")


def tab_models(registry: Registry, tab: str) -> list[str]:
    """The checkpoints `tab` keeps when it is opened with one of them picked, the one it switches
    to first: those with the tab's head (every one where the tab needs none, or none has it).

    Opening the tab keeps the current model if it is in the list, else picks the list's first:
    `Registry.default(TAB_HEAD[tab], current, TAB_SKIP.get(tab))`, done in the browser
    (app/ui.py) so that no answer from the server can land after the user's next click."""
    head = TAB_HEAD.get(tab)
    having = (registry.with_head(head, TAB_SKIP.get(tab)) or registry.with_head(head)
              if head else [])
    return having or registry.names


def tab_shown(registry: Registry, tab: str) -> bool:
    """Whether the page shows `tab`: an optional one (a fine-tuned head's) only where a
    checkpoint has its head (the Classify tab: a classifier that is not a cross-encoder)."""
    return tab not in OPTIONAL_TABS or bool(registry.with_head(TAB_HEAD[tab],
                                                               TAB_SKIP.get(tab)))


def attention(registry):
    def attend(model=None, text="", text_b="", layer="1", head="mean"):
        out = inference.attention(registry, model, text, text_b, layer, head)
        fig = plots.attention_heatmap(out["tokens"], out["matrix"], out["layer"], out["head"])
        rows = [[i, t, d] for i, (t, d) in enumerate(zip(out["tokens"], out["ids"]))]
        return fig, rows, _notes(out["notes"])
    return _guard(attend, 3)


def random_sentence(current):
    """A sentence for B drawn at random (different from the current one)."""
    pool = [s for s in examples.RANDOM_SENTENCES if s != (current or "").strip()]
    return random.choice(pool)


def word_choices(text):
    return gr.Dropdown(choices=inference.words(text), value=None)


def mask_word(text, index):
    try:
        return inference.mask_word(text, index)
    except InputError as e:
        gr.Warning(str(e))
        return text


def attention_controls(registry, name):
    """Layer and head choices for the chosen model."""
    info = registry.models.get(name, {"num_layers": 1, "num_heads": 1})
    layers = [str(n) for n in range(1, info["num_layers"] + 1)]
    heads = ["mean"] + [str(h) for h in range(1, info["num_heads"] + 1)]
    return gr.Dropdown(choices=layers, value="1"), gr.Dropdown(choices=heads, value="mean")
