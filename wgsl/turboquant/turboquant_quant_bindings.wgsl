// Bindings of turboquant_quant (both variants); its input access: turboquant_quant_io.wgsl.
//
// @binding(0) P:        TqParams (uniform)
// @binding(1) ring:     array<u32> [ring_tokens][in_row_words]  f16 residual rows, token s in row s % ring_tokens
// @binding(2) incoming: array<u32> [n][in_row_words]            f16 rows of this append, token inc_start + i
// @binding(3) codes:    array<u32> [tokens][H][S][row_words]    the segment's codes stream (written)
// @binding(4) norms:    array<u32> [tokens][ceil(H / 2)]        the segment's norms stream (written)
// @binding(5) tables:   array<u32>                              signs [H][ceil(P/32)], codebooks [S][2][2^b]

@group(0) @binding(0) var<uniform> P: TqParams;
@group(0) @binding(1) var<storage, read> ring: array<u32>;
@group(0) @binding(2) var<storage, read> incoming: array<u32>;
@group(0) @binding(3) var<storage, read_write> codes: array<u32>;
@group(0) @binding(4) var<storage, read_write> norms: array<u32>;
@group(0) @binding(5) var<storage, read> tables: array<u32>;
