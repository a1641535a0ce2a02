//! Reading K and V from a safetensors file and writing the reconstructions.

use std::collections::HashMap;
use std::path::Path;

use half::f16;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

/// One tensor's values as stored (f16 is kept as f16: kvpack takes it directly).
pub enum Values {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

impl Values {
    pub fn dtype(&self) -> &'static str {
        match self {
            Values::F16(_) => "f16",
            Values::F32(_) => "f32",
        }
    }

    /// `[start, end)` as a kvpack input.
    pub fn input(&self, start: usize, end: usize) -> kvpack::Input<'_> {
        match self {
            Values::F16(x) => kvpack::Input::F16(&x[start..end]),
            Values::F32(x) => kvpack::Input::F32(&x[start..end]),
        }
    }

    /// Element `i` in f64, exactly as given.
    pub fn get(&self, i: usize) -> f64 {
        match self {
            Values::F16(x) => f64::from(x[i].to_f32()),
            Values::F32(x) => f64::from(x[i]),
        }
    }
}

/// A K or V tensor: its shape as given and as `[L, T, H, D]`.
pub struct Tensor {
    pub shape: Vec<usize>,
    pub layers: usize,
    pub tokens: usize,
    pub heads: usize,
    pub dim: usize,
    pub values: Values,
}

/// Reads `k` and `v` (f16 or f32, `[T, H, D]` or `[L, T, H, D]`, the same shape).
pub fn read_kv(path: &Path) -> Result<(Tensor, Tensor), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{} is not a valid safetensors file: {e}", path.display()))?;
    kv(&st, path)
}

fn kv(st: &SafeTensors<'_>, path: &Path) -> Result<(Tensor, Tensor), String> {
    let k = tensor(st, "k", path)?;
    let v = tensor(st, "v", path)?;
    if k.shape != v.shape {
        return Err(format!(
            "tensors `k` {:?} and `v` {:?} must have the same shape",
            k.shape, v.shape
        ));
    }
    Ok((k, v))
}

/// Reads `q`, `k` and `v` (f16 or f32, `[T, H, D]` or `[L, T, H, D]`; `k` and `v` the same
/// shape, `q` may have its own head count and dtype).
pub fn read_qkv(path: &Path) -> Result<(Tensor, Tensor, Tensor), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{} is not a valid safetensors file: {e}", path.display()))?;
    let q = tensor(&st, "q", path)?;
    let (k, v) = kv(&st, path)?;
    Ok((q, k, v))
}

fn tensor(st: &SafeTensors<'_>, name: &str, path: &Path) -> Result<Tensor, String> {
    let view = st.tensor(name).map_err(|_| {
        let mut names = st.names();
        names.sort();
        format!(
            "{} has no tensor `{name}` (it has: {})",
            path.display(),
            names.join(", ")
        )
    })?;
    let shape = view.shape().to_vec();
    let (layers, tokens, heads, dim) = match shape[..] {
        [t, h, d] => (1, t, h, d),
        [l, t, h, d] => (l, t, h, d),
        _ => {
            return Err(format!(
                "tensor `{name}` has shape {shape:?}; expected [T, H, D] or [L, T, H, D]"
            ));
        }
    };
    if layers == 0 || heads == 0 || dim == 0 {
        return Err(format!(
            "tensor `{name}` has shape {shape:?}; L, H and D must be positive"
        ));
    }
    let data = view.data();
    let values = match view.dtype() {
        Dtype::F16 => Values::F16(
            data.chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]))
                .collect(),
        ),
        Dtype::F32 => Values::F32(
            data.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ),
        other => {
            return Err(format!(
                "tensor `{name}` has dtype {other:?}; expected F16 or F32"
            ));
        }
    };
    Ok(Tensor {
        shape,
        layers,
        tokens,
        heads,
        dim,
        values,
    })
}

/// Writes one f32 tensor `name` with `shape`, and `metadata` in the header.
pub fn write_f32(
    path: &Path,
    name: &str,
    shape: &[usize],
    x: &[f32],
    metadata: HashMap<String, String>,
) -> Result<(), String> {
    let b: Vec<u8> = x.iter().flat_map(|x| x.to_le_bytes()).collect();
    let view =
        TensorView::new(Dtype::F32, shape.to_vec(), &b).map_err(|e| format!("internal: {e}"))?;
    safetensors::serialize_to_file([(name, view)], Some(metadata), path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Writes `k_hat` (when the keys have a reconstruction) and `v_hat` as f32 with `shape`, and
/// `metadata` in the header.
pub fn write_hat(
    path: &Path,
    shape: &[usize],
    k_hat: Option<&[f32]>,
    v_hat: &[f32],
    metadata: HashMap<String, String>,
) -> Result<(), String> {
    let k_bytes: Option<Vec<u8>> = k_hat.map(|k| k.iter().flat_map(|x| x.to_le_bytes()).collect());
    let v_bytes: Vec<u8> = v_hat.iter().flat_map(|x| x.to_le_bytes()).collect();
    let view =
        |b| TensorView::new(Dtype::F32, shape.to_vec(), b).map_err(|e| format!("internal: {e}"));
    let mut tensors = vec![("v_hat", view(&v_bytes)?)];
    if let Some(k) = &k_bytes {
        tensors.insert(0, ("k_hat", view(k)?));
    }
    safetensors::serialize_to_file(tensors, Some(metadata), path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
