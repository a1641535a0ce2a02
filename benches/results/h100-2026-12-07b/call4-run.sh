#!/usr/bin/env bash
# Session 2026-12-07c call 4 (H100): KVPACK_DEC_VARIANT=5 (KIVI's value words loaded before the
# tile's softmax) against the default: machine code (pipeline_stats --dump, nvdisasm: registers,
# where the value LDGs sit), then decode at 1k / 32k / 128k alternated twice.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call4.tgz r && rm -rf r); }
trap fin EXIT
ok() { [ $(el) -lt $1 ]; }
nvidia-smi dmon -s pc -d 1 -o T > $R/dmon.txt 2>&1 & DM=$!
NVD=$(ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
for u in 0 5; do
  env KVPACK_DEC_VARIANT=$u timeout 60 $B/ps --methods kivi-4,kivi-2 --variants unroll --dump /tmp/dump$u > $R/ps$u.txt 2>&1; echo "ps$u rc=$? $(el)"
  python3 scripts/sass-from-cache.py extract /tmp/dump$u /tmp/sass$u > $R/extract$u.txt 2>&1
  for b in /tmp/sass$u/*.bin; do n=$(basename $b .bin); ${NVD:-nvdisasm} -b SM90 -hex $b > /tmp/sass$u/$n.sass 2>>$R/extract$u.txt; gzip -c /tmp/sass$u/$n.sass > $R/$n-v$u.sass.gz; python3 scripts/sass-from-cache.py segments /tmp/sass$u/$n.sass > $R/$n-v$u.segments.txt 2>&1; s=/tmp/sass$u/$n.sass; echo "$n v$u: $(grep -c '/\*[0-9a-f]*\*/' $s) instr, LDG $(grep -c LDG $s), LOP3 $(grep -c LOP3 $s), FFMA $(grep -c FFMA $s), STL $(grep -c STL $s)"; done
  grep -iE "^[a-z].*:$|Register|Spill|Local" $R/ps$u.txt | head -12 | paste - - | cut -c1-110
done
d() { n=$1; v=$2; echo "$(date +%T) start $n" >> $R/times.txt; env KVPACK_DEC_VARIANT=$v timeout 70 $B/ga --decode-only --tokens 1024,32768,131072 --warmup 10 --rounds 20 --only "kivi-4 T=,kivi-2 T=" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el) v=$v"; grep -E "^ *(kivi-2|kivi-4) T=[0-9]+k \[wgsl-subgroup\] +[0-9]" $R/$n.txt | head -6 | cut -c1-90; }
for p in 1 2; do ok 260 || break; d v0p$p 0; d v5p$p 5; done
kill $DM 2>/dev/null
