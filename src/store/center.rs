//! Key centering (`center=calib,calib=FILE` on any method): the store subtracts a fixed
//! per-(layer, KV head, channel) mean μ of the post-RoPE keys (from the calibration file,
//! `keys.mean`) from every key it is given, before the f16 rounding and before any codec sees
//! it, so the residual window and every codec store `k − μ`. Attention is unchanged in exact
//! arithmetic: every key of a query's softmax moves by the same ⟨q, μ⟩ (quantized and window
//! tokens alike), which softmax ignores; what changes is that a codec's range no longer spans
//! the offset (Qwen2.5's key biases put −354 on one channel of layer 0). Reconstructions add μ
//! back. Host appends only (a GPU-input append under centering is [`Error::Config`]).

use std::path::PathBuf;
use std::sync::Arc;

use crate::calib::Calibration;
use crate::error::{Error, Result};
use crate::store::Geometry;

/// The centering of a method: where μ comes from.
#[derive(Clone, Debug)]
pub struct Center {
    /// The calibration file.
    pub calib_path: PathBuf,
    /// Its contents (with key means).
    pub calib: Arc<Calibration>,
}

impl Center {
    /// Reads the calibration at `path` (shared per process) and checks it has key means.
    pub fn load(path: &str) -> Result<Self> {
        let calib_path = PathBuf::from(path);
        let calib = crate::calib::file::load_cached(&calib_path)?;
        if calib.key_means.is_none() {
            return Err(Error::Calibration {
                path: path.to_string(),
                message: "has no key means (`keys.mean`, made by `kvpack calibrate` since key \
                          centering: calibrate again)"
                    .into(),
            });
        }
        Ok(Self { calib_path, calib })
    }

    /// μ `[H·D]` of model layer `index` for a layer of geometry `g` (a calibration of another
    /// shape, or with fewer layers, is [`Error::Calibration`]).
    pub fn mean(&self, index: usize, g: Geometry) -> Result<Vec<f32>> {
        let m = &self.calib.meta.model;
        if (m.kv_heads, m.head_dim) != (g.heads, g.dim) || index >= m.layers {
            return Err(Error::Calibration {
                path: self.calib_path.display().to_string(),
                message: format!(
                    "key means made for {} ({} layers, {} KV heads, head_dim {}), used for \
                     layer {index} with {} KV heads of {}",
                    m.name, m.layers, m.kv_heads, m.head_dim, g.heads, g.dim
                ),
            });
        }
        self.calib.key_mean_layer(index)
    }
}

/// `rows` `[n][H·D]` minus μ (f32).
pub fn subtract(rows: &[f32], mu: &[f32]) -> Vec<f32> {
    rows.chunks_exact(mu.len())
        .flat_map(|r| r.iter().zip(mu).map(|(x, m)| x - m))
        .collect()
}

/// Adds μ back to reconstructed rows `[n][H·D]` in place.
pub fn add_back(rows: &mut [f32], mu: &[f32]) {
    for r in rows.chunks_exact_mut(mu.len()) {
        for (x, m) in r.iter_mut().zip(mu) {
            *x += m;
        }
    }
}
