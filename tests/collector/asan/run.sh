#!/usr/bin/env bash
# Fuzz the collector's C wire decoder (src/tracerl/collector/otlp_wire.c) under AddressSanitizer and UBSan.
#
#   tests/collector/asan/run.sh [BODIES] [SEED]     # defaults: 500000 mutated bodies, seed 0
#
# Builds otlp_wire.c with -fsanitize=address,undefined (every report aborts the run) into a
# scratch folder, then, with the sanitizer runtimes preloaded into the interpreter:
#   1. runs the decoder's differential tests (test_otlp_wire.py, test_columns.py) on that build;
#   2. decodes BODIES seeded mutations of valid and edge-case OTLP requests (fuzz_wire.py).
# Exit status 0: no sanitizer report, no test failure, no exception but the decoder's ValueError.
# Needs gcc and the project's virtualenv (PYTHON, default .venv/bin/python).
set -euo pipefail

BODIES="${1:-500000}"
SEED="${2:-0}"
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
BUILD="$(mktemp -d)"
trap 'rm -rf "$BUILD"' EXIT

INCLUDE="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
SUFFIX="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
MODULE="$BUILD/_otlp_wire$SUFFIX"
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -Wall \
    -fsanitize=address,undefined -fno-sanitize-recover=all \
    -I"$INCLUDE" "$ROOT/src/tracerl/collector/otlp_wire.c" -o "$MODULE"
nm -D "$MODULE" | grep -q __asan_report_load || { echo "error: $MODULE is not instrumented by ASan" >&2; exit 2; }
echo "built $MODULE with $(gcc --version | head -1): -O1 -fsanitize=address,undefined -fno-sanitize-recover=all"

# The interpreter is not built with ASan: its runtime must be loaded first. Python keeps memory
# alive until exit, so leak detection would only report the interpreter's own allocations.
# PYTHONMALLOC=malloc: every object, small request bodies too, gets ASan's red zones (pymalloc's
# arenas have none); 5 frames of allocation stack per object keep the run from slowing down.
export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:malloc_context_size=5"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONMALLOC=malloc

cd "$ROOT"
"$PYTHON" tests/collector/asan/fuzz_wire.py --module "$MODULE" --pytest \
    tests/collector/test_otlp_wire.py tests/collector/test_columns.py -q -p no:cacheprovider
"$PYTHON" tests/collector/asan/fuzz_wire.py --module "$MODULE" --bodies "$BODIES" --seed "$SEED"
