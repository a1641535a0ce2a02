#!/usr/bin/env bash
# Session call 1: ga = tc-q-loads + KVPACK_TC_BAR knob (branch tc-q-loads), gb = main (ef8ab28
# kernel). tensor_attend of ga (BAR 0 and 1); then gb / ga BAR 0..3 alternated twice
# (tensor-core arms, 64 rows at 1k and 32k).
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
FX=$(cd .. && pwd)/shared/fixtures/smollm2-135m; mkdir -p $FX; for f in .carry/fx/*.gz; do gunzip -c $f > $FX/$(basename $f .gz); done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call1.tgz r && rm -rf r); }
trap fin EXIT
ok() { [ $(el) -lt $1 ]; }
nvidia-smi dmon -s pc -d 1 > $R/dmon.txt 2>&1 & DM=$!
for b in 0 1; do KVPACK_TC_BAR=$b KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_TENSOR=1 timeout 80 $B/ta --test-threads 2 --nocapture > $R/ta$b.txt 2>&1; echo "ta$b rc=$? $(el)"; grep -E "test result|FAILED|panicked|rescales" $R/ta$b.txt | cut -c1-150 | head -6; done
f() { b=$1; n=$2; t=$3; shift 3; env "$@" timeout 60 $B/$b --prefill-only --tokens $t --rounds 10 --only "Tq=64 [wgsl-subgroup] (tensor cores" --unchecked --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el) $*"; grep -E "^ *(f16|kivi-4) T=[0-9]+k? Tq=64 .*tensor cores\) +[0-9]" $R/$n.txt | head -4 | cut -c1-100; grep -ciE "mismatch|fail|wrong" $R/$n.txt; }
for p in 1 2; do
  f gb b$p 1024,32768; f ga a0$p 1024,32768 KVPACK_TC_BAR=0; f ga a1$p 1024,32768 KVPACK_TC_BAR=1
  f ga u0$p 1024,32768 KVPACK_TC_UNCHECKED=1; f ga u1$p 1024,32768 KVPACK_TC_UNCHECKED=1 KVPACK_TC_BAR=1
  f ga p0$p 1024,32768 KVPACK_TC_SMX=1; f ga q0$p 1024,32768 KVPACK_TC_SMX=1 KVPACK_TC_UNCHECKED=1
  [ $p = 1 ] && { f ga a2$p 1024,32768 KVPACK_TC_BAR=2; f ga a3$p 1024,32768 KVPACK_TC_BAR=3; }
  ok 330 || break
done

# ga's machine code (f16 and KIVI-4 tensor-prefill), knob 0.
NVD=$(ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
ok 400 && { timeout 50 $B/ps --methods f16,kivi-4 --dump /tmp/dump > $R/ps.txt 2>&1; echo "ps rc=$? $(el)"; grep -iE "tensor-prefill|Register|Local" $R/ps.txt | head -12
python3 scripts/sass-from-cache.py extract /tmp/dump /tmp/sass > $R/extract.txt 2>&1; ls /tmp/sass | head -30 > $R/sass-list.txt
for b in /tmp/sass/*tensor-prefill*.bin; do n=$(basename $b .bin); ${NVD:-nvdisasm} -b SM90 -hex $b > /tmp/sass/$n.sass 2>>$R/extract.txt; gzip -c /tmp/sass/$n.sass > $R/$n.sass.gz; python3 scripts/sass-from-cache.py segments /tmp/sass/$n.sass > $R/$n.segments.txt 2>&1; head -1 $R/$n.segments.txt; done; }
# Where the time goes at 32k (no reads; no reads or scores; no reads or softmax).
for n in 1 2 3; do ok 430 && f ga n$n 32768 KVPACK_TC_NOLOAD=$n; done
kill $DM 2>/dev/null
