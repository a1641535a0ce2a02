//! Criterion benchmarks of the CPU path (the fallback for machines without a usable GPU):
//! bit packing and a KIVI prefill of one layer, on data that changes between iterations.
//!
//! `cargo bench --bench cpu_reference`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvpack::{BitPacker, Context, Input, KiviConfig, KvLayer, Layer, PathChoice};

fn lcg(state: &mut u64) -> u32 {
    *state = state
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (*state >> 33) as u32
}

fn bitpack(c: &mut Criterion) {
    let packer = BitPacker::new(&Context::cpu()).expect("cpu packer");
    let mut g = c.benchmark_group("cpu_bitpack");
    let n = 1 << 20;
    let mut state = 1u64;
    // Four distinct inputs, rotated, so no iteration packs what the previous one packed.
    for bits in [2u32, 3, 4] {
        let inputs: Vec<Vec<u8>> = (0..4)
            .map(|_| {
                (0..n)
                    .map(|_| (lcg(&mut state) & ((1 << bits) - 1)) as u8)
                    .collect()
            })
            .collect();
        g.throughput(Throughput::Bytes(n as u64));
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("pack", bits), &bits, |b, &bits| {
            b.iter(|| {
                i = (i + 1) % inputs.len();
                black_box(packer.pack(&inputs[i], bits).expect("pack"))
            })
        });
    }
    g.finish();
}

fn kivi_prefill(c: &mut Criterion) {
    let ctx = Context::cpu();
    let (tokens, heads, dim) = (1024, 8, 128);
    let mut state = 2u64;
    let data: Vec<(Vec<f32>, Vec<f32>)> = (0..2)
        .map(|_| {
            let mut gen_ = || {
                (0..tokens * heads * dim)
                    .map(|_| lcg(&mut state) as f32 / u32::MAX as f32 - 0.5)
                    .collect::<Vec<_>>()
            };
            (gen_(), gen_())
        })
        .collect();
    let mut g = c.benchmark_group("cpu_kivi_prefill");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((2 * tokens * heads * dim * 2) as u64));
    for bits in [2u32, 4] {
        let cfg = KiviConfig::uniform(bits, 32, 128);
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("T1024_H8_D128", bits), &bits, |b, _| {
            b.iter(|| {
                i = (i + 1) % data.len();
                let mut layer =
                    Layer::kivi(&ctx, heads, dim, &cfg, PathChoice::Cpu).expect("layer");
                layer
                    .append(Input::F32(&data[i].0), Input::F32(&data[i].1))
                    .expect("append");
                black_box(layer.memory())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bitpack, kivi_prefill);
criterion_main!(benches);
