// ring_write: the residual ring's writes of a recorded GPU-input append (and of any append
// recorded while one is unsynced), conditional on the layer's input status, so that a
// rejected append (and every append after it) leaves the window's rows as they were.
//
// mode 0 (new rows): token s of [a, b) from row s − src_first of `src` to row s % dst_cap of
//   `dst`; skipped once an append was rejected.
// mode 1 (re-lay a grown ring): token s of [a, b) from row s % src_cap of the old ring `src`
//   to row s % dst_cap of the new one; once an append was rejected, the window before it:
//   s of [t − min(t, src_cap), t) for its first token t, every row the old ring can hold.
//
// @binding(0) params: RingParams (uniform)
// @binding(1) src:    array<u32>  rows [.][row_words]
// @binding(2) dst:    array<u32>  ring [dst_cap][row_words]   output
// @binding(3) status: array<u32>  the layer's input status (read)
//
// Dispatch: WORKGROUP_SIZE (256) threads per workgroup, (x, y); grid-stride over the words of
// the rows copied.

// keep in sync with RingParams in src/store/gpu_input.rs
struct RingParams {
    mode: u32,
    a: u32,
    b: u32,
    src_cap: u32,
    src_first: u32,
    dst_cap: u32,
    row_words: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: RingParams;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read> status: array<u32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    var a = params.a;
    var b = params.b;
    if (status[ST_REJECTED] != 0u) {
        if (params.mode == 0u) {
            return;
        }
        b = status[ST_T_OLD];
        a = b - min(b, params.src_cap);
    }
    let rw = params.row_words;
    let n = (b - a) * rw;
    let stride = nwg.x * nwg.y * WORKGROUP_SIZE;
    for (var i = linear_workgroup(wg, nwg) * WORKGROUP_SIZE + lid; i < n; i += stride) {
        let s = a + i / rw;
        let w = i % rw;
        var src_row = s - params.src_first;
        if (params.mode == 1u) {
            src_row = s % params.src_cap;
        }
        dst[(s % params.dst_cap) * rw + w] = src[src_row * rw + w];
    }
}
