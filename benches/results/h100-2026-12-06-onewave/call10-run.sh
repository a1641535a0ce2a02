#!/usr/bin/env bash
# Call 10: tests/tensor_attend.rs of 12da6e2 on the device (Auto at both of TENSOR_AUTO's first
# points, SmolLM2 fixtures carried), KVPACK_REQUIRE_TENSOR=1; gpu_attend of the commit after.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
fin() { (cd $OUT && tar czf call10.tgz r && rm -rf r); }
trap fin EXIT
# The decode kernel's splits in one wave (the arm "(one-wave split)": 32 splits of 1,024 at 32k
# against the automatic 34 of 992, the last of 32 tokens) at 32k twice, then 128k once.
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
d() { timeout $3 $B/ga --decode-only --tokens $2 --rounds 20 --json $R/$1.json > $R/$1.txt 2>&1; echo "$1 rc=$? $(el)"; grep -E "^ +(f16|kivi-4) T=[0-9]+k \[wgsl-subgroup\]( \((one-wave split|2x split|1/2 split)\))? +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ *$" $R/$1.txt | cut -c1-100; }
d d32a 32768 45; d d32b 32768 45
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 100 $B/ta --nocapture > $R/ta.txt 2>&1; echo "ta rc=$?"; grep -E "test result|FAILED|panicked|Auto at" $R/ta.txt | head
d d128 131072 75
