#!/usr/bin/env bash
# Call 13 (ga = ef8ab28): where the tensor-core prefill kernel's fixed cost goes
# (KVPACK_TC_FIXED 1 / 2 / the kernel, --unchecked, 64 rows at 128 and 1k tokens); the decode
# kernel's one-wave split arm at 32k.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B; gunzip -c .carry/d/ga.gz > $B/ga; chmod +x $B/ga
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call13.tgz r && rm -rf r); }
trap fin EXIT
u() { n=$1; shift; env "$@" timeout 50 $B/ga --prefill-only --unchecked --tokens 128,1024 --rounds 10 --only "Tq=64 [wgsl-subgroup] (tensor cores)" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el)"; grep -E "^ *(f16|kivi-4) T=[0-9]+k? Tq=64 .*tensor cores\) +[0-9]" $R/$n.txt | head -4 | cut -c1-100; }
u x1 KVPACK_TC_FIXED=1; u x2 KVPACK_TC_FIXED=2; u x0 KVPACK_TC_FIXED=0; u n1 KVPACK_TC_NOLOAD=1
timeout 45 $B/ga --decode-only --tokens 32768 --rounds 20 --json $R/d32.json > $R/d32.txt 2>&1; echo "d32 rc=$? $(el)"; grep -E "^ +(copy 1 GiB|(f16|kivi-4) T=[0-9]+k \[wgsl-subgroup\]( \((one-wave split)\))?) +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ *$" $R/d32.txt | cut -c1-100
