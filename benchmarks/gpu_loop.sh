#!/usr/bin/env bash
# The calc agent's loop on SmolLM2-135M-Instruct on a GPU machine: the README's real-model command,
# with the built-in server serving (the machine has no vLLM: its CUDA build is far over what one
# device call can carry) and the torch backend training, next to its shuffled-reward control.
#
# The machine has torch, transformers, pyarrow and matplotlib but nothing else of tracerl's and no
# network. What it needs travels with the calls (64 MiB each): the wheels in .whl/ (pip download
# --python-version 3.12 ..., as for gpu_suite.sh; tracerl's dependencies it lacks, AutoGen, DuckDB,
# gguf) and the GGUF, 98 MB, split in three (.gpu/a/part1, .gpu/b/part2, .gpu/c/part3) over three
# calls made back to back while the machine stays warm:
#
#     bash benchmarks/gpu_loop.sh stash              # calls 1 and 2: keep the carried part (and install the wheels)
#     bash benchmarks/gpu_loop.sh run [RESULTS]      # call 3: join the parts, convert, run both loops
#
# `run` converts the GGUF (`tracerl model from-gguf --chat-template hermes`), then runs `rl` and
# `shuffled` (--shuffle-rewards) side by side, each bounded by LOOP_SECONDS (default 330), and copies
# each run's metrics.jsonl (one row per round, with its rollout/build/train/publish seconds) and
# reward curve to RESULTS (default ${OUT:-/tmp/tracerl-gpu-loop}) as they are written.
set -uo pipefail
cd "$(dirname "$0")/.."
parts=/tmp/tracerl-gguf-parts
mkdir -p "$parts"
cp .gpu/*/part* "$parts/" 2>/dev/null
export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1

if [[ "${1:-run}" == "stash" ]]; then
  if [[ -d .whl ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  fi
  ls -l "$parts"
  exit 0
fi

results="${2:-${OUT:-/tmp/tracerl-gpu-loop}}"
mkdir -p "$results"
[[ -n "${SKIP_INSTALL:-}" ]] || python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . >"$results/install.log" 2>&1 \
  || { echo "tracerl install failed:"; tail -20 "$results/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$results/device.txt"
# the installed package (/tmp/site) first on the path, the checkout after it for `examples`
repo=$PWD
cd /tmp
export PYTHONPATH=/tmp/site:$repo
gguf=/tmp/tracerl-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$(dirname "$gguf")"
cat "$parts/part1" "$parts/part2" "$parts/part3" >"$gguf" || exit 1
sha256sum "$gguf" | tee "$results/gguf.sha256"
began=$SECONDS
model=$(python3 -m tracerl model from-gguf "$gguf" --chat-template hermes 2>"$results/convert.log") \
  || { echo "convert failed:"; tail -20 "$results/convert.log"; exit 1; }
echo "converted in $(( SECONDS - began )) s: $model"

# 16 tasks x 4 samples a round, 64 held-out tasks; the rest as benchmarks/learning.py's SmolLM2 setup
options=(--model "$model" --server tracerl --backend torch --rounds "${ROUNDS:-6}" --tasks-per-round 16 --group-size 4
         --eval-tasks 64 --concurrency 32 --max-tokens 40 --lr 2e-5 --minibatch-size 16 --epochs 1 --seed "${SEED:-0}")
for variant in rl shuffled; do
  extra=(); [[ $variant == shuffled ]] && extra=(--shuffle-rewards)
  timeout "${LOOP_SECONDS:-330}" python3 -m examples.calc.train "${options[@]}" "${extra[@]}" --out "/tmp/gpu-loop/$variant-seed${SEED:-0}" \
    >"$results/$variant.log" 2>&1 &
done
while jobs -r | grep -q .; do  # copy what each round wrote as it comes: a call cut short still returns it
  sleep 5
  for variant in rl shuffled; do
    cp "/tmp/gpu-loop/$variant-seed${SEED:-0}/metrics.jsonl" "$results/$variant-metrics.jsonl" 2>/dev/null
  done
done
for variant in rl shuffled; do
  cp "/tmp/gpu-loop/$variant-seed${SEED:-0}/metrics.jsonl" "$results/$variant-metrics.jsonl" 2>/dev/null
  cp "/tmp/gpu-loop/$variant-seed${SEED:-0}/reward_curve.png" "$results/$variant-reward_curve.png" 2>/dev/null
  echo "== $variant"; tail -4 "$results/$variant.log"
  python3 - "$results/$variant-metrics.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["round"], "train", r["train_mean_reward"], "held-out", r["eval_mean_reward"],
          {k: r.get(k) for k in ("rollout_seconds", "build_seconds", "train_seconds", "publish_seconds", "served_logprob_gap", "seconds")})
EOF
done
