#!/usr/bin/env bash
# The calibration the quality scripts share: SmolLM2-135M's λ, codebooks and key means from
# tests/data's code, prose and short texts (not the texts they evaluate), written to $1.
# Usage: scripts/calibrate-tests-data.sh OUT.safetensors [KVPACK_BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
bin=${2:-target/release/kvpack}
text=$(mktemp --suffix=.txt)
trap 'rm -f "$text"' EXIT
cat tests/data/text_code.py.txt tests/data/text_prose.txt tests/data/text_short.txt > "$text"
"$bin" calibrate --model smollm2 --text "$text" --out "$out" --for vecinfer > /dev/null
