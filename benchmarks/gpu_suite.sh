#!/usr/bin/env bash
# The GPU check in one command, for a GPU machine that has torch, transformers and peft but
# nothing else of tracerl's (and no network): installs the wheels carried in .whl/ (the recipe
# is in benchmarks/gpu_check.py's docstring), tracerl and its test equipment into /tmp/site,
# then runs each check below with its own time limit, so that one that runs out of memory or
# time leaves the others' figures. Every figure line goes to RESULTS/gpu_check.jsonl, every
# step's output to RESULTS/steps.log.
#
#     bash benchmarks/gpu_suite.sh [RESULTS]             # default RESULTS: ${OUT:-/tmp/tracerl-gpu-suite}
#
# Steps (SUITE_STEPS="a b" runs those alone; SUITE_SECONDS, default 540, bounds the whole run:
# a step gets its own limit or the time left, whichever is less, and none starts with under 60 s):
# 1.5B full weights on both backends; the trainer tests on CUDA; 7B LoRA r16 on both backends.
set -uo pipefail
cd "$(dirname "$0")/.."
results="${1:-${OUT:-/tmp/tracerl-gpu-suite}}"
work=$(mktemp -d)
mkdir -p "$results"
deadline=$(( SECONDS + ${SUITE_SECONDS:-540} ))

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . ./testing \
  >"$work/install.log" 2>&1 || { echo "install failed:"; cat "$work/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/.whl/site
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$results/device.txt"

step() {  # step NAME LIMIT_SECONDS COMMAND...: run it within the time left, log it as it runs, say how it ended
  local name=$1 limit=$2; shift 2
  if [[ -n "${SUITE_STEPS:-}" && " $SUITE_STEPS " != *" $name "* ]]; then return; fi
  local left=$(( deadline - SECONDS ))
  if (( left < 60 )); then echo "== $name: skipped (${left} s left)"; return; fi
  (( limit > left )) && limit=$left  # a shorter run still leaves figures; a skipped one none
  local began=$SECONDS
  echo "== $name (limit ${limit} s)" >>"$results/steps.log"
  # output goes to RESULTS as it comes: a call cut short by its caller still returns what ran
  timeout "$limit" "$@" 2>>"$results/steps.log" | tee "$work/$name.out" >>"$results/steps.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc in $(( SECONDS - began )) s" | tee -a "$results/steps.log"
  grep -h '^{' "$work/$name.out" >>"$results/gpu_check.jsonl"
  tail -n 4 "$work/$name.out"
}

step check-1.5b 150 python3 benchmarks/gpu_check.py
# 7B full weights fit neither one H200 (ZeRO-2: out of GPU memory at Adam's moments) nor, with
# --adam-offload, its 128 GiB host (killed): ~16 bytes a parameter must live somewhere; run it on
# 2+ GPUs (benchmarks/results/gpu_check-h200-2026-11-26.jsonl)
# from another folder, with no pythonpath: the tests and the commands they start use the installed package
step trainer-tests 200 bash -c 'cd /tmp && exec python3 -m pytest -q -p no:cacheprovider --rootdir "$0" -c "$0/pyproject.toml" -o pythonpath= \
  --continue-on-collection-errors --timeout 60 "$0/tests/trainer/training" "$0/tests/trainer/test_flash_attn_stand_in.py"' "$PWD"
step check-7b-lora 150 python3 benchmarks/gpu_check.py --size 7b --lora-rank 16
cat "$results/gpu_check.jsonl"
