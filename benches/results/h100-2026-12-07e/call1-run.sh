#!/usr/bin/env bash
# Session 2026-12-07e call 1 (H100): short-context decode (1k-4k, and 32k) with the partials
# kernel's workgroup at 128 (the default, 4 slices), 64 (2 slices) and 32 invocations (1 slice,
# 32-token splits), measuring builds through KVPACK_ATT_WG, alternated twice, decode only.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
for k in 128 64 32; do KVPACK_ATT_WG=$k timeout 40 $B/ps --methods kivi-4,f16 > $R/ps-$k.txt 2>&1; echo "ps$k rc=$? $(el)"; grep -iE "^[a-z].*:$|Register" $R/ps-$k.txt | head -8 | paste - - | cut -c1-110; done
for rep in 1 2; do
  for cfg in 128 64 32; do
    n=wg$cfg-$rep; extra=""; [ $cfg = 32 ] && extra="--chunk 32"
    KVPACK_ATT_WG=$cfg timeout 85 $B/ga --decode-only --tokens 1024,2048,4096,32768 --warmup 5 --rounds 20 $extra --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el)"
    grep -E "^ +(f16|kivi-4) T=[0-9]+k \[wgsl-subgroup\] " $R/$n.txt | cut -c1-100
  done
done
echo "== end $(el)"
