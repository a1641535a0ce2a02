//! The emulator on real kvpack kernels, on small kernels that exercise the execution model,
//! and on deliberately broken kernels that it must report.

use kvpack_msl_emu::{DispatchOptions, EmuError, LaneOrder, MslKernel};

const ORDERS: [LaneOrder; 5] = [
    LaneOrder::InOrder,
    LaneOrder::Reversed,
    LaneOrder::Random(1),
    LaneOrder::Random(2),
    LaneOrder::Random(0xdead_beef),
];

fn opts(lane_order: LaneOrder) -> DispatchOptions {
    DispatchOptions { lane_order }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
}

fn bytes_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn kvpack_kernel(file: &str, name: &str) -> MslKernel {
    let path = format!("{}/../msl/{file}", env!("CARGO_MANIFEST_DIR"));
    let body = std::fs::read_to_string(&path).unwrap();
    // what kvpack's registry::compose_msl prepends: the definitions and the shared bit helpers
    // (msl/common/bits.metal, a common of every kernel that extracts codes)
    let bits = std::fs::read_to_string(format!(
        "{}/../msl/common/bits.metal",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let src = format!("#define WORKGROUP_SIZE 64\n{bits}\n{body}");
    MslKernel::compile(&src, name).unwrap_or_else(|e| panic!("{e}"))
}

fn ref_pack(codes: &[u8], b: u32) -> Vec<u32> {
    let n = codes.len();
    let mut words = vec![0u32; (n * b as usize).div_ceil(32)];
    for (i, &c) in codes.iter().enumerate() {
        let c = (c as u32) & ((1u32 << b) - 1);
        for k in 0..b as usize {
            let bit = i * b as usize + k;
            if (c >> k) & 1 == 1 {
                words[bit / 32] |= 1 << (bit % 32);
            }
        }
    }
    words
}

fn groups_for(n_words: u32, split_y: bool) -> [u32; 3] {
    let g = n_words.div_ceil(64).max(1);
    if split_y && g > 1 {
        let gx = g.div_ceil(2);
        [gx, 2, 1]
    } else {
        [g, 1, 1]
    }
}

#[test]
fn bitpack_and_bitunpack_match_reference() {
    let t0 = std::time::Instant::now();
    let pack = kvpack_kernel("bitpack/bitpack.metal", "bitpack");
    let unpack = kvpack_kernel("bitpack/bitunpack.metal", "bitunpack");
    eprintln!("compile bitpack+bitunpack: {:?}", t0.elapsed());
    let mut rng = Rng(7);
    for &(n, b) in &[
        (1usize, 1u32),
        (5, 3),
        (64, 4),
        (100, 5),
        (257, 8),
        (1000, 2),
        (4099, 7),
        (10000, 3),
    ] {
        for (k, order) in ORDERS.iter().enumerate() {
            let codes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            let masked: Vec<u8> = codes.iter().map(|&c| c & ((1u16 << b) - 1) as u8).collect();
            let expect = ref_pack(&codes, b);
            let n_words = expect.len() as u32;
            let mut params = bytes_u32(&[n as u32, b, n_words, 0]);
            let mut code_words = vec![0u8; n.div_ceil(4) * 4];
            code_words[..n].copy_from_slice(&codes);
            let mut words = vec![0xA5u8; n_words as usize * 4];
            let t = std::time::Instant::now();
            pack.dispatch(
                &mut [&mut params, &mut code_words, &mut words],
                groups_for(n_words, k % 2 == 1),
                [64, 1, 1],
                &opts(*order),
            )
            .unwrap_or_else(|e| panic!("bitpack n={n} b={b}: {e}"));
            if n == 10000 && k == 0 {
                eprintln!("bitpack dispatch n={n}: {:?}", t.elapsed());
            }
            assert_eq!(u32s(&words), expect, "bitpack n={n} b={b} {order:?}");

            let n_out = n.div_ceil(4) as u32;
            let mut out = vec![0x5Au8; n_out as usize * 4];
            unpack
                .dispatch(
                    &mut [&mut params, &mut words, &mut out],
                    groups_for(n_out, k % 2 == 0),
                    [64, 1, 1],
                    &opts(*order),
                )
                .unwrap_or_else(|e| panic!("bitunpack n={n} b={b}: {e}"));
            assert_eq!(&out[..n], &masked[..], "bitunpack n={n} b={b} {order:?}");
            assert!(
                out[n..].iter().all(|&x| x == 0),
                "bitunpack padding n={n} b={b}"
            );
        }
    }
}

#[test]
fn bitpack_rejects_too_large_threadgroup() {
    let pack = kvpack_kernel("bitpack/bitpack.metal", "bitpack");
    assert_eq!(pack.max_total_threads_per_threadgroup(), Some(64));
    let mut p = bytes_u32(&[4, 8, 1, 0]);
    let mut c = vec![0u8; 4];
    let mut w = vec![0u8; 4];
    let e = pack
        .dispatch(
            &mut [&mut p, &mut c, &mut w],
            [1, 1, 1],
            [128, 1, 1],
            &opts(LaneOrder::InOrder),
        )
        .unwrap_err();
    assert!(matches!(e, EmuError::Dispatch(_)), "{e}");
    // a missing buffer is reported, not read
    let e = pack
        .dispatch(
            &mut [&mut p, &mut c],
            [1, 1, 1],
            [64, 1, 1],
            &opts(LaneOrder::InOrder),
        )
        .unwrap_err();
    assert!(matches!(e, EmuError::Dispatch(_)), "{e}");
    // a uniform that is too small is an out-of-bounds access
    let mut small = vec![0u8; 8];
    let e = pack
        .dispatch(
            &mut [&mut small, &mut c, &mut w],
            [1, 1, 1],
            [64, 1, 1],
            &opts(LaneOrder::InOrder),
        )
        .unwrap_err();
    assert!(matches!(e, EmuError::OutOfBounds { buffer: 0, .. }), "{e}");
}

#[test]
fn simd_butterfly_minmax_all_orders() {
    let k = MslKernel::compile(include_str!("kernels/simd_minmax.metal"), "simd_minmax")
        .unwrap_or_else(|e| panic!("{e}"));
    let (rows, cols) = (7u32, 100u32);
    let mut rng = Rng(3);
    let x: Vec<f32> = (0..rows * cols)
        .map(|_| (rng.next() % 20000) as f32 / 7.0 - 1000.0)
        .collect();
    for order in ORDERS {
        let mut p = bytes_u32(&[rows, cols]);
        let mut xb = bytes_f32(&x);
        let mut out = vec![0u8; rows as usize * 8];
        let mut agree = vec![0u8; rows as usize * 4];
        // 2 SIMD groups per threadgroup → 4 threadgroups, the last half empty
        k.dispatch(
            &mut [&mut p, &mut xb, &mut out, &mut agree],
            [rows.div_ceil(2), 1, 1],
            [64, 1, 1],
            &opts(order),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let out = f32s(&out);
        for r in 0..rows as usize {
            let row = &x[r * cols as usize..(r + 1) * cols as usize];
            let lo = row.iter().cloned().fold(f32::INFINITY, f32::min);
            let hi = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!((out[2 * r], out[2 * r + 1]), (lo, hi), "row {r} {order:?}");
        }
        assert!(
            u32s(&agree).iter().all(|&a| a == 1),
            "simd_min/simd_max disagree with the butterfly"
        );
    }
}

#[test]
fn threadgroup_reduction_all_orders() {
    let k = MslKernel::compile(include_str!("kernels/tg_reduce.metal"), "tg_reduce")
        .unwrap_or_else(|e| panic!("{e}"));
    let n = 1000u32;
    let groups = n.div_ceil(256);
    let mut rng = Rng(11);
    let a: Vec<u32> = (0..n).map(|_| rng.next() % 1000).collect();
    let f: Vec<f32> = (0..n)
        .map(|_| (rng.next() % 100000) as f32 * 0.25 - 5000.0)
        .collect();
    for order in ORDERS {
        let mut p = bytes_u32(&[n]);
        let (mut ab, mut fb) = (bytes_u32(&a), bytes_f32(&f));
        let mut sums = vec![0u8; groups as usize * 4];
        let mut maxes = vec![0u8; groups as usize * 4];
        let mut shifted = vec![0u8; n as usize * 4];
        k.dispatch(
            &mut [
                &mut p,
                &mut ab,
                &mut fb,
                &mut sums,
                &mut maxes,
                &mut shifted,
            ],
            [groups, 1, 1],
            [256, 1, 1],
            &opts(order),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let (sums, maxes, shifted) = (u32s(&sums), f32s(&maxes), u32s(&shifted));
        for g in 0..groups as usize {
            let lo = g * 256;
            let hi = ((g + 1) * 256).min(n as usize);
            assert_eq!(
                sums[g],
                a[lo..hi].iter().sum::<u32>(),
                "group {g} {order:?}"
            );
            assert_eq!(
                maxes[g],
                f[lo..hi].iter().cloned().fold(-3.0e38, f32::max),
                "group {g} {order:?}"
            );
            #[allow(clippy::needless_range_loop)]
            for i in lo..hi {
                let j = lo + (i - lo + 1) % 256;
                let expect = if j < n as usize { a[j] } else { 0 };
                assert_eq!(shifted[i], expect, "shifted[{i}] {order:?}");
            }
        }
    }
}

#[test]
fn simd_functions_with_inactive_lanes() {
    let k = MslKernel::compile(include_str!("kernels/simd_ops.metal"), "simd_ops")
        .unwrap_or_else(|e| panic!("{e}"));
    for live in [32u32, 20, 5] {
        for order in ORDERS {
            let x: Vec<i32> = (0..64).map(|i| (i * 7 % 13) - 3).collect();
            let mut lb = bytes_u32(&[live]);
            let mut xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut out = vec![0u8; 64 * 12 * 4];
            k.dispatch(
                &mut [&mut lb, &mut xb, &mut out],
                [1, 1, 1],
                [64, 1, 1],
                &opts(order),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let out: Vec<i32> = out
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            for sg in 0..2usize {
                let v: Vec<i32> = (0..live as usize).map(|l| x[sg * 32 + l]).collect();
                for l in 0..live as usize {
                    let o = &out[(sg * 32 + l) * 12..][..12];
                    let ballot = v
                        .iter()
                        .enumerate()
                        .filter(|&(_, &x)| x > 0)
                        .fold(0u32, |m, (i, _)| m | 1 << i);
                    let expect = [
                        v.iter().sum::<i32>(),
                        *v.iter().min().unwrap(),
                        *v.iter().max().unwrap(),
                        v[..l].iter().sum::<i32>(),
                        if live > 3 { v[3] } else { -1 }, // inactive source lane: poison (all ones)
                        v[0] + 1,
                        if l >= 1 { v[l - 1] } else { v[l] },
                        if l + 2 < 32 {
                            if l + 2 < live as usize { v[l + 2] } else { -1 }
                        } else {
                            v[l]
                        },
                        v[(l + 1) % live as usize],
                        ballot as i32,
                        v.contains(&7) as i32,
                        v.iter().fold(0, |a, b| a | b),
                    ];
                    assert_eq!(
                        o, &expect,
                        "lane {l} of SIMD group {sg}, live {live}, {order:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn vectors_convert_and_math() {
    let k = MslKernel::compile(include_str!("kernels/mathvec.metal"), "mathvec")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = vec![0u8; 17 * 4];
    k.dispatch(
        &mut [&mut out],
        [1, 1, 1],
        [4, 1, 1],
        &opts(LaneOrder::InOrder),
    )
    .unwrap();
    let o = f32s(&out);
    let third = half_round(1.0 / 3.0);
    let expect = [
        1.0,
        -2.0,
        7.0,
        -1.0,
        9.0,
        10.0,
        third,
        2.0,
        3.0,
        1.0,
        1.0,
        std::f32::consts::E,
        2.0,
        7.0,
        0.5,
        1.0,
        1.75,
    ];
    assert_eq!(&o[..], &expect[..]);
}

/// Round an f32 to the nearest f16 value (normal range only), as f32.
fn half_round(x: f32) -> f32 {
    let e = x.abs().log2().floor();
    let q = 2f32.powf(e - 10.0);
    (x / q).round_ties_even() * q
}

// ---- deliberately broken kernels ----

fn broken(name: &str) -> MslKernel {
    let path = format!("{}/tests/broken/{name}.metal", env!("CARGO_MANIFEST_DIR"));
    MslKernel::compile(&std::fs::read_to_string(path).unwrap(), name)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn missing_barrier_fails_in_reversed_and_random_order() {
    let k = broken("missing_barrier");
    let n = 256usize;
    let a: Vec<u32> = (0..n as u32).map(|i| i * 3 + 1).collect();
    let expect: Vec<u32> = (0..n)
        .map(|i| a[(i / 64) * 64 + (i % 64 + 1) % 64])
        .collect();
    let mut wrong = Vec::new();
    for order in [
        LaneOrder::Reversed,
        LaneOrder::Random(1),
        LaneOrder::Random(2),
        LaneOrder::Random(3),
    ] {
        let mut ab = bytes_u32(&a);
        let mut out = vec![0u8; n * 4];
        k.dispatch(
            &mut [&mut ab, &mut out],
            [4, 1, 1],
            [64, 1, 1],
            &opts(order),
        )
        .unwrap();
        wrong.push(u32s(&out) != expect);
    }
    assert!(
        wrong.iter().all(|&w| w),
        "a missing barrier went unnoticed: {wrong:?}"
    );
}

#[test]
fn wrong_shuffle_offset_gives_wrong_result() {
    let k = broken("wrong_shuffle");
    let x: Vec<f32> = (0..64).map(|i| ((i * 37) % 64) as f32).collect();
    let mut xb = bytes_f32(&x);
    let mut out = vec![0u8; 64 * 4];
    k.dispatch(
        &mut [&mut xb, &mut out],
        [1, 1, 1],
        [64, 1, 1],
        &opts(LaneOrder::InOrder),
    )
    .unwrap();
    let out = f32s(&out);
    let expect: Vec<f32> = (0..64)
        .map(|i| {
            x[(i / 32) * 32..][..32]
                .iter()
                .cloned()
                .fold(f32::MIN, f32::max)
        })
        .collect();
    assert_ne!(out, expect, "the wrong xor offset went unnoticed");
}

#[test]
fn out_of_range_index_is_reported() {
    let k = broken("out_of_range");
    for order in ORDERS {
        let mut a = bytes_u32(&[1; 100]);
        let mut out = vec![0u8; 400];
        let e = k
            .dispatch(&mut [&mut a, &mut out], [2, 1, 1], [50, 1, 1], &opts(order))
            .unwrap_err();
        match e {
            EmuError::OutOfBounds {
                buffer,
                offset,
                size,
                len,
                threadgroup,
                thread,
            } => {
                assert_eq!((buffer, offset, size, len), (0, 400, 4, 400), "{e}");
                assert_eq!((threadgroup, thread), ([1, 0, 0], [49, 0, 0]), "{e}");
            }
            e => panic!("expected OutOfBounds, got {e}"),
        }
    }
}

#[test]
fn divergent_simd_calls_are_reported() {
    let k = broken("divergent_simd");
    let mut x = vec![0u8; 128];
    let mut out = vec![0u8; 128];
    let e = k
        .dispatch(
            &mut [&mut x, &mut out],
            [1, 1, 1],
            [32, 1, 1],
            &opts(LaneOrder::InOrder),
        )
        .unwrap_err();
    assert!(
        matches!(&e, EmuError::Divergence(m) if m.contains("simd_sum (line 11)") && m.contains("simd_max (line 13)")),
        "{e}"
    );
}

#[test]
fn barrier_after_early_return_is_reported() {
    let k = broken("early_return_barrier");
    let mut n = bytes_u32(&[40]);
    let mut out = vec![0u8; 256];
    let e = k
        .dispatch(
            &mut [&mut n, &mut out],
            [1, 1, 1],
            [64, 1, 1],
            &opts(LaneOrder::Random(5)),
        )
        .unwrap_err();
    assert!(
        matches!(&e, EmuError::Deadlock(m) if m.contains("40-63 returned")),
        "{e}"
    );
    // with every lane live it is fine
    let mut n = bytes_u32(&[64]);
    k.dispatch(
        &mut [&mut n, &mut out],
        [1, 1, 1],
        [64, 1, 1],
        &opts(LaneOrder::Random(5)),
    )
    .unwrap();
    assert_eq!(f32s(&out)[0], 63.0);
}

#[test]
fn threadgroup_out_of_range_is_reported() {
    let k = broken("tg_out_of_range");
    let mut out = vec![0u8; 128];
    let e = k
        .dispatch(
            &mut [&mut out],
            [1, 1, 1],
            [32, 1, 1],
            &opts(LaneOrder::InOrder),
        )
        .unwrap_err();
    assert!(
        matches!(&e, EmuError::ThreadgroupOutOfBounds { name, index: 32, len: 32, thread: [31, 0, 0], .. } if name == "t"),
        "{e}"
    );
}

#[test]
fn uninitialised_threadgroup_memory_reads_as_nan() {
    let src = "#include <metal_stdlib>\nusing namespace metal;\nkernel void k(device float* o [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {\n threadgroup float t[8];\n o[i] = t[i];\n}\n";
    let k = MslKernel::compile(src, "k").unwrap();
    let mut out = vec![0u8; 32];
    k.dispatch(
        &mut [&mut out],
        [1, 1, 1],
        [8, 1, 1],
        &opts(LaneOrder::InOrder),
    )
    .unwrap();
    assert!(f32s(&out).iter().all(|x| x.is_nan()));
}

#[test]
fn non_metal_cpp_is_rejected() {
    let head = "#include <metal_stdlib>\nusing namespace metal;\n";
    let body = |b: &str| {
        format!(
            "{head}kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {{\n{b}\n}}\n"
        )
    };
    for (what, src) in [
        ("double", body("double d = o[i]; o[i] = d;")),
        ("std::", body("o[i] = std::max(o[i], 1.0f);")),
        (
            "std header",
            format!("#include <cmath>\n{}", body("o[i] = 1;")),
        ),
        ("new", body("float* p = new float; o[i] = *p;")),
        (
            "virtual",
            format!(
                "{head}struct S {{ virtual float f(); }};\n{}",
                body("o[i] = 1;")
            ),
        ),
        (
            "implicit vector conversion",
            body("int4 a = int4(1); float4 b = a; o[i] = b.x;"),
        ),
        ("min of mixed types", body("o[i] = (float)min(i, 3);")),
    ] {
        let e = MslKernel::compile(&src, "k").expect_err(what);
        assert!(matches!(e, EmuError::Compile(_)), "{what}: {e}");
    }
    let e = MslKernel::compile(&format!("{head}kernel void k(device float* o, uint i [[thread_position_in_grid]]) {{ o[i] = 1; }}\n"), "k").unwrap_err();
    assert!(matches!(e, EmuError::Signature(_)), "{e}");
    let e = MslKernel::compile(&body("o[i] = 1;"), "nope").unwrap_err();
    assert!(matches!(e, EmuError::Signature(_)), "{e}");
}

#[test]
fn structs_pointers_half_2d() {
    let k = MslKernel::compile(include_str!("kernels/structs.metal"), "structs")
        .unwrap_or_else(|e| panic!("{e}"));
    // Item: float scale, uint offset, half2 hv → 12 bytes, align 4
    let items: [(f32, u32, [f32; 2]); 3] = [
        (1.0, 0, [0.5, 0.25]),
        (2.0, 1, [0.0, 0.0]),
        (-1.0, 10, [1.0, -2.0]),
    ];
    let mut ib = Vec::new();
    for (s, o, h) in items {
        ib.extend(s.to_le_bytes());
        ib.extend(o.to_le_bytes());
        for x in h {
            ib.extend(f16_bits(x).to_le_bytes());
        }
    }
    let (gx, gy) = (2u32, 2u32); // threadgroups of 8 x 4
    let (w, h) = (8 * gx, 4 * gy);
    let n = (w * h) as usize;
    let v: Vec<f32> = (0..n * 4).map(|i| (i % 7) as f32 * 0.5).collect();
    for order in ORDERS {
        let mut vb = bytes_f32(&v);
        let mut out = vec![0u8; n * 2];
        k.dispatch(
            &mut [&mut ib.clone(), &mut vb, &mut out],
            [gx, gy, 1],
            [8, 4, 1],
            &opts(order),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        for y in 0..h {
            for x in 0..w {
                let kk = (y * w + x) as usize;
                let lx = x % 8;
                let nx = (x - lx) + (lx + 1) % 8;
                let nk = (y * w + nx) as usize;
                let sum: f32 = v[nk * 4..nk * 4 + 4].iter().sum();
                let (s, o, hv) = items[kk % 3];
                let r = sum * s + o as f32 + (hv[0] + hv[1]);
                let got = u16::from_le_bytes([out[2 * kk], out[2 * kk + 1]]);
                assert_eq!(got, f16_bits(r), "({x},{y}) {order:?}");
            }
        }
    }
}

/// f32 → f16 bits, round to nearest even (normal range and zero only).
fn f16_bits(x: f32) -> u16 {
    if x == 0.0 {
        return if x.is_sign_negative() { 0x8000 } else { 0 };
    }
    let r = half_round(x);
    let b = r.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let e = ((b >> 23) & 0xff) as i32 - 127 + 15;
    let m = ((b >> 13) & 0x3ff) as u16;
    sign | ((e as u16) << 10) | m
}

#[test]
fn threadgroup_atomics_all_orders() {
    let k = MslKernel::compile(include_str!("kernels/tg_histogram.metal"), "tg_histogram")
        .unwrap_or_else(|e| panic!("{e}"));
    let n = 300u32;
    let groups = n.div_ceil(128);
    let mut rng = Rng(5);
    let a: Vec<u32> = (0..n).map(|_| rng.next()).collect();
    for order in ORDERS {
        let mut p = bytes_u32(&[n]);
        let mut ab = bytes_u32(&a);
        let mut hist = vec![0u8; groups as usize * 16 * 4];
        let mut olds = vec![0xffu8; n as usize * 4];
        k.dispatch(
            &mut [&mut p, &mut ab, &mut hist, &mut olds],
            [groups, 1, 1],
            [128, 1, 1],
            &opts(order),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let (hist, olds) = (u32s(&hist), u32s(&olds));
        for g in 0..groups as usize {
            let block = &a[g * 128..((g + 1) * 128).min(n as usize)];
            for b in 0..16u32 {
                let count = block.iter().filter(|&&x| x & 15 == b).count() as u32;
                assert_eq!(
                    hist[g * 16 + b as usize],
                    count,
                    "group {g} bin {b} {order:?}"
                );
                // Each lane of the bin got a distinct old value: 0 .. count − 1.
                let mut got: Vec<u32> = (0..block.len())
                    .filter(|&i| block[i] & 15 == b)
                    .map(|i| olds[g * 128 + i])
                    .collect();
                got.sort_unstable();
                assert_eq!(
                    got,
                    (0..count).collect::<Vec<u32>>(),
                    "group {g} bin {b} {order:?}"
                );
            }
        }
    }
}
