#!/usr/bin/env bash
# Download into .whl/ (emptied first) the wheels the GPU machine needs to run the package (docs/performance.md,
# "On a GPU").
#
# That machine has no network. Its Python 3.12 holds torch 2.11.0, transformers 5.17.0, huggingface_hub 1.33.0,
# tokenizers 0.23.2, safetensors 0.8.0, accelerate 1.15.0, numpy 2.5.2 and sacrebleu, pyarrow, pandas, fsspec,
# xxhash, regex, click, joblib, requests, jinja2, tqdm, typer, ... ; it lacks datasets, evaluate, sacremoses, dill and
# multiprocess. The package runs on the machine's transformers and huggingface_hub (pyproject.toml declares
# transformers 5.17 and huggingface_hub 1.33 as its floors), so the wheels are those five, nothing else. What is there
# in a version not read (pyarrow: datasets 5.2 needs >= 24) is listed at the end, unchecked.
#
# Usage (from the repository root): bash scripts/gpu_wheels.sh
# Then carry `.whl` in the device call; the device command line is in docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=(
    datasets==5.2.0
    evaluate==0.4.6
    sacremoses==0.2.0
    dill==0.4.1          # datasets: dill<0.4.2
    multiprocess==0.70.19 # datasets: multiprocess<0.70.20
)

rm -rf .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${WHEELS[@]}"

# Every Requires-Dist of the carried wheels (for Python 3.12 on Linux, no extras) must be carried or on the machine,
# in a version that satisfies it where that version is known. Names with an unknown version there are listed.
python3 - <<'EOF'
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# Versions on the machine as read there (KINDS.md's pip list of 2026-11); None: there, version not read.
machine = {"torch": "2.11.0", "transformers": "5.17.0", "huggingface-hub": "1.33.0", "tokenizers": "0.23.2",
           "safetensors": "0.8.0", "accelerate": "1.15.0", "numpy": "2.5.2"}
machine |= dict.fromkeys(
    ["sacrebleu", "pyarrow", "pandas", "fsspec", "aiohttp", "xxhash", "regex", "click", "joblib", "requests",
     "jinja2", "tqdm", "typer", "filelock", "packaging", "pyyaml", "typing-extensions", "httpx", "hf-xet", "anyio", "idna", "h11"])
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython", "extra": ""}

carried, needs = {}, []
for path in sorted(Path(".whl").glob("*.whl")):
    with zipfile.ZipFile(path) as wheel:
        (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        msg = Parser().parsestr(wheel.read(meta).decode())
    name = canonicalize_name(msg["Name"])
    if name in carried:
        sys.exit(f"two versions of {name} in .whl/: keep one")
    carried[name] = msg["Version"]
    needs += [(name, Requirement(r)) for r in msg.get_all("Requires-Dist") or []]

missing, unchecked = [], set()
for who, req in needs:
    if req.marker is not None and not req.marker.evaluate(env):
        continue
    name = canonicalize_name(req.name)
    have = carried.get(name, machine.get(name, "absent"))
    if have == "absent":
        missing.append(f"{who} needs {req}: neither carried nor on the machine")
    elif have is None:
        if req.specifier:
            unchecked.add(f"{name}{req.specifier}")
    elif not req.specifier.contains(Version(have), prereleases=True):
        missing.append(f"{who} needs {req}: {name} {have} is there")
for line in missing:
    print(line)
print("carried:", ", ".join(f"{n} {v}" for n, v in carried.items()))
if unchecked:
    print("versions there not read, not checked:", ", ".join(sorted(unchecked)))
sys.exit(1 if missing else 0)
EOF

du -cb .whl/*.whl | tail -1 | awk '{printf "total %.1f MiB in .whl/ (the device call carries at most 64 MiB with the tree)\n", $1 / 1048576}'
