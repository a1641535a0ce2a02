//! Uniforms reused across layers and steps (issue 20, "no hitches"): a decode step over the
//! layers of one model uploads each distinct uniform once per device, not once per dispatch.
//! Its own test binary, so that no other test shares the device's uniform counters.

mod common;

use kvpack::{AttendOptions, Input, KvLayer, PathChoice};

const H: usize = 2;
const D: usize = 64;
const LAYERS: usize = 8;

fn rows(seed: usize, tokens: usize) -> Vec<f32> {
    common::ramp_rows(seed, tokens, H, D)
}

#[test]
fn a_decode_step_uploads_each_uniform_once() {
    let ctx = match common::gpu_context() {
        Ok(c) => c,
        Err(e) => return common::skip("a_decode_step_uploads_each_uniform_once", &e),
    };
    let method = common::parse_method("kivi:bits=4,group=32,residual=32", H, D).expect("method");
    let mut layers: Vec<Box<dyn KvLayer>> = (0..LAYERS)
        .map(|l| {
            method
                .layer_at(&ctx, l, H, D, PathChoice::Auto)
                .expect("layer")
        })
        .collect();
    let (k, v) = (rows(1, 100), rows(2, 100));
    for l in &mut layers {
        l.append(Input::F32(&k), Input::F32(&v)).expect("prefill");
    }
    let q = rows(3, 2);
    let opts = AttendOptions::new();
    for step in 0..3 {
        let (k1, v1) = (rows(10 + step, 1), rows(20 + step, 1));
        // The first layer's append and attention meet this step's new lengths ...
        let before = ctx.uniform_stats();
        layers[0]
            .append(Input::F32(&k1), Input::F32(&v1))
            .expect("append");
        let first = layers[0].attend(&q, 2 * H, &opts).expect("attend");
        let after_first = ctx.uniform_stats();
        assert!(
            after_first.1 > before.1,
            "step {step}: the first layer made no uniform (is the counter wired?)"
        );
        // ... every other layer of the same geometry and length reuses its uniforms.
        for (i, l) in layers.iter_mut().enumerate().skip(1) {
            l.append(Input::F32(&k1), Input::F32(&v1)).expect("append");
            let out = l.attend(&q, 2 * H, &opts).expect("attend");
            assert_eq!(out, first, "layer {i}: same inputs, same output");
        }
        let after = ctx.uniform_stats();
        assert_eq!(
            after.1,
            after_first.1,
            "step {step}: layers 1..{LAYERS} uploaded new uniforms ({} hits)",
            after.0 - after_first.0
        );
        assert!(after.0 > after_first.0, "step {step}: no reuse counted");
    }
}
