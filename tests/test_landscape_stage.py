"""The landscape stage end to end on the tiny workdir (checkpoint choice, columns, determinism), its
events on the written table, and bad input."""
import copy

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from stages.pipeline import landscape
from stages.analysis.event_rules import Rules
from stages.analysis.landscape_events import landscape_event_params, run_measures
from stages.config import load_params, load_typed_params
from stages.errors import PipelineError
from checkpoint_helpers import listed_steps
from stages.pipeline.landscape import next_steps, peaked
from stages.params import validate_params

RUN = ["--task", "copy", "--level", "easy", "--model", "p405k", "--seed", "0"]
RID = "copy-easy-p405k-s0"  # tiny training: checkpoints 0, 2, 4, 6, 9, 12


def small_landscape(params: dict) -> dict:
    params["landscape"].update(max_checkpoints=3, after_acquisition=1, device="cpu", threads=1,
                               follow={"extra": 0, "settle": 2, "ratio": 1.5})
    params["landscape"]["grad"].update(samples=8, chunk=8)
    params["landscape"]["hessian"].update(samples=8, k=2, maxiter=5, repeats=2)
    params["landscape"]["llc"].update(samples=32, batch_size=8, chains=2, draws=10, burn_in=2)
    return params


@pytest.fixture
def one_thread():
    """Tiny tensors: one thread is many times faster than several on a busy CI box."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_run(measured_workdir, one_thread):
    """The tiny run trained and measured (tests/conftest.py; the landscape plot table draws RankMe beside
    the landscape measures), with small landscape settings."""
    params = small_landscape(load_params())
    (measured_workdir / "params.yaml").write_text(yaml.safe_dump(params))
    return measured_workdir


def set_accuracy(workdir, acquired_from: int | None) -> None:
    """Rewrite the run's history so that test accuracy is 1 from ``acquired_from`` on (0 before)."""
    path = workdir / f"data/history/{RID}.csv"
    history = pd.read_csv(path)
    history["test_acc"] = 0.0 if acquired_from is None else (history["step"] >= acquired_from).astype(float)
    history.to_csv(path, index=False)


def test_stage_writes_deterministic_landscape(tiny_run):
    set_accuracy(tiny_run, None)  # no acquisition: the whole run, thinned to 3 checkpoints
    landscape.main(RUN)
    first = pd.read_csv(tiny_run / f"data/landscape/{RID}.csv")
    need = {"run", "step", "test_acc", "n_params", "grad_erank", "grad_erank_cap", "gradcov_rank", "gradcov_cap",
            "gradcov_saturated", "hessian_top1", "hessian_top2", "hessian_top1_spread", "hessian_top1_noise", "llc",
            "llc_std", "llc_chain_min", "llc_chain_max", "llc_chain0", "llc_chain1", "llc_drift", "llc_stationary",
            "init_loss"}
    assert need <= set(first.columns)
    assert first["step"].tolist() == [0, 4, 12]
    assert first["hessian_top1"].notna().all()
    both = first.dropna(subset=["hessian_top2"])  # an unconverged eigenvalue is NaN, never a guess
    assert (both["hessian_top1"] >= both["hessian_top2"]).all()
    assert (first["hessian_top1_noise"] >= 1e-2 * first["hessian_top1"].abs() - 1e-12).all()
    assert (first["gradcov_cap"] == 7).all() and (first["grad_erank_cap"] == 8).all()
    assert ((first["gradcov_rank"] >= 0) & (first["gradcov_rank"] <= 7)).all()
    assert (first["gradcov_saturated"] == (first["gradcov_rank"] == 7)).all()
    assert ((first["grad_erank"] >= 1) & (first["grad_erank"] <= 8)).all()
    chains = first[["llc_chain0", "llc_chain1"]].to_numpy()
    np.testing.assert_allclose(first["llc"], chains.mean(axis=1))
    np.testing.assert_allclose(first["llc_std"], chains.std(axis=1))
    np.testing.assert_allclose(first["llc_chain_min"], chains.min(axis=1))
    np.testing.assert_allclose(first["llc_chain_max"], chains.max(axis=1))
    assert first["llc_stationary"].isin([True, False]).all()
    plot = pd.read_csv(tiny_run / f"plots/landscape/{RID}.csv")
    assert list(plot.columns) == ["step", "measure", "value", "scaled"]
    assert set(plot["measure"]) == {"rankme", "rankme_centred", "grad_erank", "gradcov_rank", "hessian_top1", "llc",
                                    "test_acc"}
    measures = pd.read_csv(tiny_run / f"data/measures/{RID}.csv")
    last = measures[measures["layer"] == measures["layer"].max()].set_index("step")["rankme_centred"]
    drawn = plot[plot["measure"] == "rankme_centred"].set_index("step")["value"]
    np.testing.assert_allclose(drawn.to_numpy(), last.loc[drawn.index].to_numpy())
    assert plot["scaled"].between(0, 1).all()
    written = (tiny_run / f"data/landscape/{RID}.csv").read_bytes()
    assert load_params()["landscape"]["workers"] == 2  # the first run measured its checkpoints in 2 processes
    params = load_params()
    params["landscape"]["workers"] = 1
    (tiny_run / "params.yaml").write_text(yaml.safe_dump(params))
    landscape.main(RUN)  # seeded per checkpoint: one process in order reproduces every byte
    assert (tiny_run / f"data/landscape/{RID}.csv").read_bytes() == written

    # the events of the written table: every measure reported, no acquisition -> no verdict
    p = landscape_event_params(load_typed_params().landscape_events)
    out = run_measures(first, p["directions"], None, Rules(), p)
    assert set(out) == {"grad_erank", "gradcov_rank", "hessian_top1", "llc"}
    assert all(v["precursor"] is None for v in out.values())


def test_stage_measures_up_to_acquisition_and_a_margin(tiny_run):
    set_accuracy(tiny_run, 4)  # acquisition at step 4: window 0, 2, 4 and one more (6), thinned to 3
    landscape.main(RUN)
    frame = pd.read_csv(tiny_run / f"data/landscape/{RID}.csv")
    assert frame["step"].tolist() == [0, 4, 6]
    assert frame["test_acc"].tolist() == [0.0, 1.0, 1.0]
    last = frame["last_checkpoint"].iloc[0]
    assert (frame["last_checkpoint"] == last).all() and last > 6  # the run goes on past the window
    # following the rises: at most `extra` more checkpoints, geometrically past the window's last
    params = yaml.safe_load((tiny_run / "params.yaml").read_text())
    params["landscape"]["follow"]["extra"] = 1
    (tiny_run / "params.yaml").write_text(yaml.safe_dump(params))
    landscape.main(RUN)
    followed = pd.read_csv(tiny_run / f"data/landscape/{RID}.csv")
    rises_open = not all(peaked(frame[m], 2) for m in ("llc", "hessian_top1"))
    expected = [0, 4, 6] + (next_steps(listed_steps(tiny_run / f"data/checkpoints/{RID}"), 6, 1.5, 1) if rises_open else [])
    assert followed["step"].tolist() == expected


@pytest.mark.parametrize("key,value,message", [
    ("landscape.llc.draws", 0, "'landscape.llc.draws'"),
    ("landscape.llc.lr", -1, "'landscape.llc.lr'"),
    ("landscape.llc.max_drift", 0, "'landscape.llc.max_drift'"),
    ("landscape.hessian.k", "two", "'landscape.hessian.k'"),
    ("landscape.hessian.repeats", 0, "'landscape.hessian.repeats'"),
    ("landscape.grad.cov_rtol", 2, "'landscape.grad.cov_rtol'"),
    ("landscape.after_acquisition", -1, "'landscape.after_acquisition'"),
    ("landscape.measures", ["llc", "curvature"], "unknown entry 'curvature' in 'landscape.measures'"),
    ("landscape.device", "tpu", "landscape.device"),
    ("landscape.llc.burn_in", 50, "'landscape.llc.draws' (32) must exceed 'landscape.llc.burn_in' (50) by at least 8"),
    ("events.acquisition_window", 0, "'events.acquisition_window'"),
])
def test_bad_landscape_params_name_the_key(repo_params, key, value, message):
    params = copy.deepcopy(repo_params)
    node = params
    *parents, leaf = key.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = value
    with pytest.raises(PipelineError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_params(params)  # the schema names the key, the cross-key rules included


def test_stage_errors_are_one_line(workdir, capsys):
    with pytest.raises(SystemExit) as exc:
        landscape.main(RUN)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"data/checkpoints/{RID}" in err


def test_rankme_at_takes_the_deepest_varying_layer():
    measures = pd.DataFrame({"step": [0, 0, 0, 5, 5, 5], "layer": [0, 1, 2] * 2,
                             "rankme": [1.0, 4.0, 9.0, 1.0, 3.0, 2.0], "rankme_centred": [np.nan, 5.0, 8.0, np.nan, 2.5, 1.5],
                             "varies": [False, True, True] * 2})
    out = landscape.rankme_at(measures, [5, 0, 7])
    assert out["rankme"].tolist()[:2] == [2.0, 9.0] and out["rankme_centred"].tolist()[:2] == [1.5, 8.0]
    assert np.isnan(out["rankme"].iloc[2])  # no such checkpoint in the measures table


def test_a_registered_measure_is_computed_plotted_and_evented(monkeypatch, repo_params):
    """A toy landscape measure registered as docs/extending.md says (one LandscapeMeasure and its row
    function) appears in the row, the plot table and the events, with its direction and noise column."""
    from stages.analysis import landscape_events
    from stages.measures import landscape_rows
    from stages.measures.registry import LANDSCAPE, LandscapeMeasure
    from stages.models.gpt import GPT, GPTConfig

    monkeypatch.setitem(LANDSCAPE, "weight_norm", LandscapeMeasure("weight_norm", "weight_norm", "rise", "wn_noise"))
    monkeypatch.setattr(landscape_rows, "weight_norm", lambda c: {
        "weight_norm": float(torch.sqrt(sum((w.detach().double() ** 2).sum() for w in c.model.parameters()))),
        "wn_noise": 0.0}, raising=False)
    p = validate_params(repo_params).landscape.model_copy(update={"measures": ["weight_norm"]})
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=4, block_size=3, n_layer=1, n_head=1, d_model=4))
    row = landscape.measure_checkpoint(model, {}, 2, p)
    assert list(row) == ["weight_norm", "wn_noise"] and row["weight_norm"] > 0
    assert "weight_norm" in landscape.plot_columns() and "weight_norm" in landscape.rises()
    frame = pd.DataFrame({"step": [0, 1, 2, 3], "weight_norm": [1.0, 2.0, 3.0, 3.0], "wn_noise": 0.0,
                          "last_checkpoint": 3})
    assert set(landscape.plot_table(frame)["measure"]) == {"weight_norm"}
    events = landscape_events.landscape_event_params(validate_params(repo_params).landscape_events)
    assert events["directions"]["weight_norm"] == "rise" and landscape_events.noise_columns()["weight_norm"] == "wn_noise"
    out = run_measures(frame, events["directions"], None, Rules(), events)
    assert out["weight_norm"]["direction"] == "rise" and out["weight_norm"]["transition_step"] == 1


def test_every_registered_measure_has_a_row_function():
    from stages.measures import landscape_rows
    from stages.measures.registry import LANDSCAPE
    for name in LANDSCAPE:
        assert callable(getattr(landscape_rows, name, None)), name
