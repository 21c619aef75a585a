"""The loss curve of one adapter as a PNG (fixed size, no timestamp: equal curves, equal bytes)."""

from __future__ import annotations

from apsft_dagster.core.report_plots import axes, png
from apsft_dagster.core.training.loss import SEGMENT_NAMES


def loss_curve_png(curve: list[dict], title: str) -> bytes:
    return png(loss_curve_figure(curve, title))


def loss_curve_figure(curve: list[dict], title: str):
    """The trained segments on their own scale. The prompt (weight 0, never trained) would sit near
    the untrained model's ~7 nats and squeeze the rest into a band: it is left out, and the plot
    says so with the range it spans."""
    fig, ax = axes("optimizer step", "nats", title)
    steps = [p["step"] for p in curve]
    ax.plot(steps, [p["loss"] for p in curve], color="black", linewidth=2, label="window loss (weighted)")
    for name, color in zip(SEGMENT_NAMES, ("tab:gray", "tab:blue", "tab:orange")):
        ys = [p[name] for p in curve]
        if name != "prompt" and any(y is not None for y in ys):
            ax.plot(steps, [float("nan") if y is None else y for y in ys], color=color, linewidth=1,
                    label=f"{name} nll / token")
    prompt = [p["prompt"] for p in curve if p.get("prompt") is not None]
    if prompt:
        ax.plot([], [], " ", label=f"prompt nll / token left out (weight 0, not trained): "
                                   f"{min(prompt):.2f}-{max(prompt):.2f}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig


def sparkline_svg(values: list[float], width: int = 240, height: int = 40, most: int = 60) -> str:
    """`values` as a small SVG line, first to last left to right, the lowest at the bottom and the
    highest at the top (a flat series in the middle), at most `most` points evenly chosen (first and
    last always): small enough to sit inline in the UI's metadata table. Integer coordinates, so the
    same values give the same text."""
    if not values:
        raise ValueError("sparkline of no values")
    n = len(values)
    picked = sorted({round(i * (n - 1) / (most - 1)) for i in range(most)}) if n > most else list(range(n))
    low, high = min(values), max(values)
    pad = 2

    def y(v: float) -> int:
        return height // 2 if high == low else round(pad + (high - v) / (high - low) * (height - 2 * pad))

    def x(i: int) -> int:
        return width // 2 if n == 1 else round(pad + i / (n - 1) * (width - 2 * pad))

    points = ",".join(f"{x(i)},{y(values[i])}" for i in picked)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"viewBox='0 0 {width} {height}'><polyline points='{points}' fill='none' stroke='black' "
            f"stroke-width='1.5'/></svg>")
