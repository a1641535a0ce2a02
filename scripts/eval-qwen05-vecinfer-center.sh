#!/usr/bin/env bash
# VecInfer with and without key centering on Qwen2.5-Coder-0.5B (key biases: large constant
# channel offsets), 512 tokens of benches/results/quality/eval-text-kvpack-eviction.rs.txt,
# teacher-forced, CPU path; calibrated on tests/data's code, prose and short texts. TurboQuant
# 2-bit centered and KIVI-2 beside it at similar bits. Writes
# benches/results/quality/qwen2.5-coder-0.5b-vecinfer-center.{json,txt}.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benches/results/quality
cargo build --release --features cli --bin kvpack
bin=target/release/kvpack
model=qwen2.5-coder-0.5b
text=$(mktemp --suffix=.txt)
cat tests/data/text_code.py.txt tests/data/text_prose.txt tests/data/text_short.txt > "$text"
c=/tmp/kvpack-qwen05-vecinfer-center.safetensors
"$bin" calibrate --model "$model" --text "$text" --out "$c" --for vecinfer --bits 2 > /dev/null
rm -f "$text"
"$bin" eval --model "$model" --text "$out/eval-text-kvpack-eviction.rs.txt" --path cpu \
  --max-tokens 512 \
  --method "vecinfer:bits=2,calib=$c" \
  --method "vecinfer:bits=2,center=calib,calib=$c" \
  --method "turboquant-mse:bits=2,center=calib,calib=$c" \
  --method "kivi:bits=2,residual=0" \
  --json "$out/qwen2.5-coder-0.5b-vecinfer-center.json" | tee "$out/qwen2.5-coder-0.5b-vecinfer-center.txt"
