#!/usr/bin/env python3
"""Hand-built ggml quantization blocks and their values, for tests/model_qwen.rs.

Writes quant_blocks.json beside this file: a list of {"type", "note", "hex", "values"}.

Independent of kvpack's Rust code: each block is built *forwards* from chosen parameters
(super-scales, per-sub-block scales and minimums, integer codes) by packing them into the byte
layout that ggml documents (ggml-common.h: block_q4_K, block_q6_K, block_q5_0, block_q5_1), and
its expected values are computed from those parameters directly (x = d*sc*q - dmin*m, ...),
never by unpacking the bytes. The Rust side goes the other way (bytes -> values), so a packing
or unpacking mistake on either side shows up as a mismatch.

Plain Python 3 (struct's 'e' format is IEEE half); deterministic (fixed seed).
Run: python3 tests/data/quant_blocks.py
"""

import json
import os
import random
import struct


def f16(x):
    """x rounded to IEEE half, and its two little-endian bytes."""
    b = struct.pack("<e", x)
    return struct.unpack("<e", b)[0], b


def q4_k(rng, d, dmin, sc, m, q, note):
    """sc, m: 8 six-bit ints; q: 256 four-bit codes (value i belongs to sub-block i // 32)."""
    assert len(sc) == len(m) == 8 and len(q) == 256
    d, db = f16(d)
    dmin, mb = f16(dmin)
    scales = [0] * 12
    for j in range(8):
        if j < 4:
            scales[j] |= sc[j]  # low 6 bits of bytes 0..4: scales 0..3
            scales[j + 4] |= m[j]  # low 6 bits of bytes 4..8: minimums 0..3
        else:
            # low 4 bits of scale j and of minimum j share byte j + 4 (scale low nibble)
            scales[j + 4] |= (sc[j] & 15) | ((m[j] & 15) << 4)
            # their top 2 bits go to the top bits of bytes j - 4 (scale) and j (minimum)
            scales[j - 4] |= (sc[j] >> 4) << 6
            scales[j] |= (m[j] >> 4) << 6
    qs = [0] * 128
    for c in range(4):  # chunk c: sub-block 2c in low nibbles, 2c + 1 in high nibbles
        for l in range(32):
            qs[32 * c + l] = q[64 * c + l] | (q[64 * c + 32 + l] << 4)
    raw = db + mb + bytes(scales) + bytes(qs)
    assert len(raw) == 144
    values = [d * sc[i // 32] * q[i] - dmin * m[i // 32] for i in range(256)]
    return {"type": "Q4_K", "note": note, "hex": raw.hex(), "values": values}


def q6_k(rng, d, scales, q, note):
    """scales: 16 signed 8-bit ints (one per 16 values); q: 256 six-bit codes (0..63)."""
    assert len(scales) == 16 and len(q) == 256
    d, db = f16(d)
    ql = [0] * 128
    qh = [0] * 64
    for i in range(256):
        h, r = divmod(i, 128)  # half, index within the half
        k, l = divmod(r, 32)  # which of the four 32-value groups, lane
        lo, hi = q[i] & 15, q[i] >> 4
        # groups 0 and 2 use ql[l], groups 1 and 3 use ql[32 + l] (low nibble for 0/1, high 2/3)
        byte = 64 * h + l + (32 if k in (1, 3) else 0)
        ql[byte] |= lo << (4 if k >= 2 else 0)
        qh[32 * h + l] |= hi << (2 * k)
    raw = bytes(ql) + bytes(qh) + struct.pack("<16b", *scales) + db
    assert len(raw) == 210
    values = [d * scales[i // 16] * (q[i] - 32) for i in range(256)]
    return {"type": "Q6_K", "note": note, "hex": raw.hex(), "values": values}


def q5(kind, d, m, q, note):
    """Q5_0 (m None, x = (q - 16) d) or Q5_1 (x = q d + m); q: 32 five-bit codes."""
    assert len(q) == 32
    d, db = f16(d)
    head = db
    if kind == "Q5_1":
        m, mb = f16(m)
        head += mb
    qh = 0
    for i in range(32):
        qh |= (q[i] >> 4) << i
    qs = [(q[j] & 15) | ((q[j + 16] & 15) << 4) for j in range(16)]
    raw = head + struct.pack("<I", qh) + bytes(qs)
    if kind == "Q5_0":
        values = [(q[i] - 16) * d for i in range(32)]
    else:
        values = [q[i] * d + m for i in range(32)]
    return {"type": kind, "note": note, "hex": raw.hex(), "values": values}


def main():
    rng = random.Random(20250117)
    blocks = []
    r6 = lambda: rng.randrange(64)  # noqa: E731
    blocks.append(
        q4_k(
            rng,
            0.0123,
            0.00457,
            [r6() for _ in range(8)],
            [r6() for _ in range(8)],
            [rng.randrange(16) for _ in range(256)],
            "random 6-bit scales and minimums (top bits set in most), random codes",
        )
    )
    blocks.append(
        q4_k(
            rng,
            -0.5,
            0.25,
            [63, 0, 1, 32, 48, 17, 63, 5],
            [0, 63, 33, 16, 63, 1, 62, 40],
            [(i * 7) % 16 for i in range(256)],
            "edge scales/minimums, negative super-scale",
        )
    )
    blocks.append(
        q6_k(
            rng,
            0.0031,
            [rng.randrange(-128, 128) for _ in range(16)],
            [rng.randrange(64) for _ in range(256)],
            "random signed scales, random codes",
        )
    )
    blocks.append(
        q6_k(
            rng,
            -2.0,
            [-128, 127, 0, 1, -1, 64, -64, 100, 3, -3, 5, -7, 11, -13, 17, -19],
            [(i * 37) % 64 for i in range(256)],
            "edge scales, every code value",
        )
    )
    blocks.append(
        q5("Q5_0", 0.0371, None, [rng.randrange(32) for _ in range(32)], "random codes")
    )
    blocks.append(
        q5("Q5_1", 0.0213, -0.3, [rng.randrange(32) for _ in range(32)], "random codes")
    )
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quant_blocks.json")
    with open(out, "w") as f:  # one block per line
        f.write("[\n" + ",\n".join(json.dumps(b) for b in blocks) + "\n]\n")
    print(f"wrote {out}: {len(blocks)} blocks")


if __name__ == "__main__":
    main()
