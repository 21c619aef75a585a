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
