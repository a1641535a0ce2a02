#!/usr/bin/env bash
# Session 2026-12-07f call 2, short form (the device budget left after refused starts): (a) KIVI value quantization for groups of 65..=256
# channels, one invocation per 32-channel part (new) against a 32-invocation slice per group
# (old): gpu_kivi of both builds alternated twice; (b) host_encode of three builds alternated
# twice on this machine's host and NVIDIA's driver: 013b46f (before the staging arena),
# 7026c6c (main at the session's start: the arena) and this session's build (the status
# word cleared only where a codec's status is read); (c) TurboQuant's quantize with lane
# pairs assembling 3-bit rows (P = 128) against workgroup memory: gpu_turboquant of both
# builds, quantize arms at 32k, alternated twice.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.xz; do n=$(basename $f .xz)
  xz -dc $f > $B/$n 2>/dev/null || python3 -c "import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())" $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
for i in 1 2; do for b in gk_old gk_new; do
  timeout 90 $B/$b --warmup 5 --rounds 20 --json $R/$b-$i.json > $R/$b-$i.txt 2>&1; echo "$b-$i rc=$? $(el)"
  grep -E "values G=" $R/$b-$i.txt | cut -c1-110
done; done
for i in 1; do for b in gtq_old gtq_new; do
  [ $(el) -gt 120 ] && break
  timeout 90 $B/$b --tokens 32768 --only quantize --warmup 3 --rounds 20 --json $R/$b-$i.json > $R/$b-$i.txt 2>&1; echo "$b-$i rc=$? $(el)"
  grep -E "^\| quantize .*subgroup" $R/$b-$i.txt | cut -c1-110
done; done
for i in 1; do for b in he_main he_new; do
  [ $(el) -gt 150 ] && break
  timeout 45 $B/$b --rounds 8 --json $R/$b-$i.json > $R/$b-$i.txt 2>&1; echo "$b-$i rc=$? $(el)"; grep -E "cached  |per-call" $R/$b-$i.txt
done; done
(cd $OUT && tar czf call2.tgz r && rm -rf r)
echo "== end $(el)"
