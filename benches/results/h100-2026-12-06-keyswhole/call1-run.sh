#!/usr/bin/env bash
# Call 1: A/B of main (M) and wip/tc-keys-whole (K = gaS with KVPACK_TC_SPLIT=0), and the two
# 2-product score splits (s2: no key lo part, s1: no query lo part) at 32k; tensor_attend of K,
# and its SmolLM2 test under each split; registers and machine code of K.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B; for f in .carry14/bin/*.gz; do gunzip -c $f > $B/$(basename $f .gz); chmod +x $B/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; cp .carry14/BUILT_FROM $R/; nvidia-smi -L > $R/gpu.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call1.tgz r && rm -rf r); }
trap fin EXIT
cat $R/gpu.txt
pf() { timeout 70 $B/$1 --prefill-only --tokens 32768 --rounds 10 --json $R/$2.json > $R/$2.txt 2>&1; echo "$2 rc=$? $(el)"; grep -E "^(f16|kivi-4|kivi-2) T=32k Tq=64" $R/$2.txt | grep "tensor\|subgroup\]  " | cut -c1-100 | head -9; }
echo "== A/B $(el)"
pf gaM m1; KVPACK_TC_SPLIT=0 pf gaS k1; KVPACK_TC_SPLIT=2 pf gaS s2; KVPACK_TC_SPLIT=1 pf gaS s1; KVPACK_TC_PLO=1 pf gaS p1; KVPACK_TC_SPLIT=2 KVPACK_TC_PLO=1 pf gaS c1; pf gaM m2; KVPACK_TC_SPLIT=0 pf gaS k2
echo "== ta $(el)"
export KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1
KVPACK_TC_SPLIT=0 timeout 100 $B/taS --test-threads 2 --nocapture > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|panicked|FAILED" $R/ta.txt | cut -c1-160 | head -5
for s in 2 1 P; do if [ $s = P ]; then export KVPACK_TC_PLO=1 KVPACK_TC_SPLIT=0; else export KVPACK_TC_SPLIT=$s KVPACK_TC_PLO=0; fi; timeout 60 $B/taS --nocapture tensor_kernel_on_smollm2 > $R/ta-smollm2-split$s.txt 2>&1; echo "ta split$s rc=$? $(el)"; grep -E "worst|test result|panicked" $R/ta-smollm2-split$s.txt | cut -c1-150 | head -8; done; unset KVPACK_TC_PLO
echo "== ps $(el)"
NVD=$(ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
for s in 2 1; do KVPACK_TC_SPLIT=$s timeout 60 $B/psS --methods kivi-4 > $R/psS-split$s.txt 2>&1; grep -A6 "tensor-prefill" $R/psS-split$s.txt | grep -iE "Register|Local" | head -2; done
KVPACK_TC_SPLIT=0 timeout 60 $B/psS --methods kivi-4 --dump /tmp/dumpK > $R/psK.txt 2>&1; echo "psK rc=$?"; grep -A6 "tensor-prefill" $R/psK.txt | grep -iE "Register|Local|Shared" | head -4
python3 scripts/sass-from-cache.py extract /tmp/dumpK /tmp/sassK > $R/extractK.txt 2>&1; echo "extract rc=$?"
for b in /tmp/sassK/*tensor-prefill*.bin; do n=$(basename $b .bin); gzip -c $b > $R/K-$n.bin.gz; ${NVD:-nvdisasm} -b SM90 -hex $b > /tmp/sassK/$n.sass 2>>$R/extractK.txt; gzip -c /tmp/sassK/$n.sass > $R/K-$n.sass.gz; python3 scripts/sass-from-cache.py segments /tmp/sassK/$n.sass > $R/K-$n.segments.txt 2>&1; echo "$n $(wc -l < /tmp/sassK/$n.sass)"; done
ls $R | head -40
