#!/usr/bin/env bash
# Call 3: the tensor-core prefill kernel's floors after the eight-element reads (oct build):
# KVPACK_TC_NOLOAD = 0 (the kernel), 1 (no memory reads), 2 (no reads, no scores), 3 (no
# reads, no softmax), then the kernel again.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B; gunzip -c .carry/oct/ga.gz > $B/ga; chmod +x $B/ga
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call3.tgz r && rm -rf r); }
trap fin EXIT
for v in 0 1 2 3 0; do KVPACK_TC_NOLOAD=$v timeout 60 $B/ga --prefill-only --tokens 32768 --rounds 10 --json $R/nl$v-$(el).json > $R/nl$v.txt 2>&1; echo "nl$v rc=$? $(el)"; grep -E "^ *(f16|kivi-4|kivi-2) T=32k Tq=64.*tensor.*[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/nl$v.txt | cut -c1-120; cp $R/nl$v.txt $R/nl$v-$(el).txt; done
