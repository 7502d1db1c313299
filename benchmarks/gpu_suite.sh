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
# Steps (SUITE_STEPS="a b" runs those alone; each is skipped once the time left, SUITE_SECONDS,
# default 540, is under its limit):
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

step() {  # step NAME LIMIT_SECONDS COMMAND...: run it if the time left allows, log it, say how it ended
  local name=$1 limit=$2; shift 2
  if [[ -n "${SUITE_STEPS:-}" && " $SUITE_STEPS " != *" $name "* ]]; then return; fi
  if (( deadline - SECONDS < limit )); then echo "== $name: skipped ($(( deadline - SECONDS )) s left, needs $limit)"; return; fi
  local began=$SECONDS
  timeout "$limit" "$@" >"$work/$name.out" 2>"$work/$name.log"
  local rc=$?
  echo "== $name: exit $rc in $(( SECONDS - began )) s"
  grep -h '^{' "$work/$name.out" >>"$results/gpu_check.jsonl"
  { echo "== $name: exit $rc"; cat "$work/$name.out" "$work/$name.log"; } >>"$results/steps.log"
  tail -n 4 "$work/$name.out" "$work/$name.log"
}

step check-1.5b 150 python3 benchmarks/gpu_check.py
# 7B full weights fit neither one H200 (ZeRO-2: out of GPU memory at Adam's moments) nor, with
# --adam-offload, its 128 GiB host (killed): ~16 bytes a parameter must live somewhere; run it on
# 2+ GPUs (benchmarks/results/gpu_check-h200-2026-11-26.jsonl)
# from another folder, with no pythonpath: the checkout's own tracerl/ folder must not shadow the
# installed package, in pytest or in the commands the tests start
step trainer-tests 200 bash -c 'cd /tmp && exec python3 -m pytest -q -p no:cacheprovider --rootdir "$0" -c "$0/pyproject.toml" -o pythonpath= \
  --continue-on-collection-errors --timeout 60 "$0/tests/trainer/training" "$0/tests/trainer/test_flash_attn_stand_in.py"' "$PWD"
step check-7b-lora 150 python3 benchmarks/gpu_check.py --size 7b --lora-rank 16
cat "$results/gpu_check.jsonl"
