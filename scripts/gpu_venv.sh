#!/usr/bin/env bash
# Make a virtual environment that matches the GPU machine's packages (docs/performance.md, "On a GPU"), to run the
# test suite on them without that machine: torch 2.11.0, the machine's versions of what it holds, the wheels of
# scripts/gpu_wheels.sh on top, the package itself editable.
#
# Usage (from the repository root, with Python 3.12 and network):
#     bash scripts/gpu_venv.sh VENV_DIR [PYTHON]      # PYTHON: a Python 3.12 interpreter, python3.12 by default
#     VENV_DIR/bin/python -m pytest -x -q tests/test_modeling.py ...
# PyPI's torch for Linux is the CUDA build (it pulls ~3 GB of nvidia-* wheels) and runs on a CPU too.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:?usage: bash scripts/gpu_venv.sh VENV_DIR [PYTHON]}
python=${2:-python3.12}

"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q)
"${pip[@]}" torch==2.11.0
# The machine's versions where they were read there (docs/performance.md); sacrebleu, pyarrow, pandas, regex and the
# rest (matplotlib and tensorboard: the plot extra) are there in versions not read: pip takes the newest. pytest
# for the suite.
"${pip[@]}" transformers==5.17.0 accelerate==1.15.0 huggingface_hub==1.33.0 tokenizers==0.23.2 safetensors==0.8.0 numpy==2.5.2 \
    sacrebleu pyarrow pandas xxhash regex click joblib requests jinja2 tqdm typer pyyaml "fsspec[http]" matplotlib \
    tensorboard pytest
[ -d .whl ] || bash scripts/gpu_wheels.sh
"${pip[@]}" --no-index --no-deps .whl/*.whl
"${pip[@]}" --no-deps -e .
"$venv/bin/python" -m pip list 2>/dev/null | grep -iE '^(torch|transformers|huggingface.hub|tokenizers|safetensors|accelerate|numpy|datasets|evaluate|sacremoses|sacrebleu|pyarrow|fsspec|regex|pytest) '
