#!/usr/bin/env bash
# Session 2026-12-07f call 1 (H100): (a) the staging, GPU-append and soak tests on NVIDIA's
# driver (the append rows staged in an arena, never run on a GPU machine before); (b) short
# contexts in one pass: one split per KV head (--chunk T: the kernel writes the output, no
# merge dispatch) on 128- and 256-invocation workgroups (KVPACK_ATT_WG, measuring builds),
# against the default (64-token splits, 128 invocations, then the merge), alternated twice.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
(
export KVPACK_REQUIRE_GPU=1
for t in staging gpu_appends soak; do
  timeout 150 $B/t_$t --test-threads 4 > $R/test-$t.txt 2>&1; echo "test $t rc=$? $(el)"; grep -E "^test result|FAILED|panicked|skip" $R/test-$t.txt | head -5
done
)
for k in 128 256; do KVPACK_ATT_WG=$k timeout 40 $B/ps --methods kivi-4,f16 > $R/ps-$k.txt 2>&1; echo "ps$k rc=$? $(el)"; grep -iE "^[a-z].*:$|Register" $R/ps-$k.txt | head -4 | paste - - | cut -c1-110; done
for rep in 1 2; do
  [ $(el) -gt 500 ] && break
  n=def-$rep; timeout 60 $B/ga --decode-only --tokens 1024,2048,4096 --warmup 5 --rounds 20 --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el)"
  grep -E "^ *(f16|kivi-4|kivi-2) T=[0-9]+k \[wgsl-subgroup\] " $R/$n.txt | cut -c1-100
  for T in 1024 2048 4096; do for k in 256 128; do
    [ $(el) -gt 540 ] && break
    n=one$k-$T-$rep; KVPACK_ATT_WG=$k timeout 40 $B/ga --decode-only --tokens $T --chunk $T --warmup 5 --rounds 20 --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el)"
    grep -E "^ *(f16|kivi-4|kivi-2) T=[0-9]+k \[wgsl-subgroup\] " $R/$n.txt | cut -c1-100
  done; done
done
(cd $OUT && tar czf call1.tgz r && rm -rf r)
echo "== end $(el)"
