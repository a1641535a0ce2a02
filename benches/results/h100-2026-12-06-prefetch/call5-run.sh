#!/usr/bin/env bash
# Call 5: the prefill kernels' splits in whole waves (sp, build of the plan change) against the
# build before (base = 54fc140: 3,984-token splits at 32k, 15,904 at 128k), 32k twice, 128k once.
set -u
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp WGPU_BACKEND=vulkan
B=/tmp/b; mkdir -p $B
gunzip -c .carry/base/ga-pf.gz > $B/base-ga; gunzip -c .carry/sp/ga.gz > $B/sp-ga; chmod +x $B/*
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
fin() { echo "== end $(el)"; (cd $OUT && tar czf call5.tgz r && rm -rf r); }
trap fin EXIT
pf() { timeout 150 $B/$1-ga --prefill-only --tokens $3 --rounds 10 --json $R/$2.json > $R/$2.txt 2>&1; echo "$2 rc=$? $(el)"; grep -E "^ *(f16|kivi-4|kivi-2) T=[0-9]+k Tq=64 .*[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" $R/$2.txt | cut -c1-120; }
pf base b1 32768; pf sp s1 32768; pf base b2 32768; pf sp s2 32768
pf base B1 131072; pf sp S1 131072
