#!/usr/bin/env bash
# Session 2026-12-07c call 3 (H100): the tree committed as 4c6bd84 (the decode kernel's bits of
# 1.0 from workgroup memory as the default): its machine code (pipeline_stats --dump, nvdisasm:
# the default must show variant 3's LOP3 count of the earlier call), then the attention tests on
# the GPU with 32-wide subgroups (attend_kernels, attend with SmolLM2's paris q/k/v,
# attend_positions), the default and KVPACK_DEC_VARIANT=3 (the literal).
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call3.tgz r && rm -rf r); }
trap fin EXIT
ok() { [ $(el) -lt $1 ]; }
NVD=$(ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
for u in 0; do
  timeout 60 $B/ps --methods kivi-4,kivi-2 --variants unroll --dump /tmp/dump$u > $R/ps$u.txt 2>&1; echo "ps$u rc=$? $(el)"
  python3 scripts/sass-from-cache.py extract /tmp/dump$u /tmp/sass$u > $R/extract$u.txt 2>&1
  for b in /tmp/sass$u/*.bin; do n=$(basename $b .bin); ${NVD:-nvdisasm} -b SM90 -hex $b > /tmp/sass$u/$n.sass 2>>$R/extract$u.txt; python3 scripts/sass-from-cache.py segments /tmp/sass$u/$n.sass > $R/$n-v$u.segments.txt 2>&1; s=/tmp/sass$u/$n.sass; echo "$n v$u: $(grep -c '/\*[0-9a-f]*\*/' $s) instr, LOP3 $(grep -c LOP3 $s), SHF $(grep -c 'SHF\.' $s), HADD2.F32 $(grep -c HADD2.F32 $s), FFMA $(grep -c FFMA $s)"; done
  grep -iE "^[a-z].*:$|Register" $R/ps$u.txt | head -12 | paste - - | cut -c1-110
done
for SH in /work/shared/fixtures/smollm2-135m ../shared/fixtures/smollm2-135m; do mkdir -p $SH 2>/dev/null || continue
  gunzip -c .carry/fx/paris.safetensors.gz > $SH/paris.safetensors 2>/dev/null; cp .carry/fx/README.md $SH/ 2>/dev/null; done
ls -la ../shared/fixtures/smollm2-135m > $R/fixtures.txt 2>&1
t() { n=$1; v=$2; ok $3 || return; env KVPACK_DEC_VARIANT=$v KVPACK_REQUIRE_GPU=1 KVPACK_REQUIRE_WIDE_SUBGROUPS=1 timeout 120 $B/$n --test-threads 8 > $R/$n-v$v.txt 2>&1; echo "$n v$v rc=$? $(el)"; grep -E "test result|FAILED|panicked|skip" $R/$n-v$v.txt | head -5; }
t ak 0 400; t at 0 400; t ak 3 440
