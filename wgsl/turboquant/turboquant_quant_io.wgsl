// Input access of turboquant_quant (both variants) and turboquant_prod_quant (both variants):
// the bindings `ring`, `incoming` and `P` are the kernel's (turboquant_quant_bindings.wgsl,
// turboquant_prod_bindings.wgsl).

// The first word of absolute token s's input row (in the ring when s < P.t_old, else in the
// incoming rows).
fn tq_row(s: u32) -> u32 {
    if (s < P.t_old) {
        return (s % P.ring_tokens) * P.in_row_words;
    }
    return (s - P.inc_start) * P.in_row_words;
}

// Input element e (= head·D + channel) of absolute token s, as f32.
fn tq_load(s: u32, e: u32) -> f32 {
    var w: u32;
    if (s < P.t_old) {
        w = ring[(s % P.ring_tokens) * P.in_row_words + (e >> 1u)];
    } else {
        w = incoming[(s - P.inc_start) * P.in_row_words + (e >> 1u)];
    }
    let pair = unpack2x16float(w);
    return select(pair.x, pair.y, (e & 1u) == 1u);
}

// Word w of one packed row (stage s of a vector) from its codes, one per coordinate
// from index `base` of the variant's code array (tq_codes_at) (LSB-first, codes may straddle words).
fn tq_row_word(w: u32, s: u32, base: u32) -> u32 {
    var out = 0u;
    let lo = 32u * w;
    let first = lo / TB;
    let last = min((lo + 31u) / TB, TP - 1u);
    for (var i = first; i <= last; i++) {
        let at = i * TB;
        let c = tq_codes_at(base + s * TP + i);
        if (at >= lo) {
            out |= c << (at - lo);
        } else {
            out |= c >> (lo - at);
        }
    }
    return out;
}
