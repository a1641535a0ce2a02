//! The eviction compaction kernel's cases and check (tests/evict_compact.rs says what is
//! checked), shared with tests/mutants.rs.

use super::{POISON, Target, run_plan};
use kvpack::cpu::policy::evict_compact::{CompactShape, evict_compact};
use kvpack::policy::kernels::plan_compact;
use kvpack::{Context, Input, KvLayer, Layer, Method, PathChoice};
use rand::Rng;

const METHODS: &[&str] = &[
    "f16",
    "kivi:bits=2,group=32,residual=32",
    "kivi:kbits=4,vbits=3,group=16,vgroup=24,residual=32,params=f32",
    "turboquant-mse:bits=3,residual=24",
    "qjl:m=96/kivi:bits=4,group=32,residual=32",
];

/// The spec's compaction, one bit at a time.
fn oracle(src: &[u32], keep: &[u32], s: &CompactShape) -> Vec<u32> {
    let unit_words = s.unit_rows * s.row_words;
    let n_dst = s.words - (s.keep_of - s.kept) * unit_words;
    let bit = |w: &[u32], k: usize| (w[k / 32] >> (k % 32)) & 1;
    let mut out = vec![0u32; n_dst];
    // Row by row (a partial last unit is whole rows).
    for row in 0..n_dst / s.row_words {
        let (i, r) = (row / s.unit_rows, row % s.unit_rows);
        for b in 0..s.row_words * 32 {
            let h = b / s.head_bits;
            let src_row = if i >= s.kept {
                row + (s.keep_of - s.kept) * s.unit_rows
            } else if h < s.heads {
                keep[h * s.kept + i] as usize * s.unit_rows + r
            } else {
                row
            };
            let from = src_row * s.row_words * 32 + b;
            let to = row * s.row_words * 32 + b;
            out[to / 32] |= bit(src, from) << (to % 32);
        }
    }
    out
}

/// Every stream of every case on `t` (see tests/evict_compact.rs); panics on a mismatch.
pub fn check_all(t: &Target, rng: &mut impl Rng) {
    let mut streams_checked = 0;
    let mut straddling = 0;
    let mut partial = 0;
    // D = 40: 3-bit KIVI keys take 120 bits a head (heads straddle words).
    for (spec, heads, dim) in METHODS
        .iter()
        .map(|m| (*m, 3, 64))
        .chain([(METHODS[2], 3, 40), (METHODS[1], 5, 40)])
    {
        let method = Method::parse(spec).expect("method");
        let cpu = Context::cpu();
        let mut layer = Layer::new(&cpu, heads, dim, &method, PathChoice::Cpu).expect("layer");
        let tokens = 400;
        let (_, k, v) = super::random_qkv(rng, tokens, 1, heads, heads, dim);
        layer
            .append(Input::F32(&k), Input::F32(&v))
            .expect("append");
        let snap = layer.snapshot().expect("snapshot");
        let codecs = [
            layer.codec(kvpack::store::Side::Keys),
            layer.codec(kvpack::store::Side::Values),
        ];
        let unit = codecs
            .iter()
            .map(|c| c.block_tokens())
            .fold(1, |a, b| a / gcd(a, b) * b);
        let quantized = snap.keys.quantized.min(snap.values.quantized) / unit * unit;
        for (codec, words) in codecs.iter().zip([&snap.keys, &snap.values]) {
            let bpu = unit / codec.block_tokens();
            for (st, stream) in codec.streams().iter().zip(&words.streams) {
                let units = quantized / unit;
                let keep_of = units - 2;
                let kept = keep_of - 3 - rng.random_range(0..keep_of / 2);
                let shape = CompactShape {
                    row_words: st.words_per_block / st.rows,
                    unit_rows: bpu * st.rows,
                    head_bits: st.head_bits,
                    heads,
                    kept,
                    keep_of,
                    words: stream.len(),
                };
                // The side's every quantized block (a side with smaller blocks than a unit
                // ends with a partial unit).
                let src = &stream[..];
                partial += usize::from(!src.len().is_multiple_of(bpu * st.words_per_block));
                let mut keep = Vec::new();
                for _ in 0..heads {
                    let mut all: Vec<u32> = (0..keep_of as u32).collect();
                    while all.len() > kept {
                        all.remove(rng.random_range(0..all.len()));
                    }
                    keep.extend(all);
                }
                let what = format!(
                    "{spec} {} ({} rows, {} bits a head, units of {bpu} blocks): {kept} of {keep_of} kept, {units} units",
                    st.name, st.rows, st.head_bits
                );
                let want = oracle(src, &keep, &shape);
                let got = match t {
                    Target::Cpu(_) => evict_compact(src, &keep, &shape),
                    _ => {
                        let src0 = 5;
                        let mut buf = vec![POISON; src0];
                        buf.extend_from_slice(src);
                        let plan = plan_compact(&shape, src0).expect("plan");
                        let mut storage = vec![
                            bytemuck::cast_slice(&buf).to_vec(),
                            bytemuck::cast_slice(&keep).to_vec(),
                            bytemuck::cast_slice(&vec![POISON; want.len()]).to_vec(),
                        ];
                        run_plan(t, &plan, &mut storage)
                            .unwrap_or_else(|e| panic!("{} {what}: {e}", t.name()));
                        bytemuck::pod_collect_to_vec(&storage[2])
                    }
                };
                assert_eq!(got.len(), want.len(), "{} {what}: length", t.name());
                if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
                    panic!(
                        "{} {what}: word {i} is {:#010x}, the spec's {:#010x}",
                        t.name(),
                        got[i],
                        want[i]
                    );
                }
                streams_checked += 1;
                straddling += usize::from(st.head_bits % 32 != 0);
            }
        }
    }
    eprintln!(
        "evict_compact[{}]: {streams_checked} streams, {straddling} with heads straddling words, {partial} ending in a partial unit",
        t.name()
    );
    assert!(
        straddling >= 2,
        "the cases must move heads that straddle words"
    );
    assert!(partial >= 1, "the cases must move a partial last unit");
}
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}
