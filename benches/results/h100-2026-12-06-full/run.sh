#!/usr/bin/env bash
# Call A (2026-12-06 session 2): a full run of main (gpu_kivi, gpu_attend, PyTorch) for the
# targets table, then the tensor-core prefill kernel's floors (KVPACK_TC_NOLOAD=1,2,3) at 32k
# and pipeline_stats.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B; for f in .carry15/bin/*.gz; do gunzip -c $f > $B/$(basename $f .gz); chmod +x $B/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R/full; cp .carry15/BUILT_FROM $R/; nvidia-smi -L > $R/gpu.txt 2>&1; nvidia-smi -q -d CLOCK,MEMORY > $R/full/nvidia-smi.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf callA.tgz r && rm -rf r); }
trap fin EXIT
cat $R/gpu.txt
timeout 60 $B/gpu_kivi --warmup 20 --rounds 50 --json $R/full/gpu_kivi.json --plot $R/full/gpu_kivi.png > $R/full/gpu_kivi.txt 2>&1; echo "gk rc=$? $(el)"
timeout 240 $B/gpu_attend --json $R/full/gpu_attend.json --plot $R/full/gpu_attend.png > $R/full/gpu_attend.txt 2>&1; echo "ga rc=$? $(el)"
grep -E "Tq=64.*(32k|4k|1k)" $R/full/gpu_attend.txt | cut -c1-90 | head -30
timeout 120 python3 benches/torch_baseline.py $R/full/torch_baseline.json > $R/full/torch_baseline.txt 2>&1; echo "torch rc=$? $(el)"
for n in 1 2 3; do KVPACK_TC_NOLOAD=$n timeout 60 $B/gpu_attend --prefill-only --tokens 32768 --rounds 10 --json $R/nl$n.json > $R/nl$n.txt 2>&1; echo "nl$n rc=$? $(el)"; grep -E "^(f16|kivi-4) T=32k Tq=64.*tensor" $R/nl$n.txt | cut -c1-90; done
timeout 60 $B/ps --methods kivi-4,kivi-2,f16 > $R/ps.txt 2>&1; echo "ps rc=$? $(el)"
