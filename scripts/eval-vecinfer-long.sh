#!/usr/bin/env bash
# VecInfer against KIVI and TurboQuant at a length where VecInfer's per-layer tables (λ and
# codebooks, ~25 KB per layer) weigh less in the bits held than at story-512's 517 tokens:
# SmolLM2-135M over the first 2,048 tokens of the Rust text
# benches/results/quality/eval-text-kvpack-eviction.rs.txt (teacher-forced, CPU path),
# calibrated on tests/data's code, prose and short texts (another text, as
# eval-vecinfer-center.sh). Two `kvpack eval` runs side by side (each ~1 core), then a third;
# each runs its own f16 reference (the same numbers; the README's table lists it once).
# Writes benches/results/quality/smollm2-rust2048-{a,b,c}.{json,txt}.
# Needs the SmolLM2 GGUF (scripts/fetch-models.sh), not ../shared. ~30 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benches/results/quality
cargo build --release --features cli --bin kvpack
bin=target/release/kvpack
c=/tmp/kvpack-smollm2-vecinfer-long.safetensors
scripts/calibrate-tests-data.sh "$c" "$bin"
run() {
  local name=$1
  shift
  "$bin" eval --model smollm2 --text "$out/eval-text-kvpack-eviction.rs.txt" --max-tokens 2048 \
    --path cpu "$@" --json "$out/smollm2-rust2048-$name.json" > "$out/smollm2-rust2048-$name.txt"
}
run a --method "vecinfer:bits=2,center=calib,calib=$c" --method "vecinfer:bits=1,center=calib,calib=$c" &
a=$!
run b --method "turboquant-mse:bits=2,center=calib,calib=$c" --method "turboquant-rvq:bits=1" \
  --method "kivi:bits=2,residual=0" &
b=$!
wait "$a"
wait "$b"
# KIVI at 1 bit (~2 bits held with its f16 scale and zero per group): run after the two above.
run c --method "kivi:bits=1,residual=0"
cat "$out/smollm2-rust2048-a.txt" "$out/smollm2-rust2048-b.txt" "$out/smollm2-rust2048-c.txt"
