#!/usr/bin/env bash
# Session 2026-12-07d call 2 (H100): the bind-group cache and the uniform arena's dynamic offsets
# on NVIDIA's driver (tests/bind_groups.rs, tests/attend.rs), and Auto's new tensor-core pairs
# on real tensor cores (tests/tensor_attend.rs: Auto over TENSOR_AUTO[1]'s 4,096 tokens).
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
SH=/work/shared/fixtures/smollm2-135m; mkdir -p $SH
gunzip -c .carry/fx/paris.safetensors.gz > $SH/paris.safetensors; cp .carry/fx/README.md $SH/
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
export KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1
for t in bind_groups tensor_attend attend; do
  timeout 200 $B/$t --test-threads 4 > $R/$t.txt 2>&1; echo "$t rc=$? $(el)"
  grep -E "test result|FAILED|panicked|NOT RUN|SKIP" $R/$t.txt | head -8
done
echo "== end $(el)"
