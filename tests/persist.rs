//! Saving and loading caches (src/persist/): one round-trip body per (codec × path)
//! (`codec_tests!`, so a codec added there is covered here), real SmolLM2 tensors, the
//! corruption table, every flipped bit and every truncation of a small file, and atomic
//! writes.
//!
//! - same path: the loaded layer's stored words equal the saved layer's, attention is
//!   bit-identical, and appends continue bit-identically on both;
//! - another path: a cache saved on a GPU path loads on the CPU reference with the same words
//!   and attends within the spec's bound (rel L2 ≤ 1e-4 per row, spec/attention.md);
//! - a damaged file is a typed [`CacheFileError`] naming what is wrong, never a panic or a
//!   cache with other words.

mod common;

use common::Target;
use kvpack::persist::{CacheFileError, inspect_bytes, with_write_failure_after};
use kvpack::{AttendOptions, Context, Error, Input, KvLayer, Method, PathChoice, SavedCache};

const H: usize = 2;
const HQ: usize = 4;
const D: usize = 40;

/// A unique path in the system's temporary folder (the file is not created).
fn temp_path(name: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "kvpack-persist-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join("cache.kvc")
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn append(l: &mut dyn KvLayer, k: &[f32], v: &[f32]) {
    l.append(Input::F32(k), Input::F32(v)).expect("append");
}

fn persist_round_trip(t: &Target, spec: &str) {
    let mut rng = common::rng("persist_round_trip");
    let method = common::parse_method(spec, H, D).expect("method");
    let row = H * D;
    // 173 tokens (whole blocks and a partial window) then 61 more after loading.
    let (n, more, tq) = (173, 61, 3);
    let (q, k, v) = common::random_qkv(&mut rng, n + more, tq, HQ, H, D);
    let mut orig = method.layer(t.ctx(), H, D, t.path()).expect("layer");
    append(&mut *orig, &k[..100 * row], &v[..100 * row]);
    append(&mut *orig, &k[100 * row..n * row], &v[100 * row..n * row]);

    let saved = SavedCache::of_layers([&*orig])
        .expect("of_layers")
        .with_metadata("test", "persist_round_trip");
    let bytes = saved.to_bytes().expect("to_bytes");
    let file = temp_path("round-trip");
    saved.save(&file).expect("save");
    assert_eq!(
        std::fs::read(&file).expect("read"),
        bytes,
        "save == to_bytes"
    );
    let back = SavedCache::open(&file).expect("open");
    assert_eq!(back.metadata("test"), Some("persist_round_trip"));
    assert_eq!(
        back.to_bytes().expect("re-encode"),
        bytes,
        "re-encoding is identical"
    );
    let info = inspect_bytes(&bytes).expect("inspect");
    assert!(info.checksums_ok());
    assert_eq!(info.layers[0].tokens, n);
    assert!(
        info.sections.iter().all(|s| s.offset % 64 == 0),
        "sections aligned"
    );

    // Same path: the same words, bit-identical attention.
    let mut loaded = back.to_layers(t.ctx(), t.path()).expect("load").remove(0);
    let want = orig.snapshot().expect("snapshot");
    assert_eq!(
        loaded.snapshot().expect("snapshot"),
        want,
        "{} {spec}",
        t.name()
    );
    assert_eq!(loaded.len(), n);
    assert_eq!(loaded.method(), orig.method());
    let opts = AttendOptions::default();
    let a = orig.attend(&q, HQ, &opts).expect("attend");
    let b = loaded.attend(&q, HQ, &opts).expect("attend loaded");
    assert_eq!(
        bits(&a),
        bits(&b),
        "{} {spec}: attention after load",
        t.name()
    );

    // The CPU reference loads what any path saved and attends within the spec's bound.
    let cpu = back
        .to_layers(&Context::cpu(), PathChoice::Cpu)
        .expect("load on cpu")
        .remove(0);
    assert_eq!(cpu.snapshot().expect("snapshot"), want);
    let c = cpu.attend(&q, HQ, &opts).expect("attend cpu");
    let err = common::rel_l2_rows(&c, &a, D);
    let bound = common::gpu_attend_bound(t, &*orig, "persist_round_trip");
    assert!(
        err <= bound,
        "{} {spec}: cpu after load, rel L2 {err:e} (bound {bound:e})",
        t.name()
    );

    // Appends continue from where the saved cache stopped, on both.
    for l in [&mut orig, &mut loaded] {
        append(&mut **l, &k[n * row..], &v[n * row..]);
    }
    let after = orig.snapshot().expect("snapshot");
    assert_eq!(loaded.snapshot().expect("snapshot"), after);
    let a = orig.attend(&q, HQ, &opts).expect("attend");
    let b = loaded.attend(&q, HQ, &opts).expect("attend loaded");
    assert_eq!(
        bits(&a),
        bits(&b),
        "{} {spec}: attention after appends",
        t.name()
    );
    std::fs::remove_dir_all(file.parent().unwrap()).ok();
}
codec_tests!(persist_round_trip);

/// An empty cache and one shorter than its window round-trip too.
fn persist_short_caches(t: &Target, spec: &str) {
    let method = common::parse_method(spec, H, D).expect("method");
    let mut rng = common::rng("persist_short_caches");
    let (_, k, v) = common::random_qkv(&mut rng, 5, 1, HQ, H, D);
    for n in [0, 1, 5] {
        let mut l = method.layer(t.ctx(), H, D, t.path()).expect("layer");
        if n > 0 {
            append(&mut *l, &k[..n * H * D], &v[..n * H * D]);
        }
        let bytes = SavedCache::of_layers([&*l])
            .and_then(|s| s.to_bytes())
            .expect("save");
        let back = SavedCache::from_bytes(&bytes).expect("load");
        let m = back.to_layers(t.ctx(), t.path()).expect("layers").remove(0);
        assert_eq!(m.snapshot().unwrap(), l.snapshot().unwrap(), "{n} tokens");
    }
}
codec_tests!(persist_short_caches);

/// SmolLM2-135M's real K/V (layers 0, 10, 20 of story-512): a multi-layer file saved on this
/// path; the same path attends the real queries bit-identically, the CPU within 1e-4.
fn persist_smollm2(t: &Target) {
    let Some(path) = common::shared_fixture("story-512.safetensors", "persist_smollm2") else {
        return;
    };
    let (shape, k) = common::load_f16(&path, "k");
    let (_, v) = common::load_f16(&path, "v");
    let (qshape, q) = common::load_f16(&path, "q");
    let (tokens, hkv, d, hq) = (shape[1], shape[2], shape[3], qshape[2]);
    let method = Method::parse("kivi:bits=2,group=32,residual=128").expect("method");
    let per = tokens * hkv * d;
    let mut layers = Vec::new();
    for l in [0, 10, 20] {
        let mut layer = method.layer(t.ctx(), hkv, d, t.path()).expect("layer");
        let (kl, vl) = (&k[l * per..(l + 1) * per], &v[l * per..(l + 1) * per]);
        layer
            .append(Input::F16(kl), Input::F16(vl))
            .expect("append");
        layers.push(layer);
    }
    let file = temp_path("smollm2");
    kvpack::persist::save_layers(&file, layers.iter().map(|l| &**l)).expect("save");
    let same = kvpack::persist::load_layers(&file, t.ctx(), t.path()).expect("load");
    let cpu = kvpack::persist::load_layers(&file, &Context::cpu(), PathChoice::Cpu).expect("cpu");
    let opts = AttendOptions::default();
    let tq = 8;
    for (i, l) in [0usize, 10, 20].into_iter().enumerate() {
        let qper = tokens * hq * d;
        let ql: Vec<f32> = q[l * qper + (tokens - tq) * hq * d..(l + 1) * qper]
            .iter()
            .map(|x| x.to_f32())
            .collect();
        let a = layers[i].attend(&ql, hq, &opts).expect("attend");
        let b = same[i].attend(&ql, hq, &opts).expect("attend loaded");
        assert_eq!(bits(&a), bits(&b), "{} layer {l}", t.name());
        let c = cpu[i].attend(&ql, hq, &opts).expect("attend cpu");
        let err = common::rel_l2_rows(&c, &a, d);
        assert!(err <= 1e-4, "{} layer {l}: cpu rel L2 {err:e}", t.name());
    }
    std::fs::remove_dir_all(file.parent().unwrap()).ok();
}
parity_tests!(persist_smollm2);

// ---------------------------------------------------------------------------------------
// Corruption.

const SPEC: &str = "kivi:bits=2,group=32,residual=64";

/// A CPU file of two KIVI layers of 173 tokens (3 blocks and 77 window rows a side).
fn sample_file() -> Vec<u8> {
    let mut rng = common::rng("persist sample file");
    let method = Method::parse(SPEC).expect("method");
    let ctx = Context::cpu();
    let mut layers = Vec::new();
    for _ in 0..2 {
        let (_, k, v) = common::random_qkv(&mut rng, 173, 1, HQ, H, D);
        let mut l = method.layer(&ctx, H, D, PathChoice::Cpu).expect("layer");
        append(&mut *l, &k, &v);
        layers.push(l);
    }
    SavedCache::of_layers(layers.iter().map(|l| &**l))
        .expect("of_layers")
        .with_metadata("model", "test")
        .to_bytes()
        .expect("bytes")
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Rewrites the header checksum after an edit of the header region (so that the check
/// behind it is reached).
fn fix_header_crc(b: &mut [u8]) {
    let end = 64 + u32_at(b, 16) as usize;
    let crc = kvpack::persist::format::header_crc(&b[..end]);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
}

/// Rewrites section `i`'s checksum in the section table (and then the header's).
fn fix_section_crc(b: &mut [u8], i: usize) {
    let e = 64 + 32 * i;
    let off = u64::from_le_bytes(b[e + 8..e + 16].try_into().unwrap()) as usize;
    let len = u64::from_le_bytes(b[e + 16..e + 24].try_into().unwrap()) as usize;
    let crc = kvpack::persist::format::crc32(&b[off..off + len]);
    b[e + 24..e + 28].copy_from_slice(&crc.to_le_bytes());
    fix_header_crc(b);
}

/// Where `needle` first occurs in `hay` after `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> usize {
    from + hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{:?} in the file", String::from_utf8_lossy(needle)))
}

type Check = fn(&CacheFileError) -> bool;

struct Case {
    name: String,
    bytes: Vec<u8>,
    check: Check,
    /// Words the error's message must contain.
    names: String,
}

#[test]
fn persist_corruption_table() {
    let good = sample_file();
    let info = inspect_bytes(&good).expect("inspect");
    let n_sections = info.sections.len();
    let meta_end = 64 + u32_at(&good, 16) as usize;
    let table_end = 64 + 32 * n_sections;
    // The canonical spec as the file's records hold it.
    let canon = Method::parse(SPEC).unwrap().to_string();
    let spec_at = find(&good, canon.as_bytes(), table_end);
    let bits_at = spec_at + canon.find("bits=2").expect("bits in the spec") + "bits=".len();
    let mut cases: Vec<Case> = Vec::new();
    let mut case = |name: &str, bytes: Vec<u8>, check: Check, names: &str| {
        cases.push(Case {
            name: name.into(),
            bytes,
            check,
            names: names.into(),
        })
    };
    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        b
    };
    use CacheFileError as E;

    // Truncation at every region.
    case(
        "empty",
        vec![],
        |e| matches!(e, E::NotACacheFile { .. }),
        "not a kvpack",
    );
    case(
        "cut in the magic",
        good[..5].to_vec(),
        |e| matches!(e, E::Truncated { .. }),
        "header",
    );
    case(
        "cut in the header",
        good[..40].to_vec(),
        |e| matches!(e, E::Truncated { .. }),
        "header",
    );
    case(
        "cut in the section table",
        good[..64 + 40].to_vec(),
        |e| matches!(e, E::Truncated { .. }),
        "section table",
    );
    case(
        "cut in the layer records",
        good[..meta_end - 3].to_vec(),
        |e| matches!(e, E::Truncated { .. }),
        "layer records",
    );
    for s in info.sections.iter().filter(|s| s.bytes > 0) {
        let at = (s.offset + s.bytes / 2) as usize;
        case(
            &format!("cut in {}", s.name),
            good[..at].to_vec(),
            |e| matches!(e, E::Truncated { .. }),
            &s.name,
        );
    }
    case(
        "one byte short",
        good[..good.len() - 1].to_vec(),
        |e| matches!(e, E::Truncated { .. }),
        "truncated",
    );
    case(
        "a byte after the end",
        edit(&|b| b.push(0)),
        |e| matches!(e, E::Malformed { .. }),
        "follow the end",
    );

    // A flipped bit in every region.
    case(
        "magic",
        edit(&|b| b[3] ^= 0x20),
        |e| matches!(e, E::NotACacheFile { .. }),
        "not a kvpack",
    );
    case(
        "newer version",
        edit(&|b| b[8] = 3),
        |e| {
            matches!(
                e,
                E::NewerVersion {
                    found: 3,
                    supported: 2
                }
            )
        },
        "newer",
    );
    case(
        "version 0",
        edit(&|b| b[8] = 0),
        |e| matches!(e, E::BadVersion { found: 0 }),
        "version 0",
    );
    let header_crc = |e: &E| matches!(e, E::Checksum { what, .. } if what.starts_with("header"));
    case("flags bit", edit(&|b| b[12] ^= 1), header_crc, "checksum");
    case(
        "file_bytes bit",
        edit(&|b| b[25] ^= 4),
        header_crc,
        "checksum",
    );
    case(
        "layer count bit",
        edit(&|b| b[32] ^= 2),
        header_crc,
        "checksum",
    );
    case(
        "section table bit",
        edit(&|b| b[64 + 32 + 9] ^= 0x10),
        header_crc,
        "checksum",
    );
    case(
        "layer record bit",
        edit(&|b| b[table_end + 20] ^= 1),
        header_crc,
        "checksum",
    );
    case(
        "header checksum bit",
        edit(&|b| b[21] ^= 8),
        header_crc,
        "checksum",
    );
    for s in info.sections.iter().filter(|s| s.bytes > 0) {
        let at = (s.offset + s.bytes / 3) as usize;
        case(
            &format!("bit in {}", s.name),
            edit(&|b| b[at] ^= 0x04),
            |e| matches!(e, E::Checksum { .. }),
            &s.name,
        );
    }
    let gap = info
        .sections
        .iter()
        .find(|s| (s.offset + s.bytes) % 64 != 0)
        .map(|s| (s.offset + s.bytes) as usize)
        .expect("a section that ends before its padding");
    case(
        "padding byte",
        edit(&|b| b[gap] = 1),
        |e| matches!(e, E::Malformed { .. }),
        "padding",
    );

    // Sound checksums, wrong fields (the checks behind the checksums).
    case(
        "unknown flags",
        edit(&|b| {
            b[12] = 1;
            fix_header_crc(b)
        }),
        |e| matches!(e, E::UnknownFlags { flags: 1 }),
        "flags",
    );
    case(
        "reserved header bytes",
        edit(&|b| {
            b[50] = 7;
            fix_header_crc(b)
        }),
        |e| matches!(e, E::Malformed { .. }),
        "reserved",
    );
    case(
        "no layers",
        edit(&|b| {
            b[32..36].copy_from_slice(&0u32.to_le_bytes());
            fix_header_crc(b)
        }),
        |e| matches!(e, E::Malformed { .. }),
        "layers",
    );
    case(
        "section count",
        edit(&|b| {
            let n = u32_at(b, 36) - 1;
            b[36..40].copy_from_slice(&n.to_le_bytes());
            fix_header_crc(b)
        }),
        |e| matches!(e, E::Malformed { .. }),
        "layer records",
    );
    case(
        "file_bytes",
        edit(&|b| {
            let n = u64::from_le_bytes(b[24..32].try_into().unwrap()) + 64;
            b[24..32].copy_from_slice(&n.to_le_bytes());
            fix_header_crc(b)
        }),
        |e| matches!(e, E::Malformed { .. }),
        "file_bytes",
    );
    case(
        "section offset",
        edit(&|b| {
            let e = 64 + 32 + 8;
            let off = u64::from_le_bytes(b[e..e + 8].try_into().unwrap()) + 64;
            b[e..e + 8].copy_from_slice(&off.to_le_bytes());
            fix_header_crc(b)
        }),
        |e| matches!(e, E::Malformed { .. }),
        "belongs at",
    );
    // Wrong method: the spec says 3 bits, the codec record 2.
    case(
        "method (bits)",
        edit(&|b| {
            b[bits_at] = b'3';
            fix_header_crc(b)
        }),
        |e| matches!(e, E::Layout { layer: 0, .. }),
        "layer 0",
    );
    case(
        "unknown method",
        edit(&|b| {
            b[spec_at + 1] = b'w';
            fix_header_crc(b)
        }),
        |e| matches!(e, E::Method { layer: 0, .. }),
        "kwvi",
    );
    // Wrong geometry: the record says 3 KV heads, the streams were laid out for 2.
    case(
        "geometry (heads)",
        edit(&|b| {
            let at = spec_at - 2 - 24;
            assert_eq!(u32_at(b, at), H as u32, "heads field");
            b[at] = 3;
            fix_header_crc(b)
        }),
        |e| matches!(e, E::Layout { layer: 0, what, .. } if what.contains("streams")),
        "streams",
    );
    case(
        "residual",
        edit(&|b| {
            let at = spec_at - 2 - 16;
            assert_eq!(u32_at(b, at), 64, "residual field");
            b[at] = 32;
            fix_header_crc(b)
        }),
        |e| matches!(e, E::Layout { what, .. } if what.contains("residual")),
        "residual window",
    );
    case(
        "tokens",
        edit(&|b| {
            let at = spec_at - 2 - 8;
            assert_eq!(u32_at(b, at), 173, "tokens field");
            b[at] = 174;
            fix_header_crc(b)
        }),
        |e| matches!(e, E::Malformed { .. }),
        "residual window",
    );
    // Content: sound checksums over values no cache holds.
    let residual = info
        .sections
        .iter()
        .position(|s| s.kind == "residual" && s.bytes > 0)
        .unwrap();
    let roff = info.sections[residual].offset as usize;
    case(
        "NaN in a residual window",
        edit(&|b| {
            b[roff + 6..roff + 8].copy_from_slice(&half::f16::NAN.to_le_bytes());
            fix_section_crc(b, residual)
        }),
        |e| matches!(e, E::Content { layer: 0, .. }),
        "residual window",
    );
    let params = info
        .sections
        .iter()
        .position(|s| s.name.contains("params"))
        .unwrap();
    let poff = info.sections[params].offset as usize;
    case(
        "Inf in kivi parameters",
        edit(&|b| {
            b[poff..poff + 2].copy_from_slice(&half::f16::INFINITY.to_le_bytes());
            fix_section_crc(b, params)
        }),
        |e| matches!(e, E::Content { layer: 0, .. }),
        "parameters",
    );

    assert!(cases.len() >= 20, "{} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let got = SavedCache::from_bytes(&c.bytes);
        let msg = match &got {
            Err(Error::CacheFile { problem, .. }) if (c.check)(problem) => {
                let m = got.as_ref().unwrap_err().to_string();
                if m.contains(&c.names) {
                    eprintln!("{:<40} {m}", c.name);
                    continue;
                }
                format!("message lacks `{}`: {m}", c.names)
            }
            Err(e) => format!("wrong error: {e:?}"),
            Ok(_) => "loaded".into(),
        };
        failures.push(format!("{}: {msg}", c.name));
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!("{} corruption cases, each a typed error", cases.len());
}

/// A small file, every single-bit flip and every truncation: each an error, none a panic.
#[test]
fn persist_every_bit_and_every_cut() {
    for spec in ["f16:residual=2", "kivi:bits=2,group=4,residual=4"] {
        let method = Method::parse(spec).expect("method");
        let mut rng = common::rng("persist_every_bit");
        let (_, k, v) = common::random_qkv(&mut rng, 11, 1, 2, 1, 8);
        let mut l = method
            .layer(&Context::cpu(), 1, 8, PathChoice::Cpu)
            .expect("layer");
        append(&mut *l, &k, &v);
        let good = SavedCache::of_layers([&*l]).unwrap().to_bytes().unwrap();
        assert!(SavedCache::from_bytes(&good).is_ok());
        for i in 0..good.len() * 8 {
            let mut b = good.clone();
            b[i / 8] ^= 1 << (i % 8);
            match SavedCache::from_bytes(&b) {
                Err(Error::CacheFile { .. }) => {}
                other => panic!("{spec}: bit {i} flipped: {other:?}"),
            }
        }
        for n in 0..good.len() {
            match SavedCache::from_bytes(&good[..n]) {
                Err(Error::CacheFile { .. }) => {}
                other => panic!("{spec}: cut at {n}: {other:?}"),
            }
        }
        eprintln!(
            "{spec}: {} bytes, every bit flip and cut rejected",
            good.len()
        );
    }
}

/// A file that is sound but for another model: [`SavedCache::expect`] names the difference.
#[test]
fn persist_mismatch() {
    let saved = SavedCache::from_bytes(&sample_file()).expect("load");
    let method = Method::parse(SPEC).unwrap();
    saved.expect(2, H, D, Some(&method)).expect("fits");
    let other = Method::parse("kivi:bits=4,group=32,residual=64").unwrap();
    for (r, what) in [
        (saved.expect(3, H, D, None), "layers"),
        (saved.expect(2, H, D + 8, None), "geometry"),
        (saved.expect(2, H, D, Some(&other)), "method"),
    ] {
        match r {
            Err(Error::CacheFile { problem, .. }) => match *problem {
                CacheFileError::Mismatch { what: w, .. } => assert!(w.contains(what), "{w}"),
                other => panic!("{what}: {other:?}"),
            },
            other => panic!("{what}: {other:?}"),
        }
    }
}

/// A save that fails part-way (a full disk, simulated) leaves the old file as it was and no
/// temporary file behind; a save into a missing folder is an I/O error naming it; a file
/// opened from disk names its path in errors.
#[test]
fn persist_atomic_write() {
    let file = temp_path("atomic");
    let dir = file.parent().unwrap().to_path_buf();
    let good = SavedCache::from_bytes(&sample_file()).unwrap();
    good.save(&file).expect("save");
    let before = std::fs::read(&file).unwrap();
    let method = Method::parse("f16").unwrap();
    let mut other = method
        .layer(&Context::cpu(), H, D, PathChoice::Cpu)
        .unwrap();
    let (_, k, v) = common::random_qkv(&mut common::rng("atomic"), 300, 1, HQ, H, D);
    append(&mut *other, &k, &v);
    let other = SavedCache::of_layers([&*other]).unwrap();
    for after in [0, 100, 5000] {
        let r = with_write_failure_after(after, || other.save(&file));
        match r {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::StorageFull)
            }
            r => panic!("failure after {after} bytes: {r:?}"),
        }
        assert_eq!(std::fs::read(&file).unwrap(), before, "old file kept");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "no temporary left: {names:?}");
    }
    other.save(&file).expect("save after failures");
    assert_eq!(std::fs::read(&file).unwrap(), other.to_bytes().unwrap());

    let missing = dir.join("no-such-folder").join("x.kvc");
    match good.save(&missing) {
        Err(Error::Io { path, .. }) => assert!(path.contains("no-such-folder"), "{path}"),
        r => panic!("{r:?}"),
    }
    std::fs::write(&file, b"\x89kvpack\n\x01").unwrap();
    match SavedCache::open(&file) {
        Err(e @ Error::CacheFile { .. }) => {
            assert!(e.to_string().contains(&file.display().to_string()), "{e}")
        }
        r => panic!("{r:?}"),
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Per-layer tables (TurboQuant's signs are drawn per model layer): the file records each
/// layer's index, a loaded layer has the saved one's tables, words and attention, and a file
/// whose index was changed (checksums made sound again) is refused naming the tables.
#[test]
fn persist_layer_index() {
    let ctx = Context::cpu();
    let method = Method::parse("turboquant-mse:bits=3,residual=24").unwrap();
    let (q, k, v) = common::random_qkv(&mut common::rng("persist_layer_index"), 100, 2, HQ, H, D);
    let mut layers = Vec::new();
    for index in [0, 3] {
        let mut l = method.layer_at(&ctx, index, H, D, PathChoice::Cpu).unwrap();
        append(&mut *l, &k, &v);
        layers.push(l);
    }
    assert_ne!(
        layers[0].codec(kvpack::store::Side::Keys).tables(),
        layers[1].codec(kvpack::store::Side::Keys).tables(),
        "per-layer tables differ"
    );
    let bytes = SavedCache::of_layers(layers.iter().map(|l| &**l))
        .unwrap()
        .to_bytes()
        .unwrap();
    let back = SavedCache::from_bytes(&bytes).unwrap();
    assert_eq!(back.layers[1].index, 3);
    assert_eq!(inspect_bytes(&bytes).unwrap().layers[1].index, 3);
    let loaded = back.to_layers(&ctx, PathChoice::Cpu).unwrap();
    for (a, b) in layers.iter().zip(&loaded) {
        assert_eq!(a.index(), b.index());
        assert_eq!(a.snapshot().unwrap(), b.snapshot().unwrap());
        let side = kvpack::store::Side::Keys;
        assert_eq!(a.codec(side).tables(), b.codec(side).tables());
        let o = AttendOptions::default();
        assert_eq!(
            bits(&a.attend(&q, HQ, &o).unwrap()),
            bits(&b.attend(&q, HQ, &o).unwrap())
        );
    }
    // Layer 1's index field: 12 bytes before its tokens, after heads, dim, residual.
    let info = inspect_bytes(&bytes).unwrap();
    let table_end = 64 + 32 * info.sections.len();
    let canon = method.to_string();
    let first = find(&bytes, canon.as_bytes(), table_end);
    let second = find(&bytes, canon.as_bytes(), first + 1);
    let at = second - 2 - 12;
    assert_eq!(u32_at(&bytes, at), 3, "index field");
    let mut b = bytes.clone();
    b[at] = 4;
    fix_header_crc(&mut b);
    match SavedCache::from_bytes(&b) {
        Err(Error::CacheFile { problem, .. }) => match *problem {
            CacheFileError::Layout { layer: 1, what, .. } => {
                assert!(what.contains("tables"), "{what}")
            }
            p => panic!("{p:?}"),
        },
        r => panic!("{r:?}"),
    }
}

/// Every method in the method table (`kvpack::method::METHODS`, so a codec registered there is
/// covered without editing this file; key-only methods with f16 values), on this path: the
/// loaded layer's words and attention are bit-identical to the saved one's, appends continue
/// identically, and the CPU reference loads the file and attends exactly as the saved layer's
/// own CPU reference does.
/// Methods whose spec must name a calibration file (`calib=FILE`).
const NEEDS_CALIBRATION: &[&str] = &["vecinfer"];

fn persist_every_registered_method(t: &Target) {
    let mut rng = common::rng("persist_every_registered_method");
    let row = H * D;
    let (n, more) = (300, 45);
    let (q, k, v) = common::random_qkv(&mut rng, n + more, 2, HQ, H, D);
    for r in kvpack::method::METHODS {
        let spec = match r.sides {
            kvpack::method::Sides::Both => r.name.to_string(),
            kvpack::method::Sides::KeysOnly => format!("{}/f16", r.name),
        };
        // Methods that need a calibration file: named here, never skipped silently (their
        // round trip needs a calibration built for this geometry; not written yet).
        if NEEDS_CALIBRATION.contains(&r.name) {
            let e = Method::parse(&spec).expect_err("a calibrated method without its file");
            assert!(e.to_string().contains("calib"), "{spec}: {e}");
            eprintln!("NOT COVERED {}: {spec} needs a calibration file", t.name());
            continue;
        }
        let method = Method::parse(&spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        // Every registered method has kernels on every path (TurboQuant-Prod included): a
        // layer that cannot be built is a failure, never a skip.
        let mut a = method
            .layer_at(t.ctx(), 2, H, D, t.path())
            .unwrap_or_else(|e| panic!("{spec}: layer on {}: {e}", t.name()));
        append(&mut *a, &k[..n * row], &v[..n * row]);
        let bytes = SavedCache::of_layers([&*a]).unwrap().to_bytes().unwrap();
        let file = SavedCache::from_bytes(&bytes).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let mut b = file.to_layers(t.ctx(), t.path()).unwrap().remove(0);
        let o = AttendOptions::default();
        let name = format!("{} {spec}", t.name());
        assert_eq!(b.snapshot().unwrap(), a.snapshot().unwrap(), "{name}");
        assert_eq!(
            bits(&b.attend(&q, HQ, &o).unwrap()),
            bits(&a.attend(&q, HQ, &o).unwrap()),
            "{name}"
        );
        let cpu = file
            .to_layers(&Context::cpu(), PathChoice::Cpu)
            .unwrap()
            .remove(0);
        let want = a.attend_reference(&q, HQ, &o).unwrap();
        assert_eq!(
            bits(&cpu.attend(&q, HQ, &o).unwrap()),
            bits(&want),
            "{name}: cpu after load"
        );
        for l in [&mut a, &mut b] {
            append(&mut **l, &k[n * row..], &v[n * row..]);
        }
        assert_eq!(
            b.snapshot().unwrap(),
            a.snapshot().unwrap(),
            "{name}: after appends"
        );
        eprintln!("{name}: {} bytes, round trip exact", bytes.len());
    }
}
parity_tests!(persist_every_registered_method);
