//! The CPU f32 forward pass of a llama-family model (llama, qwen2), with attention through
//! kvpack's cache: every layer's K and V go into a [`KvLayer`] (f16, KIVI, ... on any path), and
//! the layer's attention output comes from [`KvLayer::attend`] on what that cache stores.
//!
//! Per token (or per chunk of tokens): embedding → for each block: RMSNorm, q/k/v projections
//! (plus their biases when [`Config::qkv_bias`]), RoPE (on the pairs [`Config::rope_pairing`]
//! names), append k and v to the layer's cache, attention of q over the cache, output projection,
//! residual, RMSNorm, SwiGLU FFN (`w2 (silu(w1 x) ⊙ w3 x)`), residual → final RMSNorm →
//! logits. Matrix products run on all cores (rayon) once they are large enough to pay for it.

mod session_file;

use std::sync::Arc;

use rayon::prelude::*;

use super::config::{Config, RopePairing, Weights};
use crate::attention::AttendOptions;
use crate::context::{Context, PathChoice};
use crate::error::{Error, Result};
use crate::layer::KvLayer;
use crate::method::Method;
use crate::store::{Input, MemoryReport};

/// One sequence being decoded: the weights, one cache per layer and the position.
#[derive(Debug)]
pub struct Session {
    weights: Arc<Weights>,
    caches: Vec<Box<dyn KvLayer>>,
    method: Method,
    path: PathChoice,
    opts: AttendOptions,
    pos: usize,
    failed: bool,
    capture: Option<QkvCapture>,
}

/// The post-RoPE queries and keys, and the values, that every layer computed for the tokens fed
/// while [`Session::capture_qkv`] was on (what the caches were given, before any rounding).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QkvCapture {
    /// Tokens recorded.
    pub tokens: usize,
    /// Per layer, `[tokens, heads, head_dim]`.
    pub q: Vec<Vec<f32>>,
    /// Per layer, `[tokens, kv_heads, head_dim]`.
    pub k: Vec<Vec<f32>>,
    /// Per layer, `[tokens, kv_heads, head_dim]`.
    pub v: Vec<Vec<f32>>,
}

impl Session {
    /// A new empty sequence whose caches use `method` on `path` of `ctx` (one
    /// [`Method::layer_at`] per model layer, `kv_heads` heads of `head_dim`).
    pub fn new(
        weights: Arc<Weights>,
        ctx: &Context,
        method: Method,
        path: PathChoice,
    ) -> Result<Self> {
        let c = &weights.config;
        let caches = (0..c.layers)
            .map(|l| method.layer_at(ctx, l, c.kv_heads, c.head_dim, path))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            weights,
            caches,
            method,
            path,
            opts: AttendOptions::default(),
            pos: 0,
            failed: false,
            capture: None,
        })
    }

    /// Starts (`true`) or stops (`false`) recording every layer's post-RoPE q, k and v of the
    /// tokens fed from now on; starting again discards what was recorded.
    pub fn capture_qkv(&mut self, on: bool) {
        self.capture = on.then(|| {
            let l = self.weights.config.layers;
            QkvCapture {
                tokens: 0,
                q: vec![Vec::new(); l],
                k: vec![Vec::new(); l],
                v: vec![Vec::new(); l],
            }
        });
    }

    /// What was recorded since [`Session::capture_qkv`]`(true)` (recording stops).
    pub fn take_qkv(&mut self) -> Option<QkvCapture> {
        self.capture.take()
    }

    /// Attention options for every layer (sliding window, sinks, ...; default: full causal).
    pub fn set_attend_options(&mut self, opts: AttendOptions) {
        self.opts = opts;
    }

    /// The model's shape.
    pub fn config(&self) -> &Config {
        &self.weights.config
    }

    /// The weights.
    pub fn weights(&self) -> &Arc<Weights> {
        &self.weights
    }

    /// The cache method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The path the caches were asked to run on.
    pub fn path(&self) -> PathChoice {
        self.path
    }

    /// Tokens processed so far (the position of the next token).
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The per-layer caches.
    pub fn caches(&self) -> &[Box<dyn KvLayer>] {
        &self.caches
    }

    /// Bytes held by all layers' caches, and the ratio against f16.
    pub fn memory(&self) -> MemoryReport {
        let mut total = MemoryReport::default();
        for c in &self.caches {
            total.add(&c.memory());
        }
        total
    }

    /// Feeds one token; returns the next-token logits `[vocab]`.
    pub fn forward_token(&mut self, id: u32) -> Result<Vec<f32>> {
        self.forward(&[id], true)
    }

    /// Feeds a chunk of tokens at once (one append and one attention call per layer); returns
    /// the logits of every position, `[ids.len(), vocab]`.
    pub fn forward_chunk(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        self.forward(ids, true)
    }

    /// Feeds a chunk of tokens (a prompt); returns only the last position's logits `[vocab]`.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        self.forward(ids, false)
    }

    /// Feeds `prompt` (its first token is usually BOS), then generates up to `max_new` tokens
    /// with `sampler`, calling `on_token` for each new one; stops early on BOS or EOS (ids 1
    /// and 2 in llama vocabularies; pass `stop` to choose others). Returns the new tokens.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        stop: &[u32],
        sampler: &mut Sampler,
        mut on_token: impl FnMut(u32),
    ) -> Result<Vec<u32>> {
        if prompt.is_empty() {
            return Err(Error::Config("generation needs a non-empty prompt".into()));
        }
        let mut out = Vec::new();
        if max_new == 0 {
            return Ok(out);
        }
        let mut logits = self.prefill(prompt)?;
        loop {
            let next = sampler.sample(&mut logits);
            if stop.contains(&next) {
                break;
            }
            out.push(next);
            on_token(next);
            if out.len() == max_new || self.pos >= self.config().max_seq {
                break;
            }
            logits = self.forward_token(next)?;
        }
        Ok(out)
    }

    fn forward(&mut self, ids: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        if self.failed {
            return Err(Error::Config(
                "this session failed earlier (its caches may hold part of a step); start a new one"
                    .into(),
            ));
        }
        let c = self.weights.config.clone();
        if ids.is_empty() {
            return Err(Error::Shape {
                what: "token ids",
                message: "no tokens to feed".into(),
            });
        }
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= c.vocab) {
            return Err(Error::Shape {
                what: "token ids",
                message: format!("token {bad} is outside the vocabulary of {}", c.vocab),
            });
        }
        if self.pos + ids.len() > c.max_seq {
            return Err(Error::Config(format!(
                "positions {}..{} exceed the model's maximum sequence length {}",
                self.pos,
                self.pos + ids.len(),
                c.max_seq
            )));
        }
        let r = self.forward_unchecked(ids, all_logits);
        match &r {
            Ok(_) => self.pos += ids.len(),
            Err(_) => self.failed = true,
        }
        r
    }

    fn forward_unchecked(&mut self, ids: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        let w = &*self.weights;
        let c = &w.config;
        let (t, dim) = (ids.len(), c.dim);
        let mut x = Vec::with_capacity(t * dim);
        for &id in ids {
            let id = id as usize;
            x.extend_from_slice(&w.token_embedding[id * dim..(id + 1) * dim]);
        }
        let rope = Rope::new(c, self.pos, t);
        let mut xb = vec![0f32; t * dim];
        for (l, (lw, cache)) in w.layers.iter().zip(self.caches.iter_mut()).enumerate() {
            rmsnorm(&mut xb, &x, &lw.attn_norm, c.norm_eps);
            let mut q = matmul(&xb, t, dim, &lw.wq, c.q_dim());
            let mut k = matmul(&xb, t, dim, &lw.wk, c.kv_dim());
            let mut v = matmul(&xb, t, dim, &lw.wv, c.kv_dim());
            if c.qkv_bias {
                add_bias(&mut q, &lw.bq);
                add_bias(&mut k, &lw.bk);
                add_bias(&mut v, &lw.bv);
            }
            rope.apply(&mut q, c.heads);
            rope.apply(&mut k, c.kv_heads);
            if let Some(cap) = &mut self.capture {
                cap.q[l].extend_from_slice(&q);
                cap.k[l].extend_from_slice(&k);
                cap.v[l].extend_from_slice(&v);
            }
            cache.append(Input::F32(&k), Input::F32(&v))?;
            let att = cache.attend(&q, c.heads, &self.opts)?;
            let o = matmul(&att, t, c.q_dim(), &lw.wo, dim);
            add_into(&mut x, &o);

            rmsnorm(&mut xb, &x, &lw.ffn_norm, c.norm_eps);
            let mut h1 = matmul(&xb, t, dim, &lw.w1, c.hidden);
            let h3 = matmul(&xb, t, dim, &lw.w3, c.hidden);
            for (a, b) in h1.iter_mut().zip(&h3) {
                *a = *a / (1.0 + (-*a).exp()) * b;
            }
            let f = matmul(&h1, t, c.hidden, &lw.w2, dim);
            add_into(&mut x, &f);
        }
        if let Some(cap) = &mut self.capture {
            cap.tokens += t;
        }
        let rows = if all_logits { t } else { 1 };
        let last = &x[(t - rows) * dim..];
        let mut xn = vec![0f32; rows * dim];
        rmsnorm(&mut xn, last, &w.final_norm, c.norm_eps);
        let logits = matmul(&xn, rows, dim, w.output_head(), c.vocab);
        if let Some(i) = logits.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite {
                what: "logits",
                index: i,
                value: logits[i],
            });
        }
        Ok(logits)
    }
}

/// cos/sin of every (position, pair) of a chunk.
struct Rope {
    pairing: RopePairing,
    head_dim: usize,
    tokens: usize,
    /// `[t, head_dim / 2]` each.
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    fn new(c: &Config, pos0: usize, tokens: usize) -> Self {
        let half = c.head_dim / 2;
        let (mut cos, mut sin) = (
            Vec::with_capacity(tokens * half),
            Vec::with_capacity(tokens * half),
        );
        for p in pos0..pos0 + tokens {
            for i in 0..half {
                let freq = (c.rope_theta as f64).powf(-((2 * i) as f64) / c.head_dim as f64);
                let a = p as f64 * freq;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        Self {
            pairing: c.rope_pairing,
            head_dim: c.head_dim,
            tokens,
            cos,
            sin,
        }
    }

    /// Rotates `x` `[t, heads, head_dim]` in place.
    fn apply(&self, x: &mut [f32], heads: usize) {
        let (d, half) = (self.head_dim, self.head_dim / 2);
        for t in 0..self.tokens {
            let (cos, sin) = (
                &self.cos[t * half..(t + 1) * half],
                &self.sin[t * half..(t + 1) * half],
            );
            for h in 0..heads {
                let v = &mut x[(t * heads + h) * d..(t * heads + h + 1) * d];
                for i in 0..half {
                    let (a, b) = match self.pairing {
                        RopePairing::Adjacent => (2 * i, 2 * i + 1),
                        RopePairing::Halves => (i, i + half),
                    };
                    let (v0, v1) = (v[a], v[b]);
                    v[a] = v0 * cos[i] - v1 * sin[i];
                    v[b] = v0 * sin[i] + v1 * cos[i];
                }
            }
        }
    }
}

/// `out[t] = x[t] / rms(x[t]) ⊙ g` for rows of `g.len()`.
fn rmsnorm(out: &mut [f32], x: &[f32], g: &[f32], eps: f32) {
    let n = g.len();
    for (o, xr) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
        let ss = xr.iter().map(|v| v * v).sum::<f32>() / n as f32 + eps;
        let s = 1.0 / ss.sqrt();
        for ((o, &v), &g) in o.iter_mut().zip(xr).zip(g) {
            *o = g * (s * v);
        }
    }
}

/// Adds `b` to every row of `x` (rows of `b.len()`).
fn add_bias(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        add_into(row, b);
    }
}

fn add_into(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Multiply-adds below which a product runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;
/// Output rows per parallel task.
const ROWS_PER_TASK: usize = 64;
/// Tokens (rows of x) per pass over a task's weight rows in a chunk's product: a multiple of
/// dot_row's widest tile (8), so every token is computed the same way as in one pass.
const TOKENS_PER_PASS: usize = 32;

/// `x [t, n] · wᵀ` for `w [d, n]` row-major: returns `[t, d]`.
pub fn matmul(x: &[f32], t: usize, n: usize, w: &[f32], d: usize) -> Vec<f32> {
    debug_assert_eq!(x.len(), t * n);
    debug_assert_eq!(w.len(), d * n);
    // Computed as [d, t] (each task owns contiguous output rows), then transposed.
    let mut yt = vec![0f32; d * t];
    let block = |(b, out): (usize, &mut [f32])| {
        let r0 = b * ROWS_PER_TASK;
        // Tokens in passes of TOKENS_PER_PASS, so that a pass's rows of x stay in cache while
        // the task's weight rows go by (one pass when t is small, as in decoding).
        for j0 in (0..t).step_by(TOKENS_PER_PASS) {
            let j1 = (j0 + TOKENS_PER_PASS).min(t);
            let xs = &x[j0 * n..j1 * n];
            for (r, o) in out.chunks_exact_mut(t).enumerate() {
                let row = &w[(r0 + r) * n..(r0 + r + 1) * n];
                dot_row(row, xs, n, &mut o[j0..j1]);
            }
        }
    };
    if t * n * d >= PARALLEL_MIN {
        yt.par_chunks_mut(ROWS_PER_TASK * t)
            .enumerate()
            .for_each(block);
    } else {
        yt.chunks_mut(ROWS_PER_TASK * t).enumerate().for_each(block);
    }
    if t == 1 {
        return yt;
    }
    let mut y = vec![0f32; t * d];
    for r in 0..d {
        for j in 0..t {
            y[j * d + r] = yt[r * t + j];
        }
    }
    y
}

const LANES: usize = 8;

#[inline(always)]
fn madd<const FMA: bool>(acc: f32, a: f32, b: f32) -> f32 {
    if FMA { a.mul_add(b, acc) } else { acc + a * b }
}

/// `out[j] = row · x[j]` for every row j of `x` `[t, n]`, four rows of x per pass over `row`;
/// AVX2 + FMA when the CPU has them (detected at run time), portable code otherwise.
fn dot_row(row: &[f32], x: &[f32], n: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above).
        return unsafe { dot_row_avx2(row, x, n, out) };
    }
    dot_row_impl::<false>(row, x, n, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_row_avx2(row: &[f32], x: &[f32], n: usize, out: &mut [f32]) {
    // The same arithmetic as `dot_row_impl::<true>`, with intrinsics (vectorized at opt-level 2).
    // SAFETY: this function runs only where AVX2 and FMA are (its callers check).
    unsafe { super::dot_avx2::dot_row(row, x, n, out) }
}

#[inline(always)]
fn dot_row_impl<const FMA: bool>(row: &[f32], x: &[f32], n: usize, out: &mut [f32]) {
    let t = out.len();
    let mut j = 0;
    if FMA {
        // 16 vector registers: eight accumulators, the weight vector and a load.
        while j + 8 <= t {
            dot_tile::<FMA, 8>(row, &x[j * n..(j + 8) * n], n, &mut out[j..j + 8]);
            j += 8;
        }
    }
    while j + 4 <= t {
        dot_tile::<FMA, 4>(row, &x[j * n..(j + 4) * n], n, &mut out[j..j + 4]);
        j += 4;
    }
    for jj in j..t {
        out[jj] = dot_impl::<FMA>(row, &x[jj * n..(jj + 1) * n]);
    }
}

/// `out[q] = row · x[q]` for the `TILE` rows of `x` `[TILE, n]`, one pass over `row`.
#[inline(always)]
fn dot_tile<const FMA: bool, const TILE: usize>(row: &[f32], x: &[f32], n: usize, out: &mut [f32]) {
    let full = n / LANES * LANES;
    let xs: [&[f32]; TILE] = std::array::from_fn(|q| &x[q * n..(q + 1) * n]);
    let mut acc = [[0f32; LANES]; TILE];
    for i in (0..full).step_by(LANES) {
        let w: &[f32; LANES] = row[i..i + LANES].try_into().unwrap();
        for (a, xr) in acc.iter_mut().zip(&xs) {
            let xv: &[f32; LANES] = xr[i..i + LANES].try_into().unwrap();
            for l in 0..LANES {
                a[l] = madd::<FMA>(a[l], w[l], xv[l]);
            }
        }
    }
    for (o, (a, xr)) in out.iter_mut().zip(acc.iter().zip(&xs)) {
        let mut s: f32 = a.iter().sum();
        for i in full..n {
            s += row[i] * xr[i];
        }
        *o = s;
    }
}

/// Dot product with sixteen independent accumulators.
#[inline(always)]
fn dot_impl<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    const W: usize = 2 * LANES;
    let mut acc = [0f32; W];
    let (ca, cb) = (a.chunks_exact(W), b.chunks_exact(W));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        let (x, y): (&[f32; W], &[f32; W]) = (x.try_into().unwrap(), y.try_into().unwrap());
        for l in 0..W {
            acc[l] = madd::<FMA>(acc[l], x[l], y[l]);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Dot product (portable code).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_impl::<false>(a, b)
}

/// Next-token choice: greedy (temperature 0), or `run.c`'s sampler (temperature, then top-p
/// nucleus when `0 < top_p < 1`) driven by its xorshift generator, so a seed reproduces
/// llama2.c's samples.
#[derive(Clone, Debug)]
pub struct Sampler {
    /// 0 = greedy (argmax).
    pub temperature: f32,
    /// Nucleus mass; ≤ 0 or ≥ 1 samples from the whole distribution.
    pub top_p: f32,
    state: u64,
}

impl Sampler {
    /// Argmax.
    pub fn greedy() -> Self {
        Self::new(0.0, 1.0, 0)
    }

    /// Temperature and top-p sampling from `seed` (0 is replaced by 1: xorshift needs a
    /// non-zero state).
    pub fn new(temperature: f32, top_p: f32, seed: u64) -> Self {
        Self {
            temperature,
            top_p,
            state: seed.max(1),
        }
    }

    fn random_u32(&mut self) -> u32 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        (self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    }

    fn random_f32(&mut self) -> f32 {
        (self.random_u32() >> 8) as f32 / 16_777_216.0
    }

    /// Picks the next token from `logits` (which it may overwrite with probabilities).
    pub fn sample(&mut self, logits: &mut [f32]) -> u32 {
        if self.temperature <= 0.0 || logits.len() < 2 {
            return argmax(logits);
        }
        for l in logits.iter_mut() {
            *l /= self.temperature;
        }
        softmax(logits);
        let coin = self.random_f32();
        if self.top_p <= 0.0 || self.top_p >= 1.0 {
            let mut cdf = 0.0;
            for (i, p) in logits.iter().enumerate() {
                cdf += p;
                if coin < cdf {
                    return i as u32;
                }
            }
            return (logits.len() - 1) as u32;
        }
        let n = logits.len();
        let cutoff = (1.0 - self.top_p) / (n - 1) as f32;
        let mut idx: Vec<(f32, u32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, p)| **p >= cutoff)
            .map(|(i, p)| (*p, i as u32))
            .collect();
        if idx.is_empty() {
            return argmax(logits);
        }
        idx.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut cum = 0.0;
        let mut last = idx.len() - 1;
        for (i, (p, _)) in idx.iter().enumerate() {
            cum += p;
            if cum > self.top_p {
                last = i;
                break;
            }
        }
        let r = coin * cum;
        let mut cdf = 0.0;
        for (p, i) in &idx[..=last] {
            cdf += p;
            if r < cdf {
                return *i;
            }
        }
        idx[last].1
    }
}

/// Index of the first largest value.
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// In-place softmax.
pub fn softmax(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut s = 0.0;
    for v in x.iter_mut() {
        *v = (*v - m).exp();
        s += *v;
    }
    for v in x.iter_mut() {
        *v /= s;
    }
}

/// Natural-log probability of `target` under `logits` (log-softmax in f64).
pub fn log_prob(logits: &[f32], target: u32) -> f64 {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits
        .iter()
        .map(|&v| (v as f64 - m).exp())
        .sum::<f64>()
        .ln()
        + m;
    logits[target as usize] as f64 - lse
}

/// Teacher-forced perplexity of `ids` (the first is usually BOS), fed one token at a time
/// through `session` (so caches flush as in real decoding): `exp(mean NLL)` over the
/// `ids.len() − 1` next-token predictions. Returns (perplexity, mean NLL in nats).
pub fn perplexity(session: &mut Session, ids: &[u32]) -> Result<(f64, f64)> {
    if ids.len() < 2 {
        return Err(Error::Config("perplexity needs at least two tokens".into()));
    }
    let mut nll = 0.0;
    for w in ids.windows(2) {
        let logits = session.forward_token(w[0])?;
        nll -= log_prob(&logits, w[1]);
    }
    let mean = nll / (ids.len() - 1) as f64;
    Ok((mean.exp(), mean))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 kernels give bit for bit what the portable FMA code gives.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_dot_row_equals_portable() {
        if !(std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma"))
        {
            eprintln!("SKIP avx2_dot_row_equals_portable because the CPU lacks AVX2/FMA");
            return;
        }
        let mut s = 11u32;
        let mut r = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (s >> 8) as f32 / 16_777_216.0 - 0.5
                })
                .collect()
        };
        for (t, n) in [(1, 7), (1, 64), (3, 33), (13, 100), (29, 896), (8, 17)] {
            let (row, x) = (r(n), r(t * n));
            let (mut a, mut b) = (vec![0f32; t], vec![0f32; t]);
            dot_row_impl::<true>(&row, &x, n, &mut a);
            // SAFETY: AVX2 and FMA were detected above.
            unsafe { super::super::dot_avx2::dot_row(&row, &x, n, &mut b) };
            assert_eq!(
                a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "t {t} n {n}"
            );
        }
    }

    #[test]
    fn matmul_matches_naive() {
        let mut s = 7u32;
        let mut r = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (s >> 8) as f32 / 16_777_216.0 - 0.5
                })
                .collect()
        };
        for (t, n, d) in [
            (1, 3, 2),
            (1, 77, 130),
            (5, 64, 70),
            (13, 43, 9),
            (9, 600, 300),
            (70, 33, 65),
        ] {
            let (x, w) = (r(t * n), r(d * n));
            let y = matmul(&x, t, n, &w, d);
            for j in 0..t {
                for i in 0..d {
                    let e: f64 = (0..n)
                        .map(|k| x[j * n + k] as f64 * w[i * n + k] as f64)
                        .sum();
                    let got = y[j * d + i] as f64;
                    assert!(
                        (got - e).abs() <= 1e-5 * (1.0 + e.abs()),
                        "t{t} n{n} d{d}: {got} vs {e}"
                    );
                }
            }
        }
    }
}
