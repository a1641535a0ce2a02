//! GGUF reading, dequantization and the GPT-2 BPE tokenizer, on hand-built files and on the real
//! SmolLM2-135M-Instruct Q4_1 GGUF (fetched by `scripts/fetch-models.sh`; see
//! ../shared/models/smollm2-135m.md), with the tokenizer checked against the fixtures' ids.

mod common;

use std::path::PathBuf;

use kvpack::Error;
use kvpack::model::bpe::{Bpe, PreTokenizer};
use kvpack::model::gguf::{self, GgmlType, GgufFile, Value, dequantize};

/// The SmolLM2 GGUF at the fetch script's default place, or `None` after a visible skip (a
/// failure when `KVPACK_REQUIRE_MODELS=1`).
fn smollm2(test: &str) -> Option<PathBuf> {
    let p = gguf::smollm2_path();
    if p.is_file() {
        return Some(p);
    }
    let msg = format!(
        "SKIP {test} because {} is absent (run scripts/fetch-models.sh)",
        p.display()
    );
    if std::env::var("KVPACK_REQUIRE_MODELS").is_ok_and(|v| v == "1") {
        panic!("{msg} (KVPACK_REQUIRE_MODELS=1 forbids skips)");
    }
    eprintln!("{msg}");
    None
}

fn open_smollm2(test: &str) -> Option<GgufFile> {
    let p = smollm2(test)?;
    Some(GgufFile::open(&p).expect("parse the SmolLM2 GGUF"))
}

// ---------------------------------------------------------------------------------------------
// A minimal GGUF writer for hand-built files.

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// A GGUF v3 file with the given metadata (already encoded: key, type, value bytes) and tensors
/// (name, dims, type id, data), aligned to 32.
fn build(kv: &[(&str, u32, Vec<u8>)], tensors: &[(&str, Vec<u64>, u32, Vec<u8>)]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    b.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (k, ty, v) in kv {
        put_str(&mut b, k);
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(v);
    }
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for (name, dims, ty, data) in tensors {
        put_str(&mut b, name);
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
        offsets.push(offset);
        offset += (data.len() as u64).div_ceil(32) * 32;
    }
    while !b.len().is_multiple_of(32) {
        b.push(0);
    }
    let start = b.len();
    for ((_, _, _, data), off) in tensors.iter().zip(offsets) {
        b.resize(start + off as usize, 0);
        b.extend_from_slice(data);
    }
    b
}

fn str_val(s: &str) -> Vec<u8> {
    let mut b = Vec::new();
    put_str(&mut b, s);
    b
}

fn str_array(items: &[&str]) -> Vec<u8> {
    let mut b = 8u32.to_le_bytes().to_vec();
    b.extend_from_slice(&(items.len() as u64).to_le_bytes());
    for s in items {
        put_str(&mut b, s);
    }
    b
}

fn f16b(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_le_bytes()
}

/// A small file with every metadata value type and one tensor of each supported type.
fn sample_file() -> Vec<u8> {
    let mut nested = 9u32.to_le_bytes().to_vec(); // array of arrays of u8
    nested.extend_from_slice(&2u64.to_le_bytes());
    for row in [[1u8, 2], [3, 4]] {
        nested.extend_from_slice(&0u32.to_le_bytes());
        nested.extend_from_slice(&2u64.to_le_bytes());
        nested.extend_from_slice(&row);
    }
    let kv = vec![
        ("general.architecture", 8, str_val("llama")),
        ("v.u8", 0, vec![200]),
        ("v.i8", 1, vec![0xfe]),
        ("v.u16", 2, 60000u16.to_le_bytes().to_vec()),
        ("v.i16", 3, (-3i16).to_le_bytes().to_vec()),
        ("v.u32", 4, 7u32.to_le_bytes().to_vec()),
        ("v.i32", 5, (-7i32).to_le_bytes().to_vec()),
        ("v.f32", 6, 1.5f32.to_le_bytes().to_vec()),
        ("v.bool", 7, vec![1]),
        ("v.u64", 10, (1u64 << 40).to_le_bytes().to_vec()),
        ("v.i64", 11, (-5i64).to_le_bytes().to_vec()),
        ("v.f64", 12, 2.25f64.to_le_bytes().to_vec()),
        ("v.strs", 9, str_array(&["a", "b c", "é"])),
        ("v.nested", 9, nested),
    ];
    let f32_data: Vec<u8> = [1.0f32, -2.0, 3.5, 0.25]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let f16_data: Vec<u8> = [1.0f32, -0.5].iter().flat_map(|&x| f16b(x)).collect();
    let mut q8 = f16b(0.5).to_vec();
    q8.extend((0..32).map(|i| (i as i8 - 16) as u8));
    let mut q41 = f16b(0.25).to_vec();
    q41.extend_from_slice(&f16b(-1.0));
    q41.extend((0..16u8).map(|i| (15 - i) << 4 | i));
    let tensors = vec![
        ("t.f32", vec![2, 2], 0, f32_data),
        ("t.f16", vec![2], 1, f16_data),
        ("t.q8_0", vec![32], 8, q8),
        ("t.q4_1", vec![32, 1], 3, q41),
    ];
    build(&kv, &tensors)
}

fn is_format_error<T: std::fmt::Debug>(r: kvpack::Result<T>) -> bool {
    matches!(r, Err(Error::Format { .. }))
}

// ---------------------------------------------------------------------------------------------
// Hand-built files and blocks.

#[test]
fn metadata_of_every_type() {
    let f = GgufFile::from_bytes(sample_file()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.get("v.u8"), Some(&Value::U8(200)));
    assert_eq!(f.get("v.i8"), Some(&Value::I8(-2)));
    assert_eq!(f.get("v.u16"), Some(&Value::U16(60000)));
    assert_eq!(f.get("v.i16"), Some(&Value::I16(-3)));
    assert_eq!(f.get_u64("v.u32").unwrap(), 7);
    assert_eq!(f.get("v.i32"), Some(&Value::I32(-7)));
    assert_eq!(f.get_f64("v.f32").unwrap(), 1.5);
    assert_eq!(f.get("v.bool"), Some(&Value::Bool(true)));
    assert_eq!(f.get_u64("v.u64").unwrap(), 1 << 40);
    assert_eq!(f.get("v.i64"), Some(&Value::I64(-5)));
    assert_eq!(f.get_f64("v.f64").unwrap(), 2.25);
    assert_eq!(f.get_str_array("v.strs").unwrap(), vec!["a", "b c", "é"]);
    assert_eq!(
        f.get("v.nested"),
        Some(&Value::Array(vec![
            Value::Array(vec![Value::U8(1), Value::U8(2)]),
            Value::Array(vec![Value::U8(3), Value::U8(4)]),
        ]))
    );
    assert!(
        is_format_error(f.get_u64("v.i32")),
        "negative is not unsigned"
    );
    assert!(is_format_error(f.get_str("v.u8")));
    assert!(is_format_error(f.get_u64("missing")));
    assert_eq!(f.metadata().len(), 14);
}

#[test]
fn tensors_of_every_supported_type() {
    let f = GgufFile::from_bytes(sample_file()).unwrap();
    assert_eq!(f.tensors().len(), 4);
    let t = f.dequantize("t.f32").unwrap();
    assert_eq!(t.shape, vec![2, 2]);
    assert_eq!(t.data, vec![1.0, -2.0, 3.5, 0.25]);
    assert_eq!(f.dequantize("t.f16").unwrap().data, vec![1.0, -0.5]);
    let q8 = f.dequantize("t.q8_0").unwrap();
    assert_eq!(q8.shape, vec![32]);
    for (i, &x) in q8.data.iter().enumerate() {
        assert_eq!(x, (i as f32 - 16.0) * 0.5, "Q8_0 element {i}");
    }
    let info = f.tensor("t.q4_1").unwrap();
    assert_eq!(info.ggml_type, GgmlType::Q4_1);
    assert_eq!(info.dims, vec![32, 1]);
    assert_eq!(
        info.shape(),
        vec![1, 32],
        "row-major shape reverses ggml's ne"
    );
    assert_eq!(info.n_bytes, Some(20));
    assert_eq!(info.offset % 32, 0);
    let q41 = f.dequantize("t.q4_1").unwrap();
    for i in 0..16 {
        // byte i = (15 - i) << 4 | i: element i is the low nibble, element i + 16 the high one.
        assert_eq!(q41.data[i], i as f32 * 0.25 - 1.0, "Q4_1 element {i}");
        assert_eq!(
            q41.data[i + 16],
            (15 - i) as f32 * 0.25 - 1.0,
            "Q4_1 element {}",
            i + 16
        );
    }
    assert!(is_format_error(f.dequantize("t.missing")));
}

#[test]
fn dequantize_blocks() {
    // Q8_0: two blocks with different scales.
    let mut b = Vec::new();
    for d in [2.0f32, -0.125] {
        b.extend_from_slice(&f16b(d));
        b.extend((0..32).map(|i| (i as i8 * 3 - 50) as u8));
    }
    let x = dequantize(GgmlType::Q8_0, &b, 64).unwrap();
    for (i, &v) in x.iter().enumerate() {
        let d = if i < 32 { 2.0 } else { -0.125 };
        assert_eq!(v, ((i % 32) as i8 * 3 - 50) as f32 * d);
    }
    // Q4_1 with a non-trivial f16 scale and minimum.
    let (d, m) = (half::f16::from_f32(0.1), half::f16::from_f32(-0.7));
    let mut b = d.to_le_bytes().to_vec();
    b.extend_from_slice(&m.to_le_bytes());
    b.extend((0..16u8).map(|i| (i * 3 % 16) | ((i * 5 + 1) % 16) << 4));
    let x = dequantize(GgmlType::Q4_1, &b, 32).unwrap();
    for i in 0..16u8 {
        let lo = f32::from(i * 3 % 16) * d.to_f32() + m.to_f32();
        let hi = f32::from((i * 5 + 1) % 16) * d.to_f32() + m.to_f32();
        assert_eq!(x[i as usize], lo);
        assert_eq!(x[i as usize + 16], hi);
    }
    // Q4_0: (q - 8) * d.
    let mut b = f16b(0.5).to_vec();
    b.extend((0..16u8).map(|i| i | (15 - i) << 4));
    let x = dequantize(GgmlType::Q4_0, &b, 32).unwrap();
    assert_eq!(x[0], -4.0);
    assert_eq!(x[15], 3.5);
    assert_eq!(x[16], 3.5);
    // BF16.
    let b: Vec<u8> = [1.0f32, -3.0]
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
        .collect();
    assert_eq!(dequantize(GgmlType::BF16, &b, 2).unwrap(), vec![1.0, -3.0]);
    // Wrong lengths and unsupported types are errors.
    assert!(matches!(
        dequantize(GgmlType::Q4_1, &b, 32),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(is_format_error(dequantize(GgmlType::Q8_0, &[0; 34], 16)));
    // Q2_K (type 10) is not dequantized.
    assert!(is_format_error(dequantize(
        GgmlType::Other(10),
        &[0; 84],
        256
    )));
}

#[test]
fn malformed_files_are_errors() {
    let good = sample_file();
    // Every truncation is an error (not a panic), except past the last tensor's data.
    let data_end = good.len();
    for n in 0..data_end {
        let r = GgufFile::from_bytes(good[..n].to_vec());
        assert!(is_format_error(r), "truncated to {n} of {data_end} bytes");
    }
    let corrupt = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        GgufFile::from_bytes(b)
    };
    assert!(is_format_error(corrupt(0, b"GGUG")), "bad magic");
    assert!(is_format_error(corrupt(4, &[1, 0, 0, 0])), "version 1");
    assert!(is_format_error(corrupt(4, &[4, 0, 0, 0])), "version 4");
    assert!(
        is_format_error(corrupt(8, &u64::MAX.to_le_bytes())),
        "tensor count"
    );
    assert!(
        is_format_error(corrupt(16, &(1u64 << 50).to_le_bytes())),
        "metadata count"
    );
    // The first key's length field, then its type.
    assert!(
        is_format_error(corrupt(24, &u64::MAX.to_le_bytes())),
        "key length"
    );
    let type_at = 24 + 8 + "general.architecture".len();
    assert!(
        is_format_error(corrupt(type_at, &[13, 0, 0, 0])),
        "value type 13"
    );

    // A bool that is not 0/1, an array count past the end, invalid UTF-8.
    let one = |kv: (&str, u32, Vec<u8>)| GgufFile::from_bytes(build(&[kv], &[]));
    assert!(is_format_error(one(("b", 7, vec![2]))));
    let mut arr = 0u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(is_format_error(one(("a", 9, arr))));
    let mut bad_utf8 = 2u64.to_le_bytes().to_vec();
    bad_utf8.extend_from_slice(&[0xff, 0xfe]);
    assert!(is_format_error(one(("s", 8, bad_utf8))));
    assert!(is_format_error(one((
        "general.alignment",
        4,
        3u32.to_le_bytes().to_vec()
    ))));
    // Deeply nested arrays are refused, not recursed into without bound.
    let mut deep = Vec::new();
    for _ in 0..64 {
        deep.extend_from_slice(&9u32.to_le_bytes());
        deep.extend_from_slice(&1u64.to_le_bytes());
    }
    deep.extend_from_slice(&0u32.to_le_bytes());
    deep.extend_from_slice(&0u64.to_le_bytes());
    assert!(is_format_error(one(("deep", 9, deep))));
    // Duplicate keys.
    let dup = build(&[("k", 0, vec![1]), ("k", 0, vec![2])], &[]);
    assert!(is_format_error(GgufFile::from_bytes(dup)));

    // Tensors: too many dims, a row that is not whole blocks, data past the end, overflow.
    let t = |dims: Vec<u64>, ty: u32, data: Vec<u8>| {
        GgufFile::from_bytes(build(&[], &[("t", dims, ty, data)]))
    };
    assert!(is_format_error(t(vec![1; 5], 0, vec![0; 4])));
    assert!(is_format_error(t(vec![], 0, vec![])));
    assert!(is_format_error(t(vec![16], 8, vec![0; 34])));
    assert!(is_format_error(t(vec![64], 8, vec![0; 34])));
    assert!(is_format_error(t(vec![u64::MAX, 4], 0, vec![0; 4])));
    assert!(t(vec![1], 0, vec![0; 4]).is_ok());
    // An unknown type (here Q2_K) is listed but not dequantized.
    let f = t(vec![256], 10, vec![]).unwrap();
    assert_eq!(f.tensor("t").unwrap().ggml_type, GgmlType::Other(10));
    assert!(is_format_error(f.dequantize("t")));
    // A misaligned tensor offset.
    let mut b = build(&[], &[("t", vec![1], 0, vec![0; 4])]);
    let off_at = 24 + 8 + 1 + 4 + 8 + 4;
    b[off_at] = 4;
    assert!(is_format_error(GgufFile::from_bytes(b)));
    // A missing file is an I/O error.
    assert!(matches!(
        GgufFile::open("/nonexistent/model.gguf"),
        Err(Error::Io { .. })
    ));
}

#[test]
fn bpe_on_a_toy_vocab() {
    let table = gguf_byte_tokens();
    let mut tokens: Vec<String> = table.clone();
    tokens.extend(["ĠĠ", "he", "ll", "hell", "hello", "Ġw", "Ġwo"].map(String::from));
    let merges = ["Ġ Ġ", "h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o"];
    let bpe = Bpe::new(&tokens, &merges, PreTokenizer::IndividualDigits).unwrap();
    let id = |s: &str| bpe.token_id(s).unwrap();
    assert_eq!(
        bpe.encode("hello wo"),
        vec![id("hello"), id("Ġwo")],
        "merges by rank"
    );
    assert_eq!(
        bpe.pre_tokenize("a  b\n\n c 12x's   "),
        vec![
            "a", " ", " b", "\n\n", " c", " ", "1", "2", "x", "'s", "   "
        ]
    );
    assert_eq!(
        bpe.pre_tokenize("It's 3.14, don't!? ☃ Ünïcödé\t\tend"),
        vec![
            "It",
            "'s",
            " ",
            "3",
            ".",
            "1",
            "4",
            ",",
            " don",
            "'t",
            "!?",
            " ☃",
            " Ünïcödé",
            "\t",
            "\t",
            "end"
        ]
    );
    for text in [
        "",
        "hello wo",
        "a  b\n\n c 12x's   ",
        "Ünïcödé ☃ 🦀 \u{0}\u{7f}",
    ] {
        let ids = bpe.encode(text);
        assert_eq!(bpe.decode(&ids).unwrap(), text);
    }
    assert!(is_format_error(bpe.decode(&[tokens.len() as u32])));
    // Merges that name tokens outside the vocab are refused.
    assert!(is_format_error(Bpe::new(
        &tokens,
        &["x y"],
        PreTokenizer::Gpt2
    )));
    assert!(is_format_error(Bpe::new(
        &tokens[..10],
        &merges,
        PreTokenizer::Gpt2
    )));
}

/// The 256 byte stand-ins as one-character tokens, in byte order.
fn gguf_byte_tokens() -> Vec<String> {
    kvpack::model::bpe::bytes_to_unicode()
        .iter()
        .map(|c| c.to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The real SmolLM2-135M-Instruct file.

#[test]
fn smollm2_header_and_hyperparameters() {
    let Some(f) = open_smollm2("smollm2_header_and_hyperparameters") else {
        return;
    };
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    let p = f.llama_params().unwrap();
    eprintln!("{p:?}");
    assert_eq!(p.n_layers, 30);
    assert_eq!(p.d_model, 576);
    assert_eq!(p.ffn_dim, 1536);
    assert_eq!(p.n_heads, 9);
    assert_eq!(p.n_kv_heads, 3);
    assert_eq!(p.head_dim, 64);
    assert_eq!(p.rope_dim, 64);
    assert_eq!(p.rope_theta, 100_000.0);
    assert_eq!(p.rms_eps, 1e-5);
    assert_eq!(p.context_length, 8192);
    assert_eq!(p.vocab_size, 49152);
    assert!(p.tied_embeddings, "no output.weight");

    // 210 Q4_1 matrices, token_embd in Q8_0, norms in F32.
    let count = |t: GgmlType| f.tensors().iter().filter(|i| i.ggml_type == t).count();
    assert_eq!(count(GgmlType::Q4_1), 210);
    assert_eq!(count(GgmlType::Q8_0), 1);
    assert_eq!(count(GgmlType::F32), 61);
    assert_eq!(
        f.tensor("token_embd.weight").unwrap().ggml_type,
        GgmlType::Q8_0
    );
    assert_eq!(
        f.tensor("token_embd.weight").unwrap().dims,
        vec![576, 49152]
    );
    assert!(f.tensor("output.weight").is_none());
    let params: u64 = f.tensors().iter().map(|t| t.n_elements).sum();
    assert_eq!(
        (params as f64 / 1e5).round() / 10.0,
        134.5,
        "134.5 M parameters"
    );

    assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(f.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
    assert_eq!(f.get_u64("tokenizer.ggml.bos_token_id").unwrap(), 1);
    assert_eq!(f.get_u64("tokenizer.ggml.eos_token_id").unwrap(), 2);
    if let Some(v) = f.get("tokenizer.ggml.add_bos_token") {
        assert_eq!(v.as_bool(), Some(false));
    }
}

#[test]
fn smollm2_weights_dequantize() {
    let Some(f) = open_smollm2("smollm2_weights_dequantize") else {
        return;
    };
    let t0 = std::time::Instant::now();
    let w = f.llama_tensors().unwrap();
    eprintln!(
        "dequantized {} tensors in {:.2} s",
        w.len(),
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(w.len(), 272);
    assert_eq!(w["token_embd.weight"].shape, vec![49152, 576]);
    assert_eq!(w["blk.0.attn_q.weight"].shape, vec![576, 576]);
    assert_eq!(w["blk.29.attn_k.weight"].shape, vec![192, 576]);
    assert_eq!(w["blk.7.attn_v.weight"].shape, vec![192, 576]);
    assert_eq!(w["blk.3.ffn_gate.weight"].shape, vec![1536, 576]);
    assert_eq!(w["blk.3.ffn_down.weight"].shape, vec![576, 1536]);
    assert_eq!(w["output_norm.weight"].shape, vec![576]);
    for (name, t) in &w {
        assert_eq!(t.data.len(), t.shape.iter().product::<usize>(), "{name}");
        let bad = t.data.iter().position(|x| !x.is_finite());
        assert!(bad.is_none(), "{name}: non-finite value at {bad:?}");
        let rms = (t.data.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / t.data.len() as f64)
            .sqrt();
        assert!(rms > 1e-3 && rms < 10.0, "{name}: rms {rms}");
    }
    // Spot check against the raw blocks: the first Q8_0 block of the embedding and the first
    // Q4_1 block of a matrix, decoded here by hand.
    let info = f.tensor("token_embd.weight").unwrap();
    let raw = f.tensor_bytes(info).unwrap();
    let d = half::f16::from_le_bytes([raw[0], raw[1]]).to_f32();
    for i in 0..32 {
        assert_eq!(
            w["token_embd.weight"].data[i],
            f32::from(raw[2 + i] as i8) * d
        );
    }
    let info = f.tensor("blk.5.ffn_up.weight").unwrap();
    assert_eq!(info.ggml_type, GgmlType::Q4_1);
    let raw = f.tensor_bytes(info).unwrap();
    let blk = &raw[20 * 3..20 * 4]; // fourth block of the first row
    let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
    let m = half::f16::from_le_bytes([blk[2], blk[3]]).to_f32();
    for i in 0..16 {
        let t = &w["blk.5.ffn_up.weight"].data[96..128];
        assert_eq!(t[i], f32::from(blk[4 + i] & 15) * d + m);
        assert_eq!(t[i + 16], f32::from(blk[4 + i] >> 4) * d + m);
    }
    // Norm weights are stored exactly.
    let info = f.tensor("blk.0.attn_norm.weight").unwrap();
    let raw = f.tensor_bytes(info).unwrap();
    assert_eq!(
        w["blk.0.attn_norm.weight"].data[5],
        f32::from_le_bytes(raw[20..24].try_into().unwrap())
    );
}

/// `(text, token_ids)` of a fixture, from its safetensors metadata and `token_ids` tensor.
fn fixture_text_and_ids(name: &str, test: &str) -> Option<(String, Vec<u32>)> {
    let p = common::shared_fixture(name, test)?;
    let bytes = std::fs::read(&p).expect("read fixture");
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).expect("fixture header");
    let text = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get("text").cloned())
        .expect("fixture metadata has `text`");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse fixture");
    let t = st.tensor("token_ids").expect("token_ids");
    assert_eq!(t.dtype(), safetensors::Dtype::I32);
    let ids: Vec<u32> = t
        .data()
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as u32)
        .collect();
    Some((text, ids))
}

fn check_fixture(name: &str, test: &str, expected_len: usize) {
    let Some(f) = open_smollm2(test) else { return };
    let Some((text, expected)) = fixture_text_and_ids(name, test) else {
        return;
    };
    let bpe = Bpe::from_gguf(&f).unwrap();
    assert_eq!(bpe.vocab_size(), 49152);
    assert_eq!(bpe.bos(), Some(1));
    assert_eq!(bpe.eos(), Some(2));
    assert_eq!(bpe.pre_tokenizer(), PreTokenizer::IndividualDigits);
    let t0 = std::time::Instant::now();
    let ids = bpe.encode(&text);
    eprintln!(
        "{name}: {} chars -> {} tokens in {:.1} ms",
        text.len(),
        ids.len(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(expected.len(), expected_len);
    if ids != expected {
        let at = ids.iter().zip(&expected).position(|(a, b)| a != b);
        let at = at.unwrap_or(ids.len().min(expected.len()));
        let show = |v: &[u32]| {
            v.iter()
                .map(|&i| format!("{i}:{:?}", bpe.token(i).unwrap_or("?")))
                .collect::<Vec<_>>()
        };
        let lo = at.saturating_sub(3);
        panic!(
            "{name}: token ids differ at {at} (got {} ids, expected {}):\n got      {:?}\n expected {:?}",
            ids.len(),
            expected.len(),
            show(&ids[lo..(at + 4).min(ids.len())]),
            show(&expected[lo..(at + 4).min(expected.len())]),
        );
    }
    assert_eq!(
        bpe.decode(&expected).unwrap(),
        text,
        "decode(token_ids) == text"
    );
}

#[test]
fn smollm2_tokenizer_matches_paris_fixture() {
    check_fixture(
        "paris.safetensors",
        "smollm2_tokenizer_matches_paris_fixture",
        122,
    );
}

#[test]
fn smollm2_tokenizer_matches_story_fixture() {
    check_fixture(
        "story-512.safetensors",
        "smollm2_tokenizer_matches_story_fixture",
        517,
    );
}

#[test]
fn smollm2_tokenizer_round_trips() {
    let Some(f) = open_smollm2("smollm2_tokenizer_round_trips") else {
        return;
    };
    let bpe = Bpe::from_gguf(&f).unwrap();
    let texts = [
        "The capital of France is",
        "  leading spaces, trailing spaces   ",
        "Numbers: 1234567890, 3.14159, -42, 1e-5, ½ ⅓ ٣",
        "Tabs\tand\nnewlines\r\n\n\nand    runs of     spaces",
        "Ünïcödé, 日本語のテキスト, Ελληνικά, русский, עברית, emoji 🦀🚀👍🏽",
        "It's, I'm, we'll, you'd, they've, we're, don't; IT'S (case)",
        "<|im_start|>user\nHi<|im_end|>",
        "control \u{7f} and combining e\u{301}",
    ];
    for text in texts {
        let ids = bpe.encode(text);
        assert_eq!(bpe.decode(&ids).unwrap(), text, "round trip of {text:?}");
        assert!(ids.iter().all(|&i| (i as usize) < bpe.vocab_size()));
    }
    // Greedy continuation in smollm2-135m.md: "The capital of France is" -> " Paris.".
    let paris = bpe.encode(" Paris.");
    assert_eq!(bpe.decode(&paris).unwrap(), " Paris.");
    assert_eq!(paris.len(), 2, "` Paris` and `.`: {paris:?}");
    // Digits are one token each, and the space before them is its own token.
    let ids = bpe.encode("in 2024");
    assert_eq!(ids.len(), 6, "{ids:?}");
    assert_eq!(bpe.token(ids[1]), Some("Ġ"));
}
