#!/usr/bin/env bash
# Call 2: the tensor-core prefill kernel's KIVI octs made with one fused multiply-add and no
# zero-code branch (kivi_make, new) against the build before (base: kivi_reconstruct),
# alternated twice, 64 rows at 32k; registers; device tests (tensor_attend, KIVI oct mutants).
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call2.tgz r && rm -rf r); }
trap fin EXIT
pf() { timeout 90 $B/$1 --prefill-only --tokens 32768 --rounds 10 --json $R/$2.json > $R/$2.txt 2>&1; echo "$2 rc=$? $(el)"; grep -E "^ *(f16|kivi-4|kivi-2) T=32k Tq=64.*tensor.*[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/$2.txt | cut -c1-120; }
pf ga-base a1; pf ga m1; pf ga-base a2; pf ga m2
timeout 40 $B/ps --methods kivi-4,kivi-2 > $R/ps.txt 2>&1; echo "ps rc=$? $(el)"; grep -A5 "tensor-prefill:" $R/ps.txt | grep -E "tensor-prefill|Register"
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 150 $B/ta --nocapture > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|FAILED|panicked" $R/ta.txt | cut -c1-160 | head -20
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 KVPACK_MUTANT_FILTER="tensor attend: KIVI" timeout 150 $B/mu --nocapture > $R/mu.txt 2>&1; echo "mu rc=$? $(el)"; grep -E "^mutant|mutants:|test result" $R/mu.txt | cut -c1-160
