// kivi_unfused: the BASELINE a user of an array library would get for KIVI quantization (keys
// per channel over G tokens, values per token over G channels): one pass per array operation,
// every intermediate written to memory and read back by the next pass. A measuring tool for benches/gpu_kivi.rs (fused vs unfused), not a
// kvpack kernel: its KernelDef lives in the bench, not in src/gpu/registry.rs's KERNELS.
//
// The host runs it once per `mode` (plus the existing bitpack kernel between modes 5 and 6).
// A group g is (block j, channel e), g = j·HD + e, for keys (axis 0) and (token t, channel
// group c), g = t·HD/G + c, for values (axis 1); group(t, e) is the group of element (t, e).
//   0 MIN     lo[g]    = min over the G elements of group g             (src = x, dst = lo)
//   1 MAX     hi[g]    = max ...                                        (src = x, dst = hi)
//   2 SCALE   scale[g] = (hi - lo) * inv_levels                         (src = lo, aux = hi)
//   3 SUB     y[t, e]  = x[t, e] - lo[group(t, e)]     f32 [T][HD]      (src = x, aux = lo)
//   4 DIV     z[t, e]  = y[t, e] / scale[group(t, e)]  f32 [T][HD]      (src = y, aux = scale)
//   5 ROUND   codes    = u8(clamp(round(z), 0, levels)), 4 codes per word, written in the
//                        packed layout's order: keys group-major ([block][HD][G]; an array
//                        library would need one more transpose pass for it: the baseline is
//                        favoured), values row-major ([T][HD], already group-contiguous)
//                                                                       (src = z)
//   (bitpack: the existing kernel packs the u8 codes into the segment's code words)
//   6 PARAMS  params[g] = f16(scale) | f16(lo) << 16                    (src = scale, aux = lo)
// x is f16 rows [T][HD] as u32 words (2 halves each, HD even); lo, hi, scale, y, z are f32
// (as u32 bits). The arithmetic is the fused kernel's (wgsl/kivi/kivi_common.wgsl: kivi_scale,
// kivi_code), so codes agree except where a compiler rounds differently.
//
// @binding(0) U:   UnfusedParams (uniform)
// @binding(1) src: array<u32>
// @binding(2) aux: array<u32>
// @binding(3) dst: array<u32>
// Dispatch: one invocation per item (`n` items: groups for 0, 1, 2, 6; elements for 3, 4;
// output words of 4 codes for 5), workgroups split over (x, y).

struct UnfusedParams {
    mode: u32,
    n: u32,          // items of this pass
    hd: u32,         // channels per token (H * D), even
    group: u32,      // G, tokens per key group / channels per value group
    levels: u32,     // 2^b - 1
    inv_levels: f32, // f32(1 / (2^b - 1))
    axis: u32,       // 0 keys, 1 values
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> U: UnfusedParams;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read> aux: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;

fn x_at(i: u32) -> f32 {
    let pair = unpack2x16float(src[i >> 1u]);
    return select(pair.x, pair.y, (i & 1u) == 1u);
}

fn f32_at(b: u32) -> f32 {
    return bitcast<f32>(b);
}

// The group of element i = t·HD + e.
fn group_of(i: u32) -> u32 {
    if (U.axis == 0u) {
        return (i / U.hd / U.group) * U.hd + i % U.hd;
    }
    return i / U.group;
}

// Element k of group g.
fn member(g: u32, k: u32) -> u32 {
    if (U.axis == 0u) {
        return ((g / U.hd) * U.group + k) * U.hd + g % U.hd;
    }
    return g * U.group + k;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid;
    if (i >= U.n) {
        return;
    }
    switch U.mode {
        case 0u, 1u: {
            var acc = select(-3.0e38, 3.0e38, U.mode == 0u);
            for (var t = 0u; t < U.group; t++) {
                let x = x_at(member(i, t));
                if (U.mode == 0u) {
                    acc = min(acc, x);
                } else {
                    acc = max(acc, x);
                }
            }
            dst[i] = bitcast<u32>(acc);
        }
        case 2u: {
            dst[i] = bitcast<u32>((f32_at(aux[i]) - f32_at(src[i])) * U.inv_levels);
        }
        case 3u: {
            dst[i] = bitcast<u32>(x_at(i) - f32_at(aux[group_of(i)]));
        }
        case 4u: {
            dst[i] = bitcast<u32>(f32_at(src[i]) / f32_at(aux[group_of(i)]));
        }
        case 5u: {
            var out = 0u;
            for (var k = 0u; k < 4u; k++) {
                let c = 4u * i + k; // code index in the packed layout's order
                let r = round(f32_at(src[member(c / U.group, c % U.group)]));
                out |= u32(clamp(r, 0.0, f32(U.levels))) << (8u * k);
            }
            dst[i] = out;
        }
        default: {
            dst[i] = pack2x16float(vec2<f32>(f32_at(src[i]), f32_at(aux[i])));
        }
    }
}
