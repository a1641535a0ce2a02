//! The GGUF reader, its llama parameters, tensors and BPE tokenizer on any bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvpack::fuzz::gguf(data));
