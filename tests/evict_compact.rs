//! The eviction compaction kernel (`evict_compact`, ../shared/spec/qfilters.md "Scoring and
//! eviction") on every path including the MSL emulator, generic over codecs through the
//! streams they declare (`Codec::streams`: rows per block, bits per head): for every stream of
//! both sides of a layer of each codec below, the kept units of random per-head keep lists
//! move down and the units after the candidates follow, against a bit-by-bit oracle of the
//! spec (destination unit i, head h, row r = source unit keep[h][i]'s; padding bits unit i's
//! own; later units whole); the CPU target runs the kernels' twin
//! (`kvpack::cpu::policy::evict_compact`), which src/store/compact.rs also checks against the
//! store's in-place compaction. The stream starts past word 0 of its buffer (as in a segment)
//! and the output is poisoned. A unit is one block of both sides (KIVI: G tokens).

mod common;

use common::Target;

fn evict_compact_moves_kept_units(t: &Target) {
    let mut rng = common::rng("evict_compact_moves_kept_units");
    common::compact::check_all(t, &mut rng);
}
parity_tests!(evict_compact_moves_kept_units, msl);
