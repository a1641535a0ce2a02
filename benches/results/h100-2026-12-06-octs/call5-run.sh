#!/usr/bin/env bash
# Call 5: the final build (pvlo): registers of the tensor-core prefill kernel; 64-row chunks at 4k.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B; for n in ga ps; do gunzip -c .carry/pvlo/$n.gz > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call5.tgz r && rm -rf r); }
trap fin EXIT
timeout 60 $B/ps --methods f16,kivi-4 > $R/ps.txt 2>&1; echo "ps rc=$? $(el)"; grep -A5 "tensor-prefill" $R/ps.txt
timeout 80 $B/ga --prefill-only --tokens 4096 --rounds 20 --json $R/p4k.json > $R/p4k.txt 2>&1; echo "4k rc=$? $(el)"; grep -E "Tq=64.*[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/p4k.txt | grep -v "^[a-z]" | cut -c1-120
