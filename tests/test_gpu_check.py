"""benchmarks/gpu_check.py on CPU: the printed check, the FLOP formula, the estimate, bad arguments."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def number(out: str, label: str) -> float:
    match = re.search(rf"^{re.escape(label)}:\s+([-+0-9.e]+)", out, re.M)
    assert match, f"no line '{label}:' in\n{out}"
    return float(match.group(1))


def test_quick_cpu_check_prints_sane_numbers(gc, capsys):
    assert gc.main(["--device", "cpu", "--quick", "--estimate-presets", "p405k"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^device: cpu \(\d+ torch thread", out, re.M)
    assert "preset: p405k  n_params: " in out and "non_embedding_params: 396,800" in out
    assert "task: mod-hard  sequence length: 5 (model context T = 4)  batch: 64" in out
    assert number(out, "train tokens/s") > 0
    # 8 quick steps of p405k on mod-hard (T = 4) at batch 64: 6*N*B*T + 12*L*d*T*B*T
    assert number(out, "model FLOPs/step") == pytest.approx(612_630_528, rel=1e-3)
    assert number(out, "achieved model FLOP/s") > 0
    assert 0 < number(out, "MFU") < 1.5
    assert "measured fp32 rate of a 1024x1024 torch.mm" in out
    assert "peak memory: n/a on cpu" in out
    assert re.search(r"^checkpoint step 0: eval [0-9.]+s  extract [0-9.]+s  geometry [0-9.]+s", out, re.M)
    assert re.search(r"^checkpoint step 8: ", out, re.M)
    assert number(out, "eval time per checkpoint") > 0
    assert number(out, "RankMe cost ratio") > 0
    assert "mod-hard budget 1000 steps / 64 checkpoints" in out
    assert re.search(r"^estimate p405k: 4 runs", out, re.M)
    assert re.search(r"^estimate total: [0-9.e+-]+ device-hours for 4 runs", out, re.M)


def test_flop_formula_on_a_known_config(gc):
    model = gc.GPT(gc.model_config("p405k", vocab_size=20, block_size=10))
    # per block: ln1 2d + qkv 3d^2+3d + proj d^2+d + ln2 2d + mlp 4d^2+4d + 4d^2+d = 12d^2 + 13d; plus ln_f 2d
    d, n_layer = 128, 2
    assert gc.non_embedding_params(model) == n_layer * (12 * d * d + 13 * d) + 2 * d == 396_800
    assert model.num_params() == 396_800 + 20 * d + 10 * d  # + token and position embeddings (head tied)
    # batch 2 at context 10: 6 * 396800 * 20 tokens + 12 * 2 * 128 * 10 * 20 tokens
    assert gc.train_flops_per_step(396_800, 2, 128, 10, 2) == 47_616_000 + 614_400 == 48_230_400
    assert 3 * gc.forward_flops(396_800, 2, 128, 10, 2) == 48_230_400
    n_params, n_non_emb, _ = gc.counted_model("p405k", 20, 10)  # meta-device count = the real model's
    assert (n_params, n_non_emb) == (model.num_params(), 396_800)


@pytest.mark.parametrize("name, tflops", [
    ("NVIDIA H100 80GB HBM3", 989), ("NVIDIA H100 PCIe", 756), ("NVIDIA H100 NVL", 835), ("NVIDIA H200", 989),
    ("NVIDIA A100-SXM4-80GB", 312), ("NVIDIA L40S", 362), ("NVIDIA L4", 121), ("NVIDIA A10G", 125),
    ("NVIDIA GeForce RTX 4090", 165), ("NVIDIA GeForce RTX 3060", None)])
def test_peak_table(gc, name, tflops):
    peak, label = gc.peak_from_name(name)
    assert peak == (None if tflops is None else tflops * 1e12)
    assert (label == "unknown") == (tflops is None)


def test_flop_count_estimate_of_the_full_grid(gc, capsys):
    params = gc.Params(None)
    tasks, levels = list(gc.TASK_NAMES), list(gc.LEVELS)
    result = gc.estimate(params, torch.device("cpu"), "fp32", None, 0, list(gc.PAPER_SIZES), tasks, levels,
                         989e12, 1)
    out = capsys.readouterr().out
    assert result["n_runs"] == 144 and "= 144 runs" in out
    steps = sum(params.train_settings(t, lv)["steps"] for t in tasks for lv in levels)
    tiny = result["per_preset"]["p405k"]
    assert tiny["steps"] == steps
    # p405k is overhead-bound on an H200: every step costs the assumed floor
    assert tiny["train_s"] == pytest.approx(steps * gc.ASSUMED_FLOOR_MS / 1e3)
    big = result["per_preset"]["p151m"]
    assert big["train_s"] == pytest.approx(big["train_flops"] / (gc.ASSUMED_MFU * 989e12))
    assert result["total_hours"] == pytest.approx(sum(p["hours"] for p in result["per_preset"].values()))
    assert re.search(r"^packing: runs per GPU p405k \d", out, re.M)
    assert "python -m stages.cluster repro --workers 8" in out


@pytest.mark.parametrize("flag, value, message", [
    ("--preset", "p999", "unknown preset 'p999'"), ("--task", "divide", "unknown task 'divide'"),
    ("--level", "extreme", "unknown level 'extreme'"), ("--steps", "0", "'--steps' must be at least 1")])
def test_bad_arguments_are_one_line_errors(gc, capsys, flag, value, message):
    assert gc.main(["--device", "cpu", flag, value]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_bad_preset_from_the_command_line():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--preset", "p999", "--device", "cpu"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: unknown preset 'p999'")


def test_a_size_that_does_not_fit_stops_before_training(gc, capsys, monkeypatch):
    from stages.training import memory

    monkeypatch.setattr(memory, "available_bytes", lambda device: 2**20)  # 1 MiB free
    assert gc.main(["--device", "cpu", "--quick", "--no-estimate"]) == 2
    captured = capsys.readouterr()
    assert "steps/s" not in captured.out and "tokens/s" not in captured.out  # nothing trained
    err = captured.err.strip()
    assert "\n" not in err and err.startswith("error: model 'p405k' does not fit cpu: training on mod-hard (fp32) "
                                              "needs an estimated ")
    assert err.endswith(", 0.00 GiB free; use smaller grid.models or train.defaults.batch_size")
