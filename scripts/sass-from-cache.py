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
    scripts/sass-from-cache.py names BIN          # the same from OUT/<variant>.bin(.gz), no nvdisasm

`extract` decompresses with the `zstd` command, or where that is missing (the H100 image of
2026-12-05 had `nvdisasm` but no `zstd`) with the system's libzstd through ctypes (a
dependency of dpkg, so on every Debian or Ubuntu image); it says which it used. `segments`
(a .sass file, or one gzipped) finds the longest backward branch (the tile loop), cuts it at
every branch and branch target, and prints each piece's instruction count, the highest
register it names (the allocator hands out low numbers first, so a piece naming R244 holds far
more values live than one naming at most R169: a hint of where the kernel's register count
comes from, not a liveness analysis) and its most frequent opcodes: what one trip through a
given path issues per warp. `names` prints the same from the raw stream, without registers.
"""
import collections
import ctypes
import ctypes.util
import gzip
import os
import re
import shutil
import struct
import subprocess
import sys

ZSTD_MAGIC = bytes.fromhex("28b52ffd")
NV_MAGIC = b"NVDANVVMNVuc"
BRA_OPCODE = 0x7947  # the low 16 bits of an unconditional `BRA` (the code ends with one to itself)


def unzstd(frame):
    """(decompressed bytes, how), or (None, why not): the `zstd` command, else libzstd."""
    if shutil.which("zstd"):
        r = subprocess.run(["zstd", "-d", "-c", "-q"], input=frame, capture_output=True)
        return r.stdout, f"zstd command, rc {r.returncode}"
    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        return None, f"neither the zstd command nor libzstd ({e})"
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
    ]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    lib.ZSTD_getErrorName.restype = ctypes.c_char_p
    lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
    cap = max(1 << 20, 16 * len(frame))
    while cap <= 1 << 30:
        out = ctypes.create_string_buffer(cap)
        n = lib.ZSTD_decompress(out, cap, frame, len(frame))
        if not lib.ZSTD_isError(n):
            return out.raw[:n], f"libzstd ({name})"
        err = lib.ZSTD_getErrorName(n).decode()
        if "too small" not in err:
            return None, f"libzstd: {err}"
        cap *= 4
    return None, "libzstd: more than 1 GiB decompressed"


def code_of(blob):
    """(the raw instruction stream in one pipeline-cache blob, how it was decompressed), or
    (None, why not)."""
    if len(blob) < 32 or struct.unpack_from("<I", blob, 0)[0] != 32:
        return None, "not a Vulkan pipeline cache (header size is not 32)"
    z = blob.find(ZSTD_MAGIC, 32)
    if z < 0:
        return None, "no zstd frame after the header"
    raw, how = unzstd(blob[z:])
    if raw is None:
        return None, how
    if not raw.startswith(NV_MAGIC):
        return None, f"decompressed data does not start with {NV_MAGIC!r} ({how})"
    size, off = struct.unpack_from("<II", raw, 0x4C)
    start = off + 8
    n = (size - 16) // 16 * 16
    if size < 32 or start + n > len(raw):
        return None, f"code size {size} at {off} does not fit the {len(raw)}-byte entry"
    code = raw[start:start + n]
    # The driver pads the end with NOPs after a `BRA` to itself: check that one is there.
    words = [struct.unpack_from("<Q", code, i)[0] & 0xFFFF for i in range(0, n, 16)]
    if BRA_OPCODE not in words[-16:]:
        return None, "no final self-branch near the end: the offsets are not what this script knows"
    return code, how


def extract(src, out):
    os.makedirs(out, exist_ok=True)
    for variant in sorted(os.listdir(src)):
        p = os.path.join(src, variant, "pipeline-cache.bin")
        if not os.path.isfile(p):
            continue
        code, how = code_of(open(p, "rb").read())
        if code is None:
            print(f"{variant}: {how}")
            continue
        open(os.path.join(out, variant + ".bin"), "wb").write(code)
        print(f"{variant}: {len(code) // 16} instructions -> {variant}.bin ({how})")


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
    print_segments(path, ins)


# `names`: where nvdisasm is missing (this development machine), each instruction's name from
# its low 12 bits, a map learned from the disassemblies committed under benches/results (every
# code seen there has one name), and branch targets from their offset fields (the offset / 4
# in bits 16..23 of the low word and its higher bits from bit 34 up, two's complement: checked
# against every branch of those disassemblies). No operands, so no registers.
HEX = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* 0x([0-9a-f]{16}) \*/")


def learned_names(root):
    names = collections.defaultdict(collections.Counter)
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".sass.gz") or f.endswith(".sass"):
                opener = gzip.open if f.endswith(".gz") else open
                with opener(os.path.join(dirpath, f), "rt") as fh:
                    for m in map(HEX.search, fh):
                        if m:
                            names[int(m.group(3), 16) & 0xFFF][opcode(m.group(2))] += 1
    clash = {k: dict(v) for k, v in names.items() if len(v) > 1}
    if clash:
        raise SystemExit(f"codes with more than one name in {root}: {clash}")
    return {k: v.most_common(1)[0][0] for k, v in names.items()}


def branch_offset(lo):
    v = ((lo >> 16) & 0xFF) | ((lo >> 34) << 8)
    if v >> 37:
        v -= 1 << 38
    return 4 * v


def names(path):
    here = os.path.dirname(os.path.abspath(__file__))
    known = learned_names(os.path.join(here, "..", "benches", "results"))
    code = (gzip.open if path.endswith(".gz") else open)(path, "rb").read()
    ins, unknown = [], 0
    for a in range(0, len(code) - 15, 16):
        lo = struct.unpack_from("<Q", code, a)[0]
        name = known.get(lo & 0xFFF)
        if name is None:
            unknown += 1
            name = f"?{lo & 0xFFF:03x}"
        if name == "BRA":
            name = f"BRA {a + 16 + branch_offset(lo):#x}"
        ins.append((a, name))
    print(f"{path}: {len(ins)} instructions, {unknown} with a code not in the learned map")
    print_segments(path, ins)


def print_segments(path, ins):
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
        reg = f"R{regs}" if regs >= 0 else "R?"
        print(f"  {s:#07x}-{e:#07x} {len(seg):5d}  {reg:<4} {top_ops}  | ends: {seg[-1][:40]}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "extract":
        extract(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "segments":
        segments(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "names":
        names(sys.argv[2])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
