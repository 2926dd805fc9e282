/* fp8_gelu_epilogue: the MLP's GELU in cuBLASLt's FP8 epilogues, against what ships (the product to
   bf16, then the cast with GELU or its derivative folded in, bt_k_fp8_cast_act). The GELU casts are
   the largest of a GPT-2 step: ~1.0 ms (forward) and ~1.5 ms (backward) of each layer of the default
   run's 262,144-token micro-batch (bench/RESULTS.md#fp8). cuBLASLt's FP8 products take an FP8 D with a
   scale and write D's amax; with the GELU in the epilogue the product writes q itself (1 byte) and a
   byte transpose makes q^T (2).
   Forward, h = x w^T + b [262144, 3072, K 768], e4m3 x e4m3, fast accumulation:
     f0  what ships: bt_k_matmul_fp8 (bias epilogue) to bf16 h, then bt_k_fp8_cast_act GELU (q, q^T)
     f1  GELU_AUX_BIAS writing e4m3 D (scale 1 / s, D's amax) and h in bf16 as its aux (the
         backward's input), then bt_k_fp8_transpose: 2 + 1 bytes written by the product, 2 by the
         transpose, where the pair moves 2 + 2 + 2
     f2  GELU_BIAS writing e4m3 D without the aux: the epilogue's cost alone (the backward would
         lack h: not a candidate, a bound)
   Backward, dh = g w [262144, 3072, K 768], e5m2 x e4m3, fast accumulation (--fp8-accum fast-dx):
     v0  what ships: bt_k_matmul_fp8 to bf16 dh, then bt_k_fp8_cast_act DGELU (q, q^T, the bias
         gradient's 64-row column sums)
     v1  the DGELU epilogue writing bf16 (dh * gelu'(h) rounded once), then the plain e5m2 cast with
         column sums (bt_k_fp8_cast_act X)
     v2  the DGELU epilogue writing e5m2 D (scale 1 / s, D's amax), then bt_k_fp8_transpose
     v3  v2 with DGELU_BGRAD (the bias gradient in f32 from the epilogue)
   Each cuBLASLt version reports whether cuBLASLt has an algorithm for it at all, times each of its
   heuristic's first 8 candidates and keeps the fastest (the shipped product is the library's
   autotuned plan). Checked against the shipped pair on fresh random inputs: how many of q's bytes
   differ and by how many FP8 steps at most, the amax, the aux h (f1), the bias gradient (v1, v3).
   Measured (H200, 2026-12-04, cuBLASLt 13.0, two calls): forward f0 2,188 us (its product 1,144);
   f1 2,267 (its product 2,003: the aux write costs the product 0.86 ms, more than the cast it
   saves); f2 1,843 (product 1,551), the bound without h; q within one e4m3 step of f0's (3.3% of
   the bytes: gelu rounded once, not through bf16), the aux h f0's bits. Backward v0 2,384 / 2,481;
   v1 6,700 / 6,583 (its product 5,661 / 5,521: DGELU costs the product ~5x); v2, v3 no algorithm.
   Neither epilogue route beats the shipped pair; f2 would win only if the backward did not need h.
   Two more calls (the code shared in helpers since, the same bytes against f0 and v0): f0 2,198 /
   2,282, f1 2,246 / 2,279, f2 1,836 / 1,860, v0 2,457 / 2,555, v1 6,549 / 6,607 us. So f1 is at
   best a tie (-3.6% to +0.1% over three calls), v1 a loss (2.6-2.8x v0 over four calls). Since,
   the aux check counts bytes with common.cuh's differ (built, not yet run in this form).
   Build: make dev (build/dev/fp8_gelu_epilogue); run: build/dev/fp8_gelu_epilogue */
#include "common.cuh"
#include <math.h>

#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "%s:%d cublasLt status %d\n", __FILE__, __LINE__, (int)s_); exit(1); } } while (0)

/* the FP8 steps between bytes a and b of the same sign (either format), or a large count across signs */
static int e5m2_steps(uint8_t a, uint8_t b) {
    if ((a ^ b) & 0x80) return (a & 0x7f) + (b & 0x7f);
    return abs((int)(a & 0x7f) - (int)(b & 0x7f));
}

/* bytes of device buffers d0 and d1 [n] that differ; *worst <- the most FP8 steps between two of them */
static long byte_steps(const uint8_t *d0, const uint8_t *d1, size_t n, int *worst) {
    uint8_t *a0 = (uint8_t *)malloc(n), *a1 = (uint8_t *)malloc(n);
    CK(cudaMemcpy(a0, d0, n, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(a1, d1, n, cudaMemcpyDeviceToHost));
    long nd = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++)
        if (a0[i] != a1[i]) { nd++; *worst = std::max(*worst, e5m2_steps(a0[i], a1[i])); }
    free(a0); free(a1);
    return nd;
}
/* the output's scale as a primed delayed state would hold it: f[8] <- s = f[10] (the shipped pair's amax)
   / fmax, f[12] <- 1 / s (cuBLASLt's D scale); returns the amax, *sc <- s */
static float delayed_scale(float *f, float fmax, float *sc) {
    float amax0 = 0.f;
    CK(cudaMemcpy(&amax0, f + 10, 4, cudaMemcpyDeviceToHost));
    *sc = amax0 / fmax;
    const float rs = 1.f / *sc;
    CK(cudaMemcpy(f + 8, sc, 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(f + 12, &rs, 4, cudaMemcpyHostToDevice));
    return amax0;
}
struct lt_case {
    cublasLtMatmulDesc_t op; cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulHeuristicResult_t res[8]; int nres, best;
};
static void lt_free(lt_case &c) {
    cublasLtMatmulDescDestroy(c.op); cublasLtMatrixLayoutDestroy(c.la); cublasLtMatrixLayoutDestroy(c.lb);
    cublasLtMatrixLayoutDestroy(c.lc); cublasLtMatrixLayoutDestroy(c.ld);
}
/* the fastest of c's candidates for run(a) (the product with algorithm a and what follows it): c.best,
   its time, and *tg the product's alone */
template <typename R, typename G> static double lt_best(lt_case &c, R run, G gemm, double *tg, cudaStream_t s) {
    double best = 1e30;
    for (int a = 0; a < c.nres; a++) {
        const double us = median_us([&] { run(a); }, s);
        if (us < best) { best = us; c.best = a; }
    }
    *tg = median_us([&] { gemm(c.best); }, s);
    return best;
}
/* D [M, N] = A [M, K] (fp8 of type ta: g e5m2 or x e4m3; scale *sa) w^T [N, K]^T (e4m3, scale *sw) in
   cuBLASLt's TN form (see bt_fp8.cuh section 3), fast accumulation, with epilogue epi: aux (may be NULL)
   bf16 [M, N] (DGELU's input h, or GELU_AUX's output h), bias (may be NULL) of type bias_t (GELU_BIAS's
   input, DGELU_BGRAD's output); D of dtype dt_d (bf16, or fp8: then scaled by *dscale, its amax to
   *damax). Returns how many of the heuristic's first 8 candidates there are (c.res). */
static int lt_make(cublasLtHandle_t lt, lt_case &c, cublasLtEpilogue_t epi, cudaDataType_t ta, cudaDataType_t dt_d, int64_t M, int64_t N,
                   int64_t K, const float *sa, const float *sw, const void *aux, const void *bias, cudaDataType_t bias_t,
                   const float *dscale, float *damax, size_t ws) {
    LT(cublasLtMatmulDescCreate(&c.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = CUBLAS_OP_T, opb = CUBLAS_OP_N;
    int8_t fast = 1;
    LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof sw));
    LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa));
    LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (aux) {
        int64_t ld = N;
        int32_t auxt = CUDA_R_16BF;
        LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &auxt, sizeof auxt));
    }
    if (bias) {
        int32_t bt = bias_t;
        LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    if (dt_d != CUDA_R_16BF) {
        LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &dscale, sizeof dscale));
        LT(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &damax, sizeof damax));
    }
    LT(cublasLtMatrixLayoutCreate(&c.la, CUDA_R_8F_E4M3, (uint64_t)K, (uint64_t)N, K));
    LT(cublasLtMatrixLayoutCreate(&c.lb, ta, (uint64_t)K, (uint64_t)M, K));
    LT(cublasLtMatrixLayoutCreate(&c.lc, CUDA_R_16BF, (uint64_t)N, (uint64_t)M, N));   /* C: bf16 (beta 0, not read) */
    LT(cublasLtMatrixLayoutCreate(&c.ld, dt_d, (uint64_t)N, (uint64_t)M, N));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    c.nres = 0; c.best = 0;
    if (cublasLtMatmulAlgoGetHeuristic(lt, c.op, c.la, c.lb, c.lc, c.ld, pref, 8, c.res, &c.nres) != CUBLAS_STATUS_SUCCESS) c.nres = 0;
    cublasLtMatmulPreferenceDestroy(pref);
    return c.nres;
}

static void forward_ladder(cublasLtHandle_t lt) {
    cudaStream_t s = (cudaStream_t)0;
    const int64_t M = 262144, N = 3072, K = 768;
    const size_t mn = (size_t)(M * N), ws = (size_t)32 << 20;
    __nv_bfloat16 *x16, *w16, *b16, *h[2];
    uint8_t *x8, *w8, *q[3], *qt[3];
    float *f;
    void *work;
    CK(cudaMalloc(&x16, sizeof(__nv_bfloat16) * M * K)); CK(cudaMalloc(&w16, sizeof(__nv_bfloat16) * N * K));
    CK(cudaMalloc(&b16, sizeof(__nv_bfloat16) * N));
    for (int i = 0; i < 2; i++) CK(cudaMalloc(&h[i], sizeof(__nv_bfloat16) * mn));
    CK(cudaMalloc(&x8, M * K)); CK(cudaMalloc(&w8, N * K)); CK(cudaMalloc(&work, ws)); CK(cudaMalloc(&f, 64 * sizeof(float)));
    for (int v = 0; v < 3; v++) { CK(cudaMalloc(&q[v], mn)); CK(cudaMalloc(&qt[v], mn)); }
    fill_bf16(x16, M * K, 21, -3.f, 3.f);             /* a layernorm's output */
    fill_bf16(w16, N * K, 23, -0.06f, 0.06f);
    fill_bf16(b16, N, 29, -0.1f, 0.1f);
    /* f: [0] x's scale, [4] w's, [8] the output's delayed scale s, [9] scale used, [10] f0's amax, [12] 1 / s,
       [16 + 4 v] version v's D amax */
    float init[64] = {0.f};
    init[0] = 3.f / 448.f; init[4] = 0.06f / 448.f;
    CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
    bt_k_fp8_cast(BT_BF16, BT_F8E4M3, x8, NULL, x16, M, K, NULL, f, NULL, NULL, s);
    bt_k_fp8_cast(BT_BF16, BT_F8E4M3, w8, NULL, w16, N, K, NULL, f + 4, NULL, NULL, s);
    bt_k_matmul_fp8(BT_BF16, h[0], x8, BT_F8E4M3, f, w8, BT_F8E4M3, f + 4, b16, NULL, M, N, K, 1, s);
    bt_k_fp8_amax_act(BT_BF16, BT_FP8_ACT_GELU, f + 10, h[0], NULL, M, N, s);
    float sc;
    const float amax0 = delayed_scale(f, 448.f, &sc);
    printf("h = x w^T + b [%lld, %lld, K %lld], e4m3 x e4m3, gelu(h) to e4m3 (amax %g, scale %g)\n", (long long)M, (long long)N,
           (long long)K, amax0, sc);
    auto f0 = [&] {
        bt_k_matmul_fp8(BT_BF16, h[0], x8, BT_F8E4M3, f, w8, BT_F8E4M3, f + 4, b16, NULL, M, N, K, 1, s);
        bt_k_fp8_cast_act(BT_BF16, BT_F8E4M3, BT_FP8_ACT_GELU, q[0], qt[0], NULL, h[0], NULL, M, N, NULL, f + 8, f + 9, f + 10, s);
    };
    f0();
    CK(cudaDeviceSynchronize());
    printf("  f0  %8.1f us  (the product %.1f, then the GELU cast)\n", median_us(f0, s),
           median_us([&] { bt_k_matmul_fp8(BT_BF16, h[0], x8, BT_F8E4M3, f, w8, BT_F8E4M3, f + 4, b16, NULL, M, N, K, 1, s); }, s));
    const float alpha = 1.f, beta = 0.f;
    for (int v = 1; v < 3; v++) {
        lt_case c;
        void *aux = v == 1 ? (void *)h[1] : NULL;
        if (!lt_make(lt, c, aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, M, N, K, f,
                     f + 4, aux, b16, CUDA_R_16BF, f + 12, f + 16 + 4 * v, ws)) {
            printf("  f%d  cuBLASLt has no algorithm for it\n", v);
            continue;
        }
        auto gemm = [&](int a) {
            LT(cublasLtMatmul(lt, c.op, &alpha, w8, c.la, x8, c.lb, &beta, h[1], c.lc, q[v], c.ld, &c.res[a].algo, work, ws, s));
        };
        auto run = [&](int a) { gemm(a); bt_k_fp8_transpose(qt[v], q[v], M, N, s); };
        double tg;
        const double best = lt_best(c, run, gemm, &tg, s);
        CK(cudaMemcpy(f + 16 + 4 * v, init + 1, 4, cudaMemcpyHostToDevice));
        run(c.best);
        CK(cudaDeviceSynchronize());
        int worst;
        const long nd = byte_steps(q[0], q[v], mn, &worst);
        float am = 0.f;
        CK(cudaMemcpy(&am, f + 16 + 4 * v, 4, cudaMemcpyDeviceToHost));
        printf("  f%d  %8.1f us  (the product %.1f; the fastest of %d candidates)  q: %ld of %zu bytes differ from f0's, at most %d e4m3 "
               "steps; q^T %s; amax %g against f0's %g",
               v, best, tg, c.nres, nd, mn, worst, differ(qt[v], qt[0], mn) == nd ? "as many" : "NOT as many", am, amax0);
        if (v == 1) printf("; aux h: %ld of %zu bytes differ from f0's h", differ(h[1], h[0], 2 * mn), 2 * mn);
        printf("\n");
        lt_free(c);
    }
    CK(cudaFree(x16)); CK(cudaFree(w16)); CK(cudaFree(b16)); CK(cudaFree(x8)); CK(cudaFree(w8)); CK(cudaFree(work)); CK(cudaFree(f));
    for (int i = 0; i < 2; i++) CK(cudaFree(h[i]));
    for (int v = 0; v < 3; v++) { CK(cudaFree(q[v])); CK(cudaFree(qt[v])); }
}

int main(void) {
    bt_k_init(0);
    cublasLtHandle_t lt0;
    LT(cublasLtCreate(&lt0));
    forward_ladder(lt0);
    cublasLtDestroy(lt0);
    cudaStream_t s = (cudaStream_t)0;
    const int64_t M = 262144, N = 3072, K = 768;
    const size_t mn = (size_t)(M * N), ws = (size_t)32 << 20;
    __nv_bfloat16 *g16, *w16, *h, *dh;
    uint8_t *g8, *wt8, *q[4], *qt[4];
    float *f, *cs[4], *dbias;
    void *work;
    CK(cudaMalloc(&g16, sizeof(__nv_bfloat16) * M * K)); CK(cudaMalloc(&w16, sizeof(__nv_bfloat16) * N * K));
    CK(cudaMalloc(&h, sizeof(__nv_bfloat16) * mn)); CK(cudaMalloc(&dh, sizeof(__nv_bfloat16) * mn));
    CK(cudaMalloc(&g8, M * K)); CK(cudaMalloc(&wt8, N * K)); CK(cudaMalloc(&work, ws));
    CK(cudaMalloc(&f, 64 * sizeof(float))); CK(cudaMalloc(&dbias, N * sizeof(float)));
    for (int v = 0; v < 4; v++) {
        CK(cudaMalloc(&q[v], mn)); CK(cudaMalloc(&qt[v], mn));
        CK(cudaMalloc(&cs[v], sizeof(float) * (size_t)((M + 63) / 64 * N)));
    }
    fill_bf16(g16, M * K, 5, -1e-3f, 1e-3f);          /* a gradient's scale */
    fill_bf16(w16, N * K, 9, -0.05f, 0.05f);          /* w^T [N, K] */
    fill_bf16(h, (int64_t)mn, 13, -4.f, 4.f);
    /* f: [0] g's scale, [4] w's, [8] the output's delayed scale s, [9] scale used, [10] v0's amax, [12] 1 / s,
       [16 + 4 v] version v's D amax; every scale pointer 16-byte aligned (cuBLASLt's FP8 takes no others) */
    float init[64] = {0.f};
    init[0] = 1e-3f / 57344.f; init[4] = 0.05f / 448.f;
    CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
    bt_k_fp8_cast(BT_BF16, BT_F8E5M2, g8, NULL, g16, M, K, NULL, f, NULL, NULL, s);
    bt_k_fp8_cast(BT_BF16, BT_F8E4M3, wt8, NULL, w16, N, K, NULL, f + 4, NULL, NULL, s);
    /* the output's scale as a primed delayed state would hold it: v0's amax of dh * gelu'(h) / 57344 */
    bt_k_matmul_fp8(BT_BF16, dh, g8, BT_F8E5M2, f, wt8, BT_F8E4M3, f + 4, NULL, NULL, M, N, K, 1, s);
    bt_k_fp8_amax_act(BT_BF16, BT_FP8_ACT_DGELU, f + 10, dh, h, M, N, s);
    float sc;
    const float amax0 = delayed_scale(f, 57344.f, &sc);
    printf("dx = g w [%lld, %lld, K %lld], e5m2 x e4m3, dh * gelu'(h) to e5m2 (amax %g, scale %g)\n", (long long)M, (long long)N,
           (long long)K, amax0, sc);

    auto v0 = [&] {
        bt_k_matmul_fp8(BT_BF16, dh, g8, BT_F8E5M2, f, wt8, BT_F8E4M3, f + 4, NULL, NULL, M, N, K, 1, s);
        bt_k_fp8_cast_act(BT_BF16, BT_F8E5M2, BT_FP8_ACT_DGELU, q[0], qt[0], cs[0], dh, h, M, N, NULL, f + 8, f + 9, f + 10, s);
    };
    v0();
    CK(cudaDeviceSynchronize());
    const double t0 = median_us(v0, s);
    printf("  v0  %8.1f us  (the product, then the DGELU cast)\n", t0);

    cublasLtHandle_t lt;
    LT(cublasLtCreate(&lt));
    const float alpha = 1.f, beta = 0.f;
    const cublasLtEpilogue_t epis[4] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU,
                                        CUBLASLT_EPILOGUE_DGELU_BGRAD};
    const cudaDataType_t dts[4] = {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_8F_E5M2, CUDA_R_8F_E5M2};
    for (int v = 1; v < 4; v++) {
        lt_case c;
        void *D = v == 1 ? (void *)dh : (void *)q[v];
        if (!lt_make(lt, c, epis[v], CUDA_R_8F_E5M2, dts[v], M, N, K, f, f + 4, h, v == 3 ? dbias : NULL, CUDA_R_32F, f + 12, f + 16 + 4 * v,
                     ws)) {
            printf("  v%d  cuBLASLt has no algorithm for it\n", v);
            continue;
        }
        auto gemm = [&](int a) {
            LT(cublasLtMatmul(lt, c.op, &alpha, wt8, c.la, g8, c.lb, &beta, dh, c.lc, D, c.ld, &c.res[a].algo, work, ws, s));
        };
        auto run = [&](int a) {
            gemm(a);
            if (v == 1) bt_k_fp8_cast_act(BT_BF16, BT_F8E5M2, BT_FP8_ACT_X, q[1], qt[1], cs[1], dh, NULL, M, N, NULL, f + 8, f + 9, f + 20, s);
            else bt_k_fp8_transpose(qt[v], q[v], M, N, s);
        };
        double tg;
        const double best = lt_best(c, run, gemm, &tg, s);
        CK(cudaMemcpy(f + 16 + 4 * v, init, 4, cudaMemcpyHostToDevice));   /* D's amax from one call */
        run(c.best);
        CK(cudaDeviceSynchronize());
        /* against v0: q's bytes, the amax, the bias gradient */
        int worst;
        const long nd = byte_steps(q[0], q[v], mn, &worst);
        float am[2];
        CK(cudaMemcpy(&am[0], f + 10, 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&am[1], v == 1 ? f + 20 : f + 16 + 4 * v, 4, cudaMemcpyDeviceToHost));
        printf("  v%d  %8.1f us  (the product %.1f; the fastest of %d candidates)  q: %ld of %zu bytes differ from v0's, at most %d e5m2 "
               "steps; amax %g against v0's %g",
               v, best, tg, c.nres, nd, mn, worst, am[1], am[0]);
        if (v == 1 || v == 3) {   /* the bias gradient: v0's 64-row column sums added up, against v1's (the same sums) or BGRAD's */
            float *p0 = (float *)malloc(sizeof(float) * (size_t)((M + 63) / 64 * N)), *b1 = (float *)malloc(sizeof(float) * N);
            CK(cudaMemcpy(p0, cs[0], sizeof(float) * (size_t)((M + 63) / 64 * N), cudaMemcpyDeviceToHost));
            if (v == 1) {
                float *p1 = (float *)malloc(sizeof(float) * (size_t)((M + 63) / 64 * N));
                CK(cudaMemcpy(p1, cs[1], sizeof(float) * (size_t)((M + 63) / 64 * N), cudaMemcpyDeviceToHost));
                for (int64_t n = 0; n < N; n++) { double t = 0; for (int64_t r = 0; r < (M + 63) / 64; r++) t += p1[r * N + n]; b1[n] = (float)t; }
                free(p1);
            } else CK(cudaMemcpy(b1, dbias, sizeof(float) * N, cudaMemcpyDeviceToHost));
            double err = 0, ref = 0;
            for (int64_t n = 0; n < N; n++) {
                double t = 0;
                for (int64_t r = 0; r < (M + 63) / 64; r++) t += p0[r * N + n];
                err = fmax(err, fabs(t - b1[n])); ref = fmax(ref, fabs(t));
            }
            printf("; bias gradient within %.3g of v0's (its largest %.3g)", err, ref);
            free(p0); free(b1);
        }
        printf("\n");
        lt_free(c);
    }
    cublasLtDestroy(lt);
    return 0;
}
