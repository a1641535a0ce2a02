//! `kvpack cache save` (K and V of a safetensors file into a saved cache file, one cache
//! per layer) and `kvpack cache inspect` (what a cache file holds, as JSON), and the loading
//! half of `kvpack attend --cache` (format: `kvpack::persist`).

use std::path::Path;

use kvpack::persist::{Inspection, SavedCache};
use kvpack::{Context, KvLayer, Method, PathChoice};
use serde_json::{Value, json};

use crate::io::Tensor;
use crate::roundtrip::bytes;

/// Fills one cache of `method` per layer of `k`/`v` on `choice` and saves them to `out`
/// atomically (`input` is recorded as metadata); returns the file's inspection as JSON.
pub fn save(
    ctx: &Context,
    choice: PathChoice,
    method: &Method,
    k: &Tensor,
    v: &Tensor,
    input: &Path,
    out: &Path,
) -> Result<Value, String> {
    let err = |e: kvpack::Error| e.to_string();
    let per = k.tokens * k.heads * k.dim;
    let mut layers = Vec::with_capacity(k.layers);
    for l in 0..k.layers {
        let mut layer = method
            .layer_at(ctx, l, k.heads, k.dim, choice)
            .map_err(err)?;
        let (a, b) = (l * per, (l + 1) * per);
        layer
            .append(k.values.input(a, b), v.values.input(a, b))
            .map_err(err)?;
        layers.push(layer);
    }
    let mut total = kvpack::MemoryReport::default();
    for l in &layers {
        total.add(&l.memory());
    }
    let saved = SavedCache::of_layers(layers.iter().map(|l| &**l))
        .map_err(err)?
        .with_metadata("input", input.display().to_string())
        .with_metadata("path", layers[0].paths()[0].to_string());
    saved.save(out).map_err(err)?;
    let info = kvpack::persist::inspect(out).map_err(err)?;
    let mut s = inspection_json(&info);
    s["saved_from_path"] = json!(layers[0].paths()[0].to_string());
    s["bytes_held_before_save"] = bytes(&total.held);
    Ok(s)
}

/// `kvpack cache inspect`: the JSON of [`inspection_json`]; an error (after printing the JSON)
/// when a section's checksum does not match.
pub fn inspect(file: &Path) -> Result<Value, String> {
    let info = kvpack::persist::inspect(file).map_err(|e| e.to_string())?;
    Ok(inspection_json(&info))
}

/// Version, writer, metadata, layers (method, geometry, tokens), sections (bytes, offsets,
/// checksums and whether each matches) and `checksums_ok`.
pub fn inspection_json(info: &Inspection) -> Value {
    let layers: Vec<Value> = info
        .layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            json!({
                "layer": i,
                "index": l.index,
                "method": l.method,
                "kv_heads": l.heads,
                "dim": l.dim,
                "tokens": l.tokens,
                "quantized": { "keys": l.quantized[0], "values": l.quantized[1] },
                "settings": { "keys": l.settings[0], "values": l.settings[1] },
                "bytes": info.sections.iter().filter(|s| s.layer == i).map(|s| s.bytes).sum::<u64>(),
            })
        })
        .collect();
    let sections: Vec<Value> = info
        .sections
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "layer": s.layer,
                "side": s.side,
                "kind": s.kind,
                "offset": s.offset,
                "bytes": s.bytes,
                "crc32": format!("{:08x}", s.checksum),
                "checksum_ok": s.checksum_ok,
            })
        })
        .collect();
    let metadata: serde_json::Map<String, Value> = info
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    json!({
        "format_version": info.version,
        "writer": info.writer,
        "file_bytes": info.file_bytes,
        "checksums_ok": info.checksums_ok(),
        "metadata": metadata,
        "layers": layers,
        "sections": sections,
    })
}

/// Loads the cache file's layers on `choice` for `attend --cache`: it must hold `k`'s layers,
/// KV heads and head width, and all `k.tokens` tokens (the queries sit at the last positions).
pub fn load_for(
    ctx: &Context,
    choice: PathChoice,
    file: &Path,
    k: &Tensor,
) -> Result<(Method, Vec<Box<dyn KvLayer>>), String> {
    let saved = SavedCache::open(file).map_err(|e| e.to_string())?;
    saved
        .expect(k.layers, k.heads, k.dim, None)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if let Some((i, l)) = saved
        .layers
        .iter()
        .enumerate()
        .find(|(_, l)| l.snapshot.tokens != k.tokens)
    {
        return Err(format!(
            "{}: layer {i} holds {} tokens, the input has T = {} (the cache must hold the \
             input's tokens: the last --queries rows attend at positions T−N .. T−1)",
            file.display(),
            l.snapshot.tokens,
            k.tokens
        ));
    }
    let method = saved.layers[0].method.clone();
    let layers = saved.to_layers(ctx, choice).map_err(|e| e.to_string())?;
    Ok((method, layers))
}
