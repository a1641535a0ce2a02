#!/usr/bin/env bash
# Key centering's rows of the Qwen2.5-Coder-1.5B quality table (same text and tokens as
# scripts/eval-qwen15.sh): μ from a calibration of tests/data's texts. Writes
# benches/results/quality/qwen2.5-coder-1.5b-center.{json,txt}.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benches/results/quality
cargo build --release --features cli --bin kvpack
bin=target/release/kvpack
model=qwen2.5-coder-1.5b
text=$(mktemp --suffix=.txt)
cat tests/data/text_code.py.txt tests/data/text_prose.txt tests/data/text_short.txt > "$text"
c=/tmp/kvpack-qwen15-center.safetensors
[ -f "$c" ] || "$bin" calibrate --model "$model" --text "$text" --out "$c" --for qfilters > /dev/null
rm -f "$text"
"$bin" eval --model "$model" --text "$out/eval-text-kvpack-eviction.rs.txt" --path cpu \
  --max-tokens 1024 \
  --method "turboquant-mse:bits=4,center=calib,calib=$c" \
  --method "turboquant-mse:bits=3,center=calib,calib=$c" \
  --method "qjl:m=256,residual=128,center=calib,calib=$c/kivi:bits=4" \
  --json "$out/qwen2.5-coder-1.5b-center.json" | tee "$out/qwen2.5-coder-1.5b-center.txt"
