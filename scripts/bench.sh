#!/usr/bin/env bash
# Runs kvpack's GPU benches and, where PyTorch with CUDA is importable, the PyTorch baseline,
# writing JSON, text and PNG into OUTDIR; then regenerates the tables of BENCHMARKS.md from
# that JSON (benches/bench_report.rs).
#
#   scripts/bench.sh OUTDIR [bench options, e.g. --quick]
#
# KVPACK_BENCH_BIN=DIR  run prebuilt executables DIR/gpu_kivi, DIR/gpu_attend, DIR/bench_report
#                       (a GPU machine without cargo; build them with
#                       `cargo bench --bench NAME --no-run` and copy target/release/deps/NAME-*)
# KVPACK_BENCH_MD=FILE  the report to update (default BENCHMARKS.md; `none`: no report)
set -euo pipefail
if [ $# -lt 1 ]; then
    sed -n '2,12p' "$0"
    exit 2
fi
out=$1
shift
mkdir -p "$out"
cd "$(dirname "$0")/.."

run() {
    local name=$1
    shift
    if [ -n "${KVPACK_BENCH_BIN:-}" ]; then
        "$KVPACK_BENCH_BIN/$name" "$@"
    else
        cargo bench -q --bench "$name" -- "$@"
    fi
}

run gpu_kivi --json "$out/gpu_kivi.json" --plot "$out/gpu_kivi.png" "$@" | tee "$out/gpu_kivi.txt"
run gpu_attend --json "$out/gpu_attend.json" --plot "$out/gpu_attend.png" "$@" | tee "$out/gpu_attend.txt"
if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    python3 benches/torch_baseline.py "$out/torch_baseline.json" | tee "$out/torch_baseline.txt"
else
    echo "bench.sh: no PyTorch with CUDA here: no PyTorch baseline in $out"
fi
md=${KVPACK_BENCH_MD:-BENCHMARKS.md}
if [ "$md" != none ]; then
    run bench_report --results "$out" --out "$md"
fi
