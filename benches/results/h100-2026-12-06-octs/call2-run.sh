#!/usr/bin/env bash
# Call 2: KIVI codes staged eight per code word in the tensor-core prefill kernel (oct) against
# main with the f16 eight-channel rows (r8); oct at 4k; device tests of oct.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for d in r8 oct; do for f in .carry/$d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$d-$n; chmod +x $B/$d-$n; done; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call2.tgz r && rm -rf r); }
trap fin EXIT
pf() { timeout 60 $B/$1-ga --prefill-only --tokens 32768 --rounds 10 --json $R/$2.json > $R/$2.txt 2>&1; echo "$2 rc=$? $(el)"; grep -E "^ *(f16|kivi-4|kivi-2) T=32k Tq=64.*tensor.*[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/$2.txt | cut -c1-120; }
pf r8 a1; pf oct o1; pf r8 a2; pf oct o2
timeout 60 $B/oct-ps --methods kivi-4,kivi-2 > $R/ps-oct.txt 2>&1; echo "ps rc=$? $(el)"; grep -A1 "tensor-prefill" $R/ps-oct.txt
timeout 80 $B/oct-ga --prefill-only --tokens 4096 --rounds 20 --json $R/o4k.json > $R/o4k.txt 2>&1; echo "4k rc=$? $(el)"; grep -E "Tq=64.*[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/o4k.txt | grep -v "^[a-z]" | cut -c1-120
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 150 $B/oct-ta > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|FAILED|panicked" $R/ta.txt | head
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 KVPACK_MUTANT_FILTER="oct" timeout 150 $B/oct-mu --nocapture > $R/mu.txt 2>&1; echo "mu rc=$? $(el)"; grep -E "^mutant|test result" $R/mu.txt | cut -c1-150
