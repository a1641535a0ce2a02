// kivi_quant_values: per-token value quantization for value groups of 65..=256 channels (the
// groups of at most 64 take kivi_quant_values_thread.wgsl). A group is split into parts of 32
// channels, one invocation per part: LANES = 4 invocations per group up to 128 channels, 8 up
// to 256 (a ragged group's parts past its end hold nothing). An invocation loads its part
// once (its 16 words with nothing between the loads, where the part starts a word), keeps it
// in registers, takes the group's min and max from its LANES neighbours through workgroup
// memory (one barrier), and packs and stores its own 32 codes: 32·b bits are b whole words,
// so every part's codes start a word of the group stream and no invocation touches another's
// words. No subgroup operation, so one source serves both WGSL variants. Specialized on
// VALUE_GROUP and VALUE_BITS (fixed for a cache's life): the loops unroll into registers
// (src/gpu/unroll.rs).
// (Before 2026-12-07 a slice of 32 invocations served a group, loading its channels one
// element at a time and assembling the words from workgroup memory in 8 of its 32 lanes:
// 10-12 % of the copy at 32k against 52-57 % for groups of 32; BENCHMARKS.md.)
// Layout: src/codecs/kivi/layout.rs. CPU reference: src/cpu/kivi/kivi_quant_values.rs.
// Bindings: wgsl/kivi/kivi_quant_io.wgsl.
//
// Dispatch: workgroups of WORKGROUP_SIZE invocations; invocation lid of workgroup w serves
// part lid % LANES of group g = w · (WORKGROUP_SIZE / LANES) + lid / LANES,
// g = (token · H + head) · n_groups + group. Invocations past the last group take part in the
// barrier and store nothing (it is in uniform control flow).

const PART: u32 = 32u;
const LANES: u32 = select(8u, 4u, VALUE_GROUP <= 128u);
// Words of a part's codes (32 · b bits) and f16 input words of a part that starts a word.
const PWORDS: u32 = VALUE_BITS;
const PIN: u32 = PART / 2u;

var<workgroup> part_lo: array<f32, WORKGROUP_SIZE>;
var<workgroup> part_hi: array<f32, WORKGROUP_SIZE>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let part = lid % LANES;
    let g = linear_workgroup(wg, nwg) * (WORKGROUP_SIZE / LANES) + lid / LANES;
    let valid = g < P.count * P.heads * P.n_groups;
    let j = g % P.n_groups;
    let th = g / P.n_groups;
    let h = th % P.heads;
    let t = th / P.heads;
    let s = P.src_start + t;
    let c0 = j * VALUE_GROUP;
    let n = min(VALUE_GROUP, P.dim - c0); // j < n_groups: c0 < D
    let p0 = part * PART;
    // Channels of this part (0 past the group's end or the last group).
    var m = 0u;
    if (valid && p0 < n) {
        m = min(PART, n - p0);
    }
    let e0 = h * P.dim + c0 + p0;

    var xs: array<f32, PART>;
    var lo = 3.0e38;
    var hi = -3.0e38;
    if ((e0 & 1u) == 0u) {
        // The part starts a word (every even head width): its words are loaded with no
        // branch in between, from the ring or the incoming rows.
        var ws: array<u32, PIN>;
        let nw = (m + 1u) / 2u;
        if (s >= P.t_old) {
            let r = (s - P.inc_start) * P.resid_row_words + (e0 >> 1u);
            // @unroll 16 vql
            for (var k = 0u; k < PIN; k++) {
                if (k < nw) {
                    ws[k] = incoming[r + k];
                }
            }
        } else {
            let r = (s % P.ring_tokens) * P.resid_row_words + (e0 >> 1u);
            // @unroll 16 vql
            for (var k = 0u; k < PIN; k++) {
                if (k < nw) {
                    ws[k] = ring[r + k];
                }
            }
        }
        // @unroll 32 vql
        for (var c = 0u; c < PART; c++) {
            if (c < m) {
                let x = unpack2x16float(ws[c / 2u])[c % 2u];
                xs[c] = x;
                lo = min(lo, x);
                hi = max(hi, x);
            }
        }
    } else {
        // @unroll 32 vql
        for (var c = 0u; c < PART; c++) {
            if (c < m) {
                let x = load_x(s, e0 + c);
                xs[c] = x;
                lo = min(lo, x);
                hi = max(hi, x);
            }
        }
    }
    // The group's min and max over its LANES parts (parts without channels hold the
    // neutral values).
    part_lo[lid] = lo;
    part_hi[lid] = hi;
    workgroupBarrier();
    let first = lid - part;
    // @unroll 8
    for (var k = 0u; k < LANES; k++) {
        lo = min(lo, part_lo[first + k]);
        hi = max(hi, part_hi[first + k]);
    }
    if (m == 0u) {
        return;
    }
    let scale = kivi_scale(lo, hi, P.inv_levels);
    if (part == 0u) {
        store_params(th * P.n_groups + j + P.dst_offset * P.heads * P.n_groups, scale, lo);
    }
    let levels = (1u << VALUE_BITS) - 1u;
    var words: array<u32, PWORDS>;
    // @unroll 8 vqw
    for (var w = 0u; w < PWORDS; w++) {
        words[w] = 0u;
    }
    // @unroll 32 vqc
    for (var c = 0u; c < PART; c++) {
        if (c < m) {
            let code = kivi_code(xs[c], scale, lo, levels);
            let start = c * VALUE_BITS;
            let w = start >> 5u;
            let off = start & 31u;
            words[w] |= code << off;
            if (off + VALUE_BITS > 32u) {
                words[w + 1u] |= code >> (32u - off);
            }
        }
    }
    // The part's first word in the group stream: bit 32·part·b.
    let base = ((P.dst_offset + t) * P.heads + h) * P.row_words + j * P.group_words + part * PWORDS;
    let used = (m * VALUE_BITS + 31u) / 32u;
    // @unroll 8 vqw
    for (var w = 0u; w < PWORDS; w++) {
        if (w < used) {
            codes[base + w] = words[w];
        }
    }
}
