#!/usr/bin/env bash
# Session 2026-12-07d call 1 (H100): short prefill chunks (4, 8, 16 rows) on the decode, f32
# prefill and tensor-core kernels at T = 4k .. 128k, for plan::TENSOR_AUTO's 64- and 32-vector
# pairs (measured before naga's index clamps went).
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
# host time of recording a decode step (benches/host_encode.rs), on this machine's host and driver
timeout 90 $B/he --json $R/host_encode.json > $R/host_encode.txt 2>&1; echo "he rc=$? $(el)"; tail -12 $R/host_encode.txt
for T in 4096,8192 16384,32768 131072; do
  n=short-$(echo $T | tr , -)
  timeout 150 $B/ga --prefill-only --short-every-t --tokens $T --warmup 5 --rounds 12 --only "Tq=4 [,Tq=8 [,Tq=16 [" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el)"
  grep -E "^ +(f16|kivi-4|kivi-2) T=[0-9]+k Tq=(4|8|16) .* +[0-9.]+ +[0-9.]+ +[0-9.]+$" $R/$n.txt | cut -c1-100
done

echo "== end $(el)"
