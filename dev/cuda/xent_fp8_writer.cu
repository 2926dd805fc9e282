/* xent_fp8_writer: the fused cross-entropy (bt_kernels.cuh's bt__k_xent_fused_kernel) writing the
   FP8 head's logit gradient in e5m2, as bt_k_cross_entropy_fused_fp8 does, with the writer (the W
   the kernel is templated on: what it does with each 8 gradient values of a row) in other forms.
   Nsight Compute at the default run's micro-batch (H200, 2026-12-04, bench/RESULTS.md#fp8) had this
   kernel at 19.4 ms where bf16's in-place writer takes 15.9: 1.44 against 1.20 ps a logit while it
   writes 1 byte a logit instead of 2, so its element path, not memory, bounds it. The ladder:
     v0  bf16's in-place writer (bt__k_xf_inplace: the gradient over the logits), for the reference
     v1  the shipped FP8 writer (bt_fp8.cuh's bt__k_xf_fp8): the amax kept on the bf16 values' |bits|
         two lanes to an unsigned max (__vmaxu2), widened to f32 once at the end; each pair widened
         by placing its bits, scaled and converted two at a time
     v2  what shipped before: each value widened to f32 first, its |bits| folded into the amax (a
         LOP and an IMNMX a value)
     v3  v2 with the amax on the bf16 pairs as floats (__hmax2: HMNMX2.BF16); the same bytes and
         amax as v2 for finite gradients, but a NaN drops out of the max where v2 (and v1) keep it
     v4  v1 with its amax merged per warp (a warp max, one atomic where it beats the value read)
         instead of a block barrier and one atomic a row; v5 v1 without merging it (timing only)
     v6  v1 writing each row's bytes over the row's own logits (its first Vp bytes of 2 Vp), not into
         a buffer of their own; v7 v1 with streaming stores (st.global.cs; timing only)
   v1, v2 and v3 are checked against each other (q, the losses, lse and the amax bits, on fresh random
   logits, every byte), and v1 against v2 again with a NaN logit in one row (its gradient all NaN: the
   amax must say so). Timed with CUDA events (the median of 50 calls) at [5248, 50304 of 50257] bf16,
   a head chunk of the default run (262,144 rows in 50 chunks under the 1 GiB cap).
   Measured (H200, 2026-12-04, v2 shipping): at [5360, 50304] v0 325.8 us (1.208 ps a logit), v2
   394.0 (1.461), v3 362.4 (1.344). At [5248, 50304]: v0 321.2, v2 387.1, v3 358.8, and the writer
   that ships since (v1's form) 357.7; the amax alone on pairs did not do it: with __vmaxu2 but each
   value widened through bt__k_tof 384.3, with __hmax2_nan and __bfloat1622float2 387.9. Widening a
   pair by placing its bits is the gain; v1 keeps v2's NaN rule at v3's speed.
   A fold writer measured against v1 at [10496, 50304] (H200, 2026-12-04; not kept): the gradient
   taken in f32 instead of T, gv r folded into the exponent on the short path (one FFMA and one MUFU
   a value, then the conversion; one rounding, so 1.0% of the bytes one e5m2 step from v1's), 717.4
   us against v1's 703.6 (bf16 in place 626.3): fewer instructions a logit and no faster, so the
   element path is not what keeps this kernel 12% behind bf16's in-place one. Nor is the amax's merge
   at each row's end (H200, 2026-12-04, [10496, 50304], two runs): v1 701.8 / 702.0 us, v4 695.9 /
   697.6 (the same bytes and amax, a NaN's too), v5 693.3 / 693.7, v0 625.3 / 627.2: the merge costs
   ~8 us of v1's 76 over bf16's; not shipped for 0.04% of the default run.
   Writing over the logits (H200, 2026-12-04, [10496, 50304], two runs): v6 676.1 / 676.8 us against
   v1's 704.1 / 703.6 and v0's 625.8 / 626.5 (the same bytes, losses, lse and amax as v1, read back at
   the pitch); streaming stores v7 701.4 / 701.4. So the separate buffer's stores are 28 us of the 78:
   lines just read are cheaper to write than fresh ones. Not shipped: q over the logits needs the
   head's products and the transpose to read q at a pitch of 2 Vp, and the unprimed step and rows
   wider than shared memory the other layout (q alone, qt over the logits), for ~0.2% of the default run.
   Build: make dev (build/dev/xent_fp8_writer); run: build/dev/xent_fp8_writer [rows, default 5248] */
#include "common.cuh"

typedef __nv_bfloat16 T;

/* v2's writer: bt__k_xf_fp8's contract (q [rows, Vp] e5m2 bytes of g * (1 / *scale_in), the amax of
   the bf16-rounded g into *amax, *scale_used <- *scale_in), the amax on each value widened to f32 */
struct xf_fp8_widened {
    uint8_t *q; int64_t Vp; float r; const float *scale_in; float *scale_used; unsigned *amax, m;
    void shift(int64_t r0) { q += r0 * Vp; }
    __device__ __forceinline__ void start() { r = 1.f / *scale_in; }
    __device__ __forceinline__ void put(T *, int64_t row, int64_t c, const T *a) {
        float f[8];
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = bt__k_tof(a[j]);
        *reinterpret_cast<uint2 *>(q + row * Vp + c * 8) = bt__k_fp8_pack8<1>(f, r, m);
    }
    __device__ __forceinline__ void done() {
        const unsigned bm = bt__k_block_umax(m);
        if (threadIdx.x == 0) {
            if (amax && bm) atomicMax(amax, bm);
            if (blockIdx.x == 0 && scale_used) *scale_used = *scale_in;
        }
    }
};
/* v3's writer: the contract above, the amax on bf16 pairs as floats */
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
/* v4: v1 with its amax merged per warp (the warp's max, then one atomic only where it beats the value
   read: the amax only grows), without v1's block barrier at the end of each row */
struct xf_fp8_warp : bt__k_xf_fp8<T, 1> {
    __device__ __forceinline__ void done() {
        const unsigned short h = (unsigned short)max(m & 0xffffu, m >> 16);
        T v;
        memcpy(&v, &h, 2);
        const unsigned bm = __reduce_max_sync(0xffffffffu, bt__abs_bits(bt__k_tof(v)));
        if ((threadIdx.x & 31) == 0 && amax && bm && bm > *(volatile unsigned *)amax) atomicMax(amax, bm);
        if (blockIdx.x == 0 && threadIdx.x == 0 && scale_used) *scale_used = *scale_in;
    }
};
/* v5: v1 without merging its amax at all: timing only (what the merge costs), its amax not kept */
struct xf_fp8_nomerge : bt__k_xf_fp8<T, 1> {
    __device__ __forceinline__ void done() {
        if (blockIdx.x == 0 && threadIdx.x == 0 && scale_used) *scale_used = *scale_in;
    }
};

/* v1's packing (bt_fp8.cuh's bt__k_xf_fp8::put without its store): 8 bf16 values a as e5m2 bytes of a * r,
   m <- the larger of it and their |bits| two lanes a word (v6 and v7 store it elsewhere) */
__device__ __forceinline__ uint2 pack_e5m2(const T *a, float r, unsigned &m) {
    uint32_t u[4], w[2] = {0u, 0u};
    memcpy(u, a, 16);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        m = __vmaxu2(m, u[j] & 0x7fff7fffu);
        const float2 fv = bt__k_pair_f32<T>(u[j]);
        w[j >> 1] |= bt__k_fp8_cvt2<1>(__fmul_rn(fv.x, r), __fmul_rn(fv.y, r)) << (16 * (j & 1));
    }
    return make_uint2(w[0], w[1]);
}
/* v6: v1 writing each row's bytes over the row's own logits (the row's first Vp bytes of its 2 Vp, read
   into shared memory before any is written), not into a buffer of their own: whether the separate
   buffer's stores are what keeps v1 behind v0, which also writes in place */
struct xf_fp8_over : bt__k_xf_fp8<T, 1> {
    void shift(int64_t) {}
    __device__ __forceinline__ void put(T *xr, int64_t, int64_t c, const T *a) {
        *reinterpret_cast<uint2 *>(reinterpret_cast<uint8_t *>(xr) + c * 8) = pack_e5m2(a, r, m);
    }
};

/* v7: v1 with q's stores marked streaming (st.global.cs: evict first), timing only beside v1 */
struct xf_fp8_cs : bt__k_xf_fp8<T, 1> {
    __device__ __forceinline__ void put(T *, int64_t row, int64_t c, const T *a) {
        __stcs(reinterpret_cast<uint2 *>(q + row * Vp + c * 8), pack_e5m2(a, r, m));
    }
};

int main(int argc, char **argv) {
    bt_k_init(0);
    cudaStream_t s = (cudaStream_t)0;
    const int64_t N = argc > 1 ? atoll(argv[1]) : 5248, V = 50257, Vp = 50304, n = N * Vp;
    T *lg0, *lg;
    uint8_t *q[6];
    int32_t *tg;
    float *loss[7], *lse[7], *gloss, *f;
    CK(cudaMalloc(&lg0, n * 2)); CK(cudaMalloc(&lg, n * 2)); CK(cudaMalloc(&tg, N * 4)); CK(cudaMalloc(&gloss, N * 4));
    CK(cudaMalloc(&f, 28 * sizeof(float)));
    for (int k = 1; k < 6; k++) { CK(cudaMalloc(&q[k], n)); CK(cudaMalloc(&loss[k], N * 4)); CK(cudaMalloc(&lse[k], N * 4)); }
    loss[0] = loss[1]; lse[0] = lse[1];
    fill_bf16(lg0, n, 7, -4.f, 4.f);
    {
        int32_t *ht = (int32_t *)malloc(N * 4);
        float *hg = (float *)malloc(N * 4);
        uint64_t r = 0x9e3779b97f4a7c15ull;
        for (int64_t i = 0; i < N; i++) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; ht[i] = (int32_t)(r % (uint64_t)V); hg[i] = 1.f / (float)N; }
        CK(cudaMemcpy(tg, ht, N * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(gloss, hg, N * 4, cudaMemcpyHostToDevice));
        free(ht); free(hg);
    }
    /* f [4 k ..]: version k's scale, scale used, amax bits */
    float init[28] = {0.f};
    for (int k = 1; k < 7; k++) { init[4 * k] = 4e-9f; init[4 * k + 1] = -1.f; }   /* g <= gloss = 1 / N: 1.9e-4 / 4e-9 < 57344 */
    bt__k_xf_fp8<T, 1> w1 = {q[1], Vp, 0.f, f + 4, f + 5, (unsigned *)(f + 6), 0u};
    xf_fp8_widened w2 = {q[2], Vp, 0.f, f + 8, f + 9, (unsigned *)(f + 10), 0u};
    xf_fp8_pairs w3 = {q[3], Vp, 0.f, f + 12, f + 13, (unsigned *)(f + 14), __floats2bfloat162_rn(0.f, 0.f)};
    xf_fp8_warp w4;
    xf_fp8_nomerge w5;
    xf_fp8_over w6;
    xf_fp8_cs w7;
    CK(cudaMalloc(&loss[6], N * 4)); CK(cudaMalloc(&lse[6], N * 4));
    w4.q = q[4]; w4.Vp = Vp; w4.r = 0.f; w4.scale_in = f + 16; w4.scale_used = f + 17; w4.amax = (unsigned *)(f + 18); w4.m = 0u;
    w5.q = q[5]; w5.Vp = Vp; w5.r = 0.f; w5.scale_in = f + 20; w5.scale_used = f + 21; w5.amax = (unsigned *)(f + 22); w5.m = 0u;
    w7.q = q[5]; w7.Vp = Vp; w7.r = 0.f; w7.scale_in = f + 20; w7.scale_used = f + 21; w7.amax = (unsigned *)(f + 22); w7.m = 0u;
    w6.q = NULL; w6.Vp = Vp; w6.r = 0.f; w6.scale_in = f + 24; w6.scale_used = f + 25; w6.amax = (unsigned *)(f + 26); w6.m = 0u;
    auto run = [&](int ver) {
        int ok = 0;
        if (ver == 0) ok = bt__k_xf_launch<T>(loss[0], lse[0], lg, tg, gloss, N, V, Vp, -100, NULL, bt__k_xf_inplace<T>(), s);
        else if (ver == 1) ok = bt__k_xf_launch<T>(loss[1], lse[1], lg0, tg, gloss, N, V, Vp, -100, NULL, w1, s);
        else if (ver == 2) ok = bt__k_xf_launch<T>(loss[2], lse[2], lg0, tg, gloss, N, V, Vp, -100, NULL, w2, s);
        else if (ver == 3) ok = bt__k_xf_launch<T>(loss[3], lse[3], lg0, tg, gloss, N, V, Vp, -100, NULL, w3, s);
        else if (ver == 4) ok = bt__k_xf_launch<T>(loss[4], lse[4], lg0, tg, gloss, N, V, Vp, -100, NULL, w4, s);
        else if (ver == 5) ok = bt__k_xf_launch<T>(loss[5], lse[5], lg0, tg, gloss, N, V, Vp, -100, NULL, w5, s);
        else if (ver == 6) ok = bt__k_xf_launch<T>(loss[6], lse[6], lg, tg, gloss, N, V, Vp, -100, NULL, w6, s);
        else ok = bt__k_xf_launch<T>(loss[5], lse[5], lg0, tg, gloss, N, V, Vp, -100, NULL, w7, s);
        if (!ok) { fprintf(stderr, "the fused kernel did not launch (shared memory)\n"); exit(1); }
    };
    auto check = [&](int a, int b) {   /* every byte of q, the losses, lse, the scale used and the amax bits */
        return differ(q[a], q[b], n) + differ(loss[a], loss[b], N * 4) + differ(lse[a], lse[b], N * 4) + differ(f + 4 * a + 1, f + 4 * b + 1, 8);
    };
    CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
    for (int ver = 1; ver < 5; ver++) run(ver);
    CK(cudaDeviceSynchronize());
    printf("[%lld, %lld of %lld] bf16 logits; v2 against v1: %s; v3 against v1: %s; v4 against v1: %s\n", (long long)N, (long long)V,
           (long long)Vp, check(1, 2) ? "DIFFERS" : "the same bytes, losses, lse, scale and amax", check(1, 3) ? "DIFFERS" : "the same",
           check(1, 4) ? "DIFFERS" : "the same");
    {   /* v6 from a fresh copy of the logits: its bytes (a pitch of 2 Vp) against v1's */
        CK(cudaMemcpy(lg, lg0, n * 2, cudaMemcpyDeviceToDevice));
        run(6);
        uint8_t *q6;
        CK(cudaMalloc(&q6, n));
        CK(cudaMemcpy2D(q6, Vp, lg, 2 * Vp, Vp, N, cudaMemcpyDeviceToDevice));
        CK(cudaDeviceSynchronize());
        const long bad = differ(q[1], q6, n) + differ(loss[1], loss[6], N * 4) + differ(lse[1], lse[6], N * 4) + differ(f + 5, f + 25, 8);
        printf("  v6 against v1: %s\n", bad ? "DIFFERS" : "the same bytes, losses, lse, scale and amax");
        CK(cudaFree(q6));
    }
    {   /* a NaN logit in row 3: its gradient all NaN, the amax NaN */
        const uint16_t nan = 0x7fc0;
        CK(cudaMemcpy((uint16_t *)lg0 + 3 * Vp + 100, &nan, 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
        for (int ver = 1; ver < 5; ver++) run(ver);
        float h[24];
        CK(cudaMemcpy(h, f, sizeof h, cudaMemcpyDeviceToHost));
        printf("  a NaN logit: v2 against v1: %s, v4 against v1: %s; amax v1 %g, v2 %g, v3 %g, v4 %g\n",
               check(1, 2) ? "DIFFERS" : "the same bytes and amax", check(1, 4) ? "DIFFERS" : "the same", h[6], h[10], h[14], h[18]);
        fill_bf16(lg0, n, 7, -4.f, 4.f);
    }
    for (int ver = 0; ver < 8; ver++) {
        if (ver == 0 || ver == 6) CK(cudaMemcpy(lg, lg0, n * 2, cudaMemcpyDeviceToDevice));   /* overwritten in place: values change, not the work */
        const double us = median_us([&] { run(ver); }, s);
        printf("  v%d  %7.1f us  %.3f ps a logit  (%s)\n", ver, us, us * 1e6 / (double)n,
               ver == 0 ? "bf16 in place, 2 + 2 bytes a logit" : ver == 6 ? "e5m2 over the row's logits, 2 + 1 bytes a logit" : ver == 7 ? "e5m2, streaming stores" : ver == 5 ? "e5m2, the amax not merged: timing only" : "e5m2 written, 2 + 1 bytes a logit");
    }
    CK(cudaFree(lg0)); CK(cudaFree(lg)); CK(cudaFree(tg)); CK(cudaFree(gloss)); CK(cudaFree(f));
    for (int k = 1; k < 6; k++) { CK(cudaFree(q[k])); CK(cudaFree(loss[k])); CK(cudaFree(lse[k])); }
    CK(cudaFree(loss[6])); CK(cudaFree(lse[6]));
    return 0;
}
