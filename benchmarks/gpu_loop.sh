#!/usr/bin/env bash
# An agent's loop on SmolLM2-135M-Instruct on a GPU machine (AGENT=calc, the default, or sql): the
# README's real-model command, with the built-in server serving (the machine has no vLLM: its CUDA
# build is far over what one device call can carry) and the torch backend training, next to its
# shuffled-reward control, for each seed in SEEDS (default 0), every run at once on the one GPU.
#
# The machine has torch, transformers, pyarrow and matplotlib but nothing else of tracerl's and no
# network. What it needs travels with the calls (64 MiB each): the wheels in .whl/ (pip download
# --python-version 3.12 ..., as for gpu_suite.sh; tracerl's dependencies it lacks, AutoGen, DuckDB,
# gguf; for sql, LangGraph and LangChain in .whl2/) and the GGUF, 98 MB, split in three
# (.gpu/a/part1, .gpu/b/part2, .gpu/c/part3) over three calls made back to back while the machine
# stays warm:
#
#     bash benchmarks/gpu_loop.sh stash              # calls 1 and 2: keep the carried part (and install the wheels)
#     AGENT=sql SEEDS="0 1 2" bash benchmarks/gpu_loop.sh run [RESULTS]   # call 3: join, convert, run
#
# `run` converts the GGUF (`tracerl model from-gguf --chat-template hermes`), then runs `rl` and
# `shuffled` (--shuffle-rewards) for every seed at once, each bounded by LOOP_SECONDS (default 330).
# Into RESULTS (default ${OUT:-/tmp/tracerl-gpu-loop}) go, as they are written, each run's
# metrics.jsonl as VARIANT-seedN-metrics.jsonl (one row per round, with its rollout/build/train/
# publish seconds: what `benchmarks/learning.py --from RESULTS` reads); at the end the held-out skill
# per round (the recipe's count, from the spans) as held-out-skill.json and the logs as logs.tar.gz.
# Eight files at most: what one call brings back. A smoke test on any machine (the checkout's venv
# first on PATH): SKIP_INSTALL=1 AGENT=sql EXTRA="--rounds 1 --tasks-per-round 2 --eval-tasks 2" ... run
set -uo pipefail
cd "$(dirname "$0")/.."
parts=/tmp/tracerl-gguf-parts
mkdir -p "$parts"
cp .gpu/*/part* "$parts/" 2>/dev/null
export PYTHONPATH=/tmp/site
export PYTHONUNBUFFERED=1

if [[ "${1:-run}" == "stash" ]]; then
  for wheels in .whl .whl2; do
    if [[ -d $wheels ]]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels/*.whl || exit 1
    fi
  done
  [[ -d .whl2 ]] && { python3 -c "import langgraph.graph, langchain_openai, duckdb, gguf" || exit 1; }
  ls -l "$parts"
  exit 0
fi

agent=${AGENT:-calc}
# calc as benchmarks/learning.py's SmolLM2 setup, 16 tasks x 4 samples a round; sql in groups of 8
# (one training episode in 32 succeeds at round 0: a group of 4 rarely holds one) with minibatches
# of 64 (about as many optimizer steps a round as calc's) and every one of its 28 held-out tasks.
case $agent in
  calc) sizes=(--tasks-per-round 16 --group-size 4 --eval-tasks 64 --minibatch-size 16) ;;
  sql) sizes=(--tasks-per-round 32 --group-size 8 --eval-tasks 28 --minibatch-size 64) ;;
  *) echo "AGENT must be calc or sql, not $agent"; exit 2 ;;
esac
results="${2:-${OUT:-/tmp/tracerl-gpu-loop}}"
logs=/tmp/gpu-loop/logs
mkdir -p "$results" "$logs"
[[ -n "${SKIP_INSTALL:-}" ]] || python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . >"$logs/install.log" 2>&1 \
  || { echo "tracerl install failed:"; tail -20 "$logs/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$logs/device.txt"
# the installed package (/tmp/site) first on the path, the checkout after it for `examples`
repo=$PWD
cd /tmp
export PYTHONPATH=/tmp/site:$repo
gguf=/tmp/tracerl-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$(dirname "$gguf")"
cat "$parts/part1" "$parts/part2" "$parts/part3" >"$gguf" || exit 1
sha256sum "$gguf" | tee "$logs/gguf.sha256"
began=$SECONDS
model=$(python3 -m tracerl model from-gguf "$gguf" --chat-template hermes 2>"$logs/convert.log") \
  || { echo "convert failed:"; tail -20 "$logs/convert.log"; exit 1; }
echo "converted in $(( SECONDS - began )) s: $model"

options=(--model "$model" --server tracerl --backend torch --rounds "${ROUNDS:-6}" "${sizes[@]}"
         --concurrency 32 --max-tokens 40 --lr 2e-5 --epochs 1 ${EXTRA:-})  # EXTRA: options that override these
runs=()
for seed in ${SEEDS:-0}; do
  for variant in rl shuffled; do
    extra=(); [[ $variant == shuffled ]] && extra=(--shuffle-rewards)
    timeout "${LOOP_SECONDS:-330}" python3 -m "examples.$agent.train" "${options[@]}" "${extra[@]}" --seed "$seed" \
      --out "/tmp/gpu-loop/$variant-seed$seed" >"$logs/$variant-seed$seed.log" 2>&1 &
    runs+=("$variant-seed$seed")
  done
done
copy_metrics() {
  for run in "${runs[@]}"; do cp "/tmp/gpu-loop/$run/metrics.jsonl" "$results/$run-metrics.jsonl" 2>/dev/null; done
}
while jobs -r | grep -q .; do  # copy what each round wrote as it comes: a call cut short still returns it
  sleep 5
  copy_metrics
done
copy_metrics
for run in "${runs[@]}"; do echo "== $run"; tail -3 "$logs/$run.log"; done
python3 "$repo/benchmarks/learning.py" --recipe "examples.$agent.recipe:RECIPE" --skill-of /tmp/gpu-loop --from "$results" \
  | tee "$logs/learning.txt"
mv "$results/learning.png" "$logs/" 2>/dev/null
tar -czf "$results/logs.tar.gz" -C /tmp/gpu-loop logs
