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
/* the copy engine's 2-d boxes (the ladders' copy-engine versions): a box of map at (c0, c1) into shared
   memory, completing on mbarrier bar (its bytes expected by bt__k_mbar_expect), or from shared memory
   to global in a bulk group */
__device__ __forceinline__ void tma_load2d(uint32_t sdst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(sdst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
__device__ __forceinline__ void tma_store2d(const CUtensorMap *map, int c0, int c1, uint32_t ssrc) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(ssrc) : "memory");
}
/* a ring of ns stages whose full barriers are the 8-byte words at sfull: thread 0 makes them and issues
   issue(stage, tile) for the block's first ns tiles (blockIdx.x, + gridDim.x, ..) below ntiles; then the
   block's barrier */
template <typename F> __device__ __forceinline__ void ring_prime(uint32_t sfull, int ns, int64_t ntiles, F issue) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < ns; i++) bt__k_mbar_init(sfull + 8 * i, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        for (int i = 0; i < ns; i++)
            if (blockIdx.x + (int64_t)i * gridDim.x < ntiles) issue(i, blockIdx.x + (int64_t)i * gridDim.x);
    }
    __syncthreads();
}
/* the 2-d tensor map of a row-major [rows, cols] matrix of esize-byte elements: boxes of bc columns x br
   rows, swizzle sw, zeros past the edge; exits with who's message where the driver cannot */
static void map2d(CUtensorMap *m, const void *p, CUtensorMapDataType dt, int esize, int64_t rows, int64_t cols, int bc, int br,
                  CUtensorMapSwizzle sw, const char *who) {
    bt__k_tmap_encode_fn enc = bt__k_tmap_encoder();
    if (!enc) { fprintf(stderr, "%s: no cuTensorMapEncodeTiled in this driver\n", who); exit(1); }
    const cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, str[1] = {(cuuint64_t)(cols * esize)};
    const cuuint32_t box[2] = {(cuuint32_t)bc, (cuuint32_t)br}, one[2] = {1, 1};
    if (enc(m, dt, 2, (void *)p, dim, str, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        fprintf(stderr, "%s: cuTensorMapEncodeTiled refused [%lld, %lld]\n", who, (long long)rows, (long long)cols);
        exit(1);
    }
}
#endif
