"""The Gradio Blocks layout: a model picker, one tab per task, examples and notes."""

import json

import gradio as gr

from app import examples, handlers, inference
from app import search as search_lib
from app.registry import RERANKER

TITLE = "kbert playground"
INTRO = ("BERT (Devlin et al., 2018) pre-trains a Transformer encoder on two tasks — masked "
         "language modelling and next sentence prediction — and is then fine-tuned, e.g. for "
         "question answering. Each tab starts on a checkpoint that has the head it needs; the "
         "picker switches to any other (the tab says when it lacks the head).")


def _default(registry, head):
    return registry.default(head)


def _fill_tab(registry, model):
    gr.Markdown(examples.NOTES["fill"])
    status = gr.Markdown()
    text = gr.Textbox(label="Text with [MASK]", lines=2, value=examples.FILL_MASK[0][0],
                      elem_id="fill-text")
    gr.Examples(examples.FILL_MASK, inputs=[text])
    with gr.Row():
        word = gr.Dropdown(label="Word to mask", choices=inference.words(text.value), value=None,
                           elem_id="fill-word", scale=3)
        mask_btn = gr.Button("Mask this word", scale=1, elem_id="fill-mask-word")
        top_k = gr.Slider(1, 20, value=5, step=1, label="Top k", scale=2)
    run = gr.Button("Fill the masks", variant="primary", elem_id="fill-run")
    message = gr.Markdown(label="notice", elem_id="fill-message")
    best = gr.Textbox(label="Sentence with the best fill", elem_id="fill-best")
    chart = gr.HTML(label="Top-k per [MASK]", elem_id="fill-chart", js_on_load=None)
    with gr.Accordion("Raw predictions", open=False):
        raw = gr.JSON(label="Predictions")
    fn = handlers.fill_mask(registry)
    run.click(fn, [model, text, top_k], [raw, best, chart, message], api_name="fill_mask")
    text.submit(fn, [model, text, top_k], [raw, best, chart, message], api_visibility="private")
    text.change(handlers.word_choices, text, word, api_visibility="private")
    mask_btn.click(handlers.mask_word, [text, word], text, api_visibility="private")
    return status


def _nsp_tab(registry, model):
    gr.Markdown(examples.NOTES["nsp"])
    status = gr.Markdown()
    a = gr.Textbox(label="Sentence A", value=examples.NEXT_SENTENCE[0][0], elem_id="nsp-a")
    with gr.Row():
        b = gr.Textbox(label="Sentence B", value=examples.NEXT_SENTENCE[0][1], elem_id="nsp-b",
                       scale=4)
        rand = gr.Button("Random B", scale=1, elem_id="nsp-random")
    gr.Examples(examples.NEXT_SENTENCE, inputs=[a, b])
    run = gr.Button("Does B follow A?", variant="primary", elem_id="nsp-run")
    message = gr.Markdown(label="notice", elem_id="nsp-message")
    prob = gr.Number(label="P(IsNext)", precision=4, elem_id="nsp-prob")
    label = gr.Label(label="Prediction", num_top_classes=2)
    rand.click(handlers.random_sentence, b, b, api_visibility="private")
    run.click(handlers.next_sentence(registry), [model, a, b], [prob, label, message],
              api_name="next_sentence")
    return status


def _qa_tab(registry, model):
    gr.Markdown(examples.NOTES["qa"])
    status = gr.Markdown()
    question = gr.Textbox(label="Question", value=examples.QUESTION_ANSWERING[0][0],
                          elem_id="qa-question")
    context = gr.Textbox(label="Context", lines=6, value=examples.QUESTION_ANSWERING[0][1],
                         elem_id="qa-context")
    gr.Examples(examples.QUESTION_ANSWERING, inputs=[question, context])
    top_k = gr.Slider(1, 20, value=5, step=1, label="n-best size")
    run = gr.Button("Answer", variant="primary", elem_id="qa-run")
    message = gr.Markdown(label="notice", elem_id="qa-message")
    with gr.Row():
        text = gr.Textbox(label="Answer", elem_id="qa-answer", scale=3)
        score = gr.Number(label="Score", precision=4, scale=1)
    null = gr.Markdown(label="no_answer", elem_id="qa-null")
    highlight = gr.HighlightedText(label="Answer in context", color_map={"answer": "orange"},
                                   elem_id="qa-highlight")
    nbest = gr.Dataframe(headers=["rank", "answer", "score", "start", "end"], label="n-best",
                         interactive=False)
    run.click(handlers.answer(registry), [model, question, context, top_k],
              [text, score, highlight, nbest, null, message], api_name="answer")
    return status


def _classify_tab(registry, model):
    gr.Markdown(examples.NOTES["classify"])
    status = gr.Markdown()
    with gr.Row():
        text = gr.Textbox(label="Text", lines=2, value=examples.CLASSIFY[0][0],
                          elem_id="classify-text")
        text_pair = gr.Textbox(label="Second text (optional, for pair tasks)", lines=2,
                               elem_id="classify-pair")
    gr.Examples(examples.CLASSIFY, inputs=[text, text_pair])
    run = gr.Button("Classify", variant="primary", elem_id="classify-run")
    message = gr.Markdown(label="notice", elem_id="classify-message")
    label = gr.Label(label="Prediction", num_top_classes=5, elem_id="classify-label")
    score = gr.Number(label="Score (regression)", precision=4, elem_id="classify-score")
    run.click(handlers.classify(registry), [model, text, text_pair], [label, score, message],
              api_name="classify")
    return status


def _entities_tab(registry, model):
    gr.Markdown(examples.NOTES["entities"])
    status = gr.Markdown()
    text = gr.Textbox(label="Text", lines=3, value=examples.ENTITIES[0][0],
                      elem_id="entities-text")
    gr.Examples(examples.ENTITIES, inputs=[text])
    run = gr.Button("Find entities", variant="primary", elem_id="entities-run")
    message = gr.Markdown(label="notice", elem_id="entities-message")
    highlight = gr.HighlightedText(label="Entities in the text", elem_id="entities-highlight")
    table = gr.Dataframe(headers=["entity", "type", "score", "start", "end"], label="Entities",
                         interactive=False, elem_id="entities-table")
    run.click(handlers.entities(registry), [model, text], [highlight, table, message],
              api_name="entities")
    return status


def _search_tab(registry, model):
    gr.Markdown(examples.NOTES["search"])
    status = gr.Markdown()
    question = gr.Textbox(label="Question", elem_id="search-question")
    with gr.Row():
        document = gr.Textbox(label="Document (paste text)", lines=8, max_lines=16,
                              elem_id="search-document", scale=3)
        files = gr.File(label="... or upload text files", file_count="multiple",
                        file_types=[".txt", ".md", ".rst", ".text"], type="filepath",
                        elem_id="search-files", scale=2)
    gr.Examples(examples.SEARCH, inputs=[question, document], elem_id="search-examples")
    readers = registry.with_head("span")
    rerankers = registry.with_head(RERANKER)
    with gr.Row():
        top_k = gr.Slider(1, search_lib.MAX_TOP_K, value=5, step=1, label="Passages shown")
        hybrid = gr.Checkbox(value=search_lib.hybrid_available(),
                             label="Hybrid: BM25 + dense", elem_id="search-hybrid")
        reader = gr.Dropdown(choices=readers + [search_lib.NO_READER],
                             value=(readers or [search_lib.NO_READER])[0],
                             label="Answer with (a SQuAD checkpoint)", elem_id="search-reader")
        reranker = gr.Dropdown(choices=[search_lib.NO_RERANKER] + rerankers,
                               value=search_lib.NO_RERANKER,
                               label=f"Rerank the top {search_lib.RERANK_CANDIDATES} with (a "
                                     f"cross-encoder)", elem_id="search-reranker")
    run = gr.Button("Search", variant="primary", elem_id="search-run")
    message = gr.Markdown(label="notice", elem_id="search-message")
    with gr.Row():
        answer = gr.Textbox(label="Best answer", elem_id="search-answer", scale=3)
        score = gr.Number(label="Answer score", precision=4, scale=1)
    info = gr.Markdown(elem_id="search-info")
    results = gr.HTML(elem_id="search-results")
    with gr.Accordion("Raw results", open=False):
        raw = gr.JSON(label="Passages")
    fn = handlers.search(registry)
    inputs = [model, question, document, files, top_k, hybrid, reader, reranker]
    outputs = [answer, score, results, raw, info, message]
    run.click(fn, inputs, outputs, api_name="search")
    question.submit(fn, inputs, outputs, api_visibility="private")
    return status


def _attention_tab(registry, model):
    gr.Markdown(examples.NOTES["attention"])
    status = gr.Markdown()
    with gr.Row():
        text = gr.Textbox(label="Text", value=examples.ATTENTION[0][0], elem_id="att-text")
        text_b = gr.Textbox(label="Second segment (optional)", elem_id="att-text-b")
    info = registry.models.get(_default(registry, "mlm"), {"num_layers": 1, "num_heads": 1})
    gr.Examples(examples.ATTENTION, inputs=[text, text_b])
    with gr.Row():
        layer = gr.Dropdown(label="Layer", value="1",
                            choices=[str(n + 1) for n in range(info["num_layers"])])
        head = gr.Dropdown(label="Head", value="mean",
                           choices=["mean"] + [str(h + 1) for h in range(info["num_heads"])])
    run = gr.Button("Show attention", variant="primary", elem_id="att-run")
    message = gr.Markdown(label="notice", elem_id="att-message")
    with gr.Row():
        heatmap = gr.Plot(label="Attention probabilities", format="png", elem_id="att-plot",
                          scale=3)
        tokens = gr.Dataframe(headers=["position", "token", "id"], label="WordPiece tokens",
                              interactive=False, elem_id="att-tokens", scale=1, max_height=640)
    fn = handlers.attention(registry)
    inputs, outputs = [model, text, text_b, layer, head], [heatmap, tokens, message]
    run.click(fn, inputs, outputs, api_name="attention")
    for control in (layer, head):
        control.input(fn, inputs, outputs, api_visibility="private")
    model.change(lambda name: handlers.attention_controls(registry, name), model, [layer, head],
                 api_visibility="private")
    return status


TABS = (("fill", "Fill mask", _fill_tab), ("nsp", "Next sentence", _nsp_tab),
        ("qa", "Question answering", _qa_tab), ("classify", "Classify", _classify_tab),
        ("entities", "Entities", _entities_tab), ("search", "Search", _search_tab),
        ("attention", "Attention", _attention_tab))
OPTIONAL_TABS = handlers.OPTIONAL_TABS


def _runs_on(registry):
    """The line that says what runs the models: runtime, precision and the CPU."""
    from kbert import hardware
    return (f"Runs on **{registry.runtime}** in **{registry.dtype}** "
            f"({hardware.cpu_info()['model']}).")


def _keep_or_switch(models: list[str]) -> str:
    """A browser-side event function: the picker's value kept if it is one of `models`, else
    their first. In the browser, the picker changes when the user clicks, and never later (no
    server answer computed before a click can land after it)."""
    return (f"(current) => {{ const models = {json.dumps(models)}; "
            f"return models.includes(current) ? current : (models[0] ?? null); }}")


def build_demo(registry):
    """The playground as a `gr.Blocks` (not yet queued or launched)."""
    with gr.Blocks(title=TITLE) as demo:
        gr.Markdown(f"# {TITLE}\n{INTRO}\n\n{_runs_on(registry)}", elem_id="intro")
        # No value until the page loads: the API then shows `model` as optional, and a call
        # that leaves it out runs on a checkpoint with the endpoint's head (handlers.py).
        # A Hub name typed here (hf://ORG/NAME, bert-base-uncased) is served too (Registry.add).
        model = gr.Dropdown(choices=registry.names, value=None, label="Model", elem_id="model",
                            allow_custom_value=True,
                            info="a served checkpoint, or a Hub model: hf://ORG/NAME or a name "
                                 "such as bert-base-uncased (downloaded and converted once)")
        statuses = {}
        with gr.Tabs():
            for tab, title, build in TABS:
                # Fine-tuned heads' tabs show only where a checkpoint has the head.
                visible = handlers.tab_shown(registry, tab)
                with gr.Tab(title, id=tab, visible=visible) as page:
                    statuses[tab] = build(registry, model)
                # Each tab starts on a checkpoint that has its head (the picker stays global).
                page.select(None, model, model, js=_keep_or_switch(
                    handlers.tab_models(registry, tab)), api_visibility="private")

        def refresh(name):
            return [handlers.head_status(registry, name, tab) for tab in statuses]
        model.change(refresh, model, list(statuses.values()), api_visibility="private")
        # The first tab's checkpoint, unless a tab opened before the page finished loading has
        # already picked one.
        demo.load(None, model, model, js=f"(current) => current || "
                                          f"{json.dumps(_default(registry, 'mlm'))}",
                  api_visibility="private")
    return demo
