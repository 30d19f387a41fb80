"""The landscape stage end to end on the tiny workdir, landscape events, and bad input."""
import json

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from stages import events, extract, generate, landscape, measure, train
from stages.analysis.landscape_events import (is_precursor, measure_transition, precursor_rates, rise_step,
                                              run_measures)
from stages.config import load_params
from stages.errors import PipelineError
from stages.landscape import landscape_params, select_steps

EVENT_P = {"collapse_drop": 0.2, "recovery_fraction": 0.5, "rise_fraction": 0.5, "min_rise": 0.2,
           "precursor_min_gap": 5}


def small_landscape(params: dict) -> dict:
    params["landscape"].update(max_checkpoints=3, device="cpu", threads=1)
    params["landscape"]["grad"].update(samples=8, chunk=8)
    params["landscape"]["hessian"].update(samples=8, k=2, maxiter=5)
    params["landscape"]["llc"].update(samples=32, batch_size=8, chains=2, draws=3)
    return params


@pytest.fixture
def one_thread():
    """Tiny tensors: one thread is many times faster than several on a busy CI box."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_run(workdir, one_thread):
    params = small_landscape(load_params())
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    generate.main(["--task", "copy", "--level", "easy"])
    train.main(["--task", "copy", "--level", "easy", "--model", "p405k"])
    return workdir


def test_stage_writes_deterministic_landscape_and_events(tiny_run, capsys):
    args = ["--task", "copy", "--level", "easy", "--model", "p405k"]
    landscape.main(args)
    first = pd.read_csv(tiny_run / "data/landscape/copy-easy-p405k.csv")
    need = {"run", "step", "test_acc", "n_params", "grad_erank", "gradcov_rank", "hessian_top1", "hessian_top2",
            "llc", "llc_std", "init_loss"}
    assert need <= set(first.columns) and len(first) == 3
    assert first["step"].iloc[0] == 0 and first["step"].iloc[-1] == 12
    assert first["hessian_top1"].notna().all()
    both = first.dropna(subset=["hessian_top2"])  # an unconverged eigenvalue is NaN, never a guess
    assert (both["hessian_top1"] >= both["hessian_top2"]).all()
    assert ((first["gradcov_rank"] >= 0) & (first["gradcov_rank"] <= 7)).all()
    assert ((first["grad_erank"] >= 1) & (first["grad_erank"] <= 8)).all()
    plot = pd.read_csv(tiny_run / "plots/landscape/copy-easy-p405k.csv")
    assert list(plot.columns) == ["step", "measure", "value", "scaled"]
    assert set(plot["measure"]) == {"grad_erank", "gradcov_rank", "hessian_top1", "llc", "test_acc"}
    assert plot["scaled"].between(0, 1).all()
    landscape.main(args)  # seeded: a rerun reproduces every number
    second = pd.read_csv(tiny_run / "data/landscape/copy-easy-p405k.csv")
    pd.testing.assert_frame_equal(first, second)

    extract.main(args)
    measure.main(args)
    events.main([])
    metrics = json.loads((tiny_run / "metrics/events.json").read_text())
    run = metrics["runs"]["copy-easy-p405k"]["measures"]
    assert set(run) == {"rankme", "grad_erank", "gradcov_rank", "hessian_top1", "llc"}
    assert set(metrics["by_level"]["easy"]["measures"]) == set(run)
    assert {"precursor_rate", "runs", "acquired"} <= set(metrics["by_level"]["easy"]["measures"]["llc"])
    table = pd.read_csv(tiny_run / "data/events/landscape.csv")
    assert set(table["measure"]) == set(run)


def test_rise_and_dip_transitions_and_precursor_flags():
    steps = np.array([0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
    rising = np.array([1, 1, 1.2, 3, 5, 5, 5, 5, 5, 5, 5.0])  # half-rise 1 -> 5 reaches 3 at step 30
    assert rise_step(steps, rising) == 30
    assert rise_step(steps, np.full(11, 2.0)) is None
    assert rise_step(steps, np.linspace(10, 10.5, 11)) is None  # a 5% rise is below min_rise
    dipping = np.array([10, 10, 6, 2, 2, 8, 10, 10, 10, 10, 10.0])  # collapse 20, recovery 50
    dip = measure_transition(steps, dipping, "dip", EVENT_P)
    assert dip == {"transition_step": 20, "recovery_step": 50}
    assert is_precursor(dip, "dip", 80, 5) is True
    assert is_precursor(dip, "dip", 40, 5) is False  # not recovered before acquisition
    assert is_precursor(dip, "dip", None, 5) is None  # never acquired
    rise = measure_transition(steps, rising, "rise", EVENT_P)
    assert is_precursor(rise, "rise", 80, 5) is True
    assert is_precursor(rise, "rise", 32, 5) is False  # gap 2 < 5 steps: simultaneous
    frame = pd.DataFrame({"step": steps, "llc": rising, "grad_erank": dipping})
    out = run_measures(frame, {"llc": "rise", "grad_erank": "dip", "absent": "rise"}, 80, EVENT_P)
    assert set(out) == {"llc", "grad_erank"} and out["llc"]["lead"] == 50 and out["llc"]["precursor"] is True
    rows = pd.DataFrame({"level": ["hard", "hard", "hard", "easy"], "measure": ["llc"] * 4,
                         "precursor": [True, False, None, False], "lead": [50, 0, None, 1]})
    rates = precursor_rates(rows)
    assert rates["hard"]["llc"]["precursor_rate"] == 0.5 and rates["hard"]["llc"]["acquired"] == 2
    assert rates["easy"]["llc"]["precursor_rate"] == 0.0


def test_select_steps_keeps_ends_and_early_density():
    steps = [0, 1, 2, 3, 5, 8, 13, 21, 50, 100]
    assert select_steps(steps, 0) == steps and select_steps(steps, 20) == steps
    chosen = select_steps(steps, 4)
    assert chosen[0] == 0 and chosen[-1] == 100 and len(chosen) == 4


@pytest.mark.parametrize("key,value,message", [
    ("llc.draws", 0, "'landscape.llc.draws'"),
    ("llc.lr", -1, "'landscape.llc.lr'"),
    ("hessian.k", "two", "'landscape.hessian.k'"),
    ("grad.cov_rtol", 2, "'landscape.grad.cov_rtol'"),
    ("measures", ["llc", "curvature"], "landscape.measures entry 'curvature'"),
    ("device", "tpu", "landscape.device"),
    ("llc.burn_in", 50, "'landscape.llc.draws' (16) must exceed 'landscape.llc.burn_in' (50)"),
])
def test_bad_landscape_params_name_the_key(repo_params, key, value, message):
    import copy

    params = copy.deepcopy(repo_params)
    node = params["landscape"]
    *parents, leaf = key.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = value
    with pytest.raises(PipelineError, match=message.replace("(", r"\(").replace(")", r"\)")):
        landscape_params(params)


def test_stage_errors_are_one_line(workdir, capsys):
    with pytest.raises(SystemExit) as exc:
        landscape.main(["--task", "copy", "--level", "easy", "--model", "p405k"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "data/checkpoints/copy-easy-p405k" in err


def test_bad_direction_names_the_key(repo_params):
    import copy

    from stages.analysis.landscape_events import landscape_event_params

    params = copy.deepcopy(repo_params)
    params["landscape_events"]["directions"]["llc"] = "up"
    with pytest.raises(PipelineError, match="landscape_events.directions.llc"):
        landscape_event_params(params, EVENT_P)


def test_events_without_landscape_tables_report_rankme_only(tiny_run):
    args = ["--task", "copy", "--level", "easy", "--model", "p405k"]
    extract.main(args)
    measure.main(args)
    events.main([])
    metrics = json.loads((tiny_run / "metrics/events.json").read_text())
    assert set(metrics["runs"]["copy-easy-p405k"]["measures"]) == {"rankme"}
    assert set(metrics["by_level"]["easy"]["measures"]) == {"rankme"}
