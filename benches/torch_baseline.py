#!/usr/bin/env python3
"""What a user would run instead of kvpack, timed the same way, on the same GPU.

- Decode attention: torch.nn.functional.scaled_dot_product_attention in fp16 with
  enable_gqa=True, q [1, 32, 1, 128], k/v [1, 8, T, 128], T in {1k, 4k, 32k, 128k}.
- Prefill chunk: the same with q [1, 32, 64, 128], the 64 query rows at positions T-64..T-1,
  causal (row i sees keys 0..=T-64+i: kvpack's rule), as a user writes it: an explicit
  boolean mask [64, T] ("sdpa fp16 prefill64"), and, where this PyTorch has it,
  torch.nn.attention.bias.causal_lower_right ("sdpa fp16 prefill64 lower-right"), which can
  reach the fused kernels.
- KIVI quantization in eager PyTorch (the reference library's style: min/max, scale, round,
  clamp, then pack to bytes), keys per channel (groups of 32 tokens) and values per token
  (groups of 32 channels), 2 and 4 bits, H = 8, D = 128, T in {4k, 32k}.

Timing: CUDA events around each call, warm-up, then rounds that interleave every arm with a
rotating start; 4 distinct input sets per arm (rotated) and an L2 flush (a 256 MiB write)
before each call; median / min / max in microseconds. Prints a Markdown table and writes JSON
to the path given as the first argument (default torch_baseline.json).

Run on a machine with PyTorch and CUDA: python3 benches/torch_baseline.py out.json
"""
import json
import random
import statistics
import sys

import torch

dev = "cuda"
torch.manual_seed(0)
HQ, HKV, D, G = 32, 8, 128, 32
AA_SUFFIX = " (A')"
flush_buf = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.float32, device=dev)


def flush():
    flush_buf.fill_(1.0)


def kivi_keys(k, bits):
    # k: [H, T, D] fp16 -> per channel groups of G tokens
    h, t, d = k.shape
    x = k.float().view(h, t // G, G, d)
    lo = x.amin(dim=2, keepdim=True)
    hi = x.amax(dim=2, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    q = torch.clamp(torch.round((x - lo) / scale.clamp_min(1e-12)), 0, 2**bits - 1).to(torch.uint8)
    per = 8 // bits
    q = q.view(h, t // G, G // per, per, d)
    packed = torch.zeros_like(q[:, :, :, 0, :])
    for i in range(per):
        packed |= q[:, :, :, i, :] << (bits * i)
    return packed, scale.half(), lo.half()


def kivi_values(v, bits):
    # v: [H, T, D] -> per token groups of G channels
    h, t, d = v.shape
    x = v.float().view(h, t, d // G, G)
    lo = x.amin(dim=3, keepdim=True)
    hi = x.amax(dim=3, keepdim=True)
    scale = (hi - lo) / (2**bits - 1)
    q = torch.clamp(torch.round((x - lo) / scale.clamp_min(1e-12)), 0, 2**bits - 1).to(torch.uint8)
    per = 8 // bits
    q = q.view(h, t, d // G, G // per, per)
    packed = torch.zeros_like(q[..., 0])
    for i in range(per):
        packed |= q[..., i] << (bits * i)
    return packed, scale.half(), lo.half()


def arms():
    out = []
    for t in [1024, 4096, 32768, 131072]:
        sets = [
            (
                torch.randn(1, HQ, 1, D, dtype=torch.float16, device=dev),
                torch.randn(1, HKV, t, D, dtype=torch.float16, device=dev),
                torch.randn(1, HKV, t, D, dtype=torch.float16, device=dev),
            )
            for _ in range(4)
        ]
        decode = (
            f"sdpa fp16 decode T={t}",
            sets,
            lambda s: torch.nn.functional.scaled_dot_product_attention(s[0], s[1], s[2], enable_gqa=True),
        )
        out.append(decode)
        if t == 32768:
            # A-vs-A: the same arm timed twice; the medians' difference is the noise floor.
            out.append((decode[0] + AA_SUFFIX, decode[1], decode[2]))
    for t in [1024, 4096, 32768, 131072]:
        tq = 64
        sets = [
            (
                torch.randn(1, HQ, tq, D, dtype=torch.float16, device=dev),
                torch.randn(1, HKV, t, D, dtype=torch.float16, device=dev),
                torch.randn(1, HKV, t, D, dtype=torch.float16, device=dev),
            )
            for _ in range(4)
        ]
        rows = torch.arange(tq, device=dev).view(tq, 1) + (t - tq)
        mask = torch.arange(t, device=dev).view(1, t) <= rows
        out.append(
            (
                f"sdpa fp16 prefill64 T={t}",
                sets,
                lambda s, m=mask: torch.nn.functional.scaled_dot_product_attention(
                    s[0], s[1], s[2], attn_mask=m, enable_gqa=True
                ),
            )
        )
        try:
            from torch.nn.attention.bias import causal_lower_right

            bias = causal_lower_right(tq, t)
            s0 = sets[0]
            sdpa = torch.nn.functional.scaled_dot_product_attention
            got = sdpa(s0[0], s0[1], s0[2], attn_mask=bias, enable_gqa=True)
            ref = sdpa(s0[0], s0[1], s0[2], attn_mask=mask, enable_gqa=True)
            diff = (got.float() - ref.float()).abs().max().item()
            print(f"T={t}: lower-right bias vs boolean mask, max |diff| {diff:.2e}")
            if not diff < 1e-2:
                raise RuntimeError(f"the two causal prefill variants disagree ({diff})")
            out.append(
                (
                    f"sdpa fp16 prefill64 lower-right T={t}",
                    sets,
                    lambda s, b=bias: torch.nn.functional.scaled_dot_product_attention(
                        s[0], s[1], s[2], attn_mask=b, enable_gqa=True
                    ),
                )
            )
        except Exception as e:  # noqa: BLE001 - report and go on with the mask variant
            print(f"causal_lower_right with enable_gqa unavailable at T={t}: {e}")
    for t in [4096, 32768]:
        for bits in [2, 4]:
            sets = [torch.randn(HKV, t, D, dtype=torch.float16, device=dev) for _ in range(4)]
            out.append((f"kivi keys eager {bits}-bit T={t}", sets, lambda s, b=bits: kivi_keys(s, b)))
            out.append((f"kivi values eager {bits}-bit T={t}", sets, lambda s, b=bits: kivi_values(s, b)))
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "torch_baseline.json"
    all_arms = arms()
    times = {name: [] for name, _, _ in all_arms}
    warmup, rounds = 5, 40
    for r in range(warmup + rounds):
        order = all_arms[r % len(all_arms):] + all_arms[: r % len(all_arms)]
        for name, sets, fn in order:
            s = sets[r % len(sets)]
            flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(s)
            end.record()
            torch.cuda.synchronize()
            if r >= warmup:
                times[name].append(start.elapsed_time(end) * 1000.0)
    rows = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| arm | median µs | min µs | max µs |\n|---|---|---|---|")
    for name, _, _ in all_arms:
        v = times[name]
        row = {"arm": name, "median_us": statistics.median(v), "min_us": min(v), "max_us": max(v)}
        rows.append(row)
        print(f"| {name} | {row['median_us']:.1f} | {row['min_us']:.1f} | {row['max_us']:.1f} |")
    # Noise floor: per A-vs-A pair, the medians' difference and its bootstrap 95th percentile.
    rng = random.Random(5)
    pairs = []
    for name, _, _ in all_arms:
        if not name.endswith(AA_SUFFIX):
            continue
        a, b = times[name[: -len(AA_SUFFIX)]], times[name]
        diff = lambda x, y: 100.0 * abs(x - y) / min(x, y)  # noqa: E731
        boot = sorted(
            diff(statistics.median(rng.choices(a, k=len(a))), statistics.median(rng.choices(b, k=len(b))))
            for _ in range(2000)
        )
        pair = {
            "arm": name[: -len(AA_SUFFIX)],
            "observed_pct": diff(statistics.median(a), statistics.median(b)),
            "bootstrap_p95_pct": boot[len(boot) * 95 // 100],
        }
        pairs.append(pair)
        print(f"A-vs-A {pair['arm']}: {pair['observed_pct']:.1f} % (bootstrap 95 %: {pair['bootstrap_p95_pct']:.1f} %)")
    floor = max([max(p["observed_pct"], p["bootstrap_p95_pct"]) for p in pairs], default=0.0)
    with open(path, "w") as f:
        json.dump(
            {
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name(),
                "command": " ".join(sys.argv),
                "rounds": rounds,
                "warmup": warmup,
                "aa_pairs": pairs,
                "noise_floor_pct": floor,
                "rows": rows,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    main()
