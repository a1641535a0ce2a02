//! The calibration-file reader: any bytes are an error or a calibration with finite tables
//! whose encoding round-trips and whose per-layer VecInfer tables have the layout's lengths.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kvpack::fuzz::calibration(data));
