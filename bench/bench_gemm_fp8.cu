/* bench_gemm_fp8.cu - the FP8 products of one GPT-2 layer (bt_linear_fp8's, through bt_k_matmul_fp8's
   plans), each of cuBLASLt's candidates timed, at GPT-2 1.5B's shapes by default.

   make bench-gemm-fp8 [GEMM_FP8_ARGS="C rows"]   builds build/bench_gemm_fp8 (BT__K_MM_CANDIDATES
   raised to 32: the whole heuristic list) and runs it:
     build/bench_gemm_fp8 [C] [rows]   (default 1600 8192: d48 at B 8, T 1024)
   The twelve products a layer: forward y = x w^T (+ b) (+ r) for qkv, the attention's projection,
   fc and the MLP's projection (e4m3 x e4m3 -> bf16, the bias in the epilogue, the projections'
   residual as C); backward dx = gy w (e5m2 x e4m3 -> bf16) and dw += gy^T x (e5m2 x e4m3, added
   into an fp32 C), each as bt_k_matmul_fp8 lays it out. A forward product with a bias runs twice:
   the bias 256-byte aligned and 128 bytes off, as the flat weights put the biases of every other
   layer (qkvb: 3C bf16 a layer, 9,600 bytes at C 1600); the plan's key holds that alignment, so the
   model autotunes each class on its own.
   Each candidate: 3 warm-up runs, then the median of 10 timed runs "warm" (back to back: A and B
   stay in L2) and of 10 "cold" (before each, a write of twice the L2's bytes over a scratch
   buffer: the operands come from HBM, as in a training step). "pick6" is what bt_k_matmul_fp8's
   autotuning keeps (the fastest warm of the first 6 candidates: two back-to-back runs after a
   warm-up), "best" the fastest cold of the list; the last lines sum a layer's products for both
   and say what L layers (48 at C 1600) would save with the best ones. */
#define BT_ALLOC_IMPLEMENTATION
#define BT_KERNELS_IMPLEMENTATION
#include "bt_kernels.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(2); } } while (0)
#define REPS 10

static cudaStream_t S;
static void *g_flush;
static size_t g_flush_bytes;
static void *dev(size_t bytes) { return bt_alloc(bt_cuda_device(0), bytes, (void *)S); }
static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }
/* n random bytes of a format: values of magnitude ~1 (codes of exponents near the bias), never NaN */
__global__ void fill_fp8(uint8_t *p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        p[i] = (uint8_t)((h & 0x80u) | (0x30u + (h >> 8) % 0x10u));   /* sign, exponent near the middle, mantissa */
    }
}
static void *fp8_rand(int64_t n, uint32_t seed) {
    uint8_t *p = (uint8_t *)dev((size_t)n);
    fill_fp8<<<1024, 256, 0, S>>>(p, n, seed);
    return p;
}

typedef struct {
    const char *name;
    bt_dtype fa, dt;           /* A's format (B is e4m3), C's dtype */
    int64_t M, N, K;
    int bias, residual, acc;   /* bias [N] in the epilogue; C read from R (beta 1); C accumulating (beta 1, R = C) */
    float pick6, best;         /* us, cold */
} prod;

/* the median us of REPS runs of candidate a, each after a flush of L2 (cold) or back to back (warm) */
static float time_algo(bt__k_ctx *c, bt__k_mm_plan *p, const cublasLtMatmulAlgo_t *a, const void *A, const void *B, void *C,
                       const void *R, float beta, int cold) {
    float alpha = 1.f, ms[REPS];
    cudaEvent_t e0[REPS], e1[REPS];
    for (int r = 0; r < REPS; r++) { CK(cudaEventCreate(&e0[r])); CK(cudaEventCreate(&e1[r])); }
    for (int r = 0; r < 3 + REPS; r++) {
        if (r >= 3 && cold) CK(cudaMemsetAsync(g_flush, r, g_flush_bytes, S));
        if (r >= 3) CK(cudaEventRecord(e0[r - 3], S));
        if (cublasLtMatmul(c->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, R ? R : C, p->lc, C, p->lc, a, bt__k_workspace(c, S),
                           BT__K_WS_BYTES, S) != CUBLAS_STATUS_SUCCESS) {
            for (int k = 0; k < REPS; k++) { cudaEventDestroy(e0[k]); cudaEventDestroy(e1[k]); }
            return -1;
        }
        if (r >= 3) CK(cudaEventRecord(e1[r - 3], S));
    }
    CK(cudaStreamSynchronize(S));
    for (int r = 0; r < REPS; r++) { CK(cudaEventElapsedTime(&ms[r], e0[r], e1[r])); cudaEventDestroy(e0[r]); cudaEventDestroy(e1[r]); }
    qsort(ms, REPS, sizeof ms[0], cmpf);
    return ms[REPS / 2] * 1e3f;
}
static void algo_desc(const cublasLtMatmulAlgo_t *a, char *buf, size_t n) {
    int id = 0, tile = 0, splitk = 0, stages = 0, cluster = 0; size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
    snprintf(buf, n, "algo %d tile %d splitK %d stages %d cluster %d", id, tile, splitk, stages, cluster);
}
/* one product with the bias at offset boff bytes from a 256-byte boundary (boff < 0: none) */
static void run_prod(prod *g, const float *sa, const float *sb, void *biasbuf, int boff) {
    bt__k_ctx *c = bt__k_cur();
    void *A = fp8_rand(g->M * g->K, 1), *B = fp8_rand(g->N * g->K, 2);
    size_t cb = (size_t)(g->M * g->N) * bt_dtype_size(g->dt);
    void *C = dev(cb), *R = g->residual ? dev(cb) : NULL;
    CK(cudaMemsetAsync(C, 0, cb, S));
    if (R) CK(cudaMemsetAsync(R, 0, cb, S));
    const void *bias = boff >= 0 ? (const void *)((char *)biasbuf + boff) : NULL;
    uint32_t ac = bt__k_align_of(C);
    uint32_t al[4] = {bt__k_align_of(A), bt__k_align_of(B), ac, bias ? bt__k_align_of(bias) : 0};
    bt__k_mm_plan p;
    memset(&p, 0, sizeof p);
    double fl = 2.0 * g->M * g->N * g->K;
    int made = bt__k_fp8_mm_make(c, &p, g->dt, g->fa, BT_F8E4M3, g->M, g->N, g->K, 0, bias, sa, sb, al);
    printf("\n%s%s: M %lld N %lld K %lld, %s x e4m3 -> %s%s%s, %d candidates%s\n", g->name,
           bias ? (boff ? ", bias 128 bytes off" : ", bias 256-aligned") : "", (long long)g->M, (long long)g->N, (long long)g->K,
           bt_dtype_name(g->fa), bt_dtype_name(g->dt), g->residual ? ", + residual" : "", g->acc ? ", accumulating" : "",
           made ? p.n_cand : 0, made ? (bias && !p.epi_bias ? " (no bias epilogue)" : "") : " (NO ALGORITHM)");
    if (made) {
        float beta = g->residual || g->acc ? 1.f : 0.f, pick_w = 1e30f, pick_c = 1e30f, best_c = 1e30f;
        int ipick = -1, ibest = -1;
        for (int i = 0; i < p.n_cand; i++) {
            char d[128];
            algo_desc(&p.cand[i], d, sizeof d);
            float w = time_algo(c, &p, &p.cand[i], A, B, C, R, beta, 0), k = time_algo(c, &p, &p.cand[i], A, B, C, R, beta, 1);
            printf("  #%-2d warm %8.1f us  cold %8.1f us %6.0f TFLOP/s  %s\n", i, w, k, k > 0 ? fl / (k * 1e-6) / 1e12 : 0, d);
            if (w <= 0 || k <= 0) continue;
            if (i < 6 && w < pick_w) { pick_w = w; pick_c = k; ipick = i; }
            if (k < best_c) { best_c = k; ibest = i; }
        }
        printf("  => pick6 #%d cold %.1f us (%.0f TFLOP/s), best #%d cold %.1f us (%.0f TFLOP/s)\n", ipick, pick_c,
               fl / (pick_c * 1e-6) / 1e12, ibest, best_c, fl / (best_c * 1e-6) / 1e12);
        g->pick6 = pick_c; g->best = best_c;
        bt__k_mm_plan_drop(&p);
    }
    bt_free(A); bt_free(B); bt_free(C); bt_free(R);
}

int main(int argc, char **argv) {
    if (bt_k_device_count() == 0) { printf("bench_gemm_fp8: no CUDA device\n"); return 0; }
    bt_k_init(0);
    if (!bt_k_fp8_supported()) { printf("bench_gemm_fp8: no FP8 tensor cores on this GPU\n"); return 0; }
    S = bt_k_current_stream(0);
    int64_t C = argc > 1 ? atoll(argv[1]) : 1600, R = argc > 2 ? atoll(argv[2]) : 8192, F = 4 * C;
    if (C <= 0 || R <= 0 || C % 16 || R % 16) { fprintf(stderr, "bench_gemm_fp8: C %lld and rows %lld: positive multiples of 16\n", (long long)C, (long long)R); return 1; }
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    g_flush_bytes = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
    g_flush = dev(g_flush_bytes);
    float *sc = (float *)dev(64);
    bt_k_fill(BT_F32, sc, 0.01, 16, S);
    void *biasbuf = dev((size_t)(F + 256) * 2);
    bt_k_fill(BT_BF16, biasbuf, 0.01, F + 256, S);
    prod ps[12] = {
        {"fwd qkv", BT_F8E4M3, BT_BF16, R, 3 * C, C, 1, 0, 0, 0, 0},
        {"fwd attention projection", BT_F8E4M3, BT_BF16, R, C, C, 1, 1, 0, 0, 0},
        {"fwd fc", BT_F8E4M3, BT_BF16, R, F, C, 1, 0, 0, 0, 0},
        {"fwd MLP projection", BT_F8E4M3, BT_BF16, R, C, F, 1, 1, 0, 0, 0},
        {"bwd qkv dx", BT_F8E5M2, BT_BF16, R, C, 3 * C, 0, 0, 0, 0, 0},
        {"bwd attention projection dx", BT_F8E5M2, BT_BF16, R, C, C, 0, 0, 0, 0, 0},
        {"bwd fc dx", BT_F8E5M2, BT_BF16, R, C, F, 0, 0, 0, 0, 0},
        {"bwd MLP projection dx", BT_F8E5M2, BT_BF16, R, F, C, 0, 0, 0, 0, 0},
        {"bwd qkv dw", BT_F8E5M2, BT_F32, 3 * C, C, R, 0, 0, 1, 0, 0},
        {"bwd attention projection dw", BT_F8E5M2, BT_F32, C, C, R, 0, 0, 1, 0, 0},
        {"bwd fc dw", BT_F8E5M2, BT_F32, F, C, R, 0, 0, 1, 0, 0},
        {"bwd MLP projection dw", BT_F8E5M2, BT_F32, C, F, R, 0, 0, 1, 0, 0},
    };
    printf("FP8 products of one GPT-2 layer, C %lld, %lld rows; L2 %d MB, flushed with %zu MB\n", (long long)C, (long long)R, l2 >> 20,
           g_flush_bytes >> 20);
    float pick = 0, best = 0, pick128 = 0;
    for (int i = 0; i < 12; i++) {
        run_prod(&ps[i], sc, sc + 4, biasbuf, ps[i].bias ? 0 : -1);
        pick += ps[i].pick6; best += ps[i].best;
        if (ps[i].bias) {                             /* the other alignment class */
            prod o = ps[i];
            run_prod(&o, sc, sc + 4, biasbuf, 128);
            pick128 += o.pick6 - ps[i].pick6;
        }
    }
    int64_t L = C == 1600 ? 48 : 12;
    printf("\na layer's 12 products, cold: pick6 %.1f us, best %.1f us; half the layers with their biases 128 bytes off: %+.1f us a "
           "layer on average; x %lld layers: pick6 %.2f ms, best %.2f ms\n", pick, best, pick128 / 2, (long long)L, (pick + pick128 / 2) * L / 1e3,
           best * L / 1e3);
    bt_free(g_flush); bt_free(sc); bt_free(biasbuf);
    return 0;
}
