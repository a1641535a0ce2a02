// attend_prefill: attention of many query vectors per KV head (a prefill chunk: Tq rows × the
// grouped heads), in GEMM form with register tiles. Composed after the core
// (wgsl/attend/attend_core.wgsl: its bindings, uniform, `split_work`, `visible`, `key_pos`, PW)
// and the codecs' hooks, of which it uses only the element and four-element readers (through
// the prefill kernels' tile staging, wgsl/attend/attend_stage.wgsl, composed before it):
//   key codec:   fn k_value(row: u32, last: u32, c: u32, h: u32) -> f32   (k̂ of segment row
//                `row` (rows past `last` read row `last`), channel c < D, KV head h)
//                optionally const K_QUAD: bool, fn k_quad(row: u32, c: u32, h: u32) -> vec4<f32>
//                (k_value's values of rows row .. row + 3, read together: called where K_QUAD,
//                row a multiple of 4 and row + 3 ≤ last; a codec without them gets K_QUAD =
//                false from src/attention/kernel.rs)
//                optionally const K_F16_EXACT: bool (every k̂ it returns is exact in f16: the
//                tensor-core kernel then stages and multiplies no low part of the keys;
//                false where absent)
//   value codec: fn v_value(row: u32, last: u32, c: u32, h: u32) -> f32   (its space: c < V_W)
//                optionally const V_QUAD: bool, fn v_quad(row: u32, c: u32, h: u32) -> vec4<f32>
//                (v_value's values of channels c .. c + 3 of row `row`: called where V_QUAD,
//                c a multiple of 4, c + 3 < V_W and row within the segment; likewise)
// It has no cross-lane step: the subgroup and workgroup-memory paths run the same source.
//
// **Mapping.** A workgroup of 128 invocations serves one KV head h, PF_QB query vectors and
// one split (the decode kernel's plan with PF_QB vectors per workgroup; dispatch index
// ((h · splits) + split) · vblocks + vb). Before the tile loop the workgroup stores its
// vectors' queries, scaled by scale·log2(e), in `pf_q` (channel-major: [c][vector], 0 past D
// and for vectors past the call). Per tile of PF_TT tokens:
//   1. every invocation decodes PF_KE keys (the codec's four tokens of a channel at a time,
//      pf_kquad; the ring's f16 rows one by one) into `pf_kv` channel-major ([c][token]:
//      PF_DP rows of PF_TT; channels past D repeat channel D − 1 and meet a zero query;
//      `pf_keys`);
//   2. invocation lid owns the scores of 4 vectors (vector quad lid % PF_Q4, a vec4) × 1
//      token, summed over one part of the channels (PF_PARTS parts of PF_PC channels, PF_SN
//      invocations per part): per channel a 16-byte and a 4-byte read of workgroup memory
//      feed 4 multiply-adds. It writes them to `pf_s` ([part][token][vector]); part 0 masks
//      (its masked scores are NEG). (4 × 4 tiles of vectors × tokens, two 16-byte reads per 16
//      multiply-adds, measured 9.6 % slower on the H200: BENCHMARKS.md "Prefill chunks".)
//   3. the online softmax (base 2) of each vector, spread over the workgroup (PF_SM
//      invocations per vector, PF_ST tokens each; `pf_softmax`): scores summed over the
//      parts (NEG where part 0 masked), the invocations' maxima met in `pf_mx` behind a
//      barrier, so that each holds the vector's running max; each keeps its part of the sum
//      (added up after the tile loop), the weights go to part 0's scores and the factor that
//      rescales the output to its slot from PF_FS; then every
//      invocation decodes PF_VE values (the codec's space, four channels of a token at a
//      time, pf_vquad; or the ring's rows: the output space) into `pf_kv`, token-major
//      ([token][channel]: PF_TT rows of PF_WP; channels past the width repeat its last, into
//      output channels that are never written; `pf_values`);
//   4. invocation lid owns the output of 4 vectors (lid % PF_Q4) × PF_OC4 vec4 of channels
//      (lid / PF_Q4): rescaled by the factors, then p·v̂ added token by token.
// Five workgroup barriers per tile. A record (m, l, o) per (vector, split) goes to the
// partials (never direct: the merge kernel finishes, as for the decode kernel's splits).
//
// Workgroup storage (f32): pf_q PF_DP·PF_QB, pf_kv PF_TT·PF_WP, pf_s 4·(WORKGROUP_SIZE +
// PF_Q4), pf_mx WORKGROUP_SIZE: 27,264 bytes at D = 128, 27,200 at D = 256 (within Metal's
// 32 KiB; src/attention/plan.rs `prefill_workgroup_bytes`).

// Output (and key) channels a row holds: the wider of the codec's value space and D.
const PF_W: u32 = max(V_W, DIM);
// That width rounded up to 64 (the output tiles' vec4 columns), D rounded up to 16 (the
// staging loops' exact shares).
const PF_WP: u32 = (PF_W + 63u) / 64u * 64u;
const PF_DP: u32 = (DIM + 15u) / 16u * 16u;
// Query vectors per workgroup and tokens per tile: 32 × 16 up to width 128, 16 × 8 beyond.
const PF_QB: u32 = select(16u, 32u, PF_WP <= 128u);
const PF_TT: u32 = select(8u, 16u, PF_WP <= 128u);
const PF_Q4: u32 = PF_QB / 4u;
// Output tiles: PF_Q4 vector quads × PF_CG channel groups of PF_OC4 vec4 each.
const PF_CG: u32 = WORKGROUP_SIZE / PF_Q4;
const PF_OC4: u32 = PF_WP / (4u * PF_CG);
// Score tiles: 4 vectors (a vector quad) × 1 token per invocation, summed over one part of
// the channels: PF_SN = PF_Q4 · PF_TT invocations per part, PF_PARTS parts of PF_PC channels
// (one part, every channel, up to width 128; 4 parts of D / 4 beyond). A part's channels go
// PF_CU at a time (unrolled) inside a loop: at most 8 trips per 16-token tile (D = 128), so
// that a 65,536-token split stays within lavapipe's 65,535 loop iterations
// (plan::LOOP_LIMITED_SPLIT: 4,096 × 9); with 8-token tiles a part is unrolled whole.
const PF_SN: u32 = PF_Q4 * PF_TT;
const PF_PARTS: u32 = WORKGROUP_SIZE / PF_SN;
const PF_PC: u32 = PF_DP / PF_PARTS;
const PF_CU: u32 = select(16u, PF_PC, PF_PARTS > 1u);
// pf_s's slots of the factors that rescale the output (a vec4 per vector quad, after the
// parts' scores).
const PF_FS: u32 = PF_PARTS * PF_TT * PF_Q4;
// Parts the softmax adds to part 0.
const PF_SUM1: u32 = PF_PARTS - 1u;
// Softmax: invocations per vector and tokens per invocation (4 × 4 up to width 128, 8 × 1
// beyond).
const PF_SM: u32 = WORKGROUP_SIZE / PF_QB;
const PF_ST: u32 = PF_TT / PF_SM;
// Query elements each invocation stores before the tile loop.
const PF_QE: u32 = PF_DP * PF_QB / WORKGROUP_SIZE;

// Measuring only (KVPACK_PF_VARIANT, src/attention/gpu.rs): 1, synthetic tiles instead of the
// codecs' reads (the kernel's floor without memory traffic). Phase floors (wrong results;
// each leaves one step out, for its share of the time): 3, no softmax (the output step reads
// the scores as they lie, factors of 1); 4, no score step (the softmax reads whatever pf_s
// holds); 5, no output step (the tile's values are still staged). 2 is unused: it was, in
// turn, loads held in registers across steps (d3f8c74), the spread softmax before it became
// the kernel's (c91bceb), and 4 vectors × 2 tokens per score invocation (1da5cd5; 13 % slower
// at 245 registers on an H100): BENCHMARKS.md, "Prefill chunks".
const PF_NOLOAD: bool = ATT_PF_VARIANT == 1u;
const PF_NO_SOFTMAX: bool = ATT_PF_VARIANT == 3u;
const PF_NO_SCORES: bool = ATT_PF_VARIANT == 4u;
const PF_NO_OUTPUT: bool = ATT_PF_VARIANT == 5u;

var<workgroup> pf_q: array<vec4<f32>, PF_DP * PF_Q4>;
var<workgroup> pf_kv: array<vec4<f32>, PF_TT * PF_WP / 4u>;
// Scores by part, [part][token][vector quad]; after the softmax, the weights in part 0; then
// the factors, [vector quad] from PF_FS.
var<workgroup> pf_s: array<vec4<f32>, PF_FS + PF_Q4>;
// The softmax invocations' maxima of the tile ([invocation]); after the tile loop their sums.
var<workgroup> pf_mx: array<f32, WORKGROUP_SIZE>;

// The staging's stores (wgsl/attend/attend_stage.wgsl): keys channel-major, values
// token-major, both in pf_kv.
fn pf_put_kquad(u: u32, x: vec4<f32>) {
    pf_kv[u] = x;
}

fn pf_put_k(e: u32, x: f32) {
    pf_kv[e / 4u][e % 4u] = x;
}

fn pf_put_vquad(u: u32, x: vec4<f32>) {
    pf_kv[u] = x;
}

fn pf_put_v(e: u32, x: f32) {
    pf_kv[e / 4u][e % 4u] = x;
}

// The scores of token pos for vectors v0 + 4·sq .. + 3, masked (NEG where hidden or past s1).
fn pf_mask(a: vec4<f32>, pos: u32, s1: u32, h: u32, v0: u32, sq: u32) -> vec4<f32> {
    var s = vec4<f32>(NEG);
    if (pos < s1) {
        let kp = key_pos(pos, h);
        // @unroll 4
        for (var j = 0u; j < 4u; j++) {
            let v = v0 + 4u * sq + j;
            if (v < AP.vec_total && visible(kp, AP.q_pos0 + v / AP.qg)) {
                s[j] = a[j];
            }
        }
    }
    return s;
}

// Step 2: invocation lid's scores, vector quad sq × token st over the channels of its part,
// into pf_s (part 0 masked). Per channel one 16-byte read of the queries and one 4-byte read
// of the keys feed four multiply-adds.
fn pf_scores(lid: u32, t0: u32, s1: u32, h: u32, v0: u32) {
    let sq = lid % PF_Q4;
    let st = (lid % PF_SN) / PF_Q4;
    let part = lid / PF_SN;
    var a = vec4<f32>(0.0);
    for (var cb = part * PF_PC; cb < (part + 1u) * PF_PC; cb += PF_CU) {
        // @unroll 64 pfc
        for (var i = 0u; i < PF_CU; i++) {
            let at = (cb + i) * PF_TT + st;
            a += pf_q[(cb + i) * PF_Q4 + sq] * pf_kv[at / 4u][at % 4u];
        }
    }
    if (part == 0u) {
        a = pf_mask(a, t0 + st, s1, h, v0, sq);
    }
    pf_s[(part * PF_TT + st) * PF_Q4 + sq] = a;
}

// Step 3's online softmax (base 2), spread over the workgroup: invocation lid serves vector
// lid % PF_QB over tokens (lid / PF_QB) · PF_ST .. + PF_ST − 1 of the tile. It sums their
// scores over the parts (NEG where part 0 masked) and puts its maximum in pf_mx[lid]; after
// a barrier it reads the vector's PF_SM maxima, so every invocation of a vector holds the
// same running max m; it writes its tokens' weights to part 0 and keeps its own part of the
// sum l (the parts are added after the tile loop); the vector's first invocation writes the
// factor that rescales the output to its slot from PF_FS. (One invocation per vector over
// all the tile's tokens, a warp of four working, measured 9–11 % slower on the H200.)
fn pf_softmax(lid: u32, m: ptr<function, f32>, l: ptr<function, f32>) {
    let v = lid % PF_QB;
    let q4 = v / 4u;
    let j = v % 4u;
    let tb = (lid / PF_QB) * PF_ST;
    var mt = NEG;
    // @unroll 4
    for (var i = 0u; i < PF_ST; i++) {
        let t = tb + i;
        let p0 = pf_s[t * PF_Q4 + q4][j];
        var s = p0;
        // @unroll 16
        for (var pt = 0u; pt < PF_SUM1; pt++) {
            s += pf_s[((pt + 1u) * PF_TT + t) * PF_Q4 + q4][j];
        }
        s = select(NEG, s, p0 > NEG);
        pf_s[t * PF_Q4 + q4][j] = s;
        mt = max(mt, s);
    }
    pf_mx[lid] = mt;
    workgroupBarrier();
    // @unroll 8
    for (var k = 0u; k < PF_SM; k++) {
        mt = max(mt, pf_mx[k * PF_QB + v]);
    }
    let m_new = max(*m, mt);
    let corr = exp2(*m - m_new);
    *m = m_new;
    var sum = 0.0;
    // @unroll 4
    for (var i = 0u; i < PF_ST; i++) {
        let t = tb + i;
        let s = pf_s[t * PF_Q4 + q4][j];
        let p = select(0.0, exp2(s - m_new), s > NEG);
        pf_s[t * PF_Q4 + q4][j] = p;
        sum += p;
    }
    *l = *l * corr + sum;
    if (lid < PF_QB) {
        pf_s[PF_FS + q4][j] = corr;
    }
}

fn prefill_main(lid: u32, wid: u32) {
    let w = split_work(wid);
    if (!w.live) {
        return; // uniform: depends on the workgroup only
    }
    let h = w.h;
    let vring = w.ring;
    let s0 = w.s0;
    let s1 = w.s1;
    let width = select(V_W, DIM, vring);
    let v0 = w.vb * PF_QB;
    // 0. The workgroup's queries, scaled, channel-major.
    // @unroll 32
    for (var k = 0u; k < PF_QE; k++) {
        let e = lid + k * WORKGROUP_SIZE;
        let c = e / PF_QB;
        let j = e % PF_QB;
        let v = v0 + j;
        var x = 0.0;
        if (v < AP.vec_total && c < DIM) {
            x = q[((v / AP.qg) * AP.hq + h * AP.qg + v % AP.qg) * DIM + c] * AP.scale_log2;
        }
        pf_q[c * PF_Q4 + j / 4u][j % 4u] = x;
    }
    // The output tile's vectors and channels (step 4).
    let sq = lid % PF_Q4;
    let st = lid / PF_Q4;
    var o: array<vec4<f32>, 4u * PF_OC4>;
    var m = NEG;
    var l = 0.0;
    // (No barrier here: the first tile's barrier after its keys orders the query stores.)
    for (var t0 = s0; t0 < s1; t0 += PF_TT) {
        // 1. The tile's keys, channel-major.
        pf_keys(lid, t0, s1, h);
        workgroupBarrier();
        // 2. Scores: 4 vectors × 1 token per invocation, by part of the channels.
        if (!PF_NO_SCORES) {
            pf_scores(lid, t0, s1, h, v0);
        }
        workgroupBarrier();
        // 3. The softmax, spread over the workgroup; the tile's values.
        if (!PF_NO_SOFTMAX) {
            pf_softmax(lid, &m, &l);
        }
        pf_values(lid, t0, s1, h, vring);
        workgroupBarrier();
        // 4. The output tile: rescaled, then p·v̂ token by token.
        if (PF_NO_OUTPUT) {
            workgroupBarrier();
            continue;
        }
        var corr = pf_s[PF_FS + sq];
        if (PF_NO_SOFTMAX) {
            corr = vec4<f32>(1.0);
        }
        // @unroll 4
        for (var j = 0u; j < 4u; j++) {
            // @unroll 4
            for (var k = 0u; k < PF_OC4; k++) {
                o[j * PF_OC4 + k] *= corr[j];
            }
        }
        // @unroll 16 pft
        for (var t = 0u; t < PF_TT; t++) {
            let p = pf_s[t * PF_Q4 + sq];
            // @unroll 4
            for (var k = 0u; k < PF_OC4; k++) {
                let x = pf_kv[t * PF_WP / 4u + st * PF_OC4 + k];
                // @unroll 4
                for (var j = 0u; j < 4u; j++) {
                    o[j * PF_OC4 + k] += p[j] * x;
                }
            }
        }
        workgroupBarrier();
    }
    // The vector's PF_SM parts of l added up (the last tile's barrier ordered pf_mx's reads).
    pf_mx[lid] = l;
    workgroupBarrier();
    l = 0.0;
    // @unroll 8
    for (var k = 0u; k < PF_SM; k++) {
        l += pf_mx[k * PF_QB + lid % PF_QB];
    }
    // 5. The records of (vector, split): m and l from the vector's first softmax invocation,
    // o from the output tile's.
    let base = (h * AP.vec_total) * AP.n_parts + w.part;
    if (lid < PF_QB && v0 + lid < AP.vec_total) {
        let b = (base + (v0 + lid) * AP.n_parts) * PW;
        partials[b] = m;
        partials[b + 1u] = l;
    }
    // @unroll 4
    for (var j = 0u; j < 4u; j++) {
        let v = v0 + 4u * sq + j;
        if (v < AP.vec_total) {
            let b = (base + v * AP.n_parts) * PW + 2u;
            // @unroll 4
            for (var k = 0u; k < PF_OC4; k++) {
                // @unroll 4
                for (var i = 0u; i < 4u; i++) {
                    let c = (st * PF_OC4 + k) * 4u + i;
                    if (c < width) {
                        partials[b + c] = o[j * PF_OC4 + k][i];
                    }
                }
            }
        }
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    prefill_main(lid, linear_workgroup(wg, nwg));
}
