"""scripts/compare_results.py (the comparison of scripts/check_reproducible.sh) on constructed result trees."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from compare_results import compare, main  # noqa: E402

TABLE = "step,measure,value,scaled\n0,rankme,12.5,1.0\n10,rankme,2.5,0.0\n0,hessian_top1,,\n"


@pytest.fixture
def committed(tmp_path):
    root = tmp_path / "committed"
    (root / "metrics").mkdir(parents=True)
    (root / "plots" / "landscape").mkdir(parents=True)
    (root / "metrics" / "summary.json").write_text('{"consistent": 4, "runs": 12}\n')
    (root / "metrics" / "paper.md").write_text("| task | verdict |\n| copy | consistent |\n")
    (root / "plots" / "landscape" / "copy-easy.csv").write_text(TABLE)
    (root / "plots" / "figure.png").write_bytes(b"\x89PNG one")
    (root / "dvc.lock").write_text("md5: 1\n")
    return root


def rerun_of(committed: Path) -> Path:
    rerun = committed.with_name("rerun")
    shutil.copytree(committed, rerun)
    return rerun


def test_identical_trees_are_reproducible(committed):
    assert compare(committed, rerun_of(committed), lock=True) == []


def test_metrics_must_be_byte_identical(committed):
    rerun = rerun_of(committed)
    (rerun / "metrics" / "paper.md").write_text("| task | verdict |\n| copy | not_reproduced |\n")
    (rerun / "metrics" / "extra.json").write_text("{}")
    (rerun / "metrics" / "summary.json").unlink()
    assert compare(committed, rerun, lock=False) == ["metrics/summary.json: missing in the rerun",
                                                     "metrics/extra.json: not in the committed results",
                                                     "metrics/paper.md: differs"]


def test_plot_tables_within_a_thousandth_of_the_columns_scale(committed):
    rerun = rerun_of(committed)
    table = rerun / "plots" / "landscape" / "copy-easy.csv"
    # 12.5 * 1e-3 = 0.0125: 2.51 is within it, the figure is not compared, dvc.lock only with --lock
    table.write_text(TABLE.replace("2.5,", "2.51,"))
    (rerun / "plots" / "figure.png").write_bytes(b"\x89PNG two")
    (rerun / "dvc.lock").write_text("md5: 2\n")
    assert compare(committed, rerun, lock=False) == []
    assert compare(committed, rerun, lock=True) == [
        "dvc.lock: differs (runtime.cpu_paths is portable: the bits must match)"]
    table.write_text(TABLE.replace("2.5,", "2.52,"))  # 0.02 > 0.0125
    assert compare(committed, rerun, lock=False) == [
        "plots/landscape/copy-easy.csv: column value: differs by up to 0.02 (tolerance 0.001 x 12.5)"]


@pytest.mark.parametrize("table,phrase", [
    (TABLE.replace("0,hessian_top1,,", "0,hessian_top1,1.0,"), "column value: NaN in other rows"),
    (TABLE.replace("10,rankme", "10,llc"), "column measure: other values"),
    (TABLE + "20,rankme,1.0,0.0\n", "4 rows instead of 3"),
    (TABLE.replace("scaled", "share"), "columns ['step', 'measure', 'value', 'share'] instead of "
                                       "['step', 'measure', 'value', 'scaled']"),
])
def test_plot_table_differences_are_named(committed, table, phrase):
    rerun = rerun_of(committed)
    (rerun / "plots" / "landscape" / "copy-easy.csv").write_text(table)
    assert compare(committed, rerun, lock=False) == [f"plots/landscape/copy-easy.csv: {phrase}"]


def test_verdict_line_and_exit_status(committed, capsys):
    rerun = rerun_of(committed)
    assert main([str(committed), str(rerun)]) == 0
    assert capsys.readouterr().out == "REPRODUCIBLE: metrics identical, plot tables within 0.001\n"
    (rerun / "metrics" / "paper.md").write_text("changed")
    assert main([str(committed), str(rerun), "--lock"]) == 1
    assert capsys.readouterr().out == "metrics/paper.md: differs\nNOT REPRODUCIBLE: 1 difference(s)\n"


def test_check_reproducible_script_reads_the_mode_and_compares(tmp_path):
    script = ROOT / "scripts" / "check_reproducible.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "scripts/compare_results.py" in text and "--lock" in text
    read_mode = text[text.index("mode=$(awk"):].split("\n")[0][len("mode=$("):-1]
    for yaml_text, mode in [("runtime:\n  threads: 2\n  cpu_paths: portable\n", "portable"),
                            ("runtime:\n  threads: 2\n  cpu_paths: native\ngrid: {}\n", "native"),
                            ("runtime:\n  threads: 2\nother:\n  cpu_paths: portable\n", "")]:
        (tmp_path / "params.yaml").write_text(yaml_text)
        out = subprocess.run(["bash", "-c", read_mode], cwd=tmp_path, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == mode
