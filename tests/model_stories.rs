//! stories260K (llama2.c's tiny TinyStories model, ../shared/models/stories260K/) end to end:
//! greedy generation reproduces llama2.c's published sample, perplexity on a held-out story
//! matches the float32 reference (3.388), compressed caches' perplexities are within stated
//! bands of f16's (`HELDOUT_BANDS`), and the GPU path agrees with the CPU.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use kvpack::model::{self, Sampler, Session, Tokenizer, Weights};
use kvpack::{Context, Method, PathChoice};

use common::quality;

/// The first 200 steps of llama2.c's greedy sample from stories260K (`test_all.py`'s
/// `expected_stdout`, also the beginning of the llama2.c README's sample).
const EXPECTED: &str = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. She said, \"I want to play with your ball, but I can't find it.\"\nLily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what to do.\"\nLily didn't want to help her mom, so she";

/// Reference perplexity on story_heldout.txt (float32 numpy forward following run.c).
const HELDOUT_PPL: f64 = 3.388;

/// `../shared/models/stories260K/`, or `None` after a visible skip (a failure when
/// `KVPACK_REQUIRE_SHARED=1`).
fn model_dir(test: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/models/stories260K");
    if p.join("stories260K.bin").exists() && p.join("tok512.bin").exists() {
        return Some(p);
    }
    let msg = format!(
        "SKIP {test} because {} is absent (it exists in CI)",
        p.display()
    );
    if std::env::var("KVPACK_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_SHARED=1 forbids skips)");
    }
    eprintln!("{msg}");
    None
}

fn load(dir: &std::path::Path) -> (Arc<Weights>, Tokenizer) {
    let w = model::llama2c::load(dir.join("stories260K.bin")).expect("load stories260K.bin");
    let tok = Tokenizer::load(dir.join("tok512.bin")).expect("load tok512.bin");
    assert_eq!(tok.vocab_size(), w.config.vocab);
    (Arc::new(w), tok)
}

fn heldout_ids(dir: &std::path::Path, tok: &Tokenizer) -> Vec<u32> {
    let text = std::fs::read_to_string(dir.join("story_heldout.txt")).expect("heldout text");
    let ids = tok.encode(&text, true, false);
    assert_eq!(ids.len(), 153, "153 ids including BOS");
    ids
}

fn ppl(w: &Arc<Weights>, ctx: &Context, method: &str, path: PathChoice, ids: &[u32]) -> f64 {
    let m = Method::parse(method).unwrap();
    let mut s = Session::new(w.clone(), ctx, m, path).unwrap();
    let t0 = std::time::Instant::now();
    let (p, nll) = model::perplexity(&mut s, ids).unwrap();
    let mem = s.memory();
    eprintln!(
        "stories260K {method:>12} on {path}: perplexity {p:.4} (mean NLL {nll:.4}), {:.1} tok/s, KV {} bytes held, ratio vs f16 {:.2}",
        (ids.len() - 1) as f64 / t0.elapsed().as_secs_f64(),
        mem.held.total(),
        mem.ratio().unwrap_or(f64::NAN)
    );
    p
}

#[test]
fn stories_config_and_tokenizer() {
    let Some(dir) = model_dir("stories_config_and_tokenizer") else {
        return;
    };
    let (w, tok) = load(&dir);
    let c = &w.config;
    assert_eq!(
        (
            c.dim, c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim, c.vocab, c.max_seq
        ),
        (64, 172, 5, 8, 4, 8, 512, 512)
    );
    assert!(w.tied());
    // Round trip through run.c's encoding and decoding.
    let text = "One day, Tim saw a big red kite! \"Hi,\" he said.\nZ\u{e9}bra \u{1F600} ok";
    let ids = tok.encode(text, true, false);
    assert_eq!(ids[0], 1);
    assert_eq!(tok.decode(&ids), text);
    // Byte fallback: a character outside the vocabulary becomes its UTF-8 bytes + 3.
    let emoji = tok.encode("\u{1F600}", false, false);
    assert!(emoji.ends_with(&[0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3]));
}

#[test]
fn stories_greedy_sample_f16_cpu() {
    let Some(dir) = model_dir("stories_greedy_sample_f16_cpu") else {
        return;
    };
    let (w, tok) = load(&dir);
    let ctx = Context::cpu();
    let prompt = tok.encode("Once upon a time", true, false);
    let mut s = Session::new(w.clone(), &ctx, Method::f16(), PathChoice::Cpu).unwrap();
    let t0 = std::time::Instant::now();
    let new = s
        .generate(&prompt, 199, &[1], &mut Sampler::greedy(), |_| {})
        .unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let seq: Vec<u32> = [prompt.clone(), new].concat();
    eprintln!(
        "greedy: {} tokens ({:.0} tok/s): {:?}",
        seq.len() - 1,
        (seq.len() - prompt.len()) as f64 / secs,
        tok.decode(&seq)
    );
    // The first 40 tokens after BOS (prompt included) reproduce the published sample.
    let first40 = tok.decode(&seq[..41]);
    assert!(
        first40.len() > 100 && EXPECTED.starts_with(&first40),
        "first 40 tokens {first40:?} are not a prefix of the published sample"
    );
    // Same tokens as llama2.c's own encoding of that text.
    let expected_ids = tok.encode(EXPECTED, true, false);
    assert_eq!(&seq[..41], &expected_ids[..41]);
    // From BOS alone (empty prompt) the model writes the same story.
    let mut s = Session::new(w, &ctx, Method::f16(), PathChoice::Cpu).unwrap();
    let alone = s
        .generate(&[1], 40, &[1], &mut Sampler::greedy(), |_| {})
        .unwrap();
    assert_eq!(&alone[..], &expected_ids[1..41]);
    // The whole 200-step sample, when the f16 cache does not tip a near tie.
    let full = tok.decode(&seq);
    if full.starts_with(EXPECTED) || EXPECTED.starts_with(&full) {
        eprintln!("greedy: the 200 steps of test_all.py's expected_stdout all match");
    } else {
        eprintln!("greedy: diverges from test_all.py's expected_stdout after 40 tokens");
    }
}

#[test]
fn stories_perplexity_f16_and_kivi_cpu() {
    let Some(dir) = model_dir("stories_perplexity_f16_and_kivi_cpu") else {
        return;
    };
    let (w, tok) = load(&dir);
    let ids = heldout_ids(&dir, &tok);
    let ctx = Context::cpu();
    let f16 = ppl(&w, &ctx, "f16", PathChoice::Cpu, &ids);
    assert!(
        (f16 - HELDOUT_PPL).abs() <= 0.01,
        "f16 perplexity {f16} vs reference {HELDOUT_PPL}"
    );
    // The same through chunked prefill (one append and attention per layer for all tokens).
    let mut s = Session::new(w.clone(), &ctx, Method::f16(), PathChoice::Cpu).unwrap();
    let logits = s.forward_chunk(&ids[..ids.len() - 1]).unwrap();
    let v = w.config.vocab;
    let nll: f64 = ids[1..]
        .iter()
        .enumerate()
        .map(|(i, &t)| -model::forward::log_prob(&logits[i * v..(i + 1) * v], t))
        .sum::<f64>()
        / (ids.len() - 1) as f64;
    assert!(
        (nll.exp() - f16).abs() <= 1e-3 * f16,
        "chunked {} vs token by token {f16}",
        nll.exp()
    );
    for band in &HELDOUT_BANDS {
        let p = ppl(&w, &ctx, band.method, PathChoice::Cpu, &ids);
        band.check("stories260K heldout", p, f16);
    }
}

/// KIVI's bands on the held-out story (`common::quality`), measured with this test on the CPU
/// reference (f16 3.3875; kivi-4 G = 32 R = 0: 3.3717, R = 32: 3.3841; kivi-2 R = 0: 3.6008,
/// R = 32: 3.4361). On 152 predictions KIVI-4 lands within half a percent of f16 on either
/// side, so its slack is absolute, as on story-512: half a point below, 0.8 point above.
/// KIVI-2's slack is half its measured excess either way (3.1 points without a window, 0.72
/// with R = 32): less excess means the codes are not at 2 bits or the tokens stayed in the
/// window, more means a reconstruction bug.
const HELDOUT_BANDS: [quality::Band; 4] = [
    quality::Band {
        method: "kivi-4-32-0",
        measured_pct: -0.466,
        below: 0.5,
        above: 0.8,
        source: "stories_perplexity_f16_and_kivi_cpu",
    },
    quality::Band {
        method: "kivi-4-32-32",
        measured_pct: -0.100,
        below: 0.5,
        above: 0.8,
        source: "stories_perplexity_f16_and_kivi_cpu",
    },
    quality::Band {
        method: "kivi-2-32-0",
        measured_pct: 6.297,
        below: 3.1,
        above: 3.1,
        source: "stories_perplexity_f16_and_kivi_cpu",
    },
    quality::Band {
        method: "kivi-2-32-32",
        measured_pct: 1.435,
        below: 0.72,
        above: 0.72,
        source: "stories_perplexity_f16_and_kivi_cpu",
    },
];

#[test]
fn stories_perplexity_gpu() {
    let Some(dir) = model_dir("stories_perplexity_gpu") else {
        return;
    };
    let gpu = match common::gpu_context() {
        Ok(c) => c,
        Err(e) => return common::skip("stories_perplexity_gpu", &e),
    };
    let (w, tok) = load(&dir);
    let ids = heldout_ids(&dir, &tok);
    let cpu = ppl(&w, &Context::cpu(), "f16", PathChoice::Cpu, &ids);
    let g = ppl(&w, &gpu, "f16", PathChoice::Wgsl, &ids);
    assert!(
        (g - cpu).abs() <= 1e-3 * cpu,
        "GPU f16 perplexity {g} vs CPU {cpu}"
    );
    for method in ["kivi-4-32-32", "kivi-2-32-32"] {
        let c = ppl(&w, &Context::cpu(), method, PathChoice::Cpu, &ids);
        let p = ppl(&w, &gpu, method, PathChoice::Wgsl, &ids);
        assert!(
            (p - c).abs() <= 1e-2 * c,
            "{method}: GPU perplexity {p} vs CPU {c}"
        );
    }
}

#[test]
fn llama2c_bad_files_are_errors() {
    let mut header: Vec<u8> = [64i32, 172, 5, 8, 4, 512, 512]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    // Header only: truncated.
    let e = model::llama2c::parse(&header).unwrap_err();
    assert!(e.to_string().contains("needs"), "{e}");
    // Too short for a header.
    assert!(model::llama2c::parse(&header[..10]).is_err());
    // Nonsense sizes.
    header[..4].copy_from_slice(&(-3i32).to_le_bytes());
    assert!(model::llama2c::parse(&header).is_err());
    header[..4].copy_from_slice(&i32::MAX.to_le_bytes());
    assert!(model::llama2c::parse(&header).is_err());
    header[..4].copy_from_slice(&63i32.to_le_bytes()); // not a multiple of 8 heads
    assert!(model::llama2c::parse(&header).is_err());
    assert!(matches!(
        model::llama2c::load("/nonexistent/model.bin"),
        Err(kvpack::Error::Io { .. })
    ));
    // Tokenizer files.
    assert!(Tokenizer::parse(&[1, 0]).is_err());
    let mut t = 16i32.to_le_bytes().to_vec();
    t.extend(0.5f32.to_le_bytes());
    t.extend(100i32.to_le_bytes()); // longer than max_token_length
    assert!(Tokenizer::parse(&t).is_err());
}

#[test]
fn session_rejects_bad_tokens() {
    let Some(dir) = model_dir("session_rejects_bad_tokens") else {
        return;
    };
    let (w, _) = load(&dir);
    let mut s = Session::new(w, &Context::cpu(), Method::f16(), PathChoice::Cpu).unwrap();
    assert!(s.forward_token(512).is_err());
    assert!(s.forward_chunk(&[]).is_err());
    assert_eq!(s.pos(), 0);
    let l = s.forward_token(1).unwrap();
    assert_eq!(l.len(), 512);
    assert_eq!(s.pos(), 1);
}

/// A session saved after a prefill resumes from the file with identical next-token logits
/// (CPU → CPU and GPU → GPU bit for bit over 8 greedy steps; GPU → CPU within 1e-3 of the
/// logits' scale); a file of another model or a damaged file is a typed error.
#[test]
fn stories_session_save_and_resume() {
    let Some(dir) = model_dir("stories_session_save_and_resume") else {
        return;
    };
    let (w, tok) = load(&dir);
    let prompt = tok.encode("Once upon a time, there was a little girl", true, false);
    let file = std::env::temp_dir().join(format!("kvpack-session-{}.kvc", std::process::id()));
    let mut targets = vec![(Context::cpu(), PathChoice::Cpu)];
    match common::gpu_context() {
        Ok(c) => targets.push((c, PathChoice::Wgsl)),
        Err(e) => common::skip("stories_session_save_and_resume[wgsl]", &e),
    }
    for (ctx, path) in &targets {
        for spec in ["kivi-2-32-32", "f16"] {
            let m = Method::parse(spec).unwrap();
            let mut a = Session::new(w.clone(), ctx, m, *path).unwrap();
            let mut next = model::forward::argmax(&a.prefill(&prompt).unwrap());
            a.save(&file).expect("save");
            let mut b = Session::resume(w.clone(), ctx, &file, *path).expect("resume");
            assert_eq!(b.pos(), prompt.len());
            let mut cpu = Session::resume(w.clone(), &Context::cpu(), &file, PathChoice::Cpu)
                .expect("resume on cpu");
            for step in 0..8 {
                let la = a.forward_token(next).unwrap();
                let lb = b.forward_token(next).unwrap();
                let lc = cpu.forward_token(next).unwrap();
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&la), bits(&lb), "{spec} on {path}: step {step}");
                let scale = la.iter().fold(0f32, |m, x| m.max(x.abs()));
                let worst = la
                    .iter()
                    .zip(&lc)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0f32, f32::max);
                assert!(
                    worst <= 1e-3 * scale,
                    "{spec} saved on {path}, resumed on cpu: step {step}: {worst} vs scale {scale}"
                );
                next = model::forward::argmax(&la);
            }
        }
    }
    // Another model of the same shape (one embedding value changed) is refused by name.
    let mut other = (*w).clone();
    other.token_embedding[7] += 1.0;
    match Session::resume(Arc::new(other), &Context::cpu(), &file, PathChoice::Cpu) {
        Err(kvpack::Error::CacheFile { problem, .. }) => {
            assert!(problem.to_string().contains("fingerprint"), "{problem}")
        }
        r => panic!("another model: {r:?}"),
    }
    // A damaged file is a typed error.
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    match Session::resume(w.clone(), &Context::cpu(), &file, PathChoice::Cpu) {
        Err(kvpack::Error::CacheFile { .. }) => {}
        r => panic!("damaged file: {r:?}"),
    }
    std::fs::remove_file(&file).ok();
}
