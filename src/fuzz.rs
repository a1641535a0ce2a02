//! The bodies of the fuzz targets (`fuzz/`, cargo-fuzz) as library functions, so that the
//! normal test suite replays the committed corpora through exactly what the fuzzer ran
//! (`tests/fuzz_corpus.rs`, no nightly toolchain needed). Each takes arbitrary bytes and
//! panics only when a property of kvpack is broken: a reader panicking or accepting bytes it
//! then mishandles. Not part of the stable API.
#![doc(hidden)]

use crate::context::{Context, PathChoice};
use crate::method::Method;
use crate::persist::SavedCache;

/// The cache-file reader: an error, or a cache whose re-encoding is the same bytes and whose
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
            assert_eq!(again, data, "re-encoding a decoded file changes its bytes");
            let layers = cache
                .to_layers(&Context::cpu(), PathChoice::Cpu)
                .expect("a decoded cache builds layers");
            for (l, saved) in layers.iter().zip(&cache.layers) {
                assert_eq!(l.snapshot().expect("snapshot"), saved.snapshot);
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
