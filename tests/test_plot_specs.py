"""The charts of `dvc plots show`: templates, the per-run plot table, dvc.yaml's declarations and the
offline HTML page.

A chart that loses its step field, its symlog step axis or its event rules fails here, as does a
page that would need the internet (DVC's default page loads Vega from a CDN). With DVC installed the
repository's own plot declarations are rendered by `dvc plots show` in a scratch repository; where a
Chromium is installed the page is also opened headless, with every host name unresolvable, and each
chart must draw a canvas with no console warning or error.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.browser_helpers import chromium_exe, dump_dom, dvc_exe
from stages.analysis.plot_tables import COLUMNS, EVENTS, SERIES, run_plot_table

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / ".dvc" / "plots"
PAGE = ROOT / ".dvc" / "plots_html" / "offline.html"
RUN = "mod-hard-p405k-s0"


def template(name: str) -> dict:
    return json.loads((TEMPLATES / f"{name}.json").read_text())


def dvc_yaml() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())


def top_level_plots() -> dict:
    """Top-level ``plots`` of dvc.yaml as {id: properties}."""
    out = {}
    for entry in dvc_yaml()["plots"]:
        if isinstance(entry, str):
            out[entry] = {}
        else:
            (key, props), = entry.items()
            out[key] = props or {}
    return out


def layers(spec: dict) -> list[dict]:
    return spec.get("layer", [spec])


def filters(layer: dict) -> list[str]:
    return [t["filter"] for t in layer.get("transform", []) if "filter" in t]


def trajectory(steps=(0, 1, 2, 4, 8, 16, 32, 64)) -> pd.DataFrame:
    n = len(steps)
    rankme = np.linspace(30.0, 10.0, n)
    return pd.DataFrame({"step": list(steps), "test_acc": np.linspace(0, 1, n), "rankme_rel": rankme / rankme[0],
                         "rankme_last": rankme, "rankme_centred_rel": np.linspace(1, 0.5, n),
                         "rankme_centred_last": np.linspace(70, 35, n), "mean_dominance_last": 0.5,
                         "rankme_layer0": 1.0, "rankme_layer1": rankme})


# --- templates -------------------------------------------------------------------------------------

def test_run_template_symlog_step_distinct_colours_and_event_rules():
    spec = template("run")
    assert spec["data"] == {"values": "<DVC_METRIC_DATA>"}
    assert "<DVC_METRIC_TITLE>" in json.dumps(spec["title"])  # the run name is cut from DVC's title
    lines = [l for l in layers(spec) if (l["mark"]["type"] if isinstance(l["mark"], dict) else l["mark"]) == "line"]
    rules = [l for l in layers(spec) if isinstance(l["mark"], dict) and l["mark"]["type"] == "rule"]
    assert len(lines) == 1 and len(rules) == 1
    line, rule = lines[0], rules[0]
    # curves: step on a symlog axis, one colour per series, never the event rows
    assert line["encoding"]["x"]["field"] == "<DVC_METRIC_X>" and line["encoding"]["x"]["scale"]["type"] == "symlog"
    assert line["encoding"]["y"]["field"] == "<DVC_METRIC_Y>"
    colour = line["encoding"]["color"]
    assert colour["field"] == "series" and colour["scale"]["domain"] == list(SERIES.values())
    assert len(set(colour["scale"]["range"])) == len(SERIES)  # RankMe and accuracy never share a colour
    assert any("datum.event" in f and "!" in f for f in filters(line))
    # events: a vertical rule at event_step for every row whose event is set
    assert rule["encoding"]["x"]["field"] == "event_step" and rule["encoding"]["x"]["scale"]["type"] == "symlog"
    assert "y" not in rule["encoding"]  # full height
    assert rule["encoding"]["color"]["field"] == "event"
    assert rule["encoding"]["color"]["scale"]["domain"] == list(EVENTS)
    assert any("isValid(datum.event)" in f for f in filters(rule))
    assert spec["resolve"]["scale"]["color"] == "independent"  # event colours are not series colours


@pytest.mark.parametrize("name", ["landscape", "curves"])
def test_other_step_charts_are_symlog(name):
    x = [l["encoding"]["x"] for l in layers(template(name)) if "x" in l.get("encoding", {})]
    assert x and all(e["field"] == "<DVC_METRIC_X>" and e["scale"]["type"] == "symlog" for e in x)


# --- run_plot_table ------------------------------------------------------------------------------

def test_run_plot_table_long_format_with_event_rows():
    traj = trajectory()
    table = run_plot_table(traj, {"collapse": 1, "recovery": 8.0, "acquisition": None})
    assert list(table.columns) == COLUMNS
    curves, marks = table[table["event"].isna()], table[table["event"].notna()]
    assert sorted(curves["series"].unique()) == sorted(SERIES.values())
    for column, label in SERIES.items():
        rows = curves[curves["series"] == label]
        assert list(rows["step"]) == list(traj["step"]) and np.allclose(rows["value"], traj[column])
    assert curves["event_step"].isna().all()
    assert list(marks["event"]) == ["collapse", "recovery"]  # None: no rule
    assert list(marks["event_step"]) == [1, 8] and list(marks["step"]) == [1, 8]
    assert marks["series"].isna().all() and marks["value"].isna().all()
    assert table["step"].dtype == np.int64


def test_run_plot_table_csv_round_trip_keeps_rules_apart(tmp_path):
    table = run_plot_table(trajectory(), {"collapse": 1, "recovery": 4, "acquisition": 32})
    path = tmp_path / "run.csv"
    table.to_csv(path, index=False)
    text = path.read_text().splitlines()
    assert text[0] == ",".join(COLUMNS)
    assert text[-3:] == ["1,,,collapse,1", "4,,,recovery,4", "32,,,acquisition,32"]  # integers, not 1.0


def test_run_plot_table_missing_measures_and_bad_events():
    traj = trajectory().drop(columns=["rankme_centred_rel"])
    traj.loc[2, "test_acc"] = math.nan
    table = run_plot_table(traj, {})
    assert set(table["series"]) == {SERIES["rankme_rel"], SERIES["test_acc"]}
    assert len(table) == 2 * len(traj) - 1 and table["event"].isna().all()
    assert len(run_plot_table(traj, {"collapse": float("nan"), "recovery": pd.NA})) == len(table)
    with pytest.raises(ValueError, match="unknown event 'colapse'"):
        run_plot_table(traj, {"colapse": 3})
    with pytest.raises(ValueError, match="event 'recovery'"):
        run_plot_table(traj, {"recovery": 2.5})
    with pytest.raises(ValueError, match="'step'"):
        run_plot_table(traj.drop(columns=["step"]), {})


# --- dvc.yaml -----------------------------------------------------------------------------------

def test_dvc_yaml_declares_every_chart_once():
    plots = top_level_plots()
    runs = plots["plots/runs"]
    assert runs["template"] == "run" and runs["x"] == "step" and runs["y"] == "value"
    # DVCLive curves: one chart per metric, a line per run (stage plot_pages stacks them); no lr chart
    assert "dvclive" not in plots
    curves = {k: v for k, v in plots.items() if k.startswith("plots/curves/")}
    assert curves and all(v["template"] == "curves" and v["x"] == "step" for v in curves.values())
    assert not any("lr" in k for k in curves)
    assert list(plots)[:2] == ["plots/aligned/runs.csv", "plots/aligned/levels.csv"]  # the result first
    assert plots["plots/landscape"]["template"] == "landscape"
    assert not any(k == "plots/trajectories" or k.startswith("plots/trajectories/") for k in plots)
    for name, stage in dvc_yaml()["stages"].items():
        assert "plots" not in stage, f"stage {name} declares plots; declare them once, top-level"
    # the DVCLive directories are outputs (so the curves of an experiment travel with it)
    outs = [next(iter(o)) if isinstance(o, dict) else o for s in dvc_yaml()["stages"].values() for o in s.get("outs", [])]
    assert any(o.startswith("dvclive/") for o in outs)
    for name, spec in plots.items():
        if "template" in spec and not (TEMPLATES / f"{spec['template']}.json").is_file():
            assert spec["template"] in {"linear", "simple", "scatter", "smooth", "confusion", "bar_horizontal"}


# --- offline page -----------------------------------------------------------------------------------

def test_offline_page_inlines_vega_and_is_configured():
    page = PAGE.read_text(encoding="utf-8")
    assert "{plot_divs}" in page
    assert "{scripts}" not in page  # DVC would put its CDN <script src=...> tags there
    assert not re.search(r"<script[^>]+src=", page)
    for name in ("vega", "vega-lite", "vega-embed"):
        assert f"/* {name}.min.js */" in page
    assert 'version="5.' in page or 't.version="5.' in page
    config = (ROOT / ".dvc" / "config").read_text()
    assert re.search(r"^\[plots\]\s*\n\s*html_template = plots_html/offline.html\s*$", config, re.M)
    built = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_plots_html.py"), "--check"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


# --- DVC and a browser ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plots_repo(tmp_path_factory):
    """A scratch DVC repo with the repository's templates, page, config and plot declarations, and a
    small table for each declared chart kind."""
    exe = dvc_exe()
    if exe is None:
        pytest.skip("dvc is not installed")
    repo = tmp_path_factory.mktemp("plots_repo")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    subprocess.run([exe, "init", "--no-scm", "-q"], cwd=repo, check=True, env=env)
    shutil.copytree(TEMPLATES, repo / ".dvc" / "plots", dirs_exist_ok=True)
    shutil.copytree(PAGE.parent, repo / ".dvc" / "plots_html")
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    keep = {"plots/runs", "plots/curves/test_acc.csv", "plots/landscape"}
    plots = [e for e in dvc_yaml()["plots"] if isinstance(e, dict) and next(iter(e)) in keep]
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"plots": plots}, sort_keys=False))
    traj = trajectory()
    (repo / "plots" / "runs").mkdir(parents=True)
    run_plot_table(traj, {"collapse": 1, "recovery": 8, "acquisition": 32}).to_csv(
        repo / "plots" / "runs" / f"{RUN}.csv", index=False)
    (repo / "plots" / "curves").mkdir(parents=True)
    pd.DataFrame({"run": RUN, "step": traj["step"], "value": traj["test_acc"]}).to_csv(
        repo / "plots" / "curves" / "test_acc.csv", index=False)
    (repo / "plots" / "landscape").mkdir(parents=True)
    pd.DataFrame({"step": list(traj["step"]) * 2, "measure": ["llc"] * len(traj) + ["test_acc"] * len(traj),
                  "value": list(np.linspace(0, 5, len(traj))) + list(traj["test_acc"]),
                  "scaled": list(np.linspace(0, 1, len(traj))) * 2}).to_csv(
        repo / "plots" / "landscape" / f"{RUN}.csv", index=False)
    return repo, exe, env


def test_dvc_fills_the_run_chart(plots_repo):
    repo, exe, env = plots_repo
    out = subprocess.run([exe, "plots", "show", "--json"], cwd=repo, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)["data"]
    assert set(data) == {f"plots/runs/{RUN}.csv", "plots/curves/test_acc.csv", f"plots/landscape/{RUN}.csv"}
    spec = data[f"plots/runs/{RUN}.csv"][0]["content"]
    line, rule = spec["layer"][0], spec["layer"][1]
    assert line["encoding"]["x"]["field"] == "step" and line["encoding"]["y"]["field"] == "value"
    assert RUN in spec["title"]["text"]["expr"]
    rows = spec["data"]["values"]
    assert {r["event"] for r in rows if r["event"]} == set(EVENTS)
    assert sorted(int(r["event_step"]) for r in rows if r["event"]) == [1, 8, 32]
    assert {r["series"] for r in rows if not r["event"]} == set(SERIES.values())
    assert rule["encoding"]["x"]["field"] == "event_step"


def test_rendered_page_draws_every_chart_offline(plots_repo, tmp_path):
    browser = chromium_exe()
    if browser is None:
        pytest.skip("no Chromium on this machine")
    repo, exe, env = plots_repo
    out = subprocess.run([exe, "plots", "show", "-o", str(tmp_path / "html")], cwd=repo, capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr
    page = tmp_path / "html" / "index.html"
    html = page.read_text(encoding="utf-8")
    assert "cdn.jsdelivr" not in html and "/* vega.min.js */" in html
    ids = re.findall(r'<div id = "([^"]+)">', html)
    assert len(ids) == 3
    result = dump_dom(browser, page, tmp_path / "profile", 10000, 120)
    assert result.returncode == 0, result.stderr[-2000:]
    console = [l for l in result.stderr.splitlines() if "CONSOLE" in l]
    assert not console, "\n".join(console)
    dom = result.stdout
    for plot_id in ids:  # each chart's div holds a drawn canvas (vega-embed's default renderer)
        start = dom.index(f'id="{plot_id}"')
        following = [dom.find(f'id="{other}"', start + 1) for other in ids if other != plot_id]
        end = min([i for i in following if i > start] or [len(dom)])
        assert "<canvas" in dom[start:end], f"chart {plot_id} drew nothing"


# --- the page's first charts: aligned at acquisition, per level; DVCLive curves stacked ------------------

def test_aligned_table_known_answer():
    from stages.analysis.plot_tables import aligned_table

    traj = trajectory(steps=(0, 5, 10, 20))
    runs = [{"run": "a", "task": "copy", "level": "easy", "seed": 0, "trajectory": traj, "acquisition": 10},
            {"run": "b", "task": "copy", "level": "easy", "seed": 1, "trajectory": traj, "acquisition": None}]
    table = aligned_table(runs)
    assert set(table["run"]) == {"a"}  # the run that never acquires is left out
    acc = table[table["measure"] == SERIES["test_acc"]]
    assert acc["aligned_step"].tolist() == [-10, -5, 0, 10]
    assert acc["relative_step"].tolist() == [0.0, 0.5, 1.0, 2.0]
    assert np.allclose(acc["value"], traj["test_acc"]) and (table["config"] == "copy easy").all()


def test_level_summary_median_and_range_without_extrapolation():
    from stages.analysis.plot_tables import aligned_table, level_summary

    def run(name, acq, values):
        traj = pd.DataFrame({"step": [0, acq, 2 * acq], "test_acc": values})
        return {"run": name, "task": "mod", "level": "hard", "seed": 0, "trajectory": traj, "acquisition": acq}

    aligned = aligned_table([run("a", 10, [0.0, 0.5, 1.0]), run("b", 20, [0.2, 0.6, 0.8]),
                             run("c", 40, [0.1, 0.4, 0.9])])
    summary = level_summary(aligned, grid=(0.0, 0.5, 1.0, 2.0, 2.5)).set_index("relative_step")
    assert summary.loc[0.5, ["median", "low", "high", "runs"]].tolist() == pytest.approx([0.25, 0.25, 0.4, 3])
    assert summary.loc[1.0, ["median", "low", "high"]].tolist() == pytest.approx([0.5, 0.4, 0.6])
    assert summary.loc[2.0, "median"] == pytest.approx(0.9) and 2.5 not in summary.index  # no run reaches 2.5


def test_curves_table_stacks_runs():
    from stages.analysis.plot_tables import curves_table

    a = pd.DataFrame({"step": [0, 1], "acc": [0.1, 0.2]})
    b = pd.DataFrame({"step": [0, 2], "acc": [0.3, 0.4], "timestamp": [5, 6]})
    table = curves_table({"b": b, "a": a}, "test/acc")
    assert table.values.tolist() == [["a", 0, 0.1], ["a", 1, 0.2], ["b", 0, 0.3], ["b", 2, 0.4]]
    with pytest.raises(ValueError, match="one value column"):
        curves_table({"a": a.assign(other=1)}, "test/acc")
