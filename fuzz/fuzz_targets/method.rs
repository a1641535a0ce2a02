//! The method grammar: any string parses to an error or a method whose canonical form
//! parses back to it and builds a layer on the CPU reference.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvpack::fuzz::method(data));
