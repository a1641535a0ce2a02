// evict_compact: one stream's stored words after an eviction (../shared/spec/qfilters.md,
// "Scoring and eviction"; store layout: src/codec.rs `Stream`, src/store/compact.rs), moved
// into a scratch buffer that the host copies back over the stream: every head keeps its own
// units (a unit: `unit_rows` rows of `row_words` words; head h at bits [h·head_bits,
// (h+1)·head_bits) of every row, the rest of a row padding) and the kept units' bits move down,
// head by head, in order; the words after the candidates [0, keep_of) move down whole (a
// last partial unit included: a side whose blocks are smaller than a unit). Nothing
// is decoded. CPU twin: src/cpu/policy/evict_compact.rs (equal to the in-place
// store::compact::compact_stream, padding bits included: a destination row keeps its own).
//
// @binding(0) P:    CompactParams (uniform)               keep in sync with src/policy/kernels.rs
// @binding(1) src:  array<u32> the stream's `words` words from word src0: [units][unit_rows][row_words]
// @binding(2) keep: array<u32> [H][kept]                  units kept per head, ascending
// @binding(3) dst:  array<u32> [words − (keep_of − kept)·unit_rows·row_words]
//
// Dispatch: one invocation per destination word, WORKGROUP_SIZE per workgroup, workgroups split
// over (x, y). No cross-lane operation: the same source serves both WGSL variants.

struct CompactParams {
    src0: u32,      // the stream's first word in `src`
    row_words: u32,
    unit_rows: u32,
    head_bits: u32,
    heads: u32,
    kept: u32,      // units each head keeps of [0, keep_of)
    keep_of: u32,
    words: u32,     // words of the stream before the eviction
}

@group(0) @binding(0) var<uniform> P: CompactParams;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read> keep: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;

// Bits [lo, hi) of a word (0 ≤ lo < hi ≤ 32).
fn bit_mask(lo: u32, hi: u32) -> u32 {
    let top = select((1u << hi) - 1u, 0xffffffffu, hi == 32u);
    return top & ~((1u << lo) - 1u);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let unit_words = P.unit_rows * P.row_words;
    let w = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid;
    if (w >= P.words - (P.keep_of - P.kept) * unit_words) {
        return;
    }
    let u = w / unit_words;
    let within = w % unit_words;
    if (u >= P.kept) {
        // A word after the candidates: moved down.
        dst[w] = src[P.src0 + (u - P.kept + P.keep_of) * unit_words + within];
        return;
    }
    let r = within / P.row_words;
    let c = within % P.row_words;
    // The word's bits piece by piece: each head's from its own kept unit, the same word of
    // the same row (a head's bits sit at the same place in every row); padding from unit u.
    var out = 0u;
    var b = c * 32u;
    let end = b + 32u;
    while (b < end) {
        let h = b / P.head_bits;
        var su = u;
        var stop = end;
        if (h < P.heads) {
            su = keep[h * P.kept + u];
            stop = min(end, (h + 1u) * P.head_bits);
        }
        let word = src[P.src0 + (su * P.unit_rows + r) * P.row_words + c];
        out |= word & bit_mask(b - c * 32u, stop - c * 32u);
        b = stop;
    }
    dst[w] = out;
}
