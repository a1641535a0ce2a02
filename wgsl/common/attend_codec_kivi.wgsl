// Specialized per cache: ATT_KBITS, ATT_KGROUP, ATT_VBITS, ATT_VGROUP (with PARAMS_F16), so
// the divisions and word arithmetic below are by constants.
// Attention codec: KIVI packed codes (layout: src/kivi/layout.rs), reconstructed in
// registers: k̂ = f32(q·scale) + lo per (block, head, channel) group, v̂ likewise per
// (token, head, channel group). Region rows are segment rows: row = pos - region_start +
// seg_offset.
//
// @binding(3) kcodes:  array<u32> [blocks][Hkv][D][kgroup_words]
// @binding(4) kparams: array<u32> [blocks][Hkv][D][1 or 2]
// @binding(5) vcodes:  array<u32> [tokens][Hkv][vrow_words]
// @binding(6) vparams: array<u32> [tokens][Hkv][vn_groups][1 or 2]

@group(0) @binding(3) var<storage, read> kcodes: array<u32>;
@group(0) @binding(4) var<storage, read> kparams: array<u32>;
@group(0) @binding(5) var<storage, read> vcodes: array<u32>;
@group(0) @binding(6) var<storage, read> vparams: array<u32>;

fn key_pair(gi: u32) -> vec2<f32> {
    if (PARAMS_F16 == 1u) {
        return unpack2x16float(kparams[gi]);
    }
    return vec2<f32>(bitcast<f32>(kparams[2u * gi]), bitcast<f32>(kparams[2u * gi + 1u]));
}

fn value_pair(gi: u32) -> vec2<f32> {
    if (PARAMS_F16 == 1u) {
        return unpack2x16float(vparams[gi]);
    }
    return vec2<f32>(bitcast<f32>(vparams[2u * gi]), bitcast<f32>(vparams[2u * gi + 1u]));
}

const KGW: u32 = (ATT_KGROUP * ATT_KBITS + 31u) / 32u;
const VGW: u32 = (ATT_VGROUP * ATT_VBITS + 31u) / 32u;

fn codec_key(pos: u32, h: u32, d: u32) -> f32 {
    let r = pos - A.region_start + A.seg_offset;
    let gi = ((r / ATT_KGROUP) * A.hkv + h) * DIM + d;
    let start = (r % ATT_KGROUP) * ATT_KBITS;
    let w = gi * KGW + (start >> 5u);
    let off = start & 31u;
    var v = kcodes[w] >> off;
    if (off + ATT_KBITS > 32u) {
        v |= kcodes[w + 1u] << (32u - off);
    }
    let pr = key_pair(gi);
    return kivi_reconstruct(v & ((1u << ATT_KBITS) - 1u), pr.x, pr.y);
}

fn codec_value(pos: u32, h: u32, d: u32) -> f32 {
    let r = pos - A.region_start + A.seg_offset;
    let jg = d / ATT_VGROUP;
    let row = r * A.hkv + h;
    let start = (d - jg * ATT_VGROUP) * ATT_VBITS;
    let w = row * A.vrow_words + jg * VGW + (start >> 5u);
    let off = start & 31u;
    var v = vcodes[w] >> off;
    if (off + ATT_VBITS > 32u) {
        v |= vcodes[w + 1u] << (32u - off);
    }
    let pr = value_pair(row * A.vn_groups + jg);
    return kivi_reconstruct(v & ((1u << ATT_VBITS) - 1u), pr.x, pr.y);
}
