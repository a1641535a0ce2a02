// evict_select in MSL: the twin of wgsl/policy/evict_select_io.wgsl (what it computes,
// bindings, dispatch) with the workgroup-memory variant's scan (wgsl/policy/evict_select.wgsl):
// one threadgroup per head, the n-th evicted found by the same radix select (eight passes of
// 8-bit digits, threadgroup atomics), the kept flags' prefix sum a Hillis–Steele scan in
// threadgroup memory. CPU reference src/policy/select.rs `keep_lists`.
#include <metal_stdlib>
using namespace metal;

// Keep in sync with SelectParams in src/policy/kernels.rs and wgsl/policy/evict_select_io.wgsl.
struct SelectParams {
    uint heads;
    uint unit;
    uint first;
    uint end;
    uint n;
    uint kept;
    uint p0;
    uint p1;
};

// An f32's bits, mapped so that uint order is IEEE total order.
static inline uint total_order_key(float x) {
    const uint b = as_type<uint>(x);
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

[[max_total_threads_per_threadgroup(WORKGROUP_SIZE)]]
kernel void evict_select(constant SelectParams& P [[buffer(0)]],
                         device const float* scores [[buffer(1)]],
                         device uint* keys [[buffer(2)]],
                         device uint* keep [[buffer(3)]],
                         uint3 wg [[threadgroup_position_in_grid]],
                         uint3 nwg [[threadgroups_per_grid]],
                         uint lid [[thread_index_in_threadgroup]]) {
    threadgroup uint scan[WORKGROUP_SIZE];
    threadgroup atomic_uint hist[256];
    threadgroup uint2 pick;
    const uint h = wg.y * nwg.x + wg.x;
    if (h >= P.heads) {
        return;
    }
    const uint c_all = P.end - P.first;
    if (OLDEST == 0u) {
        for (uint c = lid; c < c_all; c += WORKGROUP_SIZE) {
            const uint t0 = (P.first + c) * P.unit;
            float s = scores[t0 * P.heads + h];
            for (uint t = 1u; t < P.unit; t++) {
                s += scores[(t0 + t) * P.heads + h];
            }
            keys[h * c_all + c] = total_order_key(s);
        }
    }
    for (uint u = lid; u < P.first; u += WORKGROUP_SIZE) {
        keep[h * P.kept + u] = u;
    }
    for (uint b = lid; b < 256u; b += WORKGROUP_SIZE) {
        atomic_store_explicit(&hist[b], 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    // The n-th smallest composite (key, ~c): wgsl/policy/evict_select_io.wgsl, select_threshold.
    uint2 nth = uint2(0u);
    if (OLDEST == 0u && P.n > 0u) {
        uint need = P.n;
        for (uint p = 0u; p < 8u; p++) {
            const uint q = p % 4u;
            const uint above = ~(0xffffffffu >> (8u * q));
            const uint shift = 24u - 8u * q;
            for (uint c = lid; c < c_all; c += WORKGROUP_SIZE) {
                const uint k = keys[h * c_all + c];
                uint w = k;
                bool agree = (k & above) == (nth.x & above);
                if (p >= 4u) {
                    w = ~c;
                    agree = k == nth.x && (w & above) == (nth.y & above);
                }
                if (agree) {
                    atomic_fetch_add_explicit(&hist[(w >> shift) & 255u], 1u, memory_order_relaxed);
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            if (lid == 0u) {
                uint below = 0u;
                uint d = 0u;
                for (;;) {
                    const uint x = atomic_load_explicit(&hist[d], memory_order_relaxed);
                    if (below + x >= need || d == 255u) {
                        break;
                    }
                    below += x;
                    d++;
                }
                pick = uint2(d, need - below);
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            const uint2 pk = pick;
            need = pk.y;
            if (p < 4u) {
                nth.x |= pk.x << shift;
            } else {
                nth.y |= pk.x << shift;
            }
            for (uint b = lid; b < 256u; b += WORKGROUP_SIZE) {
                atomic_store_explicit(&hist[b], 0u, memory_order_relaxed);
            }
            // Every lane has read `pick`, and the counts are cleared, before the next pass.
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
    }
    uint placed = P.first;
    for (uint base = 0u; base < c_all; base += WORKGROUP_SIZE) {
        const uint c = base + lid;
        uint k = 0u;
        if (c < c_all) {
            if (OLDEST == 1u) {
                k = c >= P.n ? 1u : 0u;
            } else if (P.n == 0u) {
                k = 1u;
            } else {
                const uint kc = keys[h * c_all + c];
                k = (kc > nth.x || (kc == nth.x && ~c > nth.y)) ? 1u : 0u;
            }
        }
        scan[lid] = k;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint off = 1u; off < WORKGROUP_SIZE; off <<= 1u) {
            const uint v = lid >= off ? scan[lid - off] : 0u;
            threadgroup_barrier(mem_flags::mem_threadgroup);
            scan[lid] += v;
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        if (k == 1u) {
            keep[h * P.kept + placed + scan[lid] - 1u] = P.first + c;
        }
        placed += scan[WORKGROUP_SIZE - 1u];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
}
