"""The PNG chart: AppendEntries and ListMemory p50/p99 against memory size (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SERIES = (
    ("AppendEntries", "memory.append", "tab:blue"),
    ("ListMemory recency", "memory.list_recency", "tab:green"),
    ("ListMemory relevance", "memory.list_relevance", "tab:red"),
)


def points(figures: dict[str, Any], kind: str, metric: str) -> list[tuple[int, float]]:
    """(size, value) for every measured `kind.<size>` figure, by size."""
    out = []
    for name, figure in figures.items():
        prefix, _, size = name.rpartition(".")
        if prefix == kind and size.isdigit() and figure.get("status") == "ok":
            out.append((int(size), float(figure[metric])))
    return sorted(out)


def draw(figures: dict[str, Any], path: Path, title: str) -> bool:
    """Writes the chart; False (and no file) when no memory figure was measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not any(points(figures, kind, "p50_ms") for _, kind, _ in SERIES):
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, which in zip(axes, ("AppendEntries", "ListMemory"), strict=True):
        sizes: set[int] = set()
        for label, kind, color in SERIES:
            if not label.startswith(which):
                continue
            for metric, style in (("p50_ms", "-o"), ("p99_ms", "--s")):
                data = points(figures, kind, metric)
                if data:
                    xs, ys = zip(*data, strict=True)
                    sizes.update(xs)
                    ax.plot(xs, ys, style, color=color, label=f"{label} {metric[:3]}")
        if sizes:
            ax.set_xscale("log")
            ax.minorticks_off()
            ax.set_xticks(sorted(sizes), [f"{s:,}" for s in sorted(sizes)])
        else:
            ax.set_xticks([])
            ax.set_yticks([])
            ax.text(0.5, 0.5, "not available", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("active entries in the memory")
        ax.set_ylabel("latency (ms)")
        ax.set_ylim(bottom=0)
        ax.set_title(which)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
