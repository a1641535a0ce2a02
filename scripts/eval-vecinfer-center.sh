#!/usr/bin/env bash
# VecInfer with and without key centering on SmolLM2-135M, story-512 (teacher-forced, CPU
# path): λ, codebooks and key means from one calibration on tests/data's code, prose and short
# texts (another text than the one evaluated). Writes
# benches/results/quality/smollm2-story512-vecinfer-center.{json,txt}. Needs ../shared.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benches/results/quality
cargo build --release --features cli --bin kvpack
bin=target/release/kvpack
c=/tmp/kvpack-smollm2-vecinfer-center.safetensors
scripts/calibrate-tests-data.sh "$c" "$bin"
"$bin" eval --model smollm2 --ids ../shared/fixtures/smollm2-135m/story-512.safetensors --path cpu \
  --method "vecinfer:bits=2,calib=$c" \
  --method "vecinfer:bits=2,center=calib,calib=$c" \
  --method "vecinfer:bits=1,calib=$c" \
  --method "vecinfer:bits=1,center=calib,calib=$c" \
  --method "vecinfer:bits=2,center=calib,calib=$c/kivi:bits=2" \
  --json "$out/smollm2-story512-vecinfer-center.json" | tee "$out/smollm2-story512-vecinfer-center.txt"
