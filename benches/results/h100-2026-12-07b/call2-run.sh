#!/usr/bin/env bash
# Session 2026-12-07c call 2 (H200): full run (gpu_kivi, gpu_attend, PyTorch) of the tree
# committed as 7882668 (the bits of 1.0 from workgroup memory by default); the tensor_attend
# tests on the GPU; 64-row prefill at 256 / 512 / 1,024 tokens; then decode at 32k / 128k with
# KVPACK_DEC_VARIANT 0 (default) / 3 (the literal, the kernel before) alternated twice.
set -u
DV=${1:-0}  # KVPACK_DEC_VARIANT for gpu_attend (the kernel as a later default makes it)
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
for f in .carry/d/*.gz; do n=$(basename $f .gz); gunzip -c $f > $B/$n; chmod +x $B/$n; done
R=$OUT/r; mkdir -p $R/full; nvidia-smi -L | tee $R/gpu.txt; nvidia-smi > $R/full/nvidia-smi.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call1.tgz r && rm -rf r); }
trap fin EXIT
ok() { [ $(el) -lt $1 ]; }
nvidia-smi dmon -s pc -d 1 -o T > $R/dmon.txt 2>&1 & DM=$!
echo "$(date +%T) start gk" >> $R/times.txt
timeout 60 $B/gk --warmup 20 --rounds 50 --json $R/full/gpu_kivi.json --plot $R/full/gpu_kivi.png > $R/full/gpu_kivi.txt 2>&1; echo "gk rc=$? $(el)"
echo "$(date +%T) start ga" >> $R/times.txt
env KVPACK_DEC_VARIANT=$DV timeout 250 $B/ga --json $R/full/gpu_attend.json --plot $R/full/gpu_attend.png > $R/full/gpu_attend.txt 2>&1; echo "ga rc=$? $(el) DV=$DV"; echo "KVPACK_DEC_VARIANT=$DV" > $R/full/env.txt
echo "$(date +%T) start torch" >> $R/times.txt
timeout 150 python3 benches/torch_baseline.py $R/full/torch_baseline.json > $R/full/torch_baseline.txt 2>&1; echo "torch rc=$? $(el)"
echo "$(date +%T) end torch" >> $R/times.txt
kill $DM 2>/dev/null
grep -E "^ *(f16|kivi-4|kivi-2) T=(1k|32k|128k) " $R/full/gpu_attend.txt | head -20 | cut -c1-110
if ok 400; then
  SH=/work/shared/fixtures/smollm2-135m; mkdir -p $SH 2>/dev/null || true
  gunzip -c .carry/fx/paris.safetensors.gz > $SH/paris.safetensors 2>/dev/null; cp .carry/fx/README.md $SH/ 2>/dev/null
  ls -la $SH > $R/fixtures.txt 2>&1
  env KVPACK_REQUIRE_GPU=1 timeout 100 $B/ta --test-threads 1 > $R/tensor_attend.txt 2>&1; echo "ta rc=$? $(el)"; tail -4 $R/tensor_attend.txt
fi
if ok 440; then
  timeout 60 $B/ga --prefill-only --tokens 256,512,1024 --warmup 10 --rounds 20 --json $R/pf512.json > $R/pf512.txt 2>&1; echo "pf rc=$? $(el)"
  grep -E "Tq=64" $R/pf512.txt | head -12 | cut -c1-110
fi
d() { n=$1; v=$2; echo "$(date +%T) start $n" >> $R/times.txt; env KVPACK_DEC_VARIANT=$v timeout 60 $B/ga --decode-only --tokens 32768,131072 --warmup 10 --rounds 20 --only "kivi-4 T=,kivi-2 T=" --json $R/$n.json > $R/$n.txt 2>&1; echo "$n rc=$? $(el) v=$v"; grep -E "^ *(kivi-2|kivi-4) T=[0-9]+k \[wgsl-subgroup\] +[0-9]" $R/$n.txt | head -4 | cut -c1-90; }
for p in 1 2; do ok 480 || break; d v0p$p 0; d v3p$p 3; done
