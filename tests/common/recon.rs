//! Per-element reconstruction checks, for every codec: each element's reconstruction is
//! checked against what the spec says *its own stored words* reconstruct to (exactly on the
//! CPU and the emulated MSL; within the spec's fused-multiply-add bound on a GPU), and against
//! the input within the codec's per-element error bound. No element is excused and no case is
//! skipped: a codec whose GPU may pick another code at a rounding boundary gets a bound that
//! holds for either code (the code itself is compared with the reference elsewhere).
//!
//! A codec adds a function that turns its stored words into [`Elem`]s (tests/common/kivi_spec.rs
//! for KIVI; [`f16_elems`] for f16) and calls [`check_recon`].

/// What the spec says about one element.
#[derive(Clone, Copy, Debug)]
pub struct Elem {
    /// The input (as the codec received it, e.g. after the f16 rounding of the input).
    pub x: f32,
    /// The reconstruction the spec computes from the element's own stored words.
    pub want: f32,
    /// How far a GPU may be from `want` (a fused multiply-add; 0 for exact arithmetic).
    pub fma: f32,
    /// The spec's bound on |want − x| for this element (from its own stored parameters).
    pub bound: f32,
}

/// One ulp of `x` (f32).
pub fn ulp(x: f32) -> f32 {
    let a = x.abs();
    if a == 0.0 {
        f32::from_bits(1)
    } else {
        f32::from_bits(a.to_bits() + 1) - a
    }
}

/// Checks `got[i]` against `elems[i]` for every i: |got − want| ≤ fma (0 when `exact`, i.e.
/// bit-identical), and |want − x| ≤ bound. Panics naming the first element that fails.
pub fn check_recon(what: &str, exact: bool, got: &[f32], elems: &[Elem]) {
    assert_eq!(
        got.len(),
        elems.len(),
        "{what}: reconstruction has {} elements, the stored words describe {}",
        got.len(),
        elems.len()
    );
    for (i, (&g, e)) in got.iter().zip(elems).enumerate() {
        if exact {
            assert!(
                g.to_bits() == e.want.to_bits(),
                "{what}: element {i}: reconstruction {g} is not the spec's {} from its own stored words (exact target)",
                e.want
            );
        } else {
            assert!(
                (g - e.want).abs() <= e.fma,
                "{what}: element {i}: reconstruction {g} vs the spec's {} from its own stored words: |diff| {} > FMA bound {}",
                e.want,
                (g - e.want).abs(),
                e.fma
            );
        }
        assert!(
            (e.want - e.x).abs() <= e.bound,
            "{what}: element {i}: input {} reconstructs to {}: error {} > the spec's bound {} from its stored parameters",
            e.x,
            e.want,
            (e.want - e.x).abs(),
            e.bound
        );
    }
}

/// f16 storage: the reconstruction is the f16 rounding of the input, exactly.
pub fn f16_elems(x: &[f32]) -> Vec<Elem> {
    x.iter()
        .map(|&x| {
            let want = half::f16::from_f32(x).to_f32();
            Elem {
                x,
                want,
                fma: 0.0,
                bound: (want - x).abs().max(0.0),
            }
        })
        .collect()
}
