"""Per-run plot tables: one row per checkpoint with accuracy and RankMe of every layer."""
from __future__ import annotations

import pandas as pd


def trajectory(frame: pd.DataFrame) -> pd.DataFrame:
    """From measures rows (step, layer, rankme, test_acc): step, test_acc, rankme_rel (last layer
    relative to its first checkpoint), rankme_last and ``rankme_layer<l>`` for every layer."""
    wide = frame.pivot(index="step", columns="layer", values="rankme")
    wide.columns = [f"rankme_layer{l}" for l in wide.columns]
    last = wide.iloc[:, -1]
    out = pd.DataFrame({"step": wide.index, "test_acc": frame.groupby("step")["test_acc"].first().values,
                        "rankme_rel": (last / last.iloc[0]).values, "rankme_last": last.values})
    return pd.concat([out.reset_index(drop=True), wide.reset_index(drop=True)], axis=1)
