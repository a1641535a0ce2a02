//! Helpers shared by the GPU benches: sizes, statistics, a seeded generator, buffers.
#![allow(dead_code)]

pub mod l2_flush;
pub mod report;

use kvpack::{Context, gpu};

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

pub fn fmt_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b >= MIB {
        let m = b as f64 / MIB as f64;
        if m.fract() == 0.0 {
            format!("{m:.0} MiB")
        } else {
            format!("{m:.1} MiB")
        }
    } else {
        format!("{} KiB", b.div_ceil(1024))
    }
}
pub fn rotation(l2: u64, bytes_per_instance: u64) -> usize {
    ((2 * l2).div_ceil(bytes_per_instance.max(1)) as usize).max(4)
}
pub fn storage(ctx: &Context, label: &'static str, bytes: u64) -> kvpack::Result<wgpu::Buffer> {
    gpu::storage_buffer(ctx, label, bytes)
}
/// Fills `dst` with copies of `seed` on the device.
pub fn fill_from(ctx: &Context, seed: &wgpu::Buffer, dst: &wgpu::Buffer) -> kvpack::Result<()> {
    gpu::submit_blocking(ctx, "bench fill", |enc| {
        let mut off = 0;
        while off < dst.size() {
            let n = seed.size().min(dst.size() - off);
            enc.copy_buffer_to_buffer(seed, 0, dst, off, n);
            off += n;
        }
        Ok(())
    })
}
/// Deterministic pseudo-random u32s (xorshift64*).
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }
    pub fn uniform(&mut self) -> f64 {
        (f64::from(self.next_u32()) + 0.5) / 4_294_967_296.0
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    /// `n` standard normals.
    pub fn normals(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.normal() as f32).collect()
    }
    /// `n` standard normals rounded to f16.
    pub fn normals_f16(&mut self, n: usize) -> Vec<half::f16> {
        (0..n).map(|_| half::f16::from_f64(self.normal())).collect()
    }
}
pub fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        0.5 * (s[n / 2 - 1] + s[n / 2])
    };
    (med, s[0], s[n - 1])
}

/// Noise of an A-vs-A pair (the same case timed as two arms): the observed difference of the
/// two medians in %, and the 95th percentile of that difference over 2000 bootstrap resamples
/// of both arms' samples (how far apart two medians of identical work can land by chance).
pub fn aa_noise(a: &[f64], b: &[f64]) -> (f64, f64) {
    let diff = |x: f64, y: f64| 100.0 * (x - y).abs() / x.min(y);
    let observed = diff(stats(a).0, stats(b).0);
    if a.is_empty() || b.is_empty() {
        return (observed, observed);
    }
    let mut rng = Rng(0x0005_eed0_faba);
    let mut resample = |v: &[f64]| -> f64 {
        let s: Vec<f64> = (0..v.len())
            .map(|_| v[rng.next_u32() as usize % v.len()])
            .collect();
        stats(&s).0
    };
    let mut d: Vec<f64> = (0..2000)
        .map(|_| {
            let (x, y) = (resample(a), resample(b));
            diff(x, y)
        })
        .collect();
    d.sort_by(f64::total_cmp);
    (observed, d[d.len() * 95 / 100])
}

/// Name suffix of an A-vs-A twin arm (the same case built twice and timed as two arms).
pub const AA_SUFFIX: &str = " (A')";

/// The noise floor of a run from its A-vs-A pairs. `arms` are (name, samples in ns, median
/// in ns); each arm named `X (A')` is paired with the arm named `X`. Prints one line per
/// pair; returns (per pair: the name and the larger of the observed and bootstrap-95 %
/// differences, the pairs as JSON, the floor: the largest of those, in %).
pub fn aa_floor(arms: &[(&str, &[f64], f64)]) -> (Vec<(String, f64)>, Vec<serde_json::Value>, f64) {
    aa_floor_to(&mut std::io::stdout(), arms)
}

/// [`aa_floor`], its lines written to `out` (e.g. stderr where stdout carries JSON).
pub fn aa_floor_to(
    out: &mut dyn std::io::Write,
    arms: &[(&str, &[f64], f64)],
) -> (Vec<(String, f64)>, Vec<serde_json::Value>, f64) {
    let _ = writeln!(
        out,
        "\nnoise floor (A-vs-A pairs: the medians' difference, and its bootstrap 95th percentile):"
    );
    let (mut noise, mut aa) = (Vec::new(), Vec::new());
    for &(name, twin_ns, twin_med) in arms {
        let Some(base) = name.strip_suffix(AA_SUFFIX) else {
            continue;
        };
        if let Some(&(_, a_ns, a_med)) = arms.iter().find(|a| a.0 == base) {
            let (seen, p95) = aa_noise(a_ns, twin_ns);
            let _ = writeln!(
                out,
                "  A-vs-A {base}: medians {:.2} vs {:.2} µs, differ by {seen:.1} % (bootstrap 95 %: {p95:.1} %)",
                a_med / 1e3,
                twin_med / 1e3
            );
            noise.push((format!("A-vs-A {base}"), seen.max(p95)));
            aa.push(serde_json::json!({
                "arm": base, "median_a_us": a_med / 1e3, "median_a2_us": twin_med / 1e3,
                "observed_pct": seen, "bootstrap_p95_pct": p95,
            }));
        }
    }
    let floor = noise.iter().map(|n| n.1).fold(0f64, f64::max);
    let _ = writeln!(
        out,
        "  => differences under {floor:.1} % are called noise below"
    );
    (noise, aa, floor)
}
