//! The versioned calibration file: safetensors, little-endian f32 tensors
//! - `vecinfer.lambda` `[L, Hkv, D]`: the key smoothing factors λ;
//! - `vecinfer.keys.d{d_s}c{C}` and `vecinfer.values.d{d_s}c{C}` `[L, Hkv, C, d_s]`: one key
//!   and one value codebook per (layer, KV head) and preset (several presets may be present);
//! - `qfilters.filters` `[L, Hkv, D]`: the Q-Filters direction u per KV head;
//! - `qfilters.query_filters` `[L, Hq, D]`: u_h per query head before the GQA average;
//! - `keys.mean` `[L, Hkv, D]`: the mean μ of the post-RoPE keys per (layer, KV head, channel),
//!   for key centering (a method's `center=calib`; metadata `key_means` present; files made
//!   before it have none);
//! - `vecinfer.centered.lambda` `[L, Hkv, D]` and `vecinfer.centered.keys.d{d_s}c{C}`
//!   `[L, Hkv, C, d_s]`: λ and key codebooks trained on the centered keys k − μ, for VecInfer
//!   keys under `center=calib` (metadata `vecinfer.centered_key_presets`; files made before
//!   them have none);
//!
//! and one metadata entry, `kvpack_calibration`, a JSON object (keys sorted, so the same
//! calibration gives the same bytes): `format` ("kvpack-calibration"), `version` ([`VERSION`]),
//! the model identity (name, architecture, layers, query and KV heads, head_dim), the padded
//! P, the seed, the text's name, byte length and FNV-1a 64 hash, tokens and vectors used, the
//! presets, the k-means iterations per (layer, head), and the Q-Filters report per query head.
//! Loading a file of another format or version, or one that does not match the model (layers,
//! heads, D) or the preset asked for, is [`Error::Calibration`].

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde_json::{Value, json};

use crate::cpu::vecinfer::Preset;
use crate::error::{Error, Result};

/// The `format` string of the metadata.
pub const FORMAT: &str = "kvpack-calibration";
/// The format version this build reads and writes.
pub const VERSION: u64 = 1;
/// The metadata key holding the JSON object.
pub const META_KEY: &str = "kvpack_calibration";

/// Which model a calibration belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelIdentity {
    /// The model's display name (file stem).
    pub name: String,
    /// Its architecture (`llama`, `qwen2`).
    pub arch: String,
    /// Layers L.
    pub layers: usize,
    /// Query heads Hq.
    pub q_heads: usize,
    /// KV heads Hkv.
    pub kv_heads: usize,
    /// Head dimension D.
    pub head_dim: usize,
}

/// What the calibration ran on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The model.
    pub model: ModelIdentity,
    /// SplitMix64 seed of the k-means++ draws.
    pub seed: u64,
    /// The text's name (its file name).
    pub text_name: String,
    /// The text's length in bytes.
    pub text_bytes: usize,
    /// FNV-1a 64 of the text's bytes.
    pub text_fnv1a64: u64,
    /// Tokens run through the model.
    pub tokens: usize,
}

/// Q-Filters' orientation report of one query head (docs/contracts/qfilters.md).
#[derive(Clone, Debug, PartialEq)]
pub struct HeadReport {
    /// Layer.
    pub layer: usize,
    /// Query head.
    pub head: usize,
    /// Fraction of the rows of Q_h·v that are > 0 (v as the solver returned it).
    pub positive_fraction: f64,
    /// The majority rule's sign s (+1 when more than half of Q_h·v is > 0), the one stored.
    pub majority_sign: i32,
    /// The sign of Σ Q_h·v (the reference library's rule); 0 when the sum is exactly 0.
    pub sum_sign: i32,
    /// σ₁ / σ₂ of Q_h (how concentrated the queries are).
    pub sigma_ratio: f64,
}

impl HeadReport {
    /// The two rules disagree on this head.
    pub fn disagree(&self) -> bool {
        self.sum_sign != 0 && self.sum_sign != self.majority_sign
    }
}

/// VecInfer's tables for every layer.
#[derive(Clone, Debug, PartialEq)]
pub struct VecinferTables {
    /// λ `[L, Hkv, D]`.
    pub lambda: Vec<f32>,
    /// Key codebooks per preset, `[L, Hkv, C, d_s]`.
    pub keys: BTreeMap<(usize, usize), Vec<f32>>,
    /// Value codebooks per preset, `[L, Hkv, C, d_s]`.
    pub values: BTreeMap<(usize, usize), Vec<f32>>,
    /// Sub-vectors each codebook was trained on, per side and preset (`keys.d8c256`: n).
    pub vectors: BTreeMap<String, usize>,
    /// Lloyd iterations per codebook, `[L, Hkv]` per side and preset.
    pub iterations: BTreeMap<String, Vec<usize>>,
    /// λ and key codebooks of the centered keys k − μ (`None` in older files).
    pub centered: Option<CenteredKeyTables>,
}

/// VecInfer's key tables trained on centered keys k − μ (μ: the calibration's `keys.mean`), for
/// VecInfer keys under key centering (`center=calib`): the store subtracts μ before the codec
/// sees a key, so λ and the codebooks must describe k − μ.
#[derive(Clone, Debug, PartialEq)]
pub struct CenteredKeyTables {
    /// λ of k − μ `[L, Hkv, D]`.
    pub lambda: Vec<f32>,
    /// Key codebooks per preset, `[L, Hkv, C, d_s]`, trained on the transformed k − μ.
    pub keys: BTreeMap<(usize, usize), Vec<f32>>,
}

/// Q-Filters' tables.
#[derive(Clone, Debug, PartialEq)]
pub struct QfilterTables {
    /// u per KV head `[L, Hkv, D]` (unit vectors).
    pub filters: Vec<f32>,
    /// u_h per query head `[L, Hq, D]` (unit vectors).
    pub query_filters: Vec<f32>,
    /// Query rows per head used for the SVD.
    pub rows: usize,
    /// One report per (layer, query head), layer-major.
    pub report: Vec<HeadReport>,
}

/// One layer's VecInfer tables for one key preset and one value preset.
#[derive(Clone, Debug, PartialEq)]
pub struct VecinferLayer {
    /// λ `[Hkv, D]`.
    pub lambda: Vec<f32>,
    /// Key codebooks `[Hkv, C, d_s]`.
    pub keys: Vec<f32>,
    /// Value codebooks `[Hkv, C, d_s]`.
    pub values: Vec<f32>,
}

/// A calibration: what it ran on and what it found.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    /// Model and text.
    pub meta: Meta,
    /// VecInfer's tables, when calibrated for it.
    pub vecinfer: Option<VecinferTables>,
    /// Q-Filters' tables, when calibrated for it.
    pub qfilters: Option<QfilterTables>,
    /// The mean of the post-RoPE keys `[L, Hkv, D]` (key centering), when computed.
    pub key_means: Option<Vec<f32>>,
}

/// FNV-1a 64 of some bytes (the text's fingerprint in the metadata).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn cal_err(path: &str, message: impl Into<String>) -> Error {
    Error::Calibration {
        path: path.to_string(),
        message: message.into(),
    }
}

fn f32_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn tag(p: (usize, usize)) -> String {
    format!("d{}c{}", p.0, p.1)
}

impl Calibration {
    /// The metadata object (keys sorted by serde_json's map).
    fn meta_json(&self) -> Value {
        let m = &self.meta;
        let mut o = json!({
            "format": FORMAT,
            "version": VERSION,
            "model": {
                "name": m.model.name, "arch": m.model.arch, "layers": m.model.layers,
                "q_heads": m.model.q_heads, "kv_heads": m.model.kv_heads,
                "head_dim": m.model.head_dim,
            },
            "padded_dim": m.model.head_dim.next_power_of_two(),
            "seed": m.seed.to_string(),
            "text": { "name": m.text_name, "bytes": m.text_bytes,
                      "fnv1a64": format!("{:016x}", m.text_fnv1a64) },
            "tokens": m.tokens,
        });
        if let Some(v) = &self.vecinfer {
            o["vecinfer"] = json!({
                "key_presets": v.keys.keys().map(|&p| tag(p)).collect::<Vec<_>>(),
                "value_presets": v.values.keys().map(|&p| tag(p)).collect::<Vec<_>>(),
                "vectors": v.vectors, "iterations": v.iterations,
            });
            if let Some(c) = &v.centered {
                o["vecinfer"]["centered_key_presets"] =
                    json!(c.keys.keys().map(|&p| tag(p)).collect::<Vec<_>>());
            }
        }
        if self.key_means.is_some() {
            o["key_means"] = json!(true);
        }
        if let Some(q) = &self.qfilters {
            o["qfilters"] = json!({
                "rows": q.rows,
                "report": q.report.iter().map(|r| json!([r.layer, r.head, r.positive_fraction,
                    r.majority_sign, r.sum_sign, r.sigma_ratio])).collect::<Vec<_>>(),
                "report_columns": ["layer", "query_head", "positive_fraction", "majority_sign",
                    "sum_sign", "sigma1_over_sigma2"],
            });
        }
        o
    }

    /// The file's bytes (deterministic: the same calibration gives the same bytes).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let m = &self.meta.model;
        let (l, h, hq, d) = (m.layers, m.kv_heads, m.q_heads, m.head_dim);
        let mut named: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        if let Some(v) = &self.vecinfer {
            named.push((
                "vecinfer.lambda".into(),
                vec![l, h, d],
                f32_bytes(&v.lambda),
            ));
            for (side, map) in [("keys", &v.keys), ("values", &v.values)] {
                for (&p, cb) in map {
                    named.push((
                        format!("vecinfer.{side}.{}", tag(p)),
                        vec![l, h, p.1, p.0],
                        f32_bytes(cb),
                    ));
                }
            }
            if let Some(c) = &v.centered {
                named.push((
                    "vecinfer.centered.lambda".into(),
                    vec![l, h, d],
                    f32_bytes(&c.lambda),
                ));
                for (&p, cb) in &c.keys {
                    named.push((
                        format!("vecinfer.centered.keys.{}", tag(p)),
                        vec![l, h, p.1, p.0],
                        f32_bytes(cb),
                    ));
                }
            }
        }
        if let Some(m) = &self.key_means {
            named.push(("keys.mean".into(), vec![l, h, d], f32_bytes(m)));
        }
        if let Some(q) = &self.qfilters {
            named.push((
                "qfilters.filters".into(),
                vec![l, h, d],
                f32_bytes(&q.filters),
            ));
            named.push((
                "qfilters.query_filters".into(),
                vec![l, hq, d],
                f32_bytes(&q.query_filters),
            ));
        }
        let views = named
            .iter()
            .map(|(n, s, b)| {
                TensorView::new(Dtype::F32, s.clone(), b)
                    .map(|v| (n.clone(), v))
                    .map_err(|e| cal_err("<memory>", format!("tensor {n}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let meta =
            std::collections::HashMap::from([(META_KEY.to_string(), self.meta_json().to_string())]);
        safetensors::serialize(views, Some(meta)).map_err(|e| cal_err("<memory>", e.to_string()))
    }

    /// Writes the file.
    pub fn write(&self, path: &Path) -> Result<()> {
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads a file (a missing file, another format or version, or malformed tensors are
    /// [`Error::Calibration`]).
    pub fn read(path: &Path) -> Result<Self> {
        let name = path.display().to_string();
        let bytes =
            std::fs::read(path).map_err(|e| cal_err(&name, format!("cannot read it: {e}")))?;
        Self::from_bytes(&bytes, &name)
    }

    /// Parses a file's bytes (`name` for messages).
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Self> {
        let err = |m: String| cal_err(name, m);
        let (_, header) = SafeTensors::read_metadata(bytes)
            .map_err(|e| err(format!("not a safetensors file: {e}")))?;
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| err(format!("not a safetensors file: {e}")))?;
        let raw = header
            .metadata()
            .as_ref()
            .and_then(|m| m.get(META_KEY))
            .ok_or_else(|| {
                err(format!(
                    "no `{META_KEY}` metadata: not a kvpack calibration"
                ))
            })?;
        let o: Value = serde_json::from_str(raw).map_err(|e| err(format!("bad metadata: {e}")))?;
        if o["format"] != FORMAT {
            return Err(err(format!("format {} is not {FORMAT}", o["format"])));
        }
        if o["version"].as_u64() != Some(VERSION) {
            return Err(err(format!(
                "format version {} (this build reads version {VERSION})",
                o["version"]
            )));
        }
        let num = |v: &Value, what: &str| -> Result<usize> {
            v.as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| err(format!("metadata `{what}` missing")))
        };
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let mo = &o["model"];
        let model = ModelIdentity {
            name: s(&mo["name"]),
            arch: s(&mo["arch"]),
            layers: num(&mo["layers"], "model.layers")?,
            q_heads: num(&mo["q_heads"], "model.q_heads")?,
            kv_heads: num(&mo["kv_heads"], "model.kv_heads")?,
            head_dim: num(&mo["head_dim"], "model.head_dim")?,
        };
        let meta = Meta {
            seed: s(&o["seed"])
                .parse()
                .map_err(|_| err("metadata `seed` missing".into()))?,
            text_name: s(&o["text"]["name"]),
            text_bytes: num(&o["text"]["bytes"], "text.bytes")?,
            text_fnv1a64: u64::from_str_radix(&s(&o["text"]["fnv1a64"]), 16)
                .map_err(|_| err("metadata `text.fnv1a64` missing".into()))?,
            tokens: num(&o["tokens"], "tokens")?,
            model,
        };
        let (l, h, hq, d) = (
            meta.model.layers,
            meta.model.kv_heads,
            meta.model.q_heads,
            meta.model.head_dim,
        );
        let tensor = |n: &str, shape: &[usize]| -> Result<Vec<f32>> {
            let t = st
                .tensor(n)
                .map_err(|_| err(format!("tensor `{n}` missing")))?;
            if t.dtype() != Dtype::F32 || t.shape() != shape {
                return Err(err(format!(
                    "tensor `{n}` is {:?} {:?}, expected F32 {shape:?}",
                    t.dtype(),
                    t.shape()
                )));
            }
            let x: Vec<f32> = t
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            if let Some(i) = x.iter().position(|v| !v.is_finite()) {
                return Err(err(format!("tensor `{n}` holds {} at {i}", x[i])));
            }
            Ok(x)
        };
        let presets = |v: &Value, what: &str| -> Result<Vec<(usize, usize)>> {
            v.as_array()
                .ok_or_else(|| err(format!("metadata `{what}` missing")))?
                .iter()
                .map(|t| {
                    let t = t.as_str().unwrap_or_default();
                    let (a, b) = t
                        .strip_prefix('d')
                        .and_then(|r| r.split_once('c'))
                        .ok_or_else(|| err(format!("bad preset `{t}`")))?;
                    let p = (a.parse(), b.parse());
                    match p {
                        (Ok(a), Ok(b)) => Ok((a, b)),
                        _ => Err(err(format!("bad preset `{t}`"))),
                    }
                })
                .collect()
        };
        let positive = |lambda: Vec<f32>| -> Result<Vec<f32>> {
            match lambda.iter().position(|&x| x <= 0.0) {
                Some(i) => Err(err(format!(
                    "λ must be positive, entry {i} is {}",
                    lambda[i]
                ))),
                None => Ok(lambda),
            }
        };
        let vecinfer = match o.get("vecinfer") {
            None => None,
            Some(v) => {
                let lambda = positive(tensor("vecinfer.lambda", &[l, h, d])?)?;
                let centered = match v.get("centered_key_presets") {
                    None => None,
                    Some(c) => {
                        let mut keys = BTreeMap::new();
                        for p in presets(c, "vecinfer.centered_key_presets")? {
                            let n = format!("vecinfer.centered.keys.{}", tag(p));
                            keys.insert(p, tensor(&n, &[l, h, p.1, p.0])?);
                        }
                        Some(CenteredKeyTables {
                            lambda: positive(tensor("vecinfer.centered.lambda", &[l, h, d])?)?,
                            keys,
                        })
                    }
                };
                let mut sides = [BTreeMap::new(), BTreeMap::new()];
                for (k, side) in ["keys", "values"].iter().enumerate() {
                    for p in presets(&v[format!("{}_presets", &side[..side.len() - 1])], side)? {
                        let cb = tensor(&format!("vecinfer.{side}.{}", tag(p)), &[l, h, p.1, p.0])?;
                        sides[k].insert(p, cb);
                    }
                }
                let [keys, values] = sides;
                Some(VecinferTables {
                    lambda,
                    keys,
                    values,
                    vectors: serde_json::from_value(v["vectors"].clone()).unwrap_or_default(),
                    iterations: serde_json::from_value(v["iterations"].clone()).unwrap_or_default(),
                    centered,
                })
            }
        };
        let qfilters = match o.get("qfilters") {
            None => None,
            Some(q) => Some(QfilterTables {
                filters: tensor("qfilters.filters", &[l, h, d])?,
                query_filters: tensor("qfilters.query_filters", &[l, hq, d])?,
                rows: num(&q["rows"], "qfilters.rows")?,
                report: q["report"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|r| HeadReport {
                                layer: r[0].as_u64().unwrap_or(0) as usize,
                                head: r[1].as_u64().unwrap_or(0) as usize,
                                positive_fraction: r[2].as_f64().unwrap_or(f64::NAN),
                                majority_sign: r[3].as_i64().unwrap_or(0) as i32,
                                sum_sign: r[4].as_i64().unwrap_or(0) as i32,
                                sigma_ratio: r[5].as_f64().unwrap_or(f64::NAN),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            }),
        };
        let key_means = match o.get("key_means") {
            None => None,
            Some(_) => Some(tensor("keys.mean", &[l, h, d])?),
        };
        Ok(Self {
            meta,
            vecinfer,
            qfilters,
            key_means,
        })
    }

    /// Layer `layer`'s key means μ `[Hkv, D]` (an error when the file has none or fewer
    /// layers).
    pub fn key_mean_layer(&self, layer: usize) -> Result<Vec<f32>> {
        let m = &self.meta.model;
        let means = self.key_means.as_ref().ok_or_else(|| {
            cal_err(
                &m.name,
                "has no key means (made before key centering: calibrate again)",
            )
        })?;
        if layer >= m.layers {
            return Err(cal_err(
                &m.name,
                format!("has {} layers, layer {layer} asked", m.layers),
            ));
        }
        let n = m.kv_heads * m.head_dim;
        Ok(means[layer * n..(layer + 1) * n].to_vec())
    }

    /// `Err` unless the file was made for a model of this shape (layers, KV heads, D).
    pub fn check_shape(&self, layers: usize, kv_heads: usize, head_dim: usize) -> Result<()> {
        let m = &self.meta.model;
        if (m.layers, m.kv_heads, m.head_dim) != (layers, kv_heads, head_dim) {
            return Err(cal_err(
                &self.meta.model.name,
                format!(
                    "made for {} ({} layers, {} KV heads, head_dim {}), used with {layers} \
                     layers, {kv_heads} KV heads, head_dim {head_dim}",
                    m.name, m.layers, m.kv_heads, m.head_dim
                ),
            ));
        }
        Ok(())
    }

    /// Layer `layer`'s VecInfer tables for a key and a value preset (an error when the file
    /// has no VecInfer tables, not that preset, or fewer layers).
    pub fn vecinfer_layer(
        &self,
        layer: usize,
        key: Preset,
        value: Preset,
    ) -> Result<VecinferLayer> {
        let name = &self.meta.model.name;
        let v = self
            .vecinfer
            .as_ref()
            .ok_or_else(|| cal_err(name, "has no VecInfer tables (calibrate --for vecinfer)"))?;
        let m = &self.meta.model;
        if layer >= m.layers {
            return Err(cal_err(
                name,
                format!("has {} layers, layer {layer} asked", m.layers),
            ));
        }
        let (h, d) = (m.kv_heads, m.head_dim);
        let pick = |map: &BTreeMap<(usize, usize), Vec<f32>>, p: Preset, side: &str| {
            let key = (p.sub_dim, p.centroids);
            let n = h * p.centroids * p.sub_dim;
            map.get(&key)
                .map(|cb| cb[layer * n..][..n].to_vec())
                .ok_or_else(|| {
                    cal_err(
                        name,
                        format!(
                            "has no {side} codebook for d_s {} C {} (it has {:?})",
                            p.sub_dim,
                            p.centroids,
                            map.keys().map(|&k| tag(k)).collect::<Vec<_>>()
                        ),
                    )
                })
        };
        Ok(VecinferLayer {
            lambda: v.lambda[layer * h * d..][..h * d].to_vec(),
            keys: pick(&v.keys, key, "key")?,
            values: pick(&v.values, value, "value")?,
        })
    }
}

impl Calibration {
    /// Layer `layer`'s centered-key tables for `preset`: λ `[Hkv, D]` and key codebooks
    /// `[Hkv, C, d_s]` trained on k − μ (an error when the file has none, not that preset, or
    /// fewer layers).
    pub fn vecinfer_centered_keys(
        &self,
        layer: usize,
        preset: Preset,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let m = &self.meta.model;
        let c = self
            .vecinfer
            .as_ref()
            .and_then(|v| v.centered.as_ref())
            .ok_or_else(|| {
                cal_err(
                    &m.name,
                    "has no VecInfer tables for centered keys (made before VecInfer key \
                     centering, or without --for vecinfer: calibrate again)",
                )
            })?;
        if layer >= m.layers {
            return Err(cal_err(
                &m.name,
                format!("has {} layers, layer {layer} asked", m.layers),
            ));
        }
        let (h, d) = (m.kv_heads, m.head_dim);
        let n = h * preset.centroids * preset.sub_dim;
        let cb = c
            .keys
            .get(&(preset.sub_dim, preset.centroids))
            .ok_or_else(|| {
                cal_err(
                    &m.name,
                    format!(
                        "has no centered key codebook for d_s {} C {} (it has {:?})",
                        preset.sub_dim,
                        preset.centroids,
                        c.keys.keys().map(|&k| tag(k)).collect::<Vec<_>>()
                    ),
                )
            })?;
        Ok((
            c.lambda[layer * h * d..][..h * d].to_vec(),
            cb[layer * n..][..n].to_vec(),
        ))
    }
}

/// [`Calibration::read`], shared: a file read once per process is handed out again while its
/// path, length and modification time are unchanged (every layer of a model reads it).
pub fn load_cached(path: &Path) -> Result<std::sync::Arc<Calibration>> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Key = (std::path::PathBuf, u64, Option<std::time::SystemTime>);
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<Calibration>>>> = OnceLock::new();
    let md = std::fs::metadata(path).map_err(|e| Error::Calibration {
        path: path.display().to_string(),
        message: format!("cannot read it: {e}"),
    })?;
    let key = (path.to_path_buf(), md.len(), md.modified().ok());
    let cache = CACHE.get_or_init(Default::default);
    if let Some(c) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(c.clone());
    }
    let c = Arc::new(Calibration::read(path)?);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, c.clone());
    Ok(c)
}
