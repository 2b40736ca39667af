#!/usr/bin/env bash
# The slow tier: the zoo-sized checks kept out of the default suite -- the conformance suite's
# 60 000-sample distribution test per strategy (a one-point shift in any bin fails it), the zoo
# heads' greedy/acceptance checks, the GPU-calibration dry run. Hours on 2 cores, minutes on more.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
exec "$PY" -m pytest -q -m slow "$@"
