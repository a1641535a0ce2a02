//! A short soak (examples/soak runs the million tokens): one layer appended chunk by chunk,
//! bytes held every few thousand tokens: payload exactly linear in the tokens (methods
//! without eviction; under eviction, bytes held flat once the budget is reached), held within the store's growth slack of it, the device's live wgpu buffers
//! bounded by the segments the cache needs and back to the count before the layer once it is
//! dropped (no leak), and attention checked against the CPU reference along the way.

mod common;

#[path = "../examples/soak/core.rs"]
mod soak;

use kvpack::{Method, PathChoice};

fn check(samples: &[soak::Sample], name: &str) {
    let last = samples.last().unwrap();
    // Linear: from a quarter of the run on, bytes in use lie on the line through that sample
    // and the last (within 1 %: whole blocks move in steps of G tokens).
    let q = samples
        .iter()
        .find(|x| x.tokens >= last.tokens / 4)
        .unwrap();
    let slope = (last.payload - q.payload) as f64 / (last.tokens - q.tokens) as f64;
    assert!(slope > 0.0, "{name}: payload does not grow");
    for x in samples.iter().filter(|x| x.tokens >= q.tokens) {
        let line = q.payload as f64 + slope * (x.tokens - q.tokens) as f64;
        let off = (x.payload as f64 - line).abs() / line;
        assert!(
            off <= 0.01,
            "{name}: payload {} at {} tokens is {:.2} % off the line",
            x.payload,
            x.tokens,
            off * 100.0
        );
        let slack = 1.125 * x.payload as f64 + 64.0 * 1024.0;
        assert!(
            x.held >= x.payload && x.held as f64 <= slack,
            "{name}: held {} payload {} at {}",
            x.held,
            x.payload,
            x.tokens
        );
    }
    for x in samples.iter().filter_map(|x| x.spot_error) {
        assert!(
            x <= 1e-4,
            "{name}: attention vs the CPU reference: rel L2 {x:e}"
        );
    }
}

#[test]
fn soak_cpu_short() {
    let ctx = kvpack::Context::cpu();
    let t0 = std::time::Instant::now();
    let s = soak::Soak {
        ctx: &ctx,
        path: PathChoice::Cpu,
        method: Method::parse("kivi-2").unwrap(),
        heads: 2,
        dim: 64,
        tokens: 100_000,
        chunk: 1000,
        every: 10_000,
        spot_every: 0,
        buffers: &|| None,
    };
    let (samples, _) = soak::run(&s).expect("soak");
    assert_eq!(samples.len(), 11);
    check(&samples, "cpu");
    eprintln!(
        "cpu: 100k tokens in {:.1} s, {} bytes held",
        t0.elapsed().as_secs_f64(),
        samples.last().unwrap().held
    );
}

/// The GPU soaks' settings: one layer of `spec` (2 heads × 64) on WGSL, 30k tokens appended
/// 500 at a time, bytes held sampled every 2k tokens and attention spot-checked every 10k.
fn short_gpu_soak<'a>(
    ctx: &'a kvpack::Context,
    buffers: &'a dyn Fn() -> Option<usize>,
    spec: &str,
) -> soak::Soak<'a> {
    soak::Soak {
        ctx,
        path: PathChoice::Wgsl,
        method: Method::parse(spec).unwrap(),
        heads: 2,
        dim: 64,
        tokens: 30_000,
        chunk: 500,
        every: 2_000,
        spot_every: 10_000,
        buffers,
    }
}

#[test]
fn soak_gpu_short() {
    let (ctx, count) = match soak::gpu_with_buffer_count() {
        Ok(x) => x,
        Err(e) => return common::skip("soak_gpu_short", &e),
    };
    let baseline = count().expect("wgpu counts buffers on this backend");
    for spec in ["kivi-2", "f16"] {
        let s = short_gpu_soak(&ctx, &*count, spec);
        let (samples, layer) = soak::run(&s).expect("soak");
        check(&samples, spec);
        assert_eq!(samples.iter().filter(|x| x.spot_error.is_some()).count(), 3);
        // Buffers: never more than a constant beyond the first sample's (segments grow in
        // place up to their cap; 30k tokens need at most a few segments), and none left after
        // the layer is dropped.
        let most = samples.iter().filter_map(|x| x.buffers).max().unwrap();
        let first = samples[0].buffers.unwrap();
        assert!(
            most <= first + 16,
            "{spec}: {most} buffers alive at most, {first} at the start"
        );
        drop(layer);
        let after = count().unwrap();
        assert_eq!(
            after, baseline,
            "{spec}: wgpu buffers alive after dropping the layer"
        );
        eprintln!(
            "{spec} on wgsl: buffers {baseline} before, at most {most} during, {after} after"
        );
    }
}

/// Eviction on the GPU path: 30k tokens under a budget of 1024 (KIVI-2, key norm): tokens
/// held stay within the budget and one unit, bytes held are the same at every sample once
/// the budget is reached, attention matches the CPU reference on the stored words at the
/// held tokens' positions, the wgpu buffers stay flat (from the first attention call, whose
/// partials buffer the layer keeps) and none is left after the drop.
#[test]
fn soak_gpu_eviction_short() {
    let (ctx, count) = match soak::gpu_with_buffer_count() {
        Ok(x) => x,
        Err(e) => return common::skip("soak_gpu_eviction_short", &e),
    };
    let baseline = count().expect("wgpu counts buffers on this backend");
    let spec = "kivi-2+knorm:budget=1024";
    let s = short_gpu_soak(&ctx, &*count, spec);
    let (samples, layer) = soak::run(&s).expect("soak");
    let steady: Vec<&soak::Sample> = samples.iter().filter(|x| x.tokens >= 4_000).collect();
    for x in &samples {
        assert!(
            x.held_tokens <= 1024 + 32,
            "{spec}: {} tokens held at {}",
            x.held_tokens,
            x.tokens
        );
    }
    assert!(
        steady.iter().all(|x| x.held == steady[0].held),
        "{spec}: bytes held move under a fixed budget: {:?}",
        steady.iter().map(|x| x.held).collect::<Vec<_>>()
    );
    let spots: Vec<f64> = samples.iter().filter_map(|x| x.spot_error).collect();
    assert_eq!(spots.len(), 3);
    assert!(
        spots.iter().all(|&e| e <= 1e-4),
        "{spec}: attention vs the CPU reference {spots:?}"
    );
    // From the first attention call on: the layer keeps its attention partials buffer
    // (replaced when a call needs more, never added to).
    let attended = steady
        .iter()
        .position(|x| x.spot_error.is_some())
        .expect("a spot check past 4k tokens");
    let buffers: Vec<usize> = steady[attended..]
        .iter()
        .filter_map(|x| x.buffers)
        .collect();
    assert!(
        buffers.len() >= 4 && buffers.iter().all(|&b| b == buffers[0]),
        "{spec}: live buffers move: {buffers:?} (all steady samples: {:?})",
        steady.iter().filter_map(|x| x.buffers).collect::<Vec<_>>()
    );
    drop(layer);
    assert_eq!(
        count().unwrap(),
        baseline,
        "{spec}: buffers left after drop"
    );
    eprintln!(
        "{spec} on wgsl: {} bytes held from 4k to 30k tokens ({} tokens held)",
        steady[0].held,
        samples.last().unwrap().held_tokens
    );
}
