//! A deterministic replay of the fuzz corpora (`fuzz/corpus/<target>/`) and of every crash the
//! fuzzer found (`fuzz/regressions/<target>/`) through the fuzz targets' own bodies
//! (`kvpack::fuzz`): CI exercises them without nightly or libFuzzer. The seeds must still be
//! what they were made to be (a sound cache file, a loadable GGUF, ...), and the cache-file seeds
//! are rebuilt here and compared with the committed files (`KVPACK_WRITE_SEEDS=1` rewrites them
//! after a deliberate format change).
#![cfg(feature = "model")]

use std::path::{Path, PathBuf};

use kvpack::{Context, Input, Method, PathChoice, SavedCache};

fn dir(kind: &str, target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target)
}

/// Every file of `fuzz/corpus/<target>` and `fuzz/regressions/<target>`, with its bytes.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for kind in ["corpus", "regressions"] {
        let Ok(rd) = std::fs::read_dir(dir(kind, target)) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = rd.map(|e| e.unwrap().path()).collect();
        paths.sort();
        for p in paths {
            let b = std::fs::read(&p).unwrap();
            out.push((p, b));
        }
    }
    out
}

fn replay(target: &str, body: fn(&[u8])) -> usize {
    let all = inputs(target);
    assert!(!all.is_empty(), "fuzz/corpus/{target} is empty");
    for (p, b) in &all {
        let r = std::panic::catch_unwind(|| body(b));
        assert!(r.is_ok(), "{}: the fuzz body panicked", p.display());
    }
    eprintln!("{target}: {} inputs replayed", all.len());
    all.len()
}

/// The cache-file seeds: small caches of every codec in the method corpus' seeds, made from
/// fixed values.
fn cache_seeds() -> Vec<(String, Vec<u8>)> {
    let ctx = Context::cpu();
    let mut out = Vec::new();
    for (name, spec, heads, dim, tokens) in [
        ("f16", "f16:residual=2", 1, 8, 5),
        ("kivi2", "kivi:bits=2,group=4,residual=4", 2, 8, 13),
        (
            "kivi4-f32",
            "kivi:bits=4,group=4,residual=4,params=f32",
            1,
            8,
            9,
        ),
        ("mixed", "kivi:bits=3,group=4/f16:residual=4", 1, 8, 10),
        ("empty", "kivi-2", 1, 8, 0),
        (
            "evict-knorm",
            "kivi:bits=2,group=4,residual=4+knorm:budget=16,sinks=1,stride=2",
            2,
            8,
            30,
        ),
        (
            "evict-streaming",
            "f16+streaming:budget=6,sinks=1",
            1,
            8,
            11,
        ),
    ] {
        let m = Method::parse(spec).unwrap();
        let mut l = m.layer(&ctx, heads, dim, PathChoice::Cpu).unwrap();
        let n = tokens * heads * dim;
        let k: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
        let v: Vec<f32> = (0..n).map(|i| (i as f32 * 0.91).cos()).collect();
        if n > 0 {
            l.append(Input::F32(&k), Input::F32(&v)).unwrap();
        }
        let bytes = SavedCache::of_layers([&*l])
            .unwrap()
            .with_metadata("seed", name)
            .to_bytes()
            .unwrap();
        out.push((format!("seed-{name}"), bytes));
    }
    out
}

/// The seeds of `target` made by this kvpack must equal the committed files
/// (`KVPACK_WRITE_SEEDS=1` writes them); each committed seed is then handed to `sound`.
fn check_seeds(target: &str, seeds: Vec<(String, Vec<u8>)>, sound: impl Fn(&str, &[u8])) {
    let d = dir("corpus", target);
    let write = std::env::var("KVPACK_WRITE_SEEDS").is_ok_and(|v| v == "1");
    for (name, bytes) in seeds {
        let p = d.join(&name);
        if write {
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(&p, &bytes).unwrap();
        }
        let committed = std::fs::read(&p)
            .unwrap_or_else(|e| panic!("{}: {e} (KVPACK_WRITE_SEEDS=1 writes it)", p.display()));
        assert_eq!(
            committed,
            bytes,
            "{} is not what this kvpack writes",
            p.display()
        );
        sound(&name, &committed);
    }
}

#[test]
fn fuzz_corpus_cache_file() {
    // (The writer string names the kvpack version; everything else is the format's.)
    check_seeds("cache_file", cache_seeds(), |_, b| {
        SavedCache::from_bytes(b).expect("a seed is a sound cache file");
    });
    replay("cache_file", kvpack::fuzz::cache_file);
}

/// The calibration-file seeds: small calibrations made from fixed values (one with VecInfer
/// tables only, one with Q-Filters too, two layers and two KV heads, tiny presets beside a
/// method preset so that `vecinfer_layer` hands tables out).
fn calibration_seeds() -> Vec<(String, Vec<u8>)> {
    use kvpack::calib::{
        Calibration, CenteredKeyTables, HeadReport, Meta, ModelIdentity, QfilterTables,
        VecinferTables,
    };
    use std::collections::BTreeMap;
    let (l, h, hq, d) = (2, 2, 4, 8);
    let wave = |n: usize, f: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * f).sin()).collect() };
    let meta = Meta {
        model: ModelIdentity {
            name: "fuzz-seed".into(),
            arch: "llama".into(),
            layers: l,
            q_heads: hq,
            kv_heads: h,
            head_dim: d,
        },
        seed: 7,
        text_name: "seed".into(),
        text_bytes: 4,
        text_fnv1a64: kvpack::calib::file::fnv1a64(b"seed"),
        tokens: 3,
    };
    let book = |ds: usize, c: usize, f: f32| wave(l * h * c * ds, f);
    let vecinfer = VecinferTables {
        lambda: (0..l * h * d)
            .map(|i| 0.5 + (i % 5) as f32 * 0.25)
            .collect(),
        keys: BTreeMap::from([((8, 256), book(8, 256, 0.37)), ((2, 4), book(2, 4, 0.11))]),
        values: BTreeMap::from([((8, 256), book(8, 256, 0.53)), ((4, 2), book(4, 2, 0.7))]),
        vectors: BTreeMap::from([("keys".to_string(), 3)]),
        iterations: BTreeMap::from([("keys".to_string(), vec![2, 3])]),
        centered: None,
    };
    let qfilters = QfilterTables {
        filters: wave(l * h * d, 0.29),
        query_filters: wave(l * hq * d, 0.41),
        rows: 3,
        report: vec![HeadReport {
            layer: 1,
            head: 0,
            positive_fraction: 0.75,
            majority_sign: 1,
            sum_sign: -1,
            sigma_ratio: 2.5,
        }],
    };
    // With key means and the tables trained on centered keys (VecInfer under centering).
    let centered = VecinferTables {
        centered: Some(CenteredKeyTables {
            lambda: (0..l * h * d)
                .map(|i| 0.25 + (i % 3) as f32 * 0.5)
                .collect(),
            keys: BTreeMap::from([((8, 256), book(8, 256, 0.19)), ((2, 4), book(2, 4, 0.23))]),
        }),
        ..vecinfer.clone()
    };
    let mut out = Vec::new();
    for (name, v, q, mu) in [
        ("vecinfer", &vecinfer, None, None),
        ("vecinfer-qfilters", &vecinfer, Some(qfilters), None),
        (
            "vecinfer-centered",
            &centered,
            None,
            Some(wave(l * h * d, 0.31)),
        ),
    ] {
        let c = Calibration {
            meta: meta.clone(),
            vecinfer: Some(v.clone()),
            qfilters: q,
            key_means: mu,
        };
        out.push((
            format!("seed-{name}"),
            c.to_bytes().expect("a seed encodes"),
        ));
    }
    out
}

#[test]
fn fuzz_corpus_calibration() {
    check_seeds("calibration", calibration_seeds(), |name, b| {
        let c = kvpack::calib::Calibration::from_bytes(b, name)
            .expect("a seed is a sound calibration file");
        let p = kvpack::cpu::vecinfer::Preset::for_bits(1).unwrap();
        c.vecinfer_layer(1, p, p)
            .expect("a seed hands out a method preset's tables");
        if name.contains("centered") {
            c.vecinfer_centered_keys(1, p)
                .expect("a centered seed hands out centered key tables");
        }
    });
    replay("calibration", kvpack::fuzz::calibration);
}

#[test]
fn fuzz_corpus_method() {
    for (p, b) in inputs("method").iter().filter(|(p, _)| is_seed(p)) {
        let s = std::str::from_utf8(b).unwrap();
        Method::parse(s).unwrap_or_else(|e| panic!("{}: {s}: {e}", p.display()));
    }
    replay("method", kvpack::fuzz::method);
}

fn is_seed(p: &Path) -> bool {
    p.file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("seed-")
}

fn seed(target: &str, name: &str) -> Vec<u8> {
    std::fs::read(dir("corpus", target).join(format!("seed-{name}"))).unwrap()
}

#[test]
fn fuzz_corpus_gguf() {
    let f = kvpack::model::gguf::GgufFile::from_bytes(seed("gguf", "tiny-llama")).unwrap();
    f.llama_params().expect("the seed is a llama GGUF");
    kvpack::model::load::weights_from_gguf(&f).expect("the seed's weights load");
    kvpack::model::bpe::Bpe::from_gguf(&f).expect("the seed's tokenizer loads");
    replay("gguf", kvpack::fuzz::gguf);
}

#[test]
fn fuzz_corpus_llama2c() {
    kvpack::model::llama2c::parse(&seed("llama2c", "tiny")).expect("the seed loads");
    kvpack::model::llama2c::parse(&seed("llama2c", "unshared")).expect("the seed loads");
    replay("llama2c", kvpack::fuzz::llama2c);
}

#[test]
fn fuzz_corpus_tokenizer_llama2c() {
    let b = seed("tokenizer_llama2c", "empty-text");
    kvpack::model::Tokenizer::parse(&b[2..]).unwrap_or_else(|e| panic!("the seed tokenizer: {e}"));
    replay("tokenizer_llama2c", kvpack::fuzz::tokenizer_llama2c);
}

/// Found by fuzzing (gguf, out of memory): `llama.block_count` = 2,228,225 in a 4 KB file made
/// `llama_tensors` list 20 million tensors (2 GB) before looking for any; now the count is
/// refused against the tensors the file has, before any allocation.
#[test]
fn fuzz_regression_gguf_block_count() {
    let b = std::fs::read(dir("regressions", "gguf").join("oom-block-count")).unwrap();
    let f = kvpack::model::gguf::GgufFile::from_bytes(b).expect("the header parses");
    let n = f.llama_params().expect("its parameters parse").n_layers;
    assert_eq!(n, 2_228_225, "the regression input's block count");
    let e = f
        .llama_tensors()
        .expect_err("a block count the file cannot hold");
    assert!(e.to_string().contains("block_count"), "{e}");
}
