#!/usr/bin/env bash
# Call 12: ga = ef8ab28 (the tile loop left for the rescale, 3906d45, and the queries' row
# offsets once per vector), gb = 76a3ead (scores as K̂·Qᵀ). tests/tensor_attend.rs of ga; gb,
# ga alternated twice (tensor-core arms at 1k and 32k); a full run (gpu_kivi, gpu_attend,
# PyTorch) of the faster of the two (first pair); then, as time allows, ga's machine code.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R/full; nvidia-smi -L | tee $R/gpu.txt; nvidia-smi > $R/full/nvidia-smi.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call12.tgz r && rm -rf r); }
trap fin EXIT
ok() { [ $(el) -lt $1 ]; }
nvidia-smi dmon -s pc -d 1 > $R/dmon.txt 2>&1 & DM=$!
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 80 $B/ta --test-threads 2 --nocapture > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|FAILED|panicked|story-512|rescales" $R/ta.txt | cut -c1-150 | head -12
f() { b=$1; n=$2; t=$3; shift 3; env "$@" timeout 60 $B/$b --prefill-only --tokens $t --rounds 10 --only "(tensor cores" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el)"; grep -E "^ *(f16|kivi-4) T=[0-9]+k? Tq=(4|16|64) .*tensor cores\) +[0-9]" $R/$n.txt | head -8 | cut -c1-100; }
f gb b1 1024,32768; f ga a1 1024,32768; f gb b2 1024,32768; f ga a2 1024,32768
# The fastest build (f16 + KIVI-4, 64 rows, 1k and 32k medians summed) runs the full run.
med() { grep -E "^ *(f16|kivi-4) T=(1|32)k Tq=64 \[wgsl-subgroup\] \(tensor cores\) +[0-9]" $R/$1.txt | head -4 | awk '{s+=$(NF-2)} END {print int(s)}'; }
W=ga; best=$(med a1); for p in "gb b1"; do set -- $p; s=$(med $2); [ -n "$s" ] && [ "$s" -gt 0 ] && { [ -z "$best" ] || [ "$best" -eq 0 ] || [ "$s" -lt "$best" ]; } && { W=$1; best=$s; }; done
echo "sums: gb $(med b1) ga $(med a1): full run with $W" | tee $R/full/BUILD.txt
timeout 60 $B/gk --warmup 20 --rounds 50 --json $R/full/gpu_kivi.json --plot $R/full/gpu_kivi.png > $R/full/gpu_kivi.txt 2>&1; echo "gk rc=$? $(el)"
timeout 200 $B/$W --json $R/full/gpu_attend.json --plot $R/full/gpu_attend.png > $R/full/gpu_attend.txt 2>&1; echo "full ga rc=$? $(el)"; grep -E "^ *copy 1 GiB +[0-9]|^ *kivi-4 T=32k \[wgsl-subgroup\] +[0-9]|^ *(f16|kivi-4) T=(1|32)k Tq=64 .*tensor cores\) +[0-9]" $R/full/gpu_attend.txt | head -6 | cut -c1-100
timeout 120 python3 benches/torch_baseline.py $R/full/torch_baseline.json > $R/full/torch_baseline.txt 2>&1; echo "torch rc=$? $(el)"
NVD=$(ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
ok 380 && { timeout 50 $B/ps --methods f16 --dump /tmp/dump > $R/ps.txt 2>&1; echo "ps rc=$? $(el)"; grep -A6 "tensor-prefill" $R/ps.txt | grep -iE "tensor-prefill|Register|Local|Shared" | head -4
python3 scripts/sass-from-cache.py extract /tmp/dump /tmp/sass > $R/extract.txt 2>&1
for b in /tmp/sass/*tensor-prefill*.bin; do n=$(basename $b .bin); ${NVD:-nvdisasm} -b SM90 -hex $b > /tmp/sass/$n.sass 2>>$R/extract.txt; gzip -c /tmp/sass/$n.sass > $R/$n.sass.gz; python3 scripts/sass-from-cache.py segments /tmp/sass/$n.sass > $R/$n.segments.txt 2>&1; head -1 $R/$n.segments.txt; awk '$2+0>=60' $R/$n.segments.txt | cut -c1-110 | tail -8; done; }
kill $DM 2>/dev/null
