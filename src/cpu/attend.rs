//! CPU reference of attention over a compressed cache (../shared/spec/attention.md):
//! online softmax in f32 over the visible tokens, grouped-query heads, causal masking,
//! sliding window with sinks. GPU twins: `wgsl/attend_*.wgsl` (chunked partials, then
//! `attend_merge`). The codec supplies each token's key and value as its reconstruction, one
//! row at a time (the CPU's "registers"): see [`TokenSource`].

use crate::attention::AttendOptions;

/// What attention needs from a codec on the CPU: the reconstructed key and value of token j
/// for KV head h, written into `out` (length D). Never a whole dequantized cache.
pub trait TokenSource {
    /// Tokens held (T).
    fn tokens(&self) -> usize;
    /// KV heads.
    fn heads(&self) -> usize;
    /// Head width D.
    fn dim(&self) -> usize;
    /// k̂ of token `j`, head `h`.
    fn key(&self, j: usize, h: usize, out: &mut [f32]);
    /// v̂ of token `j`, head `h`.
    fn value(&self, j: usize, h: usize, out: &mut [f32]);
}

/// Whether key position `j` is visible to a query at position `p` (spec: causal, window W
/// with `n_sink` always-visible first tokens).
pub fn visible(j: usize, p: usize, opts: &AttendOptions) -> bool {
    if j > p {
        return false;
    }
    match opts.window {
        Some(w) => j + w > p || j < opts.sinks,
        None => true,
    }
}

/// `q` is `[Tq, Hq, D]`; query row i sits at position `T − Tq + i`. Returns `[Tq, Hq, D]`.
/// A row that sees no key (impossible under the causal rule with T ≥ 1) is all zeros.
pub fn attend(src: &dyn TokenSource, q: &[f32], hq: usize, opts: &AttendOptions) -> Vec<f32> {
    let (t, hkv, d) = (src.tokens(), src.heads(), src.dim());
    let tq = q.len() / (hq * d);
    let group = hq / hkv;
    let scale = opts.scale.unwrap_or(1.0 / (d as f32).sqrt());
    let mut out = vec![0f32; tq * hq * d];
    let (mut k, mut v) = (vec![0f32; d], vec![0f32; d]);
    for i in 0..tq {
        let p = t - tq + i;
        for h in 0..hkv {
            // The group's query heads share every loaded key and value.
            let mut m = vec![f32::NEG_INFINITY; group];
            let mut l = vec![0f32; group];
            let mut acc = vec![0f32; group * d];
            for j in 0..t {
                if !visible(j, p, opts) {
                    continue;
                }
                src.key(j, h, &mut k);
                src.value(j, h, &mut v);
                for g in 0..group {
                    let qh = h * group + g;
                    let qrow = &q[(i * hq + qh) * d..][..d];
                    let s = scale * qrow.iter().zip(&k).map(|(a, b)| a * b).sum::<f32>();
                    let m_new = m[g].max(s);
                    let corr = (m[g] - m_new).exp();
                    let w = (s - m_new).exp();
                    l[g] = l[g] * corr + w;
                    for (a, &x) in acc[g * d..(g + 1) * d].iter_mut().zip(&v) {
                        *a = *a * corr + w * x;
                    }
                    m[g] = m_new;
                }
            }
            for g in 0..group {
                let qh = h * group + g;
                if l[g] > 0.0 {
                    for (o, &a) in out[(i * hq + qh) * d..][..d]
                        .iter_mut()
                        .zip(&acc[g * d..(g + 1) * d])
                    {
                        *o = a / l[g];
                    }
                }
            }
        }
    }
    out
}

/// Exact attention in f64 on uncompressed K/V `[T, Hkv, D]` (the quality yardstick).
pub fn attend_exact(
    k: &[f32],
    v: &[f32],
    hkv: usize,
    q: &[f32],
    hq: usize,
    d: usize,
    opts: &AttendOptions,
) -> Vec<f32> {
    let t = k.len() / (hkv * d);
    let tq = q.len() / (hq * d);
    let group = hq / hkv;
    let scale = f64::from(opts.scale.unwrap_or(1.0 / (d as f32).sqrt()));
    let mut out = vec![0f32; tq * hq * d];
    for i in 0..tq {
        let p = t - tq + i;
        for qh in 0..hq {
            let h = qh / group;
            let qrow = &q[(i * hq + qh) * d..][..d];
            let scores: Vec<(usize, f64)> = (0..t)
                .filter(|&j| visible(j, p, opts))
                .map(|j| {
                    let krow = &k[(j * hkv + h) * d..][..d];
                    (
                        j,
                        scale
                            * qrow
                                .iter()
                                .zip(krow)
                                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                                .sum::<f64>(),
                    )
                })
                .collect();
            let m = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = scores.iter().map(|s| (s.1 - m).exp()).sum();
            for c in 0..d {
                let y: f64 = scores
                    .iter()
                    .map(|&(j, s)| (s - m).exp() * f64::from(v[(j * hkv + h) * d + c]))
                    .sum();
                out[(i * hq + qh) * d + c] = (y / z) as f32;
            }
        }
    }
    out
}
