#!/usr/bin/env bash
# Call 2: main before (M) and after (N) at 32k; tensor_attend of N, and its SmolLM2 story-512
# test (every 5th layer; the other layers zeroed in the carried copy, unread) under
# KVPACK_TC_SPLIT=0/2/1; the tensor-core planted bugs on the device; floors of N (NOLOAD=1,
# split 0 and 2); the 1k / 4k sweep of N.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B; for f in .carry14/bin/*.gz; do gunzip -c $f > $B/$(basename $f .gz); chmod +x $B/$(basename $f .gz); done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; gunzip -c .carry14/fx/story-512.safetensors.gz > $FX/story-512.safetensors
R=$OUT/r; mkdir -p $R; cp .carry14/BUILT_FROM $R/; nvidia-smi -L > $R/gpu.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call2.tgz r && rm -rf r); }
trap fin EXIT
cat $R/gpu.txt
pf() { timeout 70 $B/$1 --prefill-only --tokens 32768 --rounds 10 --json $R/$2.json > $R/$2.txt 2>&1; echo "$2 rc=$? $(el)"; grep -E "^(f16|kivi-4|kivi-2) T=32k Tq=64" $R/$2.txt | grep "tensor\|prefill kernel)" | cut -c1-100 | head -9; }
export KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1
timeout 100 $B/taN --test-threads 2 --nocapture > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|panicked|FAILED|smollm2" $R/ta.txt | cut -c1-170 | head -8
for s in 2; do KVPACK_TC_SPLIT=$s timeout 60 $B/taN --nocapture tensor_kernel_on_smollm2 > $R/ta-smollm2-split$s.txt 2>&1; echo "ta split$s rc=$? $(el)"; grep -E "worst|test result|panicked" $R/ta-smollm2-split$s.txt | cut -c1-170 | head -8; done
pf gaN n1; pf gaM m1
echo "== ps $(el)"
timeout 60 $B/psN --methods kivi-4,f16 > $R/psN.txt 2>&1; grep -A6 "tensor-prefill" $R/psN.txt | grep -iE "Register|Local" | head -4
echo "== mu $(el)"
KVPACK_MUTANT_FILTER="tensor attend" timeout 80 $B/muN --nocapture > $R/mu.txt 2>&1; echo "mu rc=$? $(el)"; grep -E "^mutants:|ESCAPED|escaped|test result" $R/mu.txt | head -8
