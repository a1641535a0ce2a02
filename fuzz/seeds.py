#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz corpora (corpus/<target>/seed-*): a tiny llama
GGUF with a byte-level BPE tokenizer, a tiny llama2.c checkpoint, a tiny llama2.c tokenizer and
method specs. The cache-file seeds come from kvpack itself (tests/fuzz_corpus.rs writes and
checks them). Deterministic: running it again writes the same bytes."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def floats(n, k=1):
    return struct.pack("<%df" % n, *[((i * 7 + k) % 13 - 6) / 10.0 for i in range(n)])


# llama2.c checkpoint v0: 7 i32 (dim, hidden, layers, heads, kv_heads, vocab, seq), then f32
# weights; a negative vocab means an unshared classifier.
def llama2c(dim=8, hidden=16, layers=1, heads=2, kv=1, vocab=6, seq=4, shared=True):
    hd = dim // heads
    n = vocab * dim + layers * (dim + dim * dim + 2 * dim * kv * hd + dim * dim + dim
                                + 3 * dim * hidden) + dim + seq * hd  # rope tables (ignored)
    if not shared:
        n += vocab * dim
    h = struct.pack("<7i", dim, hidden, layers, heads, kv, vocab if shared else -vocab, seq)
    return h + floats(n)


put("llama2c", "tiny", llama2c())
put("llama2c", "unshared", llama2c(shared=False))
put("llama2c", "header-only", llama2c()[:28])

# llama2.c tokenizer: i32 max_token_length, then per token f32 score, i32 length, bytes.
pieces = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % i for i in range(256)] + [b" ", b"a", b"b", b"ab", b" a", b"ba"]
tok = struct.pack("<i", 6) + b"".join(struct.pack("<fi", -float(i), len(p)) + p for i, p in enumerate(pieces))
put("tokenizer_llama2c", "tiny", struct.pack("<H", len(tok)) + tok + b"ab ba a")
put("tokenizer_llama2c", "empty-text", struct.pack("<H", len(tok)) + tok)


# GGUF v3.
def s(x):
    x = x.encode()
    return struct.pack("<Q", len(x)) + x


def kv(key, ty, val):
    return s(key) + struct.pack("<I", ty) + val


def u32(key, v):
    return kv(key, 4, struct.pack("<I", v))


def f32(key, v):
    return kv(key, 6, struct.pack("<f", v))


def strv(key, v):
    return kv(key, 8, s(v))


def strs(key, vs):
    return kv(key, 9, struct.pack("<IQ", 8, len(vs)) + b"".join(s(v) for v in vs))


def gguf(dim=8, hidden=16, heads=2, kv_heads=1):
    tokens = ["a", "b", "c", "Ġ", "ab", "Ġa", "!", "1"]
    vocab = len(tokens)
    hd = dim // heads
    meta = [
        strv("general.architecture", "llama"),
        u32("general.alignment", 32),
        u32("llama.embedding_length", dim),
        u32("llama.block_count", 1),
        u32("llama.feed_forward_length", hidden),
        u32("llama.attention.head_count", heads),
        u32("llama.attention.head_count_kv", kv_heads),
        u32("llama.context_length", 16),
        f32("llama.attention.layer_norm_rms_epsilon", 1e-5),
        strv("tokenizer.ggml.model", "gpt2"),
        strs("tokenizer.ggml.tokens", tokens),
        strs("tokenizer.ggml.merges", ["a b", "Ġ a"]),
        u32("tokenizer.ggml.bos_token_id", 0),
    ]
    shapes = [("token_embd.weight", [dim, vocab]), ("output_norm.weight", [dim])]
    for n, sh in [("attn_norm", [dim]), ("attn_q", [dim, dim]), ("attn_k", [dim, kv_heads * hd]),
                  ("attn_v", [dim, kv_heads * hd]), ("attn_output", [dim, dim]), ("ffn_norm", [dim]),
                  ("ffn_gate", [dim, hidden]), ("ffn_up", [dim, hidden]), ("ffn_down", [hidden, dim])]:
        shapes.append(("blk.0.%s.weight" % n, sh))
    infos, data = b"", b""
    for i, (name, sh) in enumerate(shapes):
        count = 1
        for d in sh:
            count *= d
        infos += s(name) + struct.pack("<I", len(sh)) + b"".join(struct.pack("<Q", d) for d in sh)
        infos += struct.pack("<IQ", 0, len(data))  # F32, offset
        data += floats(count, i)
        data += b"\0" * (-len(data) % 32)
    head = struct.pack("<4sIQQ", b"GGUF", 3, len(shapes), len(meta)) + b"".join(meta) + infos
    head += b"\0" * (-len(head) % 32)
    return head + data


put("gguf", "tiny-llama", gguf())
put("gguf", "header-only", struct.pack("<4sIQQ", b"GGUF", 3, 0, 0))

for i, spec in enumerate([
    "f16", "kivi", "kivi-2", "kivi-4-32-128", "kivi:bits=4,group=32,residual=128",
    "kivi:kbits=4,vbits=2,group=16,vgroup=32,residual=64,params=f32", "kivi:bits=4/f16",
    "f16/kivi:bits=3,group=8,vgroup=16,residual=16", "kivi:bits=1,group=32,residual=32",
]):
    put("method", "%02d" % i, spec.encode())
