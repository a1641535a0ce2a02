//! A short fuzz run in the normal test suite, on stable Rust: every fuzz target's body
//! (`kvpack::fuzz`, the same functions cargo-fuzz runs in `fuzz/`) gets a fixed number of
//! inputs mutated from its committed corpus by a small seeded mutator (bit flips, interesting
//! bytes and words, inserts, deletes, duplicated ranges, truncation, splices of two inputs).
//! For cache files, half of the mutants get their checksums rewritten afterwards, so that the
//! mutation reaches the decoder behind them instead of stopping at the CRC check. A panic
//! fails the test and prints the seed and the input (hex) to reproduce it.
//!
//! Why not cargo-fuzz here: it needs a nightly toolchain and libFuzzer, which CI's stable
//! toolchain does not have; the long runs (`fuzz/README.md`) use it. This run is the CI's
//! short one: `KVPACK_FUZZ_ITERS` inputs per target (default 20,000: about 3 s for the GGUF
//! reader, well under a second for the others), seed from `KVPACK_SEED`.
#![cfg(feature = "model")]

mod common;

use std::path::Path;

use rand::Rng;
use rand::rngs::StdRng;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let out: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!out.is_empty(), "fuzz/corpus/{target} is empty");
    out
}

const INTERESTING_U8: [u8; 6] = [0, 1, 0x7f, 0x80, 0xfe, 0xff];
const INTERESTING_U32: [u32; 8] = [
    0,
    1,
    2,
    64,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
];

/// One to four mutations of `input` (another corpus input for splices).
fn mutate(rng: &mut StdRng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let n = b.len();
        match rng.random_range(0..9) {
            0 if n > 0 => {
                let i = rng.random_range(0..n * 8);
                b[i / 8] ^= 1 << (i % 8);
            }
            1 if n > 0 => {
                let i = rng.random_range(0..n);
                b[i] = INTERESTING_U8[rng.random_range(0..INTERESTING_U8.len())];
            }
            2 if n >= 4 => {
                let i = rng.random_range(0..=n - 4);
                let w = INTERESTING_U32[rng.random_range(0..INTERESTING_U32.len())];
                b[i..i + 4].copy_from_slice(&w.to_le_bytes());
            }
            3 if n >= 4 => {
                // A small step on a little-endian word (lengths, counts, offsets).
                let i = rng.random_range(0..=n - 4);
                let w = u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
                let d = rng.random_range(1u32..=64);
                let w = if rng.random_bool(0.5) {
                    w.wrapping_add(d)
                } else {
                    w.wrapping_sub(d)
                };
                b[i..i + 4].copy_from_slice(&w.to_le_bytes());
            }
            4 => {
                let i = rng.random_range(0..=n);
                let k = rng.random_range(1..=16);
                let bytes: Vec<u8> = (0..k).map(|_| rng.random()).collect();
                b.splice(i..i, bytes);
            }
            5 if n > 0 => {
                let i = rng.random_range(0..n);
                let k = rng.random_range(1..=(n - i).min(64));
                b.drain(i..i + k);
            }
            6 if n > 0 => {
                let i = rng.random_range(0..n);
                let k = rng.random_range(1..=(n - i).min(64));
                let part = b[i..i + k].to_vec();
                let at = rng.random_range(0..=n);
                b.splice(at..at, part);
            }
            7 if n > 0 => b.truncate(rng.random_range(0..n)),
            8 if !other.is_empty() => {
                let cut = rng.random_range(0..=n);
                let from = rng.random_range(0..other.len());
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    b
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Rewrites every section checksum the (possibly mutated) section table names and the header
/// checksum, where the table's numbers are in bounds; leaves the rest as it is.
fn fix_cache_crcs(b: &mut [u8]) {
    use kvpack::persist::format::{CRC_FIELD, ENTRY_BYTES, HEADER_BYTES, crc32, header_crc};
    let Some(sections) = u32_at(b, 36) else {
        return;
    };
    for i in 0..(sections as usize).min(4096) {
        let e = HEADER_BYTES + ENTRY_BYTES * i;
        let (Some(off), Some(len)) = (u64_at(b, e + 8), u64_at(b, e + 16)) else {
            break;
        };
        let (off, len) = (off as usize, len as usize);
        if off.checked_add(len).is_none_or(|end| end > b.len()) || e + 28 > b.len() {
            continue;
        }
        let crc = crc32(&b[off..off + len]);
        b[e + 24..e + 28].copy_from_slice(&crc.to_le_bytes());
    }
    let Some(meta) = u32_at(b, 16) else {
        return;
    };
    let end = HEADER_BYTES.saturating_add(meta as usize);
    if end <= b.len() && CRC_FIELD + 4 <= end {
        let crc = header_crc(&b[..end]);
        b[CRC_FIELD..CRC_FIELD + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

fn iterations() -> usize {
    std::env::var("KVPACK_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// `iterations()` mutated inputs through `body`; the number that the body accepted without
/// error is not known here (bodies return nothing), so the run reports how many it tried and
/// how many differed from every corpus input.
fn run(target: &str, body: fn(&[u8]), fix: Option<fn(&mut [u8])>) {
    let seeds = corpus(target);
    let mut rng = common::rng(&format!("fuzz_short {target}"));
    let n = iterations();
    let started = std::time::Instant::now();
    let mut novel = 0;
    for it in 0..n {
        let a = &seeds[rng.random_range(0..seeds.len())];
        let o = &seeds[rng.random_range(0..seeds.len())];
        let mut x = mutate(&mut rng, a, o);
        if let Some(fix) = fix.filter(|_| it % 2 == 0) {
            fix(&mut x);
        }
        novel += usize::from(!seeds.contains(&x));
        let r = std::panic::catch_unwind(|| body(&x));
        if r.is_err() {
            let hex: String = x.iter().map(|b| format!("{b:02x}")).collect();
            panic!(
                "{target}: the fuzz body panicked on input {it} ({} bytes): {hex}",
                x.len()
            );
        }
    }
    eprintln!(
        "{target}: {n} mutated inputs ({novel} unlike every corpus input), 0 panics, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        novel * 2 > n,
        "{target}: the mutator made only {novel} new inputs of {n}"
    );
}

#[test]
fn fuzz_short_cache_file() {
    run("cache_file", kvpack::fuzz::cache_file, Some(fix_cache_crcs));
}

#[test]
fn fuzz_short_calibration() {
    run("calibration", kvpack::fuzz::calibration, None);
}

#[test]
fn fuzz_short_method() {
    run("method", kvpack::fuzz::method, None);
}

#[test]
fn fuzz_short_gguf() {
    run("gguf", kvpack::fuzz::gguf, None);
}

#[test]
fn fuzz_short_llama2c() {
    run("llama2c", kvpack::fuzz::llama2c, None);
}

#[test]
fn fuzz_short_tokenizer_llama2c() {
    run("tokenizer_llama2c", kvpack::fuzz::tokenizer_llama2c, None);
}

/// The checksum repair reaches the decoder: a mutated cache file with its checksums
/// rewritten is refused for what the mutation broke, not for a checksum (or, rarely, still
/// decodes). Without the repair nearly every mutant stops at a checksum.
#[test]
fn fuzz_short_checksum_repair_reaches_the_decoder() {
    let seeds = corpus("cache_file");
    let mut rng = common::rng("fuzz_short repair");
    let (mut past, mut plain_past, n) = (0, 0, 400);
    for _ in 0..n {
        let a = &seeds[rng.random_range(0..seeds.len())];
        let mut x = mutate(&mut rng, a, a);
        let checksum = |b: &[u8]| match kvpack::SavedCache::from_bytes(b) {
            Err(e) => e.to_string().contains("checksum"),
            Ok(_) => false,
        };
        plain_past += usize::from(!checksum(&x));
        fix_cache_crcs(&mut x);
        past += usize::from(!checksum(&x));
    }
    eprintln!("past the checksums: {past} of {n} repaired, {plain_past} of {n} as mutated");
    assert!(
        past > plain_past + n / 4,
        "the repair gets {past} of {n} past the checksums, {plain_past} without it"
    );
}
