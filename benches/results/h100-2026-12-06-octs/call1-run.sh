#!/usr/bin/env bash
# Call 1: f16 rows read eight channels at a time in the tensor-core prefill kernel (new) against
# main (base); the prefill sweep at 1k-3k; the device tests of the new build.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for d in base new; do for f in .carry/$d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$d-$n; chmod +x $B/$d-$n; done; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call1.tgz r && rm -rf r); }
trap fin EXIT
pf() { timeout 60 $B/$1-ga --prefill-only --tokens 32768 --rounds 10 --json $R/$2.json > $R/$2.txt 2>&1; echo "$2 rc=$? $(el)"; grep -E "^ *(f16|kivi-4) T=32k.*[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/$2.txt | cut -c1-120; }
timeout 60 $B/new-ps --methods f16,kivi-4 > $R/ps-new.txt 2>&1; echo "ps rc=$? $(el)"; grep -iE "prefill|regist" $R/ps-new.txt | head -30
pf base b1; pf new n1; pf base b2; pf new n2
timeout 100 $B/new-ga --prefill-only --tokens 1024,2048,3072 --rounds 20 --json $R/sw.json > $R/sw.txt 2>&1; echo "sweep rc=$? $(el)"; grep -E "[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/sw.txt | grep -v "^[a-z]" | cut -c1-120
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 150 $B/new-ta > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|worst|FAILED|panicked" $R/ta.txt | head
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 KVPACK_MUTANT_FILTER="tensor attend: f16" timeout 120 $B/new-mu > $R/mu.txt 2>&1; echo "mu rc=$? $(el)"; tail -8 $R/mu.txt
