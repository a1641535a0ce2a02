#!/usr/bin/env python3
"""Dump a Hugging Face transformers model's post-RoPE q, k and v of every layer.

The Python twin of `kvpack dump-kv`, for models kvpack cannot load itself: it runs a causal LM
from `transformers` over a text and writes the file `kvpack roundtrip` and `kvpack attend` read:

  q            [L, T, Hq, D]    queries after RoPE (and after any q bias or q norm)
  k            [L, T, Hkv, D]   keys after RoPE
  v            [L, T, Hkv, D]   values
  token_ids    [T]              int32
  logits_last  [vocab]          float32, the next-token logits after the last token

(q, k, v in float16 by default, --dtype f32 for float32), with string metadata: model, text,
token count, perplexity (teacher-forced, exact float attention), RoPE pairing.

How: every decoder layer's attention calls its modeling module's `apply_rotary_pos_emb(q, k,
cos, sin)` once per forward; the script wraps that function to record what it returns (so any
model-specific detail before RoPE, such as Qwen2's biases or Qwen3's q/k norms, and the model's
own RoPE variant are included), and hooks each layer's `v_proj` for the values. Models whose
attention does not call a module-level `apply_rotary_pos_emb` (fused or custom attention) are
refused with a clear error rather than dumped wrongly. Llama, Mistral, Qwen2, Qwen3, SmolLM2,
Gemma and most decoder-only models in transformers follow this pattern.

Channel order: transformers keeps q/k in the checkpoint's order and rotates the halves
(i, i + D/2). kvpack's dump of a llama GGUF has llama.cpp's permuted order (adjacent pairs) in
each head instead; attention scores are the same either way (q and k share the permutation),
so the two files give the same attention outputs but not element-wise equal q/k. Qwen2 GGUFs
are not permuted, so there the two dumps agree element by element.

Tokens: the tokenizer's own special tokens are added (BOS for Llama; nothing for Qwen2.5,
matching kvpack); --no-special-tokens adds none.

Needs: pip install torch transformers safetensors (plus gguf and accelerate for --gguf-file).
Run:   python3 scripts/dump_kv.py --model Qwen/Qwen2.5-Coder-1.5B-Instruct --text file.py \\
           --out qkv.safetensors [--max-tokens N] [--dtype f16|f32] [--device cpu|cuda]
       (--model also takes a local folder; --gguf-file FILE loads a GGUF from that folder
       through transformers' GGUF support)
"""

import argparse
import json
import math
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face model id or local folder")
    p.add_argument("--gguf-file", help="a GGUF file inside --model to load instead")
    p.add_argument("--text", required=True, help="UTF-8 text file")
    p.add_argument("--out", required=True, help="safetensors file to write")
    p.add_argument("--max-tokens", type=int, help="use only the first N tokens")
    p.add_argument("--dtype", choices=["f16", "f32"], default="f16", help="q/k/v precision")
    p.add_argument(
        "--model-dtype",
        choices=["float32", "bfloat16", "float16"],
        default="float32",
        help="precision the model runs in (default float32)",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--no-special-tokens", action="store_true", help="add no BOS/EOS")
    return p.parse_args()


def decoder_layers(model):
    """The list of decoder layers (model.model.layers in most architectures)."""
    for path in ("model.layers", "model.decoder.layers", "transformer.h", "layers"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return list(obj)
    sys.exit("dump_kv.py: cannot find the decoder layers of this model")


def main():
    args = parse_args()
    kw = {"gguf_file": args.gguf_file} if args.gguf_file else {}
    tok = AutoTokenizer.from_pretrained(args.model, **kw)
    # transformers 4.56 renamed `torch_dtype` to `dtype`
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    kw["dtype" if (major, minor) >= (4, 56) else "torch_dtype"] = getattr(torch, args.model_dtype)
    model = AutoModelForCausalLM.from_pretrained(args.model, **kw).to(args.device)
    model.eval()
    cfg = model.config
    hq = cfg.num_attention_heads
    hkv = getattr(cfg, "num_key_value_heads", None) or hq
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // hq

    text = open(args.text, encoding="utf-8").read()
    ids = tok(text, add_special_tokens=not args.no_special_tokens)["input_ids"]
    if args.max_tokens:
        ids = ids[: args.max_tokens]
    if not ids:
        sys.exit(f"dump_kv.py: {args.text} encodes to no tokens")
    t = len(ids)

    layers = decoder_layers(model)
    attn_modules = {type(layer.self_attn).__module__ for layer in layers}
    if len(attn_modules) != 1:
        sys.exit(f"dump_kv.py: attention classes from several modules: {attn_modules}")
    mod = sys.modules[attn_modules.pop()]
    if not hasattr(mod, "apply_rotary_pos_emb"):
        sys.exit(
            f"dump_kv.py: {mod.__name__} has no apply_rotary_pos_emb; this model's attention "
            "is not supported"
        )

    qs, ks, vs = [], [], []
    original = mod.apply_rotary_pos_emb

    def recording(q, k, *a, **kw):
        q_out, k_out = original(q, k, *a, **kw)
        # [B, H, T, D] -> [T, H, D] (batch 1)
        qs.append(q_out[0].transpose(0, 1).float().cpu())
        ks.append(k_out[0].transpose(0, 1).float().cpu())
        return q_out, k_out

    def v_hook(_module, _inputs, out):
        vs.append(out[0].reshape(t, hkv, head_dim).float().cpu())

    hooks = [layer.self_attn.v_proj.register_forward_hook(v_hook) for layer in layers]
    mod.apply_rotary_pos_emb = recording
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids], device=args.device), use_cache=False)
    finally:
        mod.apply_rotary_pos_emb = original
        for h in hooks:
            h.remove()
    n = len(layers)
    if not (len(qs) == len(ks) == len(vs) == n):
        sys.exit(
            f"dump_kv.py: recorded {len(qs)} q/k and {len(vs)} v tensors for {n} layers; this "
            "model's attention does not call apply_rotary_pos_emb once per layer"
        )
    q, k, v = torch.stack(qs), torch.stack(ks), torch.stack(vs)
    if q.shape != (n, t, hq, head_dim) or k.shape != (n, t, hkv, head_dim):
        sys.exit(f"dump_kv.py: unexpected shapes q {tuple(q.shape)}, k {tuple(k.shape)}")

    logits = out.logits[0].float()
    nll = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:], device=logits.device))
    mean_nll = float(nll) if t > 1 else float("nan")
    store = torch.float16 if args.dtype == "f16" else torch.float32
    tensors = {
        "q": q.to(store).contiguous(),
        "k": k.to(store).contiguous(),
        "v": v.to(store).contiguous(),
        "token_ids": torch.tensor(ids, dtype=torch.int32),
        "logits_last": logits[-1].cpu().contiguous(),
    }
    meta = {
        "producer": "scripts/dump_kv.py (Hugging Face transformers)",
        "model": args.model + (f" ({args.gguf_file})" if args.gguf_file else ""),
        "architecture": f"{cfg.model_type}; {n} layers, {hq} query heads, {hkv} KV heads, "
        f"head_dim {head_dim}, vocab {logits.shape[-1]}",
        "rope_pairing": "halves (i, i + D/2) (transformers' rotate_half)",
        "rope_theta": str(getattr(cfg, "rope_theta", "")),
        "token_count": str(t),
        "forward": f"transformers {args.model_dtype} forward on {args.device}; q and k as "
        "returned by apply_rotary_pos_emb, v from v_proj",
        "text": text,
    }
    if t > 1:
        meta["mean_nll_nats"] = f"{mean_nll:.6f}"
        meta["perplexity"] = f"{math.exp(mean_nll):.4f}"
    save_file(tensors, args.out, metadata=meta)
    print(
        json.dumps(
            {
                "model": meta["model"],
                "tokens": t,
                "layers": n,
                "q_heads": hq,
                "kv_heads": hkv,
                "head_dim": head_dim,
                "dtype": args.dtype,
                "perplexity": math.exp(mean_nll) if t > 1 else None,
                "output": args.out,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
