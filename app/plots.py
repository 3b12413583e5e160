"""Charts for the playground.

The fill-mask bars are drawn straight into a PNG with Pillow (a few milliseconds; a matplotlib
figure cost more than the model itself, see docs/inference.md) and handed to `gr.Plot` as the
image a matplotlib plot becomes. The attention heatmap uses matplotlib's object-oriented API (no
pyplot global state, so concurrent requests cannot draw into each other's figures).
"""

import base64
import functools
import io

BAR_COLOR = (249, 115, 22)        # #f97316
TEXT_COLOR = (55, 65, 81)
ROW, WIDTH, LABELS, PAD = 24, 640, 150, 10   # pixels: bar row height, image width, token column


def _label(token):
    return token.replace("$", r"\$")   # a literal dollar, not matplotlib math


def _figure(width, height):
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


@functools.lru_cache(maxsize=None)
def _font(size):
    from PIL import ImageFont
    return ImageFont.load_default(size=size)


def fill_mask_png(masks):
    """PNG bytes: one block of horizontal bars per [MASK], its top-k fillers best first, each
    bar's length its probability (scaled to the block's best) and labelled with it."""
    from PIL import Image, ImageDraw

    font, title = _font(13), _font(14)
    height = PAD + sum(ROW * (len(ranked) + 1) for ranked in masks) + PAD
    image = Image.new("RGB", (WIDTH, height), "white")
    draw = ImageDraw.Draw(image)
    y, room = PAD, WIDTH - LABELS - 70
    for i, ranked in enumerate(masks):
        draw.text((PAD, y + 4), f"[MASK] #{i + 1}", fill=TEXT_COLOR, font=title)
        y += ROW
        scale = min(1.0, max(r["score"] for r in ranked) * 1.25 + 0.05)
        for r in ranked:
            token = r["token"] if len(r["token"]) <= 18 else r["token"][:17] + "…"
            draw.text((LABELS - PAD, y + ROW // 2), token, fill=TEXT_COLOR, font=font,
                      anchor="rm")
            length = max(1, round(room * r["score"] / scale))
            draw.rectangle((LABELS, y + 4, LABELS + length, y + ROW - 4), fill=BAR_COLOR)
            draw.text((LABELS + length + 6, y + ROW // 2), f"{r['score']:.1%}", fill=TEXT_COLOR,
                      font=font, anchor="lm")
            y += ROW
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def fill_mask_bars(masks):
    """The fill-mask chart as `gr.Plot`'s value (the PNG of `fill_mask_png`)."""
    from gradio.components.plot import PlotData

    data = base64.b64encode(fill_mask_png(masks)).decode("ascii")
    return PlotData(type="matplotlib", plot=f"data:image/png;base64,{data}")


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
