/* bench_kernels.cu - times the kernels of bt_kernels.cuh at GPT-2 124M training shapes, attention
   next to PyTorch's SDPA (make bench-kernels: builds build/bench_kernels, runs it from the repository
   root, then bench/bench_kernels_torch.py and bench/kernel_ratio.py for the other families).
   Each kernel: 3 warm-up calls, then REPS calls each timed with a pair of CUDA events on the
   kernels' stream; the median is reported. Inputs are random (never zeros) and rotated among
   enough copies that one round touches more than 2 x L2, so the timings are of HBM, not cache.
   "bytes" is the least traffic the op needs (each input read once, each output written once);
   GB/s = bytes / time, and "% copy" compares it with a device-to-device cudaMemcpy measured in
   the same run (bytes read + written). TFLOP/s counts 2 M N K per product (attention: only the
   causal half of its T x T products, 2 of them forward and 5 backward) against an 8192^3 bf16
   cuBLASLt product measured in the same run. Attention runs at the GPT-2 step shape (B 16) in
   bf16, f32 (FFMA) and tf32 (f32 data, BT_MATMUL_TF32) on the model's [B, T, H, D] strides, next
   to PyTorch's SDPA (is_causal; TF32 allowed for its tf32 row only) timed by
   bench/bench_attention_torch.py (run through popen from the repository root: same GPU, same
   run); the ratio lines say how fast ours is against it. The last lines are a markdown table.
   The attention group also times bf16 on the sm_80 kernels (the wgmma path off) and a sweep over
   T = 512 .. 4096 (B 16, H 12, D 64 and 128, causal and not) next to PyTorch's default, flash and
   cuDNN SDPA backends (bench_attention_torch.py --sweep); its table is printed last.
   BT_BENCH_ONLY=<layernorm|gelu|softmax|cross_entropy|colsum|attention|llama|adamw|fp8|embedding|matmul|
   bcast_add|scalar_mul> times one group only (the sweep's rows include the backward with the bias gradients'
   column sums), BT_BENCH_ONLY=attention_sweep the attention sweep only, BT_BENCH_SWEEP=i,j,.. only
   those shapes of the sweep (indices into its list, from 0), BT_BENCH_T=T gives all of them that T (the
   PyTorch rows then match none), BT_BENCH_TORCH=0 skips PyTorch (for
   a profiler run). */
#define BT_ALLOC_IMPLEMENTATION
#define BT_KERNELS_IMPLEMENTATION
#include "bt_kernels.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(2); } } while (0)
#define REPS 25
#define MAXCOPIES 8

static cudaStream_t S;
static cudaEvent_t e0[REPS], e1[REPS];
static double g_copy_bw, g_peak_tflops;   /* bytes/s, flop/s measured here */
static char g_rows[128][256];
static int g_nrows;
static double g_attn_us[3][2], g_sdpa_us[3][2];   /* [bf16, f32, tf32][fwd, bwd] */
static const char *g_attn_name[3] = {"bf16", "f32", "tf32"};
static const char *g_only;   /* BT_BENCH_ONLY=name: only that group (e.g. attention, for a profiler) */
static int want(const char *name) { return !g_only || strcmp(g_only, name) == 0; }
static double f_of(int64_t B, int64_t H, int64_t T, int64_t D) { return 2.0 * B * H * T * T * D / 2; }

static void *dev(size_t bytes) { return bt_alloc(bt_cuda_device(0), bytes, (void *)S); }
static void *randn(bt_dtype dt, int64_t n, uint64_t seed, double std) {
    size_t es = dt == BT_F32 ? 4 : dt == BT_F64 ? 8 : 2;
    void *p = dev((size_t)n * es);
    bt_k_normal(dt, p, n, seed, 0, 0.0, std, S);
    return p;
}
/* Let the GPU idle before a timed row that is compared across processes (attention vs PyTorch's
   SDPA): right after a burst of large GEMMs (the ceilings above) the SM clock stays lowered for a
   while, and a row timed then reads up to ~1.25x slow (H100; docs/history/results-journal.md,
   "Fast and slow processes"; bench_attention_torch.py waits the same before its rows). BT_BENCH_SETTLE_MS, default 500. */
static void settle(void) {
    CK(cudaStreamSynchronize(S));
    const char *e = getenv("BT_BENCH_SETTLE_MS");
    int ms = e && *e ? atoi(e) : 500;
    if (ms > 0) usleep((useconds_t)ms * 1000);
}
static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }
/* copies of a working set of `bytes` so that a round of them exceeds 2 x 50 MB of L2 */
static int ncopies(double bytes) {
    int c = (int)(100e6 / bytes) + 1;
    return c > MAXCOPIES ? MAXCOPIES : c;
}
static double median_ms(void) {
    float ms[REPS];
    CK(cudaEventSynchronize(e1[REPS - 1]));
    for (int r = 0; r < REPS; r++) CK(cudaEventElapsedTime(&ms[r], e0[r], e1[r]));
    qsort(ms, REPS, sizeof ms[0], cmpf);
    return ms[REPS / 2];
}
#define BENCH(ms_out, STMT) do { \
    for (int w_ = 0; w_ < 3; w_++) { [[maybe_unused]] int it = w_ % nc; STMT; } \
    for (int r_ = 0; r_ < REPS; r_++) { [[maybe_unused]] int it = r_ % nc; \
        CK(cudaEventRecord(e0[r_], S)); STMT; CK(cudaEventRecord(e1[r_], S)); } \
    CK(cudaGetLastError()); ms_out = median_ms(); } while (0)

static void report(const char *name, const char *shape, double ms, double bytes, double flops) {
    double s = ms * 1e-3;
    char bw[32] = "", pc[32] = "", tf[32] = "", pt[32] = "";
    if (bytes > 0) { snprintf(bw, sizeof bw, "%.0f", bytes / s / 1e9); snprintf(pc, sizeof pc, "%.0f%%", 100 * bytes / s / g_copy_bw); }
    if (flops > 0) { snprintf(tf, sizeof tf, "%.0f", flops / s / 1e12); snprintf(pt, sizeof pt, "%.0f%%", 100 * flops / s / g_peak_tflops); }
    printf("%-34s %-30s %9.1f us %7s GB/s %5s %6s TFLOP/s %5s\n", name, shape, ms * 1e3, bw, pc, tf, pt);
    if (g_nrows < 128)
        snprintf(g_rows[g_nrows++], 256, "| %s | %s | %.1f | %s | %s | %s | %s |", name, shape, ms * 1e3, bw, pc, tf, pt);
}

/* ---- bf16 attention over T = 512 .. 4096 (B 16, H 12; D 64, and 128 at two T), causal and not,
   on the model's [B, T, 3, H, D] strides, next to PyTorch's SDPA backends (default, flash, cuDNN)
   timed by bench/bench_attention_torch.py --sweep in the same run. Flops: 4 B H T^2 D forward
   (half when causal), 2.5x that backward (the useful products; ours does 3.5x, 2.5x in the fused
   causal D 64 backward up to T 1024). The last table gives each shape's times, TFLOP/s, % of the
   measured bf16 product peak and the ratios. ---- */
#define NSWEEP 12
static int g_sw_T[NSWEEP] = {512, 1024, 2048, 4096, 512, 1024, 2048, 4096, 1024, 4096, 1024, 4096};   /* BT_BENCH_T: all one T */
static const int g_sw_D[NSWEEP] = {64, 64, 64, 64, 64, 64, 64, 64, 128, 128, 128, 128};
static const int g_sw_C[NSWEEP] = {1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0};
static double g_sw_us[NSWEEP][2], g_sw_torch[NSWEEP][3][2];   /* [shape][default, flash, cudnn][fwd, bwd] */
/* shape i of the sweep is timed: every one, or those listed in BT_BENCH_SWEEP */
static int sweep_on(int i) {
    const char *e = getenv("BT_BENCH_SWEEP");
    if (!e || !*e) return 1;
    for (const char *c = e; *c;) {
        char *end;
        long v = strtol(c, &end, 10);
        if (end == c) return 0;
        if (v == i) return 1;
        c = *end ? end + 1 : end;
    }
    return 0;
}
static char g_sw_backend[NSWEEP][32];
static void attention_sweep(void) {
    const int64_t AB = 16, H = 12;
    int nc = 1;
    double ms;
    char shp[96];
    for (int i = 0; i < NSWEEP; i++) {
        if (!sweep_on(i)) continue;
        int64_t T = g_sw_T[i], D = g_sw_D[i], n = AB * H * T * D;
        int64_t sqkv[3] = {T * 3 * H * D, D, 3 * H * D}, so[3] = {T * H * D, D, H * D};
        char *qkv = (char *)randn(BT_BF16, 3 * n, 200 + i, 1), *gqkv = (char *)dev(3 * n * 2);
        void *g = randn(BT_BF16, n, 300 + i, 1), *o = dev(n * 2);
        float *lse = (float *)dev(AB * H * T * 4);
        const void *q = qkv, *k = qkv + H * D * 2, *v = qkv + 2 * H * D * 2;
        void *gq = gqkv, *gk = gqkv + H * D * 2, *gv = gqkv + 2 * H * D * 2;
        double f = 4.0 * AB * H * T * T * D / (g_sw_C[i] ? 2 : 1);
        float sc = (float)(1.0 / sqrt((double)D));
        snprintf(shp, sizeof shp, "B16 H12 T%lld D%lld bf16 %s", (long long)T, (long long)D, g_sw_C[i] ? "causal" : "full");
        settle();
        BENCH(ms, bt_k_attention_strided(BT_BF16, o, so, lse, q, sqkv, k, sqkv, v, sqkv, AB, H, H, T, D, sc, g_sw_C[i],
                                         BT_MATMUL_FP32, S));
        report("attention sweep", shp, ms, 0, f);
        g_sw_us[i][0] = ms * 1e3;
        settle();
        BENCH(ms, bt_k_attention_backward_strided(BT_BF16, gq, sqkv, gk, sqkv, gv, sqkv, g, so, q, sqkv, k, sqkv, v, sqkv, o, so,
                                                  lse, AB, H, H, T, D, sc, g_sw_C[i], BT_MATMUL_FP32, S));
        report("attention sweep backward", shp, ms, 0, 2.5 * f);
        g_sw_us[i][1] = ms * 1e3;
        /* the same with the bias gradients' column sums of dq, dk, dv (what the model calls: the
           per-warp partials in the kernel, then one pass over them) */
        float *cs = (float *)dev(3 * H * D * 4);
        settle();
        BENCH(ms, bt_k_attention_backward_colsum(BT_BF16, gq, sqkv, gk, sqkv, gv, sqkv, g, so, q, sqkv, k, sqkv, v, sqkv, o, so,
                                                 lse, AB, H, H, T, D, sc, g_sw_C[i], BT_MATMUL_FP32, cs, S));
        report("attention sweep backward + colsums", shp, ms, 0, 2.5 * f);
        bt_free(cs);
        bt_free(qkv); bt_free(gqkv); bt_free(g); bt_free(o); bt_free(lse);
    }
    CK(cudaStreamSynchronize(S));
    const char *tv = getenv("BT_BENCH_TORCH");
    FILE *pp = tv && strcmp(tv, "0") == 0 ? NULL : popen("python3 bench/bench_attention_torch.py --sweep 2>&1", "r");
    char line[512];
    while (pp && fgets(line, sizeof line, pp)) {
        int T, D, C;
        double fu, bu;
        char be[32], got[32] = "?";
        if (sscanf(line, "sweep T=%d D=%d causal=%d backend=%31s fwd_us=%lf bwd_us=%lf picked=%31s", &T, &D, &C, be, &fu, &bu,
                   got) >= 6) {
            int b = strcmp(be, "flash") == 0 ? 1 : strcmp(be, "cudnn") == 0 ? 2 : 0;
            for (int i = 0; i < NSWEEP; i++)
                if (g_sw_T[i] == T && g_sw_D[i] == D && g_sw_C[i] == C) {
                    g_sw_torch[i][b][0] = fu; g_sw_torch[i][b][1] = bu;
                    if (b == 0) snprintf(g_sw_backend[i], sizeof g_sw_backend[i], "%s", got);
                }
        } else {
            printf("bench_attention_torch.py: %s", line);
        }
    }
    if (pp) pclose(pp);
}
static void attention_sweep_table(void) {
    printf("\n| attention bf16, B16 H12 | ours fwd us | TFLOP/s | %% peak | ours bwd us | TFLOP/s | %% peak | torch default fwd / bwd us"
           " | flash fwd / bwd | cuDNN fwd / bwd | ours vs default fwd, bwd | ours vs cuDNN fwd, bwd |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < NSWEEP; i++) {
        if (!sweep_on(i)) continue;
        double f = 4.0 * 16 * 12 * (double)g_sw_T[i] * g_sw_T[i] * g_sw_D[i] / (g_sw_C[i] ? 2 : 1), fb = 2.5 * f;
        double tf = f / (g_sw_us[i][0] * 1e-6) / 1e12, tb = fb / (g_sw_us[i][1] * 1e-6) / 1e12;
        const double (*t)[2] = g_sw_torch[i];
        printf("| T%d D%d %s | %.1f | %.0f | %.0f%% | %.1f | %.0f | %.0f%% | %.1f / %.1f (%s) | %.1f / %.1f | %.1f / %.1f | "
               "%.2fx, %.2fx | %.2fx, %.2fx |\n",
               g_sw_T[i], g_sw_D[i], g_sw_C[i] ? "causal" : "full", g_sw_us[i][0], tf, 100 * tf * 1e12 / g_peak_tflops,
               g_sw_us[i][1], tb, 100 * tb * 1e12 / g_peak_tflops, t[0][0], t[0][1], g_sw_backend[i], t[1][0], t[1][1], t[2][0],
               t[2][1], t[0][0] / g_sw_us[i][0], t[0][1] / g_sw_us[i][1], t[2][0] / g_sw_us[i][0], t[2][1] / g_sw_us[i][1]);
    }
}

int main(void) {
    if (bt_k_device_count() == 0) { printf("bench_kernels: no CUDA device\n"); return 0; }
    bt_k_init(0);
    S = bt_k_current_stream(0);
    g_only = getenv("BT_BENCH_ONLY");
    const int sweep_t = getenv("BT_BENCH_T") ? atoi(getenv("BT_BENCH_T")) : 0;
    for (int i = 0; i < NSWEEP && sweep_t > 0; i++) g_sw_T[i] = sweep_t;
    for (int r = 0; r < REPS; r++) { CK(cudaEventCreate(&e0[r])); CK(cudaEventCreate(&e1[r])); }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    int nc = 1;
    double ms;

    /* ---- ceilings measured here ---- */
    {
        size_t nb = (size_t)1 << 30;
        void *a = dev(nb), *b = dev(nb);
        CK(cudaMemsetAsync(a, 1, nb, S));
        BENCH(ms, CK(cudaMemcpyAsync(b, a, nb, cudaMemcpyDeviceToDevice, S)));
        g_copy_bw = 2.0 * nb / (ms * 1e-3);
        int64_t n = 8192;
        void *x = randn(BT_BF16, n * n, 1, 1), *y = randn(BT_BF16, n * n, 2, 1), *z = dev((size_t)(n * n) * 2);
        BENCH(ms, bt_k_matmul(BT_BF16, z, x, y, NULL, n, n, n, 0, 0, 1, 0, 0, 0, 1.f, 0.f, BT_MATMUL_FP32, S));
        g_peak_tflops = 2.0 * n * n * n / (ms * 1e-3);
        printf("ceilings: D2D copy %.0f GB/s (read + write), bf16 8192^3 product %.0f TFLOP/s\n", g_copy_bw / 1e9,
               g_peak_tflops / 1e12);
        bt_free(a); bt_free(b); bt_free(x); bt_free(y); bt_free(z);
    }

    const int64_t B = 8, T = 1024, C = 768, H = 12, D = 64, V = 50257, Vp = 50304, N = B * T;
    char shp[64];
    /* ---- layernorm ---- */
    if (want("layernorm")) {
        int64_t n = N * C;
        nc = ncopies(4.0 * n);
        void *x[MAXCOPIES], *o[MAXCOPIES], *g[MAXCOPIES], *gx[MAXCOPIES];
        for (int i = 0; i < nc; i++) { x[i] = randn(BT_BF16, n, 10 + i, 1); g[i] = randn(BT_BF16, n, 30 + i, 1); o[i] = dev(n * 2); gx[i] = dev(n * 2); }
        void *w = randn(BT_BF16, C, 3, 1), *b = randn(BT_BF16, C, 4, 1), *gw = randn(BT_BF16, C, 5, 1), *gb = randn(BT_BF16, C, 6, 1);
        float *mean = (float *)dev(N * 4), *rstd = (float *)dev(N * 4);
        snprintf(shp, sizeof shp, "[%lld, %lld] bf16", (long long)N, (long long)C);
        BENCH(ms, bt_k_layernorm(BT_BF16, o[it], mean, rstd, x[it], w, b, N, C, 1e-5f, S));
        report("layernorm", shp, ms, 4.0 * n + 8.0 * N, 0);
        BENCH(ms, bt_k_layernorm_backward(BT_BF16, gx[it], 0, gw, gb, NULL, g[it], x[it], w, mean, rstd, N, C, S));
        report("layernorm_backward", shp, ms, 6.0 * n + 8.0 * N, 0);
        float *cs = (float *)dev(C * 4);
        BENCH(ms, bt_k_layernorm_backward(BT_BF16, gx[it], 0, gw, gb, cs, g[it], x[it], w, mean, rstd, N, C, S));
        report("layernorm_backward + gx column sums", shp, ms, 6.0 * n + 8.0 * N, 0);
        bt_free(cs);
        for (int i = 0; i < nc; i++) { bt_free(x[i]); bt_free(o[i]); bt_free(g[i]); bt_free(gx[i]); }
        bt_free(w); bt_free(b); bt_free(gw); bt_free(gb); bt_free(mean); bt_free(rstd);
    }
    /* ---- gelu ---- */
    if (want("gelu")) {
        int64_t n = N * 4 * C;
        nc = ncopies(4.0 * n);
        void *x[MAXCOPIES], *o[MAXCOPIES], *g[MAXCOPIES];
        for (int i = 0; i < nc; i++) { x[i] = randn(BT_BF16, n, 40 + i, 1); g[i] = randn(BT_BF16, n, 50 + i, 1); o[i] = dev(n * 2); }
        snprintf(shp, sizeof shp, "[%lld, %lld] bf16", (long long)N, (long long)(4 * C));
        BENCH(ms, bt_k_unary(BT_UOP_GELU, BT_BF16, o[it], x[it], n, S));
        report("gelu", shp, ms, 4.0 * n, 0);
        BENCH(ms, bt_k_unary_backward(BT_UOP_GELU, BT_BF16, o[it], g[it], x[it], n, S));
        report("gelu_backward", shp, ms, 6.0 * n, 0);
        for (int i = 0; i < nc; i++) { bt_free(x[i]); bt_free(o[i]); bt_free(g[i]); }
    }
    /* ---- softmax over attention-sized rows ---- */
    if (want("softmax")) {
        int64_t rows = B * H * 64, cols = T, n = rows * cols;
        nc = ncopies(4.0 * n);
        void *x[MAXCOPIES], *o[MAXCOPIES];
        for (int i = 0; i < nc; i++) { x[i] = randn(BT_BF16, n, 60 + i, 2); o[i] = dev(n * 2); }
        snprintf(shp, sizeof shp, "[%lld, %lld] bf16", (long long)rows, (long long)cols);
        BENCH(ms, bt_k_softmax(BT_BF16, o[it], x[it], rows, cols, 0, S));
        report("softmax", shp, ms, 4.0 * n, 0);
        BENCH(ms, bt_k_softmax_backward(BT_BF16, x[it], o[it], o[(it + 1) % nc], rows, cols, 0, S));
        report("softmax_backward", shp, ms, 6.0 * n, 0);
        for (int i = 0; i < nc; i++) { bt_free(x[i]); bt_free(o[i]); }
    }
    /* ---- cross-entropy over the padded vocabulary ---- */
    if (want("cross_entropy")) {
        int64_t n = N * Vp;
        nc = 1;
        void *lg = randn(BT_BF16, n, 70, 2), *gl = dev((size_t)n * 2);
        int32_t *tg = (int32_t *)dev(N * 4);
        float *loss = (float *)dev(N * 4), *lse = (float *)dev(N * 4), *gloss = (float *)dev(N * 4);
        bt_k_fill(BT_I32, tg, 17, N, S);
        bt_k_fill(BT_F32, gloss, 1.0 / N, N, S);
        snprintf(shp, sizeof shp, "[%lld, %lld of %lld] bf16", (long long)N, (long long)V, (long long)Vp);
        BENCH(ms, bt_k_cross_entropy(BT_BF16, loss, lse, lg, tg, N, V, Vp, -100, NULL, S));
        report("cross_entropy", shp, ms, 2.0 * N * V + 8.0 * N, 0);
        BENCH(ms, bt_k_cross_entropy_backward(BT_BF16, gl, lg, lse, tg, gloss, N, V, Vp, -100, S));
        report("cross_entropy_backward", shp, ms, 2.0 * N * V + 2.0 * n, 0);
        BENCH(ms, bt_k_cross_entropy_fused(BT_BF16, loss, lse, gl, tg, gloss, N, V, Vp, -100, NULL, S));
        report("cross_entropy_fused (in place)", shp, ms, 2.0 * N * V + 2.0 * n + 8.0 * N, 0);
        bt_free(lg); bt_free(gl); bt_free(tg); bt_free(loss); bt_free(lse); bt_free(gloss);
    }
    /* ---- column sums into fp32 (the bias gradients of a B=128 micro-step: [131072, 768 | 3072]) ---- */
    if (want("colsum")) {
        const int64_t R = 131072, cs[3] = {768, 2304, 3072};
        nc = 1;
        for (int i = 0; i < 3; i++) {
            void *x = randn(BT_BF16, R * cs[i], 75 + i, 1);
            float *acc = (float *)dev((size_t)cs[i] * 4);
            CK(cudaMemsetAsync(acc, 0, (size_t)cs[i] * 4, S));
            snprintf(shp, sizeof shp, "[%lld, %lld] bf16 -> f32", (long long)R, (long long)cs[i]);
            BENCH(ms, bt_k_sum_rows_acc(BT_BF16, acc, x, R, cs[i], S));
            report("sum_rows_acc (column sums)", shp, ms, 2.0 * R * cs[i] + 8.0 * cs[i], 0);
            bt_free(x); bt_free(acc);
        }
    }
    /* ---- attention at the GPT-2 step shape (B 16), q, k, v views of one [B, T, 3, H, D] buffer,
       out [B, T, H, D], gradients into a [B, T, 3, H, D] buffer: the strides the model uses.
       Flops count the causal half of each T x T product: 2 forward (2 B H T^2 D), 5 backward (2.5x;
       our deterministic backward does 7, the useful 5 are counted). PyTorch's SDPA (is_causal) on
       the same layout is timed by bench/bench_attention_torch.py in the same run. ---- */
    if (want("attention")) {
        const int64_t AB = 16, n = AB * H * T * D;
        nc = 1;
        int64_t sqkv[3] = {T * 3 * H * D, D, 3 * H * D}, so[3] = {T * H * D, D, H * D};
        const bt_dtype adt[3] = {BT_BF16, BT_F32, BT_F32};
        const bt_matmul_precision apr[3] = {BT_MATMUL_FP32, BT_MATMUL_FP32, BT_MATMUL_TF32};
        for (int a = 0; a < 3; a++) {
            bt_dtype dt = adt[a];
            size_t es = dt == BT_F32 ? 4 : 2;
            char *qkv = (char *)randn(dt, 3 * n, 80, 1), *gqkv = (char *)dev(3 * n * es);
            void *g = randn(dt, n, 83, 1), *o = dev(n * es);
            float *lse = (float *)dev(AB * H * T * 4);
            const void *q = qkv, *k = qkv + H * D * es, *v = qkv + 2 * H * D * es;
            void *gq = gqkv, *gk = gqkv + H * D * es, *gv = gqkv + 2 * H * D * es;
            double f = 2.0 * AB * H * T * T * D / 2;   /* one causal product */
            snprintf(shp, sizeof shp, "B%lld H%lld T%lld D%lld %s [B,T,H,D]", (long long)AB, (long long)H, (long long)T,
                     (long long)D, g_attn_name[a]);
            settle();
            BENCH(ms, bt_k_attention_strided(dt, o, so, lse, q, sqkv, k, sqkv, v, sqkv, AB, H, H, T, D, 0.125f, 1, apr[a], S));
            report("attention", shp, ms, 0, 2 * f);
            g_attn_us[a][0] = ms * 1e3;
            settle();
            BENCH(ms, bt_k_attention_backward_strided(dt, gq, sqkv, gk, sqkv, gv, sqkv, g, so, q, sqkv, k, sqkv, v, sqkv, o, so,
                                                      lse, AB, H, H, T, D, 0.125f, 1, apr[a], S));
            report("attention_backward", shp, ms, 0, 5 * f);
            g_attn_us[a][1] = ms * 1e3;
            if (a == 0) {   /* bf16 on the sm_80 kernels too (the wgmma path off), for the comparison */
                int prev = bt_k_attention_hopper(0);
                snprintf(shp, sizeof shp, "B%lld H%lld T%lld D%lld bf16 sm80 path", (long long)AB, (long long)H, (long long)T,
                         (long long)D);
                BENCH(ms, bt_k_attention_strided(dt, o, so, lse, q, sqkv, k, sqkv, v, sqkv, AB, H, H, T, D, 0.125f, 1, apr[a], S));
                report("attention", shp, ms, 0, 2 * f);
                BENCH(ms, bt_k_attention_backward_strided(dt, gq, sqkv, gk, sqkv, gv, sqkv, g, so, q, sqkv, k, sqkv, v, sqkv, o,
                                                          so, lse, AB, H, H, T, D, 0.125f, 1, apr[a], S));
                report("attention_backward", shp, ms, 0, 5 * f);
                bt_k_attention_hopper(prev & 1);
            }
            bt_free(qkv); bt_free(gqkv); bt_free(g); bt_free(o); bt_free(lse);
        }
        /* PyTorch in the same run (another process, the same GPU); BT_BENCH_TORCH=0 skips it */
        CK(cudaStreamSynchronize(S));
        const char *tv = getenv("BT_BENCH_TORCH");
        char cmd[256], line[512];
        snprintf(cmd, sizeof cmd, "python3 bench/bench_attention_torch.py --B %lld --H %lld --T %lld --D %lld 2>&1",
                 (long long)AB, (long long)H, (long long)T, (long long)D);
        FILE *pp = tv && strcmp(tv, "0") == 0 ? NULL : popen(cmd, "r");
        while (pp && fgets(line, sizeof line, pp)) {
            double fu, bu;
            char nm[16], be[128] = "?";
            if (sscanf(line, "sdpa %15s fwd_us=%lf bwd_us=%lf backend=%127s", nm, &fu, &bu, be) >= 3) {
                int a = strcmp(nm, "f32") == 0 ? 1 : strcmp(nm, "tf32") == 0 ? 2 : 0;
                g_sdpa_us[a][0] = fu; g_sdpa_us[a][1] = bu;
                snprintf(shp, sizeof shp, "B%lld H%lld T%lld D%lld %s (%s)", (long long)AB, (long long)H, (long long)T,
                         (long long)D, nm, be);
                report("torch sdpa is_causal", shp, fu * 1e-3, 0, 2 * f_of(AB, H, T, D));
                report("torch sdpa is_causal backward", shp, bu * 1e-3, 0, 5 * f_of(AB, H, T, D));
            } else {
                printf("bench_attention_torch.py: %s", line);
            }
        }
        if (pp) pclose(pp);
        attention_sweep();
    }
    /* ---- Llama 125M's attention (l125m: H 12, Hkv 4, D 64) on its packed projection [B, T, (H + 2 Hkv) D]:
       RoPE of q and k into the packed buffer the kernels read (v copied), its backward in place on the
       gradients of q and k; grouped-query attention forward and backward (dK, dV per query head, then
       summed per group) next to the multi-head rows above ---- */
    if (want("llama")) {
        const int64_t AB = 16, Hkv = 4, W = (H + 2 * Hkv) * D, n = AB * T * W;
        nc = ncopies(4.0 * n);
        float inv[32];
        for (int i = 0; i < 32; i++) inv[i] = (float)pow(500000.0, -2.0 * i / 64.0);
        void *x[MAXCOPIES], *y[MAXCOPIES];
        for (int i = 0; i < nc; i++) { x[i] = randn(BT_BF16, n, 90 + i, 1); y[i] = dev((size_t)n * 2); }
        int64_t sx[3] = {T * W, W, D};
        snprintf(shp, sizeof shp, "[%lld, %lld, %lld, %lld] bf16, 16 heads rotated", (long long)AB, (long long)T, (long long)(H + 2 * Hkv),
                 (long long)D);
        BENCH(ms, bt_k_rope(BT_BF16, y[it], sx, x[it], sx, AB, T, H + 2 * Hkv, H + Hkv, D, 0, inv, 1, S));
        report("rope (q, k rotated, v copied)", shp, ms, 4.0 * n, 0);
        BENCH(ms, bt_k_rope(BT_BF16, y[it], sx, y[it], sx, AB, T, H + Hkv, H + Hkv, D, 0, inv, -1, S));
        report("rope backward (in place)", shp, ms, 4.0 * AB * T * (H + Hkv) * D, 0);
        for (int i = 0; i < nc; i++) { bt_free(x[i]); bt_free(y[i]); }
        nc = 1;
        char *qkv = (char *)randn(BT_BF16, n, 95, 1), *gqkv = (char *)dev((size_t)n * 2);
        void *g = randn(BT_BF16, AB * T * H * D, 96, 1), *o = dev((size_t)(AB * T * H * D) * 2);
        float *lse = (float *)dev(AB * H * T * 4);
        int64_t so[3] = {T * H * D, D, H * D};
        const void *q = qkv, *k = qkv + H * D * 2, *v = qkv + (H + Hkv) * D * 2;
        void *gq = gqkv, *gk = gqkv + H * D * 2, *gv = gqkv + (H + Hkv) * D * 2;
        double f = 2.0 * AB * H * T * T * D / 2;
        snprintf(shp, sizeof shp, "B%lld H%lld Hkv%lld T%lld D%lld bf16 packed", (long long)AB, (long long)H, (long long)Hkv, (long long)T,
                 (long long)D);
        settle();
        BENCH(ms, bt_k_attention_strided(BT_BF16, o, so, lse, q, sx, k, sx, v, sx, AB, H, Hkv, T, D, 0.125f, 1, BT_MATMUL_FP32, S));
        report("attention gqa", shp, ms, 0, 2 * f);
        settle();
        BENCH(ms, bt_k_attention_backward_strided(BT_BF16, gq, sx, gk, sx, gv, sx, g, so, q, sx, k, sx, v, sx, o, so, lse, AB, H, Hkv, T, D,
                                                  0.125f, 1, BT_MATMUL_FP32, S));
        report("attention gqa backward", shp, ms, 0, 5 * f);
        double ours_b = ms * 1e3;
        bt_free(qkv); bt_free(gqkv); bt_free(g); bt_free(o); bt_free(lse);
        /* PyTorch's SDPA with enable_gqa on the same layout, same run (BT_BENCH_TORCH=0 skips it) */
        CK(cudaStreamSynchronize(S));
        const char *tv = getenv("BT_BENCH_TORCH");
        char cmd[256], line[512];
        snprintf(cmd, sizeof cmd, "python3 bench/bench_attention_torch.py --gqa --B %lld --H %lld --Hkv %lld --T %lld --D %lld 2>&1",
                 (long long)AB, (long long)H, (long long)Hkv, (long long)T, (long long)D);
        FILE *pp = tv && strcmp(tv, "0") == 0 ? NULL : popen(cmd, "r");
        while (pp && fgets(line, sizeof line, pp)) {
            double fu, bu;
            char be[32], picked[32] = "?";
            const char *at = strstr(line, "backend=");
            if (strncmp(line, "gqa ", 4) == 0 && at && sscanf(at, "backend=%31s fwd_us=%lf bwd_us=%lf picked=%31s", be, &fu, &bu, picked) >= 3) {
                snprintf(shp, sizeof shp, "B%lld H%lld Hkv%lld T%lld D%lld %s (%s)", (long long)AB, (long long)H, (long long)Hkv, (long long)T,
                         (long long)D, be, picked);
                report("torch sdpa gqa", shp, fu * 1e-3, 0, 2 * f);
                report("torch sdpa gqa backward", shp, bu * 1e-3, 0, 5 * f);
                if (!strcmp(be, "default")) printf("gqa vs SDPA default (%s): backward %.2fx\n", picked, bu / ours_b);
            } else {
                printf("bench_attention_torch.py: %s", line);
            }
        }
        if (pp) pclose(pp);
    }
    int sweep_only = g_only && strcmp(g_only, "attention_sweep") == 0;
    if (sweep_only) attention_sweep();
    /* ---- AdamW over 124M parameters, bf16 grads ---- */
    if (want("adamw")) {
        int64_t n = 124475904;
        nc = 1;
        float *p = (float *)randn(BT_F32, n, 90, 1), *m = (float *)randn(BT_F32, n, 91, 0.01), *v = (float *)dev(n * 4);
        void *g = randn(BT_BF16, n, 92, 1), *lo = dev(n * 2);
        bt_k_uniform(BT_F32, v, n, 93, 0, 1e-4, 1e-2, S);
        snprintf(shp, sizeof shp, "%lld params, g bf16", (long long)n);
        BENCH(ms, bt_k_adamw(p, g, BT_BF16, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, NULL, 0, 0, 10, NULL, NULL, NULL, S));
        report("adamw", shp, ms, 26.0 * n, 0);
        BENCH(ms, bt_k_sumsq(BT_BF16, (float *)lo, g, n, 0, S));
        report("sumsq (grad norm)", shp, ms, 2.0 * n, 0);
        bt_free(p); bt_free(m); bt_free(v); bt_free(g); bt_free(lo);
    }
    /* ---- FP8 casts at GPT-2 1.5B's shapes (d48, B 8: [8192, 1600] activations, [8192, 6400] hidden,
       a [6400, 1600] weight): q and its transpose qt, delayed scaling (the scale given, the amax
       measured in the pass); bytes: x (and h) read once, q and qt written once ---- */
    if (want("fp8") && bt_k_fp8_supported()) {
        const int64_t R = 8192, Cd = 1600;
        const int64_t shapes[3][2] = {{R, Cd}, {R, 4 * Cd}, {4 * Cd, Cd}};
        const char *names[3] = {"fp8_cast e4m3 (activation)", "fp8_cast e4m3 (hidden)", "fp8_cast e4m3 (weight)"};
        float *sc = (float *)dev(64);
        bt_k_fill(BT_F32, sc, 0.01, 16, S);
        for (int k = 0; k < 3; k++) {
            int64_t rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
            nc = ncopies(4.0 * n);
            void *x[MAXCOPIES], *hh[MAXCOPIES] = {NULL};   /* hh: DGELU's pre-activation, the hidden shape only */
            uint8_t *q[MAXCOPIES], *qt[MAXCOPIES];
            for (int i = 0; i < nc; i++) {
                x[i] = randn(BT_BF16, n, 150 + i, 1); hh[i] = k == 1 ? randn(BT_BF16, n, 160 + i, 1) : NULL;
                q[i] = (uint8_t *)dev((size_t)n); qt[i] = (uint8_t *)dev((size_t)n);
            }
            snprintf(shp, sizeof shp, "[%lld, %lld] bf16", (long long)rows, (long long)cols);
            BENCH(ms, bt_k_fp8_cast(BT_BF16, BT_F8E4M3, q[it], qt[it], x[it], rows, cols, NULL, sc, sc + 4, sc + 8, S));
            report(names[k], shp, ms, 4.0 * n, 0);
            if (k == 0) {   /* a linear's output gradient with its bias gradient's column sums per 64 rows */
                float *cs = (float *)dev((size_t)((rows + 63) / 64 * cols) * 4);
                BENCH(ms, bt_k_fp8_cast_act(BT_BF16, BT_F8E5M2, BT_FP8_ACT_X, q[it], qt[it], cs, x[it], NULL, rows, cols, NULL, sc, sc + 4,
                                            sc + 8, S));
                report("fp8_cast e5m2 + colsum", shp, ms, 4.0 * n + 4.0 * (rows / 64) * cols, 0);
                bt_free(cs);
            }
            if (k == 1) {
                BENCH(ms, bt_k_fp8_cast_act(BT_BF16, BT_F8E4M3, BT_FP8_ACT_GELU, q[it], qt[it], NULL, x[it], NULL, rows, cols, NULL, sc,
                                            sc + 4, sc + 8, S));
                report("fp8_cast_act GELU e4m3", shp, ms, 4.0 * n, 0);
                float *cs = (float *)dev((size_t)((rows + 63) / 64 * cols) * 4);
                BENCH(ms, bt_k_fp8_cast_act(BT_BF16, BT_F8E5M2, BT_FP8_ACT_DGELU, q[it], qt[it], cs, x[it], hh[it], rows, cols, NULL, sc,
                                            sc + 4, sc + 8, S));
                report("fp8_cast_act DGELU e5m2 + colsum", shp, ms, 6.0 * n + 4.0 * (rows / 64) * cols, 0);
                bt_free(cs);
            }
            for (int i = 0; i < nc; i++) { bt_free(x[i]); bt_free(hh[i]); bt_free(q[i]); bt_free(qt[i]); }
        }
        {   /* the FP8 head's logit gradient, a chunk of 4,096 rows of GPT-2's vocabulary: the fused
               cross-entropy in place then the e5m2 cast, against the fused kernel writing e5m2 then
               the byte transpose; bytes: logits read (2 N V), then 2 + 4 bytes a logit, or 1 + 2 */
            const int64_t Nh = 4096, Vh = 50257, Vph = 50304, nh = Nh * Vph;
            nc = 1;
            void *lg = randn(BT_BF16, nh, 170, 2);
            uint8_t *q = (uint8_t *)dev((size_t)nh), *qt = (uint8_t *)dev((size_t)nh);
            int32_t *tg = (int32_t *)dev(Nh * 4);
            float *loss = (float *)dev(Nh * 4), *gloss = (float *)dev(Nh * 4);
            bt_k_fill(BT_I32, tg, 17, Nh, S);
            bt_k_fill(BT_F32, gloss, 1.0 / Nh, Nh, S);
            snprintf(shp, sizeof shp, "[%lld, %lld of %lld] bf16", (long long)Nh, (long long)Vh, (long long)Vph);
            BENCH(ms, (bt_k_cross_entropy_fused(BT_BF16, loss, NULL, lg, tg, gloss, Nh, Vh, Vph, -100, NULL, S),
                       bt_k_fp8_cast(BT_BF16, BT_F8E5M2, q, qt, lg, Nh, Vph, NULL, sc, sc + 4, sc + 8, S)));
            report("xent fused, then fp8_cast e5m2", shp, ms, 2.0 * Nh * Vh + 6.0 * nh, 0);
            BENCH(ms, bt_k_cross_entropy_fused_fp8(BT_BF16, BT_F8E5M2, loss, NULL, lg, q, qt, tg, gloss, Nh, Vh, Vph, -100, NULL, sc, sc + 4,
                                                   sc + 8, S));
            report("xent fused fp8 + transpose", shp, ms, 2.0 * Nh * Vh + 3.0 * nh, 0);
            snprintf(shp, sizeof shp, "[%lld, %lld] bytes", (long long)Nh, (long long)Vph);
            BENCH(ms, bt_k_fp8_transpose(qt, q, Nh, Vph, S));
            report("fp8_transpose", shp, ms, 2.0 * nh, 0);
            bt_free(lg); bt_free(q); bt_free(qt); bt_free(tg); bt_free(loss); bt_free(gloss);
        }
        /* layernorm then the cast of its output, against bt_k_layernorm_fp8 (the norm writing e4m3 q, then the byte
           transpose; no bf16 output), at d48's [8192, 1600] and d12 B 16's [16384, 768]; bytes: the least the result needs
           (x read, q and qt written, mean and rstd), the same for both rows */
        const int64_t lshapes[2][2] = {{R, Cd}, {16384, 768}};
        for (int k = 0; k < 2; k++) {
            int64_t rows = lshapes[k][0], cols = lshapes[k][1], n = rows * cols;
            nc = ncopies(4.0 * n);
            void *x[MAXCOPIES], *y[MAXCOPIES];
            uint8_t *q[MAXCOPIES], *qt[MAXCOPIES];
            for (int i = 0; i < nc; i++) {
                x[i] = randn(BT_BF16, n, 170 + i, 1); y[i] = dev((size_t)n * 2);
                q[i] = (uint8_t *)dev((size_t)n); qt[i] = (uint8_t *)dev((size_t)n);
            }
            void *w = randn(BT_BF16, cols, 180, 1), *b = randn(BT_BF16, cols, 181, 1);
            float *mean = (float *)dev((size_t)rows * 4), *rstd = (float *)dev((size_t)rows * 4);
            snprintf(shp, sizeof shp, "[%lld, %lld] bf16", (long long)rows, (long long)cols);
            BENCH(ms, {
                bt_k_layernorm(BT_BF16, y[it], mean, rstd, x[it], w, b, rows, cols, 1e-5f, S);
                bt_k_fp8_cast(BT_BF16, BT_F8E4M3, q[it], qt[it], y[it], rows, cols, NULL, sc, sc + 4, sc + 8, S);
            });
            report("layernorm, then fp8_cast e4m3", shp, ms, 4.0 * n + 8.0 * rows, 0);
            BENCH(ms, bt_k_layernorm_fp8(BT_BF16, q[it], qt[it], mean, rstd, x[it], w, b, rows, cols, 1e-5f, sc, sc + 4, sc + 8, S));
            report("layernorm_fp8 (q, then the transpose)", shp, ms, 4.0 * n + 8.0 * rows, 0);
            for (int i = 0; i < nc; i++) { bt_free(x[i]); bt_free(y[i]); bt_free(q[i]); bt_free(qt[i]); }
            bt_free(w); bt_free(b); bt_free(mean); bt_free(rstd);
        }
        bt_free(sc);
    }
    /* ---- embedding backward (tokens + positions) ---- */
    if (want("embedding")) {
        int64_t n = N;
        nc = 1;
        void *gt = randn(BT_F32, V * C, 101, 1);
        int32_t *idx = (int32_t *)dev(n * 4);
        {   /* token ids: Philox floats in [0, V) cast to int32 */
            float *tmp = (float *)dev(n * 4);
            bt_k_uniform(BT_F32, tmp, n, 102, 0, 0, (double)V - 1, S);
            bt_k_cast(BT_I32, idx, BT_F32, tmp, n, S);
            bt_free(tmp);
        }
        void *g32 = randn(BT_F32, n * C, 103, 1);
        snprintf(shp, sizeof shp, "[%lld, %lld] f32, V %lld", (long long)n, (long long)C, (long long)V);
        BENCH(ms, bt_k_embedding_backward(BT_F32, gt, g32, idx, n, C, V, 0, S));
        report("embedding_backward atomic", shp, ms, 8.0 * n * C, 0);
        BENCH(ms, bt_k_embedding_backward(BT_F32, gt, g32, idx, n, C, V, 1, S));
        report("embedding_backward deterministic", shp, ms, 8.0 * n * C, 0);
        bt_free(gt); bt_free(idx); bt_free(g32);
    }
    /* ---- the token + position embedding add: [B, T C] + [T C] (one side repeated over B) ---- */
    if (want("bcast_add")) {
        int64_t n = N * C, nb = T * C, sh[2] = {B, T * C}, sa[2] = {T * C, 1}, sb[2] = {0, 1};
        nc = 1;
        void *a = randn(BT_BF16, n, 104, 1), *b = randn(BT_BF16, nb, 105, 1), *o = dev((size_t)n * 2);
        snprintf(shp, sizeof shp, "[%lld, %lld] + [%lld] bf16", (long long)B, (long long)(T * C), (long long)(T * C));
        BENCH(ms, bt_k_binary(BT_BOP_ADD, BT_BF16, o, a, sa, b, sb, 2, sh, S));
        report("binary add, b repeated", shp, ms, 4.0 * n + 2.0 * nb, 0);
        bt_free(a); bt_free(b); bt_free(o);
    }
    /* ---- a gradient times its upstream scalar: [16 N, C] * [1] (the classifier's dx times d loss at
       the default micro-batch, B = 128) ---- */
    if (want("scalar_mul")) {
        int64_t n = 16 * N * C, sh[1] = {n}, sa[1] = {1}, sb[1] = {0};
        nc = 1;
        void *a = randn(BT_BF16, n, 106, 1), *b = randn(BT_BF16, 1, 107, 1), *o = dev((size_t)n * 2);
        snprintf(shp, sizeof shp, "[%lld, %lld] * [1] bf16", (long long)(16 * N), (long long)C);
        BENCH(ms, bt_k_binary(BT_BOP_MUL, BT_BF16, o, a, sa, b, sb, 1, sh, S));
        report("binary mul by a scalar", shp, ms, 4.0 * n, 0);
        /* the same off 16-byte alignment: the general strided kernel (what ran before the scalar kernel) */
        int64_t sh1[1] = {n - 1};
        BENCH(ms, bt_k_binary(BT_BOP_MUL, BT_BF16, (char *)o + 2, (char *)a + 2, sa, b, sb, 1, sh1, S));
        report("binary mul by a scalar, unaligned (strided kernel)", shp, ms, 4.0 * (n - 1), 0);
        bt_free(a); bt_free(b); bt_free(o);
    }
    /* ---- matmul (bf16, fp32 accumulation) at the GPT-2 layer shapes ---- */
    if (want("matmul")) {
        struct { const char *name; int64_t M, N, K; int tb; int bias; } mm[] = {
            {"matmul qkv (x W^T + b)", N, 3 * C, C, 1, 1},
            {"matmul fc (x W^T + b)", N, 4 * C, C, 1, 1},
            {"matmul fc proj (x W^T + b)", N, C, 4 * C, 1, 1},
            {"matmul lm head (x Wte^T)", N, Vp, C, 1, 0},
        };
        nc = 1;
        for (int i = 0; i < 4; i++) {
            void *a = randn(BT_BF16, mm[i].M * mm[i].K, 110 + i, 1), *b = randn(BT_BF16, mm[i].K * mm[i].N, 120 + i, 1);
            void *bias = randn(BT_BF16, mm[i].N, 130 + i, 1), *c = dev((size_t)(mm[i].M * mm[i].N) * 2);
            snprintf(shp, sizeof shp, "%lldx%lldx%lld bf16", (long long)mm[i].M, (long long)mm[i].N, (long long)mm[i].K);
            BENCH(ms, bt_k_matmul(BT_BF16, c, a, b, mm[i].bias ? bias : NULL, mm[i].M, mm[i].N, mm[i].K, 0, mm[i].tb, 1, 0, 0, 0,
                                  1.f, 0.f, BT_MATMUL_FP32, S));
            report(mm[i].name, shp, ms, 0, 2.0 * mm[i].M * mm[i].N * mm[i].K);
            bt_free(a); bt_free(b); bt_free(bias); bt_free(c);
        }
        /* the MLP's fused epilogues (bt_k_matmul_epi) next to what they replace: the product, then
           the GELU / GELU-gradient / column-sum kernels. bytes: the extra traffic of the epilogue
           (aux written or read, the vector), flops: the product's */
        const int64_t F = 4 * C;
        void *x = randn(BT_BF16, N * C, 140, 1), *w = randn(BT_BF16, F * C, 141, 1), *b1 = randn(BT_BF16, F, 142, 1);
        void *u = dev((size_t)(N * F) * 2), *h = randn(BT_BF16, N * F, 143, 1), *g = randn(BT_BF16, N * C, 144, 1);
        void *v = dev((size_t)F * 4), *dw = dev((size_t)(F * C) * 4);
        CK(cudaMemsetAsync(dw, 0, (size_t)(F * C) * 4, S));
        snprintf(shp, sizeof shp, "%lldx%lldx%lld bf16", (long long)N, (long long)F, (long long)C);
        BENCH(ms, bt_k_matmul_epi(BT_BF16, BT_BF16, u, x, w, N, F, C, 0, 1, 0.f, BT_K_EPI_GELU_AUX_BIAS, b1, h, BT_MATMUL_FP32, S));
        report("matmul fc + GELU_AUX_BIAS", shp, ms, 2.0 * N * F, 2.0 * N * F * C);
        BENCH(ms, { bt_k_matmul(BT_BF16, h, x, w, b1, N, F, C, 0, 1, 1, 0, 0, 0, 1.f, 0.f, BT_MATMUL_FP32, S);
                    bt_k_unary(BT_UOP_GELU, BT_BF16, u, h, N * F, S); });
        report("  unfused: fc + bias, gelu kernel", shp, ms, 2.0 * 2 * N * F, 2.0 * N * F * C);
        snprintf(shp, sizeof shp, "%lldx%lldx%lld bf16", (long long)N, (long long)F, (long long)C);
        BENCH(ms, bt_k_matmul_epi(BT_BF16, BT_BF16, u, g, w, N, F, C, 0, 0, 0.f, BT_K_EPI_DGELU_BGRAD, v, h, BT_MATMUL_FP32, S));
        report("matmul dh = (g W) gelu'(h) DGELU_BGRAD", shp, ms, 2.0 * N * F, 2.0 * N * F * C);
        BENCH(ms, { bt_k_matmul(BT_BF16, u, g, w, NULL, N, F, C, 0, 0, 1, 0, 0, 0, 1.f, 0.f, BT_MATMUL_FP32, S);
                    bt_k_unary_backward(BT_UOP_GELU, BT_BF16, u, u, h, N * F, S);
                    bt_k_sum_rows_acc(BT_BF16, (float *)v, u, N, F, S); });
        report("  unfused: g W, gelu bwd, col sums", shp, ms, 2.0 * 4 * N * F, 2.0 * N * F * C);
        BENCH(ms, bt_k_matmul_epi(BT_BF16, BT_BF16, u, g, w, N, F, C, 0, 0, 0.f, BT_K_EPI_DGELU, NULL, h, BT_MATMUL_FP32, S));
        report("matmul dh = (g W) gelu'(h) DGELU", shp, ms, 2.0 * N * F, 2.0 * N * F * C);
        BENCH(ms, { bt_k_matmul(BT_BF16, u, g, w, NULL, N, F, C, 0, 0, 1, 0, 0, 0, 1.f, 0.f, BT_MATMUL_FP32, S);
                    bt_k_unary_backward(BT_UOP_GELU, BT_BF16, u, u, h, N * F, S); });
        report("  unfused: g W, gelu bwd", shp, ms, 2.0 * 3 * N * F, 2.0 * N * F * C);
        snprintf(shp, sizeof shp, "%lldx%lldx%lld bf16->f32", (long long)F, (long long)C, (long long)N);
        BENCH(ms, bt_k_matmul_epi(BT_BF16, BT_F32, dw, u, x, F, C, N, 1, 0, 1.f, BT_K_EPI_BGRADB, v, NULL, BT_MATMUL_FP32, S));
        report("matmul dW += dh^T x, db BGRADB", shp, ms, 0, 2.0 * N * F * C);
        BENCH(ms, { bt_k_matmul_out(BT_BF16, BT_F32, dw, u, x, NULL, F, C, N, 1, 0, 1, 0, 0, 0, 1.f, 1.f, BT_MATMUL_FP32, S);
                    bt_k_sum_rows_acc(BT_BF16, (float *)v, u, N, F, S); });
        report("  unfused: dW += dh^T x, col sums", shp, ms, 2.0 * N * F, 2.0 * N * F * C);
        /* the residual add in the fc proj GEMM (bt_k_matmul_add) next to the GEMM and an add */
        snprintf(shp, sizeof shp, "%lldx%lldx%lld bf16", (long long)N, (long long)C, (long long)F);
        void *res = randn(BT_BF16, N * C, 145, 1), *yo = dev((size_t)(N * C) * 2);
        BENCH(ms, bt_k_matmul_add(BT_BF16, yo, u, w, b1, res, N, C, F, 0, 1, BT_MATMUL_FP32, S));
        report("matmul fc proj + bias + residual", shp, ms, 2.0 * N * C, 2.0 * N * F * C);
        const int64_t st1[1] = {1}, nel = N * C;
        BENCH(ms, { bt_k_matmul(BT_BF16, yo, u, w, b1, N, C, F, 0, 1, 1, 0, 0, 0, 1.f, 0.f, BT_MATMUL_FP32, S);
                    bt_k_binary(BT_BOP_ADD, BT_BF16, g, res, st1, yo, st1, 1, &nel, S); });
        report("  unfused: fc proj + bias, add", shp, ms, 2.0 * 3 * N * C, 2.0 * N * F * C);
        bt_free(res); bt_free(yo);
        bt_free(x); bt_free(w); bt_free(b1); bt_free(u); bt_free(h); bt_free(g); bt_free(v); bt_free(dw);
    }
    CK(cudaStreamSynchronize(S));
    printf("\n| kernel | shape | median us | GB/s | %% of copy | TFLOP/s | %% of bf16 product |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < g_nrows; i++) printf("%s\n", g_rows[i]);
    printf("ceilings: D2D copy %.0f GB/s, bf16 8192^3 product %.0f TFLOP/s\n", g_copy_bw / 1e9, g_peak_tflops / 1e12);
    for (int a = 0; a < 3; a++)
        for (int d = 0; d < 2; d++)
            if (g_sdpa_us[a][d] > 0)
                printf("attention %s %s: ours %.1f us, torch sdpa %.1f us, speed ours / torch = %.2fx\n", g_attn_name[a],
                       d ? "backward" : "forward", g_attn_us[a][d], g_sdpa_us[a][d], g_sdpa_us[a][d] / g_attn_us[a][d]);
    if (want("attention") || sweep_only) attention_sweep_table();
    bt_k_shutdown();
    return 0;
}
