//! A lost device and allocations beyond the device's limits are typed errors, never panics:
//! a layer on a destroyed device (`wgpu::Device::destroy`, the loss wgpu lets a program cause)
//! refuses appends, attention, snapshots and saves with [`Error::DeviceLost`], still reports
//! its memory, and a file saved before the loss loads on a new device and on the CPU. The
//! same on an application's own device ([`Context::from_device`]), whose device-lost callback
//! kvpack does not own: before the application reports the loss
//! ([`Context::report_device_lost`]) every call still fails with a typed error, after it with
//! [`Error::DeviceLost`]. Each test destroys a device of its own.

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

#[test]
fn an_application_device_reports_its_loss() {
    let Some(own) = own_gpu("an_application_device_reports_its_loss") else {
        return;
    };
    let device = own.device().expect("a GPU context").clone();
    let ctx = Context::from_device(device.clone(), own.queue().unwrap().clone()).unwrap();
    let (h, d) = (2, 64);
    let method = Method::parse("turboquant-mse:bits=3,residual=32").unwrap();
    let mut rng = common::rng("app_device_loss");
    let (q, k, v) = common::random_qkv(&mut rng, 200, 2, 4, h, d);
    let row = h * d;
    let mut layer = method.layer(&ctx, h, d, PathChoice::Wgsl).unwrap();
    layer
        .append(Input::F32(&k[..150 * row]), Input::F32(&v[..150 * row]))
        .unwrap();
    let before = layer.snapshot().unwrap();
    let saved = SavedCache::of_layers([&*layer])
        .unwrap()
        .to_bytes()
        .unwrap();
    let mem = layer.memory();
    assert_eq!(ctx.device_lost(), None);

    // The application's callback stays the application's: kvpack installed none.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (kv, app_saw) = (ctx.clone(), seen.clone());
    device.set_device_lost_callback(move |reason, message| {
        *app_saw.lock().unwrap() = Some(reason);
        // A clone of the context made before the loss reports for every clone.
        kv.report_device_lost(reason, &message);
    });
    // Replacing the callback kvpack installed on its own device is not taken for a loss.
    let _ = device.poll(wgpu::PollType::Poll);
    assert_eq!(
        own.device_lost(),
        None,
        "a replaced callback taken for a loss"
    );
    device.destroy();
    let _ = device.poll(wgpu::PollType::Poll);
    assert_eq!(
        *seen.lock().unwrap(),
        Some(wgpu::DeviceLostReason::Destroyed),
        "the application's callback ran"
    );
    let reason = ctx
        .device_lost()
        .expect("the loss was reported")
        .to_string();
    assert!(reason.contains("Destroyed"), "{reason}");
    let lost = |what: &str, r: kvpack::Result<()>| match r {
        Err(Error::DeviceLost { message, .. }) => assert_eq!(message, reason, "{what}"),
        r => panic!("{what} on a reported loss: {r:?}"),
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
    lost(
        "a derived context's layer",
        ctx.with_path(PathChoice::Wgsl)
            .and_then(|c| method.layer(&c, h, d, PathChoice::Wgsl))
            .map(|_| ()),
    );
    assert_eq!(layer.len(), 150);
    assert_eq!(layer.memory(), mem);
    // The CPU path of the same context needs no device: it stores what a CPU-only context
    // stores. (Not `before`: the GPU's TurboQuant codes may differ from the CPU's by ±1 next
    // to a boundary, spec/turboquant.md "Cross-backend agreement"; seed 13683844206508653169
    // has such a code on lavapipe.)
    let mut cpu = method.layer(&ctx, h, d, PathChoice::Cpu).unwrap();
    cpu.append(Input::F32(&k[..150 * row]), Input::F32(&v[..150 * row]))
        .unwrap();
    let mut reference = method
        .layer(&Context::cpu(), h, d, PathChoice::Cpu)
        .unwrap();
    reference
        .append(Input::F32(&k[..150 * row]), Input::F32(&v[..150 * row]))
        .unwrap();
    assert_eq!(cpu.snapshot().unwrap(), reference.snapshot().unwrap());
    let file = SavedCache::from_bytes(&saved).unwrap();
    let back = file.to_layers(&Context::cpu(), PathChoice::Cpu).unwrap();
    assert_eq!(back[0].snapshot().unwrap(), before);
}

/// Before the application reports the loss, kvpack cannot know of it, and still answers
/// with typed errors (wgpu's message), never a panic.
#[test]
fn an_unreported_loss_is_still_a_typed_error() {
    let Some(own) = own_gpu("an_unreported_loss_is_still_a_typed_error") else {
        return;
    };
    let device = own.device().expect("a GPU context").clone();
    let ctx = Context::from_device(device.clone(), own.queue().unwrap().clone()).unwrap();
    let (h, d) = (2, 64);
    let method = Method::parse("kivi:bits=2,group=32,residual=32").unwrap();
    let mut rng = common::rng("app_device_unreported");
    let (q, k, v) = common::random_qkv(&mut rng, 200, 2, 4, h, d);
    let row = h * d;
    let mut layer = method.layer(&ctx, h, d, PathChoice::Wgsl).unwrap();
    layer
        .append(Input::F32(&k[..150 * row]), Input::F32(&v[..150 * row]))
        .unwrap();
    let mem = layer.memory();
    device.destroy();
    let typed = |what: &str, r: kvpack::Result<()>| match r {
        Err(e @ (Error::Gpu { .. } | Error::DeviceLost { .. })) => eprintln!("{what}: {e}"),
        r => panic!("{what} on an unreported loss: {r:?}"),
    };
    typed(
        "append",
        layer.append(Input::F32(&k[150 * row..]), Input::F32(&v[150 * row..])),
    );
    typed(
        "attend",
        layer.attend(&q, 4, &AttendOptions::default()).map(|_| ()),
    );
    typed("snapshot", layer.snapshot().map(|_| ()));
    typed("save", SavedCache::of_layers([&*layer]).map(|_| ()));
    assert_eq!(layer.len(), 150, "a failed append counts nothing");
    assert_eq!(layer.memory(), mem);
}
