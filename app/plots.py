"""Matplotlib figures for the playground (object-oriented API: no pyplot global state, so
concurrent requests cannot draw into each other's figures)."""


def _label(token):
    return token.replace("$", r"\$")   # a literal dollar, not matplotlib math


def _figure(width, height):
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def fill_mask_bars(masks):
    """One horizontal bar chart per [MASK]: its top-k fillers and their probabilities."""
    fig = _figure(6.4, 0.35 + 0.32 * sum(len(r) + 1 for r in masks))
    axes = fig.subplots(len(masks), 1, squeeze=False)[:, 0]
    for i, (ax, ranked) in enumerate(zip(axes, masks)):
        tokens = [_label(r["token"]) for r in ranked][::-1]
        scores = [r["score"] for r in ranked][::-1]
        bars = ax.barh(range(len(tokens)), scores, color="#f97316")
        ax.set_yticks(range(len(tokens)), tokens)
        ax.bar_label(bars, labels=[f"{s:.1%}" for s in scores], padding=3, fontsize=8)
        ax.set_xlim(0, min(1.0, max(scores) * 1.25 + 0.05))
        ax.set_title(f"[MASK] #{i + 1}", fontsize=9, loc="left")
        ax.tick_params(labelsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    axes[-1].set_xlabel("probability", fontsize=8)
    return fig


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
