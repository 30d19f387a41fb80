#!/usr/bin/env bash
# Headless Chromium for tests/test_plots_page.py (the plots page rendered offline in a real browser).
# Installs Debian's chromium where it is missing and apt-get can run; otherwise says that the browser
# test will be skipped. Never fails the command it is part of.
command -v chromium >/dev/null 2>&1 && exit 0
S=; [ "$(id -u)" = 0 ] || S="sudo -n"
if command -v apt-get >/dev/null 2>&1 && { $S apt-get update -qq && $S apt-get install -y -qq chromium; } >/dev/null 2>&1; then
  exit 0
fi
echo "no chromium (Debian: apt-get install -y chromium): tests/test_plots_page.py will be skipped" >&2
exit 0
