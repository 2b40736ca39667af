#!/usr/bin/env bash
# The reference engine on a CUDA machine, in at most ~5 minutes; every file it writes lands in one
# folder (default gpu-run/, or $1), to be committed as data:
#   env.txt                      nvidia-smi, torch and CUDA versions
#   pytest.txt, pytest.xml       tests/test_gpu.py (marker gpu): greedy identity of every built-in
#                                strategy on the device, the device against the CPU, one profile cell
#   generate-eagle3.json         specpick generate on the device (the zoo target, EAGLE-3, T = 0)
#   zoo-reference.json           specpick calibrate --forward reference on the zoo (the reference loop's
#                                forward and host costs on this GPU, every drafter)
#   $SHAPE-hf.json               specpick calibrate --forward hf on a random Llama-3.2-1B shape (eager
#                                PyTorch: expect the fit's note that launches set every point)
#   summary.txt                  each step's exit code and seconds
#
# Needs: a Python with a CUDA build of torch and this project installed (pip install -e '.[torch,test]'),
# and a built zoo: SPECPICKER_ZOO_DIR pointing at one (a copy of ~/.cache/specpicker/zoo, 8 MB, carried
# along), else the first step builds it (about 6 minutes on 2 cores, which breaks the 5-minute budget).
# A step that fails is recorded and the next one runs; the script exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-gpu-run}"
PY="${PYTHON:-python}"
DEVICE="${DEVICE:-cuda}"        # DEVICE=cpu SHAPE=llama-68m TIMEOUT_SCALE=8: a dry run of this script on a CPU
SHAPE="${SHAPE:-llama-3.2-1b}"
mkdir -p "$OUT"
: > "$OUT/summary.txt"
FAILED=0
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1

step() {  # step NAME TIMEOUT STDOUT COMMAND...: run it under a timeout (times TIMEOUT_SCALE), its output
           # to STDOUT (a file under OUT, or - for the terminal); record exit code and seconds
    local name="$1" limit=$(( $2 * ${TIMEOUT_SCALE:-1} )) to="$3" start rc
    shift 3
    start=$(date +%s)
    echo "[gpu-check $(date +%H:%M:%S)] $name ..."
    if [ "$to" = - ]; then timeout "$limit" "$@"; else timeout "$limit" "$@" > "$OUT/$to"; fi
    rc=$?
    printf '%-22s exit %3d  %4d s\n' "$name" "$rc" $(( $(date +%s) - start )) | tee -a "$OUT/summary.txt"
    [ "$rc" -eq 0 ] || FAILED=1
}

SPECPICK=("$PY" -c "import sys; from picker.cli.main import app; sys.argv[0] = 'specpick'; app()")

{ nvidia-smi; "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
  'device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"; } > "$OUT/env.txt" 2>&1

SPECPICKER_TEST_DEVICE="$DEVICE" step pytest-gpu 150 pytest.txt "$PY" -m pytest -q -m gpu tests/test_gpu.py \
    --junitxml="$OUT/pytest.xml"
step generate 30 generate-eagle3.json "${SPECPICK[@]}" generate --model zoo --strategy eagle3 --device "$DEVICE" --prompt "def fibonacci(n):" \
    --max-new-tokens 32 --format json
step calibrate-zoo 90 - "${SPECPICK[@]}" calibrate --model zoo --draft zoo --eagle3 zoo --medusa zoo --forward reference \
    --device "$DEVICE" --hardware "${HARDWARE:-$([ "$DEVICE" = cpu ] && echo cpu)}" --batches 1,2,4,8,16 --tokens 1,2,3,5,9 --contexts 64,256 --repeats 3 --warmup 1 \
    --loop-tokens 8 --quiet --out "$OUT/zoo-reference.json"
step calibrate-eager 60 - "${SPECPICK[@]}" calibrate --shape "$SHAPE" --forward hf --device "$DEVICE" \
    --hardware "${HARDWARE:-$([ "$DEVICE" = cpu ] && echo cpu)}" --batches 1,4,16,64 --tokens 1,4,16 --contexts 1024 \
    --repeats 5 --warmup 2 --quiet --out "$OUT/$SHAPE-hf.json"
exit "$FAILED"
