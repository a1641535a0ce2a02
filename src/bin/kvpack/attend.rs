//! `kvpack attend`: one cache per layer holds all T tokens of K and V; the last N queries
//! attend to it; the output is measured against exact f64 attention on the original K/V.

use kvpack::cpu::attend::attend_exact;
use kvpack::{AttendOptions, Context, KvLayer, MemoryReport, Method, PathChoice};
use serde_json::{Value, json};

use crate::io::Tensor;
use crate::roundtrip::bytes;

/// What one run produced.
pub struct Outcome {
    /// `[L, N, Hq, D]` (flattened; the caller restores the input's rank).
    pub out: Vec<f32>,
    pub summary: Value,
}

/// Squared-error sums in f64: (Σ(ô−o)², Σo²) over one row, layer or the whole output.
#[derive(Clone, Copy, Default)]
struct Err2 {
    diff: f64,
    norm: f64,
}

impl Err2 {
    fn add(&mut self, o: Err2) {
        self.diff += o.diff;
        self.norm += o.norm;
    }

    /// ||ô−o||₂/||o||₂ (0 when exact, `None` when undefined: an all-zero reference).
    fn rel(self) -> Option<f64> {
        if self.diff == 0.0 {
            Some(0.0)
        } else if self.norm > 0.0 {
            Some((self.diff / self.norm).sqrt())
        } else {
            None
        }
    }
}

/// Errors of a set of output rows: the pooled relative error and its per-row mean and worst.
#[derive(Default)]
struct RowStats {
    total: Err2,
    sum: f64,
    count: usize,
    undefined: usize,
    worst: Option<(f64, usize, usize, usize)>,
}

impl RowStats {
    fn row(&mut self, e: Err2, layer: usize, query: usize, head: usize) {
        self.total.add(e);
        match e.rel() {
            Some(r) => {
                self.sum += r;
                self.count += 1;
                if self.worst.is_none_or(|w| r > w.0) {
                    self.worst = Some((r, layer, query, head));
                }
            }
            None => self.undefined += 1,
        }
    }

    fn merge(&mut self, o: &RowStats) {
        self.total.add(o.total);
        self.sum += o.sum;
        self.count += o.count;
        self.undefined += o.undefined;
        if let Some(w) = o.worst {
            if self.worst.is_none_or(|s| w.0 > s.0) {
                self.worst = Some(w);
            }
        }
    }

    fn json(&self, t: usize, n: usize) -> Value {
        let mean = (self.count > 0).then(|| self.sum / self.count as f64);
        json!({
            "overall": self.total.rel(),
            "row_mean": mean,
            "row_max": self.worst.map(|w| w.0),
            "worst_row": self.worst.map(|(_, l, i, h)| json!({
                "layer": l, "query": i, "position": t - n + i, "head": h,
            })),
            "rows_undefined": self.undefined,
        })
    }
}

/// Rows `[start, end)` of `x` (elements) as f32, exactly as given.
fn f32s(x: &Tensor, start: usize, end: usize) -> Vec<f32> {
    (start..end).map(|i| x.values.get(i) as f32).collect()
}

/// Checks that `q`, `k` and `v` fit together and that N queries fit in T tokens.
pub fn check_shapes(q: &Tensor, k: &Tensor, n: usize) -> Result<(), String> {
    if q.shape.len() != k.shape.len() {
        return Err(format!(
            "`q` {:?} and `k` {:?} must both be [T, H, D] or both [L, T, H, D]",
            q.shape, k.shape
        ));
    }
    if q.layers != k.layers {
        return Err(format!(
            "`q` has {} layers but `k` and `v` have {}",
            q.layers, k.layers
        ));
    }
    if q.tokens != k.tokens {
        return Err(format!(
            "`q` has {} tokens but `k` and `v` have {} (T must match)",
            q.tokens, k.tokens
        ));
    }
    if q.dim != k.dim {
        return Err(format!(
            "`q` has head width {} but `k` and `v` have {}",
            q.dim, k.dim
        ));
    }
    if !q.heads.is_multiple_of(k.heads) {
        return Err(format!(
            "`q` has {} heads, not a multiple of the {} KV heads of `k` and `v`",
            q.heads, k.heads
        ));
    }
    if n == 0 || n > k.tokens {
        return Err(format!(
            "--queries {n} must be between 1 and T = {} (the last N tokens attend)",
            k.tokens
        ));
    }
    Ok(())
}

/// Runs every layer: a cache of `method` gets all of `k`/`v` (or, with `cached`, layer l is
/// `cached[l]`, loaded from a cache file: `kvpack attend --cache`), the last `n` rows of `q`
/// attend; the error is measured against exact attention on `k`/`v`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    ctx: &Context,
    choice: PathChoice,
    method: &Method,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    n: usize,
    opts: &AttendOptions,
    cached: Option<Vec<Box<dyn KvLayer>>>,
) -> Result<Outcome, String> {
    check_shapes(q, k, n)?;
    let err = |e: kvpack::Error| e.to_string();
    let (t, hq, hkv, d) = (k.tokens, q.heads, k.heads, k.dim);
    let kv_layer = t * hkv * d;
    let q_layer = t * hq * d;
    let mut out = Vec::with_capacity(k.layers * n * hq * d);
    let mut total = MemoryReport::default();
    let mut all = RowStats::default();
    let mut per_layer = Vec::with_capacity(k.layers);
    let mut paths = None;
    let mut attend_kernels = Vec::new();
    let from_file = cached.is_some();
    let mut cached = cached.map(|c| c.into_iter());
    for l in 0..k.layers {
        let (a, b) = (l * kv_layer, (l + 1) * kv_layer);
        let layer = match cached.as_mut() {
            Some(c) => c
                .next()
                .ok_or("the cache file has fewer layers than the input")?,
            None => {
                let mut layer = method.layer_at(ctx, l, hkv, d, choice).map_err(err)?;
                layer
                    .append(k.values.input(a, b), v.values.input(a, b))
                    .map_err(err)?;
                layer
            }
        };
        if paths.is_none() {
            attend_kernels = layer.attend_kernels().map_err(err)?;
        }
        paths.get_or_insert(layer.paths());
        let qs = f32s(q, l * q_layer + (t - n) * hq * d, (l + 1) * q_layer);
        let o = layer.attend(&qs, hq, opts).map_err(err)?;
        let exact = attend_exact(&f32s(k, a, b), &f32s(v, a, b), hkv, &qs, hq, d, opts);
        let mut stats = RowStats::default();
        for (r, (or, er)) in o.chunks_exact(d).zip(exact.chunks_exact(d)).enumerate() {
            let mut e = Err2::default();
            for (&x, &y) in or.iter().zip(er) {
                e.diff += (f64::from(x) - f64::from(y)).powi(2);
                e.norm += f64::from(y).powi(2);
            }
            stats.row(e, l, r / hq, r % hq);
        }
        let mem = layer.memory();
        per_layer.push(json!({
            "layer": l,
            "rel_l2_error": stats.json(t, n),
            "bytes_held": mem.held.total(),
            "ratio": mem.ratio(),
        }));
        total.add(&mem);
        all.merge(&stats);
        out.extend_from_slice(&o);
    }
    let paths = paths.ok_or("the input has no layers")?;
    let used = paths[0];
    let (name, config) = crate::roundtrip::method_json(method);
    let adapter = match ctx.adapter_info() {
        Some(info) if used.is_gpu() => info.name.clone(),
        _ => "cpu".to_string(),
    };
    let mut kernels = serde_json::Map::new();
    for (name, path) in attend_kernels {
        kernels.insert(name.into(), json!(path.to_string()));
    }
    kernels.insert("keys".into(), json!(paths[0].to_string()));
    kernels.insert("values".into(), json!(paths[1].to_string()));
    let summary = json!({
        "method": name,
        "spec": method.to_string(),
        "config": config,
        "path_requested": choice.to_string(),
        "from_cache_file": from_file,
        "path": used.to_string(),
        "kernels": kernels,
        "adapter": adapter,
        "dtype": { "q": q.values.dtype(), "k": k.values.dtype(), "v": v.values.dtype() },
        "tokens": t,
        "queries": n,
        "query_positions": [t - n, t - 1],
        "q_heads": hq,
        "kv_heads": hkv,
        "dim": d,
        "layers": k.layers,
        "options": {
            "scale": opts.scale.unwrap_or(1.0 / (d as f32).sqrt()),
            "window": opts.window,
            "sinks": opts.sinks,
        },
        "bytes_held": bytes(&total.held),
        "bytes_payload": bytes(&total.payload),
        "f16_bytes": total.f16_bytes,
        "ratio": total.ratio(),
        "payload_ratio": total.payload_ratio(),
        "rel_l2_error": all.json(t, n),
        "per_layer": per_layer,
    });
    Ok(Outcome { out, summary })
}
