//! A lost device and allocations beyond the device's limits are typed errors, never panics:
//! a layer on a destroyed device (`wgpu::Device::destroy`, the loss wgpu lets a program cause)
//! refuses appends, attention, snapshots and saves with [`Error::DeviceLost`], still reports
//! its memory, and a file saved before the loss loads on a new device and on the CPU. One test
//! per binary: the destroyed device is this test's own.

mod common;

use kvpack::{
    AttendOptions, Context, Error, HeadlessOptions, Input, Method, PathChoice, SavedCache,
};

fn own_gpu(test: &str) -> Option<Context> {
    let opts = HeadlessOptions::default().require_gpu(true);
    match Context::headless_with(&opts) {
        Ok(c) => Some(c),
        Err(e) => {
            common::skip(test, &e.to_string());
            None
        }
    }
}

#[test]
fn device_loss_and_limits_are_typed_errors() {
    let Some(ctx) = own_gpu("device_loss_and_limits_are_typed_errors") else {
        return;
    };
    let (h, d) = (2, 64);
    let method = Method::parse("kivi:bits=2,group=32,residual=32").unwrap();
    let mut rng = common::rng("device_loss");
    let (q, k, v) = common::random_qkv(&mut rng, 200, 2, 4, h, d);
    let row = h * d;
    let mut layer = method.layer(&ctx, h, d, PathChoice::Wgsl).unwrap();
    layer
        .append(Input::F32(&k[..150 * row]), Input::F32(&v[..150 * row]))
        .unwrap();

    // Beyond the device's limits: typed, and the layer is as it was.
    let before = layer.snapshot().unwrap();
    match kvpack::gpu::storage_buffer(&ctx, "too big", 1 << 50) {
        Err(Error::Limit { needed, .. }) => assert!(needed >= 1 << 50),
        r => panic!("a 1 PiB buffer: {r:?}"),
    }
    let small = ctx.with_max_storage_binding_size(4096).unwrap();
    match method.layer(&small, h, d, PathChoice::Wgsl) {
        Err(Error::Limit { what, .. }) => assert!(what.contains("residual window"), "{what}"),
        r => panic!("a ring past a 4 KiB binding limit: {r:?}"),
    }
    assert_eq!(layer.snapshot().unwrap(), before);

    let saved = SavedCache::of_layers([&*layer])
        .unwrap()
        .to_bytes()
        .unwrap();
    let mem = layer.memory();

    // The loss.
    ctx.device().expect("a GPU context").destroy();
    let lost = |what: &str, r: kvpack::Result<()>| match r {
        Err(Error::DeviceLost { .. }) => eprintln!("{what}: {}", r.unwrap_err()),
        r => panic!("{what} on a lost device: {r:?}"),
    };
    lost(
        "append",
        layer.append(Input::F32(&k[150 * row..]), Input::F32(&v[150 * row..])),
    );
    lost(
        "attend",
        layer.attend(&q, 4, &AttendOptions::default()).map(|_| ()),
    );
    lost("snapshot", layer.snapshot().map(|_| ()));
    lost("save", SavedCache::of_layers([&*layer]).map(|_| ()));
    lost(
        "a new layer",
        method.layer(&ctx, h, d, PathChoice::Wgsl).map(|_| ()),
    );
    assert_eq!(
        layer.len(),
        150,
        "a failed append on a lost device counts nothing"
    );
    assert_eq!(layer.memory(), mem, "the memory report is unchanged");

    // What was saved before the loss loads on the CPU and on a new device, word for word.
    let file = SavedCache::from_bytes(&saved).unwrap();
    let cpu = file.to_layers(&Context::cpu(), PathChoice::Cpu).unwrap();
    assert_eq!(cpu[0].snapshot().unwrap(), before);
    if let Some(fresh) = own_gpu("device_loss[fresh device]") {
        let again = file.to_layers(&fresh, PathChoice::Wgsl).unwrap();
        assert_eq!(again[0].snapshot().unwrap(), before);
    }
}
