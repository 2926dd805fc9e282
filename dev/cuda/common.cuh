/* common.cuh - what the FP8 ladders of dev/cuda share: the library compiled in, CK, a random bf16 fill,
   a byte comparison of two device buffers, and the median time of a launch. Included first by
   the FP8 ladders (layernorm_fp8_cast.cu, fp8_cast_pipeline.cu, fp8_transpose.cu, xent_fp8_writer.cu,
   fp8_gelu_epilogue.cu, ...). */
#ifndef DEV_CUDA_COMMON_CUH
#define DEV_CUDA_COMMON_CUH
#define BT_ALLOC_IMPLEMENTATION
#define BT_KERNELS_IMPLEMENTATION
#include "bt_kernels.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

/* d [n] bf16 <- uniform in [lo, hi) from a xorshift stream of seed (seed != 0) */
static void fill_bf16(__nv_bfloat16 *d, int64_t n, uint64_t seed, float lo, float hi) {
    __nv_bfloat16 *h = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * (size_t)n);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        h[i] = __float2bfloat16(lo + (hi - lo) * (float)((s >> 11) * (1.0 / 9007199254740992.0)));
    }
    CK(cudaMemcpy(d, h, sizeof(__nv_bfloat16) * (size_t)n, cudaMemcpyHostToDevice));
    free(h);
}
/* the bytes in which device buffers a and b [n bytes] differ */
static long differ(const void *a, const void *b, size_t n) {
    unsigned char *ha = (unsigned char *)malloc(n), *hb = (unsigned char *)malloc(n);
    CK(cudaMemcpy(ha, a, n, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(hb, b, n, cudaMemcpyDeviceToHost));
    long d = 0;
    for (size_t i = 0; i < n; i++) d += ha[i] != hb[i];
    free(ha); free(hb);
    return d;
}
/* microseconds of launch() on stream s: 3 calls to warm up, then the median of 50 timed with CUDA events */
template <typename F> static double median_us(F launch, cudaStream_t s) {
    enum { REPS = 50 };
    static cudaEvent_t e0[REPS], e1[REPS];
    static int made = 0;
    if (!made) {
        for (int i = 0; i < REPS; i++) { CK(cudaEventCreate(&e0[i])); CK(cudaEventCreate(&e1[i])); }
        made = 1;
    }
    for (int r = 0; r < 3; r++) launch();
    for (int r = 0; r < REPS; r++) { CK(cudaEventRecord(e0[r], s)); launch(); CK(cudaEventRecord(e1[r], s)); }
    CK(cudaDeviceSynchronize());
    float ms[REPS];
    for (int r = 0; r < REPS; r++) CK(cudaEventElapsedTime(&ms[r], e0[r], e1[r]));
    std::sort(ms, ms + REPS);
    return 1e3 * ms[REPS / 2];
}
#endif
