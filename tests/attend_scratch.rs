//! Attention's partials buffer kept by its layer across calls (issue 20, "no hitches").
//! Its own test binary: the device's allocation counter is shared by every test of a binary.

mod common;

use kvpack::{AttendOptions, Input, PathChoice};

const H: usize = 2;
const D: usize = 64;

fn rows(seed: usize, tokens: usize) -> Vec<f32> {
    common::ramp_rows(seed, tokens, H, D)
}

/// Attention's partials buffer is the layer's, kept across calls (issue 20, "no hitches"):
/// once warm, a decode step recorded with `encode_attend` into the app's own buffers
/// allocates no partials, only the few new uniform contents of the step's length. A per-call
/// partials buffer (the old behaviour) fails the second assertion.
#[test]
fn encode_attend_keeps_its_partials() {
    let ctx = match common::gpu_context() {
        Ok(c) => c,
        Err(e) => return common::skip("encode_attend_keeps_its_partials", &e),
    };
    let method = common::parse_method("kivi:bits=4,group=32,residual=32", H, D).expect("method");
    let mut layer = method.layer(&ctx, H, D, PathChoice::Auto).expect("layer");
    // Long enough for several splits, so the call merges partials.
    let n = 3000;
    layer
        .append(Input::F32(&rows(1, n)), Input::F32(&rows(2, n)))
        .expect("prefill");
    let (device, queue) = (ctx.device().unwrap(), ctx.queue().unwrap());
    let hq = 2 * H;
    let q = rows(3, hq / H);
    let bytes = (q.len() * 4) as u64;
    let buffer = |label, usage| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage,
            mapped_at_creation: false,
        })
    };
    let qb = buffer(
        "app queries",
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
    );
    let ob = buffer(
        "app output",
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
    );
    queue.write_buffer(&qb, 0, bytemuck::cast_slice(&q));
    let opts = AttendOptions::new();
    let mut per_step = Vec::new();
    for step in 0..4 {
        layer
            .append(
                Input::F32(&rows(10 + step, 1)),
                Input::F32(&rows(20 + step, 1)),
            )
            .expect("append");
        let before = ctx.allocated_bytes();
        let mut enc = device.create_command_encoder(&Default::default());
        layer
            .encode_attend(&mut enc, &qb, 1, hq, &opts, &ob)
            .expect("encode_attend");
        queue.submit([enc.finish()]);
        per_step.push(ctx.allocated_bytes() - before);
        // The kept buffer serves a correct call: the host path (same kernels) agrees.
        let host = layer.attend(&q, hq, &opts).expect("attend");
        let dev: Vec<f32> = bytemuck::pod_collect_to_vec(
            &kvpack::gpu::readback(&ctx, &ob, bytes).expect("readback"),
        );
        assert_eq!(dev, host, "step {step}: encode_attend against attend");
    }
    assert!(
        per_step[0] >= 4096,
        "the first call allocated {} bytes: no partials (does the call still merge splits?)",
        per_step[0]
    );
    for (step, b) in per_step.iter().enumerate().skip(1) {
        assert!(
            *b < 1024,
            "step {step} allocated {b} bytes (first step {}): partials made per call",
            per_step[0]
        );
    }
}
