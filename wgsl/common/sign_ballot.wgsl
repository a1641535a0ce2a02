// The sign bits of one pass of sketch rows by subgroupBallot (the subgroup variants of
// qjl_encode and turboquant_prod_quant; needs sign_words.wgsl): the ballot's vec4<u32> holds
// lane i's predicate at bit i % 32 of word i / 32, the lanes' rows are consecutive (a subgroup
// is consecutive invocations in order: src/gpu/probe.rs checks it per device), so the
// subgroup's first lane ORs each 32-row word of the ballot into its place. Any subgroup width
// 8..128. `r`: this invocation's row; call in uniform control flow.
fn sgn_ballot(r: u32, bit: bool, sgi: u32, sgs: u32) {
    let b = subgroupBallot(bit);
    if (sgi == 0u) {
        // @unroll 4
        for (var k = 0u; k < 4u; k++) {
            let width = min(sgs - min(sgs, 32u * k), 32u); // lanes in word k
            if (width > 0u) {
                var bits = b[k]; // @qjl-ballot
                if (width < 32u) {
                    bits &= (1u << width) - 1u;
                }
                sgn_or(r + 32u * k, bits);
            }
        }
    }
}
