"""The report's plots: fixed size, no timestamp (equal inputs, equal PNG bytes).

`figure`, `axes` and `png` are the one place every PNG of the platform is made that way
(the loss curves and the RL run report use them too)."""

from __future__ import annotations

import io


def figure(width: float = 6.4, height: float = 3.6):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def axes(xlabel: str, ylabel: str, title: str):
    fig = figure()
    ax = fig.add_subplot()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return fig, ax


def _policy_ticks(ax, names: list[str], first: int = 0) -> None:
    """Policy names on the x axis; the Stage A seed suffix is dropped (every Stage A policy has it)."""
    ax.set_xticks(range(first, first + len(names)), [n.removesuffix("-seed42") for n in names], rotation=30,
                  ha="right", fontsize=8)


def png(fig) -> bytes:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def accuracy_plot(policies: dict[str, dict]) -> bytes:
    """Core-IID accuracy per policy with its bootstrap interval."""
    fig, ax = axes("", "core-IID accuracy", "Stage A: core-IID accuracy, 95% task bootstrap")
    names = list(policies)
    acc = [policies[p]["core_iid_accuracy"] for p in names]
    low = [a - policies[p]["core_iid_lower"] for a, p in zip(acc, names)]
    high = [policies[p]["core_iid_upper"] - a for a, p in zip(acc, names)]
    ax.errorbar(range(len(names)), acc, yerr=[low, high], fmt="o", capsize=4, color="tab:blue")
    _policy_ticks(ax, names)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    return png(fig)


def gap_histogram(gaps: dict[str, list[float]]) -> bytes:
    """Score gaps (best - chosen) of the potential arms' second rows."""
    fig, ax = axes("gap, nats per token (best - chosen)", "tasks", "Selection: second-row score gaps")
    for arm, values in gaps.items():
        if values:
            ax.hist(values, bins=20, alpha=0.6, label=f"{arm} ({len(values)})")
    ax.legend(fontsize=8)
    return png(fig)


def thought_lengths(lengths: dict[str, list[int]]) -> bytes:
    fig, ax = axes("", "thought tokens", "Stage A: thought length per policy")
    names = list(lengths)
    ax.boxplot([lengths[n] for n in names], showfliers=False)
    _policy_ticks(ax, names, first=1)
    return png(fig)


def loss_curves(curves: dict[str, list[dict]]) -> bytes:
    fig, ax = axes("optimizer step", "window loss (nats, weighted)", "Training: loss per optimizer step")
    for policy, curve in curves.items():
        ax.plot([p["step"] for p in curve], [p["loss"] for p in curve], label=policy.removesuffix("-seed42"))
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return png(fig)
