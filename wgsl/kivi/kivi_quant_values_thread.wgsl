// kivi_quant_values_thread: per-token value quantization for value groups of at most 64
// channels: one invocation owns one (token, head, group), keeps the group in registers and
// packs its codes itself. No cross-invocation operation, so one source serves both WGSL
// variants. The loops are unrolled at composition (src/gpu/unroll.rs), so the group's
// values and words stay in registers whatever the driver does with loops. (Measured on an
// H200: the former subgroup-cooperative kernel, one channel per invocation, spent its time
// on per-element shuffles and barriers for groups this small.) Groups of 65..=256 channels
// take kivi_quant_values.wgsl, 32 channels per invocation.
// Layout: src/codecs/kivi/layout.rs. CPU reference: src/cpu/kivi/kivi_quant_values.rs.
// Bindings: wgsl/kivi/kivi_quant_io.wgsl. Specialized on VALUE_GROUP and VALUE_BITS (fixed
// for a cache's life), so every loop below has a constant trip count and unrolls into
// registers.
//
// Dispatch: one invocation per group g = (token * H + head) * n_groups + group,
// WORKGROUP_SIZE per workgroup, workgroups split over (x, y).

const WMAX: u32 = (VALUE_GROUP * VALUE_BITS + 31u) / 32u;
// Input words of a group that starts a word.
const VWORDS: u32 = (VALUE_GROUP + 1u) / 2u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid;
    if (g >= P.count * P.heads * P.n_groups) {
        return;
    }
    let j = g % P.n_groups;
    let th = g / P.n_groups;
    let h = th % P.heads;
    let t = th / P.heads;
    let s = P.src_start + t;
    let c0 = j * VALUE_GROUP;
    let n = min(VALUE_GROUP, P.dim - c0);
    let e0 = h * P.dim + c0;

    var xs: array<f32, VALUE_GROUP>;
    var lo = 3.0e38;
    var hi = -3.0e38;
    if ((e0 & 1u) == 0u) {
        // The group starts a word (every even head width): its words are loaded with no
        // branch in between (all in flight at once), from the ring or the incoming rows.
        var ws: array<u32, VWORDS>;
        let nw = (n + 1u) / 2u;
        if (s >= P.t_old) {
            let r = (s - P.inc_start) * P.resid_row_words + (e0 >> 1u);
            // @unroll 32 vql
            for (var k = 0u; k < VWORDS; k++) {
                if (k < nw) {
                    ws[k] = incoming[r + k];
                }
            }
        } else {
            let r = (s % P.ring_tokens) * P.resid_row_words + (e0 >> 1u);
            // @unroll 32 vql
            for (var k = 0u; k < VWORDS; k++) {
                if (k < nw) {
                    ws[k] = ring[r + k];
                }
            }
        }
        // @unroll 64 vql
        for (var c = 0u; c < VALUE_GROUP; c++) {
            if (c < n) {
                let x = unpack2x16float(ws[c / 2u])[c % 2u];
                xs[c] = x;
                lo = min(lo, x);
                hi = max(hi, x);
            }
        }
    } else {
        // @unroll 64 vql
        for (var c = 0u; c < VALUE_GROUP; c++) {
            if (c < n) {
                let x = load_x(s, e0 + c);
                xs[c] = x;
                lo = min(lo, x);
                hi = max(hi, x);
            }
        }
    }
    let scale = kivi_scale(lo, hi, P.inv_levels);
    store_params(th * P.n_groups + j + P.dst_offset * P.heads * P.n_groups, scale, lo);
    let levels = (1u << VALUE_BITS) - 1u;
    var words: array<u32, WMAX>;
    // @unroll 16 vqw
    for (var w = 0u; w < WMAX; w++) {
        words[w] = 0u;
    }
    // @unroll 64 vqc
    for (var c = 0u; c < VALUE_GROUP; c++) {
        if (c < n) {
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
    let base = ((P.dst_offset + t) * P.heads + h) * P.row_words + j * P.group_words;
    let used = (n * VALUE_BITS + 31u) / 32u;
    // @unroll 16 vqw
    for (var w = 0u; w < WMAX; w++) {
        if (w < used) {
            codes[base + w] = words[w];
        }
    }
}
