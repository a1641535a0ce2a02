// Bindings and input access shared by kivi_quant_keys and kivi_quant_values.
//
// @binding(0) P:        KiviParams (uniform)
// @binding(1) ring:     array<u32> [C][resid_row_words]   f16 residual rows, token s in slot s % C
// @binding(2) incoming: array<u32> [n][resid_row_words]   f16 rows of this append, token inc_start + i
// @binding(3) codes:    array<u32>                        segment's code words (written)
// @binding(4) params:   array<u32>                        segment's (scale, lo) words (written)
// @binding(5) status:   array<atomic<u32>> [1]            bit 0 set: a pair f16 cannot hold

@group(0) @binding(0) var<uniform> P: KiviParams;
@group(0) @binding(1) var<storage, read> ring: array<u32>;
@group(0) @binding(2) var<storage, read> incoming: array<u32>;
@group(0) @binding(3) var<storage, read_write> codes: array<u32>;
@group(0) @binding(4) var<storage, read_write> params: array<u32>;
@group(0) @binding(5) var<storage, read_write> status: array<atomic<u32>>;

// Input element e (= head * D + channel) of absolute token s, as f32.
fn load_x(s: u32, e: u32) -> f32 {
    var w: u32;
    if (s < P.t_old) {
        w = ring[(s % P.ring_tokens) * P.resid_row_words + (e >> 1u)];
    } else {
        w = incoming[(s - P.inc_start) * P.resid_row_words + (e >> 1u)];
    }
    let pair = unpack2x16float(w);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

// Stores the pair of group `gi` (segment-relative) or flags an f16 overflow.
fn store_params(gi: u32, scale: f32, lo: f32) {
    if (kivi_params_overflow(scale, lo)) {
        atomicOr(&status[0], 1u);
        return;
    }
    // A zero lo is stored as +0 (min over +-0 depends on the reduction order); done on the
    // integer bits so that no compiler can fold it away.
    if (PARAMS_F16 == 1u) {
        var lo_bits = f16_bits(lo);
        if ((lo_bits & 0x7fffu) == 0u) {
            lo_bits = 0u;
        }
        params[gi] = f16_bits(scale) | (lo_bits << 16u);
    } else {
        var lo_bits = bitcast<u32>(lo);
        if ((lo_bits & 0x7fffffffu) == 0u) {
            lo_bits = 0u;
        }
        params[2u * gi] = bitcast<u32>(scale);
        params[2u * gi + 1u] = lo_bits;
    }
}
