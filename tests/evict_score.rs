//! The eviction scoring kernel (`evict_score`, ../shared/spec/qfilters.md "Scoring and
//! eviction") on every path including the MSL emulator, against its CPU twin
//! (`kvpack::cpu::policy::evict_score`) on the same f16 rows: Q-Filters ⟨k, u_h⟩ and key norm
//! −‖k‖, head widths that are not multiples of the workgroup (and an odd H·D: rows that end
//! mid-word), rows that start past row 0 of their buffer, outputs poisoned with NaN. Bound:
//! both sums are f32 reorderings of the same D terms, each within (D − 1)·2⁻²⁴·Σ|term| of the
//! exact sum, so they differ by at most 2·D·2⁻²⁴·Σ|term| (key norm: that over 2‖k‖, then the
//! square root's rounding). The CPU target checks its twin against the sums in f64 by the same
//! bound, and the `Scorer` the layer uses against the twin.

mod common;

use common::Target;

fn evict_score_matches_reference(t: &Target) {
    let mut rng = common::rng("evict_score_matches_reference");
    common::scores::check_all(t, &mut rng);
}
parity_tests!(evict_score_matches_reference, msl);
