// f16_subnormal_probe: does widening f16 to f32 (unpack2x16float) keep f16 subnormals exact on
// this device? The decode kernel's KIVI hooks can read two codes per mask as subnormals c·2^-24
// (wgsl/common/bits.wgsl, bits_pair_tiny) only where it does: WGSL lets an implementation flush
// them. Run once per device by src/gpu/probe.rs; any inexact value sets flags[0].
//
// @binding(0) flags: array<atomic<u32>> [1]
// Dispatch: 4 workgroups of WORKGROUP_SIZE (64): invocation i checks the pair (i, i + 256) of
// every code up to 511 (b = 8's codes and beyond), halves i and i + 256.

@group(0) @binding(0) var<storage, read_write> flags: array<atomic<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let x = unpack2x16float(i | ((i + 256u) << 16u));
    let tiny = 1.0 / 16777216.0; // 2^-24
    if (x.x != f32(i) * tiny || x.y != f32(i + 256u) * tiny) {
        atomicOr(&flags[0], 1u);
    }
}
