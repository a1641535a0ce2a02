#!/usr/bin/env bash
# More centered rows of the Qwen2.5-Coder-1.5B quality table (same text, tokens and μ as
# scripts/eval-qwen15-center.sh): TurboQuant-MSE 2-bit, TurboQuant-RVQ 2-bit and
# TurboQuant-Prod 4/3-bit keys with centering. Writes
# benches/results/quality/qwen2.5-coder-1.5b-center-more.{json,txt}.
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
  --method "turboquant-mse:bits=2,center=calib,calib=$c" \
  --method "turboquant-rvq:bits=2,center=calib,calib=$c" \
  --method "turboquant-prod:bits=4,residual=128,center=calib,calib=$c/turboquant-mse:bits=4" \
  --method "turboquant-prod:bits=3,residual=128,center=calib,calib=$c/turboquant-mse:bits=3" \
  --json "$out/qwen2.5-coder-1.5b-center-more.json" | tee "$out/qwen2.5-coder-1.5b-center-more.txt"
