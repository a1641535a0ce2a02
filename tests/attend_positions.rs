//! Attention over a cache that evicted tokens (spec/attention.md, "Which keys a query sees"),
//! on every path including the MSL emulator: a layer's stored words are laid out as the GPU
//! store lays them out (tests/attend_kernels.rs), its held tokens given absolute positions
//! (per head, a random strictly increasing table for the first slots, the later slots at
//! `slot + evicted`) in a positions stream after the key side's streams in segment 0, and the
//! kernels built for a layer that evicts (`ATT_POS = 1`) must match the CPU reference
//! `cpu::attend::attend_at` on the same words and positions (relative L2 ≤ 1e-4 per row). The
//! CPU target checks `attend_at` against exact f64 attention over the layer's reconstruction at
//! those positions, with its own visibility rule. Every case has a sliding window with sinks
//! (without one, positions cannot change what the newest queries see), and each checks that
//! its positions change the output (so a kernel that ignored them would fail).

mod common;

use common::Target;

fn attend_at_positions_matches_reference(t: &Target) {
    let mut rng = common::rng("attend_at_positions_matches_reference");
    common::positions::check_all(t, &mut rng);
}
parity_tests!(attend_at_positions_matches_reference, msl);
