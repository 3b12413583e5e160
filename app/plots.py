"""Charts and rendered results for the playground.

The fill-mask bars are HTML (a few microseconds to write, drawn by the browser: a PNG drawn on
the server cost as much CPU as the model's share of a request under load, see
docs/inference.md). The attention heatmap uses matplotlib's object-oriented API (no pyplot
global state, so concurrent requests cannot draw into each other's figures).
"""

import html

BAR_COLOR = "#f97316"
MARK_COLOR = "#fdba74"


def _label(token):
    return token.replace("$", r"\$")   # a literal dollar, not matplotlib math


def _figure(width, height):
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def fill_mask_html(masks):
    """HTML: one block of horizontal bars per [MASK], its top-k fillers best first, each bar's
    length its probability (scaled to the block's best) and labelled with it.

    >>> page = fill_mask_html([[{"token": "paris", "score": 0.5}, {"token": "<b>", "score": 0.25}]])
    >>> "[MASK] #1" in page and "paris" in page and "50.0%" in page and "&lt;b&gt;" in page
    True
    """
    blocks = []
    for i, ranked in enumerate(masks):
        scale = min(1.0, max(r["score"] for r in ranked) * 1.25 + 0.05)
        rows = "".join(
            '<div style="display:flex;align-items:center;gap:8px;margin:3px 0">'
            '<span style="width:9em;text-align:right;overflow:hidden;text-overflow:ellipsis;'
            f'white-space:nowrap" title="{html.escape(r["token"])}">'
            f'{html.escape(r["token"])}</span>'
            f'<span style="width:{max(0.5, 70 * r["score"] / scale):.1f}%;height:1.1em;'
            f'background:{BAR_COLOR};border-radius:2px"></span>'
            f'<span>{r["score"]:.1%}</span></div>' for r in ranked)
        blocks.append(f'<div style="margin:6px 0 10px"><b>[MASK] #{i + 1}</b>{rows}</div>')
    return f'<div class="fill-bars" style="font-size:14px">{"".join(blocks)}</div>'


def _shown(span):
    """Whether the answer `span` is marked: one whose score shows as 0.0000 is not an answer."""
    return bool(span) and round(span["score"], 4) != 0


def _marked(text, span):
    if not _shown(span):
        return html.escape(text)
    s, e = span["start"], span["end"]
    return (html.escape(text[:s]) + f'<mark class="answer" style="background:{MARK_COLOR};'
            f'padding:0 2px;border-radius:2px" title="answer score {span["score"]:.4f}">'
            f'{html.escape(text[s:e])}</mark>' + html.escape(text[e:]))


def search_html(hits, hybrid=False, reranked=False):
    """HTML: the passages found, best first, each with its rank, score, document and place in
    it, and the reader's answer span marked (unless its score shows as 0.0000).

    >>> hits = [{"rank": 1, "score": 0.71, "document": "a<b>.txt", "start": 0, "end": 9,
    ...          "text": "Paris <3.", "answer": {"text": "Paris", "score": 0.9, "start": 0,
    ...                                           "end": 5}}]
    >>> page = search_html(hits)
    >>> '<mark class="answer"' in page and ">Paris</mark> &lt;3." in page and "a&lt;b&gt;" in page
    True
    >>> hits[0]["answer"]["score"] = 0.00004                 # shows as 0.0000: not marked
    >>> "<mark" in search_html(hits) or "answer score" in search_html(hits)
    False
    """
    if not hits:
        return '<div class="search-results">No passage found.</div>'
    kind = ("reranked score (fused with the search score)" if reranked
            else "fused BM25 + dense score" if hybrid else "cosine similarity")
    blocks = []
    for hit in hits:
        answer = hit.get("answer")
        found = f' · answer score {answer["score"]:.4f}' if _shown(answer) else ""
        blocks.append(
            '<div class="search-hit" style="margin:8px 0 12px;padding:8px 10px;'
            'border-left:3px solid #d1d5db">'
            f'<div style="font-size:12px;opacity:0.75">#{hit["rank"]} · {kind} '
            f'{hit["score"]:.4f} · {html.escape(hit["document"])}, characters '
            f'{hit["start"]:,}–{hit["end"]:,}{found}</div>'
            f'<div style="white-space:pre-wrap">{_marked(hit["text"], answer)}</div></div>')
    return f'<div class="search-results" style="font-size:14px">{"".join(blocks)}</div>'


def attention_heatmap(tokens, matrix, layer, head):
    """Rows attend to columns: row i is token i's attention distribution (sums to 1)."""
    size = max(4.0, min(12.0, 2.0 + 0.2 * len(tokens)))
    fig = _figure(size + 1.0, size)
    ax = fig.subplots()
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=max(float(matrix.max()), 1e-6))
    ticks, tokens = range(len(tokens)), [_label(t) for t in tokens]
    font = 9 if len(tokens) <= 24 else 7 if len(tokens) <= 40 else 5
    ax.set_xticks(ticks, tokens, rotation=90, fontsize=font)
    ax.set_yticks(ticks, tokens, fontsize=font)
    ax.set_xlabel("attended token (key)", fontsize=9)
    ax.set_ylabel("attending token (query)", fontsize=9)
    title = "mean over heads" if head == "mean" else f"head {head}"
    ax.set_title(f"layer {layer}, {title}", fontsize=10)
    fig.colorbar(image, ax=ax, shrink=0.8, label="attention probability")
    return fig
