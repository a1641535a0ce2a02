// One sign row (m bits, LSB-first in m/32 u32 words: ../shared/spec/bitpack.md) assembled in
// workgroup memory by the sketch encoders (qjl_encode, turboquant_prod_quant; both WGSL
// variants). The including kernel defines SGN_SW (words of one row).

var<workgroup> sgn_w: array<atomic<u32>, SGN_SW>;

// Clears the row (a barrier must follow before any sgn_or).
fn sgn_clear(lid: u32) {
    for (var w = lid; w < SGN_SW; w += WORKGROUP_SIZE) {
        atomicStore(&sgn_w[w], 0u);
    }
}

// ORs `bits` (rows r0 .. r0 + 31 at most, inside one word) into the row. The word index is
// clamped to the row explicitly (WGSL leaves out-of-range workgroup indices to the
// implementation): a bit past m would show in the last word, never vanish.
fn sgn_or(r0: u32, bits: u32) {
    if (bits != 0u) {
        atomicOr(&sgn_w[min(r0 >> 5u, SGN_SW - 1u)], bits << (r0 & 31u));
    }
}

// Word w of the row (after a barrier).
fn sgn_word(w: u32) -> u32 {
    return atomicLoad(&sgn_w[w]);
}
