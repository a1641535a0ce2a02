#!/usr/bin/env bash
# Call 1: the decode kernel's reference max with slack (DEC_TAU, default) against the exact
# running max per tile (KVPACK_DEC_VARIANT=2, the kernel before), alternated twice, decode
# only; registers of both; device tests (attend_kernels with wide subgroups, the mutants).
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call1.tgz r && rm -rf r); }
trap fin EXIT
for k in 0 2; do KVPACK_DEC_VARIANT=$k timeout 40 $B/ps --methods kivi-4,kivi-2,f16 > $R/ps-$k.txt 2>&1; echo "ps$k rc=$? $(el)"; grep -iE "^[a-z].*:$|Register" $R/ps-$k.txt | head -24 | paste - - | cut -c1-110; done
dc() { KVPACK_DEC_VARIANT=$2 timeout 120 $B/ga --decode-only --tokens 1024,32768,131072 --rounds 20 --json $R/$1.json > $R/$1.txt 2>&1; echo "$1 rc=$? $(el)"; grep -E "^ *(f16|kivi-4|kivi-2) T=[0-9]+k +[0-9]" $R/$1.txt | cut -c1-120; }
dc exact1 2; dc tau1 0; dc exact2 2; dc tau2 0
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_WIDE_SUBGROUPS=1 timeout 150 $B/ak --nocapture > $R/ak.txt 2>&1; echo "ak rc=$? $(el)"; grep -E "test result|FAILED|panicked|rising" $R/ak.txt | cut -c1-200 | head -20
KVPACK_REQUIRE_GPU=1 KVPACK_MUTANT_FILTER="reference max" timeout 100 $B/mu --nocapture > $R/mu1.txt 2>&1; echo "mu1 rc=$? $(el)"; grep -E "^mutant|mutants:|test result" $R/mu1.txt | cut -c1-160
KVPACK_REQUIRE_GPU=1 KVPACK_MUTANT_FILTER="online-softmax rescale" timeout 100 $B/mu --nocapture > $R/mu2.txt 2>&1; echo "mu2 rc=$? $(el)"; grep -E "^mutant|mutants:|test result" $R/mu2.txt | cut -c1-160
