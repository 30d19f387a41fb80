"""The plots page as a reader sees it: `dvc plots show` of the committed plots/ tables, opened offline in
headless Chromium (Debian's ``chromium``; skipped with a reason where it is not installed).

Every chart must draw marks (no empty chart, no NaN coordinate), the browser console must stay
silent (no error, no warning: Vega warns on an empty or infinite extent), and the page must lead
with the result: the paper-style figure first, then the per-level summaries, then the per-run charts;
every title is a run id or words, never a file path.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.browser_helpers import chromium_exe, dump_dom, dvc_exe

ROOT = Path(__file__).resolve().parents[1]

# Wraps vegaEmbed (inlined in the page's head) before the charts' scripts call it: SVG renderer, and
# per chart the number of drawn mark items, those with a NaN coordinate and the title texts; console
# errors and warnings are collected too. The report lands in <pre id="chart-report"> after load.
REPORTER = """
<script>
window.__report = {charts: [], console: []};
(function () {
  const original = window.vegaEmbed;
  const pending = [];
  for (const level of ["error", "warn"]) {
    const keep = console[level].bind(console);
    console[level] = function (...args) { window.__report.console.push(level + ": " + args.join(" ")); keep(...args); };
  }
  window.addEventListener("error", e => window.__report.console.push("uncaught: " + e.message));
  function walk(node, acc) {
    if (node.marktype !== undefined) {
      const role = node.role || "";
      for (const item of node.items || []) {
        if (role === "mark" && node.marktype !== "group" && node.marktype !== "text") {
          acc.marks += 1;
          if ([item.x, item.y, item.x2, item.y2].some(v => typeof v === "number" && isNaN(v))) acc.nan += 1;
        }
        if (role === "title-text" && item.text) acc.titles.push([].concat(item.text).join(" "));
        if (item.items) for (const child of item.items) walk(child, acc);
      }
    }
    return acc;
  }
  window.vegaEmbed = function (el, spec, opts) {
    const record = {id: el.replace(/^#/, ""), marks: 0, nan: 0, titles: [], error: null};
    window.__report.charts.push(record);
    const promise = original(el, spec, Object.assign({}, opts || {}, {renderer: "svg", actions: false}))
      .then(result => Object.assign(record, walk(result.view.scenegraph().root, {marks: 0, nan: 0, titles: []})))
      .catch(e => { record.error = String(e); });
    pending.push(promise);
    return promise;
  };
  window.addEventListener("load", () => Promise.all(pending).then(() => {
    const pre = document.createElement("pre");
    pre.id = "chart-report";
    pre.textContent = JSON.stringify(window.__report);
    document.body.appendChild(pre);
  }));
})();
</script>
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    browser, exe = chromium_exe(), dvc_exe()
    if browser is None:
        pytest.skip("no Chromium on this machine (Debian: apt-get install -y chromium)")
    if exe is None:
        pytest.skip("dvc is not installed")
    repo = tmp_path_factory.mktemp("page")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    subprocess.run([exe, "init", "--no-scm", "-q"], cwd=repo, check=True, env=env)
    shutil.copytree(ROOT / ".dvc" / "plots", repo / ".dvc" / "plots", dirs_exist_ok=True)
    shutil.copytree(ROOT / ".dvc" / "plots_html", repo / ".dvc" / "plots_html")
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    shutil.copytree(ROOT / "plots", repo / "plots")  # the committed tables
    plots = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"plots": plots}, sort_keys=False))
    out = subprocess.run([exe, "plots", "show", "-o", str(repo / "html")], cwd=repo, capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    page = repo / "html" / "index.html"
    html = page.read_text(encoding="utf-8")
    assert "cdn.jsdelivr" not in html and "/* vega.min.js */" in html
    body = html.rindex("<body>") + len("<body>")
    page.write_text(html[:body] + REPORTER + html[body:], encoding="utf-8")
    result = dump_dom(browser, page, repo / "profile", 30000, 300)
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="chart-report">(.*?)</pre>', result.stdout, re.S)
    assert found, "the page never finished drawing"
    data = json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                      .replace("&amp;", "&"))
    data["ids"] = re.findall(r'<div id = "([^"]+)">', html)
    data["images"] = re.findall(r'<img[^>]+src="([^"]+)"', html)
    data["stderr"] = [line for line in result.stderr.splitlines() if "CONSOLE" in line]
    return data


def test_every_chart_draws_marks_and_the_console_is_silent(report):
    assert report["charts"], "no chart on the page"
    assert len(report["charts"]) == len(report["ids"])  # every chart div ran vegaEmbed
    assert not report["console"] and not report["stderr"], "\n".join(report["console"] + report["stderr"])
    for chart in report["charts"]:
        assert chart["error"] is None, (chart["id"], chart["error"])
        assert chart["marks"] > 0, f"chart {chart['id']} is empty"
        assert chart["nan"] == 0, f"chart {chart['id']}: {chart['nan']} marks at a NaN coordinate"


def test_the_page_leads_with_the_result_and_titles_are_words(report):
    ids = [c["id"] for c in report["charts"]]
    assert ids[0].startswith("plots_aligned_runs") and ids[1].startswith("plots_aligned_levels")
    first_run = next(i for i, c in enumerate(ids) if c.startswith("plots_runs_"))
    first_curve = next(i for i, c in enumerate(ids) if c.startswith("plots_curves_"))
    assert max(i for i, c in enumerate(ids) if c.startswith(("plots_aligned", "plots_sensitivity"))) < first_run
    assert first_run < first_curve
    assert not any("lr" in c.split("_") for c in ids)  # the learning-rate schedule is not drawn
    curves = [c for c in ids if c.startswith("plots_curves_")]
    assert len(curves) == 5  # one chart per metric, every run in it
    for chart in report["charts"]:
        assert chart["titles"], f"chart {chart['id']} has no title"
        for title in chart["titles"]:
            assert "/" not in title.split(" / ")[0] and not re.search(r"\.(csv|tsv|json)\b", title), title
        if chart["id"].startswith("plots_runs_"):
            run = chart["id"][len("plots_runs_"):-len("_csv")]
            assert run in chart["titles"]
