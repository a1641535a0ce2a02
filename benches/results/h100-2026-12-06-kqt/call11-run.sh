#!/usr/bin/env bash
# Call 11 (build ga = the score step as K̂·Qᵀ, gb = 66df767 before it): tests/tensor_attend.rs
# on the device; the new build's tensor-prefill machine code; A/B gb/ga alternated twice
# (tensor-core arms at 1k and 32k); where the fixed cost goes (KVPACK_TC_FIXED 1/2 at 128, 1k,
# 32k); the decode kernel's one-wave split arm at 32k.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call11.tgz r && rm -rf r); }
trap fin EXIT
ok() { [ $(el) -lt $1 ]; }
nvidia-smi dmon -s pc -d 1 > $R/dmon.txt 2>&1 & DM=$!
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 80 $B/ta --test-threads 2 --nocapture > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|FAILED|panicked|worst" $R/ta.txt | cut -c1-150 | head -12
NVD=$(ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
timeout 60 $B/ps --methods kivi-4,f16 --dump /tmp/dump > $R/ps.txt 2>&1; echo "ps rc=$? $(el)"; grep -A6 "tensor-prefill" $R/ps.txt | grep -iE "tensor-prefill|Register|Local" | head -6
python3 scripts/sass-from-cache.py extract /tmp/dump /tmp/sass > $R/extract.txt 2>&1; echo "extract rc=$?"
for b in /tmp/sass/*tensor-prefill*.bin; do n=$(basename $b .bin); ${NVD:-nvdisasm} -b SM90 -hex $b > /tmp/sass/$n.sass 2>>$R/extract.txt; gzip -c /tmp/sass/$n.sass > $R/$n.sass.gz; python3 scripts/sass-from-cache.py segments /tmp/sass/$n.sass > $R/$n.segments.txt 2>&1; echo "$n $(wc -l < /tmp/sass/$n.sass)"; awk '$2+0>=200' $R/$n.segments.txt | cut -c1-110; done
# f: binary, name, tokens, env...: the tensor-core arms only.
f() { b=$1; n=$2; t=$3; shift 3; env "$@" timeout 70 $B/$b --prefill-only --tokens $t --rounds 10 --only "(tensor cores" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el)"; grep -E "^ *(f16|kivi-4) T=[0-9]+k? Tq=(4|16|64) .*tensor cores\) +[0-9]" $R/$n.txt | cut -c1-100; }
ok 400 && f gb o1 1024,32768; ok 400 && f ga n1 1024,32768; ok 430 && f gb o2 1024,32768; ok 430 && f ga n2 1024,32768
ok 470 && f ga x1 128,1024,32768 KVPACK_TC_FIXED=1; ok 500 && f ga x2 128,1024,32768 KVPACK_TC_FIXED=2
d() { timeout $3 $B/ga --decode-only --tokens $2 --rounds 20 --json $R/$1.json > $R/$1.txt 2>&1; echo "$1 rc=$? $(el)"; grep -E "^ +(f16|kivi-4) T=[0-9]+k \[wgsl-subgroup\]( \((one-wave split|2x split|1/2 split)\))? +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ *$" $R/$1.txt | cut -c1-100; }
ok 530 && d d32 32768 45
kill $DM 2>/dev/null
