#!/usr/bin/env bash
# Call B: main (N) against the joint tile staging (J), the wholly visible tiles' softmax (M) and
# both (JM), prefill-only at 4k and 32k, interleaved N JM J M N JM; then tensor_attend of JM with
# SmolLM2's story-512 (trimmed), pipeline_stats of JM, the tensor-core planted bugs of JM.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B; for f in .carry16/bin/*.gz; do gunzip -c $f > $B/$(basename $f .gz); chmod +x $B/$(basename $f .gz); done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; gunzip -c .carry16/fx/story-512.safetensors.gz > $FX/story-512.safetensors
R=$OUT/r; mkdir -p $R; cp .carry16/BUILT_FROM $R/; nvidia-smi -L > $R/gpu.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf callB.tgz r && rm -rf r); }
trap fin EXIT
cat $R/gpu.txt
pf() { timeout 70 $B/$1 --prefill-only --tokens 4096,32768 --rounds 10 --json $R/$2.json > $R/$2.txt 2>&1; echo "$2 rc=$? $(el)"; grep -E "^(f16|kivi-4|kivi-2) T=(4k|32k) Tq=64.*tensor" $R/$2.txt | cut -c1-100; }
pf gaN n1; pf gaJM jm1; pf gaJ j1; pf gaM m1; pf gaN n2; pf gaJM jm2
export KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1
timeout 100 $B/taJM --test-threads 2 --nocapture > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|panicked|FAILED|smollm2|worst" $R/ta.txt | cut -c1-170 | head -12
timeout 40 $B/psJM --methods kivi-4,f16 > $R/ps.txt 2>&1; grep -A6 "tensor-prefill" $R/ps.txt | grep -iE "Register|Local" | head -4
KVPACK_MUTANT_FILTER="tensor attend" timeout 170 $B/muJM --nocapture > $R/mu.txt 2>&1; echo "mu rc=$? $(el)"; grep -E "^mutants:|ESCAPED|escaped|test result" $R/mu.txt | head -8
