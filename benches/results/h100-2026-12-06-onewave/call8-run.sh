#!/usr/bin/env bash
# Call 8: where Auto's measured points could move (plan::TENSOR_AUTO): the tensor-core prefill
# kernel (one wave, build 450d9da) against the decode kernel at 64, 16, 8 and 4 rows, at 2k
# (twice), 8k and 16k (once each), one process per length.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call8.tgz r && rm -rf r); }
trap fin EXIT
nvidia-smi dmon -s pc -d 1 > $R/dmon.txt 2>&1 & DM=$!
w() { timeout $3 $B/ga --prefill-only --tokens $2 --rounds 10 --json $R/$1.json > $R/$1.txt 2>&1; echo "$1 rc=$? $(el)"; grep -E "^ +(f16|kivi-4) T=[0-9]+k Tq=[0-9]+ \[wgsl-subgroup\]( \((tensor cores|decode kernel)\))? +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ *$" $R/$1.txt | cut -c1-100; }
w w2a 2048 60; w w8 8192 70; w w16 16384 80; w w2b 2048 60
kill $DM 2>/dev/null
