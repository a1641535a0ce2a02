#!/usr/bin/env bash
# Call 4: the weights' low part unscaled (pvlo: P_hi·V and P_lo·V into one accumulator) against
# main with the eight-element reads (oct); pvlo's precision on SmolLM2 and its planted bugs.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for d in oct pvlo; do for f in .carry/$d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$d-$n; chmod +x $B/$d-$n; done; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call4.tgz r && rm -rf r); }
trap fin EXIT
pf() { timeout 60 $B/$1-ga --prefill-only --tokens 32768 --rounds 10 --json $R/$2.json > $R/$2.txt 2>&1; echo "$2 rc=$? $(el)"; grep -E "^ *(f16|kivi-4|kivi-2) T=32k Tq=(64|16).*tensor.*[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/$2.txt | cut -c1-120; }
pf oct a1; pf pvlo p1; pf oct a2; pf pvlo p2
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 150 $B/pvlo-ta --nocapture > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|worst|FAILED|panicked" $R/ta.txt | cut -c1-200 | head -30
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 KVPACK_MUTANT_FILTER="low weights" timeout 120 $B/pvlo-mu --nocapture > $R/mu.txt 2>&1; echo "mu rc=$? $(el)"; grep -E "^mutant|test result|mutants:" $R/mu.txt | cut -c1-150
