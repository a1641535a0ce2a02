#!/usr/bin/env bash
# Call 7: the tensor-core prefill kernel in one wave (kernel_target = the split target,
# Call::wave_tokens; the new default "(tensor cores)") against twice the target (the rule before:
# "(tensor cores, two waves)"), 64 and 16 rows, at 32k (twice), 4k (twice) and 128k (once), two
# processes each; the decode/prefill/tensor kernels at 4, 8, 16 rows at each T (TENSOR_AUTO_VECTORS);
# tensor_attend on the device (KVPACK_REQUIRE_TENSOR=1).
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call7.tgz r && rm -rf r); }
trap fin EXIT
nvidia-smi dmon -s pc -d 1 > $R/dmon.txt 2>&1 & DM=$!
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 100 $B/ta --nocapture > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|FAILED|panicked" $R/ta.txt | head
w() { timeout $3 $B/ga --prefill-only --tokens $2 --rounds 10 --json $R/$1.json > $R/$1.txt 2>&1; echo "$1 rc=$? $(el)"; grep -E "^ +(f16|kivi-4) T=[0-9]+k Tq=(16|64) .*(tensor|decode).* +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ *$" $R/$1.txt | cut -c1-120; }
w w32a 32768 80; w w4a 4096 60; w w32b 32768 80; w w4b 4096 60; w w128 131072 200
kill $DM 2>/dev/null
