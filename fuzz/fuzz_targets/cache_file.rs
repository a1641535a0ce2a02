//! The cache-file reader: any bytes are a typed error or a cache whose re-encoding is the
//! same bytes and whose layers build on the CPU reference.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvpack::fuzz::cache_file(data));
