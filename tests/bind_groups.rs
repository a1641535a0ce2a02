//! Bind groups kept by a layer across its recorded attention calls (issue 12: "uniforms/bind
//! groups cached per layer instead of per call"; src/gpu/bind_cache.rs). A decode step
//! recorded with `encode_attend` into the app's own buffers makes no bind group once warm,
//! although the step's length (in the uniforms, at dynamic offsets of the device's uniform
//! arena) changed; its output equals the blocking `attend`'s and the CPU reference's (within
//! 1e-4 per row); a group is keyed by every
//! buffer it binds (a new output buffer gets the result, not the old one); and the buffers
//! of groups no longer used are released a few calls later and when the layer is dropped.
//! Its own test binary, on a device of its own: the counters are the device's.

mod common;

#[path = "../examples/soak/core.rs"]
mod soak;

use kvpack::gpu::bind_cache::KEEP_CALLS;
use kvpack::{AttendOptions, Input, PathChoice};

const H: usize = 2;
const D: usize = 64;

fn rows(seed: usize, tokens: usize) -> Vec<f32> {
    common::ramp_rows(seed, tokens, H, D)
}

#[test]
fn recorded_decode_steps_reuse_their_bind_groups() {
    let (ctx, count) = match soak::gpu_with_buffer_count() {
        Ok(c) => c,
        Err(e) => return common::skip("recorded_decode_steps_reuse_their_bind_groups", &e),
    };
    let (device, queue) = (ctx.device().unwrap().clone(), ctx.queue().unwrap().clone());
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
    let out_usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
    let read = |b: &wgpu::Buffer| -> Vec<f32> {
        bytemuck::pod_collect_to_vec(&kvpack::gpu::readback(&ctx, b, bytes).expect("readback"))
    };
    let opts = AttendOptions::new();
    for spec in ["kivi:bits=4,group=32,residual=32", "f16"] {
        let before_layer = count().expect("wgpu counts buffers on this backend");
        let method = common::parse_method(spec, H, D).expect("method");
        let mut layer = method.layer(&ctx, H, D, PathChoice::Auto).expect("layer");
        // Long enough for several splits: each call records the partials kernel and the merge.
        let n = 3000;
        layer
            .append(Input::F32(&rows(1, n)), Input::F32(&rows(2, n)))
            .expect("prefill");
        let qb = buffer(
            "app queries",
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        );
        let ob = buffer("app output", out_usage);
        queue.write_buffer(&qb, 0, bytemuck::cast_slice(&q));
        // Decode steps: one token appended, then attention recorded into the app's buffers.
        for step in 0..5 {
            layer
                .append(
                    Input::F32(&rows(10 + step, 1)),
                    Input::F32(&rows(20 + step, 1)),
                )
                .expect("append");
            let (hits, misses) = ctx.bind_group_stats();
            let mut enc = device.create_command_encoder(&Default::default());
            layer
                .encode_attend(&mut enc, &qb, 1, hq, &opts, &ob)
                .expect("encode_attend");
            queue.submit([enc.finish()]);
            let (hits, misses) = {
                let now = ctx.bind_group_stats();
                (now.0 - hits, now.1 - misses)
            };
            let host = layer.attend(&q, hq, &opts).expect("attend");
            let got = read(&ob);
            assert_eq!(
                got, host,
                "{spec} step {step}: encode_attend against attend"
            );
            // And against the CPU reference: the blocking call reads the same uniform slots.
            let cpu = layer.attend_reference(&q, hq, &opts).expect("reference");
            let err = common::rel_l2_rows(&got, &cpu, D);
            assert!(
                err <= 1e-4,
                "{spec} step {step}: worst row {err:.2e} off the CPU path"
            );
            if step == 0 {
                assert!(
                    misses >= 2,
                    "{spec}: the first call made {misses} bind groups (does it still merge?)"
                );
            } else {
                assert_eq!(
                    (hits >= 2, misses),
                    (true, 0),
                    "{spec} step {step}: {misses} bind groups made, {hits} reused (length {})",
                    n + step + 1
                );
            }
        }
        // A new output buffer at every call: the result lands in it (a group keyed without
        // it would write the old one), and the groups of the dropped ones are released.
        let mut live = Vec::new();
        for call in 0..KEEP_CALLS as usize + 5 {
            let fresh = buffer("app output, new per call", out_usage);
            let mut enc = device.create_command_encoder(&Default::default());
            layer
                .encode_attend(&mut enc, &qb, 1, hq, &opts, &fresh)
                .expect("encode_attend");
            queue.submit([enc.finish()]);
            let host = layer.attend(&q, hq, &opts).expect("attend");
            assert_eq!(
                read(&fresh),
                host,
                "{spec} call {call}: into a new output buffer"
            );
            drop(fresh);
            live.push(count().expect("count"));
        }
        let settled = &live[KEEP_CALLS as usize + 1..];
        assert!(
            settled.iter().all(|&b| b == settled[0]),
            "{spec}: live buffers grow with the calls' dropped output buffers: {live:?}"
        );
        drop((layer, qb, ob));
        assert_eq!(
            count().expect("count"),
            before_layer,
            "{spec}: buffers alive after dropping the layer and the app's buffers"
        );
    }
}
