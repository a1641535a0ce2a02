// Specialized per cache: ATT_KBITS, ATT_KGROUP, ATT_VBITS, ATT_VGROUP (with PARAMS_F16), so
// the divisions and word arithmetic below are by constants; per region: ATT_STAGE.
//
// ATT_STAGE = 1 (the host sets it when ATT_KGROUP is a multiple of 32 and the region's rows
// start 32-aligned, so a 32-token tile lies inside one key block): `codec_stage` copies the
// tile's packed words (its slice of every channel's key stream, the block's key parameters,
// its value rows and their parameters) into workgroup memory with a few coalesced loads per
// invocation, and codec_key / codec_value decode from there. Still packed: nothing is
// dequantized outside registers. ATT_STAGE = 0: every element is read from the buffers.
// Attention codec: KIVI packed codes (layout: src/codecs/kivi/layout.rs), reconstructed in
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
// Parameter words per group, value groups per row, value words per row (src/codecs/kivi/layout.rs).
const PW: u32 = 2u - PARAMS_F16;
const VNG: u32 = (DIM + ATT_VGROUP - 1u) / ATT_VGROUP;
const VRW: u32 = (DIM / ATT_VGROUP) * VGW + ((DIM % ATT_VGROUP) * ATT_VBITS + 31u) / 32u;
const CODEC_STAGES: bool = ATT_STAGE == 1u;
// Staged tile (1-word placeholders when not staging): keys [D][KBITS] words (32 tokens of each
// channel's stream), key params [D][PW], values [TILE][VRW], value params [TILE][VNG][PW].
const KST_N: u32 = select(1u, DIM * ATT_KBITS, CODEC_STAGES);
const KPS_N: u32 = select(1u, DIM * PW, CODEC_STAGES);
const VST_N: u32 = select(1u, TILE * VRW, CODEC_STAGES);
const VPS_N: u32 = select(1u, TILE * VNG * PW, CODEC_STAGES);
var<workgroup> kst: array<u32, KST_N>;
var<workgroup> kps: array<u32, KPS_N>;
var<workgroup> vst: array<u32, VST_N>;
var<workgroup> vps: array<u32, VPS_N>;
var<private> st_t0: u32; // first position of the staged tile

// Copies tokens [t0, t0 + n) of KV head h (n <= TILE, inside one key block) into the stage.
// Every invocation of the workgroup calls it; the core puts barriers around it.
fn codec_stage(t0: u32, n: u32, h: u32, lid: u32) {
    st_t0 = t0;
    let r0 = t0 - A.region_start + A.seg_offset;
    let gi0 = ((r0 / ATT_KGROUP) * A.hkv + h) * DIM;      // group of (block, h, channel 0)
    let w0 = ((r0 % ATT_KGROUP) * ATT_KBITS) >> 5u;      // the tile's first word per stream
    for (var x = lid; x < DIM * ATT_KBITS; x += 128u) {
        let d = x / ATT_KBITS;
        kst[x] = kcodes[(gi0 + d) * KGW + w0 + x % ATT_KBITS];
    }
    for (var x = lid; x < DIM * PW; x += 128u) {
        kps[x] = kparams[gi0 * PW + x];
    }
    for (var x = lid; x < n * VRW; x += 128u) {
        let j = x / VRW;
        vst[x] = vcodes[((r0 + j) * A.hkv + h) * VRW + x % VRW];
    }
    for (var x = lid; x < n * VNG * PW; x += 128u) {
        let j = x / (VNG * PW);
        vps[x] = vparams[((r0 + j) * A.hkv + h) * VNG * PW + x % (VNG * PW)];
    }
}

fn staged_pair(words_f16: u32, lo_f32: u32, hi_f32: u32) -> vec2<f32> {
    if (PARAMS_F16 == 1u) {
        return unpack2x16float(words_f16);
    }
    return vec2<f32>(bitcast<f32>(lo_f32), bitcast<f32>(hi_f32));
}

fn codec_key(pos: u32, h: u32, d: u32) -> f32 {
    if (CODEC_STAGES) {
        let start = (pos - st_t0) * ATT_KBITS;
        let w = d * ATT_KBITS + (start >> 5u);
        let off = start & 31u;
        var v = kst[w] >> off;
        if (off + ATT_KBITS > 32u) {
            v |= kst[w + 1u] << (32u - off);
        }
        let pr = staged_pair(kps[d], kps[min(d * PW, KPS_N - 1u)], kps[min(d * PW + 1u, KPS_N - 1u)]);
        return kivi_reconstruct(v & ((1u << ATT_KBITS) - 1u), pr.x, pr.y);
    }
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
    if (CODEC_STAGES) {
        let j = pos - st_t0;
        let jg = d / ATT_VGROUP;
        let start = (d - jg * ATT_VGROUP) * ATT_VBITS;
        let w = j * VRW + jg * VGW + (start >> 5u);
        let off = start & 31u;
        var v = vst[w] >> off;
        if (off + ATT_VBITS > 32u) {
            v |= vst[w + 1u] << (32u - off);
        }
        let pi = (j * VNG + jg) * PW;
        let pr = staged_pair(vps[pi], vps[pi], vps[min(pi + 1u, VPS_N - 1u)]);
        return kivi_reconstruct(v & ((1u << ATT_VBITS) - 1u), pr.x, pr.y);
    }
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
