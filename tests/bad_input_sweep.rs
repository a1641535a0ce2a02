//! The bad-input sweep, one body per (codec × path) (`codec_tests!`): every public entry point
//! of a layer and of saving/loading called with wrong shapes, NaN/±Inf, empty and huge sizes,
//! wrong paths and mismatched codecs gets a typed error, and the layer's stored words, token
//! count and memory report are exactly as before. (Appends' own bad input: tests/store.rs.)

mod common;

use common::Target;
use kvpack::{
    AttendOptions, Context, Error, Input, KvLayer, Layer, Method, PathChoice, SavedCache,
};

const H: usize = 2;
const D: usize = 40;

type Want = fn(&Error) -> bool;

fn shape(e: &Error) -> bool {
    matches!(e, Error::Shape { .. })
}
fn non_finite(e: &Error) -> bool {
    matches!(e, Error::NonFinite { .. })
}
fn config(e: &Error) -> bool {
    matches!(e, Error::Config(_))
}
fn bad_spec(e: &Error) -> bool {
    matches!(e, Error::Config(_) | Error::BitsOutOfRange { .. })
}
/// A geometry the method's calibration was not made for (VecInfer): the typed calibration
/// error vecinfer.md asks for ("a file that does not match the model ... is a typed error").
fn calib_geometry(e: &Error) -> bool {
    matches!(e, Error::Calibration { message, .. } if message.contains("used for a layer of"))
}
fn io(e: &Error) -> bool {
    matches!(e, Error::Io { .. })
}
fn cache_file(e: &Error) -> bool {
    matches!(e, Error::CacheFile { .. })
}

fn bad_input_sweep(t: &Target, spec: &str) {
    let method = common::parse_method(spec, H, D).unwrap();
    let mut rng = common::rng("bad_input_sweep");
    let (q, k, v) = common::random_qkv(&mut rng, 120, 2, 4, H, D);
    let mut layer = method.layer(t.ctx(), H, D, t.path()).unwrap();
    layer.append(Input::F32(&k), Input::F32(&v)).unwrap();
    let before = (layer.snapshot().unwrap(), layer.memory(), layer.len());
    let name = format!("{} {spec}", t.name());
    let mut checked = 0;
    let mut expect = |what: &str, r: kvpack::Result<()>, want: Want, l: &dyn KvLayer| {
        match &r {
            Err(e) if want(e) => {}
            _ => panic!("{name}: {what}: {r:?}"),
        }
        assert_eq!(
            l.snapshot().unwrap(),
            before.0,
            "{name}: {what} changed the words"
        );
        assert_eq!(
            l.memory(),
            before.1,
            "{name}: {what} changed the memory report"
        );
        assert_eq!(l.len(), before.2);
        checked += 1;
    };
    let attend =
        |l: &dyn KvLayer, q: &[f32], hq: usize, o: AttendOptions| l.attend(q, hq, &o).map(|_| ());
    let d = AttendOptions::default;
    let l = &*layer;

    // Attention: shapes, non-finite values, options.
    let mut nan = q.clone();
    nan[5] = f32::NAN;
    let mut inf = q.clone();
    inf[77] = f32::NEG_INFINITY;
    expect("attend NaN query", attend(l, &nan, 4, d()), non_finite, l);
    expect("attend -Inf query", attend(l, &inf, 4, d()), non_finite, l);
    expect("attend ragged query", attend(l, &q[1..], 4, d()), shape, l);
    expect("attend empty query", attend(l, &[], 4, d()), shape, l);
    expect("attend 0 query heads", attend(l, &q, 0, d()), shape, l);
    expect(
        "attend 3 query heads over 2",
        attend(l, &q[..3 * D], 3, d()),
        shape,
        l,
    );
    let long = vec![0.5f32; 121 * 4 * D];
    expect(
        "attend more rows than tokens",
        attend(l, &long, 4, d()),
        shape,
        l,
    );
    let o = |f: fn(&mut AttendOptions)| {
        let mut o = d();
        f(&mut o);
        o
    };
    expect(
        "attend NaN scale",
        attend(l, &q, 4, o(|o| o.scale = Some(f32::NAN))),
        non_finite,
        l,
    );
    expect(
        "attend window 0",
        attend(l, &q, 4, o(|o| o.window = Some(0))),
        config,
        l,
    );
    expect(
        "attend chunk 33",
        attend(l, &q, 4, o(|o| o.chunk_tokens = Some(33))),
        config,
        l,
    );
    expect(
        "attend_reference NaN query",
        l.attend_reference(&nan, 4, &d()).map(|_| ()),
        non_finite,
        l,
    );

    // Saving and loading: wrong paths, mismatched files and codecs.
    let dir = std::env::temp_dir().join(format!(
        "kvpack-sweep-{}-{}",
        std::process::id(),
        name.replace([' ', ':', ',', '=', '/'], "_")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let save = |p: &std::path::Path| kvpack::persist::save_layers(p, [l]);
    expect(
        "save into a missing folder",
        save(&dir.join("no/such/x.kvc")),
        io,
        l,
    );
    expect("save onto a folder", save(&dir), io, l);
    let load = |p: &std::path::Path| kvpack::persist::load_layers(p, t.ctx(), t.path()).map(|_| ());
    expect("load a missing file", load(&dir.join("missing.kvc")), io, l);
    std::fs::write(dir.join("empty.kvc"), b"").unwrap();
    expect(
        "load an empty file",
        load(&dir.join("empty.kvc")),
        cache_file,
        l,
    );
    let bytes = SavedCache::of_layers([l]).unwrap().to_bytes().unwrap();
    let saved = SavedCache::from_bytes(&bytes).unwrap();
    expect(
        "load for another geometry",
        saved.expect(1, H + 1, D, None),
        cache_file,
        l,
    );
    let other = Method::parse("kivi:bits=3,group=8,residual=24").unwrap();
    expect(
        "load for another method",
        saved.expect(1, H, D, Some(&other)),
        cache_file,
        l,
    );
    // A snapshot of this layer restored as another method (mismatched codecs), and as this
    // method at another geometry.
    let snap = &before.0;
    let restore = |m: &Method, h: usize| {
        Layer::from_snapshot(t.ctx(), 0, h, D, m, t.path(), snap).map(|_| ())
    };
    expect("restore as another method", restore(&other, H), shape, l);
    // A calibrated method (VecInfer) is refused for another geometry by its calibration
    // before the snapshot's shape is looked at.
    let calibrated = method.to_string().contains("calib=");
    let geometry: Want = if calibrated { calib_geometry } else { shape };
    if calibrated {
        eprintln!("{name}: another geometry is the calibration's typed error, not Error::Shape");
    }
    expect(
        "restore at another geometry",
        restore(&method, H + 1),
        geometry,
        l,
    );
    let mut lied = saved.clone();
    lied.layers[0].snapshot.tokens += 1;
    expect(
        "save a snapshot that lies about its tokens",
        lied.to_bytes().map(|_| ()),
        config,
        l,
    );
    let mut nan_rows = saved.clone();
    if let Some(x) = nan_rows.layers[0].snapshot.keys.residual.first_mut() {
        *x = half::f16::NAN;
        expect(
            "save NaN residual rows",
            nan_rows.to_bytes().map(|_| ()),
            config,
            l,
        );
        let r = SavedCache::to_layers(&nan_rows, t.ctx(), t.path()).map(|_| ());
        expect("restore NaN residual rows", r, non_finite, l);
    }

    // New layers: zero and huge sizes, bad specs, another context's path.
    let ctx = t.ctx();
    let new = |h: usize, dd: usize| method.layer(ctx, h, dd, t.path()).map(|_| ());
    expect("a layer of 0 heads", new(0, D), shape, l);
    expect("a layer of width 0", new(H, 0), shape, l);
    expect(
        "a layer of 2^21 elements per token",
        new(1 << 11, 1 << 10),
        shape,
        l,
    );
    for bad in [
        "",
        "kivi:bits=0",
        "kivi:bits=9",
        "kivi:group=0",
        "nope",
        "f16/kivi/f16",
    ] {
        expect(
            &format!("method {bad:?}"),
            Method::parse(bad)
                .and_then(|m| m.layer(ctx, H, D, t.path()))
                .map(|_| ()),
            bad_spec,
            l,
        );
    }
    if !t.is_gpu() {
        let r = method
            .layer(&Context::cpu(), H, D, PathChoice::Wgsl)
            .map(|_| ());
        match r {
            Err(Error::PathUnavailable { .. } | Error::Gpu { .. }) => checked += 1,
            r => panic!("{name}: a WGSL layer on a CPU context: {r:?}"),
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    eprintln!("{name}: {checked} bad inputs, each a typed error, nothing changed");
}
codec_tests!(bad_input_sweep);
