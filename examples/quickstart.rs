//! Quickstart: describe the best context on this machine, pack and unpack codes on its best
//! path, then compress a real model's KV cache with KIVI on that path (SmolLM2-135M's 30
//! layers from `../shared/fixtures`, or synthetic data where that folder is absent), check it
//! against the CPU reference and print what ran where, the bytes held and the error.
//!
//! `cargo run --release --example quickstart`

use std::time::Instant;

fn main() -> Result<(), kvpack::Error> {
    let ctx = kvpack::Context::headless()?;
    println!("{}", ctx.describe());

    let cpu = kvpack::BitPacker::new(&kvpack::Context::cpu())?;
    let packer = kvpack::BitPacker::new(&ctx)?;
    // Deterministic pseudo-random codes (a small LCG keeps the example dependency-free).
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let n = 1_000_003;
    for bits in [2u32, 3, 4, 8] {
        let codes: Vec<u8> = (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((state >> 33) as u8) & ((1u16 << bits) - 1) as u8
            })
            .collect();
        let t = Instant::now();
        let words = packer.pack(&codes, bits)?;
        let back = packer.unpack(&words, bits, n)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let reference = cpu.pack(&codes, bits)?;
        let ok = back == codes && words == reference;
        println!(
            "bits {bits}: {n} codes -> {} words ({:.2}x smaller than bytes), pack on {}, unpack on {}, \
             round trip {} and bit-identical to the CPU reference: {} ({ms:.1} ms incl. upload/readback)",
            words.len(),
            n as f64 / (words.len() * 4) as f64,
            packer.pack_path(),
            packer.unpack_path(),
            if back == codes { "exact" } else { "WRONG" },
            words == reference,
        );
        if !ok {
            eprintln!("quickstart: mismatch at {bits} bits");
            std::process::exit(1);
        }
    }
    kivi(&ctx)
}

/// K and V `[L, T, H, D]` of a real model, or synthetic data when the fixtures are absent.
/// Real (or synthetic) K, V `[L, T, Hkv, D]` and q `[L, T, Hq, D]`, with Hq.
type KvData = (
    String,
    [usize; 4],
    Vec<half::f16>,
    Vec<half::f16>,
    Vec<half::f16>,
    usize,
);

fn kv_data() -> KvData {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/smollm2-135m/story-512.safetensors");
    if let Ok(bytes) = std::fs::read(&path) {
        if let Ok(st) = safetensors::SafeTensors::deserialize(&bytes) {
            if let (Ok(k), Ok(v), Ok(q)) = (st.tensor("k"), st.tensor("v"), st.tensor("q")) {
                let s = k.shape();
                return (
                    "SmolLM2-135M, story-512 fixture".into(),
                    [s[0], s[1], s[2], s[3]],
                    bytemuck::pod_collect_to_vec(k.data()),
                    bytemuck::pod_collect_to_vec(v.data()),
                    bytemuck::pod_collect_to_vec(q.data()),
                    q.shape()[2],
                );
            }
        }
    }
    let shape = [4, 512, 3, 64];
    let n: usize = shape.iter().product();
    let mut state = 7u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
    };
    let k = (0..n)
        .map(|i| half::f16::from_f32(next() + (i % 64) as f32 * 0.05))
        .collect();
    let v = (0..n).map(|_| half::f16::from_f32(next())).collect();
    let q = (0..n * 3).map(|_| half::f16::from_f32(next())).collect();
    (
        format!(
            "synthetic (../shared/fixtures absent at {})",
            path.display()
        ),
        shape,
        k,
        v,
        q,
        9,
    )
}

fn kivi(ctx: &kvpack::Context) -> Result<(), kvpack::Error> {
    use kvpack::{Cache, Input, Method};
    let (source, [layers, tokens, heads, dim], k, v, q, hq) = kv_data();
    println!(
        "\nKIVI on {source}: {layers} layers, {tokens} tokens, {heads} KV heads, head dim {dim}"
    );
    let per = tokens * heads * dim;
    for bits in [2u32, 4] {
        let method = Method::parse(&format!("kivi:bits={bits},group=32,residual=128"))?;
        let t = Instant::now();
        let mut cache = Cache::uniform(ctx, layers, heads, dim, &method, ctx.path())?;
        for l in 0..layers {
            cache.append(
                l,
                Input::F16(&k[l * per..(l + 1) * per]),
                Input::F16(&v[l * per..(l + 1) * per]),
            )?;
        }
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let mut reference = Cache::uniform(
            &kvpack::Context::cpu(),
            layers,
            heads,
            dim,
            &method,
            kvpack::PathChoice::Cpu,
        )?;
        let (mut err_k, mut err_v, mut differ, mut total) = (0f64, 0f64, 0usize, 0usize);
        for l in 0..layers {
            reference.append(
                l,
                Input::F16(&k[l * per..(l + 1) * per]),
                Input::F16(&v[l * per..(l + 1) * per]),
            )?;
            let layer = cache.layer(l).expect("layer");
            let (kh, vh) = layer.reconstruct()?;
            let (kr, vr) = reference.layer(l).expect("layer").reconstruct()?;
            differ += kh
                .iter()
                .zip(&kr)
                .chain(vh.iter().zip(&vr))
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            total += kh.len() + vh.len();
            err_k += rel_l2(&kh, &k[l * per..(l + 1) * per]) / layers as f64;
            err_v += rel_l2(&vh, &v[l * per..(l + 1) * per]) / layers as f64;
        }
        let m = cache.memory();
        let paths = cache.layer(0).expect("layer").paths();
        let (kp, vp) = (paths[0], paths[1]);
        println!(
            "  {bits}-bit K and V, G=32, R=128 on {} / {}: {} of {} tokens quantized per layer, {:.1} KiB held \
             (f16: {:.1} KiB), ratio {:.2}x; mean rel. L2 error K {err_k:.4} V {err_v:.4}; \
             {differ} of {total} reconstructed values differ from the CPU reference ({ms:.0} ms)",
            kp,
            vp,
            m.quantized / layers,
            m.tokens / layers,
            m.held.total() as f64 / 1024.0,
            m.f16_bytes as f64 / 1024.0,
            m.ratio().unwrap_or(0.0),
        );
    }
    println!(
        "  (a real GPU may differ from the CPU reference by one code where (x - lo) / scale is within \
         1e-4 of a half-integer: GPU division is not exact; ../shared/spec/kivi.md)"
    );

    // Attention that reads the packed cache: the last 8 query rows of every 5th layer, against
    // exact f64 attention on the original K/V.
    let tq = 8;
    let opts = kvpack::AttendOptions::default();
    println!(
        "\nAttention on the compressed cache: last {tq} queries ({hq} query heads, {heads} KV heads), every 5th layer"
    );
    for name in ["f16", "kivi-4", "kivi-2"] {
        let method = kvpack::Method::parse(name)?;
        let (mut err, mut n, mut held, mut f16b) = (0f64, 0, 0u64, 0u64);
        let t = Instant::now();
        for l in (0..layers).step_by(5) {
            let mut layer = method.layer(ctx, heads, dim, ctx.path())?;
            layer.append(
                Input::F16(&k[l * per..(l + 1) * per]),
                Input::F16(&v[l * per..(l + 1) * per]),
            )?;
            let qper = tokens * hq * dim;
            let ql: Vec<f32> = q[l * qper + (tokens - tq) * hq * dim..(l + 1) * qper]
                .iter()
                .map(|x| x.to_f32())
                .collect();
            let out = layer.attend(&ql, hq, &opts)?;
            let f32s = |x: &[half::f16]| x.iter().map(|y| y.to_f32()).collect::<Vec<f32>>();
            let (kl, vl) = (
                f32s(&k[l * per..(l + 1) * per]),
                f32s(&v[l * per..(l + 1) * per]),
            );
            let exact = kvpack::cpu::attend::attend_exact(&kl, &vl, heads, &ql, hq, dim, &opts);
            err += rel_l2_f32(&out, &exact);
            n += 1;
            let m = layer.memory();
            held += m.held.total();
            f16b += m.f16_bytes;
        }
        let path = method.layer(ctx, heads, dim, ctx.path())?.paths()[0].to_string();
        println!(
            "  {name:<7} on {path:<14} ratio {:.2}x; mean rel. L2 error of the output vs exact attention {:.4} ({:.0} ms)",
            f16b as f64 / held as f64,
            err / n as f64,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(())
}

fn rel_l2_f32(x: &[f32], reference: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (a, b) in x.iter().zip(reference) {
        num += (f64::from(*a) - f64::from(*b)).powi(2);
        den += f64::from(*b).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

fn rel_l2(x: &[f32], reference: &[half::f16]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (a, b) in x.iter().zip(reference) {
        let b = f64::from(b.to_f32());
        num += (f64::from(*a) - b).powi(2);
        den += b * b;
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}
