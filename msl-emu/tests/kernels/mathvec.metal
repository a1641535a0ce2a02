// Vector constructors and casts convert (never bit-cast); half rounds; rint/round differ.
#include <metal_stdlib>
using namespace metal;

kernel void mathvec(device float* out [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
    if (tid != 0) {
        return;
    }
    int4 i = int4(1, -2, 3, 7);
    float4 a = float4(i);
    float4 b = (float4)i * 0.5;
    float4 c = float4(a.xy, 9, 10);
    half h = (half)1.0 / (half)3.0;
    float3 d = float3(2.0);
    out[0] = a.x; out[1] = a.y; out[2] = a.w;
    out[3] = b.y; out[4] = c.z; out[5] = c.w;
    out[6] = (float)h;
    out[7] = rint(2.5); out[8] = round(2.5);
    out[9] = clamp(5.0f, 0.0f, 1.0f);
    out[10] = as_type<float>(0x3f800000u);
    out[11] = precise::exp(1.0f);
    out[12] = select(1.0f, 2.0f, d.x > 1.0);
    out[13] = fma(2.0f, 3.0f, 1.0f);
    out[14] = rsqrt(4.0f);
    out[15] = isnan(sqrt(-1.0f)) ? 1.0 : 0.0;
    out[16] = (float)(1.5h + 0.25h);
}
