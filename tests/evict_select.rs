//! The eviction selection kernel (`evict_select`, ../shared/spec/qfilters.md "Scoring and
//! eviction", docs/contracts/qfilters.md "Selection") on every path including the MSL emulator,
//! against the CPU reference `kvpack::policy::select::keep_lists`: per head, the units kept of
//! `[0, end)` after evicting `n` candidates of `[first, end)`, identical lists. Random and
//! heavily tied scores (−0.0 and +0.0 among them: IEEE total order; ties keep the lower
//! position), units of 1, 32 and 48 tokens, candidates fewer than a workgroup and spanning
//! three chunks, n from 0 to every candidate, both orders (score, oldest), and real key-norm
//! scores of SmolLM2 over story-512. Scores outside the candidates are NaN (neither side may
//! read them), the scratch and the output are poisoned. The CPU target checks the reference
//! against a sort-free oracle of the spec.

mod common;

use common::Target;

fn evict_select_matches_reference(t: &Target) {
    let mut rng = common::rng("evict_select_matches_reference");
    common::select::check_all(t, &mut rng);
}
parity_tests!(evict_select_matches_reference, msl);
