#!/usr/bin/env bash
# Call 4: the tensor-core prefill kernel's splits at 32k: automatic (3,984 tokens: 9 codec
# splits, 288 + 32 workgroups on 264 slots) against 4,096 (8 codec splits: 256 + 32), --chunk
# (every arm of the run gets it; read the tensor-core rows). Build 54fc140.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/pf/ga.gz; do gunzip -c $f > $B/ga; chmod +x $B/ga; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call4.tgz r && rm -rf r); }
trap fin EXIT
pf() { timeout 60 $B/ga --prefill-only --tokens 32768 --rounds 10 $2 --json $R/$1.json > $R/$1.txt 2>&1; echo "$1 rc=$? $(el)"; grep -E "^ *(f16|kivi-4|kivi-2) T=32k Tq=64.*tensor.*[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/$1.txt | cut -c1-120; }
pf a1 ""; pf c1 "--chunk 4096"; pf a2 ""; pf c2 "--chunk 4096"
