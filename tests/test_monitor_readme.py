"""The monitor examples (docs/monitor.md) run as written (so they cannot rot), and the warning benchmark runs."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd

from stages.monitor import measure_dir

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Beyond the paper: a RankMe early-warning monitor for any training run"


def section() -> str:
    text = (ROOT / "docs" / "monitor.md").read_text()
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    return text[start:] if end < 0 else text[start:end]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section(), flags=re.S)


def test_readme_examples_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the examples write monitor-demo/ under the working directory
    python = blocks("python")
    assert len(python) == 2
    for code in python:
        exec(compile(code, "docs/monitor.md", "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    assert "collapse of rankme_centred layer 2" in out
    commands = [line.split("#")[0].strip() for code in blocks("bash") for line in code.splitlines()
                if line.startswith("rankme-monitor ")]
    assert commands
    for command in commands:  # the console entry point pyproject.toml names
        assert measure_dir.main(shlex.split(command)[1:]) == 0
    frame = pd.read_csv(tmp_path / "monitor-demo" / "measured" / "measures" / "monitor-demo.csv")
    assert frame["step"].unique().tolist() == [50, 100]


def test_the_console_entry_point_and_the_trainer_extra_are_declared():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["rankme-monitor"] == "stages.monitor.measure_dir:main"
    assert any(r.replace(" ", "").startswith("accelerate>=1.1") for r in project["optional-dependencies"]["trainer"])
    assert '".[trainer]"' in section()


def test_warning_benchmark_runs_on_real_tables(tmp_path):
    data = Path(__file__).parent / "data" / "monitor"
    out = tmp_path / "runs.csv"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "monitor_warning.py"), str(data),
                             "--resamples", "20", "--csv", str(out)], capture_output=True, text=True, cwd=tmp_path,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    runs = pd.read_csv(out)
    mod = runs.set_index("run").loc["mod-hard-p405k-s0"]
    assert (mod["warning_step"], mod["acquisition_step"], mod["lead_steps"]) == (149, 295, 146)
    assert runs["agree"].astype(str).eq("True").all()
    assert "median_lead_steps" in result.stdout and "false_alarms" in result.stdout
