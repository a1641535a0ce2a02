//! The calibration pipeline (feature `model`): run a model over a text on the CPU (f32 forward,
//! f16 cache), capture every layer's post-RoPE queries and keys and its values, and derive the
//! tables of [`super::file`]. The expensive part, k-means, runs in parallel over (layer, KV
//! head, side, preset) jobs and over points within a job (rayon); results do not depend on the
//! thread count.
//!
//! ```no_run
//! use kvpack::calib::train::{CalibOptions, calibrate_text};
//! let model = kvpack::model::load_model("smollm2", None)?;
//! let text = std::fs::read_to_string("calib.txt").unwrap();
//! let cal = calibrate_text(model, &text, "calib.txt", &CalibOptions::default(), &|_| {})?;
//! cal.write("smollm2.calib.safetensors".as_ref())?;
//! # Ok::<(), kvpack::Error>(())
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use half::f16;
use rayon::prelude::*;

use super::file::{
    Calibration, CenteredKeyTables, Meta, ModelIdentity, QfilterTables, VecinferTables, fnv1a64,
};
use super::{kmeans, qfilters};
use crate::cpu::common::splitmix::{
    DEFAULT_SEED, STREAM_VECINFER_KMEANS_KEYS, STREAM_VECINFER_KMEANS_VALUES, SplitMix64,
};
use crate::cpu::vecinfer::Preset;
use crate::cpu::vecinfer::transform::{
    lambda_from_keys, padded_dim, transform_key, transform_value,
};
use crate::error::{Error, Result};
use crate::model::{LoadedModel, QkvCapture, Session, Weights};
use crate::{Context, Method, PathChoice};

/// What to calibrate.
#[derive(Clone, Debug)]
pub struct CalibOptions {
    /// SplitMix64 seed of the k-means++ draws (default: turboquant.md's 0x6B7670616B).
    pub seed: u64,
    /// VecInfer presets to train codebooks for, keys and values alike (empty: no VecInfer).
    pub vecinfer: Vec<Preset>,
    /// Calibrate Q-Filters.
    pub qfilters: bool,
    /// Query rows per head for the SVD (spec: N ≤ 3000, evenly spaced).
    pub max_query_rows: usize,
    /// Lloyd iterations at most (spec: 50).
    pub max_iters: usize,
    /// Tokens per forward chunk.
    pub chunk: usize,
    /// Use at most this many tokens of the text.
    pub max_tokens: Option<usize>,
}

impl Default for CalibOptions {
    fn default() -> Self {
        Self {
            seed: DEFAULT_SEED,
            vecinfer: vec![Preset::for_bits(1).unwrap(), Preset::for_bits(2).unwrap()],
            qfilters: true,
            max_query_rows: 3000,
            max_iters: 50,
            chunk: 64,
            max_tokens: None,
        }
    }
}

/// Progress of a calibration: `stage` ("forward", "kmeans", "qfilters"), `done` of `total`.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// The stage.
    pub stage: &'static str,
    /// Units done.
    pub done: usize,
    /// Units in the stage.
    pub total: usize,
}

/// Runs the model over `ids` and returns what every layer computed (k and v rounded to f16, as
/// the cache stores them; q as computed).
pub fn capture(
    weights: Arc<Weights>,
    ids: &[u32],
    chunk: usize,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<QkvCapture> {
    if ids.is_empty() {
        return Err(Error::Config("calibration needs at least one token".into()));
    }
    if chunk == 0 {
        return Err(Error::Config("the forward chunk must be positive".into()));
    }
    let mut s = Session::new(weights, &Context::cpu(), Method::f16(), PathChoice::Cpu)?;
    s.capture_qkv(true);
    let mut done = 0;
    for c in ids.chunks(chunk) {
        s.forward_chunk(c)?;
        done += c.len();
        progress(Progress {
            stage: "forward",
            done,
            total: ids.len(),
        });
    }
    let mut cap = s
        .take_qkv()
        .ok_or_else(|| Error::Config("internal: no capture".into()))?;
    for x in cap.k.iter_mut().chain(cap.v.iter_mut()).flatten() {
        *x = f16::from_f32(*x).to_f32();
    }
    Ok(cap)
}

/// The transformed sub-vectors `[T·H_sel·n_sub, d_s]` (f64) of one (layer, head) for k-means.
fn sub_vectors(
    x: &[f32],
    heads: usize,
    dim: usize,
    head: usize,
    lambda: Option<&[f32]>,
    ds: usize,
) -> Vec<f64> {
    let p = dim.next_power_of_two();
    let mut out = Vec::with_capacity(x.len() / heads / dim * p);
    let mut t = Vec::with_capacity(p);
    for v in x.chunks_exact(dim).skip(head).step_by(heads) {
        match lambda {
            Some(l) => transform_key(v, &l[head * dim..][..dim], p, &mut t),
            None => transform_value(v, p, &mut t),
        }
        out.extend(t.iter().map(|&y| y as f64));
    }
    debug_assert_eq!(out.len() % ds, 0);
    out
}

/// Calibrates from a capture (`identity`: the model's shape; `text` for the metadata).
pub fn calibrate_capture(
    cap: &QkvCapture,
    identity: ModelIdentity,
    text: &str,
    text_name: &str,
    opts: &CalibOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Calibration> {
    let m = &identity;
    let (l, h, hq, d) = (m.layers, m.kv_heads, m.q_heads, m.head_dim);
    if cap.k.len() != l || cap.q.len() != l || cap.v.len() != l || h == 0 || hq % h != 0 {
        return Err(Error::Config(format!(
            "capture of {} layers does not fit the model ({l} layers, {hq} query / {h} KV heads)",
            cap.k.len()
        )));
    }
    let p = padded_dim(d)?;
    for pr in &opts.vecinfer {
        pr.n_sub(p)?;
    }
    let meta = Meta {
        model: identity.clone(),
        seed: opts.seed,
        text_name: text_name.to_string(),
        text_bytes: text.len(),
        text_fnv1a64: fnv1a64(text.as_bytes()),
        tokens: cap.tokens,
    };
    // μ per (layer, KV head, channel) of every captured key, summed in f64 in token order.
    let key_means: Vec<f32> = cap
        .k
        .iter()
        .flat_map(|k| {
            let t = (k.len() / (h * d)).max(1);
            let mut s = vec![0f64; h * d];
            for row in k.chunks_exact(h * d) {
                for (a, &x) in s.iter_mut().zip(row) {
                    *a += f64::from(x);
                }
            }
            s.into_iter().map(move |a| (a / t as f64) as f32)
        })
        .collect();
    let vecinfer = if opts.vecinfer.is_empty() {
        None
    } else {
        let lambdas = cap
            .k
            .iter()
            .map(|k| lambda_from_keys(k, h, d))
            .collect::<Result<Vec<_>>>()?;
        // The keys as the store holds them under centering: f16(k − μ).
        let centered: Vec<Vec<f32>> = cap
            .k
            .iter()
            .zip(key_means.chunks_exact(h * d))
            .map(|(k, mu)| {
                crate::store::center::subtract(k, mu)
                    .into_iter()
                    .map(|x| f16::from_f32(x).to_f32())
                    .collect()
            })
            .collect();
        let centered_lambdas = centered
            .iter()
            .map(|k| lambda_from_keys(k, h, d))
            .collect::<Result<Vec<_>>>()?;
        // jobs: (layer, head, side 0 keys / 1 values / 2 centered keys, preset)
        let jobs: Vec<(usize, usize, usize, Preset)> = (0..l)
            .flat_map(|li| (0..h).flat_map(move |hi| (0..3).map(move |s| (li, hi, s))))
            .flat_map(|(li, hi, s)| opts.vecinfer.iter().map(move |&pr| (li, hi, s, pr)))
            .collect();
        let done = AtomicUsize::new(0);
        let total = jobs.len();
        let results = jobs
            .par_iter()
            .map(|&(li, hi, side, pr)| {
                // (centered keys draw from the keys' stream: other points, same rule)
                let (x, lam, stream) = match side {
                    0 => (
                        &cap.k[li],
                        Some(lambdas[li].as_slice()),
                        STREAM_VECINFER_KMEANS_KEYS,
                    ),
                    1 => (&cap.v[li], None, STREAM_VECINFER_KMEANS_VALUES),
                    _ => (
                        &centered[li],
                        Some(centered_lambdas[li].as_slice()),
                        STREAM_VECINFER_KMEANS_KEYS,
                    ),
                };
                let pts = sub_vectors(x, h, d, hi, lam, pr.sub_dim);
                let mut rng = SplitMix64::new(opts.seed, li as u64, hi as u64, stream);
                let k = kmeans::kmeans(&pts, pr.sub_dim, pr.centroids, &mut rng, opts.max_iters)?;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                progress(Progress {
                    stage: "kmeans",
                    done: n,
                    total,
                });
                Ok((k, pts.len() / pr.sub_dim))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut keys = BTreeMap::new();
        let mut values = BTreeMap::new();
        let mut centered_keys = BTreeMap::new();
        let mut vectors = BTreeMap::new();
        let mut iterations: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (&(_, _, side, pr), (k, n)) in jobs.iter().zip(results) {
            let map = match side {
                0 => &mut keys,
                1 => &mut values,
                _ => &mut centered_keys,
            };
            let name = format!("{}.{}", ["keys", "values", "centered_keys"][side], pr.tag());
            map.entry((pr.sub_dim, pr.centroids))
                .or_insert_with(Vec::new)
                .extend(k.centres.iter().map(|&c| c as f32));
            vectors.insert(name.clone(), n);
            iterations.entry(name).or_default().push(k.iterations);
        }
        Some(VecinferTables {
            lambda: lambdas.concat(),
            keys,
            values,
            vectors,
            iterations,
            centered: Some(CenteredKeyTables {
                lambda: centered_lambdas.concat(),
                keys: centered_keys,
            }),
        })
    };
    let qfilters = if opts.qfilters {
        let rows = qfilters::rows(cap.tokens, opts.max_query_rows);
        let (mut f, mut qf, mut rep) = (Vec::new(), Vec::new(), Vec::new());
        for li in 0..l {
            let (a, b, c) = qfilters::layer_filters(&cap.q[li], hq, h, d, &rows, li);
            f.extend(a);
            qf.extend(b);
            rep.extend(c);
            progress(Progress {
                stage: "qfilters",
                done: li + 1,
                total: l,
            });
        }
        Some(QfilterTables {
            filters: f,
            query_filters: qf,
            rows: rows.len(),
            report: rep,
        })
    } else {
        None
    };
    Ok(Calibration {
        meta,
        vecinfer,
        qfilters,
        key_means: Some(key_means),
    })
}

/// The identity of a loaded model.
pub fn identity(model: &LoadedModel) -> ModelIdentity {
    let c = &model.config;
    ModelIdentity {
        name: model.name.clone(),
        arch: c.arch.name().to_string(),
        layers: c.layers,
        q_heads: c.heads,
        kv_heads: c.kv_heads,
        head_dim: c.head_dim,
    }
}

/// Tokenizes `text`, runs the model over it and calibrates (the model's weights are moved
/// into the forward session and dropped after it).
pub fn calibrate_text(
    model: LoadedModel,
    text: &str,
    text_name: &str,
    opts: &CalibOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Calibration> {
    let mut ids = model.tokenizer.encode(text);
    if let Some(n) = opts.max_tokens {
        ids.truncate(n);
    }
    if ids.len() > model.config.max_seq {
        return Err(Error::Config(format!(
            "{} tokens exceed the model's maximum sequence length {}",
            ids.len(),
            model.config.max_seq
        )));
    }
    let id = identity(&model);
    let cap = capture(Arc::new(model.weights), &ids, opts.chunk, progress)?;
    calibrate_capture(&cap, id, text, text_name, opts, progress)
}
