#!/usr/bin/env bash
# Session 2026-12-07e call 2 (H100): the append's rows staged in the device's arena
# (src/gpu/staging.rs) against a new upload buffer per call: host_encode of both builds
# alternated twice on this machine's host and NVIDIA's driver; the staging, GPU-append and
# soak tests on this GPU.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
for i in 1 2; do for b in hebase henew; do
  timeout 80 $B/$b --rounds 8 --json $R/$b-$i.json > $R/$b-$i.txt 2>&1; echo "$b-$i rc=$? $(el)"; grep -E "cached  |per-call" $R/$b-$i.txt
done; done
export KVPACK_REQUIRE_GPU=1
for t in staging gpu_appends soak; do [ $(el) -gt 420 ] && break;
  timeout 120 $B/t_$t --test-threads 4 > $R/test-$t.txt 2>&1; echo "test $t rc=$? $(el)"; grep -E "^test result|FAILED|panicked" $R/test-$t.txt | head -5
done
# The device returns at most 8 files: everything in one archive.
(cd $OUT && tar czf call2.tgz r && rm -rf r)
echo "== end $(el)"
