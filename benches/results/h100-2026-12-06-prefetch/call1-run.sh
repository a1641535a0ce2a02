#!/usr/bin/env bash
# Call 1: the next whole tile's words loaded a tile ahead in the tensor-core prefill kernel
# (pf: KVPACK_TC_PREF 1 = after staging, 2 = before P·V̂, 3 = none) against main before (base);
# registers; device tests and the prefetch mutants.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for d in base pf; do for f in .carry/$d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$d-$n; chmod +x $B/$d-$n; done; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call1.tgz r && rm -rf r); }
trap fin EXIT
pf() { KVPACK_TC_PREF=$3 timeout 60 $B/$1-ga --prefill-only --tokens 32768 --rounds 10 --json $R/$2.json > $R/$2.txt 2>&1; echo "$2 rc=$? $(el)"; grep -E "^ *(f16|kivi-4|kivi-2) T=32k Tq=64.*tensor.*[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/$2.txt | cut -c1-120; }
pf base a1 0; pf pf p1 1; pf pf q1 2; pf pf n1 3; pf base a2 0; pf pf p2 1; pf pf q2 2
for k in 1 2 3; do KVPACK_TC_PREF=$k timeout 40 $B/pf-ps --methods kivi-4,f16 > $R/ps-$k.txt 2>&1; echo "ps$k rc=$? $(el)"; grep -A1 "tensor-prefill" $R/ps-$k.txt | head -8; done
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 150 $B/pf-ta > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|FAILED|panicked" $R/ta.txt | head
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 KVPACK_MUTANT_FILTER="prefetch" timeout 100 $B/pf-mu --nocapture > $R/mu.txt 2>&1; echo "mu rc=$? $(el)"; grep -E "^mutant|test result" $R/mu.txt | cut -c1-150
