/* xent_fp8_writer: the fused cross-entropy (bt_kernels.cuh's bt__k_xent_fused_kernel) writing the
   FP8 head's logit gradient in e5m2, as bt_k_cross_entropy_fused_fp8 does, with the writer (the W
   the kernel is templated on: what it does with each 8 gradient values of a row) in other forms.
   Nsight Compute at the default run's micro-batch (H200, 2026-12-04, bench/RESULTS.md#fp8) has this
   kernel at 19.4 ms where bf16's in-place writer takes 15.9: 1.44 against 1.20 ps a logit while it
   writes 1 byte a logit instead of 2, so its element path, not memory, bounds it. The ladder:
     v0  bf16's in-place writer (bt__k_xf_inplace: the gradient over the logits), for the reference
     v1  the shipped FP8 writer (bt_fp8.cuh's bt__k_xf_fp8): each value widened to f32, its |bits|
         folded into the amax (a LOP and an IMNMX a value), scaled and converted two at a time
     v2  v1 with the amax kept on the bf16 pairs as they are (sign bits masked, HMNMX2.BF16: two
         values an instruction, no widening for it), widened to f32 once at the end; the same
         bytes and amax as v1 for finite gradients (a NaN would be dropped where v1 keeps it)
   v1 and v2 are checked against each other (q, the losses, lse and the amax bits, on fresh random
   logits, every byte) and timed with CUDA events (the median of 50 calls) at [5360, 50304 of
   50257] bf16, about one head chunk of the default run's micro-batch. Built, not yet run.
   Build: make dev (build/dev/xent_fp8_writer); run: build/dev/xent_fp8_writer */
#include "common.cuh"

typedef __nv_bfloat16 T;

/* v2's writer: bt__k_xf_fp8's contract (q [rows, Vp] e5m2 bytes of g * (1 / *scale_in), the amax of
   the bf16-rounded g into *amax, *scale_used <- *scale_in), the amax on bf16 pairs */
struct xf_fp8_pairs {
    uint8_t *q; int64_t Vp; float r; const float *scale_in; float *scale_used; unsigned *amax; __nv_bfloat162 m2;
    void shift(int64_t r0) { q += r0 * Vp; }
    __device__ __forceinline__ void start() { r = 1.f / *scale_in; m2 = __floats2bfloat162_rn(0.f, 0.f); }
    __device__ __forceinline__ void put(T *, int64_t row, int64_t c, const T *a) {
        uint32_t u[4], w[2] = {0u, 0u};
        memcpy(u, a, 16);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t ab = u[j] & 0x7fff7fffu;
            __nv_bfloat162 h;
            memcpy(&h, &ab, 4);
            m2 = __hmax2(m2, h);
            const float f0 = __uint_as_float(u[j] << 16), f1 = __uint_as_float(u[j] & 0xffff0000u);
            w[j >> 1] |= bt__k_fp8_cvt2<1>(__fmul_rn(f0, r), __fmul_rn(f1, r)) << (16 * (j & 1));
        }
        *reinterpret_cast<uint2 *>(q + row * Vp + c * 8) = make_uint2(w[0], w[1]);
    }
    __device__ __forceinline__ void done() {
        uint32_t mb;
        memcpy(&mb, &m2, 4);
        const unsigned lo = (mb & 0xffffu) << 16, hi = mb & 0xffff0000u;
        const unsigned bm = bt__k_block_umax(lo > hi ? lo : hi);
        if (threadIdx.x == 0) {
            if (amax && bm) atomicMax(amax, bm);
            if (blockIdx.x == 0 && scale_used) *scale_used = *scale_in;
        }
    }
};

int main(void) {
    bt_k_init(0);
    cudaStream_t s = (cudaStream_t)0;
    const int64_t N = 5360, V = 50257, Vp = 50304, n = N * Vp;
    T *lg0, *lg;
    uint8_t *q[2];
    int32_t *tg;
    float *loss[2], *lse[2], *gloss, *f;
    CK(cudaMalloc(&lg0, n * 2)); CK(cudaMalloc(&lg, n * 2)); CK(cudaMalloc(&tg, N * 4)); CK(cudaMalloc(&gloss, N * 4));
    CK(cudaMalloc(&f, 8 * sizeof(float)));
    for (int k = 0; k < 2; k++) { CK(cudaMalloc(&q[k], n)); CK(cudaMalloc(&loss[k], N * 4)); CK(cudaMalloc(&lse[k], N * 4)); }
    fill_bf16(lg0, n, 7, -4.f, 4.f);
    {
        int32_t *ht = (int32_t *)malloc(N * 4);
        float *hg = (float *)malloc(N * 4);
        uint64_t r = 0x9e3779b97f4a7c15ull;
        for (int64_t i = 0; i < N; i++) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; ht[i] = (int32_t)(r % (uint64_t)V); hg[i] = 1.f / (float)N; }
        CK(cudaMemcpy(tg, ht, N * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(gloss, hg, N * 4, cudaMemcpyHostToDevice));
        free(ht); free(hg);
    }
    /* f: [0] the scale, [1] v1's scale used, [2] v1's amax, [4] the scale, [5] v2's used, [6] v2's amax */
    const float init[8] = {4e-9f, -1.f, 0.f, 0.f, 4e-9f, -1.f, 0.f, 0.f};   /* g <= gloss = 1 / N: 1.9e-4 / 4e-9 < 57344 */
    CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
    bt__k_xf_fp8<T, 1> w1 = {q[0], Vp, 0.f, f, f + 1, (unsigned *)(f + 2), 0u};
    xf_fp8_pairs w2 = {q[1], Vp, 0.f, f + 4, f + 5, (unsigned *)(f + 6), __floats2bfloat162_rn(0.f, 0.f)};
    auto run = [&](int ver, int k) {
        int ok = 0;
        if (ver == 0) ok = bt__k_xf_launch<T>(loss[k], lse[k], lg, tg, gloss, N, V, Vp, -100, NULL, bt__k_xf_inplace<T>(), s);
        else if (ver == 1) ok = bt__k_xf_launch<T>(loss[k], lse[k], lg0, tg, gloss, N, V, Vp, -100, NULL, w1, s);
        else ok = bt__k_xf_launch<T>(loss[k], lse[k], lg0, tg, gloss, N, V, Vp, -100, NULL, w2, s);
        if (!ok) { fprintf(stderr, "the fused kernel did not launch (shared memory)\n"); exit(1); }
    };
    run(1, 0); run(2, 1);
    CK(cudaDeviceSynchronize());
    const long bad = differ(q[0], q[1], n) + differ(loss[0], loss[1], N * 4) + differ(lse[0], lse[1], N * 4) + differ(f + 1, f + 5, 8);
    printf("[%lld, %lld of %lld] bf16 logits; v2 against v1: %s\n", (long long)N, (long long)V, (long long)Vp,
           bad ? "DIFFERS" : "the same bytes, losses, lse, scale and amax");
    for (int ver = 0; ver <= 2; ver++) {
        if (ver == 0) CK(cudaMemcpy(lg, lg0, n * 2, cudaMemcpyDeviceToDevice));   /* overwritten in place: values change, not the work */
        const double us = median_us([&] { run(ver, ver == 2); }, s);
        printf("  v%d  %7.1f us  %.3f ps a logit  (%s)\n", ver, us, us * 1e6 / (double)n,
               ver == 0 ? "bf16 in place, 2 + 2 bytes a logit" : "e5m2 written, 2 + 1 bytes a logit");
    }
    CK(cudaFree(lg0)); CK(cudaFree(lg)); CK(cudaFree(tg)); CK(cudaFree(gloss)); CK(cudaFree(f));
    for (int k = 0; k < 2; k++) { CK(cudaFree(q[k])); CK(cudaFree(loss[k])); CK(cudaFree(lse[k])); }
    return 0;
}
