"""Seaborn figure: RankMe of every layer and test accuracy against training step, one panel per run,
with the run's collapse, recovery and acquisition marked (the layers whose states do not vary are
left out)."""
from __future__ import annotations

import math
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from stages import paths  # noqa: E402
from stages.io.atomic import atomic_path  # noqa: E402
from stages.io.tables import read_csv  # noqa: E402


EVENT_STYLE = {"collapse": ("tab:orange", ":"), "recovery": ("tab:green", "-."), "acquisition": ("black", "--")}


def trajectories_figure(runs: list[str], out: str | os.PathLike, events: dict[str, dict] | None = None) -> None:
    """One panel per run of ``runs``; ``events`` maps a run to ``{collapse, recovery, acquisition}``
    steps (``None``/NaN: not found), drawn as vertical lines."""
    sns.set_theme(style="whitegrid", context="paper")
    cols = min(3, len(runs))
    rows = math.ceil(len(runs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, rid in zip(axes.flat, runs):
        frame = read_csv(paths.measures_file(rid))
        if "varies" in frame.columns:  # input-independent layers (a fixed token's embedding) carry no geometry
            keep = frame.groupby("layer")["varies"].transform(lambda v: v.astype(str).str.lower().eq("true").any())
            frame = frame[keep]
        frame = frame.assign(layer=lambda f: f["layer"].astype(str))
        sns.lineplot(data=frame, x="step", y="rankme", hue="layer", ax=ax, palette="viridis", legend="brief")
        ax.set_xscale("symlog", linthresh=1)  # log steps, with step 0 (initialisation) kept
        ax.set_title(rid)
        ax.set_ylabel("RankMe")
        twin = ax.twinx()
        acc = frame.groupby("step")["test_acc"].first()
        twin.plot(acc.index, acc.values, color="crimson", lw=1.5, ls="--", label="test accuracy")
        twin.set_ylim(-0.02, 1.02)
        twin.set_ylabel("accuracy", color="crimson")
        twin.grid(False)
        for name, step in ((events or {}).get(rid) or {}).items():
            if step is not None and not pd.isna(step):
                colour, style = EVENT_STYLE[name]
                ax.axvline(step, color=colour, ls=style, lw=1.2, label=f"{name} {int(step)}")
        ax.legend(fontsize=6, loc="upper right")
    for ax in list(axes.flat)[len(runs):]:
        ax.set_visible(False)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
