/* test_kernels_gpu.cu - every function of bt_kernels.cuh against plain CPU loops in double.

   Inputs are fresh random numbers (never zeros; a new seed for every test) at sizes that are not
   multiples of any tile or vector width; outputs are poisoned (all bits 1: NaN in every float
   dtype) before each call, so an element the kernel forgot to write fails. The error of an output
   is ||out - ref|| / ||ref|| over all its elements, the reference computed in double from the
   very inputs the GPU saw (rounded to the dtype first).
   Tolerances and why:
     f32  1e-5  fp32 math: rounding of sums of tens to thousands of terms stays near 1e-7..1e-6
     tf32 5e-3  10-bit mantissa operands: about 5e-4 per product, K of them in a dot product
     bf16 2e-2  8-bit mantissa: each rounding (output, an intermediate like P in attention) costs
                up to 2^-9 = 2e-3 relative, and a few stack up
     f16  5e-3  11-bit mantissa, the same reasoning at 2^-11
     f64  1e-12
   BT_TEST_QUICK=1 shrinks the larger sizes (for the compute-sanitizer pass); BT_TEST_VERBOSE=1 lists
   every check with its error, not only the failures; BT_TEST_ONLY=attention runs only the tests
   whose name holds the word; BT_TEST_PROGRESS=1 names each attention case before it runs. Without
   a GPU every test reports skipped. */
#include "bt_kernels.cuh"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "bt_test.h"
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

static int g_quick, g_progress, g_gpu = -1;
static int have_gpu(void) {
    if (g_gpu < 0) g_gpu = bt_k_device_count() > 0;
    return g_gpu;
}
#define NEED_GPU() do { if (!have_gpu()) { BT_SKIP("no CUDA device"); return; } } while (0)
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(2); } } while (0)
static cudaStream_t st(void) { return bt_k_current_stream(0); }

static size_t tsz(bt_dtype dt) { return bt_dtype_size(dt); }
static const char *tname(bt_dtype dt) { return bt_dtype_name(dt); }
static double tol_of(bt_dtype dt) { return bt_test_tol(dt, 0); }   /* tests/bt_test.h's table; float dtypes only */

/* ---- host random numbers (xorshift64), values kept away from zero ---- */
static uint64_t g_rs = 1;
static void seed(uint64_t s) { g_rs = (s + 1) * 0x9E3779B97F4A7C15ull; if (!g_rs) g_rs = 1; }
static double rnd(void) {
    g_rs ^= g_rs << 13; g_rs ^= g_rs >> 7; g_rs ^= g_rs << 17;
    return (double)(g_rs >> 11) * (1.0 / 9007199254740992.0);
}
static double urand(double lo, double hi) {
    double v;
    do v = lo + (hi - lo) * rnd(); while (fabs(v) < 1e-3);
    return v;
}
static double *rvec(int64_t n, double lo, double hi) {
    double *h = (double *)malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) h[i] = urand(lo, hi);
    return h;
}
static double *zvec(int64_t n) { return (double *)calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

/* round x to dtype dt (and back to double) */
static double q(bt_dtype dt, double x) {
    switch (dt) {
    case BT_F32: return (double)(float)x;
    case BT_BF16: return (double)__bfloat162float(__float2bfloat16_rn((float)x));
    case BT_F16: return (double)__half2float(__float2half_rn((float)x));
    case BT_I32: return (double)(int32_t)x;
    default: return x;
    }
}
static void quant(bt_dtype dt, double *h, int64_t n) { for (int64_t i = 0; i < n; i++) h[i] = q(dt, h[i]); }

/* ---- device buffers: cudaMalloc'd by the test (the kernels' scratch comes from bt_alloc) ---- */
static void *dmalloc(size_t bytes) {
    void *p;
    CK(cudaMalloc(&p, bytes ? bytes : 1));
    CK(cudaMemsetAsync(p, 0xff, bytes, st()));   /* poison */
    return p;
}
static void poison(void *p, size_t bytes) { CK(cudaMemsetAsync(p, 0xff, bytes, st())); }
static void dfree(void *p) { CK(cudaStreamSynchronize(st())); CK(cudaFree(p)); }
static void to_dt(bt_dtype dt, const double *h, void *buf, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case BT_F32: ((float *)buf)[i] = (float)h[i]; break;
        case BT_F64: ((double *)buf)[i] = h[i]; break;
        case BT_BF16: ((__nv_bfloat16 *)buf)[i] = __float2bfloat16_rn((float)h[i]); break;
        case BT_F16: ((__half *)buf)[i] = __float2half_rn((float)h[i]); break;
        case BT_I32: ((int32_t *)buf)[i] = (int32_t)h[i]; break;
        default: break;
        }
    }
}
static void from_dt(bt_dtype dt, const void *buf, double *h, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case BT_F32: h[i] = ((const float *)buf)[i]; break;
        case BT_F64: h[i] = ((const double *)buf)[i]; break;
        case BT_BF16: h[i] = __bfloat162float(((const __nv_bfloat16 *)buf)[i]); break;
        case BT_F16: h[i] = __half2float(((const __half *)buf)[i]); break;
        case BT_I32: h[i] = ((const int32_t *)buf)[i]; break;
        default: h[i] = 0; break;
        }
    }
}
/* upload h (rounded to dt in place, so the reference sees what the GPU sees) */
static void *up(bt_dtype dt, double *h, int64_t n) {
    quant(dt, h, n);
    void *buf = malloc((size_t)(n > 0 ? n : 1) * tsz(dt)), *d = dmalloc((size_t)n * tsz(dt));
    to_dt(dt, h, buf, n);
    CK(cudaMemcpyAsync(d, buf, (size_t)n * tsz(dt), cudaMemcpyHostToDevice, st()));
    CK(cudaStreamSynchronize(st()));
    free(buf);
    return d;
}
static void *up_i32(const int32_t *h, int64_t n) {
    void *d = dmalloc((size_t)n * 4);
    CK(cudaMemcpyAsync(d, h, (size_t)n * 4, cudaMemcpyHostToDevice, st()));
    CK(cudaStreamSynchronize(st()));
    return d;
}
static void down(bt_dtype dt, const void *d, double *h, int64_t n) {
    void *buf = malloc((size_t)(n > 0 ? n : 1) * tsz(dt));
    CK(cudaStreamSynchronize(st()));
    CK(cudaMemcpyAsync(buf, d, (size_t)n * tsz(dt), cudaMemcpyDeviceToHost, st()));
    CK(cudaStreamSynchronize(st()));
    from_dt(dt, buf, h, n);
    free(buf);
}
static int dget_int(const int *d) {
    int v = 0;
    CK(cudaStreamSynchronize(st()));
    CK(cudaMemcpyAsync(&v, d, sizeof v, cudaMemcpyDeviceToHost, st()));
    CK(cudaStreamSynchronize(st()));
    return v;
}

/* ---- the results table printed at the end ---- */
typedef struct { char what[128]; double err, tol; int ok; } bt_rec;
static bt_rec g_recs[2048];
static int g_nrec;
static void check_err(const char *what, double err, double tol) {
    int ok = err <= tol;
    if (g_nrec < 2048) {
        bt_rec *r = &g_recs[g_nrec++];
        snprintf(r->what, sizeof r->what, "%s", what); r->err = err; r->tol = tol; r->ok = ok;
    }
    BT_CHECK(ok, "%s: rel err %.3g > tol %.3g", what, err, tol);
}
/* rel err of the device buffer d (dtype dt, n elements) against ref */
static double cmp(bt_dtype dt, const void *d, const double *ref, int64_t n) {
    double *h = zvec(n);
    down(dt, d, h, n);
    double e = bt_test_relerr(h, ref, n);
    for (int64_t i = 0; i < n; i++) if (h[i] != h[i]) e = INFINITY;   /* NaN: unwritten */
    free(h);
    return e;
}
static void expect(const char *what, bt_dtype dt, const void *d, const double *ref, int64_t n, double tol) {
    check_err(what, cmp(dt, d, ref, n), tol);
}

/* ================================================================================================ */
static void test_context(void) {
    NEED_GPU();
    BT_CHECK(bt_k_device_count() >= 1, "device count %d", bt_k_device_count());
    bt_k_init(0); bt_k_init(0);
    cudaStream_t s0 = bt_k_current_stream(0);
    BT_CHECK(s0 != NULL, "the device stream is the legacy default stream");
    cudaStream_t mine, other;
    CK(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    bt_k_push_stream(0, mine);
    BT_CHECK(bt_k_current_stream(0) == mine, "push_stream");
    bt_k_push_stream(0, other);
    BT_CHECK(bt_k_current_stream(0) == other, "push_stream nests");
    bt_k_pop_stream(0);
    BT_CHECK(bt_k_current_stream(0) == mine, "pop_stream returns to the one below");
    bt_k_pop_stream(0);
    BT_CHECK(bt_k_current_stream(0) == s0, "the last pop restores the device's own stream");
    BT_EXPECT_ERROR(bt_k_pop_stream(0), "no stream pushed");
    bt_k_forget_stream(0, mine); bt_k_forget_stream(0, other);
    CK(cudaStreamDestroy(mine)); CK(cudaStreamDestroy(other));
    bt_k_synchronize(0);
    BT_EXPECT_ERROR(bt_k_init(BT_MAX_GPUS + 3), "no CUDA device");
    BT_EXPECT_ERROR(bt_k_current_stream(bt_k_device_count()), "no CUDA device");
    BT_EXPECT_ERROR(bt_k_unary(BT_UOP_EXP, BT_I32, NULL, NULL, 4, st()), "dtype i32");
    BT_EXPECT_ERROR(bt_k_softmax(BT_F64, NULL, NULL, 2, 2, 0, st()), "bt_k_softmax");
}

static void test_cast_copy_fill(void) {
    NEED_GPU();
    seed(11);
    int64_t n = 1003;
    double *h = rvec(n, -3, 3);
    void *d32 = up(BT_F32, h, n);
    bt_dtype dts[] = {BT_F64, BT_BF16, BT_F16, BT_I32};
    char what[64];
    for (int k = 0; k < 4; k++) {
        bt_dtype dt = dts[k];
        void *o = dmalloc((size_t)n * tsz(dt));
        double *ref = zvec(n);
        for (int64_t i = 0; i < n; i++) ref[i] = q(dt, h[i]);
        bt_k_cast(dt, o, BT_F32, d32, n, st());
        snprintf(what, sizeof what, "cast f32->%s", tname(dt)); expect(what, dt, o, ref, n, 0);
        if (dt != BT_I32) {   /* and back: exact */
            void *b = dmalloc((size_t)n * 4);
            bt_k_cast(BT_F32, b, dt, o, n, st());
            snprintf(what, sizeof what, "cast %s->f32", tname(dt)); expect(what, BT_F32, b, ref, n, 0);
            dfree(b);
        }
        free(ref); dfree(o);
    }
    /* copy_strided: a transposed view [77, 37] of a [37, 77] f32 matrix into bf16 */
    {
        int64_t R = 37, C = 77, shape[2] = {C, R}, strides[2] = {1, C};
        double *src = rvec(R * C, -2, 2), *ref = zvec(R * C);
        void *ds = up(BT_F32, src, R * C), *o = dmalloc((size_t)(R * C) * 2);
        for (int64_t i = 0; i < C; i++) for (int64_t j = 0; j < R; j++) ref[i * R + j] = q(BT_BF16, src[j * C + i]);
        bt_k_copy_strided(BT_BF16, o, BT_F32, ds, 2, shape, strides, st());
        expect("copy_strided transpose f32->bf16", BT_BF16, o, ref, R * C, 0);
        dfree(o);
        /* broadcast [3, 37, 77] with stride 0 on the first dim, f32 -> f32 */
        int64_t shape3[3] = {3, R, C}, str3[3] = {0, C, 1};
        double *ref3 = zvec(3 * R * C);
        for (int64_t a = 0; a < 3; a++) for (int64_t i = 0; i < R * C; i++) ref3[a * R * C + i] = src[i];
        o = dmalloc((size_t)(3 * R * C) * 4);
        bt_k_copy_strided(BT_F32, o, BT_F32, ds, 3, shape3, str3, st());
        expect("copy_strided broadcast f32", BT_F32, o, ref3, 3 * R * C, 0);
        dfree(o);
        /* an offset window [30, 70] of the rows, f32 -> f64 */
        int64_t shw[2] = {30, 70}, stw[2] = {C, 1};
        double *refw = zvec(30 * 70);
        for (int64_t i = 0; i < 30; i++) for (int64_t j = 0; j < 70; j++) refw[i * 70 + j] = src[5 + i * C + j];
        o = dmalloc(30 * 70 * 8);
        bt_k_copy_strided(BT_F64, o, BT_F32, (float *)ds + 5, 2, shw, stw, st());
        expect("copy_strided window f32->f64", BT_F64, o, refw, 30 * 70, 0);
        dfree(o); dfree(ds);
        free(src); free(ref); free(ref3); free(refw);
    }
    /* fill */
    bt_dtype fdt[] = {BT_F32, BT_F64, BT_BF16, BT_F16, BT_I32};
    for (int k = 0; k < 5; k++) {
        int64_t m = 1001;
        void *o = dmalloc((size_t)m * tsz(fdt[k]));
        double *ref = zvec(m);
        for (int64_t i = 0; i < m; i++) ref[i] = q(fdt[k], -1.25);
        bt_k_fill(fdt[k], o, -1.25, m, st());
        snprintf(what, sizeof what, "fill %s", tname(fdt[k])); expect(what, fdt[k], o, ref, m, 0);
        bt_k_fill(fdt[k], o, 0.0, m, st());
        double *h2 = zvec(m);
        down(fdt[k], o, h2, m);
        int nz = 0;
        for (int64_t i = 0; i < m; i++) nz += h2[i] != 0.0;
        BT_CHECK(nz == 0, "fill 0 %s: %d nonzero", tname(fdt[k]), nz);
        free(ref); free(h2); dfree(o);
    }
    free(h); dfree(d32);
}

static void test_random(void) {
    NEED_GPU();
    int64_t n = 4099;
    uint64_t sd = 0xC0FFEE1234ull, off = 7;
    bt_dtype dts[] = {BT_F32, BT_F64, BT_BF16};
    for (int k = 0; k < 3; k++) {
        bt_dtype dt = dts[k];
        void *o = dmalloc((size_t)n * tsz(dt));
        double *h = zvec(n);
        bt_k_uniform(dt, o, n, sd, off, -1.0, 2.0, st());
        down(dt, o, h, n);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            double r = q(dt, -1.0 + 3.0 * bt_philox_uniform(sd, off + (uint64_t)i));
            bad += h[i] != r;
        }
        BT_CHECK(bad == 0, "uniform %s: %d of %lld differ from the CPU", tname(dt), bad, (long long)n);
        check_err(dt == BT_F32 ? "uniform f32 (exact)" : dt == BT_F64 ? "uniform f64 (exact)" : "uniform bf16 (exact)",
                  (double)bad, 0);
        poison(o, (size_t)n * tsz(dt));
        bt_k_normal(dt, o, n, sd + 1, off, 0.5, 2.0, st());
        down(dt, o, h, n);
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double r = q(dt, 0.5 + 2.0 * bt_philox_normal(sd + 1, off + (uint64_t)i));
            double e = fabs(h[i] - r) / (fabs(r) + 1e-30);
            if (!(e <= worst)) worst = e;   /* NaN sticks */
        }
        check_err(dt == BT_F32 ? "normal f32 (max rel)" : dt == BT_F64 ? "normal f64 (max rel)" : "normal bf16 (max rel)",
                  worst, 1e-6);
        free(h); dfree(o);
    }
}

static double uop_ref(int op, double x) {
    switch (op) {
    case BT_UOP_NEG: return -x;
    case BT_UOP_EXP: return exp(x);
    case BT_UOP_LOG: return log(x);
    case BT_UOP_SQRT: return sqrt(x);
    case BT_UOP_TANH: return tanh(x);
    case BT_UOP_RELU: return x > 0 ? x : 0;
    case BT_UOP_GELU: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case BT_UOP_SQUARE: return x * x;
    case BT_UOP_RECIP: return 1 / x;
    case BT_UOP_RSQRT: return 1 / sqrt(x);
    case BT_UOP_SIGMOID: return 1 / (1 + exp(-x));
    case BT_UOP_SILU: return x / (1 + exp(-x));
    }
    return NAN;
}
static double uop_dref(int op, double x) {
    switch (op) {
    case BT_UOP_NEG: return -1;
    case BT_UOP_EXP: return exp(x);
    case BT_UOP_LOG: return 1 / x;
    case BT_UOP_SQRT: return 0.5 / sqrt(x);
    case BT_UOP_TANH: return 1 - tanh(x) * tanh(x);
    case BT_UOP_RELU: return x > 0 ? 1 : 0;
    case BT_UOP_GELU: {
        double k = sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
    }
    case BT_UOP_SQUARE: return 2 * x;
    case BT_UOP_RECIP: return -1 / (x * x);
    case BT_UOP_RSQRT: return -0.5 / (x * sqrt(x));
    case BT_UOP_SIGMOID: { double sg = 1 / (1 + exp(-x)); return sg * (1 - sg); }
    case BT_UOP_SILU: { double sg = 1 / (1 + exp(-x)); return sg + x * sg * (1 - sg); }
    }
    return NAN;
}
static void test_unary(void) {
    NEED_GPU();
    bt_dtype dts[] = {BT_F32, BT_F64, BT_BF16, BT_F16};
    int64_t n = 1003;
    char what[64];
    for (int k = 0; k < 4; k++) {
        bt_dtype dt = dts[k];
        for (int op = 0; op < BT_NUOPS; op++) {
            seed(100 + k * 16 + op);
            int pos = op == BT_UOP_LOG || op == BT_UOP_SQRT || op == BT_UOP_RSQRT || op == BT_UOP_RECIP;
            double *x = rvec(n, pos ? 0.2 : -3, 3), *g = rvec(n, -1, 1), *ref = zvec(n), *gref = zvec(n);
            void *dx = up(dt, x, n), *dg = up(dt, g, n), *o = dmalloc((size_t)n * tsz(dt)), *gx = dmalloc((size_t)n * tsz(dt));
            for (int64_t i = 0; i < n; i++) { ref[i] = uop_ref(op, x[i]); gref[i] = g[i] * uop_dref(op, x[i]); }
            bt_k_unary((bt_unary_op)op, dt, o, dx, n, st());
            snprintf(what, sizeof what, "unary %s %s", bt_unary_op_name((bt_unary_op)op), tname(dt)); expect(what, dt, o, ref, n, tol_of(dt));
            bt_k_unary_backward((bt_unary_op)op, dt, gx, dg, dx, n, st());
            snprintf(what, sizeof what, "unary_bwd %s %s", bt_unary_op_name((bt_unary_op)op), tname(dt)); expect(what, dt, gx, gref, n, tol_of(dt));
            if (op == BT_UOP_GELU) {
                /* unaligned (scalar path) and in place: gx aliases gout */
                poison(o, (size_t)n * tsz(dt));
                bt_k_unary((bt_unary_op)op, dt, (char *)o + tsz(dt), (const char *)dx + tsz(dt), n - 1, st());
                snprintf(what, sizeof what, "unary gelu %s unaligned", tname(dt)); expect(what, dt, (char *)o + tsz(dt), ref + 1, n - 1, tol_of(dt));
                bt_k_unary_backward((bt_unary_op)op, dt, dg, dg, dx, n, st());
                snprintf(what, sizeof what, "unary_bwd gelu %s in place", tname(dt)); expect(what, dt, dg, gref, n, tol_of(dt));
            }
            free(x); free(g); free(ref); free(gref); dfree(dx); dfree(dg); dfree(o); dfree(gx);
        }
        /* affine */
        seed(200 + k);
        double *x = rvec(n, -3, 3), *ref = zvec(n);
        void *dx = up(dt, x, n), *o = dmalloc((size_t)n * tsz(dt));
        for (int64_t i = 0; i < n; i++) ref[i] = 0.7 * x[i] - 1.3;
        bt_k_affine(dt, o, dx, 0.7, -1.3, n, st());
        snprintf(what, sizeof what, "affine %s", tname(dt)); expect(what, dt, o, ref, n, tol_of(dt));
        free(x); free(ref); dfree(dx); dfree(o);
    }
}

static double bop_ref(int op, double a, double b) {
    switch (op) {
    case BT_BOP_ADD: return a + b;
    case BT_BOP_SUB: return a - b;
    case BT_BOP_MUL: return a * b;
    default: return a / b;
    }
}
/* one binary case: a, b with their own storage sizes and element strides over `shape` */
static void binary_case(const char *label, bt_dtype dt, int op, int nd, const int64_t *shape, int64_t na, const int64_t *sa,
                        int64_t nb, const int64_t *sb, int inplace) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    double *a = rvec(na, -2, 2), *b = rvec(nb, -2, 2), *ref = zvec(n);
    if (op == BT_BOP_DIV) for (int64_t i = 0; i < nb; i++) b[i] = (b[i] < 0 ? -0.5 : 0.5) + 0.75 * b[i];
    void *da = up(dt, a, na), *db = up(dt, b, nb), *o = inplace ? da : dmalloc((size_t)n * tsz(dt));
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, oa = 0, ob = 0;
        for (int d = nd - 1; d >= 0; d--) { int64_t c = rem % shape[d]; rem /= shape[d]; oa += c * sa[d]; ob += c * sb[d]; }
        ref[i] = bop_ref(op, a[oa], b[ob]);
    }
    bt_k_binary((bt_binary_op)op, dt, o, da, sa, db, sb, nd, shape, st());
    static const char *on[] = {"add", "sub", "mul", "div"};
    char what[64];
    snprintf(what, sizeof what, "binary %s %s %s", on[op], label, tname(dt));
    expect(what, dt, o, ref, n, tol_of(dt));
    free(a); free(b); free(ref); dfree(da); dfree(db);
    if (!inplace) dfree(o);
}
static void test_binary(void) {
    NEED_GPU();
    bt_dtype dts[] = {BT_F32, BT_F64, BT_BF16, BT_F16};
    for (int k = 0; k < 4; k++)
        for (int op = 0; op < BT_NBOPS; op++) {
            seed(300 + k * 8 + op);
            bt_dtype dt = dts[k];
            int64_t sh[3] = {3, 37, 77}, cs[3] = {37 * 77, 77, 1};
            binary_case("same", dt, op, 3, sh, 3 * 37 * 77, cs, 3 * 37 * 77, cs, 0);
            int64_t bs[3] = {0, 0, 1};
            binary_case("bcast[77]", dt, op, 3, sh, 3 * 37 * 77, cs, 77, bs, 0);
            int64_t as2[3] = {77, 0, 1}, bs2[3] = {37, 1, 0};
            binary_case("[3,1,77]x[3,37,1]", dt, op, 3, sh, 3 * 77, as2, 3 * 37, bs2, 0);
            int64_t sh2[2] = {37, 77}, at[2] = {1, 37}, bc2[2] = {77, 1};
            binary_case("transposed a", dt, op, 2, sh2, 37 * 77, at, 37 * 77, bc2, 0);
            binary_case("in place", dt, op, 3, sh, 3 * 37 * 77, cs, 77, bs, 1);
            /* one side repeated over the outer dim in whole 16-byte vectors (the broadcast kernel):
               270 x 16384 elements are more vectors than the grid has threads, so its loop wraps */
            int64_t sh3[3] = {270, 128, 128}, cs3[3] = {128 * 128, 128, 1}, rep[3] = {0, 128, 1};
            binary_case("[270,128,128]x[128,128]", dt, op, 3, sh3, 270 * 16384, cs3, 16384, rep, 0);
            binary_case("[128,128]x[270,128,128]", dt, op, 3, sh3, 16384, rep, 270 * 16384, cs3, 0);
            /* one side a single element (the scalar kernel): 8547 elements leave a tail after the
               16-byte vectors; 270 x 16384 wrap the grid */
            int64_t z3[3] = {0, 0, 0};
            binary_case("x scalar", dt, op, 3, sh, 3 * 37 * 77, cs, 1, z3, 0);
            binary_case("scalar x", dt, op, 3, sh, 1, z3, 3 * 37 * 77, cs, 0);
            binary_case("x scalar in place", dt, op, 3, sh, 3 * 37 * 77, cs, 1, z3, 1);
            binary_case("[270,128,128]x scalar", dt, op, 3, sh3, 270 * 16384, cs3, 1, z3, 0);
        }
}

static void test_reduce(void) {
    NEED_GPU();
    int64_t cases[][3] = {{3, 67, 77}, {37, 1001, 1}, {1, 200003, 1}, {2, 5003, 3}, {5, 1, 7}, {1, 777, 1}};
    if (g_quick) cases[2][1] = 20003;
    bt_dtype dts[] = {BT_F32, BT_F64, BT_BF16, BT_F16};
    char what[96];
    for (int c = 0; c < 6; c++)
        for (int k = 0; k < 4; k++) {
            bt_dtype dt = dts[k];
            int64_t O = cases[c][0], R = cases[c][1], I = cases[c][2], n = O * R * I, no = O * I;
            seed(400 + c * 8 + k);
            double *x = rvec(n, -2, 2);
            void *dx = up(dt, x, n), *o = dmalloc((size_t)no * tsz(dt));
            int32_t *am = (int32_t *)dmalloc((size_t)no * 4);
            double *rs = zvec(no), *rm = zvec(no), *rx = zvec(no);
            for (int64_t a = 0; a < O; a++)
                for (int64_t i = 0; i < I; i++) {
                    double s = 0, m = -INFINITY;
                    for (int64_t j = 0; j < R; j++) { double v = x[(a * R + j) * I + i]; s += v; if (v > m) m = v; }
                    rs[a * I + i] = s; rm[a * I + i] = s / R; rx[a * I + i] = m;
                }
            double tol = dt == BT_F32 ? 1e-5 : tol_of(dt);
            bt_k_reduce(BT_REDUCE_SUM, dt, o, NULL, dx, O, R, I, st());
            snprintf(what, sizeof what, "reduce sum [%lld,%lld,%lld] %s", (long long)O, (long long)R, (long long)I, tname(dt));
            expect(what, dt, o, rs, no, tol);
            poison(o, (size_t)no * tsz(dt));
            bt_k_reduce(BT_REDUCE_MEAN, dt, o, NULL, dx, O, R, I, st());
            snprintf(what, sizeof what, "reduce mean [%lld,%lld,%lld] %s", (long long)O, (long long)R, (long long)I, tname(dt));
            expect(what, dt, o, rm, no, tol);
            poison(o, (size_t)no * tsz(dt));
            bt_k_reduce(BT_REDUCE_MAX, dt, o, am, dx, O, R, I, st());
            snprintf(what, sizeof what, "reduce max [%lld,%lld,%lld] %s", (long long)O, (long long)R, (long long)I, tname(dt));
            expect(what, dt, o, rx, no, 0);
            double *ha = zvec(no);
            down(BT_I32, am, ha, no);
            int badi = 0;
            for (int64_t a = 0; a < O; a++)
                for (int64_t i = 0; i < I; i++) {
                    int64_t j = (int64_t)ha[a * I + i];
                    if (j < 0 || j >= R || x[(a * R + j) * I + i] != rx[a * I + i]) { badi++; continue; }
                    for (int64_t jj = 0; jj < j; jj++) if (x[(a * R + jj) * I + i] == rx[a * I + i]) { badi++; break; }
                }
            BT_CHECK(badi == 0, "%s: %d wrong argmax (not the first maximum)", what, badi);
            free(x); free(rs); free(rm); free(rx); free(ha); dfree(dx); dfree(o); dfree(am);
        }
}

/* acc[j] += column sums of [rows, cols]: the fast path (tall, 16-byte rows; splits of the rows,
   ragged ones included) and the general one (cols not a vector multiple, few rows) */
static void test_sum_rows_acc(void) {
    NEED_GPU();
    int64_t cases[][2] = {{1000, 776}, {131, 3072}, {5003, 24}, {64, 8}, {70, 13}, {40, 768}, {20000, 40}};
    if (g_quick) cases[6][0] = 2000;
    bt_dtype dts[] = {BT_F32, BT_BF16, BT_F16};
    char what[96];
    for (int c = 0; c < 7; c++)
        for (int k = 0; k < 3; k++) {
            bt_dtype dt = dts[k];
            int64_t R = cases[c][0], C = cases[c][1], n = R * C;
            seed(450 + c * 8 + k);
            double *x = rvec(n, -2, 2), *a0 = rvec(C, -1, 1), *ref = zvec(C);
            void *dx = up(dt, x, n), *da = up(BT_F32, a0, C);
            for (int64_t j = 0; j < C; j++) {
                double s = a0[j];
                for (int64_t i = 0; i < R; i++) s += x[i * C + j];
                ref[j] = s;
            }
            bt_k_sum_rows_acc(dt, (float *)da, dx, R, C, st());
            snprintf(what, sizeof what, "reduce sum_rows_acc [%lld,%lld] %s", (long long)R, (long long)C, tname(dt));
            expect(what, BT_F32, da, ref, C, 1e-5);
            free(x); free(a0); free(ref); dfree(dx); dfree(da);
        }
}

static void test_sumsq(void) {
    NEED_GPU();
    int64_t ns[] = {g_quick ? 100003 : 1000003, 5};
    bt_dtype dts[] = {BT_F32, BT_F64, BT_BF16, BT_F16};
    char what[64];
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 4; k++) {
            int64_t n = ns[c];
            seed(500 + c * 8 + k);
            double *x = rvec(n, -2, 2), ss = 0;
            void *dx = up(dts[k], x, n);
            for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
            float *o = (float *)dmalloc(4);
            bt_k_sumsq(dts[k], o, dx, n, 0, st());
            double r1 = ss, r2 = 2 * ss;
            snprintf(what, sizeof what, "sumsq n=%lld %s", (long long)n, tname(dts[k])); expect(what, BT_F32, o, &r1, 1, 1e-5);
            bt_k_sumsq(dts[k], o, dx, n, 1, st());
            snprintf(what, sizeof what, "sumsq n=%lld %s accumulate", (long long)n, tname(dts[k])); expect(what, BT_F32, o, &r2, 1, 1e-5);
            free(x); dfree(dx); dfree(o);
        }
}

static void test_softmax(void) {
    NEED_GPU();
    /* 77, 1500: the general kernels; 768, 1024, 264, 40: the warp-per-row register path (1..8 vectors per lane) */
    int64_t rows = 37, colss[] = {77, 1500, 768, 1024, 264, 40};
    bt_dtype dts[] = {BT_F32, BT_BF16, BT_F16};
    char what[80];
    for (int c = 0; c < 6; c++)
        for (int k = 0; k < 3; k++)
            for (int lg = 0; lg < 2; lg++) {
                bt_dtype dt = dts[k];
                int64_t C = colss[c], n = rows * C;
                seed(600 + c * 16 + k * 2 + lg);
                double *x = rvec(n, -4, 4), *g = rvec(n, -1, 1), *ref = zvec(n), *gref = zvec(n), *y = zvec(n);
                void *dx = up(dt, x, n), *dg = up(dt, g, n), *o = dmalloc((size_t)n * tsz(dt)), *gx = dmalloc((size_t)n * tsz(dt));
                for (int64_t r = 0; r < rows; r++) {
                    double m = -INFINITY, s = 0;
                    for (int64_t j = 0; j < C; j++) m = fmax(m, x[r * C + j]);
                    for (int64_t j = 0; j < C; j++) s += exp(x[r * C + j] - m);
                    for (int64_t j = 0; j < C; j++) ref[r * C + j] = lg ? x[r * C + j] - m - log(s) : exp(x[r * C + j] - m) / s;
                }
                bt_k_softmax(dt, o, dx, rows, C, lg, st());
                snprintf(what, sizeof what, "%s [37,%lld] %s", lg ? "log_softmax" : "softmax", (long long)C, tname(dt));
                expect(what, dt, o, ref, n, tol_of(dt));
                down(dt, o, y, n);   /* the backward gets the GPU's y, as in training */
                for (int64_t r = 0; r < rows; r++) {
                    double s = 0;
                    for (int64_t j = 0; j < C; j++) s += lg ? g[r * C + j] : g[r * C + j] * y[r * C + j];
                    for (int64_t j = 0; j < C; j++) {
                        int64_t e = r * C + j;
                        gref[e] = lg ? g[e] - exp(y[e]) * s : y[e] * (g[e] - s);
                    }
                }
                bt_k_softmax_backward(dt, gx, dg, o, rows, C, lg, st());
                snprintf(what, sizeof what, "%s_bwd [37,%lld] %s", lg ? "log_softmax" : "softmax", (long long)C, tname(dt));
                expect(what, dt, gx, gref, n, tol_of(dt));
                free(x); free(g); free(ref); free(gref); free(y); dfree(dx); dfree(dg); dfree(o); dfree(gx);
            }
}

/* bt_k_rmsnorm and its backward against a double loop: 77, 9000: the general kernels; 768 over 5000
   rows (several rows per warp, the grid cap of the gw partials), 264, 1024: the warp register rows;
   4096, 1600 over 3000 rows: the block register rows. The reference leaves out the forward's rounding of x rstd before w (one more
   rounding in bf16/f16, within tol_of). gx written, then added (gx_add) with its column sums; gw
   accumulated. */
static void test_rmsnorm(void) {
    NEED_GPU();
    int64_t Cs[] = {77, 4096, 768, 264, 1024, 1600, 9000};
    bt_dtype dts[] = {BT_F32, BT_BF16, BT_F16};
    char what[96];
    for (int c = 0; c < 7; c++)
        for (int k = 0; k < 3; k++) {
            bt_dtype dt = dts[k];
            int64_t C = Cs[c], rows = C == 768 ? (g_quick ? 300 : 5000) : C == 1600 ? (g_quick ? 300 : 3000) : 37, n = rows * C;
            seed(900 + c * 8 + k);
            double *x = rvec(n, -1.5, 2.5), *w = rvec(C, 0.5, 1.5), *g = rvec(n, -1, 1), *gw0 = rvec(C, -1, 1);
            double *ref = zvec(n), *rrstd = zvec(rows), *gxr = zvec(n), *gwr = zvec(C), *csr = zvec(C);
            void *dx = up(dt, x, n), *dw = up(dt, w, C), *dg = up(dt, g, n), *dgw = up(dt, gw0, C);
            void *o = dmalloc((size_t)n * tsz(dt)), *gx = dmalloc((size_t)n * tsz(dt));
            float *dr = (float *)dmalloc((size_t)rows * 4), *dcs = (float *)dmalloc((size_t)C * 4);
            for (int64_t i = 0; i < C; i++) gwr[i] = gw0[i];
            for (int64_t r = 0; r < rows; r++) {
                double ss = 0, bb = 0;
                for (int64_t j = 0; j < C; j++) ss += x[r * C + j] * x[r * C + j];
                double rs = 1 / sqrt(ss / C + 1e-5);
                rrstd[r] = rs;
                for (int64_t j = 0; j < C; j++) {
                    double xh = x[r * C + j] * rs, wg = w[j] * g[r * C + j];
                    ref[r * C + j] = xh * w[j];
                    bb += wg * xh; gwr[j] += g[r * C + j] * xh;
                }
                bb /= C;
                for (int64_t j = 0; j < C; j++) gxr[r * C + j] = rs * (w[j] * g[r * C + j] - x[r * C + j] * rs * bb);
            }
            bt_k_rmsnorm(dt, o, dr, dx, dw, rows, C, 1e-5f, st());
            snprintf(what, sizeof what, "rmsnorm [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt)); expect(what, dt, o, ref, n, tol_of(dt));
            snprintf(what, sizeof what, "rmsnorm rstd [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt)); expect(what, BT_F32, dr, rrstd, rows, 1e-5);
            bt_k_rmsnorm_backward(dt, gx, 0, dgw, NULL, dg, dx, dw, dr, rows, C, st());
            snprintf(what, sizeof what, "rmsnorm_bwd gx [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt)); expect(what, dt, gx, gxr, n, tol_of(dt));
            snprintf(what, sizeof what, "rmsnorm_bwd gw+= [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt)); expect(what, dt, dgw, gwr, C, tol_of(dt));
            {   /* gx_add into a residual gradient, with the column sums of the result; gw untouched (NULL) */
                double *r0 = rvec(n, -1, 1), *sum = zvec(n);
                void *dres = up(dt, r0, n);
                for (int64_t i = 0; i < n; i++) { sum[i] = r0[i] + gxr[i]; csr[i % C] += sum[i]; }
                poison(dcs, (size_t)C * 4);
                bt_k_rmsnorm_backward(dt, dres, 1, NULL, dcs, dg, dx, dw, dr, rows, C, st());
                snprintf(what, sizeof what, "rmsnorm_bwd gx+= [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt));
                expect(what, dt, dres, sum, n, tol_of(dt));
                snprintf(what, sizeof what, "rmsnorm_bwd gx+= colsum [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt));
                expect(what, BT_F32, dcs, csr, C, tol_of(dt));
                free(r0); free(sum); dfree(dres);
            }
            free(x); free(w); free(g); free(gw0); free(ref); free(rrstd); free(gxr); free(gwr); free(csr);
            dfree(dx); dfree(dw); dfree(dg); dfree(dgw); dfree(o); dfree(gx); dfree(dr); dfree(dcs);
        }
}

static void test_layernorm(void) {
    NEED_GPU();
    /* 77, 773, 9000: the general kernels (1500 too in bf16/f16, not a whole number of 16-byte
       vectors); 768 (over 5000 rows: several rows per warp and the grid cap of the fused gw/gb
       partials), 264, 1024: the warp-per-row register path; 1600 (over 3000 rows: several rows per
       block), 2048, 1500 in f32: a block a row */
    int64_t Cs[] = {77, 773, 1500, 768, 264, 1024, 1600, 2048, 9000};
    bt_dtype dts[] = {BT_F32, BT_BF16, BT_F16};
    char what[96];
    for (int c = 0; c < 9; c++)
        for (int k = 0; k < 3; k++) {
            bt_dtype dt = dts[k];
            int64_t C = Cs[c], rows = C == 768 ? (g_quick ? 300 : 5000) : C == 1600 ? (g_quick ? 300 : 3000) : 37, n = rows * C;
            seed(700 + c * 8 + k);
            double *x = rvec(n, -1.5, 2.5), *w = rvec(C, 0.5, 1.5), *b = rvec(C, -0.5, 0.5), *g = rvec(n, -1, 1);
            double *gw0 = rvec(C, -1, 1), *gb0 = rvec(C, -1, 1);
            double *ref = zvec(n), *rmean = zvec(rows), *rrstd = zvec(rows), *gxr = zvec(n), *gwr = zvec(C), *gbr = zvec(C);
            void *dx = up(dt, x, n), *dw = up(dt, w, C), *db = up(dt, b, C), *dg = up(dt, g, n);
            void *dgw = up(dt, gw0, C), *dgb = up(dt, gb0, C);
            void *o = dmalloc((size_t)n * tsz(dt)), *gx = dmalloc((size_t)n * tsz(dt));
            float *dm = (float *)dmalloc((size_t)rows * 4), *dr = (float *)dmalloc((size_t)rows * 4);
            for (int64_t i = 0; i < C; i++) { gwr[i] = gw0[i]; gbr[i] = gb0[i]; }
            for (int64_t r = 0; r < rows; r++) {
                double mu = 0, var = 0;
                for (int64_t j = 0; j < C; j++) mu += x[r * C + j];
                mu /= C;
                for (int64_t j = 0; j < C; j++) var += (x[r * C + j] - mu) * (x[r * C + j] - mu);
                var /= C;
                double rs = 1 / sqrt(var + 1e-5), a = 0, bb = 0;
                rmean[r] = mu; rrstd[r] = rs;
                for (int64_t j = 0; j < C; j++) ref[r * C + j] = (x[r * C + j] - mu) * rs * w[j] + b[j];
                for (int64_t j = 0; j < C; j++) {
                    double xh = (x[r * C + j] - mu) * rs, wg = w[j] * g[r * C + j];
                    a += wg; bb += wg * xh;
                    gwr[j] += g[r * C + j] * xh; gbr[j] += g[r * C + j];
                }
                a /= C; bb /= C;
                for (int64_t j = 0; j < C; j++) {
                    double xh = (x[r * C + j] - mu) * rs, wg = w[j] * g[r * C + j];
                    gxr[r * C + j] = rs * (wg - a - xh * bb);
                }
            }
            bt_k_layernorm(dt, o, dm, dr, dx, dw, db, rows, C, 1e-5f, st());
            snprintf(what, sizeof what, "layernorm [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt)); expect(what, dt, o, ref, n, tol_of(dt));
            snprintf(what, sizeof what, "layernorm mean [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt)); expect(what, BT_F32, dm, rmean, rows, 1e-5);
            snprintf(what, sizeof what, "layernorm rstd [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt)); expect(what, BT_F32, dr, rrstd, rows, 1e-5);
            float *dcs = (float *)dmalloc((size_t)C * 4);
            double *csr = zvec(C);   /* the column sums of the gx written (fp32 out; the fast path sums before rounding) */
            for (int64_t i = 0; i < n; i++) csr[i % C] += gxr[i];
            poison(dcs, (size_t)C * 4);
            bt_k_layernorm_backward(dt, gx, 0, dgw, dgb, dcs, dg, dx, dw, dm, dr, rows, C, st());
            snprintf(what, sizeof what, "layernorm_bwd gx [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt)); expect(what, dt, gx, gxr, n, tol_of(dt));
            snprintf(what, sizeof what, "layernorm_bwd gx colsum [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt));
            expect(what, BT_F32, dcs, csr, C, tol_of(dt));
            {   /* gx_add: into a residual gradient r already there (fresh random), gw/gb untouched here */
                double *r0 = rvec(n, -1, 1), *sum = zvec(n);
                void *dres = up(dt, r0, n);   /* rounds r0 to dt in place */
                for (int64_t i = 0; i < n; i++) sum[i] = r0[i] + gxr[i];
                for (int64_t j = 0; j < C; j++) csr[j] = 0;
                for (int64_t i = 0; i < n; i++) csr[i % C] += sum[i];
                poison(dcs, (size_t)C * 4);
                bt_k_layernorm_backward(dt, dres, 1, NULL, NULL, dcs, dg, dx, dw, dm, dr, rows, C, st());
                snprintf(what, sizeof what, "layernorm_bwd gx+= [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt));
                expect(what, dt, dres, sum, n, tol_of(dt));
                snprintf(what, sizeof what, "layernorm_bwd gx+= colsum [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt));
                expect(what, BT_F32, dcs, csr, C, tol_of(dt));
                free(r0); free(sum); dfree(dres);
            }
            snprintf(what, sizeof what, "layernorm_bwd gw+= [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt)); expect(what, dt, dgw, gwr, C, tol_of(dt));
            snprintf(what, sizeof what, "layernorm_bwd gb+= [%lld,%lld] %s", (long long)rows, (long long)C, tname(dt)); expect(what, dt, dgb, gbr, C, tol_of(dt));
            if ((c == 0 || c == 3) && k == 0) {   /* gx NULL, gb NULL: only gw moves (by the same sum again) */
                for (int64_t j = 0; j < C; j++) gwr[j] += gwr[j] - gw0[j];
                bt_k_layernorm_backward(dt, NULL, 0, dgw, NULL, NULL, dg, dx, dw, dm, dr, rows, C, st());
                snprintf(what, sizeof what, "layernorm_bwd gw only [%lld,%lld] f32", (long long)rows, (long long)C);
                expect(what, dt, dgw, gwr, C, tol_of(dt));
                snprintf(what, sizeof what, "layernorm_bwd gb untouched [%lld,%lld] f32", (long long)rows, (long long)C);
                expect(what, dt, dgb, gbr, C, tol_of(dt));
            }
            free(x); free(w); free(b); free(g); free(gw0); free(gb0); free(ref); free(rmean); free(rrstd); free(gxr);
            free(gwr); free(gbr); free(csr);
            dfree(dx); dfree(dw); dfree(db); dfree(dg); dfree(dgw); dfree(dgb); dfree(o); dfree(gx); dfree(dm); dfree(dr); dfree(dcs);
        }
}

static void test_embedding(void) {
    NEED_GPU();
    /* (V, C, n, distinct indices drawn from [0, span)) */
    int64_t cases[][4] = {{1000, 77, 3 * 67, 50}, {1000, 80, 3 * 67, 1000}, {50257, 64, 20000, 3000}};
    if (g_quick) cases[2][2] = 3000;
    bt_dtype dts[] = {BT_F32, BT_BF16, BT_F16};
    char what[96];
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++) {
            bt_dtype dt = dts[k];
            int64_t V = cases[c][0], C = cases[c][1], n = cases[c][2], span = cases[c][3];
            seed(800 + c * 8 + k);
            double *tab = rvec(V * C, -1, 1), *g = rvec(n * C, -1, 1), *ref = zvec(n * C), *gtr = zvec(V * C);
            int32_t *idx = (int32_t *)malloc((size_t)n * 4);
            for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)(rnd() * span) % (int32_t)V;
            void *dtab = up(dt, tab, V * C), *dg = up(dt, g, n * C), *o = dmalloc((size_t)(n * C) * tsz(dt));
            int32_t *didx = (int32_t *)up_i32(idx, n);
            int *bad = (int *)dmalloc(4);
            CK(cudaMemsetAsync(bad, 0, 4, st()));
            for (int64_t i = 0; i < n; i++) for (int64_t j = 0; j < C; j++) ref[i * C + j] = tab[idx[i] * C + j];
            bt_k_embedding(dt, o, dtab, didx, n, C, V, bad, st());
            snprintf(what, sizeof what, "embedding V=%lld C=%lld n=%lld %s", (long long)V, (long long)C, (long long)n, tname(dt));
            expect(what, dt, o, ref, n * C, 0);
            BT_CHECK(dget_int(bad) == 0, "%s: *bad set on valid indices", what);
            /* two indices out of range: *bad, zero rows, and the backward skips them */
            idx[5] = (int32_t)V; idx[7] = -3;
            CK(cudaMemcpy(didx, idx, (size_t)n * 4, cudaMemcpyHostToDevice));
            for (int64_t j = 0; j < C; j++) { ref[5 * C + j] = 0; ref[7 * C + j] = 0; }
            poison(o, (size_t)(n * C) * tsz(dt));
            bt_k_embedding(dt, o, dtab, didx, n, C, V, bad, st());
            snprintf(what, sizeof what, "embedding bad idx V=%lld C=%lld %s", (long long)V, (long long)C, tname(dt));
            expect(what, dt, o, ref, n * C, 0);
            BT_CHECK(dget_int(bad) == 1, "%s: *bad not set", what);
            /* backward onto a random (nonzero) gtable, both paths */
            for (int64_t v = 0; v < V * C; v++) gtr[v] = tab[v];
            for (int64_t i = 0; i < n; i++)
                if (idx[i] >= 0 && idx[i] < V) for (int64_t j = 0; j < C; j++) gtr[idx[i] * C + j] += g[i * C + j];
            for (int det = 0; det < 2; det++) {
                void *gt = up(dt, tab, V * C);
                bt_k_embedding_backward(dt, gt, dg, didx, n, C, V, det, st());
                snprintf(what, sizeof what, "embedding_bwd %s V=%lld C=%lld n=%lld %s", det ? "det" : "atomic", (long long)V,
                         (long long)C, (long long)n, tname(dt));
                expect(what, dt, gt, gtr, V * C, tol_of(dt));
                if (det) {   /* same bits on a second run */
                    void *gt2 = up(dt, tab, V * C);
                    bt_k_embedding_backward(dt, gt2, dg, didx, n, C, V, det, st());
                    size_t nbytes = (size_t)(V * C) * tsz(dt);
                    char *h1 = (char *)malloc(nbytes), *h2 = (char *)malloc(nbytes);
                    CK(cudaStreamSynchronize(st()));
                    CK(cudaMemcpy(h1, gt, nbytes, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(h2, gt2, nbytes, cudaMemcpyDeviceToHost));
                    int same = memcmp(h1, h2, nbytes) == 0;
                    BT_CHECK(same, "%s: two runs differ in their bits", what);
                    check_err("embedding_bwd det: runs differ (0/1)", same ? 0 : 1, 0);
                    free(h1); free(h2); dfree(gt2);
                }
                dfree(gt);
                /* into an fp32 table (a leaf's fp32 gradient) from rows of dt */
                void *gt32 = up(BT_F32, tab, V * C);
                bt_k_embedding_backward_f32(dt, (float *)gt32, dg, didx, n, C, V, 1.f, det, st());
                snprintf(what, sizeof what, "embedding_bwd_f32 %s V=%lld C=%lld n=%lld rows %s", det ? "det" : "atomic", (long long)V,
                         (long long)C, (long long)n, tname(dt));
                expect(what, BT_F32, gt32, gtr, V * C, tol_of(dt));   /* the rows carry dt's rounding */
                dfree(gt32);
            }
            free(tab); free(g); free(ref); free(gtr); free(idx);
            dfree(dtab); dfree(dg); dfree(o); dfree(didx); dfree(bad);
        }
}

static void test_cross_entropy(void) {
    NEED_GPU();
    /* (N, V, Vp): vector loads, element loads, GPT-2's padded vocabulary, and rows past the shared
       memory of the fused kernel in f32 (its fallback to the two kernels; bf16 still fits). N of
       2000, 700 and 300: more rows than the blocks an H100 holds at once. */
    int64_t Ns[] = {2000, 37, 700, 300}, Vs[] = {1000, 1000, 50257, 70001}, Vps[] = {1024, 1003, 50304, 70008};
    int ign = -100;
    bt_dtype dts[] = {BT_F32, BT_BF16, BT_F16};
    char what[96];
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 3; k++) {
            bt_dtype dt = dts[k];
            int64_t N = Ns[c], V = Vs[c], Vp = Vps[c], n = N * Vp;
            seed(900 + c * 8 + k);
            double *x = rvec(n, -4, 4), *gl = rvec(N, 0.1, 1);
            for (int64_t i = 0; i < N; i++) for (int64_t j = V; j < Vp; j++) x[i * Vp + j] = 30.0;   /* padding must not count */
            int32_t *t = (int32_t *)malloc((size_t)N * 4);
            for (int64_t i = 0; i < N; i++) t[i] = (int32_t)(rnd() * V) % (int32_t)V;
            t[3] = ign; t[10] = ign;
            void *dx = up(dt, x, n), *dgl = up(BT_F32, gl, N), *gx = dmalloc((size_t)n * tsz(dt));
            int32_t *dt_ = (int32_t *)up_i32(t, N);
            float *loss = (float *)dmalloc((size_t)N * 4), *lse = (float *)dmalloc((size_t)N * 4);
            int *bad = (int *)dmalloc(4);
            CK(cudaMemsetAsync(bad, 0, 4, st()));
            double *rl = zvec(N), *rlse = zvec(N), *rg = zvec(n);
            for (int64_t i = 0; i < N; i++) {
                double m = -INFINITY, s = 0;
                for (int64_t j = 0; j < V; j++) m = fmax(m, x[i * Vp + j]);
                for (int64_t j = 0; j < V; j++) s += exp(x[i * Vp + j] - m);
                rlse[i] = m + log(s);
                rl[i] = t[i] == ign ? 0 : rlse[i] - x[i * Vp + t[i]];
                for (int64_t j = 0; j < V; j++)
                    rg[i * Vp + j] = t[i] == ign ? 0 : gl[i] * (exp(x[i * Vp + j] - rlse[i]) - (j == t[i] ? 1 : 0));
            }
            bt_k_cross_entropy(dt, loss, lse, dx, dt_, N, V, Vp, ign, bad, st());
            snprintf(what, sizeof what, "cross_entropy loss V=%lld Vp=%lld %s", (long long)V, (long long)Vp, tname(dt));
            expect(what, BT_F32, loss, rl, N, 1e-5);
            snprintf(what, sizeof what, "cross_entropy lse V=%lld Vp=%lld %s", (long long)V, (long long)Vp, tname(dt));
            expect(what, BT_F32, lse, rlse, N, 1e-5);
            BT_CHECK(dget_int(bad) == 0, "%s: *bad set on valid targets", what);
            bt_k_cross_entropy_backward(dt, gx, dx, lse, dt_, (const float *)dgl, N, V, Vp, ign, st());
            snprintf(what, sizeof what, "cross_entropy_bwd V=%lld Vp=%lld %s", (long long)V, (long long)Vp, tname(dt));
            expect(what, dt, gx, rg, n, tol_of(dt));
            /* the fused pass, in place over a copy of the logits, with and without lse */
            for (int wl = 0; wl < 2; wl++) {
                poison(gx, (size_t)n * tsz(dt)); poison(loss, (size_t)N * 4); poison(lse, (size_t)N * 4);
                CK(cudaMemcpyAsync(gx, dx, (size_t)n * tsz(dt), cudaMemcpyDeviceToDevice, st()));
                bt_k_cross_entropy_fused(dt, loss, wl ? lse : NULL, gx, dt_, (const float *)dgl, N, V, Vp, ign, bad, st());
                snprintf(what, sizeof what, "cross_entropy_fused loss V=%lld Vp=%lld %s%s", (long long)V, (long long)Vp, tname(dt),
                         wl ? "" : " no lse");
                expect(what, BT_F32, loss, rl, N, 1e-5);
                if (wl) {
                    snprintf(what, sizeof what, "cross_entropy_fused lse V=%lld Vp=%lld %s", (long long)V, (long long)Vp, tname(dt));
                    expect(what, BT_F32, lse, rlse, N, 1e-5);
                }
                snprintf(what, sizeof what, "cross_entropy_fused grad V=%lld Vp=%lld %s%s", (long long)V, (long long)Vp, tname(dt),
                         wl ? "" : " no lse");
                expect(what, dt, gx, rg, n, tol_of(dt));
                BT_CHECK(dget_int(bad) == 0, "%s: *bad set on valid targets", what);
            }
            /* out-of-range targets set *bad */
            t[4] = (int32_t)V; t[6] = -5;
            CK(cudaMemcpy(dt_, t, (size_t)N * 4, cudaMemcpyHostToDevice));
            bt_k_cross_entropy(dt, loss, lse, dx, dt_, N, V, Vp, ign, bad, st());
            BT_CHECK(dget_int(bad) == 1, "cross_entropy: *bad not set for targets %d and %d", (int)V, -5);
            CK(cudaMemsetAsync(bad, 0, 4, st()));
            bt_k_cross_entropy_fused(dt, loss, lse, dx, dt_, (const float *)dgl, N, V, Vp, ign, bad, st());
            BT_CHECK(dget_int(bad) == 1, "cross_entropy_fused: *bad not set for targets %d and %d", (int)V, -5);
            free(x); free(gl); free(t); free(rl); free(rlse); free(rg);
            dfree(dx); dfree(dgl); dfree(gx); dfree(dt_); dfree(loss); dfree(lse); dfree(bad);
        }
}

static void test_attention(void) {
    NEED_GPU();
    int64_t B = 3, H = 2, T = 67, Ds[] = {64, 32};
    bt_dtype dts[] = {BT_F32, BT_BF16, BT_F16};
    char what[96];
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 3; k++) {
            bt_dtype dt = dts[k];
            int64_t D = Ds[c], n = B * H * T * D, BH = B * H;
            double scale = 1.0 / sqrt((double)D);
            seed(1000 + c * 8 + k);
            double *qh = rvec(n, -1.5, 1.5), *kh = rvec(n, -1.5, 1.5), *vh = rvec(n, -1, 1), *go = rvec(n, -1, 1);
            void *dq = up(dt, qh, n), *dk = up(dt, kh, n), *dv = up(dt, vh, n), *dgo = up(dt, go, n);
            void *o = dmalloc((size_t)n * tsz(dt)), *gq = dmalloc((size_t)n * tsz(dt)), *gk = dmalloc((size_t)n * tsz(dt)),
                 *gv = dmalloc((size_t)n * tsz(dt));
            float *lse = (float *)dmalloc((size_t)(BH * T) * 4);
            double *ro = zvec(n), *rlse = zvec(BH * T), *rgq = zvec(n), *rgk = zvec(n), *rgv = zvec(n);
            double *P = zvec(T * T), *dP = zvec(T * T);
            for (int64_t h = 0; h < BH; h++) {
                const double *Q = qh + h * T * D, *K = kh + h * T * D, *Vv = vh + h * T * D, *G = go + h * T * D;
                double *O = ro + h * T * D;
                for (int64_t t = 0; t < T; t++) {
                    double m = -INFINITY, s = 0;
                    for (int64_t j = 0; j <= t; j++) {
                        double sc = 0;
                        for (int64_t d = 0; d < D; d++) sc += Q[t * D + d] * K[j * D + d];
                        P[t * T + j] = sc * scale;
                        m = fmax(m, sc * scale);
                    }
                    for (int64_t j = 0; j <= t; j++) s += exp(P[t * T + j] - m);
                    for (int64_t j = 0; j < T; j++) P[t * T + j] = j <= t ? exp(P[t * T + j] - m) / s : 0;
                    rlse[h * T + t] = m + log(s);
                    for (int64_t d = 0; d < D; d++) {
                        double a = 0;
                        for (int64_t j = 0; j <= t; j++) a += P[t * T + j] * Vv[j * D + d];
                        O[t * D + d] = a;
                    }
                }
                /* backward: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O)) scale, dQ = dS K, dK = dS^T Q */
                for (int64_t t = 0; t < T; t++)
                    for (int64_t j = 0; j < T; j++) {
                        double a = 0;
                        for (int64_t d = 0; d < D; d++) a += G[t * D + d] * Vv[j * D + d];
                        dP[t * T + j] = a;
                    }
                for (int64_t j = 0; j < T; j++)
                    for (int64_t d = 0; d < D; d++) {
                        double a = 0;
                        for (int64_t t = 0; t < T; t++) a += P[t * T + j] * G[t * D + d];
                        rgv[h * T * D + j * D + d] = a;
                    }
                for (int64_t t = 0; t < T; t++) {
                    double delta = 0;
                    for (int64_t d = 0; d < D; d++) delta += G[t * D + d] * O[t * D + d];
                    for (int64_t j = 0; j < T; j++) dP[t * T + j] = P[t * T + j] * (dP[t * T + j] - delta) * scale;
                }
                for (int64_t t = 0; t < T; t++)
                    for (int64_t d = 0; d < D; d++) {
                        double a = 0, b2 = 0;
                        for (int64_t j = 0; j < T; j++) { a += dP[t * T + j] * K[j * D + d]; b2 += dP[j * T + t] * Q[j * D + d]; }
                        rgq[h * T * D + t * D + d] = a; rgk[h * T * D + t * D + d] = b2;
                    }
            }
            bt_k_attention(dt, o, lse, dq, dk, dv, B, H, T, D, (float)scale, st());
            snprintf(what, sizeof what, "attention out T=%lld D=%lld %s", (long long)T, (long long)D, tname(dt));
            expect(what, dt, o, ro, n, tol_of(dt));
            snprintf(what, sizeof what, "attention lse T=%lld D=%lld %s", (long long)T, (long long)D, tname(dt));
            expect(what, BT_F32, lse, rlse, BH * T, dt == BT_F32 ? 1e-5 : tol_of(dt));
            bt_k_attention_backward(dt, gq, gk, gv, dgo, dq, dk, dv, o, lse, B, H, T, D, (float)scale, st());
            snprintf(what, sizeof what, "attention_bwd dq T=%lld D=%lld %s", (long long)T, (long long)D, tname(dt));
            expect(what, dt, gq, rgq, n, tol_of(dt));
            snprintf(what, sizeof what, "attention_bwd dk T=%lld D=%lld %s", (long long)T, (long long)D, tname(dt));
            expect(what, dt, gk, rgk, n, tol_of(dt));
            snprintf(what, sizeof what, "attention_bwd dv T=%lld D=%lld %s", (long long)T, (long long)D, tname(dt));
            expect(what, dt, gv, rgv, n, tol_of(dt));
            free(qh); free(kh); free(vh); free(go); free(ro); free(rlse); free(rgq); free(rgk); free(rgv); free(P); free(dP);
            dfree(dq); dfree(dk); dfree(dv); dfree(dgo); dfree(o); dfree(gq); dfree(gk); dfree(gv); dfree(lse);
        }
}

/* ---- the strided attention entry points ----
   Layouts of the six [B, H, T, D] tensors (each a view: buffer, element offset, strides):
     0 contiguous: separate [B, H, T, D] buffers.
     1 GPT-2: q, k, v views of one [B, T, 3, H, D] buffer (the qkv projection); gout [B, T, H, D];
       out into [B, T, H D + 8] and gq, gk, gv into one [B, T, 3 H D + 8] buffer (a pad of 8 per
       token), as the model writes them.
     2 odd: every tensor in its own [B, T, H D + 3] buffer starting one element in: no stride or
       base is 16-byte aligned (the element-load fallback).
     3 as 1, but out in [B, T, H D + 10] from element 2 on: its rows 4-byte aligned, not 16 (the
       wgmma forward then writes O from registers, not in 16-byte rows through shared memory).
   Output buffers are poisoned before the call; elements outside the views must stay poisoned. */
typedef struct { int buf; int64_t off, st[3]; } attn_view;
static int64_t attn_vidx(const attn_view *w, int64_t H, int64_t bh, int64_t t, int64_t d) {
    return w->off + (bh / H) * w->st[0] + (bh % H) * w->st[1] + t * w->st[2] + d;
}
/* the heads a check compares (all, or every hs-th and the last one: the GPT-2 shape's 192 heads
   would take minutes in double) */
static int attn_head_checked(int64_t h, int64_t BH, int64_t hs) { return h % hs == 0 || h == BH - 1; }
/* CPU reference in double on contiguous [BH, T, D] arrays, causal or not, for the checked heads */
static void attn_ref(int64_t BH, int64_t T, int64_t D, double scale, int causal, int64_t hs, const double *Q, const double *K,
                     const double *V, const double *G, double *O, double *lse, double *dQ, double *dK, double *dV) {
    double *p = zvec(T), *dp = zvec(T);
    memset(dQ, 0, sizeof(double) * (size_t)(BH * T * D)); memset(dK, 0, sizeof(double) * (size_t)(BH * T * D));
    memset(dV, 0, sizeof(double) * (size_t)(BH * T * D));
    for (int64_t h = 0; h < BH; h++) {
        if (!attn_head_checked(h, BH, hs)) continue;
        const double *q = Q + h * T * D, *k = K + h * T * D, *v = V + h * T * D, *g = G + h * T * D;
        double *o = O + h * T * D, *gq = dQ + h * T * D, *gk = dK + h * T * D, *gv = dV + h * T * D;
        for (int64_t t = 0; t < T; t++) {
            double m = -INFINITY, s = 0, delta = 0;
            int64_t last = causal ? t : T - 1;   /* keys 0 .. last */
            for (int64_t j = 0; j <= last; j++) {
                double a = 0;
                for (int64_t d = 0; d < D; d++) a += q[t * D + d] * k[j * D + d];
                p[j] = a * scale; m = fmax(m, p[j]);
            }
            for (int64_t j = 0; j <= last; j++) { p[j] = exp(p[j] - m); s += p[j]; }
            for (int64_t j = 0; j <= last; j++) p[j] /= s;
            lse[h * T + t] = m + log(s);
            for (int64_t d = 0; d < D; d++) {
                double a = 0;
                for (int64_t j = 0; j <= last; j++) a += p[j] * v[j * D + d];
                o[t * D + d] = a;
                delta += a * g[t * D + d];
            }
            for (int64_t j = 0; j <= last; j++) {
                double a = 0;
                for (int64_t d = 0; d < D; d++) a += g[t * D + d] * v[j * D + d];
                dp[j] = p[j] * (a - delta) * scale;   /* dS */
            }
            for (int64_t j = 0; j <= last; j++)
                for (int64_t d = 0; d < D; d++) {
                    gv[j * D + d] += p[j] * g[t * D + d];
                    gq[t * D + d] += dp[j] * k[j * D + d];
                    gk[j * D + d] += dp[j] * q[t * D + d];
                }
        }
    }
    free(p); free(dp);
}
/* prec BT_MATMUL_TF32 with f32 data: TF32 tensor cores, checked at the tf32 tolerance (5e-3: every
   operand of the 4 products rounded to a 10-bit mantissa, up to 2^-11 = 4.9e-4 relative each; a
   product of two costs up to 1e-3, and dS = P (dP - Dvec) subtracts nearly equal numbers, which
   can multiply the relative error of dQ and dK a few times), lse at 1e-3 (at T = 1 lse is one
   score, a tf32 dot product of D terms: 1.2e-4 was seen where fp32's 1e-5 bound does not hold). */
static int g_att_colsums;   /* cases whose backward gave the column sums and had them checked */
static void attn_case(bt_dtype dt, bt_matmul_precision prec, int64_t B, int64_t H, int64_t T, int64_t D, int layout,
                        int check_bits, int causal, int64_t hs) {
    enum { Q, K, V, G, O, GQ, GK, GV, NT };
    int tf32 = dt == BT_F32 && prec == BT_MATMUL_TF32;
    double tol = tf32 ? 5e-3 : tol_of(dt);
    char pname[40];
    int wg = bt_k_attention_hopper(-1) == 3 && dt != BT_F32 && (D == 64 || D == 128) && layout != 2;   /* wgmma kernels */
    snprintf(pname, sizeof pname, "%s%s%s", tf32 ? "tf32" : tname(dt), causal ? "" : " full", wg ? " wg" : "");
    static const char *lname[] = {"contig", "gpt2", "odd", "gpt2 out4"};
    if (g_progress)   /* BT_TEST_PROGRESS=1: each case named before it runs (a hang's whereabouts) */
        fprintf(stderr, "  attn_case %s %s B%lld H%lld T%lld D%lld\n", pname, lname[layout], (long long)B, (long long)H,
                (long long)T, (long long)D);
    int64_t BH = B * H, HD = H * D, n = BH * T * D;
    attn_view w[NT];
    int64_t blen[NT];   /* buffer lengths (elements); a view's buffer is w[i].buf */
    int nbuf = 0;
    memset(w, 0, sizeof w);
    for (int i = 0; i < NT; i++) blen[i] = 0;
    if (layout == 0) {
        for (int i = 0; i < NT; i++) {
            w[i].buf = nbuf; blen[nbuf++] = n;
            w[i].st[0] = H * T * D; w[i].st[1] = T * D; w[i].st[2] = D;
        }
    } else if (layout == 1 || layout == 3) {
        int qkv = nbuf++; blen[qkv] = B * T * 3 * HD;
        for (int i = Q; i <= V; i++) { w[i].buf = qkv; w[i].off = i * HD; w[i].st[0] = T * 3 * HD; w[i].st[1] = D; w[i].st[2] = 3 * HD; }
        w[G].buf = nbuf; blen[nbuf++] = B * T * HD; w[G].st[0] = T * HD; w[G].st[1] = D; w[G].st[2] = HD;
        const int64_t op = layout == 3 ? 10 : 8, o0 = layout == 3 ? 2 : 0;
        w[O].buf = nbuf; blen[nbuf++] = o0 + B * T * (HD + op); w[O].off = o0;
        w[O].st[0] = T * (HD + op); w[O].st[1] = D; w[O].st[2] = HD + op;
        int gb = nbuf++; blen[gb] = B * T * (3 * HD + 8);
        for (int i = GQ; i <= GV; i++) {
            w[i].buf = gb; w[i].off = (i - GQ) * HD; w[i].st[0] = T * (3 * HD + 8); w[i].st[1] = D; w[i].st[2] = 3 * HD + 8;
        }
    } else {
        for (int i = 0; i < NT; i++) {
            w[i].buf = nbuf; blen[nbuf++] = 1 + B * T * (HD + 3);
            w[i].off = 1; w[i].st[0] = T * (HD + 3); w[i].st[1] = D; w[i].st[2] = HD + 3;
        }
    }
    double *hb[NT];
    void *db[NT];
    for (int b = 0; b < nbuf; b++) hb[b] = rvec(blen[b], -1.5, 1.5);
    /* contiguous copies of the inputs as the GPU sees them (rounded to dt) */
    for (int b = 0; b < nbuf; b++) quant(dt, hb[b], blen[b]);
    double *X[NT];
    for (int i = Q; i <= G; i++) {
        X[i] = zvec(n);
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) X[i][(bh * T + t) * D + d] = hb[w[i].buf][attn_vidx(&w[i], H, bh, t, d)];
    }
    for (int b = 0; b < nbuf; b++) db[b] = up(dt, hb[b], blen[b]);
    /* output buffers (not holding an input) start poisoned */
    int is_out[NT] = {0};
    for (int i = O; i <= GV; i++) { is_out[w[i].buf] = 1; poison(db[w[i].buf], (size_t)blen[w[i].buf] * tsz(dt)); }
    double scale = 1.0 / sqrt((double)D);
    double *ro = zvec(n), *rl = zvec(BH * T), *rq = zvec(n), *rk = zvec(n), *rv = zvec(n);
    attn_ref(BH, T, D, scale, causal, hs, X[Q], X[K], X[V], X[G], ro, rl, rq, rk, rv);
    float *lse = (float *)dmalloc((size_t)(BH * T) * 4);
#define AP(i) ((char *)db[w[i].buf] + (size_t)w[i].off * tsz(dt))
    bt_k_attention_strided(dt, AP(O), w[O].st, lse, AP(Q), w[Q].st, AP(K), w[K].st, AP(V), w[V].st, B, H, H, T, D, (float)scale,
                           causal, prec, st());
    /* the backward reads the GPU's out (as in training); with the column sums of gq, gk, gv where the
       kernel gives them (the fused Hopper backward) */
    float *dcs = (float *)dmalloc((size_t)(3 * HD) * 4);
    poison(dcs, (size_t)(3 * HD) * 4);
    int given = bt_k_attention_backward_colsum(dt, AP(GQ), w[GQ].st, AP(GK), w[GK].st, AP(GV), w[GV].st, AP(G), w[G].st, AP(Q),
                                               w[Q].st, AP(K), w[K].st, AP(V), w[V].st, AP(O), w[O].st, lse, B, H, H, T, D,
                                               (float)scale, causal, prec, dcs, st());
    char what[128];
    if (given && hs == 1) {   /* every head in the reference: sum it over b and t */
        double *csr = zvec(3 * HD);
        const double *rg[3] = {rq, rk, rv};
        for (int part = 0; part < 3; part++)
            for (int64_t bh = 0; bh < BH; bh++)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t d = 0; d < D; d++) csr[part * HD + (bh % H) * D + d] += rg[part][(bh * T + t) * D + d];
        snprintf(what, sizeof what, "attention_strided colsum of dq dk dv B%lld H%lld T%lld D%lld %s", (long long)B, (long long)H,
                 (long long)T, (long long)D, pname);
        expect(what, BT_F32, dcs, csr, 3 * HD, tol);
        g_att_colsums++;
        free(csr);
    }
    dfree(dcs);
    const double *refs[NT] = {0};
    refs[O] = ro; refs[GQ] = rq; refs[GK] = rk; refs[GV] = rv;
    static const char *on[NT] = {"", "", "", "", "out", "dq", "dk", "dv"};
    /* download every output buffer once; compare the views; count poison lost outside them */
    double *hout[NT] = {0};
    char *cov[NT] = {0};
    for (int b = 0; b < nbuf; b++)
        if (is_out[b]) { hout[b] = zvec(blen[b]); down(dt, db[b], hout[b], blen[b]); cov[b] = (char *)calloc((size_t)blen[b], 1); }
    int64_t nchk = 0;   /* elements of the checked heads */
    for (int64_t bh = 0; bh < BH; bh++) nchk += attn_head_checked(bh, BH, hs) ? T * D : 0;
    for (int i = O; i <= GV; i++) {
        double *got = zvec(nchk), *ref = zvec(nchk);
        int64_t c = 0, nan = 0;
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) {
                    int64_t e = attn_vidx(&w[i], H, bh, t, d);
                    double x = hout[w[i].buf][e];
                    nan += x != x;   /* every head: written, finite */
                    cov[w[i].buf][e] = 1;
                    if (attn_head_checked(bh, BH, hs)) { got[c] = x; ref[c++] = refs[i][(bh * T + t) * D + d]; }
                }
        double e = nan ? INFINITY : bt_test_relerr(got, ref, nchk);
        free(ref);
        snprintf(what, sizeof what, "attention_strided %s %s B%lld H%lld T%lld D%lld %s", on[i], lname[layout], (long long)B,
                 (long long)H, (long long)T, (long long)D, pname);
        check_err(what, e, tol);
        free(got);
    }
    int64_t lost = 0;
    for (int b = 0; b < nbuf; b++)
        if (is_out[b])
            for (int64_t j = 0; j < blen[b]; j++) lost += !cov[b][j] && hout[b][j] == hout[b][j];
    snprintf(what, sizeof what, "attention_strided untouched %s T%lld D%lld %s (elements written)", lname[layout], (long long)T,
             (long long)D, pname);
    check_err(what, (double)lost, 0);
    snprintf(what, sizeof what, "attention_strided lse %s B%lld H%lld T%lld D%lld %s", lname[layout], (long long)B, (long long)H,
             (long long)T, (long long)D, pname);
    {
        double *hl = zvec(BH * T), *gl = zvec(BH * T), *rr = zvec(BH * T);
        int64_t c = 0, nan = 0;
        down(BT_F32, lse, hl, BH * T);
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t t = 0; t < T; t++) {
                nan += hl[bh * T + t] != hl[bh * T + t];
                if (attn_head_checked(bh, BH, hs)) { gl[c] = hl[bh * T + t]; rr[c++] = rl[bh * T + t]; }
            }
        check_err(what, nan ? INFINITY : bt_test_relerr(gl, rr, c), tf32 ? 1e-3 : dt == BT_F32 ? 1e-5 : 1e-4);
        free(hl); free(gl); free(rr);
    }
    if (check_bits) {   /* deterministic: a second backward gives the same bits */
        int gb = w[GQ].buf;
        size_t nbytes = (size_t)blen[gb] * tsz(dt);
        char *h1 = (char *)malloc(nbytes), *h2 = (char *)malloc(nbytes);
        CK(cudaStreamSynchronize(st()));
        CK(cudaMemcpy(h1, db[gb], nbytes, cudaMemcpyDeviceToHost));
        poison(db[gb], nbytes);
        bt_k_attention_backward_strided(dt, AP(GQ), w[GQ].st, AP(GK), w[GK].st, AP(GV), w[GV].st, AP(G), w[G].st, AP(Q), w[Q].st,
                                        AP(K), w[K].st, AP(V), w[V].st, AP(O), w[O].st, lse, B, H, H, T, D, (float)scale, causal, prec,
                                        st());
        CK(cudaStreamSynchronize(st()));
        CK(cudaMemcpy(h2, db[gb], nbytes, cudaMemcpyDeviceToHost));
        snprintf(what, sizeof what, "attention_strided bwd bits differ between runs %s %s (0/1)", lname[layout], pname);
        check_err(what, memcmp(h1, h2, nbytes) ? 1 : 0, 0);
        free(h1); free(h2);
    }
#undef AP
    for (int b = 0; b < nbuf; b++) { free(hb[b]); dfree(db[b]); free(hout[b]); free(cov[b]); }
    for (int i = Q; i <= G; i++) free(X[i]);
    free(ro); free(rl); free(rq); free(rk); free(rv); dfree(lse);
}
static void test_attention_strided(void) {
    NEED_GPU();
    bt_dtype dts[] = {BT_F32, BT_BF16, BT_F32};
    bt_matmul_precision precs[] = {BT_MATMUL_FP32, BT_MATMUL_FP32, BT_MATMUL_TF32};   /* f32 strict, bf16, f32 on tf32 */
    int64_t Tbig = g_quick ? 200 : 1000;
    for (int k = 0; k < 3; k++) {
        bt_dtype dt = dts[k];
        bt_matmul_precision pr = precs[k];
        seed(1050 + k);
        for (int layout = 0; layout < 3; layout++) attn_case(dt, pr, 3, 2, 67, 64, layout, layout == 1, 1, 1);
        for (int layout = 0; layout < 2; layout++) attn_case(dt, pr, 1, 5, 129, 32, layout, 0, 1, 1);
        for (int layout = 0; layout < 2; layout++) attn_case(dt, pr, 1, 3, Tbig, 64, layout, 0, 1, 1);
        attn_case(dt, pr, 1, 3, 129, 128, 1, 0, 1, 1);   /* D = 128 */
        attn_case(dt, pr, 2, 1, 67, 40, 2, 0, 1, 1);     /* D = 40: zero-padded to 64, odd strides */
        attn_case(dt, pr, 2, 3, 33, 16, 0, 0, 1, 1);     /* D = 16 */
        attn_case(dt, pr, 1, 2, 1, 64, 1, 0, 1, 1);      /* T = 1 */
    }
    /* the strict-fp32 backward over chunks of heads: a dS scratch cap of 2 heads at T = 130 (3 x 3
       tiles, 6 causal: 96 KiB a head) splits B H = 6 into 3 chunks (and 5 into 2 full + 1 short) */
    size_t prev = bt_k_attention_scratch_cap(2 * 6 * 4096 * 4);
    attn_case(BT_F32, BT_MATMUL_FP32, 3, 2, 130, 64, 1, 1, 1, 1);
    attn_case(BT_F32, BT_MATMUL_FP32, 1, 5, 130, 40, 2, 0, 1, 1);
    attn_case(BT_F32, BT_MATMUL_FP32, 3, 2, 130, 64, 1, 1, 0, 1);   /* not causal: 9 tiles a head, 1 head a chunk */
    bt_k_attention_scratch_cap(prev);
    BT_CHECK(bt_k_attention_scratch_cap(0) == prev, "attention scratch cap not restored");
    seed(1060);
    attn_case(BT_F16, BT_MATMUL_FP32, 2, 3, 67, 64, 1, 1, 1, 1);
    attn_case(BT_BF16, BT_MATMUL_TF32, 2, 3, 67, 64, 1, 0, 1, 1);   /* precision is ignored for 16-bit data */
    if (bt_k_attention_hopper(-1) == 3)   /* the fused backward ran (bf16 / f16 causal D 64) and summed its columns */
        BT_CHECK(g_att_colsums > 0, "no attention backward gave the column sums of dq, dk, dv");
    int64_t st3[3] = {1, 1, 1};
    BT_EXPECT_ERROR(bt_k_attention_strided(BT_BF16, NULL, st3, NULL, NULL, st3, NULL, st3, NULL, st3, 1, 1, 1, 4, 129, 0.1f,
                                           1, BT_MATMUL_FP32, st()),
                    "head dim");
    BT_EXPECT_ERROR(bt_k_attention_strided(BT_F64, NULL, st3, NULL, NULL, st3, NULL, st3, NULL, st3, 1, 1, 1, 4, 64, 0.1f,
                                           1, BT_MATMUL_TF32, st()),
                    "dtype f64");
}

/* the sm_90a wgmma path (an H100 with a 90a build; elsewhere the same cases run on the sm_80
   kernels): bf16 and f16, D 64 and 128, causal and not, T = 1, 63, 200 and 1000 (tails of the
   128-row tiles), the model's [B, T, 3, H, D] views and contiguous ones, the backward's bits
   twice, and the GPT-2 shape (B 16, H 12, T 1024, D 64; its reference on 6 of the 192 heads) */
/* grouped-query attention (Hkv < H key/value heads, read in place by group) against the same kernels
   on K, V repeated to H heads by the host (checked against the CPU by attn_case): the forward reads
   the same numbers in the same order, so out, lse and dq must be the same bits; dk, dv of a key/value
   head are its G query heads' (the repeated run's) summed in fp32 in head order and rounded once.
   packed: q, k, v in one [B, T, H + 2 Hkv, D] buffer (Llama's projection; the repeated run in one
   [B, T, 3H, D]), else contiguous [B, heads, T, D] each. */
static void gqa_case(bt_dtype dt, bt_matmul_precision prec, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, int packed,
                     int causal) {
    const int64_t G = H / Hkv, es = (int64_t)tsz(dt);
    int64_t nq = B * H * T * D, nk = B * Hkv * T * D;
    double *hq = rvec(nq, -1.5, 1.5), *hk = rvec(nk, -1.5, 1.5), *hv = rvec(nk, -1.5, 1.5), *hg = rvec(nq, -1.5, 1.5);
    quant(dt, hq, nq); quant(dt, hk, nk); quant(dt, hv, nk); quant(dt, hg, nq);
    /* the two runs' operand buffers: run 0 GQA, run 1 K, V repeated (head h gets key/value head h / G) */
    const int64_t hkv[2] = {Hkv, H};
    void *dqkv[2], *dg, *dout[2], *dgrad[2];
    int64_t sq[2][3], sk[2][3], sv[2][3], so[3] = {H * T * D, T * D, D}, koff[2], voff[2];
    float *lse[2];
    dg = up(dt, hg, nq);
    for (int r = 0; r < 2; r++) {
        int64_t Hk = hkv[r], W = (H + 2 * Hk) * D, n = B * T * W;
        double *buf = zvec(n);
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) {
                    for (int64_t h = 0; h < H; h++) {
                        int64_t iq = ((b * H + h) * T + t) * D + d;
                        int64_t pq = packed ? (b * T + t) * W + h * D + d : iq;
                        buf[pq] = hq[iq];
                    }
                    for (int64_t j = 0; j < Hk; j++) {
                        int64_t src = ((b * Hkv + (r ? j / G : j)) * T + t) * D + d;
                        int64_t pk = packed ? (b * T + t) * W + (H + j) * D + d : B * H * T * D + ((b * Hk + j) * T + t) * D + d;
                        int64_t pv = packed ? (b * T + t) * W + (H + Hk + j) * D + d : B * H * T * D + B * Hk * T * D + ((b * Hk + j) * T + t) * D + d;
                        buf[pk] = hk[src]; buf[pv] = hv[src];
                    }
                }
        dqkv[r] = up(dt, buf, n);
        free(buf);
        if (packed) {
            int64_t st[3] = {T * W, D, W};
            memcpy(sq[r], st, sizeof st); memcpy(sk[r], st, sizeof st); memcpy(sv[r], st, sizeof st);
            koff[r] = H * D; voff[r] = (H + Hk) * D;
        } else {
            int64_t a[3] = {H * T * D, T * D, D}, c[3] = {Hk * T * D, T * D, D};
            memcpy(sq[r], a, sizeof a); memcpy(sk[r], c, sizeof c); memcpy(sv[r], c, sizeof c);
            koff[r] = B * H * T * D; voff[r] = B * H * T * D + B * Hk * T * D;
        }
        dout[r] = dmalloc((size_t)nq * es);
        lse[r] = (float *)dmalloc((size_t)(B * H * T) * 4);
        dgrad[r] = dmalloc((size_t)(nq + 2 * B * Hk * T * D) * es);   /* gq, then gk, gv contiguous */
    }
    for (int r = 0; r < 2; r++) {
        char *base = (char *)dqkv[r];
        const void *Q = base, *K = base + koff[r] * es, *V = base + voff[r] * es;
        int64_t Hk = hkv[r], ng = B * Hk * T * D, sgk[3] = {Hk * T * D, T * D, D};
        char *gq = (char *)dgrad[r], *gk = gq + nq * es, *gv = gk + ng * es;
        bt_k_attention_strided(dt, dout[r], so, lse[r], Q, sq[r], K, sk[r], V, sv[r], B, H, Hk, T, D, (float)(1.0 / sqrt((double)D)),
                               causal, prec, st());
        bt_k_attention_backward_strided(dt, gq, so, gk, sgk, gv, sgk, dg, so, Q, sq[r], K, sk[r], V, sv[r], dout[r], so, lse[r], B, H, Hk,
                                        T, D, (float)(1.0 / sqrt((double)D)), causal, prec, st());
    }
    CK(cudaStreamSynchronize(st()));
    double *a = zvec(nq + 2 * B * H * T * D), *b = zvec(nq + 2 * B * H * T * D);
    char what[160];
    const char *name = dt == BT_F32 ? (prec == BT_MATMUL_TF32 ? "tf32" : "f32") : tname(dt);
    /* out and lse: bits */
    down(dt, dout[0], a, nq); down(dt, dout[1], b, nq);
    snprintf(what, sizeof what, "gqa out != repeated K/V out (elements) %s B%lld H%lld Hkv%lld T%lld D%lld%s%s", name, (long long)B,
             (long long)H, (long long)Hkv, (long long)T, (long long)D, packed ? " packed" : "", causal ? "" : " full");
    int64_t diff = 0;
    for (int64_t i = 0; i < nq; i++) diff += memcmp(&a[i], &b[i], sizeof(double)) != 0;
    check_err(what, (double)diff, 0);
    down(BT_F32, lse[0], a, B * H * T); down(BT_F32, lse[1], b, B * H * T);
    diff = 0;
    for (int64_t i = 0; i < B * H * T; i++) diff += memcmp(&a[i], &b[i], sizeof(double)) != 0;
    snprintf(what, sizeof what, "gqa lse != repeated (elements) %s H%lld Hkv%lld T%lld D%lld", name, (long long)H, (long long)Hkv,
             (long long)T, (long long)D);
    check_err(what, (double)diff, 0);
    /* gradients: dq bits; dk, dv = the group sums of the repeated run's, in fp32, rounded once */
    down(dt, dgrad[0], a, nq + 2 * nk); down(dt, dgrad[1], b, nq + 2 * nq);
    diff = 0;
    for (int64_t i = 0; i < nq; i++) diff += memcmp(&a[i], &b[i], sizeof(double)) != 0;
    int64_t dkv = 0, nan = 0;
    for (int part = 0; part < 2; part++)
        for (int64_t bb = 0; bb < B; bb++)
            for (int64_t j = 0; j < Hkv; j++)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t d = 0; d < D; d++) {
                        float acc = 0.f;
                        for (int64_t g = 0; g < G; g++) acc += (float)b[nq + part * nq + ((bb * H + j * G + g) * T + t) * D + d];
                        double want = q(dt, (double)acc), got = a[nq + part * nk + ((bb * Hkv + j) * T + t) * D + d];
                        nan += got != got;
                        dkv += memcmp(&want, &got, sizeof(double)) != 0;
                    }
    snprintf(what, sizeof what, "gqa dq != repeated (elements) %s H%lld Hkv%lld T%lld D%lld%s", name, (long long)H, (long long)Hkv,
             (long long)T, (long long)D, packed ? " packed" : "");
    check_err(what, (double)diff, 0);
    snprintf(what, sizeof what, "gqa dk, dv != group sums of repeated (elements) %s H%lld Hkv%lld T%lld D%lld%s", name, (long long)H,
             (long long)Hkv, (long long)T, (long long)D, packed ? " packed" : "");
    check_err(what, (double)(dkv + nan), 0);
    for (int r = 0; r < 2; r++) { dfree(dqkv[r]); dfree(dout[r]); dfree(lse[r]); dfree(dgrad[r]); }
    dfree(dg);
    free(a); free(b); free(hq); free(hk); free(hv); free(hg);
}
static void test_attention_gqa(void) {
    NEED_GPU();
    seed(1500);
    gqa_case(BT_BF16, BT_MATMUL_FP32, 2, 12, 4, 1024, 64, 1, 1);    /* l125m's heads: wgmma forward, fused backward */
    gqa_case(BT_BF16, BT_MATMUL_FP32, 1, 8, 2, 300, 128, 0, 1);     /* D 128: the two-kernel wgmma backward */
    gqa_case(BT_F16, BT_MATMUL_FP32, 2, 4, 1, 200, 64, 1, 1);       /* one key/value head (multi-query) */
    gqa_case(BT_BF16, BT_MATMUL_FP32, 2, 6, 3, 100, 32, 1, 1);      /* D 32: the sm_80 kernels */
    gqa_case(BT_BF16, BT_MATMUL_FP32, 1, 4, 2, 200, 64, 0, 0);      /* not causal */
    gqa_case(BT_F32, BT_MATMUL_FP32, 2, 4, 2, 130, 64, 1, 1);       /* strict fp32 (dS scratch) */
    gqa_case(BT_F32, BT_MATMUL_TF32, 1, 4, 2, 70, 64, 0, 1);        /* tf32 tensor cores */
    const bt_k_attention_tuning tdef = bt_k_attention_get_tuning();
    bt_k_attention_tuning tu = tdef;
    tu.fused_tmax = 0;   /* the causal D 64 backward on the two wgmma kernels */
    tu.l2_mb_fwd = tu.l2_mb_bwd = 1; tu.l2_one_mb = 0;   /* and sections of heads */
    bt_k_attention_set_tuning(&tu);
    gqa_case(BT_BF16, BT_MATMUL_FP32, 4, 16, 4, 257, 64, 1, 1);
    bt_k_attention_set_tuning(NULL);
    int was = bt_k_attention_hopper(0);   /* the sm_80 kernels at D 64 */
    gqa_case(BT_BF16, BT_MATMUL_FP32, 2, 8, 2, 150, 64, 1, 1);
    bt_k_attention_hopper(was & 1);
    /* Hkv must divide H */
    int64_t st3[3] = {64, 64, 64};
    BT_EXPECT_ERROR(bt_k_attention_strided(BT_BF16, NULL, st3, NULL, NULL, st3, NULL, st3, NULL, st3, 1, 4, 3, 4, 64, 0.1f, 1,
                                           BT_MATMUL_FP32, st()), "divide");
}
static void test_attention_hopper(void) {
    NEED_GPU();
    int major = 0, minor = 0;
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    int mode = bt_k_attention_hopper(-1);
    fprintf(stderr, "  attention: compute capability %d.%d, wgmma path %s\n", major, minor, mode == 3 ? "on" : "off");
    if (major == 9 && minor == 0)
        BT_CHECK(mode == 3, "the wgmma attention kernels do not run on this 9.0 device (setting + readiness %d): build with "
                            "CUDA_ARCH=90a", mode);
    bt_dtype dts[] = {BT_BF16, BT_F16};
    int64_t Ts[] = {1, 63, 200, g_quick ? 257 : 1000};
    for (int k = 0; k < 2; k++)
        for (int D = 64; D <= 128; D += 64)
            for (int causal = 1; causal >= 0; causal--)
                for (int ti = 0; ti < 4; ti++) {
                    int64_t T = Ts[ti], B = T > 256 ? 1 : 2, H = T > 256 && D == 128 ? 2 : 3;
                    seed(1300 + k * 64 + D + causal * 8 + ti);
                    attn_case(dts[k], BT_MATMUL_FP32, B, H, T, D, ti & 1 ? 1 : 0, ti == 2, causal, 1);
                }
    seed(1400);
    attn_case(BT_BF16, BT_MATMUL_FP32, g_quick ? 2 : 16, 12, 1024, 64, 1, 1, 1, 47);
    attn_case(BT_BF16, BT_MATMUL_FP32, g_quick ? 2 : 16, 12, 1024, 64, 1, 0, 0, 47);
    /* more work items than SMs (the persistent forward takes several per CTA, from its counter) and
       sections of heads with a short last one: B 4, H 37, T 200 is 148 heads x 2 query tiles;
       sections of 1 MiB make a section 20 heads (K, V 50 KiB a head at D 64; 19 for dK/dV, 10 at
       D 128); then the fixed order of the persistent kernels and the plain order (one section of all
       heads), set through the tuning for tests (bt_k_attention_set_tuning) */
    const bt_k_attention_tuning tdef = bt_k_attention_get_tuning();
    bt_k_attention_tuning tu = tdef;
    seed(1410);
    tu.l2_mb_fwd = tu.l2_mb_bwd = 1;
    tu.l2_one_mb = 0;   /* sections even where all heads would fit */
    bt_k_attention_set_tuning(&tu);
    attn_case(BT_BF16, BT_MATMUL_FP32, 4, 37, 200, 64, 1, 1, 1, 5);
    attn_case(BT_BF16, BT_MATMUL_FP32, 4, 37, 200, 64, 0, 0, 0, 5);
    attn_case(BT_F16, BT_MATMUL_FP32, 2, 37, 200, 128, 1, 0, 1, 5);
    tu.order = 1;   /* the fixed snake order of the persistent kernels (the forward's and the fused backward's) */
    bt_k_attention_set_tuning(&tu);
    attn_case(BT_BF16, BT_MATMUL_FP32, 4, 37, 200, 64, 1, 0, 1, 5);
    tu.order = tdef.order;
    tu.l2_mb_fwd = tu.l2_mb_bwd = 0;
    bt_k_attention_set_tuning(&tu);
    attn_case(BT_BF16, BT_MATMUL_FP32, 4, 37, 200, 64, 1, 0, 1, 5);
    attn_case(BT_BF16, BT_MATMUL_FP32, 4, 37, 200, 64, 1, 1, 1, 5);
    attn_case(BT_F16, BT_MATMUL_FP32, 2, 37, 200, 128, 0, 0, 0, 5);
    tu.l2_one_mb = tdef.l2_one_mb;
    /* the causal D 64 backward on the two kernels (dQ; dK/dV) instead of the fused one */
    tu.fused_tmax = 0;
    bt_k_attention_set_tuning(&tu);
    attn_case(BT_BF16, BT_MATMUL_FP32, 4, 37, 200, 64, 1, 1, 1, 5);
    attn_case(BT_F16, BT_MATMUL_FP32, 1, 3, 257, 64, 0, 0, 1, 1);
    tu.fused_tmax = tdef.fused_tmax;
    bt_k_attention_set_tuning(&tu);
    /* the forward at D 64 (three consumer warpgroups on 192-query tiles): several items a CTA, causal
       and not, T not a multiple of 128 or 192 (the last tiles' zero rows and masks, warpgroups wholly
       past T, the causal diagonal across two key tiles) */
    seed(1427);
    attn_case(BT_F16, BT_MATMUL_FP32, 4, 37, 200, 64, 1, 0, 1, 5);
    attn_case(BT_BF16, BT_MATMUL_FP32, 2, 5, 300, 64, 0, 0, 0, 1);
    attn_case(BT_BF16, BT_MATMUL_FP32, 1, 3, 1000, 64, 1, 0, 1, 1);
    attn_case(BT_F16, BT_MATMUL_FP32, 2, 3, 1024, 64, 0, 0, 1, 1);
    /* several items a CTA, not causal, T 1000: the last query tile's two warpgroups past T idle
       through 7 key tiles, more than the ring's 3 stages, while the CTA's next item waits to be
       handed out (a consumer that took it before its idle tiles went back would deadlock the
       producer) */
    seed(1440);
    attn_case(BT_BF16, BT_MATMUL_FP32, 4, 37, 1000, 64, 1, 0, 0, 3);
    /* the fused backward over chunks of heads: a dQ-sum cap of 3 heads at T 200 (2 query tiles of
       32 KiB a head) splits B H = 10 into 3 + 3 + 3 + 1 launches; bits twice */
    size_t prev_cap = bt_k_attention_scratch_cap(3 * 2 * 32768);
    seed(1420);
    attn_case(BT_BF16, BT_MATMUL_FP32, 2, 5, 200, 64, 1, 1, 1, 1);
    bt_k_attention_scratch_cap(prev_cap);
    /* the fused backward beyond T 1024: 9 query tiles (a dQ sum of 9 parts), f16, bits twice; then the
       same T on the two kernels (fused_tmax below it) */
    attn_case(BT_F16, BT_MATMUL_FP32, 1, 3, g_quick ? 257 : 1100, 64, 0, 1, 1, 1);
    /* out's rows only 4-byte aligned (layout 3): O from registers, not through shared memory */
    seed(1430);
    attn_case(BT_BF16, BT_MATMUL_FP32, 2, 3, 200, 64, 3, 0, 1, 1);
    attn_case(BT_F16, BT_MATMUL_FP32, 1, 3, 129, 128, 3, 0, 0, 1);
    tu.fused_tmax = 256;
    bt_k_attention_set_tuning(&tu);
    attn_case(BT_F16, BT_MATMUL_FP32, 1, 3, g_quick ? 257 : 1100, 64, 0, 1, 1, 1);
    bt_k_attention_set_tuning(NULL);
    const bt_k_attention_tuning tnow = bt_k_attention_get_tuning();
    BT_CHECK(!memcmp(&tnow, &tdef, sizeof tnow), "attention tuning not restored to its defaults");
    tu.order = 3;
    BT_EXPECT_ERROR(bt_k_attention_set_tuning(&tu), "order 3");
}
/* causal = 0 on the sm_80 kernels (bf16, f16, strict f32, tf32), the wgmma path switched off */
static void test_attention_full(void) {
    NEED_GPU();
    int prev = bt_k_attention_hopper(0);
    bt_dtype dts[] = {BT_BF16, BT_F16, BT_F32, BT_F32};
    bt_matmul_precision precs[] = {BT_MATMUL_FP32, BT_MATMUL_FP32, BT_MATMUL_FP32, BT_MATMUL_TF32};
    for (int k = 0; k < 4; k++) {
        seed(1500 + k);
        attn_case(dts[k], precs[k], 3, 2, 67, 64, 1, 1, 0, 1);
        attn_case(dts[k], precs[k], 1, 3, g_quick ? 130 : 333, 128, 0, 0, 0, 1);
        attn_case(dts[k], precs[k], 2, 1, 67, 40, 2, 0, 0, 1);   /* odd strides, D padded */
        attn_case(dts[k], precs[k], 1, 2, 1, 64, 1, 0, 0, 1);
    }
    bt_k_attention_hopper(prev & 1);
    BT_CHECK((bt_k_attention_hopper(-1) & 1) == (prev & 1), "attention path setting not restored");
}

static void matmul_case(bt_dtype dt, bt_matmul_precision prec, int ta, int tb, int64_t batch, int use_bias, float alpha,
                        float beta, double tol) {
    int64_t M = 37, N = 77, K = 65;
    int64_t sA = M * K + 5, sB = K * N + 3, sC = M * N + 7;   /* gaps between the matrices */
    if (batch == 1) sA = M * K, sB = K * N, sC = M * N;
    double *A = rvec(batch * sA, -1, 1), *Bm = rvec(batch * sB, -1, 1), *C0 = rvec(batch * sC, -1, 1);
    double *bias = rvec(N, -1, 1), *ref = zvec(batch * sC);
    void *dA = up(dt, A, batch * sA), *dB = up(dt, Bm, batch * sB), *dbias = up(dt, bias, N);
    void *dC = beta != 0 ? up(dt, C0, batch * sC) : dmalloc((size_t)(batch * sC) * tsz(dt));   /* beta 0: C is NaN */
    for (int64_t b = 0; b < batch; b++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t nn = 0; nn < N; nn++) {
                double a = 0;
                for (int64_t kk = 0; kk < K; kk++) {
                    double av = ta ? A[b * sA + kk * M + m] : A[b * sA + m * K + kk];
                    double bv = tb ? Bm[b * sB + nn * K + kk] : Bm[b * sB + kk * N + nn];
                    a += av * bv;
                }
                ref[b * sC + m * N + nn] = alpha * a + (beta != 0 ? beta * C0[b * sC + m * N + nn] : 0) + (use_bias ? bias[nn] : 0);
            }
    for (int rep = 0; rep < 2; rep++) {   /* the second call takes the cached plan */
        if (rep == 1) {
            if (beta != 0) { void *t = up(dt, C0, batch * sC); CK(cudaMemcpy(dC, t, (size_t)(batch * sC) * tsz(dt), cudaMemcpyDeviceToDevice)); dfree(t); }
            else poison(dC, (size_t)(batch * sC) * tsz(dt));
        }
        bt_k_matmul(dt, dC, dA, dB, use_bias ? dbias : NULL, M, N, K, ta, tb, batch, sA, sB, sC, alpha, beta, prec, st());
        /* compare only the matrices (the gaps hold whatever was there) */
        double *h = zvec(batch * sC), *hr = zvec(batch * M * N), *rr = zvec(batch * M * N);
        down(dt, dC, h, batch * sC);
        for (int64_t b = 0; b < batch; b++)
            for (int64_t i = 0; i < M * N; i++) { hr[b * M * N + i] = h[b * sC + i]; rr[b * M * N + i] = ref[b * sC + i]; }
        double e = bt_test_relerr(hr, rr, batch * M * N);
        for (int64_t i = 0; i < batch * M * N; i++) if (hr[i] != hr[i]) e = INFINITY;
        char what[96];
        snprintf(what, sizeof what, "matmul %s%s t%d%d b%lld%s a%.1f b%.1f%s", tname(dt),
                 dt == BT_F32 ? (prec == BT_MATMUL_TF32 ? "/tf32" : "/fp32") : "", ta, tb, (long long)batch,
                 use_bias ? " bias" : "", alpha, beta, rep ? " (cached)" : "");
        check_err(what, e, tol);
        free(h); free(hr); free(rr);
    }
    free(A); free(Bm); free(C0); free(bias); free(ref);
    dfree(dA); dfree(dB); dfree(dbias); dfree(dC);
}
static void test_matmul(void) {
    NEED_GPU();
    seed(1100);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            matmul_case(BT_F32, BT_MATMUL_FP32, ta, tb, 3, 0, 0.7f, 0.3f, 1e-5);
            matmul_case(BT_F32, BT_MATMUL_TF32, ta, tb, 3, 0, 0.7f, 0.3f, 5e-3);
            matmul_case(BT_BF16, BT_MATMUL_FP32, ta, tb, 3, 0, 0.7f, 0.3f, 2e-2);
            matmul_case(BT_F16, BT_MATMUL_FP32, ta, tb, 3, 0, 0.7f, 0.3f, 5e-3);
        }
    matmul_case(BT_F32, BT_MATMUL_FP32, 0, 1, 1, 1, 1.0f, 0.0f, 1e-5);   /* bias epilogue */
    matmul_case(BT_BF16, BT_MATMUL_FP32, 0, 1, 1, 1, 1.0f, 0.0f, 2e-2);
    matmul_case(BT_F32, BT_MATMUL_TF32, 1, 0, 1, 1, 1.0f, 0.5f, 5e-3);   /* bias with beta */
    matmul_case(BT_BF16, BT_MATMUL_FP32, 0, 0, 3, 1, 0.5f, 0.0f, 2e-2);  /* batched: bias kernel */
    matmul_case(BT_F64, BT_MATMUL_FP32, 1, 1, 2, 1, 0.7f, 0.3f, 1e-12);
}

/* the fused epilogues (bt_k_matmul_epi) against a float64 reference on the operands as stored:
   GELU_AUX_BIAS (C = gelu(A B^T + v), aux = the pre-activation), DGELU_BGRAD (C = (A B) gelu'(aux),
   v = column sums of C), DGELU (C alone) and BGRADB (C = A^T B + beta C, v = row sums of A^T), shapes multiples of 8
   where cuBLASLt wants aligned rows, odd elsewhere. GELU is GPT-2's tanh form: the f32 case, at
   1e-5, tells it from the erf form (they differ by up to ~5e-4). */
static double gelu_ref(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_dref(double x) {
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}
static void epi_case(bt_dtype dt, bt_dtype dt_c, bt_k_epilogue epi, int64_t M, int64_t N, int64_t K, float beta, double tol) {
    int ta = epi == BT_K_EPI_BGRADB, tb = epi == BT_K_EPI_GELU_AUX_BIAS;
    int64_t nv = epi == BT_K_EPI_BGRADB ? M : N;
    double *A = rvec(M * K, -1, 1), *Bm = rvec(K * N, -1, 1), *C0 = rvec(M * N, -1, 1), *v = rvec(nv, -1, 1);
    double *aux = rvec(M * N, -2.5, 2.5), *ref = zvec(M * N), *vref = zvec(nv), *auxref = zvec(M * N);
    quant(dt, A, M * K); quant(dt, Bm, K * N); quant(dt_c, C0, M * N); quant(dt_c, v, nv); quant(dt_c, aux, M * N);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double a = 0;
            for (int64_t k = 0; k < K; k++) a += (ta ? A[k * M + m] : A[m * K + k]) * (tb ? Bm[n * K + k] : Bm[k * N + n]);
            if (epi == BT_K_EPI_GELU_AUX_BIAS) { auxref[m * N + n] = a + v[n]; ref[m * N + n] = gelu_ref(a + v[n]); }
            else if (epi == BT_K_EPI_DGELU_BGRAD || epi == BT_K_EPI_DGELU) { ref[m * N + n] = a * gelu_dref(aux[m * N + n]); vref[n] += ref[m * N + n]; }
            else ref[m * N + n] = a + beta * C0[m * N + n];
        }
    if (epi == BT_K_EPI_BGRADB)
        for (int64_t m = 0; m < M; m++) for (int64_t k = 0; k < K; k++) vref[m] += A[k * M + m];
    void *dA = up(dt, A, M * K), *dB = up(dt, Bm, K * N), *dC = up(dt_c, C0, M * N);
    void *dv = epi == BT_K_EPI_GELU_AUX_BIAS ? up(dt_c, v, nv) : dmalloc((size_t)nv * tsz(dt_c));
    void *daux = epi == BT_K_EPI_DGELU_BGRAD || epi == BT_K_EPI_DGELU ? up(dt_c, aux, M * N) : dmalloc((size_t)(M * N) * tsz(dt_c));
    const char *en = epi == BT_K_EPI_GELU_AUX_BIAS ? "gelu_aux_bias" : epi == BT_K_EPI_DGELU_BGRAD ? "dgelu_bgrad"
                   : epi == BT_K_EPI_DGELU ? "dgelu" : "bgradb";
    for (int rep = 0; rep < 2; rep++) {   /* the second call takes the cached plan */
        if (epi != BT_K_EPI_GELU_AUX_BIAS) poison(dv, (size_t)nv * tsz(dt_c));
        if (epi == BT_K_EPI_GELU_AUX_BIAS) poison(daux, (size_t)(M * N) * tsz(dt_c));
        if (beta == 0) poison(dC, (size_t)(M * N) * tsz(dt_c));
        else { void *t = up(dt_c, C0, M * N); CK(cudaMemcpy(dC, t, (size_t)(M * N) * tsz(dt_c), cudaMemcpyDeviceToDevice)); dfree(t); }
        int ok = bt_k_matmul_epi(dt, dt_c, dC, dA, dB, M, N, K, ta, tb, beta, epi, dv, daux, BT_MATMUL_FP32, st());
        char what[96];
        snprintf(what, sizeof what, "matmul_epi %s %s->%s %lldx%lldx%lld%s", en, tname(dt), tname(dt_c), (long long)M,
                 (long long)N, (long long)K, rep ? " (cached)" : "");
        if (!ok) {   /* the bf16 ones are the training path: cuBLASLt must have them on every GPU we run */
            BT_CHECK(dt != BT_BF16, "%s: cuBLASLt offered no algorithm", what);
            if (dt != BT_BF16) printf("info: %s: no cuBLASLt algorithm (the op falls back to separate kernels)\n", what);
            break;
        }
        check_err(what, cmp(dt_c, dC, ref, M * N), tol);
        if (epi == BT_K_EPI_GELU_AUX_BIAS) check_err(what, cmp(dt_c, daux, auxref, M * N), tol);
        else if (epi != BT_K_EPI_DGELU) check_err(what, cmp(dt_c, dv, vref, nv), tol);
    }
    free(A); free(Bm); free(C0); free(v); free(aux); free(ref); free(vref); free(auxref);
    dfree(dA); dfree(dB); dfree(dC); dfree(dv); dfree(daux);
}
/* bt_k_matmul_add: D = A B^T + bias + R against float64, R a separate buffer and R == D (in place) */
static void matmul_add_case(bt_dtype dt, int64_t M, int64_t N, int64_t K, int use_bias, int in_place, double tol) {
    double *A = rvec(M * K, -1, 1), *Bm = rvec(N * K, -1, 1), *R = rvec(M * N, -1, 1), *bias = rvec(N, -1, 1), *ref = zvec(M * N);
    quant(dt, A, M * K); quant(dt, Bm, N * K); quant(dt, R, M * N); quant(dt, bias, N);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double a = R[m * N + n] + (use_bias ? bias[n] : 0);
            for (int64_t k = 0; k < K; k++) a += A[m * K + k] * Bm[n * K + k];
            ref[m * N + n] = a;
        }
    void *dA = up(dt, A, M * K), *dB = up(dt, Bm, N * K), *dR = up(dt, R, M * N), *db = up(dt, bias, N);
    void *dD = in_place ? dR : dmalloc((size_t)(M * N) * tsz(dt));
    if (!in_place) poison(dD, (size_t)(M * N) * tsz(dt));
    bt_k_matmul_add(dt, dD, dA, dB, use_bias ? db : NULL, dR, M, N, K, 0, 1, BT_MATMUL_FP32, st());
    char what[96];
    snprintf(what, sizeof what, "matmul_add %s %lldx%lldx%lld%s%s", tname(dt), (long long)M, (long long)N, (long long)K,
             use_bias ? " bias" : "", in_place ? " in place" : "");
    check_err(what, cmp(dt, dD, ref, M * N), tol);
    if (!in_place) check_err(what, cmp(dt, dR, R, M * N), 0);   /* R is only read */
    free(A); free(Bm); free(R); free(bias); free(ref);
    dfree(dA); dfree(dB); dfree(dR); dfree(db);
    if (!in_place) dfree(dD);
}
static void test_matmul_add(void) {
    NEED_GPU();
    seed(1160);
    matmul_add_case(BT_BF16, 37, 40, 24, 1, 0, 2e-2);
    matmul_add_case(BT_BF16, 37, 40, 24, 0, 1, 2e-2);
    matmul_add_case(BT_F32, 33, 29, 17, 1, 0, 1e-5);
    matmul_add_case(BT_F16, 33, 40, 24, 1, 1, 5e-3);
}
static void test_matmul_epi(void) {
    NEED_GPU();
    seed(1150);
    epi_case(BT_BF16, BT_BF16, BT_K_EPI_GELU_AUX_BIAS, 37, 88, 72, 0.f, 2e-2);
    epi_case(BT_F32, BT_F32, BT_K_EPI_GELU_AUX_BIAS, 37, 88, 72, 0.f, 1e-5);
    epi_case(BT_BF16, BT_BF16, BT_K_EPI_DGELU_BGRAD, 37, 88, 40, 0.f, 2e-2);
    epi_case(BT_F32, BT_F32, BT_K_EPI_DGELU_BGRAD, 37, 88, 40, 0.f, 1e-5);
    epi_case(BT_BF16, BT_BF16, BT_K_EPI_DGELU, 37, 88, 40, 0.f, 2e-2);
    epi_case(BT_F32, BT_F32, BT_K_EPI_DGELU, 37, 88, 40, 0.f, 1e-5);
    epi_case(BT_BF16, BT_BF16, BT_K_EPI_BGRADB, 48, 40, 37, 0.f, 2e-2);
    epi_case(BT_BF16, BT_F32, BT_K_EPI_BGRADB, 48, 40, 37, 1.f, 2e-2);     /* a weight gradient into an fp32 .grad */
    epi_case(BT_F32, BT_F32, BT_K_EPI_BGRADB, 48, 40, 37, 0.5f, 1e-5);
    epi_case(BT_BF16, BT_BF16, BT_K_EPI_GELU_AUX_BIAS, 1031, 3072, 768, 0.f, 2e-2);   /* GPT-2's fc at 1031 rows */
    BT_EXPECT_ERROR(bt_k_matmul_epi(BT_BF16, BT_BF16, NULL, NULL, NULL, 8, 8, 8, 0, 0, 1.f, BT_K_EPI_DGELU_BGRAD, NULL, NULL,
                                    BT_MATMUL_FP32, st()), "needs its vector");
    BT_EXPECT_ERROR(bt_k_matmul_epi(BT_BF16, BT_BF16, NULL, NULL, NULL, 8, 8, 8, 0, 0, 0.f, BT_K_EPI_DGELU, NULL, NULL,
                                    BT_MATMUL_FP32, st()), "needs its aux matrix");
}

static void test_adamw(void) {
    NEED_GPU();
    int64_t n = 1003;
    bt_dtype gdts[] = {BT_F32, BT_BF16, BT_F16};
    char what[96];
    for (int k = 0; k < 3; k++)
        for (int variant = 0; variant < 2; variant++) {   /* 0: aligned, scaled, 3 decay runs; 1: offset by 1, one decay */
            seed(1200 + k * 4 + variant);
            bt_dtype gdt = gdts[k];
            double *p = rvec(n + 1, -1, 1), *m = rvec(n + 1, -0.1, 0.1), *v = rvec(n + 1, 1e-4, 1e-2), *g = rvec(n + 1, -1, 1);
            for (int64_t i = 0; i <= n; i++) v[i] = fabs(v[i]);
            void *dp = up(BT_F32, p, n + 1), *dm = up(BT_F32, m, n + 1), *dv = up(BT_F32, v, n + 1), *dg = up(gdt, g, n + 1);
            double sc = variant == 0 ? 0.5 : 1.0;
            float *dsc = NULL;
            if (variant == 0) { double s1 = sc; dsc = (float *)up(BT_F32, &s1, 1); }
            /* runs: [0, 301) wd 0.1, [301, 302) wd 0, [302, n) wd 0.05 (a run of one element too) */
            bt_k_decay_run runs[3] = {{301, 0.1f}, {302, 0.0f}, {n, 0.05f}};
            bt_k_decay_run *druns = NULL;
            if (variant == 0) {
                CK(cudaMalloc(&druns, sizeof runs));
                CK(cudaMemcpy(druns, runs, sizeof runs, cudaMemcpyHostToDevice));
            }
            int off = variant, step = 3;
            double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
            double *rp = zvec(n), *rm = zvec(n), *rv = zvec(n);
            for (int64_t i = 0; i < n; i++) {
                double gi = g[i + off] * sc, wi = variant ? wd : i < 301 ? 0.1 : i < 302 ? 0.0 : 0.05;
                rm[i] = b1 * m[i + off] + (1 - b1) * gi;
                rv[i] = b2 * v[i + off] + (1 - b2) * gi * gi;
                double mh = rm[i] / (1 - pow(b1, step)), vh = rv[i] / (1 - pow(b2, step));
                rp[i] = p[i + off] - lr * (mh / (sqrt(vh) + eps) + (double)(float)wi * p[i + off]);
            }
            uint16_t *dc = (uint16_t *)dmalloc((size_t)(n + 1) * 2);   /* the bf16 copy, NaN where unwritten */
            CK(cudaMemsetAsync(dc, 0xff, (size_t)(n + 1) * 2, st()));
            bt_k_adamw((float *)dp + off, (char *)dg + off * tsz(gdt), gdt, (float *)dm + off, (float *)dv + off, n,
                       (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, druns, variant == 0 ? 3 : 0, 0, step, dsc,
                       k == 1 ? NULL : dc + off, NULL, st());
            const char *how = variant ? "unaligned" : "scaled, decay runs";
            {   /* the weights in two halves: the same update, the same fp32 bits (joined), m and v the same */
                void *dp2 = up(BT_F32, p, n + 1), *dm2 = up(BT_F32, m, n + 1), *dv2 = up(BT_F32, v, n + 1);
                uint16_t *dh = (uint16_t *)dmalloc((size_t)(n + 1) * 2), *dl = (uint16_t *)dmalloc((size_t)(n + 1) * 2);
                bt_k_f32_split((float *)dp2, dh, dl, n + 1, st());
                /* in two launches, [0, 350) and [350, n): the second from the table's third run (which
                   [302, n) is), its ends counted from run_base 350 elements before its start */
                int64_t cut = 350;
                for (int part = 0; part < 2; part++) {
                    int64_t a = part ? cut : 0, len = part ? n - cut : cut;
                    bt_k_adamw(NULL, (char *)dg + (off + a) * tsz(gdt), gdt, (float *)dm2 + off + a, (float *)dv2 + off + a, len, (float)lr,
                               (float)b1, (float)b2, (float)eps, (float)wd, druns ? druns + 2 * part : NULL, variant == 0 ? 3 - 2 * part : 0,
                               a, step, dsc, dh + off + a, dl + off + a, st());
                }
                bt_k_f32_join(dh, dl, (float *)dp2, n + 1, st());
                double *a = zvec(n), *b = zvec(n), *hh = zvec(n);
                down(BT_F32, (float *)dp + off, a, n);
                snprintf(what, sizeof what, "adamw halves p g=%s %s", tname(gdt), how);
                expect(what, BT_F32, (float *)dp2 + off, a, n, 0.0);
                for (int64_t i = 0; i < n; i++) hh[i] = bt__bf16_to_f32(bt__f32_hi16((float)a[i]));
                snprintf(what, sizeof what, "adamw halves hi g=%s %s", tname(gdt), how);
                expect(what, BT_BF16, dh + off, hh, n, 0.0);
                down(BT_F32, (float *)dm + off, b, n);
                snprintf(what, sizeof what, "adamw halves m g=%s %s", tname(gdt), how);
                expect(what, BT_F32, (float *)dm2 + off, b, n, 0.0);
                down(BT_F32, (float *)dv + off, b, n);
                snprintf(what, sizeof what, "adamw halves v g=%s %s", tname(gdt), how);
                expect(what, BT_F32, (float *)dv2 + off, b, n, 0.0);
                free(a); free(b); free(hh);
                dfree(dp2); dfree(dm2); dfree(dv2); dfree(dh); dfree(dl);
            }
            if (k != 1) {   /* the copy: exactly the stored p rounded to bf16 */
                double *hp = zvec(n);
                down(BT_F32, (float *)dp + off, hp, n);
                quant(BT_BF16, hp, n);
                snprintf(what, sizeof what, "adamw bf16 copy g=%s %s", tname(gdt), how);
                expect(what, BT_BF16, dc + off, hp, n, 0.0);
                free(hp);
            }
            dfree(dc);
            snprintf(what, sizeof what, "adamw p g=%s %s", tname(gdt), how);
            expect(what, BT_F32, (float *)dp + off, rp, n, 1e-5);
            snprintf(what, sizeof what, "adamw m g=%s %s", tname(gdt), how);
            expect(what, BT_F32, (float *)dm + off, rm, n, 1e-5);
            snprintf(what, sizeof what, "adamw v g=%s %s", tname(gdt), how);
            expect(what, BT_F32, (float *)dv + off, rv, n, 1e-5);
            free(p); free(m); free(v); free(g); free(rp); free(rm); free(rv);
            dfree(dp); dfree(dm); dfree(dv); dfree(dg);
            if (dsc) dfree(dsc);
            if (druns) CK(cudaFree(druns));
        }
}

/* f32 -> two halves -> f32 is the identity on every bit pattern but NaN's payload, and the high
   half is the value rounded to nearest, ties away from zero: against the host's bt__f32_hi16 /
   lo16 / join16 on random patterns and the edges (ties, carries into the exponent, infinities,
   the largest finite values, subnormals, zeros, NaNs) */
static void test_f32_halves(void) {
    NEED_GPU();
    const int64_t n = 1 << 16;
    uint32_t *u = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)n);
    uint16_t *h = (uint16_t *)malloc(2 * (size_t)n), *l = (uint16_t *)malloc(2 * (size_t)n);
    uint32_t *back = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)n);
    uint32_t edge[] = {0x00000000u, 0x80000000u, 0x00008000u, 0x80008000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3fffffffu,
                       0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                       0x00000001u, 0x007fffffu, 0x7fffffffu, 0xffffffffu, 0xffff8000u, 0x7fff8000u};
    int ne = (int)(sizeof edge / sizeof edge[0]);
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        u[i] = i < ne ? edge[i] : (uint32_t)x;
    }
    float *du = (float *)dmalloc(sizeof(float) * (size_t)n);
    uint16_t *dh = (uint16_t *)dmalloc(2 * (size_t)n), *dl = (uint16_t *)dmalloc(2 * (size_t)n);
    CK(cudaMemcpy(du, u, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
    bt_k_f32_split(du, dh, dl, n, st());
    CK(cudaMemsetAsync(du, 0, sizeof(float) * (size_t)n, st()));
    bt_k_f32_join(dh, dl, du, n, st());
    CK(cudaStreamSynchronize(st()));
    CK(cudaMemcpy(h, dh, 2 * (size_t)n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(l, dl, 2 * (size_t)n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(back, du, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
    int64_t bad = 0, badr = 0;
    for (int64_t i = 0; i < n; i++) {
        float f; memcpy(&f, &u[i], 4);
        int nan = (u[i] & 0x7fffffffu) > 0x7f800000u;
        uint32_t b = back[i];
        float fb; memcpy(&fb, &b, 4);
        if (h[i] != bt__f32_hi16(f) || l[i] != bt__f32_lo16(f) || (nan ? fb == fb : b != u[i])) bad++;
        if (!nan) {   /* the high half: the nearest bf16, a tie to the larger magnitude */
            double d = f, lo16 = bt__bf16_to_f32((uint16_t)(u[i] >> 16)), up = bt__bf16_to_f32((uint16_t)((u[i] >> 16) + 1));
            if (isinf(up) && !isinf(d)) up = copysign(ldexp(1.0, 128), d);   /* the step past the largest bf16 */
            double hv = bt__bf16_to_f32(h[i]), want = isinf(d) || (u[i] & 0xffffu) == 0 ? d : fabs(d - lo16) < fabs(up - d) ? lo16 : up;
            if (fabs(want) == ldexp(1.0, 128)) want = copysign(INFINITY, want);
            if (hv != want) badr++;
        }
    }
    BT_CHECK(bad == 0 && badr == 0, "f32 halves: %lld of %lld patterns not split and joined exactly, %lld high halves not the nearest",
             (long long)bad, (long long)n, (long long)badr);
    dfree(du); dfree(dh); dfree(dl);
    free(u); free(h); free(l); free(back);
}

/* BT_TEST_ONLY=word runs the tests whose name holds it (e.g. attention) */
static const char *g_only;
#define RUN(fn) do { if (!g_only || strstr(#fn, g_only)) BT_RUN(fn); } while (0)
int main(void) {
    g_quick = bt_test_quick();
    const char *pv = getenv("BT_TEST_PROGRESS");
    g_progress = pv && atoi(pv) != 0;
    g_only = getenv("BT_TEST_ONLY");
    RUN(test_context);
    RUN(test_f32_halves);
    RUN(test_cast_copy_fill);
    RUN(test_random);
    RUN(test_unary);
    RUN(test_binary);
    RUN(test_reduce);
    RUN(test_sum_rows_acc);
    RUN(test_sumsq);
    RUN(test_softmax);
    RUN(test_layernorm);
    RUN(test_rmsnorm);
    RUN(test_embedding);
    RUN(test_cross_entropy);
    RUN(test_attention);
    RUN(test_attention_strided);
    RUN(test_attention_hopper);
    RUN(test_attention_gqa);
    RUN(test_attention_full);
    RUN(test_matmul);
    RUN(test_matmul_epi);
    RUN(test_matmul_add);
    RUN(test_adamw);
    if (have_gpu()) {
        CK(cudaStreamSynchronize(st()));
        CK(cudaGetLastError());
        bt_k_shutdown();
        /* the table: failures first, then the worst error of each family */
        int nfail = 0;
        for (int i = 0; i < g_nrec; i++) nfail += !g_recs[i].ok;
        printf("\n%-58s %10s %10s  %s\n", "check", "rel err", "tol", "");
        int verbose = bt_test_verbose();   /* every check, not only the failures */
        for (int i = 0; i < g_nrec; i++)
            if (!g_recs[i].ok || verbose)
                printf("%-58s %10.3g %10.3g  %s\n", g_recs[i].what, g_recs[i].err, g_recs[i].tol, g_recs[i].ok ? "ok" : "FAIL");
        const char *fam[] = {"cast", "copy", "fill", "uniform", "normal", "unary", "affine", "binary", "reduce", "sumsq",
                             "softmax", "log_softmax", "layernorm", "rmsnorm", "embedding", "cross_entropy", "attention", "matmul", "adamw"};
        for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
            double worst = -1, wt = 0; int cnt = 0; const char *wn = "";
            for (int i = 0; i < g_nrec; i++) {
                size_t l = strlen(fam[f]);
                if (strncmp(g_recs[i].what, fam[f], l) || (g_recs[i].what[l] != ' ' && g_recs[i].what[l] != '_')) continue;
                cnt++;
                double r = g_recs[i].tol > 0 ? g_recs[i].err / g_recs[i].tol : g_recs[i].err;
                double wr = worst < 0 ? -1 : (wt > 0 ? worst / wt : worst);
                if (r > wr) { worst = g_recs[i].err; wt = g_recs[i].tol; wn = g_recs[i].what; }
            }
            if (cnt) printf("%-14s %3d checks, worst vs tol: %-38s %9.2g %9.2g\n", fam[f], cnt, wn, worst, wt);
        }
        printf("%d checks, %d failed\n", g_nrec, nfail);
    }
    return bt_test_summary("test_kernels_gpu");
}
