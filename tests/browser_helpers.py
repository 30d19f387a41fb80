"""DVC and a headless Chromium for the tests that render the plots page offline
(tests/test_plot_specs.py, tests/test_plots_page.py)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def dvc_exe():
    """The dvc executable beside this Python (or on PATH), or None."""
    exe = shutil.which("dvc") or str(Path(sys.executable).with_name("dvc"))
    return exe if Path(exe).exists() else None


def chromium_exe():
    """A Chromium-family browser on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    return None


def dump_dom(browser: str, page: Path, profile: Path, budget_ms: int, timeout: int) -> subprocess.CompletedProcess:
    """``page`` rendered headless with no network (every host unresolvable) and ``budget_ms`` of virtual
    time; stdout is the DOM after the scripts ran, stderr the browser's log (console lines included)."""
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--virtual-time-budget={budget_ms}",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
         "--user-data-dir=" + str(profile), "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=timeout)
