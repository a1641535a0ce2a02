//! Caches under eviction saved on one path and loaded on every path (issue 18 over issue 16's
//! GPU eviction): a layer that evicted on `t`'s path saves; the file loads back on the same
//! path and on the CPU path holding the same words, positions, scores and counters; on the
//! same path it attends bit for bit like the layer that was saved, on the CPU within the
//! attention bound; both keep evicting exactly like the original when more tokens come. A
//! cache saved from the CPU path loads on `t`'s path the same way.
//!
//! A restored GPU layer must have its positions stream written (attention masks with it): the
//! window + sinks query below changes its output when positions are ignored, and the
//! "positions ignored" check makes sure of that on every case.

mod common;

use common::Target;
use kvpack::persist::SavedCache;
use kvpack::{AttendOptions, Context, Input, KvLayer, Method, PathChoice};
use rand::Rng;

const H: usize = 2;
const D: usize = 16;

fn random(rng: &mut impl Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn append(l: &mut dyn KvLayer, k: &[f32], v: &[f32]) {
    l.append(Input::F32(k), Input::F32(v)).unwrap();
}

fn same_state(a: &dyn KvLayer, b: &dyn KvLayer, what: &str) {
    assert_eq!((b.len(), b.appended()), (a.len(), a.appended()), "{what}");
    assert_eq!(b.snapshot().unwrap(), a.snapshot().unwrap(), "{what}");
    assert_eq!(
        b.eviction_state().unwrap(),
        a.eviction_state().unwrap(),
        "{what}"
    );
}

fn evicting_caches_restore_on_every_path(t: &Target) {
    let mut rng = common::rng("evicting_caches_restore_on_every_path");
    let filters = random(&mut rng, H * D);
    let tn = t.name();
    // One file per target: the targets run in parallel in one process.
    let calib = common::tiny_calibration(&format!("restore-{tn}"), H, D, Some(filters), None);
    let specs = [
        format!(
            "f16+qfilters:budget=24,sinks=2,window=3,calib={}",
            calib.display()
        ),
        "kivi:bits=4,group=8,residual=8+knorm:budget=40,sinks=2,stride=3".to_string(),
        "kivi:bits=2,group=8/turboquant-mse:bits=3,residual=8+streaming:budget=32,sinks=1,stride=2"
            .to_string(),
    ];
    let row = H * D;
    let (first, more) = (97, 41);
    let k = random(&mut rng, (first + more) * row);
    let v = random(&mut rng, (first + more) * row);
    let cpu = Context::cpu();
    for spec in &specs {
        let m = Method::parse(spec).unwrap();
        for (origin, octx, opath) in [
            (tn.as_str(), t.ctx(), t.path()),
            ("cpu", &cpu, PathChoice::Cpu),
        ] {
            let what = format!("{spec}, saved on {origin}, loaded on {}", t.name());
            let mut a = m.layer(octx, H, D, opath).unwrap();
            append(&mut *a, &k[..first * row], &v[..first * row]);
            let evicted = a.appended() - a.len();
            assert!(evicted > 0, "{what}: nothing evicted");
            let bytes = SavedCache::of_layers([&*a]).unwrap().to_bytes().unwrap();
            let saved = SavedCache::from_bytes(&bytes).unwrap();
            let mut b = saved.to_layers(t.ctx(), t.path()).unwrap().remove(0);
            let mut c = saved.to_layers(&cpu, PathChoice::Cpu).unwrap().remove(0);
            same_state(&*a, &*b, &what);
            same_state(&*a, &*c, &what);

            // Tq = 3 queries with a window and sinks: the masks read the held positions.
            let q = random(&mut rng, 3 * 4 * D);
            let opts = AttendOptions::default().window(Some(30)).sinks(3);
            let got = b.attend(&q, 4, &opts).unwrap();
            let want = c.attend(&q, 4, &opts).unwrap();
            let err = common::rel_l2_rows(&got, &want, D);
            assert!(err <= 1e-4, "{what}: against the CPU path, rel L2 {err:e}");
            if origin == tn {
                assert_eq!(
                    got,
                    a.attend(&q, 4, &opts).unwrap(),
                    "{what}: not bit for bit the saved layer's attention"
                );
            }
            // Guard: the same values at positions 0..held (an f16 cache that never evicted)
            // attend differently, so a restored layer that lost its positions fails above.
            let plain = Method::parse("f16").unwrap();
            let mut flat = plain.layer(&cpu, H, D, PathChoice::Cpu).unwrap();
            let (kh, vh) = c.reconstruct().unwrap();
            append(&mut *flat, &kh, &vh);
            let moved = common::rel_l2_rows(&flat.attend(&q, 4, &opts).unwrap(), &want, D);
            assert!(
                moved > 1e-2,
                "{what}: positions change the output by only {moved:e} (a test that cannot fail)"
            );

            // Continuing: the same evictions on every copy.
            for l in [&mut a, &mut b, &mut c] {
                append(&mut **l, &k[first * row..], &v[first * row..]);
            }
            assert!(
                a.appended() - a.len() > evicted,
                "{what}: no eviction after the restore"
            );
            same_state(&*a, &*b, &format!("{what}, after {more} more tokens"));
            same_state(&*a, &*c, &format!("{what}, after {more} more tokens"));
            let got = b.attend(&q, 4, &opts).unwrap();
            let want = c.attend(&q, 4, &opts).unwrap();
            let err = common::rel_l2_rows(&got, &want, D);
            assert!(err <= 1e-4, "{what}: after more tokens, rel L2 {err:e}");
        }
    }
    std::fs::remove_file(calib).ok();
}
parity_tests!(evicting_caches_restore_on_every_path);
