#!/usr/bin/env bash
# Q-Filters / StreamingLLM / key-norm eviction on SmolLM2-135M, story-512 (teacher-forced, CPU
# path): calibrates the filters on another text (tests/data's prose, short and code texts), then
# evaluates budgets of 10, 25 and 50 % of the 512-token context on the f16 cache, and 25 / 50 %
# on KIVI-4 (group 32, residual 32), then Q-Filters and key norm with a window of half the budget. Writes benches/results/eviction/. Needs the model
# (scripts/fetch-models.sh) and ../shared/fixtures (the story's token ids).
set -euo pipefail
cd "$(dirname "$0")/.."
out=benches/results/eviction
mkdir -p "$out"
cargo build --release --features cli --bin kvpack
bin=target/release/kvpack
text=$(mktemp --suffix=.txt)
cat tests/data/text_prose.txt tests/data/text_short.txt tests/data/text_code.py.txt > "$text"
calib="$out/smollm2-qfilters-calib.safetensors"
"$bin" calibrate --model smollm2 --text "$text" --out "$calib" --for qfilters > "$out/calibration-report.json"
ids=../shared/fixtures/smollm2-135m/story-512.safetensors
ev=()
for b in 51 128 256; do
  ev+=(--evict "qfilters:budget=$b,calib=$calib" --evict "qfilters:budget=$b,calib=$calib,flip=true"
       --evict "streaming:budget=$b" --evict "knorm:budget=$b")
done
"$bin" eval --model smollm2 --ids "$ids" --path cpu --method f16 "${ev[@]}" \
  --json "$out/smollm2-story512-f16.json" --evict-plot "$out/smollm2-story512-budget.png" \
  | tee "$out/smollm2-story512-f16.txt"
ev=()
for b in 128 256; do
  ev+=(--evict "qfilters:budget=$b,calib=$calib" --evict "streaming:budget=$b" --evict "knorm:budget=$b")
done
"$bin" eval --model smollm2 --ids "$ids" --path cpu --method f16 \
  --method kivi:bits=4,group=32,residual=32 "${ev[@]}" \
  --json "$out/smollm2-story512-kivi4.json" | tee "$out/smollm2-story512-kivi4.txt"
# Q-Filters and key norm with a recent window of half the budget (StreamingLLM's rows are all
# window already): next-token prediction leans on the newest tokens.
ev=()
for b in 51 128 256; do
  w=$((b / 2))
  ev+=(--evict "qfilters:budget=$b,window=$w,calib=$calib" --evict "knorm:budget=$b,window=$w")
done
"$bin" eval --model smollm2 --ids "$ids" --path cpu --method f16 "${ev[@]}" \
  --json "$out/smollm2-story512-window.json" | tee "$out/smollm2-story512-window.txt"
rm -f "$text"
