#!/usr/bin/env bash
# Call C: the A/B of call B again at 32k only (call B's 4k + 32k runs outlasted their 70 s).
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B; for n in gaN gaJM gaJ gaM; do [ -x $B/$n ] || { gunzip -c .carry16/bin/$n.gz > $B/$n; chmod +x $B/$n; }; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf callC.tgz r && rm -rf r); }
trap fin EXIT
pf() { timeout 50 $B/$1 --prefill-only --tokens 32768 --rounds 10 --json $R/$2.json > $R/$2.txt 2>&1; echo "$2 rc=$? $(el)"; grep -E "^(f16|kivi-4|kivi-2) T=32k Tq=64.*tensor" $R/$2.txt | cut -c1-100; }
pf gaN n1; pf gaJM jm1; pf gaJ j1; pf gaM m1; pf gaN n2; pf gaJM jm2
