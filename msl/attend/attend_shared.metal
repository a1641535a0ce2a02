// The attention kernels' threadgroup memory (after the hooks: it is sized by them). Twin of
// the workgroup variables of wgsl/attend/attend_core.wgsl.
#define ATTEND_WIDE (V_W > ATTEND_DIM ? V_W : ATTEND_DIM)
struct AttendShared {
    float4 qs[8u * ATTEND_R_CPL];            // scaled queries (vec4 = the 4 vectors), 0 past D
    float4 qp[K_PREP ? K_PREP_W : 1u];       // the key codec's form of them
    float4 wsm[ATTEND_SLICES * ATTEND_WIDE]; // the slices' outputs, then their sum (region 0)
    float fin[ATTEND_WIDE];                  // one vector through v_finish
    float4 msm[ATTEND_SLICES];
    float4 lsm[ATTEND_SLICES];
};

// The partials kernel's: the core's and the key hook's own (K_SHARED, e.g. VecInfer's LUT; the
// merge and prefill kernels never call k_prepare and do not hold it).
struct AttendKShared : AttendShared {
#ifdef K_SHARED
    K_SHARED
#endif
};
