#!/usr/bin/env python3
"""NVIDIA machine code (SASS) of kvpack's kernels, from Vulkan pipeline caches.

benches/pipeline_stats.rs --dump DIR writes, per kernel variant, the data of a pipeline cache
holding that pipeline only (DIR/<variant>/pipeline-cache.bin). On NVIDIA's driver (seen with
the H200's, 2026-12-04) that blob is the 32-byte Vulkan header, a driver header, then a zstd
frame; decompressed it starts with "NVDANVVMNVuc" and holds the machine code as a raw
instruction stream whose size (u32 at byte 0x4c) equals the driver's "Binary Size" statistic
and whose offset is the u32 at 0x50 (the code's first instruction begins 8 bytes after it).
The format is undocumented: every step below checks what it assumes and says so when a blob
does not fit.

    scripts/sass-from-cache.py extract DIR OUT    # every DIR/*/pipeline-cache.bin -> OUT/<variant>.bin
    nvdisasm -b SM90 -hex OUT/<variant>.bin > OUT/<variant>.sass   # CUDA toolkit (the device has it)
    scripts/sass-from-cache.py segments SASS      # the loop body split at its branches, op counts

`extract` needs the `zstd` command. `segments` (a .sass file, or one gzipped) finds the
longest backward branch (the tile loop), cuts it at every branch and branch target, and prints
each piece's instruction count, the highest register it names (the allocator hands out low
numbers first, so a piece naming R244 holds far more values live than one naming at most
R169: a hint of where the kernel's register count comes from, not a liveness analysis) and
its most frequent opcodes: what one trip through a given path issues per warp.
"""
import collections
import gzip
import os
import re
import struct
import subprocess
import sys

ZSTD_MAGIC = bytes.fromhex("28b52ffd")
NV_MAGIC = b"NVDANVVMNVuc"
BRA_OPCODE = 0x7947  # the low 16 bits of an unconditional `BRA` (the code ends with one to itself)


def code_of(blob):
    """The raw instruction stream in one pipeline-cache blob, or an error string."""
    if len(blob) < 32 or struct.unpack_from("<I", blob, 0)[0] != 32:
        return "not a Vulkan pipeline cache (header size is not 32)"
    z = blob.find(ZSTD_MAGIC, 32)
    if z < 0:
        return "no zstd frame after the header"
    r = subprocess.run(["zstd", "-d", "-c", "-q"], input=blob[z:], capture_output=True)
    raw = r.stdout
    if not raw.startswith(NV_MAGIC):
        return f"decompressed data does not start with {NV_MAGIC!r} (zstd rc {r.returncode})"
    size, off = struct.unpack_from("<II", raw, 0x4C)
    start = off + 8
    n = (size - 16) // 16 * 16
    if size < 32 or start + n > len(raw):
        return f"code size {size} at {off} does not fit the {len(raw)}-byte entry"
    code = raw[start:start + n]
    # The driver pads the end with NOPs after a `BRA` to itself: check that one is there.
    words = [struct.unpack_from("<Q", code, i)[0] & 0xFFFF for i in range(0, n, 16)]
    if BRA_OPCODE not in words[-16:]:
        return "no final self-branch near the end: the offsets are not what this script knows"
    return code


def extract(src, out):
    os.makedirs(out, exist_ok=True)
    for variant in sorted(os.listdir(src)):
        p = os.path.join(src, variant, "pipeline-cache.bin")
        if not os.path.isfile(p):
            continue
        code = code_of(open(p, "rb").read())
        if isinstance(code, str):
            print(f"{variant}: {code}")
            continue
        open(os.path.join(out, variant + ".bin"), "wb").write(code)
        print(f"{variant}: {len(code) // 16} instructions -> {variant}.bin")


LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def opcode(text):
    text = re.sub(r"^@!?U?P\w+\s+", "", text)
    return text.split()[0].split(".")[0]


def highest_register(seg):
    """The highest general register a piece names (R255 = RZ, the zero register, excluded)."""
    regs = [int(r) for t in seg for r in re.findall(r"\bR(\d+)\b", t)]
    return max(regs, default=-1)


def segments(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        ins = [(int(m.group(1), 16), m.group(2)) for m in map(LINE.search, f) if m]
    targets = []
    for a, t in ins:
        m = re.search(r"\bBRA\s+(0x[0-9a-f]+)", t)
        if m:
            targets.append((a, int(m.group(1), 16)))
    back = [(a, t) for a, t in targets if t < a]
    if not back:
        print(f"{path}: no backward branch")
        return
    end, top = max(back, key=lambda x: x[0] - x[1])
    cuts = {top, end + 16}
    for a, t in targets:
        if top <= a <= end:
            cuts.add(a + 16)
            if top <= t <= end + 16:
                cuts.add(t)
    cuts = sorted(cuts)
    print(f"{path}: loop {top:#x}..{end:#x}, {(end - top) // 16 + 1} instructions")
    for s, e in zip(cuts, cuts[1:]):
        seg = [t for a, t in ins if s <= a < e]
        if not seg:
            continue
        c = collections.Counter(opcode(t) for t in seg)
        top_ops = ", ".join(f"{k} {v}" for k, v in c.most_common(8))
        regs = highest_register(seg)
        print(f"  {s:#07x}-{e:#07x} {len(seg):5d}  R{regs:<3d} {top_ops}  | ends: {seg[-1][:40]}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "extract":
        extract(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "segments":
        segments(sys.argv[2])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
