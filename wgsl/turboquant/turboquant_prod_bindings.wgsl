// Bindings of turboquant_prod_quant (both variants; ../shared/spec/turboquant.md
// "TurboQuant-Prod"). Layouts: src/codecs/turboquant/prod.rs.
//
// @binding(0) P:        TqParams (uniform; row_words of the b − 1 stage-1 bits)
// @binding(1) ring:     array<u32> [ring_tokens][in_row_words]  f16 residual rows, token s in row s % ring_tokens
// @binding(2) incoming: array<u32> [n][in_row_words]            f16 rows of this append, token inc_start + i
// @binding(3) codes:    array<u32> [tokens][H][row_words]       stage-1 codes (segment, written)
// @binding(4) signs:    array<u32> [tokens][H][m / 32]          σ_i = [(S r)_i ≥ 0], LSB-first (segment, written)
// @binding(5) norms:    array<u32> [tokens][ceil(H / 2)]        f16 n (segment, written)
// @binding(6) rhos:     array<u32> [tokens][ceil(H / 2)]        f16 ρ = ‖r‖ (segment, written)
// @binding(7) tables:   array<u32>                              signs [H][ceil(P/32)], codebook [2][2^(b−1)], Sᵀ [P][m] f32

@group(0) @binding(0) var<uniform> P: TqParams;
@group(0) @binding(1) var<storage, read> ring: array<u32>;
@group(0) @binding(2) var<storage, read> incoming: array<u32>;
@group(0) @binding(3) var<storage, read_write> codes: array<u32>;
@group(0) @binding(4) var<storage, read_write> signs: array<u32>;
@group(0) @binding(5) var<storage, read_write> norms: array<u32>;
@group(0) @binding(6) var<storage, read_write> rhos: array<u32>;
@group(0) @binding(7) var<storage, read> tables: array<u32>;
