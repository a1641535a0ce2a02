#!/usr/bin/env bash
# Session 2026-12-07 call 1: (1) the decode kernel's machine code with and without naga's index
# clamps (pipeline_stats --variants unroll, KVPACK_UNCHECKED=1); (2) decode A/B default vs
# KVPACK_UNCHECKED=1 alternated twice, GPU kept busy 20 ms before each round; one default run
# with --spin-ms 0 (does the clock hold without the spin? dmon with time stamps);
# (3) the tensor-core prefill kernel with KVPACK_TC_BAR=1 against the default, alternated.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call1.tgz r && rm -rf r); }
trap fin EXIT
ok() { [ $(el) -lt $1 ]; }
nvidia-smi dmon -s pc -d 1 -o T > $R/dmon.txt 2>&1 & DM=$!
NVD=$(ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
for u in 0 1; do
  env KVPACK_UNCHECKED=$u timeout 60 $B/ps --methods f16,kivi-4 --variants unroll --dump /tmp/dump$u > $R/ps$u.txt 2>&1; echo "ps$u rc=$? $(el)"
  python3 scripts/sass-from-cache.py extract /tmp/dump$u /tmp/sass$u > $R/extract$u.txt 2>&1
  for b in /tmp/sass$u/*.bin; do n=$(basename $b .bin); ${NVD:-nvdisasm} -b SM90 -hex $b > /tmp/sass$u/$n.sass 2>>$R/extract$u.txt; gzip -c /tmp/sass$u/$n.sass > $R/$n-u$u.sass.gz; python3 scripts/sass-from-cache.py segments /tmp/sass$u/$n.sass > $R/$n-u$u.segments.txt 2>&1; echo "$n u$u: $(grep -c . /tmp/sass$u/$n.sass) lines, VIADDMNMX $(grep -c VIADDMNMX /tmp/sass$u/$n.sass), IMNMX $(grep -c IMNMX /tmp/sass$u/$n.sass)"; done
done
d() { n=$1; e=$2; a=${3:-}; echo "$(date +%T) start $n" >> $R/times.txt; env $e timeout 90 $B/ga $a --decode-only --tokens 1024,32768 --warmup 10 --rounds 20 --only "kivi-4 T=,f16 T=" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el) $e $a"; echo "$(date +%T) end $n" >> $R/times.txt; grep -E "^ *(f16|kivi-4) T=[0-9]+k \[wgsl-subgroup\] +[0-9]" $R/$n.txt | head -6 | cut -c1-90; }
ok 100 && d s0 X=0 "--spin-ms 0"
for p in 1 2; do ok 250 || break; d d$p X=0; d u$p KVPACK_UNCHECKED=1; done
f() { n=$1; shift; echo "$(date +%T) start $n" >> $R/times.txt; env "$@" timeout 70 $B/ga --prefill-only --tokens 1024,32768 --warmup 10 --rounds 15 --only "Tq=64 [wgsl-subgroup] (tensor cores" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el) $*"; echo "$(date +%T) end $n" >> $R/times.txt; grep -E "^ *(f16|kivi-4) T=[0-9]+k? Tq=64 .*tensor cores\) +[0-9]" $R/$n.txt | head -4 | cut -c1-100; }
for p in 1 2; do ok 330 || break; f a$p; f r$p KVPACK_TC_BAR=1; done
kill $DM 2>/dev/null
