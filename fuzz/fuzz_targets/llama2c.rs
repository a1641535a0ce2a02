//! The llama2.c checkpoint reader on any bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvpack::fuzz::llama2c(data));
