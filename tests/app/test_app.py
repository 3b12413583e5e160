"""The playground: its API through gradio_client, and its tabs in a real headless browser.

The app (tests/app_fixtures.py) runs in this process on a free loopback port, over the shipped
checkpoints in saved_models/ that have the heads each tab needs, and tiny random ones for the
heads none has. Browser screenshots go to test-artifacts/.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

import pytest

from app import examples
from app.examples import EIFFEL_DOCUMENT
from helpers import REPO

ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
EIFFEL = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
          "It was built from 1887 to 1889.")


def _shipped(registry, name):
    return os.path.dirname(registry.info(name)["path"]) == str(REPO / "saved_models")


# --- API -----------------------------------------------------------------------------------------
def test_fill_mask_api(served, client):
    _, names, registry = served
    masks, best, plot, notice = client.predict(
        names["mlm"], "The man went to the [MASK]. He bought a [MASK] of milk.", 5,
        api_name="/fill_mask")
    assert len(masks) == 2 and all(len(r) == 5 for r in masks) and notice == ""
    for ranked in masks:
        scores = [r["score"] for r in ranked]
        assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1 + 1e-6
    assert "[MASK]" not in best and best.startswith("The man went to the ")
    assert plot.count("[MASK] #") == 2 and masks[0][0]["token"] in plot   # the HTML bars
    if _shipped(registry, names["mlm"]):
        # The shipped model is lightly trained (see its model card): an easy cloze, not trivia.
        states = client.predict(names["mlm"], "The United [MASK] of America.", 5,
                                api_name="/fill_mask")[0][0]
        assert states[0]["token"] == "states"


def test_next_sentence_api(served, client):
    _, names, registry = served
    real, label, notice = client.predict(names["nsp"], "The man went to the store.",
                                         "He bought a gallon of milk.", api_name="/next_sentence")
    assert 0.0 <= real <= 1.0 and notice == ""
    assert {c["label"] for c in label["confidences"]} == {"IsNext", "NotNext"}
    if _shipped(registry, names["nsp"]):
        random_b = client.predict(names["nsp"], "The man went to the store.",
                                  "Penguins are flightless birds.", api_name="/next_sentence")[0]
        assert real > 0.5 > random_b


def test_answer_api(served, client):
    _, names, registry = served
    text, score, spans, nbest, null, notice = client.predict(
        names["span"], "Where is the Eiffel Tower?", EIFFEL, 3, api_name="/answer")
    assert "".join(s["token"] for s in spans) == EIFFEL and notice == ""
    rows = nbest["data"]
    assert 1 <= len(rows) <= 3 and rows[0][2] == pytest.approx(score, abs=1e-4)
    for _, answer, _, start, end in rows:
        assert answer == "(no answer)" or EIFFEL[start:end] == answer
    if registry.info(names["span"])["span"].get("version") == "2.0":
        assert null.startswith("No-answer score")
    if _shipped(registry, names["span"]):
        assert "Paris" in text or "Champ de Mars" in text
    long_context = " ".join([EIFFEL] * 60)   # far past one window: read in windows
    out = client.predict(names["span"], "When was it built?", long_context, 3, api_name="/answer")
    assert "overlapping windows" in out[-1] and out[0]


def test_classify_api(served, client):
    _, names, registry = served
    label, score, notice = client.predict(names["classifier"], "the dog sat on the mat .", "",
                                          api_name="/classify")
    confidences = {c["label"]: c["confidence"] for c in label["confidences"]}
    expected = registry.get(names["classifier"]).classify("the dog sat on the mat .")
    assert set(confidences) == set(expected) and notice == "" and score is None
    for name, p in expected.items():
        assert confidences[name] == pytest.approx(p, abs=1e-6)
    assert label["label"] == max(expected, key=expected.get)
    if _shipped(registry, names["classifier"]):
        # the shipped sentiment model on the tab's own examples
        from app import examples
        said = [client.predict(names["classifier"], text, "", api_name="/classify")[0]["label"]
                for text, _ in examples.CLASSIFY]
        assert said == ["positive", "negative", "positive", "negative"]


def test_entities_api(served, client):
    _, names, registry = served
    text = "the man went to paris ."
    spans, table, notice = client.predict(names["tagger"], text, api_name="/entities")
    assert "".join(s["token"] for s in spans) == text and notice == ""
    expected = registry.get(names["tagger"]).tag(text)
    assert [row[:2] for row in table["data"]] == [[e["text"], e["label"]] for e in expected]
    for e in expected:
        assert text[e["start"]:e["end"]] == e["text"]
    if _shipped(registry, names["tagger"]):
        # the shipped NER model on the tab's example
        from app import examples
        table = client.predict(names["tagger"], examples.ENTITIES[1][0],
                               api_name="/entities")[1]
        assert [row[:2] for row in table["data"]] == [
            ["Angela Merkel", "PER"], ["Emmanuel Macron", "PER"], ["Berlin", "LOC"]]


def test_each_tab_defaults_to_a_checkpoint_with_its_head(served):
    from app import handlers
    _, names, registry = served
    def opened(tab, current):                     # what the tab's event does in the browser
        models = handlers.tab_models(registry, tab)
        return current if current in models else models[0]
    for tab, head in handlers.TAB_HEAD.items():
        skip = handlers.TAB_SKIP.get(tab)
        for current in [None, *registry.names]:
            chosen = opened(tab, current)
            assert chosen == registry.default(head, current, skip)
            assert head in registry.info(chosen)["heads"]
            assert skip not in registry.info(chosen)["heads"]
            if current in registry.with_head(head, skip):
                assert chosen == current          # a fitting choice is kept
    assert opened("attention", names["span"]) == names["span"]
    assert opened("attention", None) == registry.names[0]


@pytest.mark.parametrize("text, expected", [
    ("   ", "is empty"),
    ("no mask at all", "has no [MASK]"),
    (" ".join(["[MASK]"] * 11), "at most 10"),
])
def test_bad_fill_mask_input_gives_a_message(served, client, text, expected):
    masks, best, plot, notice = client.predict(served[1]["mlm"], text, 5, api_name="/fill_mask")
    assert masks is None and notice.startswith("⚠️") and expected in notice
    assert "Traceback" not in notice


def test_long_and_unicode_inputs(served, client):
    name = served[1]["mlm"]
    max_len = served[2].info(name)["max_len"]
    masks, best, _, notice = client.predict(name, "[MASK] " + "the dog " * max_len, 3,
                                            api_name="/fill_mask")
    assert len(masks) == 1 and "cut off" in notice
    masks, best, _, notice = client.predict(name, "日本語 😀 é\u200b [MASK] ! \x00 ﬁ", 3,
                                            api_name="/fill_mask")
    assert len(masks) == 1 and not notice.startswith("⚠️")


def test_a_model_without_the_head_is_named(served, client):
    _, names, registry = served
    lacking = next((n for n in registry.names if "span" not in registry.info(n)["heads"]), None)
    if lacking is None:
        pytest.skip("every checkpoint has a span head")
    out = client.predict(lacking, "Who?", EIFFEL, 3, api_name="/answer")
    assert out[0] is None and f"'{lacking}' has no span" in out[-1]


def test_attention_api(served, client):
    name = served[1]["mlm"]
    plot, tokens, notice = client.predict(name, "The cat sat on the mat.", "", "1", "mean",
                                          api_name="/attention")
    rows = tokens["data"]
    assert rows[0][1] == "[CLS]" and rows[-1][1] == "[SEP]" and plot["plot"]


@pytest.mark.multibackend
def test_every_tab_runs_on_this_backend(tmp_path, tiny):
    from app import inference, search
    from app.registry import Registry, discover
    tiny(tmp_path / "enc", "embedding")
    tiny(tmp_path / "mlm", "mlm")
    tiny(tmp_path / "qa", "span")
    tiny(tmp_path / "clf", "classifier")
    tiny(tmp_path / "ner", "tagger")
    registry = Registry(discover(tmp_path))
    scores = inference.classify(registry, "clf", "the dog sat .", "a cat .")["scores"]
    assert list(scores) == sorted(scores, key=scores.get, reverse=True)
    labels = registry.get("clf").checkpoint.head_options["classifier"]["labels"]
    assert set(scores) == set(labels) and abs(sum(scores.values()) - 1) < 1e-5
    for e in inference.entities(registry, "ner", "the man went to paris")["entities"]:
        assert e["label"] in ("PER", "LOC") and 0 <= e["start"] < e["end"]
    masks = inference.fill_mask(registry, "mlm", "the [MASK] sat on the [MASK] .", 3)["masks"]
    assert [len(r) for r in masks] == [3, 3]
    assert 0 <= inference.next_sentence(registry, "mlm", "a dog .", "a cat .")["is_next"] <= 1
    best = inference.answer(registry, "qa", "who ?", "the man went to the store .", 2)["answers"]
    assert len(best) == 2
    out = inference.attention(registry, "qa", "the man went", "he sat", "2", "1")
    assert out["matrix"].shape == (len(out["tokens"]),) * 2
    assert abs(out["matrix"].sum(-1) - 1).max() < 1e-4   # each row a distribution
    document = "the man went to the store .\n\nthe dog sat on the mat ."
    found = search.ask(registry, "enc", "qa", document, None, "who went ?", 5, hybrid=False)
    assert len(found["hits"]) == 1 and found["hits"][0]["text"] == document   # one passage
    assert found["answer"]["text"] in document and found["hits"][0]["answer"]


def test_concurrent_calls_run_as_batches_and_errors_stay_their_own():
    import concurrent.futures
    import threading
    import time

    from app.inference import Batcher
    sizes, gate = [], threading.Event()

    def square(items):
        sizes.append(len(items))
        gate.wait(5)                      # the first batch runs while the others queue
        if any(x < 0 for x in items):
            raise ValueError("negative")
        return [x * x for x in items]
    batcher = Batcher(square, max_batch=8)
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(batcher, x) for x in [1, 2, 3, -4, 5, 6, 7, 8, 9, 10, 11, 12]]
        time.sleep(0.5)
        gate.set()
        outcomes = [f.exception() or f.result() for f in futures]
    assert [o for o in outcomes if not isinstance(o, Exception)] == \
        [x * x for x in [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12]]
    assert str(outcomes[3]) == "negative"
    assert max(sizes) > 1 and sum(s for s in sizes if s > 1) >= 11   # batched, then retried


def test_an_unloadable_checkpoint_is_a_message(tmp_path):
    from app.registry import InputError, Registry, discover
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"hidden_size": 8, "heads": {"mlm": {}}}')
    registry = Registry(discover(tmp_path))
    assert registry.names == ["broken"] and registry.with_head("mlm") == ["broken"]
    with pytest.raises(InputError, match="Could not load the model 'broken'"):
        registry.get("broken")


def test_defaults_bind_loopback_without_share_and_import_is_light():
    from app import server
    args = server.add_arguments(argparse.ArgumentParser()).parse_args([])
    assert (args.host, args.port, args.share) == ("127.0.0.1", 7860, False)
    code = "import sys, app.server, app.ui; sys.exit('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0
    # the CLI sits above the playground: its --help imports nothing of kbert.cli
    code = ("import sys, app.server\ntry: app.server.main(['--help'])\nexcept SystemExit: pass\n"
            "sys.exit(any(m.startswith('kbert.cli') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and "python -m app" in out.stdout and "(default 7860)" in out.stdout


# --- browser -------------------------------------------------------------------------------------
def _browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed")
    return sync_api


def _pick_model(page, name):
    page.locator("#model input").click()
    page.get_by_role("option", name=name, exact=True).click()


def _launch(sync_api, pw):
    """(browser, page): headless system Chromium and a page with the tests' timeouts."""
    sync_api.expect.set_options(timeout=30_000)   # a slow shared CI machine, not a slow app
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"])
    page = browser.new_page(viewport={"width": 1200, "height": 1000})
    page.set_default_timeout(30_000)
    return browser, page


def test_tabs_in_a_headless_browser(served, tmp_path):
    sync_api = _browser()
    url, names, registry = served
    ARTIFACTS.mkdir(exist_ok=True)
    expect = sync_api.expect
    with sync_api.sync_playwright() as pw:
        browser, page = _launch(sync_api, pw)
        page.goto(url)

        # Every tab's main button works without touching the model picker: each tab starts on
        # a checkpoint that has its head.
        picker = page.locator("#model input")
        expect(picker).to_have_value(names["mlm"])
        page.locator("#fill-text textarea").fill("The man went to the store to buy milk.")
        page.locator("#fill-word input").click()
        page.get_by_role("option", name="store (word 6)").click()
        page.locator("#fill-mask-word").click()
        expect(page.locator("#fill-text textarea")).to_have_value(
            "The man went to the [MASK] to buy milk.")
        page.locator("#fill-run").click()
        best = page.locator("#fill-best textarea")
        expect(best).to_have_value(re.compile(r"^The man went to the \S+ to buy milk"))
        expect(page.locator("#fill-chart .fill-bars")).to_contain_text("[MASK] #1")
        page.screenshot(path=ARTIFACTS / "fill_mask.png", full_page=True)

        page.get_by_role("tab", name="Next sentence").click()
        expect(picker).to_have_value(registry.default("nsp", names["mlm"]))
        # The example pair first (B follows A: a probability near 1, shown with a decimal
        # point); a random B can be shown as "0" at 4 decimals, so it comes after.
        page.locator("#nsp-run").click()
        expect(page.locator("#nsp-prob input")).to_have_value(re.compile(r"^0?\.\d|^1"))
        page.locator("#nsp-random").click()
        page.screenshot(path=ARTIFACTS / "next_sentence.png", full_page=True)

        page.get_by_role("tab", name="Question answering").click()
        expect(picker).to_have_value(names["span"])
        page.locator("#qa-question textarea").fill("Where is the Eiffel Tower?")
        page.locator("#qa-context textarea").fill(EIFFEL)
        page.locator("#qa-run").click()
        expect(page.locator("#qa-answer textarea")).not_to_have_value("")
        expect(page.locator("#qa-highlight")).to_contain_text("Champ de Mars")
        expect(page.locator("#qa-message")).not_to_contain_text("has no")
        page.screenshot(path=ARTIFACTS / "question_answering.png", full_page=True)

        page.get_by_role("tab", name="Classify").click()
        expect(picker).to_have_value(names["classifier"])
        page.locator("#classify-run").click()
        labels = registry.get(names["classifier"]).checkpoint.head_options["classifier"]
        expect(page.locator("#classify-label")).to_contain_text(
            re.compile("|".join(map(re.escape, labels.get("labels") or ["LABEL_"]))))
        expect(page.locator("#classify-message")).not_to_contain_text("⚠️")
        page.screenshot(path=ARTIFACTS / "classify.png", full_page=True)

        page.get_by_role("tab", name="Entities").click()
        expect(picker).to_have_value(names["tagger"])
        page.locator("#entities-run").click()
        expect(page.locator("#entities-highlight")).to_contain_text("Eiffel")
        expect(page.locator("#entities-message")).not_to_contain_text("⚠️")
        page.screenshot(path=ARTIFACTS / "entities.png", full_page=True)

        page.get_by_role("tab", name="Search").click()
        expect(picker).to_have_value(names["embedding"])
        page.locator("#search-question textarea").fill("How often is the tower painted?")
        page.locator("#search-document textarea").fill(EIFFEL_DOCUMENT)
        page.locator("#search-run").click()
        expect(page.locator("#search-info")).to_contain_text("passages")
        expect(page.locator("#search-answer textarea")).not_to_have_value("")
        expect(page.locator("#search-results mark.answer").first).to_be_visible()
        expect(page.locator("#search-message")).not_to_contain_text("⚠️")
        if _shipped(registry, names["span"]):
            expect(page.locator("#search-answer textarea")).to_have_value(
                re.compile("seven years"))
        page.screenshot(path=ARTIFACTS / "search.png", full_page=True)
        if os.environ.get("KBERT_DOCS_SCREENSHOT"):    # `make screenshot`: docs/playground.png
            shutil.copyfile(ARTIFACTS / "search.png", os.environ["KBERT_DOCS_SCREENSHOT"])
        upload = tmp_path / "rivers.txt"                   # an uploaded file, nothing pasted
        upload.write_text("The Danube flows through ten countries.\n\nThe Nile is in Africa.")
        page.locator("#search-files input[type=file]").set_input_files(str(upload))
        expect(page.locator("#search-files").get_by_role(  # name and extension are two spans
            "cell", name="rivers.txt")).to_be_visible()
        page.locator("#search-document textarea").fill("")
        page.locator("#search-question textarea").fill("How many countries does it cross?")
        page.locator("#search-run").click()
        expect(page.locator("#search-results")).to_contain_text("rivers.txt")
        expect(page.locator("#search-info")).to_contain_text("from 1 document")

        page.get_by_role("tab", name="Attention").click()
        page.locator("#att-run").click()
        expect(page.locator("#att-plot img")).to_be_visible()
        expect(page.locator("#att-tokens")).to_contain_text("[CLS]")
        page.screenshot(path=ARTIFACTS / "attention.png", full_page=True)

        if "mlm" not in registry.info(names["span"])["heads"]:
            page.get_by_role("tab", name="Fill mask").click()
            expect(picker).to_have_value(names["mlm"])      # back on a model with the head
            _pick_model(page, names["span"])                # a pick by hand is kept ...
            expect(page.get_by_text("has no masked-LM (fill-mask) head")).to_be_visible()
            page.locator("#fill-run").click()               # ... and the tab says why not
            expect(page.locator("#fill-message")).to_contain_text("has no masked-LM")
        browser.close()


def test_a_tab_opened_before_the_page_loads_keeps_its_checkpoint(served):
    """The Search tab clicked as soon as it exists, while the page's own start-up requests are
    still on their way (held back here until the tab has switched the picker, as a slow link
    or a busy server would): the tab keeps its sentence encoder and answers its example."""
    sync_api = _browser()
    url, names, registry = served
    expect = sync_api.expect
    held, released = [], []

    def hold_start_up(route):
        if released or (route.request.post_data_json or {}).get("event_data"):
            route.continue_()                            # a user's event (a tab's select)
        else:
            held.append(route)                           # the page's own (load, change, ...)
    with sync_api.sync_playwright() as pw:
        browser, page = _launch(sync_api, pw)
        page.route("**/queue/join*", hold_start_up)
        page.goto(url, wait_until="commit")
        page.get_by_role("tab", name="Search").click()   # waits only for the tab to exist
        picker = page.locator("#model input")
        expect(picker).to_have_value(names["embedding"])
        released.append(True)
        for route in held:                               # the start-up requests land late
            route.continue_()
        page.wait_for_timeout(2_000)                     # their answers are in by now
        expect(picker).to_have_value(names["embedding"])
        page.locator("#search-examples").get_by_text(examples.SEARCH[0][0]).click()
        expect(page.locator("#search-question textarea")).to_have_value(examples.SEARCH[0][0])
        page.locator("#search-run").click()
        expect(page.locator("#search-info")).to_contain_text(f"by {names['embedding']};")
        expect(page.locator("#search-answer textarea")).not_to_have_value("")
        expect(page.locator("#search-message")).not_to_contain_text("⚠️")
        expect(page.get_by_text("has no sentence-embedding")).to_have_count(0)
        if _shipped(registry, names["span"]):
            expect(page.locator("#search-answer textarea")).to_have_value(
                re.compile("seven years"))
        expect(picker).to_have_value(names["embedding"])
        browser.close()


def _config_only(path, heads, **extra):
    """A checkpoint directory with only its config.json: enough to list it (no weights)."""
    import json
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"hidden_size": 8, "heads": heads, **extra}))


def test_the_classify_tab_leaves_out_the_cross_encoders(tmp_path):
    from app import handlers
    from app.registry import Registry, discover
    _config_only(tmp_path / "a-reranker", {"classifier": {"labels": ["irrelevant", "relevant"]}})
    _config_only(tmp_path / "b-converted", {"classifier": {"labels": ["score"],
                                                           "activation": "sigmoid"}})
    _config_only(tmp_path / "c-mlm", {"mlm": {}, "nsp": {}})
    registry = Registry(discover(tmp_path))
    # only cross-encoders: no Classify tab (they score passages in the Search tab)
    assert not handlers.tab_shown(registry, "classify")
    assert handlers.tab_shown(registry, "fill") and not handlers.tab_shown(registry, "entities")
    _config_only(tmp_path / "d-sentiment", {"classifier": {"labels": ["negative", "positive"]}})
    registry = Registry(discover(tmp_path))
    assert handlers.tab_shown(registry, "classify")
    assert handlers.tab_models(registry, "classify") == ["d-sentiment"]
    assert registry.default("classifier", "a-reranker", handlers.TAB_SKIP["classify"]) \
        == "d-sentiment"
    assert registry.resolve(None, "classifier", "reranker") == "d-sentiment"   # API, no model
    assert registry.resolve("a-reranker", "classifier", "reranker") == "a-reranker"  # named
    assert registry.with_head("classifier") == ["a-reranker", "b-converted", "d-sentiment"]
