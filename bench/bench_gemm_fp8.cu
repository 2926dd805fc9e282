/* bench_gemm_fp8.cu - the FP8 products of one GPT-2 layer (bt_linear_fp8's, through bt_k_matmul_fp8's
   plans), each of cuBLASLt's candidates timed, at GPT-2 1.5B's shapes by default.

   make bench-gemm-fp8 [GEMM_FP8_ARGS="C rows [all] [bf16]"]   builds build/bench_gemm_fp8
   (BT__K_MM_CANDIDATES raised to 32: the whole heuristic list) and runs it:
     build/bench_gemm_fp8 [C] [rows] [all] [bf16]   (default 1600 8192: d48 at B 8, T 1024)
   The twelve products a layer: forward y = x w^T (+ b) (+ r) for qkv, the attention's projection,
   fc and the MLP's projection (e4m3 x e4m3 -> bf16, fast accumulation as the model's forward, the
   bias in the epilogue, the projections' residual as C); backward dx = gy w (e5m2 x e4m3 -> bf16)
   and dw += gy^T x (e5m2 x e4m3, added into an fp32 C), each as bt_k_matmul_fp8 lays it out. A
   forward product with a bias runs twice: the bias 256-byte aligned and 128 bytes off, as the flat
   weights put the biases of every other layer (qkvb: 3C bf16 a layer, 9,600 bytes at C 1600); the
   plan's key holds that alignment, so the model autotunes each class on its own.
   Each candidate: 3 warm-up runs, then the median of 10 timed runs "warm" (back to back: A and B
   stay in L2) and of 10 "cold" (before each, a write of twice the L2's bytes over a scratch
   buffer: the operands come from HBM, as in a training step). "pick8" is what bt_k_matmul_fp8's
   autotuning keeps (the fastest warm of the first 8 candidates: two back-to-back runs after a
   warm-up), "best" the fastest cold of the list; the last lines sum a layer's products for both
   and say what L layers (48 at C 1600) would save with the best ones.
   `all`: besides the heuristic's list, every configuration cuBLASLt accepts for the product
   (search_all: each algorithm id x tile x stages x cluster shape x CTA swizzle x split-K 1, 2, 4),
   each timed warm once, the 8 fastest then cold as above: whether the heuristic's 32 miss a faster
   kernel. `bf16`: the same products in bf16 (bt_k_matmul's plans: the forward's bias epilogue, dw
   into fp32), to compare the two precisions' search the same way (candidates listed only with
   the heuristic's best and the search's). */
#define BT_ALLOC_IMPLEMENTATION
#define BT_KERNELS_IMPLEMENTATION
#include "bt_kernels.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    float pick8, best, all;    /* us, cold: the autotune's pick, the heuristic list's best, the search's (all) */
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
#define SEARCH_S 7   /* seconds of host time a product's search may take */
static int g_all, g_bf16;   /* argv: the exhaustive search; bf16 products instead of FP8 */
/* us of one warm run of algorithm a after one warm-up (the search's first pass), -1 when it fails */
static float time_quick(bt__k_ctx *c, bt__k_mm_plan *p, const cublasLtMatmulAlgo_t *a, const void *A, const void *B, void *C,
                        const void *R, float beta, cudaEvent_t e0, cudaEvent_t e1) {
    float alpha = 1.f, ms = 0.f;
    for (int r = 0; r < 2; r++) {
        if (r) CK(cudaEventRecord(e0, S));
        if (cublasLtMatmul(c->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, R ? R : C, p->lc, C, p->lc, a, bt__k_workspace(c, S),
                           BT__K_WS_BYTES, S) != CUBLAS_STATUS_SUCCESS) { CK(cudaStreamSynchronize(S)); return -1; }
        if (r) CK(cudaEventRecord(e1, S));
    }
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1e3f;
}
/* every configuration of the plan's descriptors that cuBLASLt's check accepts: algorithm ids x tiles
   x stages x cluster shapes (those of 4 CTAs at most) x CTA swizzle x split-K 1, 2, 4 (the first
   reduction scheme offered) x custom options 0-3; each valid one timed warm once, the 8 fastest
   cold (time_algo). Returns the best cold us (its configuration in d), -1 if none ran. */
static float search_all(bt__k_ctx *c, bt__k_mm_plan *p, const void *A, const void *B, void *C, const void *R, float beta, char *d,
                        size_t dn, int *checked, int *valid) {
    enum { TOP = 8 };
    cublasComputeType_t ct; cudaDataType_t st, ta, tb, tc; size_t w;
    cublasLtMatmulDescGetAttribute(p->op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct, &w);
    cublasLtMatmulDescGetAttribute(p->op, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &st, sizeof st, &w);
    cublasLtMatrixLayoutGetAttribute(p->la, CUBLASLT_MATRIX_LAYOUT_TYPE, &ta, sizeof ta, &w);
    cublasLtMatrixLayoutGetAttribute(p->lb, CUBLASLT_MATRIX_LAYOUT_TYPE, &tb, sizeof tb, &w);
    cublasLtMatrixLayoutGetAttribute(p->lc, CUBLASLT_MATRIX_LAYOUT_TYPE, &tc, sizeof tc, &w);
    int ids[512], nids = 0;
    if (cublasLtMatmulAlgoGetIds(c->lt, ct, st, ta, tb, tc, tc, 512, ids, &nids) != CUBLAS_STATUS_SUCCESS) nids = 0;
    cublasLtMatmulAlgo_t top[TOP];
    float topt[TOP];
    int ntop = 0;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    *checked = *valid = 0;
    struct timespec t0, tn;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int over = 0;
    const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                                 CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x4x1,
                                 CUBLASLT_CLUSTER_SHAPE_2x2x1};
    int k_at = 0;
    for (int k = 0; k < nids; k++) {
        cublasLtMatmulAlgo_t a;
        k_at = k + 1;
        if (cublasLtMatmulAlgoInit(c->lt, ct, st, ta, tb, tc, tc, ids[k], &a) != CUBLAS_STATUS_SUCCESS) continue;
        uint32_t swz = 0, redmask = 0; int32_t splitk = 0, cmax = 0; size_t nt = 0, ns = 0;
        cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS, NULL, 0, &nt);
        cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, NULL, 0, &ns);
        nt /= sizeof(uint32_t); ns /= sizeof(uint32_t);
        uint32_t *tiles = (uint32_t *)calloc(nt + 1, sizeof(uint32_t)), *stages = (uint32_t *)calloc(ns + 1, sizeof(uint32_t));
        if (!tiles || !stages) { fprintf(stderr, "bench_gemm_fp8: out of host memory\n"); exit(2); }
        if (!nt || cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, nt * sizeof(uint32_t), &w) != CUBLAS_STATUS_SUCCESS) {
            tiles[0] = CUBLASLT_MATMUL_TILE_UNDEFINED; nt = 1;
        }
        if (!ns || cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, ns * sizeof(uint32_t), &w) != CUBLAS_STATUS_SUCCESS) {
            stages[0] = CUBLASLT_MATMUL_STAGES_UNDEFINED; ns = 1;
        }
        cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz, sizeof swz, &w);
        cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk, sizeof splitk, &w);
        cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &redmask, sizeof redmask, &w);
        cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &cmax, sizeof cmax, &w);
        printf("  search: algorithm %d (%d of %d): %zu tiles, %zu stages, swizzle %u, split-K %d, custom options to %d; %d checked, %d ran so far\n",
               ids[k], k + 1, nids, nt, ns, swz, splitk, cmax, *checked, *valid);
        uint32_t red = redmask & CUBLASLT_REDUCTION_SCHEME_INPLACE ? CUBLASLT_REDUCTION_SCHEME_INPLACE
                     : redmask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                     : CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
        for (size_t ti = 0; ti < nt; ti++)
            for (size_t si = 0; si < ns; si++)
                for (size_t ci = 0; ci < sizeof clusters / sizeof clusters[0]; ci++)
                    for (uint32_t sw = 0; sw <= (swz ? 1u : 0u); sw++)
                        for (int32_t co = 0; co <= (cmax < 3 ? cmax : 3); co++)
                            for (int32_t sk = 1; sk <= (splitk ? 4 : 1); sk *= 2) {
                                uint32_t rs = sk > 1 ? red : (uint32_t)CUBLASLT_REDUCTION_SCHEME_NONE, cou = (uint32_t)co;
                                uint16_t cl = clusters[ci];
                                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[ti], sizeof tiles[ti]);
                                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[si], sizeof stages[si]);
                                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl);
                                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &sw, sizeof sw);
                                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &cou, sizeof cou);
                                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof sk);
                                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &rs, sizeof rs);
                                cublasLtMatmulHeuristicResult_t res;
                                memset(&res, 0, sizeof res);
                                if (++*checked % 64 == 0) {   /* a budget of host time per product */
                                    clock_gettime(CLOCK_MONOTONIC, &tn);
                                    over = (tn.tv_sec - t0.tv_sec) + 1e-9 * (tn.tv_nsec - t0.tv_nsec) > SEARCH_S;
                                }
                                if (over) { free(tiles); free(stages); goto done; }
                                if (cublasLtMatmulAlgoCheck(c->lt, p->op, p->la, p->lb, p->lc, p->lc, &a, &res) != CUBLAS_STATUS_SUCCESS ||
                                    res.workspaceSize > BT__K_WS_BYTES)
                                    continue;
                                float t = time_quick(c, p, &a, A, B, C, R, beta, e0, e1);
                                if (t <= 0) continue;
                                (*valid)++;
                                int at = ntop < TOP ? ntop++ : (t < topt[TOP - 1] ? TOP - 1 : -1);
                                if (at < 0) continue;
                                for (; at > 0 && topt[at - 1] > t; at--) { topt[at] = topt[at - 1]; top[at] = top[at - 1]; }
                                topt[at] = t; top[at] = a;
                            }
        free(tiles); free(stages);
    }
done:
    if (over) printf("  (search stopped after %d s: algorithm %d of %d)\n", SEARCH_S, k_at, nids);
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    float best = -1;
    for (int i = 0; i < ntop; i++) {
        float k = time_algo(c, p, &top[i], A, B, C, R, beta, 1);
        if (k > 0 && (best < 0 || k < best)) { best = k; algo_desc(&top[i], d, dn); }
    }
    return best;
}
/* one product with the bias at offset boff bytes from a 256-byte boundary (boff < 0: none) */
static void run_prod(prod *g, const float *sa, const float *sb, void *biasbuf, int boff) {
    bt__k_ctx *c = bt__k_cur();
    size_t eb = g_bf16 ? 2 : 1;
    void *A = fp8_rand(g->M * g->K * (int64_t)eb, 1), *B = fp8_rand(g->N * g->K * (int64_t)eb, 2);
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
    int fwd = g->bias || g->residual, made;
    if (g_bf16) {   /* bt_k_matmul's layouts: forward x w^T (transB), dx = gy w, dw = gy^T x (transA) */
        int tA = g->acc, tB = fwd;
        made = bt__k_mm_make(c, &p, BT_BF16, g->dt, BT_MATMUL_FP32, g->M, g->N, g->K, tA, tB, 1, 0, 0, 0,
                             bias ? BT_K_EPI_BIAS : BT_K_EPI_NONE, bias, NULL, al) == 1;
    } else made = bt__k_fp8_mm_make(c, &p, g->dt, g->fa, BT_F8E4M3, g->M, g->N, g->K, fwd, bias, sa, sb, al);
    printf("\n%s%s: M %lld N %lld K %lld, %s x %s -> %s%s%s, %d candidates%s\n", g->name,
           bias ? (boff ? ", bias 128 bytes off" : ", bias 256-aligned") : "", (long long)g->M, (long long)g->N, (long long)g->K,
           g_bf16 ? "bf16" : bt_dtype_name(g->fa), g_bf16 ? "bf16" : "f8e4m3", bt_dtype_name(g->dt), g->residual ? ", + residual" : "",
           g->acc ? ", accumulating" : "", made ? p.n_cand : 0, made ? (bias && !p.epi_bias ? " (no bias epilogue)" : "") : " (NO ALGORITHM)");
    g->pick8 = g->best = g->all = 0;
    if (made) {
        float beta = g->residual || g->acc ? 1.f : 0.f, pick_w = 1e30f, pick_c = 1e30f, best_c = 1e30f;
        int ipick = -1, ibest = -1;
        for (int i = 0; i < p.n_cand; i++) {
            char d[128];
            algo_desc(&p.cand[i], d, sizeof d);
            float w = time_algo(c, &p, &p.cand[i], A, B, C, R, beta, 0), k = time_algo(c, &p, &p.cand[i], A, B, C, R, beta, 1);
            if (!g_all) printf("  #%-2d warm %8.1f us  cold %8.1f us %6.0f TFLOP/s  %s\n", i, w, k, k > 0 ? fl / (k * 1e-6) / 1e12 : 0, d);
            if (w <= 0 || k <= 0) continue;
            if (i < 8 && w < pick_w) { pick_w = w; pick_c = k; ipick = i; }
            if (k < best_c) { best_c = k; ibest = i; }
        }
        printf("  => pick8 #%d cold %.1f us (%.0f TFLOP/s), best #%d cold %.1f us (%.0f TFLOP/s)\n", ipick, pick_c,
               fl / (pick_c * 1e-6) / 1e12, ibest, best_c, fl / (best_c * 1e-6) / 1e12);
        g->pick8 = pick_c; g->best = best_c; g->all = best_c;
        if (g_all) {
            char d[128] = "";
            int checked = 0, valid = 0;
            float t = search_all(c, &p, A, B, C, R, beta, d, sizeof d, &checked, &valid);
            printf("  => search: %d configurations checked, %d ran; best cold %.1f us (%.0f TFLOP/s, %.3fx the heuristic's best)  %s\n",
                   checked, valid, t, t > 0 ? fl / (t * 1e-6) / 1e12 : 0, t > 0 ? t / best_c : 0, d);
            if (t > 0 && t < best_c) g->all = t;
        }
        bt__k_mm_plan_drop(&p);
    }
    bt_free(A); bt_free(B); bt_free(C); bt_free(R);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (bt_k_device_count() == 0) { printf("bench_gemm_fp8: no CUDA device\n"); return 0; }
    bt_k_init(0);
    if (!bt_k_fp8_supported()) { printf("bench_gemm_fp8: no FP8 tensor cores on this GPU\n"); return 0; }
    S = bt_k_current_stream(0);
    int64_t C = argc > 1 ? atoll(argv[1]) : 1600, R = argc > 2 ? atoll(argv[2]) : 8192, F = 4 * C;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "all")) g_all = 1;
        else if (!strcmp(argv[i], "bf16")) g_bf16 = 1;
        else { fprintf(stderr, "bench_gemm_fp8: argument %d '%s': `all` or `bf16` expected\n", i, argv[i]); return 1; }
    }
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
        {"fwd qkv", BT_F8E4M3, BT_BF16, R, 3 * C, C, 1, 0, 0, 0, 0, 0},
        {"fwd attention projection", BT_F8E4M3, BT_BF16, R, C, C, 1, 1, 0, 0, 0, 0},
        {"fwd fc", BT_F8E4M3, BT_BF16, R, F, C, 1, 0, 0, 0, 0, 0},
        {"fwd MLP projection", BT_F8E4M3, BT_BF16, R, C, F, 1, 1, 0, 0, 0, 0},
        {"bwd qkv dx", BT_F8E5M2, BT_BF16, R, C, 3 * C, 0, 0, 0, 0, 0, 0},
        {"bwd attention projection dx", BT_F8E5M2, BT_BF16, R, C, C, 0, 0, 0, 0, 0, 0},
        {"bwd fc dx", BT_F8E5M2, BT_BF16, R, C, F, 0, 0, 0, 0, 0, 0},
        {"bwd MLP projection dx", BT_F8E5M2, BT_BF16, R, F, C, 0, 0, 0, 0, 0, 0},
        {"bwd qkv dw", BT_F8E5M2, BT_F32, 3 * C, C, R, 0, 0, 1, 0, 0, 0},
        {"bwd attention projection dw", BT_F8E5M2, BT_F32, C, C, R, 0, 0, 1, 0, 0, 0},
        {"bwd fc dw", BT_F8E5M2, BT_F32, F, C, R, 0, 0, 1, 0, 0, 0},
        {"bwd MLP projection dw", BT_F8E5M2, BT_F32, C, F, R, 0, 0, 1, 0, 0, 0},
    };
    printf("%s products of one GPT-2 layer%s, C %lld, %lld rows; L2 %d MB, flushed with %zu MB\n", g_bf16 ? "bf16" : "FP8",
           g_all ? " (with the search over every configuration)" : "", (long long)C, (long long)R, l2 >> 20,
           g_flush_bytes >> 20);
    float pick = 0, best = 0, all = 0, pick128 = 0;
    for (int i = 0; i < 12; i++) {
        run_prod(&ps[i], sc, sc + 4, biasbuf, ps[i].bias ? 0 : -1);
        pick += ps[i].pick8; best += ps[i].best; all += ps[i].all;
        if (ps[i].bias && !g_all) {                   /* the other alignment class */
            prod o = ps[i];
            run_prod(&o, sc, sc + 4, biasbuf, 128);
            pick128 += o.pick8 - ps[i].pick8;
        }
    }
    int64_t L = C == 1600 ? 48 : 12;
    printf("\na layer's 12 products, cold: pick8 %.1f us, best %.1f us; half the layers with their biases 128 bytes off: %+.1f us a "
           "layer on average; x %lld layers: pick8 %.2f ms, best %.2f ms\n", pick, best, pick128 / 2, (long long)L, (pick + pick128 / 2) * L / 1e3,
           best * L / 1e3);
    if (g_all) printf("the search's best: %.1f us a layer (%.3fx the heuristic list's best), x %lld layers %.2f ms\n", all, all / best,
                      (long long)L, all * L / 1e3);
    bt_free(g_flush); bt_free(sc); bt_free(biasbuf);
    return 0;
}
