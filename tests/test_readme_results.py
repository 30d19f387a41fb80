"""The README's result table is generated from metrics/paper.csv (scripts/readme_results.py) and current."""
import importlib.util

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("readme_results", ROOT / "scripts" / "readme_results.py")
readme_results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_results)


def test_the_committed_tables_are_current():
    files = [p for p in (ROOT / "README.md",)
             if p.is_file() and readme_results.BEGIN in p.read_text()]
    assert files, "no file holds the result table's markers"
    assert readme_results.main(["--check", *map(str, files)]) == 0, "run python scripts/readme_results.py"


def test_table_and_markers(tmp_path):
    csv = tmp_path / "paper.csv"
    csv.write_text("claim,measure,grouping,paper,this_run,n,verdict,needs,rule,how\n"
                   'floor,raw RankMe,mod,~2.0,"3.29 [2.45, 4.26]",6 runs,not reproduced,,r,h\n'
                   "gap,rankme,a|b,49K,,-,not measurable,needs x,r,h\n")
    assert readme_results.table(csv) == (
        "| claim | measure | grouping | paper | this pipeline (95% interval) | verdict |\n"
        "|---|---|---|---|---|---|\n"
        "| floor | raw RankMe | mod | ~2.0 | 3.29 [2.45, 4.26] | not reproduced |\n"
        "| gap | rankme | a\\|b | 49K | - | not measurable |")
    doc = tmp_path / "README.md"
    doc.write_text(f"head\n{readme_results.BEGIN}\nold\n{readme_results.END}\ntail\n")
    assert readme_results.main(["--check", "--metrics", str(csv), str(doc)]) == 1
    assert readme_results.main(["--metrics", str(csv), str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith(f"head\n{readme_results.BEGIN}\n| claim |") and text.endswith(f"{readme_results.END}\ntail\n")
    assert "old" not in text and readme_results.main(["--check", "--metrics", str(csv), str(doc)]) == 0
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit, match="must hold"):
        readme_results.main(["--metrics", str(csv), str(doc)])
