//! Every codec on wgpu's GL backend (issue 20's portability target: llvmpipe through EGL in CI,
//! no subgroups, so the workgroup-memory variants compiled by naga's GLSL writer and the
//! driver's GLSL compiler): appends in ragged chunks, from host memory and from the GL
//! device's own buffers (bit-identical words), attention against the CPU reference of the same
//! stored words (attention.md's bound), and the reconstruction against the CPU path's.
//! Each GL test has a device of its own (`common::gl_context`), so they run in parallel.

mod common;

use common::Target;
use kvpack::{AttendOptions, Context, GpuInput, Input};
use rand::Rng;

const H: usize = 2;
const D: usize = 40;

fn gl_parity(t: &Target, spec: &str) {
    let m = common::parse_method(spec, H, D).unwrap();
    let mut rng = common::rng("gl_parity");
    let tokens = 150;
    let offs: Vec<f32> = (0..H * D).map(|_| rng.random_range(-2.0..2.0)).collect();
    let k: Vec<f32> = (0..tokens * H * D)
        .map(|i| offs[i % (H * D)] + rng.random_range(-1.0f32..1.0))
        .collect();
    let v: Vec<f32> = (0..tokens * H * D)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let mut gl = m.layer(t.ctx(), H, D, t.path()).unwrap();
    let mut dev = m.layer(t.ctx(), H, D, t.path()).unwrap();
    let mut cpu = m
        .layer(&Context::cpu(), H, D, kvpack::PathChoice::Cpu)
        .unwrap();
    let device = t.ctx().device().expect("a GL device");
    let queue = t.ctx().queue().expect("a GL queue");
    let mut a = 0;
    while a < tokens {
        let n = rng.random_range(1..=40).min(tokens - a);
        let (ks, vs) = (
            &k[a * H * D..(a + n) * H * D],
            &v[a * H * D..(a + n) * H * D],
        );
        gl.append(Input::F32(ks), Input::F32(vs)).unwrap();
        cpu.append(Input::F32(ks), Input::F32(vs)).unwrap();
        // The same rows from buffers of the GL device.
        let buf = |x: &[f32]| {
            let b = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gl test input"),
                size: (x.len() * 4) as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            queue.write_buffer(&b, 0, bytemuck::cast_slice(x));
            b
        };
        let (kb, vb) = (buf(ks), buf(vs));
        dev.append_gpu(GpuInput::f32(&kb, 0, n), GpuInput::f32(&vb, 0, n))
            .unwrap_or_else(|e| panic!("{spec}: append_gpu on GL: {e}"));
        a += n;
    }
    assert_eq!(
        dev.snapshot().unwrap(),
        gl.snapshot().unwrap(),
        "{spec}: GL device-buffer appends store other words than host appends"
    );
    let hq = 6;
    for (tq, opts) in [
        (1, AttendOptions::default()),
        (5, AttendOptions::default().window(Some(48)).sinks(3)),
    ] {
        let q: Vec<f32> = (0..tq * hq * D)
            .map(|_| rng.random_range(-1.5f32..1.5))
            .collect();
        let got = gl.attend(&q, hq, &opts).unwrap();
        let want = gl.attend_reference(&q, hq, &opts).unwrap();
        let bound = common::gpu_attend_bound(t, &*gl, "gl_parity");
        let err = common::rel_l2_rows(&got, &want, D);
        assert!(
            err <= bound,
            "{spec} tq {tq}: GL attention vs CPU reference {err:.2e}"
        );
    }
    for side in kvpack::store::Side::ALL {
        if let (Ok(x), Ok(y)) = (gl.reconstruct_side(side), cpu.reconstruct_side(side)) {
            let err = common::rel_l2_rows(&x, &y, D);
            // Equal words reconstruct equally; a boundary value may round to the other code on
            // a GPU (turboquant.md, vecinfer.md): a few codes apart at most.
            assert!(
                err < 1e-2,
                "{spec} {side:?}: GL vs CPU reconstruction {err:.2e}"
            );
        }
    }
}
codec_tests!(gl_parity, gl);
