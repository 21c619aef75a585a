"""The run report's plots: fixed size, no timestamp or software tag (equal inputs, equal PNG bytes)."""

from __future__ import annotations

from apsft_dagster.core.report_plots import figure, png


def eval_curves_plot(table: list[dict], labels: dict[str, str]) -> bytes:
    """Each eval metric by step (missing values are gaps in the points, not zeros)."""
    fig = figure()
    ax = fig.add_subplot()
    for key, label in labels.items():
        points = [(row["step"], row["scores"][key]) for row in table if row["scores"][key] is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("eval score")
    ax.set_title("Eval scores by checkpoint step", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return png(fig)


def hack_rate_plot(rates: list[dict], rewards: list[tuple[int, float]]) -> bytes:
    """The hack rate of each saved rollout step beside the train reward mean by step."""
    fig = figure()
    ax = fig.add_subplot()
    ax.plot([s for s, _ in rewards], [r for _, r in rewards], color="tab:blue", marker="o", label="train reward mean")
    ax.set_xlabel("step")
    ax.set_ylabel("train reward mean", color="tab:blue")
    rate_ax = ax.twinx()
    rate_ax.plot([r["step"] for r in rates], [r["rate"] for r in rates], color="tab:red", marker="s",
                 label="hack rate")
    rate_ax.set_ylabel("hack rate (share of samples)", color="tab:red")
    rate_ax.set_ylim(-0.02, 1.02)
    ax.set_title("Reward-hacking audit: hack rate beside train reward", fontsize=10)
    ax.grid(alpha=0.3)
    return png(fig)
