//! The llama2.c tokenizer reader, then encode/decode of text, on any bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvpack::fuzz::tokenizer_llama2c(data));
