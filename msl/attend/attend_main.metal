// The attention partials kernel (ATTEND_NAME, defined by the composition): the core's tile loop
// and the slices' merge. Twin of wgsl/attend/attend_core.wgsl's attend_main with the subgroup
// variant's steps (SIMD groups are 32 wide: ATT_SG_WIDE); bindings and dispatch as there.

// Sums the 8 cg lanes' partial scores of 8 tokens by recursive halving; lane cg ends with
// token cg's total.
static inline float4 rs_cg(thread const float4* acc, uint cg) {
    float4 b[4];
    const bool up4 = (cg & 4u) != 0u;
    for (uint k = 0u; k < 4u; ++k) {
        const float4 send = up4 ? acc[k] : acc[k + 4u];
        const float4 keep = up4 ? acc[k + 4u] : acc[k];
        b[k] = keep + simd_shuffle_xor(send, ushort(4));
    }
    float4 c[2];
    const bool up2 = (cg & 2u) != 0u;
    for (uint k = 0u; k < 2u; ++k) {
        const float4 send = up2 ? b[k] : b[k + 2u];
        const float4 keep = up2 ? b[k + 2u] : b[k];
        c[k] = keep + simd_shuffle_xor(send, ushort(2));
    }
    const bool up1 = (cg & 1u) != 0u;
    return (up1 ? c[1] : c[0]) + simd_shuffle_xor(up1 ? c[0] : c[1], ushort(1));
}

static inline float4 slice_max(float4 x) {
    for (ushort off = 1; off < 32; off <<= 1) {
        x = max(x, simd_shuffle_xor(x, off));
    }
    return x;
}

// The tile's reference max (wgsl/attend/attend_core.wgsl, DEC_TAU): m, unless one of the SIMD
// group's scores x passes m + ATTEND_TAU; then the max of m and all of them (one vote first).
constant float ATTEND_TAU = 8.0f;
static inline float4 slice_ref_max(float4 x, float4 m) {
    if (simd_any(any(x > m + ATTEND_TAU))) {
        return max(m, slice_max(x));
    }
    return m;
}

static inline float4 slice_sum(float4 x) {
    for (ushort off = 1; off < 32; off <<= 1) {
        x += simd_shuffle_xor(x, off);
    }
    return x;
}

// The sum over the slice's 4 token groups (lanes cg, cg + 8, cg + 16, cg + 24), in every lane.
static inline float4 tg_sum(float4 x) {
    const float4 y = x + simd_shuffle_xor(x, ushort(8));
    return y + simd_shuffle_xor(y, ushort(16));
}

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void ATTEND_NAME(constant AttendParams& A [[buffer(0)]],
                        constant KParams& KP [[buffer(1)]],
                        constant VParams& VP [[buffer(2)]],
                        device const float* q [[buffer(3)]],
                        device float* partials [[buffer(4)]],
                        device const uint* kseg [[buffer(5)]],
                        device const uint* ktab [[buffer(6)]],
                        device const uint* vseg [[buffer(7)]],
                        device const uint* vtab [[buffer(8)]],
                        device const uint* ringk [[buffer(9)]],
                        device const uint* ringv [[buffer(10)]],
                        uint3 wg [[threadgroup_position_in_grid]],
                        uint3 nwg [[threadgroups_per_grid]],
                        uint lid [[thread_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]],
                        uint slice [[simdgroup_index_in_threadgroup]]) {
    threadgroup AttendKShared S;
    const uint wid = wg.y * nwg.x + wg.x;
    const uint nsplit = A.n_split_c + A.n_split_r;
    const uint per_h = A.vblocks * nsplit;
    if (wid >= A.hkv * per_h) {
        return; // uniform: depends on the threadgroup only
    }
    const uint h = wid / per_h;
    const uint split = (wid % per_h) / A.vblocks;
    const uint vb = wid % A.vblocks;
    const bool vring = split >= A.n_split_c;
    uint s0 = A.tok0 + split * A.split_c;
    uint s1 = min(s0 + A.split_c, A.c_end);
    uint part = A.part_c + split;
    if (vring) {
        s0 = A.r0 + (split - A.n_split_c) * A.split_r;
        s1 = min(s0 + A.split_r, A.tok_end);
        part = A.part_r + split - A.n_split_c;
    }
    const uint cg = lane & 7u;
    const uint tg = lane >> 3u;

    bool live[4];
    uint pv[4];
    for (uint i = 0u; i < 4u; ++i) {
        const uint v = vb * 4u + i;
        live[i] = v < A.vec_total;
        pv[i] = A.q_pos0 + min(v, A.vec_total - 1u) / A.qg;
    }
    for (uint c = lid; c < 8u * ATTEND_R_CPL; c += WORKGROUP_SIZE) {
        float4 x = float4(0.0f);
        for (uint i = 0u; i < 4u; ++i) {
            const uint v = vb * 4u + i;
            if (v < A.vec_total && c < ATTEND_DIM) {
                const uint head = h * A.qg + v % A.qg;
                x[i] = q[((v / A.qg) * A.hq + head) * ATTEND_DIM + c] * A.scale_log2;
            }
        }
        S.qs[c] = x;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (K_PREP) {
        k_prepare(A, KP, kseg, ktab, S, lid, h);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    float4 m = float4(ATTEND_NEG);
    float4 l = float4(0.0f);
    VState vs;
    RState rs;
    if (vring) {
        r_reset(rs);
    } else {
        v_reset(vs);
    }
    const uint ntiles = (s1 - s0 + ATTEND_TILE - 1u) / ATTEND_TILE;
    const uint trips = (ntiles + ATTEND_SLICES - 1u) / ATTEND_SLICES;
    for (uint it = 0u; it < trips; ++it) {
        const uint t0 = s0 + (it * ATTEND_SLICES + slice) * ATTEND_TILE;
        const uint lt0 = t0 + 8u * tg;
        float4 acc[8];
        uint w0[8]; // ring rows of the lane's tokens, filled where the ring is read
        // Ring rows are read only for tokens in [qk, T) (clamped below T: a slot past the
        // window may hold anything; a side without a window binds a placeholder).
        // A token group wholly past the split (a trip past its tiles) reads nothing: its rows
        // may lie past the segment's buffer (the next segment's tokens are below qk too).
        const bool past = lt0 >= s1;
        const int nk = past ? 0 : clamp(int(A.qk) - int(lt0), 0, 8);
        const bool ring_k = !past && lt0 + uint(nk) < A.t_total;
        for (uint j = 0u; j < 8u; ++j) {
            acc[j] = float4(0.0f);
        }
        if (nk == 8) {
            k_score(A, KP, kseg, S, lt0 - A.tok0, A.qk - 1u - A.tok0, cg, h, acc);
        } else if (nk == 0) {
            if (ring_k) {
                attend_ring_rows(A, lt0, A.qk, A.t_total - 1u, A.ring_cap_k, w0);
                f16_score(ringk, w0, S, cg, h, acc);
            }
        } else {
            k_score(A, KP, kseg, S, lt0 - A.tok0, A.qk - 1u - A.tok0, cg, h, acc);
            if (ring_k) {
                float4 b[8];
                attend_ring_rows(A, lt0, A.qk, A.t_total - 1u, A.ring_cap_k, w0);
                f16_score(ringk, w0, S, cg, h, b);
                for (int j = nk; j < 8; ++j) {
                    acc[j] = b[j];
                }
            }
        }
        const float4 sc = rs_cg(acc, cg);
        const uint pos = t0 + lane;
        const uint kp = attend_key_pos(A, kseg, pos, h);
        bool4 vis = bool4(false);
        for (uint i = 0u; i < 4u; ++i) {
            vis[i] = live[i] && pos < s1 && attend_visible(A, kp, pv[i]);
        }
        const float4 s = select(float4(ATTEND_NEG), sc, vis);
        // The reference max moves only when a score passes it by more than ATTEND_TAU.
        const float4 m_new = slice_ref_max(s, m);
        const float4 p = select(float4(0.0f), precise::exp2(s - m_new), vis);
        if (any(m_new != m)) { // uniform per SIMD group
            const float4 corr = precise::exp2(m - m_new);
            l *= corr;
            if (vring && !V_SPACE_OUT) {
                r_scale(rs, corr);
            } else {
                v_scale(vs, corr);
            }
        }
        l += p;
        m = m_new;
        float4 pj[8];
        for (uint j = 0u; j < 8u; ++j) {
            pj[j] = simd_shuffle(p, ushort((lane & ~7u) + j));
        }
        const int nv = clamp(int(A.qv) - int(lt0), 0, 8);
        if (vring) {
            attend_ring_rows(A, lt0, A.qv, s1 - 1u, A.ring_cap_v, w0);
            f16_accum(ringv, w0, V_SPACE_OUT ? vs.o : rs.o, cg, h, pj);
        } else if (!V_SPACE_OUT || nv == 8) {
            v_accum(A, VP, vseg, vtab, vs, lt0 - A.tok0, min(s1, A.qv) - 1u - A.tok0, cg, h, pj);
        } else {
            float4 pc[8];
            float4 pr[8];
            for (int j = 0; j < 8; ++j) {
                pc[j] = j < nv ? pj[j] : float4(0.0f);
                pr[j] = j < nv ? float4(0.0f) : pj[j];
            }
            if (nv > 0) {
                v_accum(A, VP, vseg, vtab, vs, lt0 - A.tok0, min(s1, A.qv) - 1u - A.tok0, cg, h, pc);
            }
            // Only rows of ring tokens [qv, s1) are read (another slot may hold anything).
            if (lt0 + uint(nv) < s1) {
                attend_ring_rows(A, lt0, A.qv, s1 - 1u, A.ring_cap_v, w0);
                f16_accum(ringv, w0, vs.o, cg, h, pr);
            }
        }
    }

    // The slices' (m, l, o) merged through threadgroup memory, all at once: m is the same in
    // all lanes of a slice, its token groups are summed by shuffles and every slice writes its
    // sums, unscaled, to a region of its own, lane (cg, tg) the channels i ≡ tg (mod 4) of its
    // eighth; after one barrier thread c adds channel c of every region, scaled by 2^(m_s − M),
    // in slice order, into region 0 (only it reads that word: no barrier after).
    l = slice_sum(l);
    if (lane == 0u) {
        S.msm[slice] = m;
        S.lsm[slice] = l;
    }
    const uint width = vring ? ATTEND_DIM : V_W;
    if (vring && !V_SPACE_OUT) {
        for (uint i = 0u; i < ATTEND_R_CPL; ++i) {
            const float4 x = tg_sum(rs.o[i]);
            const uint c = cg * ATTEND_R_CPL + i;
            if (i % 4u == tg && c < ATTEND_DIM) {
                S.wsm[slice * ATTEND_WIDE + c] = x;
            }
        }
    } else {
        for (uint i = 0u; i < V_CPL; ++i) {
            const float4 x = tg_sum(v_out(vs, i));
            const uint c = cg * V_CPL + i;
            if (i % 4u == tg && c < V_W) {
                S.wsm[slice * ATTEND_WIDE + c] = x;
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float4 mm = S.msm[0];
    for (uint s = 1u; s < ATTEND_SLICES; ++s) {
        mm = max(mm, S.msm[s]);
    }
    float4 ll = float4(0.0f);
    for (uint s = 0u; s < ATTEND_SLICES; ++s) {
        ll += S.lsm[s] * precise::exp2(S.msm[s] - mm);
    }
    for (uint c = lid; c < width; c += WORKGROUP_SIZE) {
        float4 o = float4(0.0f);
        for (uint s = 0u; s < ATTEND_SLICES; ++s) {
            o += S.wsm[s * ATTEND_WIDE + c] * precise::exp2(S.msm[s] - mm);
        }
        S.wsm[c] = o;
    }

    const uint pw = ATTEND_WIDE + 2u;
    if (A.direct == 1u) {
        for (uint i = 0u; i < 4u; ++i) {
            const uint v = vb * 4u + i;
            const float inv = ll[i] > 0.0f ? 1.0f / ll[i] : 0.0f;
            for (uint c = lid; c < width; c += WORKGROUP_SIZE) {
                S.fin[c] = S.wsm[c][i] * inv;
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            if (!vring) {
                v_finish(A, VP, vtab, S, lid, h);
            }
            if (v < A.vec_total) {
                const uint o = ((v / A.qg) * A.hq + h * A.qg + v % A.qg) * ATTEND_DIM;
                for (uint c = lid; c < ATTEND_DIM; c += WORKGROUP_SIZE) {
                    partials[o + c] = S.fin[c];
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        return;
    }
    for (uint i = 0u; i < 4u; ++i) {
        const uint v = vb * 4u + i;
        if (v < A.vec_total) {
            const uint b = ((h * A.vec_total + v) * A.n_parts + part) * pw;
            if (lid == 0u) {
                partials[b] = mm[i];
                partials[b + 1u] = ll[i];
            }
            for (uint c = lid; c < width; c += WORKGROUP_SIZE) {
                partials[b + 2u + c] = S.wsm[c][i];
            }
        }
    }
}
