// attend_stage: the prefill kernels' tile staging (attend_prefill.wgsl on the f32 pipe,
// attend_prefill_tc.wgsl on cooperative matrices): the codecs' (or the ring's) keys and values
// of one tile, read into the kernel's workgroup memory. Composed after the core and the codecs'
// element and four-element readers (k_value / k_quad / K_QUAD, v_value / v_quad / V_QUAD; see
// attend_prefill.wgsl), before the kernel, which supplies its tile and its stores:
//   const PF_TT: u32      tokens per tile (a multiple of 4)
//   const PF_DP: u32      key channels staged per token (D rounded up to 16)
//   const PF_WP: u32      value channels staged per token (a multiple of 16, ≥ the widths)
//   const PF_NOLOAD: bool synthetic tiles instead of the reads (measuring only)
//   fn pf_put_kquad(u: u32, x: vec4<f32>)  keys of tokens 4·(u % PF_TQ) .. + 3, channel u / PF_TQ
//   fn pf_put_k(e: u32, x: f32)            key of token e % PF_TT, channel e / PF_TT
//   fn pf_put_vquad(u: u32, x: vec4<f32>)  values of token u / PF_VW4, channels 4·(u % PF_VW4) .. + 3
//   fn pf_put_v(e: u32, x: f32)            value of token e / PF_WP, channel e % PF_WP
// `pf_keys` and `pf_values` stage each (the f32 kernel, which stages them at different steps;
// the tensor-core kernel's `pf_tile` stages both, through them or, for its whole tiles, through
// the readers below and its own eight-channel readers of f16 rows). pf_keys and pf_values read
// element by element or by quads; where the codecs offer them (each codec without them gets a
// false const and a never-called stub from src/attention/kernel.rs), whole tiles read eight
// elements per call:
//   key codec:   const K_OCT: bool, struct KOct, fn k_oct_fetch(row: u32, c: u32, h: u32) -> KOct
//                (the stored words of rows row .. row + 7 of channel c: row a multiple of 8,
//                row + 7 within the segment; one code word), fn k_oct_make(r: KOct, row, c,
//                h) -> array<vec4<f32>, 2> (their k_value values; no memory read)
//                const K_ROW8: bool, fn k_row8(row: u32, c: u32, h: u32) -> vec4<u32>
//                (channels c .. c + 7 of row `row` as stored f16, two per word: c a multiple
//                of 8, c + 7 < D; one 16-byte load)
//   value codec: const V_OCT: bool, struct VOct, fn v_oct_fetch(row, c, h) -> VOct, fn
//                v_oct_make(r: VOct, row, c, h) -> array<vec4<f32>, 2> (likewise: v_value's
//                values of channels c .. c + 7, c a multiple of 8, c + 7 < V_W)
//                const V_ROW8: bool, fn v_row8(row, c, h) -> vec4<u32> (likewise, stored f16)
// (token and channel indices within the tile). A tile whose tokens all come from one source
// (the codec or the ring: all but at most one tile of a split) reads without a branch per
// element, so that an invocation's loads are in flight together: rows past the split's end
// read its last row, key channels past D read channel D − 1 and value channels past the width
// read the width's last (finite values that are masked, meet a zero query, or accumulate into
// output channels that are never written); the one mixed tile branches per element.

// Quads of tokens per tile and of channels per value row.
const PF_TQ: u32 = PF_TT / 4u;
const PF_VW4: u32 = PF_WP / 4u;
// Elements each invocation stages per tile (exact: PF_TT · 16 is a multiple of 128), and
// quads (the last step partly: at D = 48, 1.5 key quads per invocation).
const PF_KE: u32 = PF_TT * PF_DP / WORKGROUP_SIZE;
const PF_KQ: u32 = (PF_TQ * PF_DP + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;
const PF_VE: u32 = PF_TT * PF_WP / WORKGROUP_SIZE;
const PF_VQ: u32 = (PF_TT * PF_VW4 + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;

// Element c of token pos's f16 row in a ring (keys or values) of `cap` rows.
fn pf_ring(keys: bool, pos: u32, cap: u32, c: u32, h: u32) -> f32 {
    let e = h * DIM + c;
    let at = (pos % cap) * AP.row_words + (e >> 1u);
    var w: u32;
    if (keys) {
        w = ringk[at];
    } else {
        w = ringv[at];
    }
    return unpack2x16float(w)[e & 1u];
}

// Four keys of channel c, rows row .. row + 3 (clamped to `last`), and four values of row
// `row` (clamped to `last`), channels c .. c + 3 (c a multiple of 4; channels past the value
// space read its last, as the element reads do): through the codec's k_quad / v_quad where it
// has one and the elements allow (K_QUAD / V_QUAD), else element by element.
fn pf_kquad(row: u32, last: u32, c: u32, h: u32) -> vec4<f32> {
    if (K_QUAD && row % 4u == 0u && row + 3u <= last) {
        return k_quad(row, c, h);
    }
    return vec4<f32>(
        k_value(row, last, c, h),
        k_value(row + 1u, last, c, h),
        k_value(row + 2u, last, c, h),
        k_value(row + 3u, last, c, h),
    );
}

fn pf_vquad(row: u32, last: u32, c: u32, h: u32) -> vec4<f32> {
    if (V_QUAD && c + 3u < V_W) {
        return v_quad(min(row, last), c, h);
    }
    return vec4<f32>(
        v_value(row, last, min(c, V_W - 1u), h),
        v_value(row, last, min(c + 1u, V_W - 1u), h),
        v_value(row, last, min(c + 2u, V_W - 1u), h),
        v_value(row, last, min(c + 3u, V_W - 1u), h),
    );
}

// The key quads of a tile inside the codec's rows, with no check per quad (K_QUAD; see
// pf_keys).
fn pf_kquads_whole(lid: u32, t0: u32, h: u32) {
    // @unroll 8
    for (var k = 0u; k < PF_KQ; k++) {
        let u = lid + k * WORKGROUP_SIZE;
        if (u < PF_DP * PF_TQ) {
            pf_put_kquad(u, k_quad(t0 + 4u * (u % PF_TQ) - AP.tok0, min(u / PF_TQ, DIM - 1u), h));
        }
    }
}

// The value quads of a tile from the codec (rows clamped to `vl`; pf_vquad).
fn pf_vquads(lid: u32, t0: u32, vl: u32, h: u32) {
    // @unroll 8
    for (var k = 0u; k < PF_VQ; k++) {
        let u = lid + k * WORKGROUP_SIZE;
        if (u < PF_TT * PF_VW4) {
            pf_put_vquad(u, pf_vquad(t0 + u / PF_VW4 - AP.tok0, vl, 4u * (u % PF_VW4), h));
        }
    }
}

// Octs of tokens per tile (keys) and of channels per value row (values), and the octs each
// invocation reads (K_OCT / V_OCT). Keys: adjacent invocations on a channel's adjacent octs
// (adjacent code words); values: on a row's adjacent octs.
const PF_TO: u32 = PF_TT / 8u;
const PF_KO: u32 = (PF_TO * PF_DP + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;
const PF_VO: u32 = PF_WP / 8u;
const PF_VOK: u32 = (PF_TT * PF_VO + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE;

// Unit u of a tile's key octs (adjacent units: a channel's adjacent octs): its segment row
// and channel, and the store of its eight keys as two quads.
fn pf_koct_row(u: u32, t0: u32) -> u32 {
    return t0 + 8u * (u % PF_TO) - AP.tok0;
}

fn pf_koct_c(u: u32) -> u32 {
    return min(u / PF_TO, DIM - 1u);
}

fn pf_koct_store(u: u32, x: array<vec4<f32>, 2>) {
    let uq = (u / PF_TO) * PF_TQ + 2u * (u % PF_TO);
    pf_put_kquad(uq, x[0]);
    pf_put_kquad(uq + 1u, x[1]);
}

// Unit u of a tile's value octs (adjacent units: a row's adjacent octs): its segment row
// (clamped to `vl`) and first channel (octs past the value space read its last oct: output
// channels never written), and the store of its eight values as two quads.
fn pf_voct_row(u: u32, t0: u32, vl: u32) -> u32 {
    return min(t0 + u / PF_VO - AP.tok0, vl);
}

fn pf_voct_c(u: u32) -> u32 {
    return min(8u * (u % PF_VO), max(V_W, 8u) - 8u);
}

fn pf_voct_store(u: u32, x: array<vec4<f32>, 2>) {
    let uq = (u / PF_VO) * PF_VW4 + 2u * (u % PF_VO);
    pf_put_vquad(uq, x[0]);
    pf_put_vquad(uq + 1u, x[1]);
}

// The keys of a tile inside the codec's rows through k_oct_fetch and k_oct_make in one pass,
// each oct loaded, made and stored in turn (the driver schedules the loads). A tile not loaded
// ahead takes this form: loading all of a tile's octs first (pf_koct_fetch, then pf_koct_put)
// was 1.7 % slower on KIVI-4 at 32k (H100).
fn pf_koct_whole(lid: u32, t0: u32, h: u32) {
    // @unroll 8
    for (var k = 0u; k < PF_KO; k++) {
        let u = lid + k * WORKGROUP_SIZE;
        if (u < PF_DP * PF_TO) {
            let row = pf_koct_row(u, t0);
            let c = pf_koct_c(u);
            pf_koct_store(u, k_oct_make(k_oct_fetch(row, c, h), row, c, h));
        }
    }
}

// The values of a tile through v_oct_fetch and v_oct_make in one pass (as pf_koct_whole).
fn pf_voct_whole(lid: u32, t0: u32, vl: u32, h: u32) {
    // @unroll 8
    for (var k = 0u; k < PF_VOK; k++) {
        let u = lid + k * WORKGROUP_SIZE;
        if (u < PF_TT * PF_VO) {
            let row = pf_voct_row(u, t0, vl);
            let c = pf_voct_c(u);
            pf_voct_store(u, v_oct_make(v_oct_fetch(row, c, h), row, c, h));
        }
    }
}

// The same in two passes, for a tile loaded ahead (the tensor-core kernel's KVPACK_TC_PREF
// 1, 2, 4 and 5 on KIVI: measuring only): the words of a tile's octs (k_oct_fetch,
// v_oct_fetch), then their values made and stored (the same units).
fn pf_koct_fetch(lid: u32, t0: u32, h: u32) -> array<KOct, PF_KO> {
    var r: array<KOct, PF_KO>;
    // @unroll 8
    for (var k = 0u; k < PF_KO; k++) {
        let u = lid + k * WORKGROUP_SIZE;
        if (u < PF_DP * PF_TO) {
            r[k] = k_oct_fetch(pf_koct_row(u, t0), pf_koct_c(u), h);
        }
    }
    return r;
}

fn pf_koct_put(lid: u32, t0: u32, h: u32, r: array<KOct, PF_KO>) {
    // @unroll 8
    for (var k = 0u; k < PF_KO; k++) {
        let u = lid + k * WORKGROUP_SIZE;
        if (u < PF_DP * PF_TO) {
            pf_koct_store(u, k_oct_make(r[k], pf_koct_row(u, t0), pf_koct_c(u), h));
        }
    }
}

fn pf_voct_fetch(lid: u32, t0: u32, vl: u32, h: u32) -> array<VOct, PF_VOK> {
    var r: array<VOct, PF_VOK>;
    // @unroll 8
    for (var k = 0u; k < PF_VOK; k++) {
        let u = lid + k * WORKGROUP_SIZE;
        if (u < PF_TT * PF_VO) {
            r[k] = v_oct_fetch(pf_voct_row(u, t0, vl), pf_voct_c(u), h);
        }
    }
    return r;
}

fn pf_voct_put(lid: u32, t0: u32, vl: u32, h: u32, r: array<VOct, PF_VOK>) {
    // @unroll 8
    for (var k = 0u; k < PF_VOK; k++) {
        let u = lid + k * WORKGROUP_SIZE;
        if (u < PF_TT * PF_VO) {
            pf_voct_store(u, v_oct_make(r[k], pf_voct_row(u, t0, vl), pf_voct_c(u), h));
        }
    }
}

// The keys of tile t0 (split end s1) of KV head h.
fn pf_keys(lid: u32, t0: u32, s1: u32, h: u32) {
    let kl = AP.qk - 1u - AP.tok0; // the last key row of the codec (when qk > tok0)
    let tend = min(t0 + PF_TT, s1);
    if (PF_NOLOAD) {
        // @unroll 32
        for (var k = 0u; k < PF_KE; k++) {
            let e = lid + k * WORKGROUP_SIZE;
            pf_put_k(e, f32((e + t0) & 7u) * 0.125);
        }
    } else if (K_QUAD && t0 + PF_TT <= AP.qk) {
        // Every quad whole (the tile inside the codec's rows; its rows are four-aligned, since
        // t0 − tok0 is a multiple of the split size, itself of 32, and of PF_TT): the codec's
        // k_quad without a check per quad, so that an invocation's quads load together (with
        // a check per quad each quad's loads sat in a branch with their use, and the NVIDIA
        // driver's code waited for memory once per quad: 8 times per tile at D = 128).
        pf_kquads_whole(lid, t0, h);
    } else if (tend <= AP.qk) {
        // Four tokens of a channel at a time where the rows allow (pf_kquad).
        // @unroll 8
        for (var k = 0u; k < PF_KQ; k++) {
            let u = lid + k * WORKGROUP_SIZE;
            if (u < PF_DP * PF_TQ) {
                pf_put_kquad(u, pf_kquad(t0 + 4u * (u % PF_TQ) - AP.tok0, kl, min(u / PF_TQ, DIM - 1u), h));
            }
        }
    } else if (RING && t0 >= AP.qk) {
        // @unroll 32
        for (var k = 0u; k < PF_KE; k++) {
            let e = lid + k * WORKGROUP_SIZE;
            let pos = min(t0 + e % PF_TT, s1 - 1u);
            pf_put_k(e, pf_ring(true, pos, AP.ring_cap_k, min(e / PF_TT, DIM - 1u), h));
        }
    } else {
        // @unroll 32
        for (var k = 0u; k < PF_KE; k++) {
            let e = lid + k * WORKGROUP_SIZE;
            let c = min(e / PF_TT, DIM - 1u);
            let pos = min(t0 + e % PF_TT, s1 - 1u);
            var x = 0.0;
            if (pos < AP.qk) {
                x = k_value(pos - AP.tok0, kl, c, h);
            } else if (RING) {
                x = pf_ring(true, pos, AP.ring_cap_k, c, h);
            }
            pf_put_k(e, x);
        }
    }
}

// The values of tile t0 (split end s1) of KV head h: the codec's space, or on a ring split
// (`vring`) the ring's rows (the output space).
fn pf_values(lid: u32, t0: u32, s1: u32, h: u32, vring: bool) {
    let vl = min(s1, AP.qv) - 1u - AP.tok0;
    let width = select(V_W, DIM, vring);
    let tend = min(t0 + PF_TT, s1);
    if (PF_NOLOAD) {
        // @unroll 32
        for (var k = 0u; k < PF_VE; k++) {
            let e = lid + k * WORKGROUP_SIZE;
            pf_put_v(e, f32((e + t0) & 7u) * 0.125);
        }
    } else if (!vring && tend <= AP.qv) {
        // Four channels of a token at a time (pf_vquad).
        pf_vquads(lid, t0, vl, h);
    } else if (RING && (vring || t0 >= AP.qv)) {
        // @unroll 32
        for (var k = 0u; k < PF_VE; k++) {
            let e = lid + k * WORKGROUP_SIZE;
            let pos = min(t0 + e / PF_WP, s1 - 1u);
            pf_put_v(e, pf_ring(false, pos, AP.ring_cap_v, min(e % PF_WP, width - 1u), h));
        }
    } else {
        // @unroll 32
        for (var k = 0u; k < PF_VE; k++) {
            let e = lid + k * WORKGROUP_SIZE;
            let c = min(e % PF_WP, width - 1u);
            let pos = min(t0 + e / PF_WP, s1 - 1u);
            var x = 0.0;
            if (!vring && pos < AP.qv) {
                x = v_value(pos - AP.tok0, vl, c, h);
            } else if (RING) {
                x = pf_ring(false, pos, AP.ring_cap_v, c, h);
            }
            pf_put_v(e, x);
        }
    }
}
