//! CPU reference of attention over a compressed cache (docs/contracts/attention.md): online
//! softmax in f32 over the visible tokens, grouped-query heads sharing every key and value,
//! causal masking, sliding window with sinks. The codec of each side plugs in through its
//! four hooks ([`crate::codec::Codec`]): the key codec prepares each query row once
//! (`prepare_query`) and scores its quantized tokens (`score`); the value codec gives each
//! quantized token's value in its accumulation space (`value`) and maps the normalized
//! accumulator to the output once (`finish_output`). Tokens in a side's residual window are
//! read as f16 rows: their scores are exact dot products with the original query, their values
//! accumulate in a second, D-wide accumulator, added after `finish_output` (it is linear).
//! GPU twins: `wgsl/attend/` (chunked partials, then `attend_merge`).

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::attention::AttendOptions;
use crate::codec::Codec;
use crate::store::SideWords;

/// One side's stored words as attention reads them: the codec, its streams (tokens
/// `[0, quantized)`), and the f16 rows of tokens `[quantized, T)`.
pub struct SideView<'a> {
    /// The side's codec (its CPU hooks).
    pub codec: &'a dyn Codec,
    /// Per stream, the words of the quantized blocks.
    pub words: Vec<&'a [u32]>,
    /// Tokens in the codec's form.
    pub quantized: usize,
    /// f16 rows `[T − quantized][H][D]`.
    pub residual: &'a [f16],
}

impl<'a> SideView<'a> {
    /// A view of a snapshot's side.
    pub fn new(codec: &'a dyn Codec, w: &'a SideWords) -> Self {
        Self {
            codec,
            words: w.words(),
            quantized: w.quantized,
            residual: &w.residual,
        }
    }

    fn residual_row(&self, j: usize, h: usize, out: &mut [f32]) {
        let g = self.codec.geometry();
        // Slice conversion: F16C/NEON instructions where the CPU has them.
        self.residual[(j - self.quantized) * g.token_elems() + h * g.dim..][..g.dim]
            .convert_to_f32_slice(out);
    }
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

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The absolute positions of a cache that evicted tokens (docs/contracts/attention.md, "Which keys a
/// query sees"): the cache holds `tokens` of the `appended` tokens; held token j of head h
/// sits at position `table[j·H + h]` for `j < table.len() / H`, and at `j + appended −
/// tokens` after that (tokens never evicted: the newest).
#[derive(Clone, Copy, Debug)]
pub struct Positions<'a> {
    /// `[rows][H]` u32 positions of the first held tokens, per head.
    pub table: &'a [u32],
    /// Tokens appended (the position of the next token).
    pub appended: usize,
}

/// `q` is `[Tq, Hq, D]`; query row i sits at position `T − Tq + i`. Returns `[Tq, Hq, D]`.
/// A row that sees no key (impossible under the causal rule with T ≥ 1) is all zeros.
pub fn attend(
    k: &SideView<'_>,
    v: &SideView<'_>,
    tokens: usize,
    q: &[f32],
    hq: usize,
    opts: &AttendOptions,
) -> Vec<f32> {
    attend_at(k, v, tokens, None, q, hq, opts)
}

/// [`attend`] over a cache holding `tokens` tokens at `positions` (`None`: token j at
/// position j): query row i sits at position `appended − Tq + i`, and the masks read each
/// held token's own position.
pub fn attend_at(
    k: &SideView<'_>,
    v: &SideView<'_>,
    tokens: usize,
    positions: Option<&Positions<'_>>,
    q: &[f32],
    hq: usize,
    opts: &AttendOptions,
) -> Vec<f32> {
    let g = k.codec.geometry();
    let (t, hkv, d) = (tokens, g.heads, g.dim);
    let appended = positions.map_or(t, |p| p.appended);
    let pos = |j: usize, h: usize| -> usize {
        match positions {
            Some(p) if j * hkv < p.table.len() => p.table[j * hkv + h] as usize,
            _ => j + appended - t,
        }
    };
    let tq = q.len() / (hq * d);
    let group = hq / hkv;
    let scale = opts.scale.unwrap_or(1.0 / (d as f32).sqrt());
    let vw = v.codec.value_dim();
    let mut out = vec![0f32; tq * hq * d];
    let (mut key, mut val, mut val_c) = (vec![0f32; d], vec![0f32; d], vec![0f32; vw]);
    let mut prep: Vec<Vec<f32>> = vec![Vec::new(); group];
    let mut fin = vec![0f32; d];
    let (mut raw, mut scratch) = (vec![0f32; group], Vec::new());
    for i in 0..tq {
        let p = appended - tq + i;
        for h in 0..hkv {
            let qrow = |gi: usize| &q[(i * hq + h * group + gi) * d..][..d];
            for (gi, pr) in prep.iter_mut().enumerate() {
                k.codec.prepare_query(h, qrow(gi), pr);
            }
            // The group's query heads share every loaded key and value.
            let mut m = vec![f32::NEG_INFINITY; group];
            let mut l = vec![0f32; group];
            let mut acc_c = vec![0f32; group * vw]; // the value codec's space
            let mut acc_r = vec![0f32; group * d]; // residual rows (f16)
            let (mut lazy_c, mut lazy_r) = (vec![1f32; group], vec![1f32; group]);
            for j in 0..t {
                if !visible(pos(j, h), p, opts) {
                    continue;
                }
                if j < k.quantized {
                    k.codec.score(&k.words, &prep, j, h, &mut scratch, &mut raw);
                } else {
                    k.residual_row(j, h, &mut key);
                    for (gi, r) in raw.iter_mut().enumerate() {
                        *r = dot(qrow(gi), &key);
                    }
                }
                let packed_v = j < v.quantized;
                if packed_v {
                    v.codec.value(&v.words, j, h, &mut val_c);
                } else {
                    v.residual_row(j, h, &mut val);
                }
                for gi in 0..group {
                    let s = scale * raw[gi];
                    let m_new = m[gi].max(s);
                    let corr = (m[gi] - m_new).exp();
                    let w = (s - m_new).exp();
                    l[gi] = l[gi] * corr + w;
                    // The accumulator this token does not touch only gets a factor, applied when
                    // it is next touched (or at the end).
                    let (acc, x, lazy, width) = if packed_v {
                        (&mut acc_c, &val_c[..], &mut lazy_r[gi], vw)
                    } else {
                        (&mut acc_r, &val[..], &mut lazy_c[gi], d)
                    };
                    *lazy *= corr;
                    let own_lazy = if packed_v {
                        &mut lazy_c[gi]
                    } else {
                        &mut lazy_r[gi]
                    };
                    let f = *own_lazy * corr;
                    *own_lazy = 1.0;
                    for (a, &xv) in acc[gi * width..(gi + 1) * width].iter_mut().zip(x) {
                        *a = *a * f + w * xv;
                    }
                    m[gi] = m_new;
                }
            }
            for gi in 0..group {
                if l[gi] > 0.0 {
                    let ac: Vec<f32> = acc_c[gi * vw..(gi + 1) * vw]
                        .iter()
                        .map(|a| a * lazy_c[gi] / l[gi])
                        .collect();
                    v.codec.finish_output(h, &ac, &mut fin);
                    let o = &mut out[(i * hq + h * group + gi) * d..][..d];
                    for ((o, f), r) in o.iter_mut().zip(&fin).zip(&acc_r[gi * d..(gi + 1) * d]) {
                        *o = f + r * lazy_r[gi] / l[gi];
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
