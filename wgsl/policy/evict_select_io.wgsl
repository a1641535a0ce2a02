// evict_select: which candidate units each KV head keeps after an eviction
// (../shared/spec/qfilters.md, "Scoring and eviction"; docs/contracts/qfilters.md, "Selection";
// CPU reference src/policy/select.rs `keep_lists`). Shared by the subgroup
// (evict_select_subgroup.wgsl) and workgroup-memory (evict_select.wgsl) variants, which differ
// only in the prefix sum that places the kept units.
//
// A unit is `unit` consecutive held tokens; unit u of head h is scored by the f32 sum of its
// tokens' scores, from its first token's in token order (the mean's order: every unit holds
// `unit` tokens). Of the candidates [first, end), each head evicts `n`: the lowest sums in
// IEEE total order, equal sums the higher position first (OLDEST = 0), or the n oldest
// (OLDEST = 1, StreamingLLM). Held positions increase with the unit index (the layer checks
// it), so "higher position" is "higher index" and the kernel needs no positions table.
//
// @binding(0) P:      SelectParams (uniform)             keep in sync with src/policy/kernels.rs
// @binding(1) scores: array<f32> [held][H]                per (token, head), token-major
// @binding(2) keys:   array<u32> [H][end − first]         scratch: the candidates' total-order keys
// @binding(3) keep:   array<u32> [H][end − n]             output: units kept, ascending
//
// Dispatch: one workgroup per head (split over (x, y)). The lanes write each candidate's key,
// then (a storage barrier) walk the candidates in chunks of WORKGROUP_SIZE in order: lane i of a
// chunk counts the candidates that go before its own (O(C) reads, O(C²/WORKGROUP_SIZE) per
// head for C candidates), and a prefix sum of the kept flags gives each kept unit its slot.
// Units [0, first) are kept where they are.

struct SelectParams {
    heads: u32, // KV heads H
    unit: u32,  // tokens per unit
    first: u32, // first candidate unit
    end: u32,   // one past the last candidate unit
    n: u32,     // units each head evicts (n ≤ end − first)
    kept: u32,  // end − n: units each head keeps of [0, end)
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> P: SelectParams;
@group(0) @binding(1) var<storage, read> scores: array<f32>;
@group(0) @binding(2) var<storage, read_write> keys: array<u32>;
@group(0) @binding(3) var<storage, read_write> keep: array<u32>;

// An f32's bits, mapped so that u32 order is IEEE total order (negative: all bits flipped;
// positive: the sign bit set).
fn total_order_key(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// Candidate c's (unit first + c's) key for head h: its score sum's total-order key.
fn unit_key(h: u32, c: u32) -> u32 {
    let t0 = (P.first + c) * P.unit;
    var s = scores[t0 * P.heads + h];
    for (var t = 1u; t < P.unit; t++) {
        s += scores[(t0 + t) * P.heads + h];
    }
    return total_order_key(s);
}

// Writes head h's candidate keys and its kept units below `first` (lane il of the workgroup).
fn select_prologue(h: u32, il: u32) {
    let c_all = P.end - P.first;
    if (OLDEST == 0u) {
        for (var c = il; c < c_all; c += WORKGROUP_SIZE) {
            keys[h * c_all + c] = unit_key(h, c);
        }
    }
    for (var u = il; u < P.first; u += WORKGROUP_SIZE) {
        keep[h * P.kept + u] = u;
    }
}

// 1 when head h keeps candidate c (c < end − first): fewer than n candidates go before it.
fn select_kept(h: u32, c: u32) -> u32 {
    if (OLDEST == 1u) {
        return u32(c >= P.n);
    }
    let c_all = P.end - P.first;
    let kc = keys[h * c_all + c];
    var before = 0u;
    for (var j = 0u; j < c_all; j++) {
        let kj = keys[h * c_all + j];
        before += u32(kj < kc || (kj == kc && j > c));
    }
    return u32(before >= P.n);
}
