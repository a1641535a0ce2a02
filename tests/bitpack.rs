//! Bit packing parity (../shared/spec/bitpack.md): every b in 1..=8, n in
//! {0, 1, 7, 8, 31, 32, 33, 1000, 100003}, random codes, exact equality with an independent
//! bit-by-bit oracle, output buffers poisoned before every run, on every path.

mod common;

use common::{POISON, Target};
use kvpack::bitpack::{plan_pack, plan_unpack};
use kvpack::{BitPacker, gpu};
use rand::Rng;

const SIZES: [usize; 9] = [0, 1, 7, 8, 31, 32, 33, 1000, 100_003];

/// Independent oracle: sets stream bit k = bit (k mod 32) of word k/32, one bit at a time.
fn oracle_pack(codes: &[u8], bits: u32) -> Vec<u32> {
    let mut words = vec![0u32; (codes.len() * bits as usize).div_ceil(32)];
    for (i, &c) in codes.iter().enumerate() {
        for j in 0..bits as usize {
            if (c >> j) & 1 == 1 {
                let k = i * bits as usize + j;
                words[k / 32] |= 1 << (k % 32);
            }
        }
    }
    words
}

/// Packs on `t` with a poisoned output.
fn pack_on(t: &Target, codes: &[u8], bits: u32) -> kvpack::Result<Vec<u32>> {
    match t {
        Target::Cpu(_) => {
            let mut words = vec![POISON; kvpack::packed_words(codes.len(), bits)?];
            kvpack::cpu::bitpack::bitpack(codes, bits, &mut words)?;
            Ok(words)
        }
        Target::Wgsl(ctx, path) => {
            let packer = BitPacker::with_path(ctx, *path)?;
            let n_words = kvpack::packed_words(codes.len(), bits)?;
            let input = gpu::upload(ctx, "test codes", codes)?;
            let output = gpu::upload(
                ctx,
                "test words",
                bytemuck::cast_slice(&vec![POISON; n_words.max(1)]),
            )?;
            gpu::submit_blocking(ctx, "test bitpack", |enc| {
                packer.encode_pack(enc, &input, codes.len(), bits, &output)
            })?;
            let back = gpu::readback(ctx, &output, (n_words * 4) as u64)?;
            Ok(bytemuck::pod_collect_to_vec(&back))
        }
        Target::MslEmulated(_) => {
            let n_words = kvpack::packed_words(codes.len(), bits)?;
            let mut input = codes.to_vec();
            input.resize(codes.len().div_ceil(4) * 4, 0);
            let mut storage = vec![input, bytemuck::cast_slice(&vec![POISON; n_words]).to_vec()];
            common::run_plan(t, &plan_pack(codes.len(), bits)?, &mut storage)?;
            Ok(bytemuck::pod_collect_to_vec(&storage[1]))
        }
    }
}

/// Unpacks on `t` with a poisoned output; returns the whole output including the padding
/// bytes of its last word (they must be zero).
fn unpack_on(t: &Target, words: &[u32], bits: u32, n: usize) -> kvpack::Result<Vec<u8>> {
    match t {
        Target::Cpu(_) => {
            let mut codes = vec![0xA5u8; n];
            kvpack::cpu::bitpack::bitunpack::bitunpack(words, bits, &mut codes)?;
            Ok(codes)
        }
        Target::Wgsl(ctx, path) => {
            let packer = BitPacker::with_path(ctx, *path)?;
            let out_words = n.div_ceil(4);
            let input = gpu::upload(ctx, "test words", bytemuck::cast_slice(words))?;
            let output = gpu::upload(
                ctx,
                "test codes",
                bytemuck::cast_slice(&vec![POISON; out_words.max(1)]),
            )?;
            gpu::submit_blocking(ctx, "test bitunpack", |enc| {
                packer.encode_unpack(enc, &input, n, bits, &output)
            })?;
            gpu::readback(ctx, &output, (out_words * 4) as u64)
        }
        Target::MslEmulated(_) => {
            let out_words = n.div_ceil(4);
            let mut storage = vec![
                bytemuck::cast_slice(words).to_vec(),
                bytemuck::cast_slice(&vec![POISON; out_words]).to_vec(),
            ];
            common::run_plan(t, &plan_unpack(n, bits)?, &mut storage)?;
            Ok(storage.swap_remove(1))
        }
    }
}

fn check_round_trip(t: &Target, codes: &[u8], bits: u32) {
    let n = codes.len();
    let expected = oracle_pack(codes, bits);
    let words =
        pack_on(t, codes, bits).unwrap_or_else(|e| panic!("{} pack b={bits} n={n}: {e}", t.name()));
    assert_eq!(
        words.len(),
        expected.len(),
        "{} b={bits} n={n}: word count",
        t.name()
    );
    if let Some(i) = (0..words.len()).find(|&i| words[i] != expected[i]) {
        panic!(
            "{} pack b={bits} n={n}: word {i} is {:#010x}, expected {:#010x}",
            t.name(),
            words[i],
            expected[i]
        );
    }
    let back = unpack_on(t, &expected, bits, n)
        .unwrap_or_else(|e| panic!("{} unpack b={bits} n={n}: {e}", t.name()));
    if let Some(i) = (0..n).find(|&i| back[i] != codes[i]) {
        panic!(
            "{} unpack b={bits} n={n}: code {i} is {}, expected {}",
            t.name(),
            back[i],
            codes[i]
        );
    }
    assert!(
        back[n..].iter().all(|&p| p == 0),
        "{} unpack b={bits} n={n}: padding bytes {:?}",
        t.name(),
        &back[n..]
    );
}

fn bitpack_every_width_and_size(t: &Target) {
    let mut rng = common::rng("bitpack_every_width_and_size");
    for bits in 1..=8u32 {
        for &n in &SIZES {
            let codes: Vec<u8> = (0..n)
                .map(|_| rng.random_range(0..(1u32 << bits)) as u8)
                .collect();
            check_round_trip(t, &codes, bits);
        }
    }
}
parity_tests!(bitpack_every_width_and_size, msl, gl);

/// All-ones codes set every bit of the stream: a word written short of its last code, or a
/// code shifted past its word, shows at once.
fn bitpack_extreme_codes(t: &Target) {
    for bits in 1..=8u32 {
        for n in [1usize, 5, 32, 33, 97] {
            check_round_trip(t, &vec![((1u32 << bits) - 1) as u8; n], bits);
            let alternating: Vec<u8> = (0..n)
                .map(|i| {
                    if i % 2 == 0 {
                        ((1u32 << bits) - 1) as u8
                    } else {
                        1
                    }
                })
                .collect();
            check_round_trip(t, &alternating, bits);
        }
    }
}
parity_tests!(bitpack_extreme_codes, msl, gl);

/// Dispatches split over x and y: the per-dimension limit lowered to 20 workgroups makes a
/// 100,003-code pack run on a (20, 8) or (20, 20) grid; a wrong linear index shows as a wrong word.
fn bitpack_split_dispatch(t: &Target) {
    let t = match t {
        Target::Cpu(_) | Target::MslEmulated(_) => return, // no device dispatch limit to lower
        Target::Wgsl(ctx, p) => Target::Wgsl(
            ctx.with_max_workgroups_per_dimension(20)
                .expect("lower limit"),
            *p,
        ),
    };
    let mut rng = common::rng("bitpack_split_dispatch");
    for bits in [3u32, 8] {
        let n = 100_003;
        let plan = plan_pack(n, bits).expect("plan");
        let (x, y) = gpu::split_workgroups(t.ctx(), plan.workgroups).expect("split");
        assert!(y > 1 && x == 20, "expected a split grid, got ({x}, {y})");
        assert!(plan_unpack(n, bits).expect("plan").workgroups > 20);
        let codes: Vec<u8> = (0..n)
            .map(|_| rng.random_range(0..(1u32 << bits)) as u8)
            .collect();
        check_round_trip(&t, &codes, bits);
    }
}
parity_tests!(bitpack_split_dispatch, gl);
