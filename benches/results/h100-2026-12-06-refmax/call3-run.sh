#!/usr/bin/env bash
# Call 3: a full run of main (gpu_kivi, gpu_attend, then PyTorch) for the H100 targets table;
# then the tensor-core prefill kernel's split length, 64 rows at 32k: the automatic split
# (9 of 3,984 tokens) against --chunk 4096 (8 splits), alternated, with the SM clock and
# power logged each second (nvidia-smi dmon), since --chunk changes every arm of the run.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R/full; nvidia-smi > $R/full/nvidia-smi.txt 2>&1; nvidia-smi -L
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call3.tgz r && rm -rf r); }
trap fin EXIT
cp $B/gk /tmp/b/gpu_kivi; cp $B/ga /tmp/b/gpu_attend
timeout 60 /tmp/b/gpu_kivi --warmup 20 --rounds 50 --json $R/full/gpu_kivi.json --plot $R/full/gpu_kivi.png > $R/full/gpu_kivi.txt 2>&1; echo "gk rc=$? $(el)"
timeout 200 /tmp/b/gpu_attend --json $R/full/gpu_attend.json --plot $R/full/gpu_attend.png > $R/full/gpu_attend.txt 2>&1; echo "ga rc=$? $(el)"
timeout 120 python3 benches/torch_baseline.py $R/full/torch_baseline.json > $R/full/torch_baseline.txt 2>&1; echo "torch rc=$? $(el)"
ck() { timeout 60 $B/ga --prefill-only --tokens 32768 --rounds 10 $2 --json $R/$1.json > $R/$1.txt 2>&1; echo "$1 rc=$? $(el)"; }
nvidia-smi dmon -s pc -d 1 > $R/dmon.txt 2>&1 & DM=$!
ck auto1 ""; ck c4096a "--chunk 4096"; ck auto2 ""; ck c4096b "--chunk 4096"
kill $DM 2>/dev/null
