#!/usr/bin/env bash
# Call 6: (a) the tensor-core prefill kernel's one-wave split A/B (as run5: "(tensor cores)" vs
# "(tensor cores, one wave)", same rounds, two processes); (b) a full run of main (gpu_kivi,
# gpu_attend, PyTorch) for the H100 targets table. Binaries built from 0dd1a05 (= main's code).
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
cp $B/gk $B/gpu_kivi; cp $B/ga $B/gpu_attend
R=$OUT/r; mkdir -p $R/full; nvidia-smi -L | tee $R/gpu.txt; nvidia-smi > $R/full/nvidia-smi.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call6.tgz r && rm -rf r); }
trap fin EXIT
nvidia-smi dmon -s pc -d 1 > $R/dmon.txt 2>&1 & DM=$!
for i in 1 2; do timeout 80 $B/ga --prefill-only --tokens 32768 --rounds 10 --json $R/w$i.json > $R/w$i.txt 2>&1; echo "w$i rc=$? $(el)"; grep -E "T=32k Tq=64 .*tensor cores" $R/w$i.txt; done
timeout 60 $B/gpu_kivi --warmup 20 --rounds 50 --json $R/full/gpu_kivi.json --plot $R/full/gpu_kivi.png > $R/full/gpu_kivi.txt 2>&1; echo "gk rc=$? $(el)"
timeout 200 $B/gpu_attend --json $R/full/gpu_attend.json --plot $R/full/gpu_attend.png > $R/full/gpu_attend.txt 2>&1; echo "ga rc=$? $(el)"
timeout 120 python3 benches/torch_baseline.py $R/full/torch_baseline.json > $R/full/torch_baseline.txt 2>&1; echo "torch rc=$? $(el)"
kill $DM 2>/dev/null
