#!/usr/bin/env bash
# The engine-validated tier, as .ci/run runs it after the default suite: install the engines
# (skipped when already there), then run `pytest -m engines`: every SGLang config we emit through
# SGLang 0.5.23's resolve_once(), every vLLM config through vLLM 0.32.0's config code, real vLLM CPU
# servers for ngram / draft_model, llama-server against its counters, and greedy agreement of both
# engines with the reference engine.
#
#   bash scripts/run-engine-tests.sh            # setup + tier; prints how long each part took
#   bash scripts/run-engine-tests.sh -k sglang  # extra arguments go to pytest
#   SPECPICKER_LLAMACPP=0 bash scripts/run-engine-tests.sh   # skip the llama.cpp build (its tests skip)
#
# Uses $SPECPICKER_ENGINES_DIR (default <repo>/.engines) and the project's venv python
# ($PYTHON, default: <repo>/.venv, else python3 on PATH with specpicker installed).
set -euo pipefail

main() {
    local repo python start setup_s tier_s rc
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    python="${PYTHON:-$repo/.venv/bin/python}"
    [[ -x "$python" ]] || python=python3
    cd "$repo"
    start=$(date +%s)
    bash scripts/engines-setup.sh sglang
    bash scripts/engines-setup.sh vllm
    if [[ "${SPECPICKER_LLAMACPP:-1}" == 1 ]]; then
        bash scripts/engines-setup.sh llamacpp  # else its tests skip, naming this command
    fi
    setup_s=$(( $(date +%s) - start ))
    start=$(date +%s)
    rc=0
    "$python" -m pytest -m engines "$@" || rc=$?  # every test marked engines, ours and others
    tier_s=$(( $(date +%s) - start ))
    echo "engine tier: setup ${setup_s} s, tests ${tier_s} s, exit ${rc}"
    return "$rc"
}

main "$@"
