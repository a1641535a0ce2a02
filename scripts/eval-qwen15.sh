#!/usr/bin/env bash
# The quality table's Qwen2.5-Coder-1.5B rows (issue 17): every method family at 2-4 bits and
# the eviction policies, teacher-forced on the first 1,024 tokens of a Rust text (kvpack's own
# src/policy/select.rs + src/store/compact.rs, snapshot in benches/results/quality/), CPU path.
# VecInfer and Q-Filters are calibrated on another text (tests/data's code, prose and short
# texts). Needs the model: scripts/fetch-models.sh qwen2.5-coder-1.5b. Takes about an hour on
# 2 cores. Writes benches/results/quality/qwen2.5-coder-1.5b.{json,txt,png}.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benches/results/quality
mkdir -p "$out"
cargo build --release --features cli --bin kvpack
bin=target/release/kvpack
model=qwen2.5-coder-1.5b
text=$(mktemp --suffix=.txt)
cat tests/data/text_code.py.txt tests/data/text_prose.txt tests/data/text_short.txt > "$text"
calib=/tmp/kvpack-qwen15-calib.safetensors
"$bin" calibrate --model "$model" --text "$text" --out "$calib" --for vecinfer,qfilters \
  > "$out/qwen2.5-coder-1.5b-calibration-report.json"
rm -f "$text"
"$bin" eval --model "$model" --text "$out/eval-text-kvpack-eviction.rs.txt" --path cpu \
  --max-tokens 1024 \
  --method f16 --method kivi-4 --method kivi-2 \
  --method kivi:bits=4,residual=0 --method kivi:bits=2,residual=0 \
  --method turboquant-mse:bits=4 --method turboquant-mse:bits=3 \
  --method turboquant-mse:bits=3,residual=128 --method turboquant-mse:bits=2,residual=128 \
  --method turboquant-prod:bits=4,residual=128/turboquant-mse:bits=4 \
  --method qjl:m=256,residual=128/kivi:bits=4 \
  --method "vecinfer:bits=2,calib=$calib" --method "vecinfer:bits=1,calib=$calib" \
  --method "f16+qfilters:budget=256,window=128,calib=$calib" \
  --method f16+streaming:budget=256 --method f16+knorm:budget=256,window=128 \
  --json "$out/qwen2.5-coder-1.5b.json" --plot "$out/qwen2.5-coder-1.5b.png" \
  | tee "$out/qwen2.5-coder-1.5b.txt"
