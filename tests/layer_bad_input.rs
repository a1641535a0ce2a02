//! Bad input through every `KvLayer` entry point, one generic body per (codec × path)
//! (`codec_tests!(_, with_qjl)`, issue 19 point 5): wrong shapes, NaN/±Inf and values beyond
//! f16 (as f32 and as f16 input), empty and mismatched k/v, norms beyond f16 for codecs that
//! store one, bad queries and options. Each is the typed error variant it documents, and
//! afterwards `len()`, `memory()` and the stored words are exactly what they were; the layer
//! then still takes good input.

mod common;

use common::Target;
use half::f16;
use kvpack::{AttendOptions, Error, Input, KvLayer, Snapshot};
use rand::Rng;

const H: usize = 2;
const D: usize = 40;
const ROW: usize = H * D;

type State = (Snapshot, kvpack::MemoryReport, usize);

fn state(l: &dyn KvLayer) -> State {
    (l.snapshot().expect("snapshot"), l.memory(), l.len())
}

fn unchanged(l: &dyn KvLayer, before: &State, what: &str) {
    let after = state(l);
    assert!(after.0 == before.0, "{what}: the stored words changed");
    assert_eq!(after.1, before.1, "{what}: memory() changed");
    assert_eq!(after.2, before.2, "{what}: len() changed");
}

/// `r` is the typed error `want` names (checked by the closure).
fn expect_err(r: kvpack::Result<()>, what: &str, want: &str, ok: impl Fn(&Error) -> bool) {
    match r {
        Err(e) if ok(&e) => {}
        other => panic!("{what}: expected {want}, got {other:?}"),
    }
}

fn layer_bad_input_is_typed_and_changes_nothing(t: &Target, spec: &str) {
    let mut rng = common::rng("layer_bad_input");
    let method = common::parse_method(spec, H, D).expect("method");
    let mut l = method
        .layer(t.ctx(), H, D, t.path())
        .unwrap_or_else(|e| panic!("{} {spec}: {e}", t.name()));
    let rows = |rng: &mut rand::rngs::StdRng, n: usize| -> Vec<f32> {
        (0..n * ROW).map(|_| rng.random_range(-2.0..2.0)).collect()
    };
    // Enough tokens that both sides hold quantized blocks and a window.
    let (k0, v0) = (rows(&mut rng, 130), rows(&mut rng, 130));
    l.append(Input::F32(&k0), Input::F32(&v0)).expect("append");
    let before = state(&*l);
    assert!(
        before.0.keys.quantized > 0 && before.0.values.quantized > 0,
        "{spec}: nothing quantized before the bad input"
    );
    let (k, v) = (rows(&mut rng, 30), rows(&mut rng, 30));
    let name = |w: &str| format!("{} {spec}: {w}", t.name());
    let with = |x: &[f32], at: usize, val: f32| {
        let mut b = x.to_vec();
        b[at] = val;
        b
    };
    let non_finite =
        |e: &Error, side: &str| matches!(e, Error::NonFinite { what, .. } if *what == side);
    let shape = |e: &Error, side: &str| matches!(e, Error::Shape { what, .. } if *what == side);

    // NaN, ±Inf and beyond f16, as f32 input, on either side, at the first, a middle and the
    // last value.
    for (what, side, bk, bv) in [
        ("NaN first in k", "k", with(&k, 0, f32::NAN), v.clone()),
        (
            "+Inf mid v",
            "v",
            k.clone(),
            with(&v, 17 * ROW + 5, f32::INFINITY),
        ),
        (
            "-Inf last k",
            "k",
            with(&k, 30 * ROW - 1, f32::NEG_INFINITY),
            v.clone(),
        ),
        ("70000 in v", "v", k.clone(), with(&v, 3, 70_000.0)),
        ("-1e30 in k", "k", with(&k, ROW, -1e30), v.clone()),
    ] {
        let r = l.append(Input::F32(&bk), Input::F32(&bv));
        expect_err(r, &name(what), "NonFinite", |e| non_finite(e, side));
        unchanged(&*l, &before, &name(what));
    }
    // The same as f16 input.
    let h = |x: &[f32]| x.iter().map(|&a| f16::from_f32(a)).collect::<Vec<_>>();
    let (kh, vh) = (h(&k), h(&v));
    for (what, side, bk, bv) in [
        (
            "f16 NaN in k",
            "k",
            {
                let mut b = kh.clone();
                b[9] = f16::NAN;
                b
            },
            vh.clone(),
        ),
        ("f16 +Inf in v", "v", kh.clone(), {
            let mut b = vh.clone();
            b[29 * ROW] = f16::INFINITY;
            b
        }),
    ] {
        let r = l.append(Input::F16(&bk), Input::F16(&bv));
        expect_err(r, &name(what), "NonFinite", |e| non_finite(e, side));
        unchanged(&*l, &before, &name(what));
    }
    // Shapes: ragged k, ragged v, k and v of different token counts, one side empty.
    for (what, side, bk, bv) in [
        ("ragged k", "k", &k[1..], &v[1..]),
        ("ragged v only", "v", &k[..], &v[..v.len() - 1]),
        ("v one token short", "v", &k[..], &v[ROW..]),
        ("k one token short", "v", &k[ROW..], &v[..]),
        ("k empty, v not", "v", &k[..0], &v[..]),
        ("v empty, k not", "v", &k[..], &v[..0]),
        ("half a row each", "k", &k[..ROW / 2], &v[..ROW / 2]),
    ] {
        let r = l.append(Input::F32(bk), Input::F32(bv));
        expect_err(r, &name(what), "Shape", |e| shape(e, side));
        unchanged(&*l, &before, &name(what));
    }
    // Nothing to append: a no-op.
    l.append(Input::F32(&[]), Input::F32(&[]))
        .unwrap_or_else(|e| panic!("{}: {e}", name("empty append")));
    unchanged(&*l, &before, &name("empty append"));
    // A norm beyond f16 (every value 60000: finite in f16, ‖x‖ ≈ 3.8e5): codecs that store a
    // per-token norm refuse it at entry (Config), the others take it; refusal changes nothing.
    let key_norm = spec.starts_with("qjl") || spec.starts_with("turboquant");
    let value_norm = spec.contains("turboquant");
    let big = vec![60_000.0f32; 30 * ROW];
    if key_norm || value_norm {
        let r = if key_norm {
            l.append(Input::F32(&big), Input::F32(&v))
        } else {
            l.append(Input::F32(&k), Input::F32(&big))
        };
        expect_err(
            r,
            &name("norm beyond f16"),
            "Config",
            |e| matches!(e, Error::Config(m) if m.contains("norm")),
        );
        unchanged(&*l, &before, &name("norm beyond f16"));
    }
    if !(key_norm && value_norm) {
        // The sides without a per-token norm take it (a fresh layer; 60000 is finite in f16).
        let mut fresh = method
            .layer(t.ctx(), H, D, t.path())
            .unwrap_or_else(|e| panic!("{}: {e}", name("fresh layer")));
        let bk = if key_norm { &k } else { &big };
        let bv = if value_norm { &v } else { &big };
        fresh
            .append(Input::F32(bk), Input::F32(bv))
            .unwrap_or_else(|e| panic!("{}: {e}", name("60000 on the sides without a norm")));
        assert_eq!(fresh.len(), 30, "{}", name("60000 taken"));
    }
    // Recording: a CPU layer refuses (PathUnavailable), a GPU layer validates first.
    if let Some(device) = t.ctx().device() {
        let mut enc = device.create_command_encoder(&Default::default());
        let bad = with(&k, 5, f32::NAN);
        let r = l.encode_append(&mut enc, Input::F32(&bad), Input::F32(&v));
        expect_err(r, &name("encode_append NaN"), "NonFinite", |e| {
            non_finite(e, "k")
        });
        let r = l.encode_append(&mut enc, Input::F32(&k), Input::F32(&v[ROW..]));
        expect_err(r, &name("encode_append short v"), "Shape", |e| {
            shape(e, "v")
        });
        drop(enc);
    }
    unchanged(&*l, &before, &name("encode_append"));
    // Queries: not a multiple of the KV heads, no heads, ragged, empty, more rows than
    // tokens, NaN; bad options. Attention changes nothing either.
    let q = |rows: usize, hq: usize| -> Vec<f32> { vec![0.25; rows * hq * D] };
    let t_len = l.len();
    let attend = |q: &[f32], hq: usize, o: &AttendOptions| l.attend(q, hq, o).map(|_| ());
    let def = AttendOptions::default();
    for (what, qv, hq, opts) in [
        ("3 query heads over 2", q(1, 3), 3, def),
        ("0 query heads", Vec::new(), 0, def),
        ("ragged q", q(1, 4)[1..].to_vec(), 4, def),
        ("empty q", Vec::new(), 4, def),
        ("more query rows than tokens", q(t_len + 1, 2), 2, def),
    ] {
        expect_err(attend(&qv, hq, &opts), &name(what), "Shape q", |e| {
            shape(e, "q")
        });
    }
    let mut nan_q = q(2, 4);
    nan_q[D + 3] = f32::NAN;
    expect_err(
        attend(&nan_q, 4, &def),
        &name("NaN in q"),
        "NonFinite q",
        |e| non_finite(e, "q"),
    );
    for (what, opts) in [
        ("window 0", def.window(Some(0))),
        ("chunk 33", def.chunk_tokens(Some(33))),
    ] {
        expect_err(attend(&q(1, 2), 2, &opts), &name(what), "Config", |e| {
            matches!(e, Error::Config(_))
        });
    }
    expect_err(
        attend(&q(1, 2), 2, &def.scale(Some(f32::INFINITY))),
        &name("infinite scale"),
        "NonFinite scale",
        |e| non_finite(e, "scale"),
    );
    unchanged(&*l, &before, &name("bad queries"));
    // Good input afterwards is taken and counted.
    l.append(Input::F32(&k), Input::F32(&v))
        .unwrap_or_else(|e| panic!("{}: {e}", name("good append afterwards")));
    assert_eq!(l.len(), 160, "{}", name("len after the good append"));
    assert!(l.memory().payload.total() > before.1.payload.total());
}
codec_tests!(layer_bad_input_is_typed_and_changes_nothing, with_qjl);
