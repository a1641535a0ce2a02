//! `kvpack roundtrip`: compress K and V layer by layer, reconstruct, measure.

use kvpack::{Context, Memory, MemoryReport, Method, PathChoice};
use serde_json::{Value, json};

use crate::io::Tensor;

/// What one run produced.
pub struct Outcome {
    /// `None` when the key method has no reconstruction (QJL).
    pub k_hat: Option<Vec<f32>>,
    pub v_hat: Vec<f32>,
    pub summary: Value,
}

/// Squared-error sums in f64: (Σ(x̂−x)², Σx²).
#[derive(Clone, Copy, Default)]
struct Err2 {
    diff: f64,
    norm: f64,
}

impl Err2 {
    fn measure(x: &Tensor, start: usize, x_hat: &[f32]) -> Self {
        let mut e = Err2::default();
        for (i, &h) in x_hat.iter().enumerate() {
            let v = x.values.get(start + i);
            e.diff += (f64::from(h) - v).powi(2);
            e.norm += v * v;
        }
        e
    }

    fn add(&mut self, o: Err2) {
        self.diff += o.diff;
        self.norm += o.norm;
    }

    /// ||x̂−x||₂/||x||₂ (0 for an exact all-zero input, null when undefined).
    fn rel(self) -> Value {
        if self.diff == 0.0 {
            json!(0.0)
        } else if self.norm > 0.0 {
            json!((self.diff / self.norm).sqrt())
        } else {
            Value::Null
        }
    }
}

pub fn bytes(m: &Memory) -> Value {
    json!({
        "key_codes": m.key_codes,
        "key_params": m.key_params,
        "value_codes": m.value_codes,
        "value_params": m.value_params,
        "residual": m.residual,
        "tables": m.tables,
        "total": m.total(),
    })
}

fn figures(m: &MemoryReport, ek: Err2, ev: Err2) -> serde_json::Map<String, Value> {
    let v = json!({
        "tokens": m.tokens,
        "quantized_tokens": m.quantized,
        "bytes_held": bytes(&m.held),
        "bytes_payload": bytes(&m.payload),
        "f16_bytes": m.f16_bytes,
        "ratio": m.ratio(),
        "payload_ratio": m.payload_ratio(),
        "rel_l2_error": { "k": ek.rel(), "v": ev.rel() },
    });
    match v {
        Value::Object(o) => o,
        _ => unreachable!("json! of an object literal"),
    }
}

/// The method's name (`kivi`, `f16`, or `KEYS/VALUES` for a pair) and its configuration.
pub fn method_json(method: &Method) -> (String, Value) {
    let (k, v) = (method.key(), method.value());
    let name = if k.method() == v.method() {
        k.method().to_string()
    } else {
        format!("{}/{}", k.method(), v.method())
    };
    let side = |c: &dyn kvpack::method::SideConfig| json!({ "method": c.method(), "options": c.to_string() });
    (
        name,
        json!({
            "spec": method.to_string(),
            "keys": side(k),
            "values": side(v),
            "residual": method.residual(),
        }),
    )
}

/// Runs every layer of `k`/`v` through its own cache of `method` on `ctx` with `choice`.
pub fn run(
    ctx: &Context,
    choice: PathChoice,
    method: &Method,
    k: &Tensor,
    v: &Tensor,
    chunk: Option<usize>,
) -> Result<Outcome, kvpack::Error> {
    let row = k.heads * k.dim;
    let layer_elems = k.tokens * row;
    let step = chunk.unwrap_or(k.tokens).max(1);
    let keys_rec = method.key().reconstructs();
    if !keys_rec {
        eprintln!(
            "roundtrip: {} keys have no reconstruction (sign bits of a projection and a norm): no k_hat, no key error; the values are reconstructed",
            method.key().method()
        );
    }
    let mut k_hat = Vec::with_capacity(if keys_rec { k.layers * layer_elems } else { 0 });
    let mut v_hat = Vec::with_capacity(k.layers * layer_elems);
    let (mut total, mut ek_all, mut ev_all) =
        (MemoryReport::default(), Err2::default(), Err2::default());
    let mut per_layer = Vec::with_capacity(k.layers);
    let mut described = None;
    for l in 0..k.layers {
        let mut layer = method.layer_at(ctx, l, k.heads, k.dim, choice)?;
        described.get_or_insert((layer.describe(), layer.paths()));
        let base = l * layer_elems;
        let mut t = 0;
        while t < k.tokens {
            let n = step.min(k.tokens - t);
            let (a, b) = (base + t * row, base + (t + n) * row);
            layer.append(k.values.input(a, b), v.values.input(a, b))?;
            t += n;
        }
        let kh = if keys_rec {
            layer.reconstruct_side(kvpack::store::Side::Keys)?
        } else {
            Vec::new()
        };
        let vh = layer.reconstruct_side(kvpack::store::Side::Values)?;
        // Without a key reconstruction the key error is undefined: NaN sums, written null.
        let ek = if keys_rec {
            Err2::measure(k, base, &kh)
        } else {
            Err2 {
                diff: f64::NAN,
                norm: 0.0,
            }
        };
        let ev = Err2::measure(v, base, &vh);
        let mem = layer.memory();
        let mut fig = figures(&mem, ek, ev);
        fig.insert("layer".into(), json!(l));
        per_layer.push(Value::Object(fig));
        total.add(&mem);
        ek_all.add(ek);
        ev_all.add(ev);
        k_hat.extend_from_slice(&kh);
        v_hat.extend_from_slice(&vh);
    }
    let (described, paths) =
        described.ok_or_else(|| kvpack::Error::Config("the input has no layers".into()))?;
    let path = paths[0].to_string();
    let adapter = match ctx.adapter_info() {
        Some(info) if paths[0].is_gpu() => info.name.clone(),
        _ => "cpu".to_string(),
    };
    let (name, mut config) = method_json(method);
    config["chunk"] = json!(chunk);
    let mut summary = serde_json::Map::new();
    summary.insert("method".into(), json!(name));
    summary.insert("spec".into(), json!(method.to_string()));
    summary.insert("config".into(), config);
    summary.insert("path_requested".into(), json!(choice.to_string()));
    summary.insert("path".into(), json!(path));
    summary.insert("layer".into(), json!(described));
    summary.insert(
        "kernels".into(),
        json!({ "keys": paths[0].to_string(), "values": paths[1].to_string() }),
    );
    summary.insert("adapter".into(), json!(adapter));
    summary.insert("shape".into(), json!(k.shape));
    summary.insert(
        "dtype".into(),
        json!({ "k": k.values.dtype(), "v": v.values.dtype() }),
    );
    summary.insert("layers".into(), json!(k.layers));
    summary.insert("heads".into(), json!(k.heads));
    summary.insert("dim".into(), json!(k.dim));
    let mut fig = figures(&total, ek_all, ev_all);
    // Tokens per layer (all layers hold the same tokens), not summed over layers.
    fig.insert("tokens".into(), json!(k.tokens));
    fig.insert("quantized_tokens".into(), json!(total.quantized / k.layers));
    summary.extend(fig);
    summary.insert("per_layer".into(), Value::Array(per_layer));
    summary.insert("keys_reconstructed".into(), json!(keys_rec));
    Ok(Outcome {
        k_hat: keys_rec.then_some(k_hat),
        v_hat,
        summary: Value::Object(summary),
    })
}
