//! The bodies of the fuzz targets (`fuzz/`, cargo-fuzz) as library functions, so that the
//! normal test suite replays the committed corpora through exactly what the fuzzer ran
//! (`tests/fuzz_corpus.rs`, no nightly toolchain needed). Each takes arbitrary bytes and
//! panics only when a property of kvpack is broken: a reader panicking or accepting bytes it
//! then mishandles. Not part of the stable API.
//!
//! **Unstable.** This module is kvpack's machinery, public so that its tests, benches and tools
//! can drive single kernels; it is not part of the supported API and may change in any release
//! (the supported surface is what `kvpack`'s crate root re-exports).
#![doc(hidden)]

use crate::context::{Context, PathChoice};
use crate::method::Method;
use crate::persist::SavedCache;

/// The cache-file reader: an error, or a cache whose re-encoding is the same bytes (where this
/// kvpack wrote it: its writer string and the format version it writes for that content; a
/// version-2 header on a file without version-2 features is re-encoded as version 1) and whose
/// layers build on the CPU reference holding the same words; [`crate::persist::inspect_bytes`]
/// agrees on what is sound.
pub fn cache_file(data: &[u8]) {
    let inspected = crate::persist::inspect_bytes(data);
    match SavedCache::from_bytes(data) {
        Err(_) => {
            if let Ok(i) = inspected {
                assert!(
                    !i.checksums_ok() || data.len() as u64 == i.file_bytes,
                    "inspect found a sound file that decode refused"
                );
            }
        }
        Ok(cache) => {
            let i = inspected.expect("a file that decodes inspects");
            assert!(i.checksums_ok());
            let again = cache.to_bytes().expect("a decoded cache encodes");
            let ours = i.writer == format!("kvpack {}", env!("CARGO_PKG_VERSION"))
                && i.version == crate::persist::written_version(&cache);
            if ours {
                assert_eq!(again, data, "re-encoding a decoded file changes its bytes");
            } else {
                // Written by another kvpack (the writer string is free-form, and re-encoding
                // names this one), or under a higher format version than its content needs:
                // everything else must survive the round trip.
                let back = SavedCache::from_bytes(&again).expect("a re-encoded file decodes");
                assert_eq!(back.to_bytes().expect("encodes"), again);
                assert_eq!(back.metadata, cache.metadata);
                for (a, b) in back.layers.iter().zip(&cache.layers) {
                    assert_eq!((&a.snapshot, &a.eviction), (&b.snapshot, &b.eviction));
                }
            }
            let layers = cache
                .to_layers(&Context::cpu(), PathChoice::Cpu)
                .expect("a decoded cache builds layers");
            for (l, saved) in layers.iter().zip(&cache.layers) {
                assert_eq!(l.snapshot().expect("snapshot"), saved.snapshot);
                assert_eq!(l.eviction_state().expect("state"), saved.eviction);
            }
        }
    }
}

/// The method grammar: an error, or a method whose canonical form parses back to it and
/// builds (or refuses with an error) a small layer on the CPU reference.
pub fn method(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(m) = Method::parse(text) {
        let canon = m.to_string();
        let back = Method::parse(&canon).expect("a canonical spec parses");
        assert_eq!(back, m, "{text:?} -> {canon:?} parses to another method");
        assert_eq!(back.to_string(), canon);
        let _ = m.layer(&Context::cpu(), 2, 32, PathChoice::Cpu);
    }
}

/// The GGUF reader: an error, or a file whose metadata, tensors (bytes and dequantization),
/// llama parameters, weights and BPE tokenizer are each an error or a value.
#[cfg(feature = "model")]
pub fn gguf(data: &[u8]) {
    use crate::model::gguf::GgufFile;
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    for info in file.tensors().to_vec() {
        if file.tensor_bytes(&info).is_ok() {
            let _ = file.dequantize(&info.name);
        }
    }
    let _ = file.llama_params();
    let _ = crate::model::load::weights_from_gguf(&file);
    if let Ok(bpe) = crate::model::bpe::Bpe::from_gguf(&file) {
        let ids = bpe.encode("Hello, world! 123 héllo\n\n  x");
        let _ = bpe.decode(&ids);
    }
}

/// The llama2.c checkpoint reader: an error or weights.
#[cfg(feature = "model")]
pub fn llama2c(data: &[u8]) {
    let _ = crate::model::llama2c::parse(data);
}

/// The llama2.c tokenizer reader: an error, or a tokenizer that encodes text (the input's
/// tail as text, and a fixed sentence) and decodes the ids.
#[cfg(feature = "model")]
pub fn tokenizer_llama2c(data: &[u8]) {
    // The first two bytes (u16 LE) are the tokenizer's length; the rest after it is text.
    if data.len() < 2 {
        return;
    }
    let (len, rest) = data.split_at(2);
    let cut = (u16::from_le_bytes([len[0], len[1]]) as usize).min(rest.len());
    let (file, text) = rest.split_at(cut);
    let Ok(tok) = crate::model::Tokenizer::parse(file) else {
        return;
    };
    for t in [
        String::from_utf8_lossy(text).into_owned(),
        "Once upon a time".into(),
    ] {
        let ids = tok.encode(&t, true, true);
        let _ = tok.decode(&ids);
    }
}

/// The calibration-file reader ([`crate::calib::Calibration::from_bytes`]): an error, or a
/// calibration whose tables are finite (λ positive) and whose encoding parses back to the same
/// bytes; its shape check and every layer's VecInfer tables (each preset the file holds, and
/// the method presets) are values or typed errors, and the tables a layer hands out have the
/// lengths the layout says.
pub fn calibration(data: &[u8]) {
    use crate::calib::Calibration;
    use crate::cpu::vecinfer::Preset;
    let Ok(c) = Calibration::from_bytes(data, "fuzz input") else {
        return;
    };
    let bytes = c.to_bytes().expect("a parsed calibration encodes");
    let again = Calibration::from_bytes(&bytes, "its encoding").expect("its encoding parses");
    assert_eq!(
        again.to_bytes().expect("encodes"),
        bytes,
        "a calibration's encoding does not round-trip"
    );
    let m = &c.meta.model;
    c.check_shape(m.layers, m.kv_heads, m.head_dim)
        .expect("a calibration fits its own shape");
    let Some(v) = &c.vecinfer else {
        return;
    };
    assert!(v.lambda.iter().all(|&x| x.is_finite() && x > 0.0), "λ");
    let mut presets: Vec<(usize, usize)> = v.keys.keys().chain(v.values.keys()).copied().collect();
    presets.extend(v.centered.iter().flat_map(|c| c.keys.keys().copied()));
    presets.extend([(8, 256), (4, 256)]);
    for &(ds, cs) in &presets {
        let Ok(p) = Preset::new(ds, cs) else {
            continue;
        };
        // Every layer the file has and the one past it (a typed error).
        for layer in [0, m.layers.saturating_sub(1), m.layers] {
            if let Ok(t) = c.vecinfer_layer(layer, p, p) {
                assert!(layer < m.layers, "layer {layer} of {} handed out", m.layers);
                assert_eq!(t.lambda.len(), m.kv_heads * m.head_dim, "λ of one layer");
                for cb in [&t.keys, &t.values] {
                    assert_eq!(cb.len(), m.kv_heads * ds * cs, "a codebook of one layer");
                    assert!(cb.iter().all(|x| x.is_finite()));
                }
            }
            if let Ok((lambda, cb)) = c.vecinfer_centered_keys(layer, p) {
                assert!(layer < m.layers, "centered layer {layer} of {}", m.layers);
                assert_eq!(lambda.len(), m.kv_heads * m.head_dim, "centered λ");
                assert!(
                    lambda.iter().all(|&x| x.is_finite() && x > 0.0),
                    "centered λ"
                );
                assert_eq!(cb.len(), m.kv_heads * ds * cs, "a centered codebook");
                assert!(cb.iter().all(|x| x.is_finite()));
            }
        }
    }
}
