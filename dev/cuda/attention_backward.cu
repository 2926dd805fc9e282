/* attention_backward.cu - the ladder of the attention backward (bf16, D 64 or 128, causal or not): the
   versions the shipped backward was measured against, from the sm_80 kernels to the fused sm_90a kernel
   that ships for causal D 64. The sm_90a versions run bt_attention.cuh's own kernels with the settings
   the library no longer takes (turns at the tensor cores off, Dvec by a pre-pass): both stay kernel
   arguments there (bt__k_attp's turns and dvec_out), so nothing is copied here. Each version runs on
   fresh random inputs (q, k, v views of one [B, T, 3, H, D] buffer, dO [B, T, H, D], out and lse from
   the library's forward), is checked against a CPU reference in double on a few heads (dq, dk, dv),
   and is timed with CUDA events (the median of --reps calls after 3 warm-ups).

   Build: make dev, or
     nvcc -O3 -std=c++17 -x cu -gencode=arch=compute_90a,code=sm_90a -I. -o build/dev/attention_backward \
          dev/cuda/attention_backward.cu -lcublas -lcublasLt -lm
   Run (an H100 / H200):
     build/dev/attention_backward                 versions 1-7 at B 16, H 12, T 1024, D 64, causal
     build/dev/attention_backward 4 6 --T 4096    the two shipped sm_90a paths at T 4096
   Options: --B --H --T --D (64 or 128) --causal 0|1 --reps N --seed S; --order 0|1|2 (the fused kernel's
   work items: 0 and 2 from a counter as SMs free up, as shipped; 1 a fixed snake order), --l2 MiB (the
   two kernels' sections of heads; 0: one), --one MiB (one section when all heads fit).

   The versions:
     1  sm_80: mma.sync dQ kernel and dK/dV kernel (S and dP recomputed in each: 7 tile products), Dvec
        by a pre-pass (bt_k_attention_hopper(0))
     2  sm_90a: wgmma dQ kernel (128-query CTAs) and dK/dV kernel (128-key CTAs), two consumer
        warpgroups and a producer each, Dvec by a pre-pass, no turns
     3  2 + turns: the warpgroups take turns at the tensor cores, one's exponentials under the other's
        products
     4  3 with Dvec computed by the dQ kernel (no pre-pass; shipped where the fused kernel does not
        run: not causal, D 128, T > 4096)
     5  the fused causal D 64 kernel: every product once (5), dQ parts summed in a fixed order through
        fp32 scratch by the copy engine; persistent, items from a counter; no turns
     6  5 + turns (shipped for causal D 64 up to T 4096)
     7  the library's call (bt_k_attention_backward_strided: the shipped dispatch)
   What they measured (B 16, H 12, causal, on an H100; bench/RESULTS.md has the rounds): the fused
   kernel T 4096 3288 us against 3867-3932 for the two kernels, T 1024 341.6-342.8 against 407-408;
   turns T 1024 341.6 against 344.4 without, T 4096 3291-3322 against 3338-3360. */
#define BT_ALLOC_IMPLEMENTATION
#define BT_KERNELS_IMPLEMENTATION
#include "bt_kernels.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef __nv_bfloat16 bf16;
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(2); } } while (0)

typedef struct {
    int64_t B, H, T, D;
    int causal, reps, order, l2, one;
    unsigned long long seed;
} fb_opts;
/* the buffers: qkv and gqkv [B, T, 3, H, D], out and g (dO) [B, T, H, D], lse [B, H, T] */
typedef struct { bf16 *qkv, *gqkv, *out, *g; float *lse; } fb_bufs;

enum { FB_SM80 = 1, FB_TWO_PRE, FB_TWO_PRE_TURNS, FB_TWO, FB_FUSED_NOTURN, FB_FUSED, FB_LIB };
static const char *fb_names[] = {"", "sm_80 mma.sync, Dvec pre-pass", "wgmma dQ + dK/dV, Dvec pre-pass, no turns",
                                 "3: + turns", "4: Dvec in the dQ kernel (shipped)", "fused (causal D 64), no turns",
                                 "fused + turns (shipped)", "the library's call (shipped)"};

/* the parameter block bt_k_attention_backward_colsum makes for these buffers (rows 16-byte aligned) */
static bt__k_attp fb_params(const fb_opts *o, const fb_bufs *b) {
    bt__k_attp p;
    bt__k_att_params(&p, BT_BF16, o->B, o->H, o->H, o->T, o->D, 1.f / sqrtf((float)o->D));
    const int64_t H = o->H, D = o->D, sqkv[3] = {o->T * 3 * H * D, D, 3 * H * D}, so[3] = {o->T * H * D, D, H * D};
    p.causal = o->causal;
    p.q = b->qkv; p.k = b->qkv + H * D; p.v = b->qkv + 2 * H * D; p.o = b->out; p.go = b->g;
    p.gq = b->gqkv; p.gk = b->gqkv + H * D; p.gv = b->gqkv + 2 * H * D; p.lse = b->lse;
    memcpy(p.sq, sqkv, sizeof p.sq); memcpy(p.sk, sqkv, sizeof p.sk); memcpy(p.sv, sqkv, sizeof p.sv);
    memcpy(p.sgq, sqkv, sizeof p.sgq); memcpy(p.sgk, sqkv, sizeof p.sgk); memcpy(p.sgv, sqkv, sizeof p.sgv);
    memcpy(p.so, so, sizeof p.so); memcpy(p.sgo, so, sizeof p.sgo);
    p.vec = p.vec_out = 1;
    return p;
}
static int fb_runs(int v, const fb_opts *o) {   /* the version can run here (sm_90a ones on an sm_90a build and device) */
    if (v == FB_SM80 || v == FB_LIB) return 1;
    if (!(bt_k_attention_hopper(-1) & 2)) return 0;
    return v < FB_FUSED_NOTURN || (o->causal && o->D == 64);
}
static void fb_call(int v, const fb_opts *o, const fb_bufs *b, cudaStream_t s) {
    const char *op = "attention_backward";
    if (v == FB_SM80 || v == FB_LIB) {
        const int prev = bt_k_attention_hopper(v == FB_LIB);
        const bt__k_attp p = fb_params(o, b);
        bt_k_attention_backward_strided(BT_BF16, p.gq, p.sgq, p.gk, p.sgk, p.gv, p.sgv, p.go, p.sgo, p.q, p.sq, p.k, p.sk, p.v, p.sv,
                                        p.o, p.so, p.lse, o->B, o->H, o->H, o->T, o->D, p.scale, o->causal, BT_MATMUL_FP32, s);
        bt_k_attention_hopper(prev & 1);
        return;
    }
    bt__k_attp p = fb_params(o, b);
    const int64_t rows = o->B * o->H * o->T;
    float *dvec = (float *)bt__k_scratch((size_t)rows * sizeof(float), s);
    p.dvec = dvec;
    p.turns = v == FB_TWO_PRE_TURNS || v == FB_TWO || v == FB_FUSED;
    if (v >= FB_FUSED_NOTURN) {   /* the fused kernel's own pre-pass writes Dvec and -lse log2(e) */
        p.lse2 = (float *)bt__k_scratch((size_t)rows * sizeof(float), s);
        bt__k_att_bwd_fused_run<bf16>(&p, s, op);
        bt_free(p.lse2);
    } else {
        if (v == FB_TWO) {
            p.dvec_out = dvec;
        } else {
            bt__k_att_dvec<bf16><<<bt__k_blocks(rows * 32, 256), 256, 0, s>>>(dvec, p);
            CK(cudaGetLastError());
        }
        bt__k_att_bwd_wg_run<bf16>(&p, s, op);
    }
    bt_free(dvec);
}

static float fb_bf(bf16 x) { return __bfloat162float(x); }
/* the reference on heads 0, BH / 2 and BH - 1 (double): the relative error of dq, dk, dv together */
static double fb_check(const fb_opts *o, const bf16 *hq, const bf16 *hg, const bf16 *hgq) {
    const int64_t B = o->B, H = o->H, T = o->T, D = o->D, BH = B * H, heads[3] = {0, BH / 2, BH - 1};
    const double scale = 1.0 / sqrt((double)D);
    double num = 0, den = 0;
    double *P = (double *)malloc(sizeof(double) * T), *dP = (double *)malloc(sizeof(double) * T);
    double *gq = (double *)malloc(sizeof(double) * T * D * 3), *gk = gq + T * D, *gv = gk + T * D;
    for (int hi = 0; hi < 3; hi++) {
        if (hi > 0 && heads[hi] == heads[hi - 1]) continue;
        const int64_t b = heads[hi] / H, h = heads[hi] % H;
#define FB_X(t, part) (hq + ((b * T + (t)) * 3 + (part)) * H * D + h * D)
        memset(gq, 0, sizeof(double) * T * D * 3);
        for (int64_t t = 0; t < T; t++) {
            const int64_t last = o->causal ? t : T - 1;
            const bf16 *q = FB_X(t, 0), *g = hg + (b * T + t) * H * D + h * D;
            double m = -INFINITY, l = 0, delta = 0;
            for (int64_t j = 0; j <= last; j++) {
                double a = 0;
                for (int64_t d = 0; d < D; d++) a += (double)fb_bf(q[d]) * fb_bf(FB_X(j, 1)[d]);
                P[j] = a * scale; m = fmax(m, P[j]);
            }
            for (int64_t j = 0; j <= last; j++) { P[j] = exp(P[j] - m); l += P[j]; }
            for (int64_t d = 0; d < D; d++) {
                double a = 0;
                for (int64_t j = 0; j <= last; j++) a += P[j] / l * fb_bf(FB_X(j, 2)[d]);
                delta += a * fb_bf(g[d]);
            }
            for (int64_t j = 0; j <= last; j++) {
                double a = 0;
                P[j] /= l;
                for (int64_t d = 0; d < D; d++) a += (double)fb_bf(g[d]) * fb_bf(FB_X(j, 2)[d]);
                dP[j] = P[j] * (a - delta) * scale;   /* dS */
                for (int64_t d = 0; d < D; d++) {
                    gv[j * D + d] += P[j] * fb_bf(g[d]);
                    gq[t * D + d] += dP[j] * fb_bf(FB_X(j, 1)[d]);
                    gk[j * D + d] += dP[j] * fb_bf(q[d]);
                }
            }
        }
        for (int part = 0; part < 3; part++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) {
                    const double r = gq[(part * T + t) * D + d], x = fb_bf(hgq[((b * T + t) * 3 + part) * H * D + h * D + d]);
                    num += (x - r) * (x - r); den += r * r;
                }
#undef FB_X
    }
    free(P); free(dP); free(gq);
    return num == num ? sqrt(num / (den > 0 ? den : 1)) : INFINITY;
}
static int fb_cmp(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }

static void fb_usage(void) {
    fprintf(stderr, "usage: attention_backward [version ...] [--B n] [--H n] [--T n] [--D 64|128] [--causal 0|1] [--reps n] [--seed s]\n"
                    "       [--order 0|1|2] [--l2 MiB] [--one MiB]   (versions 1-7: see the first comment of dev/cuda/attention_backward.cu)\n");
    exit(1);
}
int main(int argc, char **argv) {
    fb_opts o = {16, 12, 1024, 64, 1, 25, 0, BT__K_ATT_L2_MB_BWD, BT__K_ATT_L2_ONE_MB, (unsigned long long)time(NULL)};
    int want[FB_LIB + 1] = {0}, any = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] == '-') {
            if (i + 1 >= argc) fb_usage();
            const long long x = atoll(argv[++i]);
            if (!strcmp(a, "--B")) o.B = x; else if (!strcmp(a, "--H")) o.H = x; else if (!strcmp(a, "--T")) o.T = x;
            else if (!strcmp(a, "--D")) o.D = x; else if (!strcmp(a, "--causal")) o.causal = (int)x;
            else if (!strcmp(a, "--reps")) o.reps = (int)x; else if (!strcmp(a, "--seed")) o.seed = (unsigned long long)x;
            else if (!strcmp(a, "--order")) o.order = (int)x; else if (!strcmp(a, "--l2")) o.l2 = (int)x;
            else if (!strcmp(a, "--one")) o.one = (int)x;
            else fb_usage();
            continue;
        }
        const int v = atoi(a);
        if (v < 1 || v > FB_LIB) fb_usage();
        want[v] = any = 1;
    }
    if (!any) for (int v = 1; v <= FB_LIB; v++) want[v] = 1;
    if (o.B < 1 || o.H < 1 || o.T < 1 || (o.D != 64 && o.D != 128) || o.reps < 1 || o.order < 0 || o.order > 2 || o.l2 < 0 || o.one < 0)
        fb_usage();
    if (bt_k_device_count() < 1) { fprintf(stderr, "attention_backward: no GPU\n"); return 1; }
    bt_k_init(0);
    bt_k_attention_tuning tu = bt_k_attention_get_tuning();
    tu.order = o.order; tu.l2_mb_bwd = o.l2; tu.l2_one_mb = o.one;
    bt_k_attention_set_tuning(&tu);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int64_t nqkv = o.B * o.T * 3 * o.H * o.D, nout = o.B * o.T * o.H * o.D, nl = o.B * o.H * o.T;
    fb_bufs b;
    CK(cudaMalloc(&b.qkv, nqkv * 2)); CK(cudaMalloc(&b.gqkv, nqkv * 2)); CK(cudaMalloc(&b.out, nout * 2));
    CK(cudaMalloc(&b.g, nout * 2)); CK(cudaMalloc(&b.lse, nl * 4));
    bf16 *hq = (bf16 *)malloc(nqkv * 2), *hgq = (bf16 *)malloc(nqkv * 2), *hg = (bf16 *)malloc(nout * 2);
    float ms[1000];
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const double flops = 10.0 * o.B * o.H * o.T * o.T * o.D / (o.causal ? 2 : 1);   /* the 5 products that matter */
    const int reps = o.reps < 1000 ? o.reps : 1000;
    printf("attention backward, bf16, B %lld H %lld T %lld D %lld, %s, seed %llu; median of %d calls\n", (long long)o.B,
           (long long)o.H, (long long)o.T, (long long)o.D, o.causal ? "causal" : "not causal", o.seed, reps);
    int fails = 0;
    for (int v = 1; v <= FB_LIB; v++) {
        if (!want[v]) continue;
        if (!fb_runs(v, &o)) {
            printf("%3d  %-44s  (%s)\n", v, fb_names[v],
                   bt_k_attention_hopper(-1) & 2 ? "causal D 64 only" : "needs an sm_90a build on an H100 / H200");
            continue;
        }
        bt_k_normal(BT_BF16, b.qkv, nqkv, o.seed + 2 * v, 0, 0.0, 1.0, s);   /* fresh inputs for each version */
        bt_k_normal(BT_BF16, b.g, nout, o.seed + 2 * v + 1, 0, 0.0, 1.0, s);
        const bt__k_attp p = fb_params(&o, &b);
        bt_k_attention_strided(BT_BF16, b.out, p.so, b.lse, p.q, p.sq, p.k, p.sk, p.v, p.sv, o.B, o.H, o.H, o.T, o.D, p.scale, o.causal,
                               BT_MATMUL_FP32, s);
        CK(cudaMemsetAsync(b.gqkv, 0xff, nqkv * 2, s));   /* NaN where not written */
        fb_call(v, &o, &b, s);
        CK(cudaMemcpyAsync(hq, b.qkv, nqkv * 2, cudaMemcpyDeviceToHost, s));
        CK(cudaMemcpyAsync(hg, b.g, nout * 2, cudaMemcpyDeviceToHost, s));
        CK(cudaMemcpyAsync(hgq, b.gqkv, nqkv * 2, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        const double err = fb_check(&o, hq, hg, hgq);
        const int ok = err <= 2e-2;
        fails += !ok;
        for (int r = 0; r < 3; r++) fb_call(v, &o, &b, s);
        for (int r = 0; r < reps; r++) {
            CK(cudaEventRecord(e0, s));
            fb_call(v, &o, &b, s);
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms[r], e0, e1));
        }
        qsort(ms, reps, sizeof ms[0], fb_cmp);
        const double us = 1e3 * ms[reps / 2];
        printf("%3d  %-44s %9.1f us %6.1f TFLOP/s  dq dk dv %.1e  %s\n", v, fb_names[v], us, flops / us * 1e-6, err, ok ? "ok" : "FAIL");
        fflush(stdout);
    }
    CK(cudaFree(b.qkv)); CK(cudaFree(b.gqkv)); CK(cudaFree(b.out)); CK(cudaFree(b.g)); CK(cudaFree(b.lse));
    free(hq); free(hgq); free(hg);
    return fails ? 1 : 0;
}
