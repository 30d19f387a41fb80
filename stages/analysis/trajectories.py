"""Per-run plot tables: one row per checkpoint with accuracy and RankMe of every layer."""
from __future__ import annotations

import pandas as pd


def trajectory(frame: pd.DataFrame) -> pd.DataFrame:
    """From measures rows (step, layer, rankme, test_acc and, where measured, rankme_centred and
    mean_dominance): step, test_acc, rankme_rel (last layer relative to its first checkpoint),
    rankme_last, the same for centred RankMe (``rankme_centred_rel``, ``rankme_centred_last``),
    ``mean_dominance_last``, and ``rankme_layer<l>`` for every layer."""
    wide = frame.pivot(index="step", columns="layer", values="rankme")
    last_layer = wide.columns.max()
    wide.columns = [f"rankme_layer{l}" for l in wide.columns]
    last = wide.iloc[:, -1]
    out = pd.DataFrame({"step": wide.index, "test_acc": frame.groupby("step")["test_acc"].first().values,
                        "rankme_rel": (last / last.iloc[0]).values, "rankme_last": last.values})
    for column in ("rankme_centred", "mean_dominance"):
        if column in frame.columns:
            series = frame[frame["layer"] == last_layer].set_index("step")[column].reindex(wide.index)
            if column == "rankme_centred":
                out["rankme_centred_rel"] = (series / series.iloc[0]).values
            out[f"{column}_last"] = series.values
    return pd.concat([out.reset_index(drop=True), wide.reset_index(drop=True)], axis=1)
