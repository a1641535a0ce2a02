#!/usr/bin/env python3
"""A float32 numpy forward of a Qwen2 GGUF: the reference numbers of tests/model_qwen.rs.

Writes (updates) qwen_reference.json beside this file:
  {model file: {text name: {"tokens", "ids", "perplexity", "mean_nll", "last_top", "last_lse",
                            "tensor_stats"}}}
with the perplexity of the text (teacher-forced, no BOS, exp of the mean NLL of the T - 1
next-token predictions), the 16 largest last-position logits ([id, logit]) and the last
position's log-sum-exp, and per-tensor statistics of a few dequantized weight tensors.

Independent of kvpack's Rust code: weights are dequantized by the `gguf` package (llama.cpp's
numpy implementation of the block formats), the forward is written here from the architecture
(see ../shared/models/qwen2.5-coder.md): RMSNorm, q/k/v projections with biases, RoPE on the
halves (x[i], x[i + D/2]) with theta from the file, causal grouped-query attention in float64
softmax, SwiGLU FFN, final RMSNorm, untied output matrix. Tokens come from qwen_tokens.py's
Hugging Face `tokenizers` setup. Attention runs on exact float32 K/V (no f16 cache), so kvpack's
f16-cache numbers differ slightly from these.

Needs: pip install gguf tokenizers. Memory: one layer's float32 weights at a time plus the
output matrix (about 1 GB for the 1.5B).
Run:   python3 tests/data/qwen_reference.py MODEL.gguf [NAME=TEXTFILE[:N] ...]
       (:N keeps the first N tokens; no texts: statistics only)
"""

import json
import os
import re
import sys

import numpy as np
from gguf import GGUFReader, quants

from qwen_tokens import build_tokenizer

STAT_TENSORS = [
    "token_embd.weight",
    "output.weight",
    "blk.0.attn_q.weight",
    "blk.0.attn_k.bias",
    "blk.0.attn_v.weight",
    "blk.0.ffn_down.weight",
    "blk.2.ffn_down.weight",
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1]
    texts = [a.split("=", 1) for a in sys.argv[2:]]
    r = GGUFReader(path)
    tok = build_tokenizer(r)
    tensors = {t.name: t for t in r.tensors}

    def meta(key):
        return r.fields[key].contents()

    def weight(name):
        t = tensors[name]
        return np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(
            [int(d) for d in reversed(t.shape)]
        )

    n_layers = meta("qwen2.block_count")
    d_model = meta("qwen2.embedding_length")
    hq = meta("qwen2.attention.head_count")
    hkv = meta("qwen2.attention.head_count_kv")
    eps = np.float32(meta("qwen2.attention.layer_norm_rms_epsilon"))
    theta = meta("qwen2.rope.freq_base")
    hd = d_model // hq

    def rmsnorm(x, g):
        return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)) * g

    def rope(x, t):  # x [T, H, D]; pairs (i, i + D/2)
        half = hd // 2
        freq = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / hd)
        ang = np.arange(t, dtype=np.float64)[:, None] * freq[None, :]
        cos = np.cos(ang).astype(np.float32)[:, None, :]
        sin = np.sin(ang).astype(np.float32)[:, None, :]
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    def forward(ids):
        t = len(ids)
        x = weight("token_embd.weight")[ids]
        mask = np.triu(np.full((t, t), -np.inf), 1)
        for layer in range(n_layers):
            w = lambda n: weight(f"blk.{layer}.{n}")  # noqa: E731
            h = rmsnorm(x, w("attn_norm.weight"))
            q = (h @ w("attn_q.weight").T + w("attn_q.bias")).reshape(t, hq, hd)
            k = (h @ w("attn_k.weight").T + w("attn_k.bias")).reshape(t, hkv, hd)
            v = (h @ w("attn_v.weight").T + w("attn_v.bias")).reshape(t, hkv, hd)
            q, k = rope(q, t), rope(k, t)
            out = np.empty((t, hq, hd), dtype=np.float32)
            for head in range(hq):
                kv = head // (hq // hkv)
                s = (q[:, head, :].astype(np.float64) @ k[:, kv, :].T.astype(np.float64))
                s = s / np.sqrt(hd) + mask
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                out[:, head, :] = (s @ v[:, kv, :].astype(np.float64)).astype(np.float32)
            x = x + out.reshape(t, hq * hd) @ w("attn_output.weight").T
            h = rmsnorm(x, w("ffn_norm.weight"))
            g = h @ w("ffn_gate.weight").T
            u = h @ w("ffn_up.weight").T
            x = x + ((g / (1.0 + np.exp(-g))) * u) @ w("ffn_down.weight").T
        head_w = weight("output.weight") if "output.weight" in tensors else weight(
            "token_embd.weight"
        )
        return rmsnorm(x, weight("output_norm.weight")) @ head_w.T

    dst = os.path.join(here, "qwen_reference.json")
    ref = json.load(open(dst)) if os.path.exists(dst) else {}
    entry = ref.setdefault(os.path.basename(path), {})
    stats = {}
    for name in STAT_TENSORS:
        if name in tensors:
            x = weight(name).astype(np.float64)
            stats[name] = {
                "type": tensors[name].tensor_type.name,
                "shape": list(x.shape),
                "mean": float(x.mean()),
                "std": float(x.std()),
                "abs_max": float(np.abs(x).max()),
                "first": [float(v) for v in x.reshape(-1)[:8]],
            }
    entry["tensor_stats"] = stats
    for name, file in texts:
        file, _, n = file.partition(":")
        text = open(file, encoding="utf-8").read()
        ids = tok.encode(text, add_special_tokens=False).ids
        if n:
            ids = ids[: int(n)]
        logits = forward(np.array(ids)).astype(np.float64)
        m = logits.max(axis=1, keepdims=True)
        lse = (np.log(np.exp(logits - m).sum(axis=1, keepdims=True)) + m)[:, 0]
        nll = -(logits[np.arange(len(ids) - 1), ids[1:]] - lse[:-1])
        last = logits[-1]
        top = np.argsort(-last)[:16]
        entry[name] = {
            "tokens": len(ids),
            "ids": ids,
            "perplexity": float(np.exp(nll.mean())),
            "mean_nll": float(nll.mean()),
            "last_top": [[int(i), float(last[i])] for i in top],
            "last_lse": float(lse[-1]),
        }
        print(f"{os.path.basename(path)} {name}: {len(ids)} tokens, "
              f"perplexity {np.exp(nll.mean()):.4f}, last argmax {int(top[0])}")
    with open(dst, "w") as f:
        f.write(dumps(ref))
    print(f"wrote {dst}")


def dumps(ref):
    """JSON with one key per line and every innermost list (ids, [id, logit]) on one line."""
    text = json.dumps(ref, indent=1)
    return re.sub(r"\[\s+([^\[\]]*?)\s+\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text) + "\n"


if __name__ == "__main__":
    main()
