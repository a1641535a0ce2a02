#!/usr/bin/env bash
# Session call 2: ga = the tensor-core prefill kernel without naga's index clamps (default now),
# gb = main (ef8ab28 kernel). tensor_attend of ga; gb/ga alternated twice (64 rows, 1k + 32k,
# longer warm-up against the H200's clock steps); ga with KVPACK_TC_BAR=1; the decode kernel
# with every kernel unclamped (KVPACK_UNCHECKED=1) against ga; ga's machine code.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call2.tgz r && rm -rf r); }
trap fin EXIT
ok() { [ $(el) -lt $1 ]; }
nvidia-smi dmon -s pc -d 1 > $R/dmon.txt 2>&1 & DM=$!
KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 80 $B/ta --test-threads 2 --nocapture > $R/ta.txt 2>&1; echo "ta rc=$? $(el)"; grep -E "test result|FAILED|panicked" $R/ta.txt | cut -c1-150 | head -4
f() { b=$1; n=$2; t=$3; shift 3; env "$@" timeout 70 $B/$b --prefill-only --tokens $t --warmup 15 --rounds 15 --only "Tq=64 [wgsl-subgroup] (tensor cores" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el) $*"; grep -E "^ *(f16|kivi-4) T=[0-9]+k? Tq=64 .*tensor cores\) +[0-9]" $R/$n.txt | head -4 | cut -c1-100; }
for p in 1 2; do f gb b$p 1024,32768; f ga c$p 1024,32768 KVPACK_TC_CHECKED=1; f ga a$p 1024,32768; ok 150 || break; done
ok 215 && f ga r1 1024,32768 KVPACK_TC_BAR=1
d() { n=$1; shift; env "$@" timeout 50 $B/ga --decode-only --tokens 32768 --warmup 15 --rounds 15 --only "kivi-4 T=32k [wgsl-subgroup],f16 T=32k [wgsl-subgroup]" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el) $*"; grep -E "^ *(f16|kivi-4) T=32k \[wgsl-subgroup\] +[0-9]" $R/$n.txt | head -2 | cut -c1-100; }
ok 240 && d d0; ok 260 && d du KVPACK_UNCHECKED=1
NVD=$(ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
ok 280 && { timeout 30 $B/ps --methods f16,kivi-4 --dump /tmp/dump > $R/ps.txt 2>&1; echo "ps rc=$? $(el)"
python3 scripts/sass-from-cache.py extract /tmp/dump /tmp/sass > $R/extract.txt 2>&1
for b in /tmp/sass/*tensor-prefill*.bin; do n=$(basename $b .bin); ${NVD:-nvdisasm} -b SM90 -hex $b > /tmp/sass/$n.sass 2>>$R/extract.txt; gzip -c /tmp/sass/$n.sass > $R/$n.sass.gz; python3 scripts/sass-from-cache.py segments /tmp/sass/$n.sass > $R/$n.segments.txt 2>&1; head -1 $R/$n.segments.txt; done; }
kill $DM 2>/dev/null
