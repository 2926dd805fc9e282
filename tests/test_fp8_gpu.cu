/* test_fp8_gpu.cu - FP8 on a GPU against the CPU's emulation (bt_tensor.h; tests/test_fp8.c checks
   that emulation against the formats' definitions). Skipped, with the reason, without a GPU or on
   one below compute capability 8.9 (no FP8 tensor cores).
     casts     bt_k_fp8_cast's bytes (q and its transpose) equal bt_fp8_quantize's on fresh random
               inputs in f32, bf16 and f16, spread over 12 decades, with every fp8 value, midpoint
               and midpoint +- one f32 ulp planted, values past the range, infinities, signed zeros,
               f32 subnormals; NaN gives a NaN code. The scale used and the amax accumulated are the
               host's, bit for bit, in both modes (current: from bt_k_fp8_amax; delayed: given).
     update    bt_k_fp8_update's rows equal bt__fp8_roll's, bit for bit (NaN and inf in the history), one state
               or a bank of several in one launch.
     products  bt_k_matmul_fp8 (e4m3 x e4m3, e5m2 x e4m3, e4m3 x e5m2; bf16, f16 and f32 out; with
               and without a bias; split and fast accumulation) against float64 products of the
               same bytes. The bound per element: u_acc S + u_out (|ref| + u_acc S), S = sa sb
               sum |a_k b_k| + |bias|, u_out the output's rounding (2^-8 bf16, 2^-11 f16, 2^-24 f32).
               u_acc: cuBLASLt does not document how its FP8 kernels accumulate. Measurements of
               Hopper's FP8 tensor cores find the products exact but each addend aligned to the
               group's largest exponent and cut to about 13 fraction bits: an error per product of
               up to 2^-13 of that largest magnitude (the partial sum or a product, some 4 to 10 times
               the mean |product| over a chunk of 128), so a sum's error stays under 2^-13 x 8 S =
               2^-10 S even when every cut goes the same way: split accumulation (the default: the
               partial sum promoted to an fp32 register every chunk) is held to u_acc = 2^-10; fast
               accumulation (the partial sum grows over the whole K, its cuts with it) to 2^-8.
               A wrong scale, operand, format, transpose or a lost bias is off by orders more (here
               S / |C| is about sqrt(K)). The worst error / bound of each mode is printed (info:),
               BT_TEST_VERBOSE=1 prints every case's: the margins to tighten these with.
     the op    bt_linear_fp8 on the GPU and on the CPU from the same values, three steps of each
               recipe (bf16 and f32): the quantised operands the nodes keep are the same bytes,
               y, dx, dw, db are within the bounds above of the float64 products of those bytes (the
               CPU's within fp32 accumulation's), and the scaling states are the same bits after
               each update; and with the training default's accumulation (y and dx fast: their
               products held to the fast bound, dw to split's).
     the head  bt_linear_cross_entropy_fp8 against bt_cross_entropy(bt_linear_fp8(..)), and in 4
               chunks against 1 (the bounds at test_lxent_op); the fused cross-entropy writing its
               logit gradient in FP8 against the fused kernel then the cast, every byte and bit
               (test_xent_fp8; also with q^T written into the logits' own bytes), and the byte
               transpose.
     folded    bt_k_fp8_cast_act (GELU, DGELU; X, the plain cast with column sums) against bt_k_unary /
               bt_k_unary_backward written out (X: x) and cast: the same bytes, scales and amaxes;
               DGELU's and X's column sums per 64 rows within
               fp32's bound of float64 sums. bt_mlp_gelu_fp8 against the composition it replaces:
               the same bits but for b1's gradient (its sums in another order). The same for
               SwiGLU (SWIGLU, DSWIGLU against bt_k_swiglu / bt_k_swiglu_backward; bt_mlp_swiglu_fp8
               against its composition, every bit).
     norms     bt_k_layernorm_fp8 and bt_k_rmsnorm_fp8 (the norm's output cast in its own kernel) against
               the norm kernel writing its output and bt_k_fp8_cast of it: the same bytes, statistics,
               scales and amaxes; bt_layernorm_linear_fp8, bt_layernorm_mlp_gelu_fp8 and their RMSNorm
               twins against their compositions, every bit, the fused kernel taken once the delayed
               history is primed.
     errors    shapes that are not multiples of 16, f64, a state on another device, a scale pointer
               off 16 bytes. */
#include "bt_autograd.h"
#include "tests/bt_test.h"
#include "tests/fp8_ref.h"
#include <cuda_runtime.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define CPU bt_cpu()
static const bt_dtype FMTS[2] = {BT_F8E4M3, BT_F8E5M2};
static const bt_dtype DTS[3] = {BT_F32, BT_BF16, BT_F16};
static const double U_SPLIT = 1.0 / 1024, U_FAST = 1.0 / 256;   /* 2^-10, 2^-8: see above */

static int g_ok = -1;
static char g_why[400];
static int fp8_gpu(void) {
    if (g_ok >= 0) return g_ok;
    g_ok = 0;
    if (bt_cuda_device_count() < 1) { snprintf(g_why, sizeof g_why, "no CUDA device"); return 0; }
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) { snprintf(g_why, sizeof g_why, "cudaGetDeviceProperties failed"); return 0; }
    if (!bt_k_fp8_supported()) {
        snprintf(g_why, sizeof g_why, "%s is compute capability %d.%d: FP8 needs 8.9 or newer", p.name, p.major, p.minor);
        return 0;
    }
    g_ok = 1;
    return 1;
}
#define NEED_FP8() do { if (!fp8_gpu()) { BT_SKIP("%s", g_why); return; } } while (0)
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(2); } } while (0)
static cudaStream_t st0(void) { return (cudaStream_t)bt_stream_current(bt_cuda_device(0)); }

/* ---- host random numbers ---- */
static uint64_t g_rs = 0x853c49e6748fea9bull;
static uint64_t rbits(void) { g_rs ^= g_rs << 13; g_rs ^= g_rs >> 7; g_rs ^= g_rs << 17; return g_rs; }
static double runif(void) { return (double)(rbits() >> 11) * (1.0 / 9007199254740992.0); }
static double rnorm(void) { return sqrt(-2.0 * log(runif() + 1e-300)) * cos(6.283185307179586 * runif()); }
static float f32_of_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static int is_nan_code(uint8_t b, bt_dtype fmt) { return fmt == BT_F8E5M2 ? (b & 0x7c) == 0x7c && (b & 3) : (b & 0x7f) == 0x7f; }

/* host floats rounded to dt (the values a dt tensor holds), through the library's conversions */
static void round_to(bt_dtype dt, float *v, long n) {
    for (long i = 0; i < n; i++)
        v[i] = dt == BT_BF16 ? bt__bf16_to_f32(bt__f32_to_bf16(v[i])) : dt == BT_F16 ? bt__f16_to_f32(bt__f32_to_f16(v[i])) : v[i];
}
/* a dt tensor on dev holding v (already rounded to dt) */
static bt_tensor *tensor_of(const float *v, bt_shape s, bt_dtype dt, bt_device dev) {
    bt_scope_begin();
    bt_tensor *t = bt_keep(bt_to(bt_cast(bt_from_data(v, s, BT_F32, CPU), dt), dev));
    bt_scope_end();
    return t;
}
/* poisoned (0xff bytes) device memory of the test's own; the device synchronised after, so the
   library's non-blocking stream sees the memset (the legacy stream does not order it) */
static void *dev_alloc(size_t n) {
    void *p;
    CK(cudaMalloc(&p, n ? n : 1)); CK(cudaMemset(p, 0xff, n ? n : 1)); CK(cudaDeviceSynchronize());
    return p;
}

/* =============================================================================================
   casts
   ============================================================================================= */
/* n inputs: N(0, 1) times 10^U(-6, 6), and (planted) specials: with plant, every fp8 value of fmt,
   each midpoint of neighbours and (in f32) one ulp either side, both signs, divided by `scale` so
   that the cast's product lands on them (exactly when scale is a power of two); values past the
   range, +-inf, -0, an f32 subnormal; with nan, NaN */
static float *cast_inputs(long n, bt_dtype dt, bt_dtype fmt, float scale, int plant, int nan) {
    float *v = (float *)malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) {                    /* f16: below its largest value, so that an amax stays finite */
        v[i] = (float)(rnorm() * pow(10.0, runif() * 12 - 6));
        if (dt == BT_F16 && fabsf(v[i]) > 6e4f) v[i] = v[i] > 0 ? 6e4f : -6e4f;
    }
    long k = 0;
    if (plant) {
        int mc = fr_maxcode(fmt);
        for (int c = 0; c <= mc && k + 8 < n; c++) {
            double lo = fr_decode(c, fmt), mid = c < mc ? (lo + fr_decode(c + 1, fmt)) / 2 : lo * 1.5;
            float m = (float)mid;
            v[k++] = (float)lo * scale; v[k++] = -(float)lo * scale; v[k++] = m * scale; v[k++] = -m * scale;
            v[k++] = nextafterf(m, INFINITY) * scale; v[k++] = nextafterf(m, 0.f) * scale;
        }
        const float sp[6] = {INFINITY, -INFINITY, -0.f, 3e38f, -1e9f, f32_of_bits(3)};
        for (int j = 0; j < 6 && k < n; j++) v[k++] = sp[j];
    }
    if (nan && k < n) v[k++] = NAN;
    for (long i = 0; i < n; i++) {                    /* shuffle, so the specials fall in every tile */
        long j = (long)(rbits() % (uint64_t)n);
        float t = v[i]; v[i] = v[j]; v[j] = t;
    }
    round_to(dt, v, n);
    return v;
}
/* one cast on the GPU against the host: mode 0 current (amax first), 1 delayed (scale given);
   outs: 3 both q and qt, 1 q only, 2 qt only. Returns the number of wrong bytes and flags. */
static long cast_case(bt_dtype dt, bt_dtype fmt, long rows, long cols, int mode, float scale, int plant, int outs, float preset) {
    long n = rows * cols, bad = 0;
    float *v = cast_inputs(n, dt, fmt, mode ? scale : 1.f, plant && mode, mode);
    bt_tensor *x = tensor_of(v, bt_shape2(rows, cols), dt, bt_cuda_device(0));
    uint8_t *q = (uint8_t *)dev_alloc((size_t)n), *qt = (uint8_t *)dev_alloc((size_t)n);
    float *f = (float *)dev_alloc(4 * sizeof(float));      /* [0] scale_in, [1] scale_used, [2] amax now, [3] amax_acc */
    float init[4] = {scale, -1.f, 0.f, preset};
    CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    cudaStream_t s = st0();
    if (!mode) bt_k_fp8_amax(dt, f + 2, bt_data_ptr(x), n, s);
    bt_k_fp8_cast(dt, fmt, outs & 1 ? q : NULL, outs & 2 ? qt : NULL, bt_data_ptr(x), rows, cols, mode ? NULL : f + 2, mode ? f : NULL, f + 1,
                  f + 3, s);
    CK(cudaStreamSynchronize(s));
    uint8_t *hq = (uint8_t *)malloc((size_t)n), *hqt = (uint8_t *)malloc((size_t)n);
    float hf[4];
    CK(cudaMemcpy(hq, q, (size_t)n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hqt, qt, (size_t)n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hf, f, sizeof hf, cudaMemcpyDeviceToHost));
    uint32_t am = 0;
    for (long i = 0; i < n; i++) if (bt__abs_bits(v[i]) > am) am = bt__abs_bits(v[i]);
    float amax = f32_of_bits(am), s_ref = mode ? scale : bt_fp8_scale_of(amax, bt_fp8_max(fmt)), r = 1.f / s_ref;
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) {
            float xv = v[i * cols + j];
            uint8_t want = bt_fp8_quantize(xv, r, fmt), got_q = hq[i * cols + j], got_t = hqt[j * rows + i];
            int nanx = xv != xv;
            if (outs & 1) bad += nanx ? !is_nan_code(got_q, fmt) : got_q != want;
            if (outs & 2) bad += nanx ? !is_nan_code(got_t, fmt) : got_t != want;
            if (bad && bad < 4 && !nanx && ((outs & 1 && got_q != want) || (outs & 2 && got_t != want)))
                fprintf(stderr, "  %s -> %s: x %.9g (bits %08x) * %.9g: 0x%02x / 0x%02x, the host 0x%02x\n", bt_dtype_name(dt), bt_dtype_name(fmt),
                        xv, bits_of(xv), r, got_q, got_t, want);
        }
    if (!(outs & 1)) for (long i = 0; i < n; i++) bad += hq[i] != 0xff;    /* untouched */
    if (!(outs & 2)) for (long i = 0; i < n; i++) bad += hqt[i] != 0xff;
    uint32_t want_acc = bt__abs_bits(preset) > am ? bt__abs_bits(preset) : am;
    /* a NaN in x makes the accumulated amax NaN on both sides, but its payload is the conversion's (f16's
       NaN widened by the device and by the host differ): NaN there compares as NaN */
    float wacc = f32_of_bits(want_acc);
    int scale_ok = bits_of(hf[1]) == bits_of(s_ref), acc_ok = bits_of(hf[3]) == want_acc || (hf[3] != hf[3] && wacc != wacc),
        amax_ok = mode || bits_of(hf[2]) == am;
    BT_CHECK(scale_ok && acc_ok && amax_ok, "%s -> %s [%ld, %ld] %s: scale %.9g (host %.9g), amax %.9g (host %.9g), accumulated %.9g (host %.9g)",
             bt_dtype_name(dt), bt_dtype_name(fmt), rows, cols, mode ? "delayed" : "current", hf[1], s_ref, hf[2], amax, hf[3], f32_of_bits(want_acc));
    CK(cudaFree(q)); CK(cudaFree(qt)); CK(cudaFree(f));
    free(hq); free(hqt); free(v);
    bt_release(x);
    return bad;
}
static void test_cast_bytes(void) {
    NEED_FP8();
    /* the scalar kernel (odd shapes) and the vector one (cols % 8 == 0, rows % 16 == 0: 64 x 64 tiles,
       partial ones at the edges) */
    const long shapes[7][2] = {{67, 45}, {256, 96}, {1, 1000}, {333, 1}, {80, 200}, {1024, 768}, {16, 8}};
    long bad = 0, runs = 0;
    for (int d = 0; d < 3; d++)
        for (int f = 0; f < 2; f++)
            for (int sh = 0; sh < 7; sh++) {
                long rows = shapes[sh][0], cols = shapes[sh][1];
                float amax_hint = 5.f;
                bad += cast_case(DTS[d], FMTS[f], rows, cols, 0, 0.f, 0, 3, amax_hint);              /* current, preset below */
                bad += cast_case(DTS[d], FMTS[f], rows, cols, 0, 0.f, 0, sh & 1 ? 1 : 2, 1e7f);      /* current, preset above */
                bad += cast_case(DTS[d], FMTS[f], rows, cols, 1, 1.f, 1, 3, 0.f);                   /* delayed, scale 1, planted */
                bad += cast_case(DTS[d], FMTS[f], rows, cols, 1, 0.0625f, 1, 3, 0.f);               /* a power of two */
                bad += cast_case(DTS[d], FMTS[f], rows, cols, 1, 0.0371f, 0, 3, 0.f);               /* any scale */
                runs += 5;
            }
    BT_CHECK(bad == 0, "%ld wrong bytes in %ld casts", bad, runs);
}
/* bt_cast to an fp8 dtype on the GPU (the generic copy kernel through bt__st, unscaled) equals the CPU's */
static void test_cast_generic(void) {
    NEED_FP8();
    long n = 4096;
    for (int f = 0; f < 2; f++) {
        float *v = cast_inputs(n, BT_F32, FMTS[f], 1.f, 1, 1);
        bt_scope_begin();
        bt_tensor *h = bt_from_data(v, bt_shape1(n), BT_F32, CPU);
        bt_tensor *qc = bt_cast(h, FMTS[f]), *qg = bt_to(bt_cast(bt_to(h, bt_cuda_device(0)), FMTS[f]), CPU);
        BT_CHECK(!memcmp(bt_data_ptr(qc), bt_data_ptr(qg), (size_t)n), "%s: bt_cast on the GPU differs from the CPU's", bt_dtype_name(FMTS[f]));
        bt_scope_end();
        free(v);
    }
}

/* =============================================================================================
   the state's update
   ============================================================================================= */
static void test_update(void) {
    NEED_FP8();
    const int hist[3] = {1, 5, 1024}, banks[3] = {1, 7, 3};   /* states updated by one launch */
    for (int k = 0; k < 3; k++) {
        int n = hist[k], ns = banks[k], nf = ns * 3 * (2 + n);
        float *h = (float *)malloc(sizeof(float) * (size_t)nf), *g = (float *)malloc(sizeof(float) * (size_t)nf);
        for (int i = 0; i < nf; i++) h[i] = (float)(fabs(rnorm()) * pow(10.0, runif() * 8 - 4));
        h[2 + n + 3 < nf ? 2 + n + 3 : 2] = NAN; h[nf - 1] = INFINITY; h[0] = 0.f;
        float *d = (float *)dev_alloc(sizeof(float) * (size_t)nf);
        CK(cudaMemcpy(d, h, sizeof(float) * (size_t)nf, cudaMemcpyHostToDevice));
        CK(cudaDeviceSynchronize());
        bt_k_fp8_update(d, n, ns, st0());
        bt_k_fp8_update(d, n, ns, st0());
        CK(cudaStreamSynchronize(st0()));
        CK(cudaMemcpy(g, d, sizeof(float) * (size_t)nf, cudaMemcpyDeviceToHost));
        for (int t = 0; t < 2; t++)
            for (int r = 0; r < 3 * ns; r++) bt__fp8_roll(h + r * (2 + n), n, bt_fp8_max(bt_fp8_format(r % 3)));
        int same = 1;
        for (int i = 0; i < nf; i++) same &= bits_of(h[i]) == bits_of(g[i]);
        BT_CHECK(same, "history %d, %d states: the GPU's rows differ from bt__fp8_roll's", n, ns);
        CK(cudaFree(d));
        free(h); free(g);
    }
}

/* =============================================================================================
   products
   ============================================================================================= */
/* the codes of n normal values (magnitudes spread over `spread` decades) quantised with their own
   amax, as a layer's casts make them (bt_fp8_quantize: test_fp8.c checks it against fr_encode) */
static uint8_t *codes(long n, bt_dtype fmt, double spread) {
    float *v = (float *)malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) v[i] = (float)(rnorm() * pow(10.0, runif() * spread));
    uint8_t *q = (uint8_t *)malloc((size_t)n);
    float r = 1.f / bt_fp8_scale_of(fr_amax(v, n), bt_fp8_max(fmt));
    for (long i = 0; i < n; i++) q[i] = bt_fp8_quantize(v[i], r, fmt);
    free(v);
    return q;
}
static double g_worst_split, g_worst_fast;
/* rmode: 0 C = the product (+ bias); 1 C = the product + R, R another tensor; 2 C += the product (R = C) */
static void product_case(bt_dtype dt, bt_dtype fa, bt_dtype fb, long M, long N, long K, int with_bias, int fast, int rmode) {
    uint8_t *A = codes(M * K, fa, fa == BT_F8E5M2 ? 3 : 1), *B = codes(N * K, fb, fb == BT_F8E5M2 ? 3 : 1);
    double *ref = (double *)malloc(sizeof(double) * (size_t)(M * N)), *S = (double *)malloc(sizeof(double) * (size_t)(M * N));
    double *bd = (double *)malloc(sizeof(double) * (size_t)N), m = 0;
    fr_gemm(A, fa, 1, B, fb, 1, NULL, M, N, K, ref, S);          /* scales that put the largest |C| near 100 (f16's range) */
    for (long i = 0; i < M * N; i++) m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
    float sc[8] = {(float)(100.0 / 0.37 / (m > 0 ? m : 1)), 0, 0, 0, 0.37f, 0, 0, 0};   /* sa at 0, sb at 16 bytes */
    float *bias = (float *)malloc(sizeof(float) * (size_t)N);
    for (long j = 0; j < N; j++) bias[j] = (float)(rnorm() * 5.0);
    round_to(dt, bias, N);
    float *rv = (float *)malloc(sizeof(float) * (size_t)(M * N));
    for (long i = 0; i < M * N; i++) rv[i] = (float)(rnorm() * 50.0);
    round_to(dt, rv, M * N);
    bt_device g = bt_cuda_device(0);
    bt_scope_begin();
    bt_tensor *a = bt_to(bt_from_data(A, bt_shape2(M, K), fa, CPU), g), *b = bt_to(bt_from_data(B, bt_shape2(N, K), fb, CPU), g);
    bt_tensor *s = bt_to(bt_from_data(sc, bt_shape1(8), BT_F32, CPU), g), *bb = bt_to(bt_cast(bt_from_data(bias, bt_shape1(N), BT_F32, CPU), dt), g);
    bt_tensor *rr = bt_to(bt_cast(bt_from_data(rv, bt_shape2(M, N), BT_F32, CPU), dt), g);
    bt_tensor *c = rmode == 2 ? bt_clone(rr) : bt_full(bt_shape2(M, N), NAN, dt, g);
    const float *sp = (const float *)bt_data_ptr(s);
    const void *R = rmode == 1 ? bt_data_ptr(rr) : rmode == 2 ? bt_data_ptr(c) : NULL;
    size_t nb = (size_t)(M * N) * bt_dtype_size(dt);
    for (int call = 0; call < 2; call++) {            /* the second call: the cached plan, pointers set again */
        if (rmode == 2 && call) CK(cudaMemcpyAsync(bt_data_ptr(c), bt_data_ptr(rr), nb, cudaMemcpyDeviceToDevice, st0()));
        bt_k_matmul_fp8(dt, bt_data_ptr(c), bt_data_ptr(a), fa, sp, bt_data_ptr(b), fb, sp + 4, with_bias ? bt_data_ptr(bb) : NULL, R, M, N,
                        K, fast, st0());
    }
    double *got = bt_test_host(c);
    bt_scope_end();
    for (long j = 0; j < N; j++) bd[j] = bias[j];
    fr_gemm(A, fa, sc[0], B, fb, sc[4], with_bias ? bd : NULL, M, N, K, ref, S);
    /* with R: cuBLASLt may round the product to C's dtype before it adds R (a bf16 or f16 C: measured
       up to 1.15x the one-rounding bound), so the bound gets one more output rounding of |product| */
    if (rmode)
        for (long i = 0; i < M * N; i++) { S[i] += fabs(ref[i]) * fr_unit(dt) / (fast ? U_FAST : U_SPLIT); ref[i] += rv[i]; }
    long wi = 0;
    double e = fr_check(got, ref, S, M * N, fast ? U_FAST : U_SPLIT, dt, &wi);
    const char *rs = rmode == 1 ? " + R" : rmode == 2 ? " into C" : "";
    BT_CHECK(e <= 1, "%s x %s -> %s [%ld, %ld, %ld]%s%s%s: error / bound %.3g at (%ld, %ld): %.9g, the reference %.9g", bt_dtype_name(fa),
             bt_dtype_name(fb), bt_dtype_name(dt), M, N, K, with_bias ? " + bias" : "", fast ? " fast" : "", rs, e, wi / N, wi % N, got[wi],
             ref[wi]);
    if (fast) { if (!(e <= g_worst_fast)) g_worst_fast = e; } else if (!(e <= g_worst_split)) g_worst_split = e;
    if (bt_test_verbose()) printf("  %s x %s -> %-5s [%4ld, %4ld, %4ld]%-7s%-5s error / bound %.3f\n", bt_dtype_name(fa), bt_dtype_name(fb),
                                  bt_dtype_name(dt), M, N, K, with_bias ? " + bias" : "", fast ? " fast" : "", e);
    free(A); free(B); free(bias); free(rv); free(got); free(ref); free(S); free(bd);
}
static void test_products(void) {
    NEED_FP8();
    const long shapes[3][3] = {{16, 16, 16}, {64, 48, 272}, {128, 256, 1024}};
    const bt_dtype pairs[3][2] = {{BT_F8E4M3, BT_F8E4M3}, {BT_F8E5M2, BT_F8E4M3}, {BT_F8E4M3, BT_F8E5M2}};
    const bt_dtype outs[3] = {BT_BF16, BT_F16, BT_F32};
    for (int sh = 0; sh < (bt_test_quick() ? 2 : 3); sh++)      /* BT_TEST_QUICK (the sanitizer's pass): not the large shape */
        for (int p = 0; p < 3; p++)
            for (int o = 0; o < 3; o++)
                for (int v = 0; v < 4; v++) {
                    if (sh == 2 && (v & 1) && o) continue;    /* the large shape: each bias case once */
                    product_case(outs[o], pairs[p][0], pairs[p][1], shapes[sh][0], shapes[sh][1], shapes[sh][2], v & 1, v >> 1, 0);
                }
    for (int o = 0; o < 3; o++)                       /* a residual R, and C accumulating (w's f32 gradient) */
        for (int rm = 1; rm <= 2; rm++)
            for (int v = 0; v < 2; v++) product_case(outs[o], BT_F8E5M2, BT_F8E4M3, 64, 48, 272, v, 0, rm);
    printf("info: FP8 products' worst error / bound: %.3f split accumulation (u_acc 2^-10), %.3f fast (2^-8)\n", g_worst_split, g_worst_fast);
}

/* =============================================================================================
   the op on the GPU against the op on the CPU
   ============================================================================================= */
static float *planted(long n, double std, bt_dtype dt, float amax) {
    float *v = (float *)malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) { double x = rnorm() * std; v[i] = (float)(fabs(x) > 0.9 * amax ? (x > 0 ? 0.9 : -0.9) * amax : x); }
    v[(long)(rbits() % (uint64_t)n)] = amax;
    round_to(dt, v, n);
    return v;
}
static bt_tensor *leaf(const float *v, bt_shape s, bt_dtype dt, bt_device dev) {
    bt_tensor *t = tensor_of(v, s, dt, dev);
    bt_set_requires_grad(t, 1);
    return t;
}
static int same_bytes(bt_tensor *a, bt_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || bt_numel(a) != bt_numel(b)) return 0;
    size_t nb = (size_t)bt_numel(a) * bt_dtype_size(a->dtype);
    unsigned char *ha = (unsigned char *)malloc(nb), *hb = (unsigned char *)malloc(nb);
    bt_to_host(a, ha, a->dtype); bt_to_host(b, hb, b->dtype);
    int same = !memcmp(ha, hb, nb);
    free(ha); free(hb);
    return same;
}
/* the scale st's next cast of tensor `role` uses, from the CPU state (current or unprimed: the tensor's own) */
static float next_scale(bt_fp8_state *st, int role, const float *v, long n) {
    if (st->opts.recipe == BT_FP8_DELAYED && (st->primed >> role & 1u)) return ((const float *)bt_data_ptr(st->buf))[role * (2 + st->opts.history) + 1];
    return bt_fp8_scale_of(fr_amax(v, n), bt_fp8_max(bt_fp8_format(role)));
}
/* fast: bt_fp8_opts.fast_accum's bits (the products they name held to the fast bound) */
static void op_case(bt_dtype dt, bt_fp8_recipe recipe, int fast) {
    const long B = 2, T = 32, K = 48, N = 80, R = B * T;
    const float AX[3] = {1.5f, 0.375f, 3.f}, AG[3] = {0.002f, 0.008f, 0.001f};
    bt_fp8_opts o = bt_fp8_default_opts();
    o.recipe = recipe; o.history = 4; o.fast_accum = fast;
    bt_fp8_state sg, sc;
    bt_device g = bt_cuda_device(0);
    bt_fp8_state_init(&sg, &o, g, NULL);
    bt_fp8_state_init(&sc, &o, CPU, NULL);
    float *wv = planted(N * K, 0.05, dt, 0.25f), *bv = planted(N, 0.3, dt, 0.5f);
    const char *rn = recipe == BT_FP8_DELAYED ? "delayed" : "current";
    for (int t = 0; t < 3; t++) {
        float *xv = planted(R * K, 0.4, dt, AX[t]), *gv = planted(R * N, 0.001, dt, AG[t]);
        float sx = next_scale(&sc, BT_FP8_X, xv, R * K), sw = next_scale(&sc, BT_FP8_W, wv, N * K), sgr = next_scale(&sc, BT_FP8_G, gv, R * N);
        double *out[2][4];
        bt_tensor *keep[2][2];
        for (int side = 0; side < 2; side++) {         /* 0 the GPU, 1 the CPU */
            bt_device dev = side ? CPU : g;
            bt_tensor *x = leaf(xv, bt_shape3(B, T, K), dt, dev), *w = leaf(wv, bt_shape2(N, K), dt, dev), *b = leaf(bv, bt_shape1(N), dt, dev);
            bt_scope_begin();
            bt_tensor *y = bt_linear_fp8(x, w, b, side ? &sc : &sg);
            keep[side][0] = bt_retain(y->grad_fn->saved[1]);   /* qx^T, qw^T */
            keep[side][1] = bt_retain(y->grad_fn->saved[2]);
            bt_tensor *gy = tensor_of(gv, bt_shape3(B, T, N), dt, dev);
            bt_backward_with(y, gy);
            bt_release(gy);
            out[side][0] = bt_test_host(y); out[side][1] = bt_test_host(x->grad); out[side][2] = bt_test_host(w->grad);
            out[side][3] = bt_test_host(b->grad);
            bt_scope_end();
            bt_release(x); bt_release(w); bt_release(b);
        }
        char what[80];
        snprintf(what, sizeof what, "%s %s%s step %d", bt_dtype_name(dt), rn, fast ? " fast y, dx" : "", t + 1);
        BT_CHECK(same_bytes(keep[0][0], keep[1][0]) && same_bytes(keep[0][1], keep[1][1]), "%s: the GPU's quantised x^T, w^T differ from the CPU's",
                 what);
        /* the float64 products of the quantised operands */
        uint8_t *qx = (uint8_t *)malloc((size_t)(R * K)), *qw = (uint8_t *)malloc((size_t)(N * K)), *qg = (uint8_t *)malloc((size_t)(R * N));
        uint8_t *qxt = (uint8_t *)malloc((size_t)(R * K)), *qwt = (uint8_t *)malloc((size_t)(N * K)), *qgt = (uint8_t *)malloc((size_t)(R * N));
        fr_quantize(xv, R * K, sx, BT_F8E4M3, qx); fr_quantize(wv, N * K, sw, BT_F8E4M3, qw); fr_quantize(gv, R * N, sgr, BT_F8E5M2, qg);
        fr_transpose(qx, R, K, qxt); fr_transpose(qw, N, K, qwt); fr_transpose(qg, R, N, qgt);
        double *bias = (double *)malloc(sizeof(double) * (size_t)N);
        for (long j = 0; j < N; j++) bias[j] = bv[j];
        long len[4] = {R * N, R * K, N * K, N}, kk[4] = {K, N, R, R};
        double *ref[4], *S[4];
        for (int i = 0; i < 4; i++) { ref[i] = (double *)calloc((size_t)len[i], sizeof(double)); S[i] = (double *)calloc((size_t)len[i], sizeof(double)); }
        fr_gemm(qx, BT_F8E4M3, sx, qw, BT_F8E4M3, sw, bias, R, N, K, ref[0], S[0]);
        fr_gemm(qg, BT_F8E5M2, sgr, qwt, BT_F8E4M3, sw, NULL, R, K, N, ref[1], S[1]);
        fr_gemm(qgt, BT_F8E5M2, sgr, qxt, BT_F8E4M3, sx, NULL, N, K, R, ref[2], S[2]);
        for (long r = 0; r < R; r++) for (long j = 0; j < N; j++) { ref[3][j] += gv[r * N + j]; S[3][j] += fabs(gv[r * N + j]); }
        const char *names[4] = {"y", "dx", "dw", "db"};
        for (int i = 0; i < 4; i++) {
            /* db: column sums of gy on both sides (f32 accumulation); the products: the GPU's bound, the CPU's */
            const double u = (i == 0 && (fast & BT_FP8_FAST_FWD)) || (i == 1 && (fast & BT_FP8_FAST_DX)) ? U_FAST : U_SPLIT;
            double eg = fr_check(out[0][i], ref[i], S[i], len[i], i == 3 ? (kk[i] + 4) * ldexp(1, -24) : u, dt, NULL);
            double ec = fr_check(out[1][i], ref[i], S[i], len[i], (kk[i] + 4) * ldexp(1, -24), dt, NULL);
            BT_CHECK(eg <= 1 && ec <= 1, "%s: %s error / bound: GPU %.3g, CPU %.3g", what, names[i], eg, ec);
        }
        /* the states after the step's casts and after the update: the same bits */
        bt_fp8_update(&sg); bt_fp8_update(&sc);
        BT_CHECK(same_bytes(sg.buf, sc.buf), "%s: the GPU's scaling state differs from the CPU's after the update", what);
        for (int i = 0; i < 4; i++) { free(ref[i]); free(S[i]); free(out[0][i]); free(out[1][i]); }
        for (int side = 0; side < 2; side++) { bt_release(keep[side][0]); bt_release(keep[side][1]); }
        free(qx); free(qw); free(qg); free(qxt); free(qwt); free(qgt); free(bias); free(xv); free(gv);
    }
    bt_fp8_state_free(&sg); bt_fp8_state_free(&sc);
    free(wv); free(bv);
}
static void test_op_gpu_vs_cpu(void) {
    NEED_FP8();
    op_case(BT_BF16, BT_FP8_CURRENT, 0);
    op_case(BT_BF16, BT_FP8_DELAYED, 0);
    op_case(BT_F32, BT_FP8_DELAYED, 0);
    op_case(BT_BF16, BT_FP8_DELAYED, BT_FP8_FAST_FWD | BT_FP8_FAST_DX);   /* the training default's accumulation */
}

/* =============================================================================================
   GELU folded into the casts (bt_k_fp8_cast_act, bt_mlp_gelu_fp8)
   ============================================================================================= */
/* dev bytes -> a new host buffer */
static void *to_host(const void *d, size_t n) {
    void *h = malloc(n ? n : 1);
    CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    return h;
}
/* The folded cast of x (hp: the pre-activation for a gradient) with act against bt_k_fp8_cast of a,
   the activation written out by the reference kernel: q, qt, the scale used, the amax (current: of
   a by bt_k_fp8_amax against bt_k_fp8_amax_act's; delayed: the accumulated) the same bits. part:
   the folded cast's column sums (DGELU), or NULL. Returns the wrong ones; *amax_acc: the folded
   side's accumulated amax. */
static long fold_vs_ref(bt_dtype dt, bt_dtype fmt, bt_fp8_act act, const void *a, const void *x, const void *hp, float *part, long rows,
                        long cols, int delayed, float *amax_acc) {
    long n = rows * cols, bad = 0;
    uint8_t *q[2] = {(uint8_t *)dev_alloc((size_t)n), (uint8_t *)dev_alloc((size_t)n)};
    uint8_t *qt[2] = {(uint8_t *)dev_alloc((size_t)n), (uint8_t *)dev_alloc((size_t)n)};
    float *f = (float *)dev_alloc(8 * sizeof(float));          /* per side: [0] scale_in, [1] scale_used, [2] amax now, [3] amax_acc */
    float init[8] = {0.0371f, -1.f, 0.f, 0.f, 0.0371f, -1.f, 0.f, 0.f};
    CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
    cudaStream_t s = st0();
    if (!delayed) {
        bt_k_fp8_amax(dt, f + 2, a, n, s);
        bt_k_fp8_amax_act(dt, act, f + 6, x, hp, rows, cols, s);
    }
    bt_k_fp8_cast(dt, fmt, q[0], qt[0], a, rows, cols, delayed ? NULL : f + 2, delayed ? f : NULL, f + 1, f + 3, s);
    bt_k_fp8_cast_act(dt, fmt, act, q[1], qt[1], part, x, hp, rows, cols, delayed ? NULL : f + 6, delayed ? f + 4 : NULL, f + 5, f + 7, s);
    CK(cudaStreamSynchronize(s));
    for (int k = 0; k < 2; k++) {
        uint8_t *h0 = (uint8_t *)to_host(k ? qt[0] : q[0], (size_t)n), *h1 = (uint8_t *)to_host(k ? qt[1] : q[1], (size_t)n);
        for (long i = 0; i < n; i++) bad += h0[i] != h1[i];
        free(h0); free(h1);
    }
    float hf[8];
    CK(cudaMemcpy(hf, f, sizeof hf, cudaMemcpyDeviceToHost));
    for (int j = 1; j < 4; j++) bad += bits_of(hf[j]) != bits_of(hf[4 + j]);
    *amax_acc = hf[7];
    CK(cudaFree(f));
    for (int k = 0; k < 2; k++) { CK(cudaFree(q[k])); CK(cudaFree(qt[k])); }
    return bad;
}
/* one folded cast against bt_k_unary(GELU) or bt_k_unary_backward(GELU) into a buffer (X: a copy of
   x), then bt_k_fp8_cast of it (fold_vs_ref); DGELU's and X's column sums per 64 rows within fp32
   summation's bound of float64 sums of that buffer. Returns the wrong bytes and values. */
static long act_case(bt_dtype dt, bt_dtype fmt, bt_fp8_act act, long rows, long cols, int delayed) {
    long n = rows * cols, bad = 0;
    size_t es = bt_dtype_size(dt);
    float *hv = (float *)malloc(sizeof(float) * (size_t)n), *gv = (float *)malloc(sizeof(float) * (size_t)n), acc;
    for (long i = 0; i < n; i++) { hv[i] = (float)(2.0 * rnorm()); gv[i] = (float)(1e-3 * rnorm()); }
    round_to(dt, hv, n); round_to(dt, gv, n);
    bt_device g = bt_cuda_device(0);
    bt_tensor *h = tensor_of(hv, bt_shape2(rows, cols), dt, g), *gr = tensor_of(gv, bt_shape2(rows, cols), dt, g);
    const void *x = act == BT_FP8_ACT_GELU ? bt_data_ptr(h) : bt_data_ptr(gr), *hp = act == BT_FP8_ACT_DGELU ? bt_data_ptr(h) : NULL;
    void *a = dev_alloc((size_t)n * es);                        /* the activation, written out: the reference's input */
    long tiles = (rows + 63) / 64;
    float *part = (float *)dev_alloc(sizeof(float) * (size_t)(tiles * cols));
    CK(cudaDeviceSynchronize());
    const int sums = act == BT_FP8_ACT_DGELU || act == BT_FP8_ACT_X;
    if (act == BT_FP8_ACT_GELU) bt_k_unary(BT_UOP_GELU, dt, a, x, n, st0());
    else if (act == BT_FP8_ACT_DGELU) bt_k_unary_backward(BT_UOP_GELU, dt, a, x, hp, n, st0());
    else CK(cudaMemcpyAsync(a, x, (size_t)n * es, cudaMemcpyDeviceToDevice, st0()));
    bad += fold_vs_ref(dt, fmt, act, a, x, hp, sums ? part : NULL, rows, cols, delayed, &acc);
    if (sums) {                                                 /* each 64 rows' column sums */
        unsigned char *ab = (unsigned char *)to_host(a, (size_t)n * es);
        float *pv = (float *)to_host(part, sizeof(float) * (size_t)(tiles * cols));
        long badsum = 0;
        for (long t = 0; t < tiles; t++)
            for (long c = 0; c < cols; c++) {
                double sum = 0, mag = 0;
                for (long i = t * 64; i < rows && i < t * 64 + 64; i++) {
                    float v;
                    if (dt == BT_F32) memcpy(&v, ab + 4 * (i * cols + c), 4);
                    else {
                        uint16_t u; memcpy(&u, ab + 2 * (i * cols + c), 2);
                        v = dt == BT_BF16 ? bt__bf16_to_f32(u) : bt__f16_to_f32(u);
                    }
                    sum += v; mag += fabs(v);
                }
                badsum += fabs(pv[t * cols + c] - sum) > 64 * 0x1p-24 * mag + 1e-30;
            }
        bad += badsum;
        free(ab); free(pv);
    }
    CK(cudaFree(a)); CK(cudaFree(part));
    bt_release(h); bt_release(gr);
    free(hv); free(gv);
    return bad;
}
static void test_cast_act(void) {
    NEED_FP8();
    const long shapes[4][2] = {{144, 72}, {16, 8}, {1024, 768}, {64, 3072}};
    long bad = 0, runs = 0;
    for (int d = 0; d < 3; d++)
        for (int f = 0; f < 2; f++)
            for (int sh = 0; sh < 4; sh++)
                for (int a = 0; a <= 2; a++)   /* X (the plain cast with its column sums), GELU, DGELU */
                    for (int del = 0; del < 2; del++) {
                        bad += act_case(DTS[d], FMTS[f], (bt_fp8_act)a, shapes[sh][0], shapes[sh][1], del);
                        runs++;
                    }
    BT_CHECK(bad == 0, "%ld wrong bytes, scales, amaxes or column sums in %ld folded casts", bad, runs);
}
/* one SwiGLU cast (SWIGLU: output [rows, F] from u = [gate | up] [rows, 2F]; DSWIGLU: output [rows, 2F]
   from dy [rows, F] and u) against bt_k_swiglu / bt_k_swiglu_backward written out, then bt_k_fp8_cast
   of it (fold_vs_ref), and an amax recorded. Returns the wrong ones. */
static long glu_case(bt_dtype dt, bt_dtype fmt, bt_fp8_act act, long rows, long F, int delayed) {
    const long cols = act == BT_FP8_ACT_SWIGLU ? F : 2 * F, n = rows * cols;
    size_t es = bt_dtype_size(dt);
    float *uv = (float *)malloc(sizeof(float) * (size_t)(2 * rows * F)), *gv = (float *)malloc(sizeof(float) * (size_t)(rows * F)), acc;
    for (long i = 0; i < 2 * rows * F; i++) uv[i] = (float)(2.0 * rnorm());
    for (long i = 0; i < rows * F; i++) gv[i] = (float)(1e-3 * rnorm());
    round_to(dt, uv, 2 * rows * F); round_to(dt, gv, rows * F);
    bt_device g = bt_cuda_device(0);
    bt_tensor *u = tensor_of(uv, bt_shape2(rows, 2 * F), dt, g), *gr = tensor_of(gv, bt_shape2(rows, F), dt, g);
    const void *x = act == BT_FP8_ACT_SWIGLU ? bt_data_ptr(u) : bt_data_ptr(gr), *hp = act == BT_FP8_ACT_DSWIGLU ? bt_data_ptr(u) : NULL;
    void *a = dev_alloc((size_t)n * es);
    CK(cudaDeviceSynchronize());
    if (act == BT_FP8_ACT_SWIGLU) bt_k_swiglu(dt, a, x, rows, F, st0());
    else bt_k_swiglu_backward(dt, a, x, hp, rows, F, st0());
    long bad = fold_vs_ref(dt, fmt, act, a, x, hp, NULL, rows, cols, delayed, &acc);
    bad += !(acc > 0);                                          /* an amax was recorded */
    CK(cudaFree(a));
    bt_release(u); bt_release(gr);
    free(uv); free(gv);
    return bad;
}
static void test_cast_swiglu(void) {
    NEED_FP8();
    const long shapes[4][2] = {{144, 72}, {16, 8}, {1024, 384}, {64, 1536}};   /* rows, F */
    long bad = 0, runs = 0;
    for (int d = 0; d < 3; d++)
        for (int f = 0; f < 2; f++)
            for (int sh = 0; sh < 4; sh++)
                for (int a = BT_FP8_ACT_SWIGLU; a <= BT_FP8_ACT_DSWIGLU; a++)
                    for (int del = 0; del < 2; del++) {
                        bad += glu_case(DTS[d], FMTS[f], (bt_fp8_act)a, shapes[sh][0], shapes[sh][1], del);
                        runs++;
                    }
    BT_CHECK(bad == 0, "%ld wrong bytes, scales or amaxes in %ld SwiGLU casts", bad, runs);
}
/* bt_mlp_swiglu_fp8 on the GPU against the composition bt_linear_add_fp8(bt_swiglu(bt_linear_fp8(..)), ..)
   (bf16, both recipes, three steps): y, the gradients of x, w13, w2 and r, and the states after each
   update the same bits */
static void test_swiglu_op(void) {
    NEED_FP8();
    bt_device g = bt_cuda_device(0);
    const long B = 2, T = 64, K = 64, F = 176, N = 64, R = B * T;
    for (int rec = 0; rec < 2; rec++) {
        bt_fp8_opts o = bt_fp8_default_opts();
        o.recipe = rec ? BT_FP8_DELAYED : BT_FP8_CURRENT; o.history = 4;
        bt_fp8_state st[2][2];
        for (int k = 0; k < 2; k++) { bt_fp8_state_init(&st[k][0], &o, g, NULL); bt_fp8_state_init(&st[k][1], &o, g, NULL); }
        const long sz[4] = {R * K, 2 * F * K, N * F, R * N};
        const double sd[4] = {1.0, 0.3, 0.1, 1.0};
        const bt_shape shp[4] = {bt_shape3(B, T, K), bt_shape2(2 * F, K), bt_shape2(N, F), bt_shape3(B, T, N)};
        bt_tensor *lv[2][4];
        for (int i = 0; i < 4; i++) {
            float *v = (float *)malloc(sizeof(float) * (size_t)sz[i]);
            for (long j = 0; j < sz[i]; j++) v[j] = (float)(sd[i] * rnorm());
            round_to(BT_BF16, v, sz[i]);
            for (int k = 0; k < 2; k++) { lv[k][i] = tensor_of(v, shp[i], BT_BF16, g); bt_set_requires_grad(lv[k][i], 1); }
            free(v);
        }
        int bad = 0;
        for (int step = 0; step < 3; step++) {
            bt_scope_begin();
            bt_tensor *up = bt_randn(bt_shape3(B, T, N), BT_F32, g, 90 + step), *y[2] = {NULL, NULL};
            for (int k = 0; k < 2; k++) {
                bt_tensor **a = lv[k];
                y[k] = k ? bt_mlp_swiglu_fp8(a[0], a[1], a[2], a[3], &st[k][0], &st[k][1])
                         : bt_linear_add_fp8(bt_swiglu(bt_linear_fp8(a[0], a[1], NULL, &st[k][0])), a[2], NULL, a[3], &st[k][1]);
                bt_backward(bt_sum(bt_mul(bt_cast(y[k], BT_F32), up), NULL, 0, 0));
            }
            bad += !same_bytes(y[0], y[1]);
            for (int i = 0; i < 4; i++) bad += !same_bytes(lv[0][i]->grad, lv[1][i]->grad);
            for (int j = 0; j < 2; j++) {
                bt_fp8_update(&st[0][j]); bt_fp8_update(&st[1][j]);
                bad += !same_bytes(st[0][j].buf, st[1][j].buf) || st[0][j].primed != st[1][j].primed;
            }
            bt_scope_end();
        }
        BT_CHECK(bad == 0, "%s: %d outputs, gradients or states differ from the composition's", rec ? "delayed" : "current", bad);
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < 4; i++) bt_release(lv[k][i]);
            bt_fp8_state_free(&st[k][0]); bt_fp8_state_free(&st[k][1]);
        }
    }
}
/* bt_mlp_gelu_fp8 on the GPU against the composition bt_linear_add_fp8(gelu(bt_linear_fp8(..)), ..)
   (bf16, both recipes, with and without GELU's recompute, three steps): y and the gradients of x,
   w1, w2, b2 and r the same bits, b1's the same column sums in another order (within 2^-7 of each
   and 2^-10 of the largest), the states the same bits after each update */
static void test_mlp_op(void) {
    NEED_FP8();
    bt_device g = bt_cuda_device(0);
    const long B = 2, T = 64, K = 64, HID = 256, N = 64, R = B * T;
    for (int rec = 0; rec < 2; rec++)
        for (int rc = 0; rc < 2; rc++) {
            bt_fp8_opts o = bt_fp8_default_opts();
            o.recipe = rec ? BT_FP8_DELAYED : BT_FP8_CURRENT; o.history = 4;
            bt_fp8_state st[2][2];
            for (int k = 0; k < 2; k++) { bt_fp8_state_init(&st[k][0], &o, g, NULL); bt_fp8_state_init(&st[k][1], &o, g, NULL); }
            const long sz[6] = {R * K, HID * K, HID, N * HID, N, R * N};
            const double sd[6] = {1.0, 0.2, 0.3, 0.1, 0.3, 1.0};
            const bt_shape shp[6] = {bt_shape3(B, T, K), bt_shape2(HID, K), bt_shape1(HID), bt_shape2(N, HID), bt_shape1(N), bt_shape3(B, T, N)};
            bt_tensor *lv[2][6];
            for (int i = 0; i < 6; i++) {
                float *v = (float *)malloc(sizeof(float) * (size_t)sz[i]);
                for (long j = 0; j < sz[i]; j++) v[j] = (float)(sd[i] * rnorm());
                round_to(BT_BF16, v, sz[i]);
                for (int k = 0; k < 2; k++) { lv[k][i] = tensor_of(v, shp[i], BT_BF16, g); bt_set_requires_grad(lv[k][i], 1); }
                free(v);
            }
            int old = bt_set_recompute(rc ? BT_RECOMPUTE_GELU : 0), bad = 0;
            double worst_b1 = 0;
            for (int step = 0; step < 3; step++) {
                bt_scope_begin();
                bt_tensor *up = bt_randn(bt_shape3(B, T, N), BT_F32, g, 70 + step), *y[2] = {NULL, NULL};
                for (int k = 0; k < 2; k++) {
                    bt_tensor **a = lv[k];
                    y[k] = k ? bt_mlp_gelu_fp8(a[0], a[1], a[2], a[3], a[4], a[5], &st[k][0], &st[k][1])
                             : bt_linear_add_fp8(bt_gelu(bt_linear_fp8(a[0], a[1], a[2], &st[k][0])), a[3], a[4], a[5], &st[k][1]);
                    bt_backward(bt_sum(bt_mul(bt_cast(y[k], BT_F32), up), NULL, 0, 0));
                }
                bad += !same_bytes(y[0], y[1]);
                for (int i = 0; i < 6; i++) if (i != 2) bad += !same_bytes(lv[0][i]->grad, lv[1][i]->grad);
                double *b0 = bt_test_host(lv[0][2]->grad), *b1 = bt_test_host(lv[1][2]->grad), top = 0;
                for (long j = 0; j < HID; j++) top = fmax(top, fabs(b0[j]));
                for (long j = 0; j < HID; j++) worst_b1 = fmax(worst_b1, fabs(b1[j] - b0[j]) / (0x1p-7 * fabs(b0[j]) + 0x1p-10 * top));
                free(b0); free(b1);
                for (int j = 0; j < 2; j++) {
                    bt_fp8_update(&st[0][j]); bt_fp8_update(&st[1][j]);
                    bad += !same_bytes(st[0][j].buf, st[1][j].buf) || st[0][j].primed != st[1][j].primed;
                }
                bt_scope_end();
            }
            bt_set_recompute(old);
            BT_CHECK(bad == 0 && worst_b1 <= 1, "%s recompute %d: %d outputs, gradients or states differ; b1's gradient %.3g of its bound",
                     rec ? "delayed" : "current", rc, bad, worst_b1);
            for (int k = 0; k < 2; k++) {
                for (int i = 0; i < 6; i++) bt_release(lv[k][i]);
                bt_fp8_state_free(&st[k][0]); bt_fp8_state_free(&st[k][1]);
            }
        }
}

/* bt_k_layernorm_fp8 / bt_k_rmsnorm_fp8 against bt_k_layernorm / bt_k_rmsnorm writing y, then
   bt_k_fp8_cast of y with the same delayed scale: q, qt, mean, rstd, the scale used and the amax
   accumulated the same bits. Shapes on the warp path (C <= 1024) and the block-row path (C 1600,
   GPT-2 1.5B's, and 2048, a Llama's), w and b given or not, rows past the grid's first pass. */
static long norm_case(bt_dtype dt, int rms, long rows, long C, int wb, int with_qt) {
    long n = rows * C, bad = 0;
    size_t es = bt_dtype_size(dt);
    float *xv = (float *)malloc(sizeof(float) * (size_t)n), *wv = (float *)malloc(sizeof(float) * (size_t)(2 * C));
    for (long i = 0; i < n; i++) xv[i] = (float)(0.5 + 2.0 * rnorm() + (i % C == 7 ? 40.0 : 0.0));   /* an outlier column */
    for (long j = 0; j < 2 * C; j++) wv[j] = (float)(j < C ? 1.0 + 0.3 * rnorm() : 0.2 * rnorm());
    round_to(dt, xv, n); round_to(dt, wv, 2 * C);
    bt_device g = bt_cuda_device(0);
    bt_tensor *x = tensor_of(xv, bt_shape2(rows, C), dt, g), *w = tensor_of(wv, bt_shape1(C), dt, g);
    bt_tensor *b = tensor_of(wv + C, bt_shape1(C), dt, g);
    const void *wp = wb ? bt_data_ptr(w) : NULL, *bp = wb && !rms ? bt_data_ptr(b) : NULL;
    void *y = dev_alloc((size_t)n * es);
    uint8_t *q[2] = {(uint8_t *)dev_alloc((size_t)n), (uint8_t *)dev_alloc((size_t)n)};
    uint8_t *qt[2] = {(uint8_t *)dev_alloc((size_t)n), (uint8_t *)dev_alloc((size_t)n)};
    float *st[2] = {(float *)dev_alloc(sizeof(float) * (size_t)(2 * rows)), (float *)dev_alloc(sizeof(float) * (size_t)(2 * rows))};
    float *f = (float *)dev_alloc(8 * sizeof(float));          /* per side: [0] scale_in, [1] scale_used, [3] amax_acc */
    float init[8] = {0.0371f, -1.f, 0.f, 0.125f, 0.0371f, -1.f, 0.f, 0.125f};
    CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
    cudaStream_t s = st0();
    const void *xp = bt_data_ptr(x);
    if (!bt_k_norm_fp8_fits(dt, rows, C, xp, wp, bp, q[1], with_qt ? qt[1] : NULL)) { bad = 1000000; goto out; }
    if (rms) {
        bt_k_rmsnorm(dt, y, st[0] + rows, xp, wp, rows, C, 1e-5f, s);
        bt_k_rmsnorm_fp8(dt, q[1], with_qt ? qt[1] : NULL, st[1] + rows, xp, wp, rows, C, 1e-5f, f + 4, f + 5, f + 7, s);
    } else {
        bt_k_layernorm(dt, y, st[0], st[0] + rows, xp, wp, bp, rows, C, 1e-5f, s);
        bt_k_layernorm_fp8(dt, q[1], with_qt ? qt[1] : NULL, st[1], st[1] + rows, xp, wp, bp, rows, C, 1e-5f, f + 4, f + 5, f + 7, s);
    }
    bt_k_fp8_cast(dt, BT_F8E4M3, q[0], with_qt ? qt[0] : NULL, y, rows, C, NULL, f, f + 1, f + 3, s);
    CK(cudaStreamSynchronize(s));
    for (int k = 0; k < 1 + with_qt; k++) {
        uint8_t *h0 = (uint8_t *)to_host(k ? qt[0] : q[0], (size_t)n), *h1 = (uint8_t *)to_host(k ? qt[1] : q[1], (size_t)n);
        for (long i = 0; i < n; i++) bad += h0[i] != h1[i];
        free(h0); free(h1);
    }
    {
        uint32_t *s0 = (uint32_t *)to_host(st[0], sizeof(float) * (size_t)(2 * rows)), *s1 = (uint32_t *)to_host(st[1], sizeof(float) * (size_t)(2 * rows));
        for (long i = rms ? rows : 0; i < 2 * rows; i++) bad += s0[i] != s1[i];
        free(s0); free(s1);
        float hf[8];
        CK(cudaMemcpy(hf, f, sizeof hf, cudaMemcpyDeviceToHost));
        bad += bits_of(hf[1]) != bits_of(hf[5]) || bits_of(hf[3]) != bits_of(hf[7]) || !(hf[7] > 0.125f);
    }
out:
    CK(cudaFree(y)); CK(cudaFree(f));
    for (int k = 0; k < 2; k++) { CK(cudaFree(q[k])); CK(cudaFree(qt[k])); CK(cudaFree(st[k])); }
    bt_release(x); bt_release(w); bt_release(b);
    free(xv); free(wv);
    return bad;
}
static void test_norm_cast(void) {
    NEED_FP8();
    const long shapes[6][2] = {{64, 64}, {272, 768}, {4160, 768}, {96, 1600}, {2080, 1600}, {48, 2048}};
    const bt_dtype dts[2] = {BT_BF16, BT_F32};
    long bad = 0;
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 6; k++)
            for (int rms = 0; rms < 2; rms++)
                for (int wb = 0; wb < 2; wb++) {
                    long e = norm_case(dts[d], rms, shapes[k][0], shapes[k][1], wb, k != 1 || wb);
                    if (e) printf("info: %s %s [%ld, %ld] w,b %d: %ld wrong\n", bt_dtype_name(dts[d]), rms ? "rmsnorm" : "layernorm",
                                  shapes[k][0], shapes[k][1], wb, e);
                    bad += e;
                }
    BT_CHECK(bad == 0, "%ld bytes, statistics, scales or amaxes differ from the norm kernel then the cast", bad);
    BT_CHECK(!bt_k_norm_fp8_fits(BT_BF16, 40, 768, NULL, NULL, NULL, NULL, NULL) && !bt_k_norm_fp8_fits(BT_BF16, 64, 8192, NULL, NULL, NULL, NULL, NULL) &&
             !bt_k_norm_fp8_fits(BT_BF16, 64, 100, NULL, NULL, NULL, NULL, NULL) && bt_k_norm_fp8_fits(BT_BF16, 64, 1600, NULL, NULL, NULL, NULL, NULL),
             "bt_k_norm_fp8_fits: rows %% 16, C <= 4096, whole vectors");
}
/* bt_layernorm_linear_fp8, bt_layernorm_mlp_gelu_fp8, bt_rmsnorm_linear_fp8 and
   bt_rmsnorm_mlp_swiglu_fp8 against the compositions they name (bf16, both recipes, three steps; x a
   node's output and, in the MLPs, also their residual, as in a GPT-2 or Llama block): y, the
   gradients of x, the norm's w (and b) and every other input, and the states after each update the
   same bits. With the delayed recipe the steps after the first take the fused kernel (the node is
   the fused op's). */
static void test_norm_ops(void) {
    NEED_FP8();
    bt_device g = bt_cuda_device(0);
    const long B = 2, T = 64, C = 128, HID = 256, R = B * T;
    const char *names[4] = {"layernorm_linear", "layernorm_mlp_gelu", "rmsnorm_linear", "rmsnorm_mlp_swiglu"};
    for (int rec = 0; rec < 2; rec++)
        for (int mode = 0; mode < 4; mode++) {
            const int mlp = mode & 1;
            bt_fp8_opts o = bt_fp8_default_opts();
            o.recipe = rec ? BT_FP8_DELAYED : BT_FP8_CURRENT; o.history = 4;
            bt_fp8_state st[2][2];
            for (int k = 0; k < 2; k++) { bt_fp8_state_init(&st[k][0], &o, g, NULL); bt_fp8_state_init(&st[k][1], &o, g, NULL); }
            /* x, nw, nb, w1 (SwiGLU: w13 [2 HID, C]), b1, w2, b2 */
            const long H1 = mode == 3 ? 2 * HID : HID;
            const long sz[7] = {R * C, C, C, H1 * C, HID, C * HID, C};
            const double sd[7] = {1.0, 0.3, 0.3, 0.2, 0.3, 0.1, 0.3};
            const bt_shape shp[7] = {bt_shape3(B, T, C), bt_shape1(C), bt_shape1(C), bt_shape2(H1, C), bt_shape1(HID), bt_shape2(C, HID), bt_shape1(C)};
            bt_tensor *lv[2][7];
            for (int i = 0; i < 7; i++) {
                float *v = (float *)malloc(sizeof(float) * (size_t)sz[i]);
                for (long j = 0; j < sz[i]; j++) v[j] = (float)((i == 1 ? 1.0 : 0.0) + sd[i] * rnorm());
                round_to(BT_BF16, v, sz[i]);
                for (int k = 0; k < 2; k++) { lv[k][i] = tensor_of(v, shp[i], BT_BF16, g); bt_set_requires_grad(lv[k][i], 1); }
                free(v);
            }
            const int used[4][7] = {{1, 1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1, 1}, {1, 1, 0, 1, 0, 0, 0}, {1, 1, 0, 1, 0, 1, 0}};
            int bad = 0, fused = 0;
            for (int step = 0; step < 3; step++) {
                bt_scope_begin();
                bt_tensor *up = bt_randn(mlp ? bt_shape3(B, T, C) : bt_shape3(B, T, H1), BT_F32, g, 40 + step), *y[2] = {NULL, NULL};
                for (int k = 0; k < 2; k++) {
                    bt_tensor **a = lv[k], *x = bt_add(a[0], a[0]);   /* x a node's output, as a residual stream is */
                    bt_fp8_state *s1 = &st[k][0], *s2 = &st[k][1];
                    if (k) y[k] = mode == 0 ? bt_layernorm_linear_fp8(x, a[1], a[2], 1e-5, a[3], a[4], s1)
                                : mode == 1 ? bt_layernorm_mlp_gelu_fp8(x, a[1], a[2], 1e-5, a[3], a[4], a[5], a[6], x, s1, s2)
                                : mode == 2 ? bt_rmsnorm_linear_fp8(x, a[1], 1e-5, a[3], NULL, s1)
                                            : bt_rmsnorm_mlp_swiglu_fp8(x, a[1], 1e-5, a[3], a[5], x, s1, s2);
                    else y[k] = mode == 0 ? bt_linear_fp8(bt_layernorm(x, a[1], a[2], 1e-5), a[3], a[4], s1)
                              : mode == 1 ? bt_mlp_gelu_fp8(bt_layernorm(x, a[1], a[2], 1e-5), a[3], a[4], a[5], a[6], x, s1, s2)
                              : mode == 2 ? bt_linear_fp8(bt_rmsnorm(x, a[1], 1e-5), a[3], NULL, s1)
                                          : bt_mlp_swiglu_fp8(bt_rmsnorm(x, a[1], 1e-5), a[3], a[5], x, s1, s2);
                    if (k) fused += y[k]->grad_fn && (!strncmp(y[k]->grad_fn->op, "layernorm_", 10) || !strncmp(y[k]->grad_fn->op, "rmsnorm_", 8));
                    bt_backward(bt_sum(bt_mul(bt_cast(y[k], BT_F32), up), NULL, 0, 0));
                }
                bad += !same_bytes(y[0], y[1]);
                for (int i = 0; i < 7; i++) if (used[mode][i]) bad += !same_bytes(lv[0][i]->grad, lv[1][i]->grad);
                for (int j = 0; j < 1 + mlp; j++) {
                    bt_fp8_update(&st[0][j]); bt_fp8_update(&st[1][j]);
                    bad += !same_bytes(st[0][j].buf, st[1][j].buf) || st[0][j].primed != st[1][j].primed;
                }
                for (int k = 0; k < 2; k++) for (int i = 0; i < 7; i++) bt_test_drop_grad(lv[k][i]);
                bt_scope_end();
            }
            BT_CHECK(bad == 0 && fused == (rec ? 2 : 0), "%s %s: %d outputs, gradients or states differ from the composition's; %d fused steps",
                     rec ? "delayed" : "current", names[mode], bad, fused);
            for (int k = 0; k < 2; k++) {
                for (int i = 0; i < 7; i++) bt_release(lv[k][i]);
                bt_fp8_state_free(&st[k][0]); bt_fp8_state_free(&st[k][1]);
            }
        }
}

/* the largest |a - b| over the largest |b| of two tensors of one shape */
static double maxnorm_rel(bt_tensor *a, bt_tensor *b) {
    double *x = bt_test_host(a), *y = bt_test_host(b), e = 0, top = 0;
    for (long i = 0; i < (long)bt_numel(a); i++) { e = fmax(e, fabs(x[i] - y[i])); top = fmax(top, fabs(y[i])); }
    free(x); free(y);
    return top > 0 ? e / top : e;
}
/* The FP8 head on the GPU (bf16): bt_linear_cross_entropy_fp8 against the composition
   bt_cross_entropy(bt_linear_fp8(x, w)) over three steps of each recipe, and 4 chunks against 1 with
   the same (delayed) scales. The logits are the same product; the fused loss kernel and the
   composition's two kernels may round a logit gradient apart, which an e5m2 code can carry (a code
   is 25% of its neighbour): the losses within 1e-4, dx and dw within 2% of their largest element. */
static void test_lxent_op(void) {
    NEED_FP8();
    bt_device g = bt_cuda_device(0);
    const long B = 2, T = 128, C = 64, VP = 512, V = 500, R = B * T;
    int32_t *tg = (int32_t *)malloc(sizeof(int32_t) * (size_t)R);
    for (long i = 0; i < R; i++) tg[i] = (int32_t)((i * 131 + 7) % V);
    float *xv = (float *)malloc(sizeof(float) * (size_t)(R * C)), *wv = (float *)malloc(sizeof(float) * (size_t)(VP * C));
    for (long i = 0; i < R * C; i++) xv[i] = (float)rnorm();
    for (long i = 0; i < VP * C; i++) wv[i] = (float)(0.3 * rnorm());
    round_to(BT_BF16, xv, R * C); round_to(BT_BF16, wv, VP * C);
    for (int rec = 0; rec < 2; rec++) {
        bt_fp8_opts o = bt_fp8_default_opts();
        o.recipe = rec ? BT_FP8_DELAYED : BT_FP8_CURRENT; o.history = 4;
        bt_fp8_state st[2];
        bt_tensor *x[2], *w[2];
        for (int k = 0; k < 2; k++) {
            bt_fp8_state_init(&st[k], &o, g, NULL);
            x[k] = tensor_of(xv, bt_shape3(B, T, C), BT_BF16, g); w[k] = tensor_of(wv, bt_shape2(VP, C), BT_BF16, g);
            bt_set_requires_grad(x[k], 1); bt_set_requires_grad(w[k], 1);
        }
        double el = 0, ex = 0, ew = 0;
        for (int step = 0; step < 3; step++) {
            bt_scope_begin();
            bt_tensor *t = bt_from_data(tg, bt_shape2(B, T), BT_I32, g), *l[2];
            l[0] = bt_cross_entropy(bt_linear_fp8(x[0], w[0], NULL, &st[0]), t, V, -1);
            l[1] = bt_linear_cross_entropy_fp8(x[1], w[1], t, V, -1, &st[1]);
            for (int k = 0; k < 2; k++) bt_backward(l[k]);
            double a = bt_item(l[0]), b = bt_item(l[1]);
            el = fmax(el, fabs(b / a - 1)); ex = fmax(ex, maxnorm_rel(x[1]->grad, x[0]->grad)); ew = fmax(ew, maxnorm_rel(w[1]->grad, w[0]->grad));
            for (int k = 0; k < 2; k++) { bt_test_drop_grad(x[k]); bt_test_drop_grad(w[k]); bt_fp8_update(&st[k]); }
            bt_scope_end();
        }
        BT_CHECK(el < 1e-4 && ex < 0.02 && ew < 0.02 && st[1].primed == 7, "%s: against the composition: loss %.3g, dx %.3g, dw %.3g",
                 rec ? "delayed" : "current", el, ex, ew);
        if (rec) {                                        /* 4 chunks of 64 rows against 1, the same primed state */
            bt_fp8_state c;
            bt_fp8_state_init(&c, &o, g, NULL);
            bt_copy_(c.buf, st[1].buf); c.primed = st[1].primed;
            size_t old = bt_linear_cross_entropy_chunk(0);
            bt_scope_begin();
            bt_tensor *t = bt_from_data(tg, bt_shape2(B, T), BT_I32, g);
            bt_tensor *l1 = bt_linear_cross_entropy_fp8(x[1], w[1], t, V, -1, &st[1]);
            bt_linear_cross_entropy_chunk((size_t)(64 * VP * 2));   /* 64 rows of bf16 logits */
            bt_tensor *l4 = bt_linear_cross_entropy_fp8(x[0], w[0], t, V, -1, &c);
            bt_linear_cross_entropy_chunk(old);
            bt_backward(l1); bt_backward(l4);
            double e4 = fabs(bt_item(l4) / bt_item(l1) - 1), x4 = maxnorm_rel(x[0]->grad, x[1]->grad), w4 = maxnorm_rel(w[0]->grad, w[1]->grad);
            BT_CHECK(e4 < 1e-4 && x4 < 0.02 && w4 < 0.02, "4 chunks against 1: loss %.3g, dx %.3g, dw %.3g", e4, x4, w4);
            bt_scope_end();
            bt_fp8_state_free(&c);
        }
        for (int k = 0; k < 2; k++) { bt_release(x[k]); bt_release(w[k]); bt_fp8_state_free(&st[k]); }
    }
    free(tg); free(xv); free(wv);
}

/* The logit gradient's FP8 bytes from the fused cross-entropy (bt_k_cross_entropy_fused_fp8) against
   bt_k_cross_entropy_fused then bt_k_fp8_cast with the same scale, on fresh logits: q, q^T, the
   losses, lse, the scale used and the accumulated amax, every bit; rows with ignore_index, padding
   past V, q or q^T alone; a vocabulary wider than a block's shared memory (the two kernels and the
   cast) and f32 (the same). bt_k_fp8_transpose against the host's transpose. Returns the wrong ones. */
static long xent_fp8_case(bt_dtype dt, bt_dtype fmt, long N, long V, long Vp, int outs) {
    long n = N * Vp, bad = 0;
    size_t es = bt_dtype_size(dt);
    float *lv = (float *)malloc(sizeof(float) * (size_t)n), gl[2048];
    int32_t *tg = (int32_t *)malloc(sizeof(int32_t) * (size_t)N);
    for (long i = 0; i < n; i++) lv[i] = (float)(3.0 * rnorm());
    round_to(dt, lv, n);
    for (long i = 0; i < N; i++) { tg[i] = i % 7 == 3 ? -1 : (int32_t)(rbits() % (uint64_t)V); gl[i] = (float)(1.0 / N * (0.5 + runif())); }
    bt_device g = bt_cuda_device(0);
    bt_tensor *lt = tensor_of(lv, bt_shape2(N, Vp), dt, g);
    void *z[2] = {dev_alloc((size_t)n * es), dev_alloc((size_t)n * es)};
    int32_t *dtg = (int32_t *)dev_alloc(sizeof(int32_t) * (size_t)N);
    float *dgl = (float *)dev_alloc(sizeof(float) * (size_t)N), *lo = (float *)dev_alloc(sizeof(float) * (size_t)(4 * N));
    float *f = (float *)dev_alloc(8 * sizeof(float));           /* per side: [0] scale_in, [1] scale_used, [2] -, [3] amax_acc */
    float init[8] = {0.00071f, -1.f, 0.f, 0.f, 0.00071f, -1.f, 0.f, 0.f};
    uint8_t *q[2] = {(uint8_t *)dev_alloc((size_t)n), (uint8_t *)dev_alloc((size_t)n)};
    uint8_t *qt[2] = {(uint8_t *)dev_alloc((size_t)n), (uint8_t *)dev_alloc((size_t)n)};
    int *dbad = (int *)dev_alloc(sizeof(int));
    CK(cudaMemset(dbad, 0, sizeof(int)));
    CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dtg, tg, sizeof(int32_t) * (size_t)N, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dgl, gl, sizeof(float) * (size_t)N, cudaMemcpyHostToDevice));
    for (int k = 0; k < 2; k++) CK(cudaMemcpy(z[k], bt_data_ptr(lt), (size_t)n * es, cudaMemcpyDeviceToDevice));
    CK(cudaDeviceSynchronize());
    cudaStream_t s = st0();
    /* outs: 1 q, 2 qt, 4 qt in the logits' own bytes (the FP8 head's dz^T in its chunk's buffer) */
    uint8_t *wq = outs & 1 ? q[1] : NULL, *wqt = outs & 4 ? (uint8_t *)z[1] : outs & 2 ? qt[1] : NULL;
    bt_k_cross_entropy_fused(dt, lo, lo + N, z[0], dtg, dgl, N, V, Vp, -1, dbad, s);
    bt_k_fp8_cast(dt, fmt, q[0], qt[0], z[0], N, Vp, NULL, f, f + 1, f + 3, s);
    bt_k_cross_entropy_fused_fp8(dt, fmt, lo + 2 * N, lo + 3 * N, z[1], wq, wqt, dtg, dgl, N, V, Vp, -1, dbad, f + 4, f + 5, f + 7, s);
    CK(cudaStreamSynchronize(s));
    for (int k = 0; k < 2; k++) {
        if (!(outs >> k & 1)) continue;
        uint8_t *h0 = (uint8_t *)to_host(k ? qt[0] : q[0], (size_t)n), *h1 = (uint8_t *)to_host(k ? wqt : q[1], (size_t)n);
        for (long i = 0; i < n; i++) bad += h0[i] != h1[i];
        free(h0); free(h1);
    }
    float *hl = (float *)to_host(lo, sizeof(float) * (size_t)(4 * N)), hf[8];
    for (long i = 0; i < 2 * N; i++) bad += bits_of(hl[i]) != bits_of(hl[2 * N + i]);
    CK(cudaMemcpy(hf, f, sizeof hf, cudaMemcpyDeviceToHost));
    bad += bits_of(hf[1]) != bits_of(hf[5]) || bits_of(hf[3]) != bits_of(hf[7]) || hf[7] <= 0.f;
    int hb;
    CK(cudaMemcpy(&hb, dbad, sizeof hb, cudaMemcpyDeviceToHost));
    bad += hb != 0;
    free(hl);
    for (int k = 0; k < 2; k++) { CK(cudaFree(z[k])); CK(cudaFree(q[k])); CK(cudaFree(qt[k])); }
    CK(cudaFree(dtg)); CK(cudaFree(dgl)); CK(cudaFree(lo)); CK(cudaFree(f)); CK(cudaFree(dbad));
    bt_release(lt);
    free(lv); free(tg);
    return bad;
}
static void test_xent_fp8(void) {
    NEED_FP8();
    struct { bt_dtype dt, fmt; long N, V, Vp; int outs; } cases[] = {
        {BT_BF16, BT_F8E5M2, 64, 500, 512, 3}, {BT_BF16, BT_F8E5M2, 48, 1000, 1024, 1}, {BT_BF16, BT_F8E5M2, 32, 1000, 1024, 2},
        {BT_F16, BT_F8E5M2, 32, 777, 784, 3}, {BT_BF16, BT_F8E4M3, 16, 4096, 4096, 3}, {BT_BF16, BT_F8E5M2, 16, 50257, 50304, 3},
        {BT_BF16, BT_F8E5M2, 16, 120000, 120064, 3}, {BT_F32, BT_F8E5M2, 32, 500, 512, 3},
        /* qt in the logits' bytes: the fused pass, the two kernels (wide rows, f32), with and without q */
        {BT_BF16, BT_F8E5M2, 64, 500, 512, 7}, {BT_BF16, BT_F8E5M2, 16, 50257, 50304, 6}, {BT_BF16, BT_F8E5M2, 16, 120000, 120064, 7},
        {BT_BF16, BT_F8E5M2, 32, 120000, 120064, 6}, {BT_F32, BT_F8E5M2, 32, 500, 512, 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long bad = xent_fp8_case(cases[i].dt, cases[i].fmt, cases[i].N, cases[i].V, cases[i].Vp, cases[i].outs);
        BT_CHECK(bad == 0, "%s -> %s, N %ld, V %ld, Vp %ld, outputs %d: %ld wrong (bytes, losses, lse, scale, amax)", bt_dtype_name(cases[i].dt),
                 bt_dtype_name(cases[i].fmt), cases[i].N, cases[i].V, cases[i].Vp, cases[i].outs, bad);
    }
    /* the byte transpose (64 x 256 tiles): one partial tile; tiles partial in rows and columns with
       more of them than blocks (a grid-stride loop) */
    const long shapes[3][2] = {{48, 80}, {208, 784}, {4176, 50320}};
    for (int k = 0; k < 3; k++) {
        const long R = shapes[k][0], C = shapes[k][1];
        uint8_t *hq = (uint8_t *)malloc((size_t)(R * C)), *d[2] = {(uint8_t *)dev_alloc((size_t)(R * C)), (uint8_t *)dev_alloc((size_t)(R * C))};
        for (long i = 0; i < R * C; i++) hq[i] = (uint8_t)rbits();
        CK(cudaMemcpy(d[0], hq, (size_t)(R * C), cudaMemcpyHostToDevice));
        bt_k_fp8_transpose(d[1], d[0], R, C, st0());
        CK(cudaStreamSynchronize(st0()));
        uint8_t *ht = (uint8_t *)to_host(d[1], (size_t)(R * C));
        long tb = 0;
        for (long i = 0; i < R; i++) for (long c = 0; c < C; c++) tb += ht[c * R + i] != hq[i * C + c];
        BT_CHECK(tb == 0, "bt_k_fp8_transpose [%ld, %ld]: %ld bytes wrong", R, C, tb);
        free(hq); free(ht); CK(cudaFree(d[0])); CK(cudaFree(d[1]));
    }
}

/* the GPU's conditions: dimensions multiples of 16, a dtype its kernels read, the state on x's device */
static void test_errors(void) {
    NEED_FP8();
    bt_device g = bt_cuda_device(0);
    bt_fp8_state sg, sc;
    bt_fp8_state_init(&sg, NULL, g, NULL);
    bt_fp8_state_init(&sc, NULL, CPU, NULL);
    bt_scope_begin();
    bt_tensor *x = bt_randn(bt_shape2(32, 40), BT_BF16, g, 1), *w = bt_randn(bt_shape2(16, 40), BT_BF16, g, 2);
    BT_EXPECT_ERROR(bt_linear_fp8(x, w, NULL, &sg), "N (16) and K (40) must be multiples of 16 (cuBLASLt's FP8 operands need 16-byte rows): K");
    bt_tensor *hx = bt_randn(bt_shape2(40, 32), BT_BF16, g, 3), *hw = bt_randn(bt_shape2(64, 32), BT_BF16, g, 4);
    bt_set_requires_grad(hx, 1);
    BT_EXPECT_ERROR(bt_linear_cross_entropy_fp8(hx, hw, bt_zeros(bt_shape1(40), BT_I32, g), 60, -1, &sg),
                    "linear_cross_entropy_fp8: 40 rows of x, C 32, Vp 64: on a GPU each must be a multiple of 16");
    BT_EXPECT_ERROR(bt_linear_fp8(bt_randn(bt_shape2(10, 32), BT_BF16, g, 3), bt_randn(bt_shape2(16, 32), BT_BF16, g, 4), NULL, &sg),
                    "the row count");
    BT_EXPECT_ERROR(bt_linear_fp8(bt_randn(bt_shape2(32, 32), BT_BF16, g, 3), bt_randn(bt_shape2(24, 32), BT_BF16, g, 4), NULL, &sg), ": N is not");
    BT_EXPECT_ERROR(bt_linear_fp8(bt_randn(bt_shape2(32, 32), BT_F64, g, 5), bt_randn(bt_shape2(16, 32), BT_F64, g, 6), NULL, &sg),
                    "on a GPU x, w and b must be bf16, f16 or f32");
    BT_EXPECT_ERROR(bt_linear_fp8(bt_randn(bt_shape2(32, 32), BT_BF16, g, 7), bt_randn(bt_shape2(16, 32), BT_BF16, g, 8), NULL, &sc),
                    "the FP8 state is on cpu");
    /* the kernel's own checks: a scale pointer off 16 bytes (cuBLASLt refuses it as "not supported") */
    float *sp = (float *)dev_alloc(8 * sizeof(float));
    void *ab = dev_alloc(16 * 16), *cb = dev_alloc(16 * 16 * 2);
    BT_EXPECT_ERROR(bt_k_matmul_fp8(BT_BF16, cb, ab, BT_F8E4M3, sp + 1, ab, BT_F8E4M3, sp + 4, NULL, NULL, 16, 16, 16, 0, st0()),
                    "bt_k_matmul_fp8: the scales sa and sb must be 16-byte aligned");
    CK(cudaFree(sp)); CK(cudaFree(ab)); CK(cudaFree(cb));
    bt_scope_end();
    bt_fp8_state_free(&sg); bt_fp8_state_free(&sc);
}

int main(void) {
    BT_RUN(test_cast_bytes);
    BT_RUN(test_cast_generic);
    BT_RUN(test_update);
    BT_RUN(test_products);
    BT_RUN(test_op_gpu_vs_cpu);
    BT_RUN(test_cast_act);
    BT_RUN(test_mlp_op);
    BT_RUN(test_cast_swiglu);
    BT_RUN(test_swiglu_op);
    BT_RUN(test_norm_cast);
    BT_RUN(test_norm_ops);
    BT_RUN(test_lxent_op);
    BT_RUN(test_xent_fp8);
    BT_RUN(test_errors);
    return bt_test_summary("test_fp8_gpu");
}
