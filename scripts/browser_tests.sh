#!/usr/bin/env bash
# The opt-in browser tier: `specpick report` rendered in headless Chromium (tests/test_report_browser.py).
# Needs Debian's chromium: apt-get update && apt-get install -y chromium chromium-driver
# The screenshot lands in pytest's tmp folder; its path is printed (-s).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
exec "$PY" -m pytest -m browser tests/test_report_browser.py -s -q -p no:cacheprovider "$@"
