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
// Dispatch: one workgroup per head (split over (x, y)). The lanes write each candidate's key;
// then (a storage barrier) a radix select finds the n-th candidate in eviction order
// (`select_threshold`: eight passes of 8-bit digits over the candidates, O(C / WORKGROUP_SIZE)
// reads per lane and pass for C candidates); then the lanes walk the candidates in chunks of
// WORKGROUP_SIZE in order: a candidate is kept when it goes after that one (O(1)), and a prefix
// sum of the kept flags gives each kept unit its slot. Units [0, first) are kept where they are.

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

// One radix pass's counts of the candidates per 8-bit digit, and lane 0's answer to the
// others: the digit and the rank still needed within it.
var<workgroup> sel_hist: array<atomic<u32>, 256>;
var<workgroup> sel_pick: vec2<u32>;

// Eviction order as one unsigned composite per candidate c: its key (high word), then ~c (low
// word: on equal keys the higher index goes first). Composites are distinct, so the first n in
// this order are exactly the n evicted. Returns head h's n-th smallest composite (high, low
// words; n ≥ 1; every lane gets the same), digit by digit from the top: pass p counts the
// candidates whose words agree with the digits found so far by their next digit, and lane 0
// walks the 256 counts to the digit holding the rank still needed. Called by every lane
// (uniform: it has barriers) after the keys are written and visible; zeros, with no pass,
// where nothing is ranked (OLDEST, or n = 0: `select_kept` does not read them).
fn select_threshold(h: u32, il: u32) -> vec2<u32> {
    if (OLDEST == 1u || P.n == 0u) {
        return vec2<u32>(0u); // uniform
    }
    let c_all = P.end - P.first;
    var need = P.n; // rank (from 1) among the candidates that agree with `found`
    var found = vec2<u32>(0u);
    for (var b = il; b < 256u; b += WORKGROUP_SIZE) {
        atomicStore(&sel_hist[b], 0u);
    }
    workgroupBarrier();
    for (var p = 0u; p < 8u; p++) {
        let q = p % 4u;
        let above = ~(0xffffffffu >> (8u * q)); // digits found in this word (none at q = 0)
        let shift = 24u - 8u * q;
        for (var c = il; c < c_all; c += WORKGROUP_SIZE) {
            let k = keys[h * c_all + c];
            var w = k;
            var agree = (k & above) == (found.x & above);
            if (p >= 4u) {
                w = ~c;
                agree = k == found.x && (w & above) == (found.y & above);
            }
            if (agree) {
                atomicAdd(&sel_hist[(w >> shift) & 255u], 1u);
            }
        }
        workgroupBarrier();
        if (il == 0u) {
            var below = 0u;
            var d = 0u;
            loop {
                let x = atomicLoad(&sel_hist[d]);
                if (below + x >= need || d == 255u) {
                    break;
                }
                below += x;
                d++;
            }
            sel_pick = vec2<u32>(d, need - below);
        }
        workgroupBarrier();
        let pick = sel_pick;
        need = pick.y;
        if (p < 4u) {
            found.x |= pick.x << shift;
        } else {
            found.y |= pick.x << shift;
        }
        for (var b = il; b < 256u; b += WORKGROUP_SIZE) {
            atomicStore(&sel_hist[b], 0u);
        }
        workgroupBarrier(); // every lane has read sel_pick, and the counts are cleared
    }
    return found;
}

// 1 when head h keeps candidate c (c < end − first): it goes after the n-th evicted, `nth`
// (select_threshold; unused when n = 0 or OLDEST).
fn select_kept(h: u32, c: u32, nth: vec2<u32>) -> u32 {
    if (OLDEST == 1u) {
        return u32(c >= P.n);
    }
    if (P.n == 0u) {
        return 1u;
    }
    let k = keys[h * (P.end - P.first) + c];
    return u32(k > nth.x || (k == nth.x && ~c > nth.y));
}
