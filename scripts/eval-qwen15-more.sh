#!/usr/bin/env bash
# The Qwen2.5-Coder-1.5B quality rows the first full run (scripts/eval-qwen15.sh, stopped after
# ten rows without KL and top-1: qwen2.5-coder-1.5b-partial.txt) left out of the JSON: KIVI at
# 4/3/2 bits, TurboQuant-MSE at 4/3 bits, TurboQuant-RVQ, TurboQuant-Prod at 4/3 bits and
# VecInfer at 1 bit; same text and settings (CPU path, teacher-forced, 1,024 tokens). VecInfer
# uses the calibration file scripts/eval-qwen15.sh writes (made again when absent). The JSON
# is rewritten after every method, so a stopped run keeps its rows.
# Writes benches/results/quality/qwen2.5-coder-1.5b-more.{json,txt}.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benches/results/quality
cargo build --release --features cli --bin kvpack
bin=target/release/kvpack
model=qwen2.5-coder-1.5b
calib=/tmp/kvpack-qwen15-calib.safetensors
if [ ! -f "$calib" ]; then
    text=$(mktemp --suffix=.txt)
    cat tests/data/text_code.py.txt tests/data/text_prose.txt tests/data/text_short.txt > "$text"
    "$bin" calibrate --model "$model" --text "$text" --out "$calib" --for vecinfer,qfilters >/dev/null
    rm -f "$text"
fi
"$bin" eval --model "$model" --text "$out/eval-text-kvpack-eviction.rs.txt" --path cpu \
  --max-tokens 1024 \
  --method f16 --method kivi-4 --method kivi-2 --method kivi:bits=3 \
  --method turboquant-mse:bits=4 --method turboquant-mse:bits=3 \
  --method "vecinfer:bits=1,calib=$calib" \
  --method turboquant-rvq:bits=2 \
  --method turboquant-prod:bits=4,residual=128/turboquant-mse:bits=4 \
  --method turboquant-prod:bits=3,residual=128/turboquant-mse:bits=3 \
  --json "$out/qwen2.5-coder-1.5b-more.json" \
  | tee "$out/qwen2.5-coder-1.5b-more.txt"
