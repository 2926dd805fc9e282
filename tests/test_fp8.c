/* test_fp8.c - FP8 on the CPU: the e4m3 / e5m2 formats of bt_tensor.h against tests/fp8_ref.h's
   definitions (every one of the 256 codes of each decoded, every finite value encoded back, every
   midpoint between neighbours rounded to the even code, every bf16 and f16 bit pattern and 400,000
   f32 ones encoded as a brute-force nearest-value search does, saturation, NaN); the storage dtypes
   (casts, bt_to_host, ops that refuse them); the scale rule; bt_linear_fp8's forward and backward
   against float64 products of the quantised operands, the error bounded per element by fp32
   accumulation of exact products ((K + 4) 2^-24 of the sum of |products|) plus the one rounding to
   the output's dtype; the current and delayed recipes against hand-computed scales and amax
   histories; and the errors bad arguments raise. tests/test_fp8_gpu.cu checks the GPU's kernels and
   products against the same emulation. */
#include "bt_autograd.h"
#include "tests/bt_test.h"
#include "tests/fp8_ref.h"
#pragma GCC diagnostic ignored "-Wclobbered"   /* BT_EXPECT_ERROR's setjmp: a false positive */
#include <stdlib.h>
#include <stdint.h>

#define CPU bt_cpu()
static const bt_dtype FMTS[2] = {BT_F8E4M3, BT_F8E5M2};
static uint8_t enc(float v, bt_dtype fmt) { return fmt == BT_F8E5M2 ? bt__f32_to_f8e5m2(v) : bt__f32_to_f8e4m3(v); }
static float dec(uint8_t c, bt_dtype fmt) { return fmt == BT_F8E5M2 ? bt__f8e5m2_to_f32(c) : bt__f8e4m3_to_f32(c); }
static float f32_of_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- host random numbers (xorshift64 + Box-Muller) ---- */
static uint64_t g_rs = 88172645463325252ull;
static uint64_t rbits(void) { g_rs ^= g_rs << 13; g_rs ^= g_rs >> 7; g_rs ^= g_rs << 17; return g_rs; }
static double runif(void) { return (double)(rbits() >> 11) * (1.0 / 9007199254740992.0); }
static double rnorm(void) { return sqrt(-2.0 * log(runif() + 1e-300)) * cos(6.283185307179586 * runif()); }

/* =============================================================================================
   the formats
   ============================================================================================= */
/* every code decodes to its definition; the NaN and inf codes are where the formats put them */
static void test_decode_all_codes(void) {
    for (int f = 0; f < 2; f++) {
        bt_dtype fmt = FMTS[f];
        int bad = 0, nans = 0, infs = 0;
        for (int c = 0; c < 256; c++) {
            double want = fr_decode(c, fmt);
            float got = dec((uint8_t)c, fmt);
            if (want != want) { nans++; bad += got == got; continue; }
            if (isinf(want)) infs++;
            bad += !((double)got == want && !signbit(got) == !signbit(want));
            if ((double)got != want) fprintf(stderr, "  %s code 0x%02x: %.9g, expected %.9g\n", bt_dtype_name(fmt), c, got, want);
        }
        BT_CHECK(bad == 0, "%s: %d of 256 codes decode wrongly", bt_dtype_name(fmt), bad);
        BT_CHECK(nans == (fmt == BT_F8E4M3 ? 2 : 6) && infs == (fmt == BT_F8E4M3 ? 0 : 2), "%s: %d NaN codes, %d infinities",
                 bt_dtype_name(fmt), nans, infs);
    }
    BT_CHECK(dec(0x7e, BT_F8E4M3) == 448.f && dec(0x7b, BT_F8E5M2) == 57344.f, "largest finite values");
    BT_CHECK(dec(0x01, BT_F8E4M3) == ldexpf(1, -9) && dec(0x01, BT_F8E5M2) == ldexpf(1, -16), "smallest subnormals");
    BT_CHECK(dec(0x08, BT_F8E4M3) == ldexpf(1, -6) && dec(0x04, BT_F8E5M2) == ldexpf(1, -14), "smallest normals");
    BT_CHECK(isinf(dec(0xfc, BT_F8E5M2)) && dec(0xfc, BT_F8E5M2) < 0, "e5m2 0xfc is -inf");
}
/* every finite value encodes back to its code (signed zeros and subnormals included); the codes
   that are not finite: NaN -> 0x7f, infinities saturate */
static void test_encode_round_trip(void) {
    for (int f = 0; f < 2; f++) {
        bt_dtype fmt = FMTS[f];
        int bad = 0, n = 0;
        for (int c = 0; c < 256; c++) {
            double v = fr_decode(c, fmt);
            if (v != v || isinf(v)) continue;
            n++;
            uint8_t got = enc((float)v, fmt);
            if (got != c) { bad++; fprintf(stderr, "  %s: %.9g encodes to 0x%02x, expected 0x%02x\n", bt_dtype_name(fmt), v, got, c); }
        }
        BT_CHECK(bad == 0 && n == (fmt == BT_F8E4M3 ? 254 : 248), "%s: %d of %d finite values do not round-trip", bt_dtype_name(fmt), bad, n);
        BT_CHECK(enc(NAN, fmt) == 0x7f && enc(-NAN, fmt) == 0x7f, "%s: NaN encodes as 0x%02x / 0x%02x", bt_dtype_name(fmt), enc(NAN, fmt), enc(-NAN, fmt));
        int mc = fr_maxcode(fmt);
        BT_CHECK(enc(INFINITY, fmt) == mc && enc(-INFINITY, fmt) == (0x80 | mc), "%s: infinities saturate to 0x%02x, got 0x%02x / 0x%02x",
                 bt_dtype_name(fmt), mc, enc(INFINITY, fmt), enc(-INFINITY, fmt));
    }
}
/* each midpoint of two neighbouring finite values (exact in f32) goes to the even code, one f32 ulp
   either side to the nearer one; negatives likewise; the midpoint past the largest value saturates */
static void test_ties_to_even(void) {
    for (int f = 0; f < 2; f++) {
        bt_dtype fmt = FMTS[f];
        int bad = 0, n = 0, mc = fr_maxcode(fmt);
        for (int c = 0; c < mc; c++) {
            double lo = fr_decode(c, fmt), hi = fr_decode(c + 1, fmt), mid = (lo + hi) / 2;
            float m = (float)mid;
            if ((double)m != mid) { bad++; continue; }
            int even = (c & 1) ? c + 1 : c;
            for (int s = 0; s < 2; s++) {
                int sg = s ? 0x80 : 0;
                float ms = s ? -m : m;
                n++;
                bad += enc(ms, fmt) != (sg | even);
                bad += enc(nextafterf(ms, s ? -INFINITY : INFINITY), fmt) != (sg | (c + 1));
                bad += enc(nextafterf(ms, 0.f), fmt) != (sg | c);
            }
        }
        BT_CHECK(bad == 0 && n == 2 * mc, "%s: %d wrong of %d midpoints (and their neighbours)", bt_dtype_name(fmt), bad, n);
        /* past the largest finite value: its would-be midpoint with the next power step, and beyond */
        double top = fr_decode(mc, fmt), step = top - fr_decode(mc - 1, fmt);
        float past[4] = {(float)(top + step / 2), (float)(top + step), 1e30f, FLT_MAX};
        for (int i = 0; i < 4; i++)
            BT_CHECK(enc(past[i], fmt) == mc && enc(-past[i], fmt) == (0x80 | mc), "%s: %g does not saturate (0x%02x)", bt_dtype_name(fmt),
                     (double)past[i], enc(past[i], fmt));
    }
    /* the subnormal end: half the smallest subnormal is a tie with zero (-> 0), a hair more rounds up */
    BT_CHECK(enc(ldexpf(1, -10), BT_F8E4M3) == 0x00 && enc(nextafterf(ldexpf(1, -10), 1), BT_F8E4M3) == 0x01 &&
             enc(-ldexpf(1, -10), BT_F8E4M3) == 0x80, "e4m3 at 2^-10");
    BT_CHECK(enc(ldexpf(1, -17), BT_F8E5M2) == 0x00 && enc(nextafterf(ldexpf(1, -17), 1), BT_F8E5M2) == 0x01, "e5m2 at 2^-17");
    BT_CHECK(enc(1.5f * ldexpf(1, -9), BT_F8E4M3) == 0x02 && enc(2.5f * ldexpf(1, -9), BT_F8E4M3) == 0x02, "e4m3 subnormal ties 1.5, 2.5 ulp");
    BT_CHECK(enc(f32_of_bits(1), BT_F8E4M3) == 0 && enc(-f32_of_bits(1), BT_F8E4M3) == 0x80 && enc(-0.f, BT_F8E5M2) == 0x80,
             "f32 subnormals and -0 give signed zeros");
}
/* a brute-force nearest-value search (fp8_ref.h) against the encoder: every bf16 and f16 bit
   pattern (the dtypes the layer casts from), 200,000 random f32 bit patterns (every exponent) and
   200,000 f32 values spread over the formats' ranges */
static void test_encode_vs_search(void) {
    for (int f = 0; f < 2; f++) {
        bt_dtype fmt = FMTS[f];
        long bad = 0, n = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            float vb = bt__bf16_to_f32((uint16_t)h), vh = bt__f16_to_f32((uint16_t)h);
            bad += enc(vb, fmt) != fr_encode(vb, fmt);
            bad += enc(vh, fmt) != fr_encode(vh, fmt);
            n += 2;
        }
        for (int i = 0; i < 200000; i++) {
            float v = f32_of_bits((uint32_t)rbits());
            float w = (float)(ldexp(runif() + 0.5, (int)(runif() * 44) - 22) * (runif() < 0.5 ? -1 : 1));
            bad += enc(v, fmt) != fr_encode(v, fmt);
            bad += enc(w, fmt) != fr_encode(w, fmt);
            n += 2;
        }
        BT_CHECK(bad == 0, "%s: %ld of %ld encodings differ from the nearest-value search", bt_dtype_name(fmt), bad, n);
    }
}

/* FP8 tensors: bt_cast and bt__st encode (unscaled, saturating), bt_to_host decodes, ops refuse them */
static void test_storage_dtypes(void) {
    BT_CHECK(bt_dtype_size(BT_F8E4M3) == 1 && bt_dtype_size(BT_F8E5M2) == 1, "sizes");
    BT_CHECK(!strcmp(bt_dtype_name(BT_F8E4M3), "f8e4m3") && !strcmp(bt_dtype_name(BT_F8E5M2), "f8e5m2"), "names");
    BT_CHECK(!bt_dtype_is_float(BT_F8E4M3) && !bt_dtype_is_float(BT_F8E5M2), "FP8 is a storage dtype, not a compute one");
    bt_scope_begin();
    float v[8] = {0.3f, -1000.f, 0.0013f, 448.f, -3.25f, 6e4f, -1e-6f, 17.f};
    bt_tensor *t = bt_from_data(v, bt_shape2(2, 4), BT_F32, CPU);
    for (int f = 0; f < 2; f++) {
        bt_dtype fmt = FMTS[f];
        bt_tensor *q = bt_cast(t, fmt);
        const uint8_t *b = (const uint8_t *)bt_data_ptr(q);
        double back[8];
        bt_to_host(q, back, BT_F64);
        int bad = 0;
        for (int i = 0; i < 8; i++) bad += b[i] != fr_encode(v[i], fmt) || back[i] != fr_decode(b[i], fmt);
        BT_CHECK(bad == 0 && q->dtype == fmt, "%s: cast / to_host: %d wrong", bt_dtype_name(fmt), bad);
        bt_tensor *tq = bt_transpose(q, 0, 1), *c = bt_contiguous(tq);   /* a strided copy moves bytes */
        int64_t ix[2] = {3, 1};
        BT_CHECK(bt_get(c, ix) == fr_decode(b[7], fmt), "%s: a transposed copy", bt_dtype_name(fmt));
        BT_EXPECT_ERROR(bt_exp(q), "must be a float tensor");
        BT_EXPECT_ERROR(bt_linear(q, q, NULL), "must be a float tensor");
        BT_EXPECT_ERROR(bt_set_requires_grad(q, 1), "only float tensors");
    }
    bt_scope_end();
}

/* s = amax / fmax in f32, floored at FLT_MIN; 1 for 0, inf, NaN */
static void test_scale_rule(void) {
    BT_CHECK(bt_fp8_scale_of(448.f, 448.f) == 1.f, "448 / 448");
    BT_CHECK(bt_fp8_scale_of(3.5f, 448.f) == 0.0078125f, "3.5 / 448 = 2^-7: %g", (double)bt_fp8_scale_of(3.5f, 448.f));
    BT_CHECK(bt_fp8_scale_of(2.5f, 448.f) == 2.5f / 448.f && bt_fp8_scale_of(0.004f, 57344.f) == 0.004f / 57344.f, "f32 quotients");
    BT_CHECK(bt_fp8_scale_of(1e6f, 57344.f) == 1e6f / 57344.f, "a scale above 1");
    BT_CHECK(bt_fp8_scale_of(0.f, 448.f) == 1.f && bt_fp8_scale_of(INFINITY, 448.f) == 1.f && bt_fp8_scale_of(NAN, 448.f) == 1.f &&
             bt_fp8_scale_of(-2.f, 448.f) == 1.f, "0, inf, NaN, negative -> 1");
    BT_CHECK(bt_fp8_scale_of(1e-40f, 448.f) == FLT_MIN && isfinite(1.f / bt_fp8_scale_of(1e-40f, 448.f)), "a subnormal amax -> FLT_MIN");
    BT_CHECK(bt_fp8_max(BT_F8E4M3) == 448.f && bt_fp8_max(BT_F8E5M2) == 57344.f && bt_fp8_format(BT_FP8_G) == BT_F8E5M2 &&
             bt_fp8_format(BT_FP8_X) == BT_F8E4M3 && bt_fp8_format(BT_FP8_W) == BT_F8E4M3, "formats and maxima");
    /* the cast of a tensor's largest element lands on fmax (or one rounding of it: saturation keeps it there) */
    float a = 2.5f, s = bt_fp8_scale_of(a, 448.f);
    BT_CHECK(bt_fp8_quantize(a, 1.f / s, BT_F8E4M3) == 0x7e && bt_fp8_quantize(-a, 1.f / s, BT_F8E4M3) == 0xfe, "amax -> +-448");
}

/* =============================================================================================
   bt_linear_fp8 against float64 products of the quantised operands
   ============================================================================================= */
/* n values N(0, std) rounded to dt; planted: element `at` is exactly `amax` (others clipped below it), unless amax <= 0 */
static float *values(long n, double std, bt_dtype dt, long at, float amax) {
    float *v = (float *)malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) {
        double x = rnorm() * std;
        if (amax > 0 && fabs(x) > 0.9 * amax) x = x > 0 ? 0.9 * amax : -0.9 * amax;
        v[i] = (float)x;
    }
    if (amax > 0) v[at] = amax;
    bt_scope_begin();                              /* rounded to dt, as the op will see them */
    bt_tensor *t = bt_cast(bt_from_data(v, bt_shape1(n), BT_F32, CPU), dt);
    bt_to_host(t, v, BT_F32);
    bt_scope_end();
    return v;
}
static bt_tensor *leaf_of(const float *v, bt_shape s, bt_dtype dt, int grad) {
    bt_scope_begin();
    bt_tensor *t = bt_keep(bt_cast(bt_from_data(v, s, BT_F32, CPU), dt));
    bt_scope_end();
    if (grad) bt_set_requires_grad(t, 1);
    return t;
}
static double *as_doubles(bt_tensor *t) { return bt_test_host(t); }

/* one step of the layer and its reference. The scales the reference assumes: sx, sw, sg (0: the
   tensor's own, current scaling). Returns the worst error / bound over y, dx, dw, db (<= 1 passes);
   *plain_ratio gets y against the unquantised x w^T + b, which must be far outside the bound */
typedef struct { double y, dx, dw, db, plain; } step_err;
static step_err layer_step(bt_fp8_state *st, bt_dtype dt, const float *xv, bt_shape xs, const float *wv, long N, const float *bv,
                           const float *gv, float sx, float sw, float sg) {
    step_err e = {0, 0, 0, 0, 0};
    long K = (long)xs.d[xs.ndim - 1], R = 1;
    for (int d = 0; d < xs.ndim - 1; d++) R *= (long)xs.d[d];
    bt_tensor *x = leaf_of(xv, xs, dt, 1), *w = leaf_of(wv, bt_shape2(N, K), dt, 1), *b = bv ? leaf_of(bv, bt_shape1(N), dt, 1) : NULL;
    bt_scope_begin();
    bt_tensor *y = bt_linear_fp8(x, w, b, st);
    bt_shape ys = xs; ys.d[ys.ndim - 1] = N;
    bt_backward_with(y, bt_cast(bt_from_data(gv, ys, BT_F32, CPU), dt));
    double *yd = as_doubles(y), *dx = as_doubles(x->grad), *dw = as_doubles(w->grad), *db = b ? as_doubles(b->grad) : NULL;
    bt_scope_end();
    if (!sx) sx = bt_fp8_scale_of(fr_amax(xv, R * K), 448.f);
    if (!sw) sw = bt_fp8_scale_of(fr_amax(wv, N * K), 448.f);
    if (!sg) sg = bt_fp8_scale_of(fr_amax(gv, R * N), 57344.f);
    uint8_t *qx = (uint8_t *)malloc((size_t)(R * K)), *qw = (uint8_t *)malloc((size_t)(N * K)), *qg = (uint8_t *)malloc((size_t)(R * N));
    uint8_t *qxt = (uint8_t *)malloc((size_t)(R * K)), *qwt = (uint8_t *)malloc((size_t)(N * K)), *qgt = (uint8_t *)malloc((size_t)(R * N));
    fr_quantize(xv, R * K, sx, BT_F8E4M3, qx); fr_quantize(wv, N * K, sw, BT_F8E4M3, qw); fr_quantize(gv, R * N, sg, BT_F8E5M2, qg);
    fr_transpose(qx, R, K, qxt); fr_transpose(qw, N, K, qwt); fr_transpose(qg, R, N, qgt);
    double *bias = (double *)calloc((size_t)N, sizeof(double));
    for (long j = 0; bv && j < N; j++) bias[j] = bv[j];
    double *yr = (double *)malloc(sizeof(double) * (size_t)(R * N)), *ys_ = (double *)malloc(sizeof(double) * (size_t)(R * N));
    double *dxr = (double *)malloc(sizeof(double) * (size_t)(R * K)), *dxs = (double *)malloc(sizeof(double) * (size_t)(R * K));
    double *dwr = (double *)malloc(sizeof(double) * (size_t)(N * K)), *dws = (double *)malloc(sizeof(double) * (size_t)(N * K));
    double u32 = ldexp(1, -24);
    fr_gemm(qx, BT_F8E4M3, sx, qw, BT_F8E4M3, sw, bv ? bias : NULL, R, N, K, yr, ys_);
    fr_gemm(qg, BT_F8E5M2, sg, qwt, BT_F8E4M3, sw, NULL, R, K, N, dxr, dxs);     /* dx = (sg sw) qg qw */
    fr_gemm(qgt, BT_F8E5M2, sg, qxt, BT_F8E4M3, sx, NULL, N, K, R, dwr, dws);    /* dw = (sg sx) qg^T qx */
    e.y = fr_check(yd, yr, ys_, R * N, (K + 4) * u32, dt, NULL);
    e.dx = fr_check(dx, dxr, dxs, R * K, (N + 4) * u32, dt, NULL);
    e.dw = fr_check(dw, dwr, dws, N * K, (R + 4) * u32, dt, NULL);
    if (bv) {   /* db = the column sums of gy itself (not quantised), as bt_linear's */
        double *dbr = (double *)calloc((size_t)N, sizeof(double)), *dbs = (double *)calloc((size_t)N, sizeof(double));
        for (long r = 0; r < R; r++) for (long j = 0; j < N; j++) { dbr[j] += gv[r * N + j]; dbs[j] += fabs(gv[r * N + j]); }
        e.db = fr_check(db, dbr, dbs, N, (R + 4) * u32, dt, NULL);
        free(dbr); free(dbs);
    }
    for (long r = 0; r < R; r++)        /* the unquantised product: the op must be visibly off it */
        for (long j = 0; j < N; j++) {
            double s = bias[j], sa = fabs(bias[j]);
            for (long k = 0; k < K; k++) { s += (double)xv[r * K + k] * wv[j * K + k]; sa += fabs((double)xv[r * K + k] * wv[j * K + k]); }
            yr[r * N + j] = s; ys_[r * N + j] = sa;
        }
    e.plain = fr_check(yd, yr, ys_, R * N, (K + 4) * u32, dt, NULL);
    free(qx); free(qw); free(qg); free(qxt); free(qwt); free(qgt); free(bias);
    free(yr); free(ys_); free(dxr); free(dxs); free(dwr); free(dws); free(yd); free(dx); free(dw); free(db);
    bt_release(x); bt_release(w); bt_release(b);
    return e;
}
#define CHECK_STEP(e, what) BT_CHECK((e).y <= 1 && (e).dx <= 1 && (e).dw <= 1 && (e).db <= 1, \
    "%s: error / bound: y %.3g, dx %.3g, dw %.3g, db %.3g", what, (e).y, (e).dx, (e).dw, (e).db)

/* current scaling, f32, bf16, f16 and f64, with and without a bias, a 3-D x, K and N of any size */
static void test_linear_fp8_current(void) {
    const bt_dtype dts[4] = {BT_F32, BT_BF16, BT_F16, BT_F64};
    struct { bt_shape xs; long N; int bias; } cs[3] = {{bt_shape3(2, 5, 37), 23, 1}, {bt_shape2(16, 64), 48, 0}, {bt_shape2(9, 300), 7, 1}};
    for (int d = 0; d < 4; d++)
        for (int c = 0; c < 3; c++) {
            bt_dtype dt = dts[d];
            long K = (long)cs[c].xs.d[cs[c].xs.ndim - 1], N = cs[c].N, R = 1;
            for (int i = 0; i < cs[c].xs.ndim - 1; i++) R *= (long)cs[c].xs.d[i];
            /* x of order 1, w small (a scale far from 1), gy small (e5m2's scale): every scale matters */
            float *xv = values(R * K, 0.8, dt, 0, 0), *wv = values(N * K, 0.04, dt, 0, 0), *bv = cs[c].bias ? values(N, 0.3, dt, 0, 0) : NULL;
            float *gv = values(R * N, 1e-3, dt, 0, 0);
            bt_fp8_state st;
            bt_fp8_state_init(&st, NULL, CPU, NULL);
            step_err e = layer_step(&st, dt, xv, cs[c].xs, wv, N, bv, gv, 0, 0, 0);
            char what[96];
            snprintf(what, sizeof what, "%s, [%ld, %ld] x [%ld, %ld]^T%s", bt_dtype_name(dt), R, K, N, K, cs[c].bias ? " + b" : "");
            CHECK_STEP(e, what);
            BT_CHECK(e.plain > 4, "%s: y is within %.3g of the bound from the unquantised product: is it quantising?", what, e.plain);
            if (bt_test_verbose()) printf("  %-36s y %.3f dx %.3f dw %.3f db %.3f (of the bound), unquantised %.1f\n", what, e.y, e.dx, e.dw, e.db, e.plain);
            bt_fp8_state_free(&st);
            free(xv); free(wv); free(bv); free(gv);
        }
}

/* the state's rows after a step: row r of st [amax, scale, h0, h1, h2] against want */
static int state_is(bt_fp8_state *st, int role, const float *want, int n) {
    float *b = (float *)bt_data_ptr(st->buf) + role * (2 + n);
    int ok = 1;
    for (int i = 0; i < 2 + n; i++) ok &= b[i] == want[i];
    if (!ok) {
        fprintf(stderr, "  state row %d:", role);
        for (int i = 0; i < 2 + n; i++) fprintf(stderr, " %.9g (want %.9g)", b[i], want[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}
/* Delayed scaling, history 3, over three steps whose amaxes are planted (x: 2.5, 0.75, 6; gy: 0.004,
   0.01, 0.002; w fixed): the first step scales as current scaling does (no history yet), later ones
   by max(history) / fmax, which clips the larger steps' values (saturation). After each update the
   rows hold [0, scale, history newest first]; three updates with no casts empty the history and
   the scale returns to 1. Current scaling under the same steps scales each cast by its own amax. */
static void test_recipes(void) {
    const long R = 12, K = 40, N = 24;
    const float A[3] = {2.5f, 0.75f, 6.f}, G[3] = {0.004f, 0.01f, 0.002f}, AW = 0.125f;
    float *wv = values(N * K, 0.03, BT_F32, 5, AW), *bv = values(N, 0.2, BT_F32, 0, 0);
    float *xv[3], *gv[3];
    for (int t = 0; t < 3; t++) { xv[t] = values(R * K, 0.5, BT_F32, 7 * t + 1, A[t]); gv[t] = values(R * N, 0.002, BT_F32, 3 * t + 2, G[t]); }
    for (int rec = 0; rec < 2; rec++) {
        bt_fp8_opts o = bt_fp8_default_opts();
        o.recipe = rec ? BT_FP8_DELAYED : BT_FP8_CURRENT; o.history = 3;
        bt_fp8_state st;
        bt_fp8_state_init(&st, &o, CPU, NULL);
        BT_CHECK(bt_numel(st.buf) == 15 && bt_fp8_state_floats(&o) == 15, "a state of 3 x (2 + 3) floats");
        const char *name = rec ? "delayed" : "current";
        float hx[3] = {0, 0, 0}, hg[3] = {0, 0, 0};    /* the histories, newest first */
        for (int t = 0; t < 3; t++) {
            /* the scales this step must use */
            float mx = hx[0] > hx[1] ? hx[0] : hx[1], mg = hg[0] > hg[1] ? hg[0] : hg[1];
            mx = mx > hx[2] ? mx : hx[2]; mg = mg > hg[2] ? mg : hg[2];
            float sx = rec && t ? mx / 448.f : A[t] / 448.f, sg = rec && t ? mg / 57344.f : G[t] / 57344.f, sw = AW / 448.f;
            step_err e = layer_step(&st, BT_F32, xv[t], bt_shape2(R, K), wv, N, bv, gv[t], sx, sw, sg);
            char what[64];
            snprintf(what, sizeof what, "%s step %d", name, t + 1);
            CHECK_STEP(e, what);
            if (rec && t) {   /* the reference with the tensor's own scales must not pass: the test tells the recipes apart */
                step_err c = layer_step(&st, BT_F32, xv[t], bt_shape2(R, K), wv, N, bv, gv[t], A[t] / 448.f, sw, G[t] / 57344.f);
                BT_CHECK(c.y > 4 && c.dx > 4, "%s: current scaling's reference also fits (y %.3g, dx %.3g)", what, c.y, c.dx);
            }
            /* before this step's update: the casts' amax, the scale the last update left (1 before any; current
               scaling keeps it too, unused), the history */
            float rx[5] = {A[t], t ? mx / 448.f : 1.f, hx[0], hx[1], hx[2]}, rg[5] = {G[t], t ? mg / 57344.f : 1.f, hg[0], hg[1], hg[2]};
            float rw[5] = {AW, t ? AW / 448.f : 1.f, t ? AW : 0.f, t > 1 ? AW : 0.f, 0.f};
            BT_CHECK(state_is(&st, BT_FP8_X, rx, 3) && state_is(&st, BT_FP8_W, rw, 3) && state_is(&st, BT_FP8_G, rg, 3),
                     "%s: the state before the update", what);
            bt_fp8_update(&st);
            hx[2] = hx[1]; hx[1] = hx[0]; hx[0] = A[t]; hg[2] = hg[1]; hg[1] = hg[0]; hg[0] = G[t];
            mx = hx[0] > hx[1] ? hx[0] : hx[1]; mx = mx > hx[2] ? mx : hx[2];
            mg = hg[0] > hg[1] ? hg[0] : hg[1]; mg = mg > hg[2] ? mg : hg[2];
            float ux[5] = {0, mx / 448.f, hx[0], hx[1], hx[2]}, ug[5] = {0, mg / 57344.f, hg[0], hg[1], hg[2]};
            BT_CHECK(st.primed == 7 && !st.seen && state_is(&st, BT_FP8_X, ux, 3) && state_is(&st, BT_FP8_G, ug, 3), "%s: the state after the update", what);
        }
        /* updates without casts: zeros enter, the oldest amaxes leave, an empty history scales by 1 */
        const float after[3][5] = {{0, 6.f / 448.f, 0, 6.f, 0.75f}, {0, 6.f / 448.f, 0, 0, 6.f}, {0, 1.f, 0, 0, 0}};
        for (int k = 0; k < 3; k++) {
            bt_fp8_update(&st);
            BT_CHECK(state_is(&st, BT_FP8_X, after[k], 3), "%s: update %d without casts", name, k + 1);
        }
        bt_fp8_state_free(&st);
    }
    for (int t = 0; t < 3; t++) { free(xv[t]); free(gv[t]); }
    free(wv); free(bv);
}

/* Delayed scaling primes each tensor on its own: after a forward-only step and an update, x and w
   scale from their histories while gy, cast for the first time, scales by its own amax (as current
   scaling does), not by the scale 1 of its empty history */
static void test_delayed_first_casts(void) {
    const long R = 16, K = 32, N = 16;
    float *wv = values(N * K, 0.03, BT_F32, 3, 0.125f), *x1 = values(R * K, 0.5, BT_F32, 5, 2.5f), *x2 = values(R * K, 0.2, BT_F32, 9, 0.75f);
    float *gv = values(R * N, 0.001, BT_F32, 4, 0.004f);
    bt_fp8_opts o = bt_fp8_default_opts();
    o.recipe = BT_FP8_DELAYED; o.history = 2;
    bt_fp8_state st;
    bt_fp8_state_init(&st, &o, CPU, NULL);
    bt_tensor *x = leaf_of(x1, bt_shape2(R, K), BT_F32, 0), *w = leaf_of(wv, bt_shape2(N, K), BT_F32, 0);
    bt_scope_begin();
    bt_linear_fp8(x, w, NULL, &st);                   /* an evaluation: no backward */
    bt_scope_end();
    BT_CHECK(st.seen == 3 && !st.primed, "x and w seen, nothing primed (seen %u, primed %u)", st.seen, st.primed);
    bt_fp8_update(&st);
    BT_CHECK(st.primed == 3 && !st.seen, "x and w primed, gy not (primed %u)", st.primed);
    step_err e = layer_step(&st, BT_F32, x2, bt_shape2(R, K), wv, N, NULL, gv, 2.5f / 448.f, 0.125f / 448.f, 0.004f / 57344.f);
    CHECK_STEP(e, "delayed x and w, gy's first cast current");
    step_err c = layer_step(&st, BT_F32, x2, bt_shape2(R, K), wv, N, NULL, gv, 2.5f / 448.f, 0.125f / 448.f, 1.f);
    BT_CHECK(c.dx > 4 && c.dw > 4, "the empty history's scale 1 also fits gy (dx %.3g, dw %.3g)", c.dx, c.dw);
    bt_fp8_update(&st);
    BT_CHECK(st.primed == 7, "all primed after the step's update (%u)", st.primed);
    bt_release(x); bt_release(w);
    bt_fp8_state_free(&st);
    free(wv); free(x1); free(x2); free(gv);
}

/* The FP8 head, bt_linear_cross_entropy_fp8 (the products emulated on the CPU):
   - one chunk: the loss, x's and w's gradients and the states are those of the composition
     bt_cross_entropy(bt_linear_fp8(x, w)) bit for bit, over three steps of each recipe;
   - several chunks with a delayed recipe's scales (one scale for every chunk): the casts give the
     same bytes, so dx is the same bits and the recorded amaxes too (the largest over the chunks),
     the loss and dw (summed over the chunks in fp32) within fp32's rounding;
   - without grad mode it is bt_linear_cross_entropy and leaves the state alone; its errors. */
static void test_lxent_fp8(void) {
    const long B = 2, T = 16, C = 16, VP = 64, V = 60, N = B * T;
    int32_t tg[32];
    for (long i = 0; i < N; i++) tg[i] = (int32_t)((i * 37 + 11) % V);
    tg[5] = -1;                                           /* an ignored row */
    float *xv = values(N * C, 1.0, BT_F32, 3, 3.f), *wv = values(VP * C, 0.3, BT_F32, 7, 0.9f);
    for (int rec = 0; rec < 2; rec++) {
        bt_fp8_opts o = bt_fp8_default_opts();
        o.recipe = rec ? BT_FP8_DELAYED : BT_FP8_CURRENT; o.history = 3;
        bt_fp8_state st[2];
        bt_fp8_state_init(&st[0], &o, CPU, NULL); bt_fp8_state_init(&st[1], &o, CPU, NULL);
        bt_tensor *x[2], *w[2];
        for (int k = 0; k < 2; k++) { x[k] = leaf_of(xv, bt_shape3(B, T, C), BT_F32, 1); w[k] = leaf_of(wv, bt_shape2(VP, C), BT_F32, 1); }
        int bad = 0;
        for (int step = 0; step < 3; step++) {
            bt_scope_begin();
            bt_tensor *t = bt_from_data(tg, bt_shape2(B, T), BT_I32, CPU), *l[2];
            l[0] = bt_cross_entropy(bt_linear_fp8(x[0], w[0], NULL, &st[0]), t, V, -1);
            l[1] = bt_linear_cross_entropy_fp8(x[1], w[1], t, V, -1, &st[1]);
            for (int k = 0; k < 2; k++) bt_backward(l[k]);
            bad += memcmp(bt_data_ptr(l[0]), bt_data_ptr(l[1]), 4) != 0;
            bad += memcmp(bt_data_ptr(x[0]->grad), bt_data_ptr(x[1]->grad), 4 * (size_t)(N * C)) != 0;
            bad += memcmp(bt_data_ptr(w[0]->grad), bt_data_ptr(w[1]->grad), 4 * (size_t)(VP * C)) != 0;
            bt_fp8_update(&st[0]); bt_fp8_update(&st[1]);
            bad += memcmp(bt_data_ptr(st[0].buf), bt_data_ptr(st[1].buf), 4 * (size_t)bt_numel(st[0].buf)) != 0 || st[0].primed != st[1].primed;
            bt_scope_end();
        }
        BT_CHECK(!bad && st[1].primed == 7, "%s, one chunk: %d losses, gradients or states differ from the composition's",
                 rec ? "delayed" : "current", bad);
        if (rec) {                                        /* the primed states: chunks of 8 rows against one chunk */
            bt_fp8_state c;
            bt_fp8_state_init(&c, &o, CPU, NULL);
            memcpy(bt_data_ptr(c.buf), bt_data_ptr(st[1].buf), 4 * (size_t)bt_numel(c.buf)); c.primed = st[1].primed;
            for (int k = 0; k < 2; k++) { bt_test_drop_grad(x[k]); bt_test_drop_grad(w[k]); }
            size_t old = bt_linear_cross_entropy_chunk(0);
            bt_scope_begin();
            bt_tensor *t = bt_from_data(tg, bt_shape2(B, T), BT_I32, CPU);
            bt_tensor *l1 = bt_linear_cross_entropy_fp8(x[1], w[1], t, V, -1, &st[1]);
            bt_linear_cross_entropy_chunk((size_t)(8 * VP * 4));   /* 8 rows of f32 logits */
            bt_tensor *l8 = bt_linear_cross_entropy_fp8(x[0], w[0], t, V, -1, &c);
            bt_linear_cross_entropy_chunk(old);
            bt_backward(l1); bt_backward(l8);
            double el = fabs((double)*(float *)bt_data_ptr(l8) / *(float *)bt_data_ptr(l1) - 1), ew = 0, nw = 0;
            const float *g1 = (const float *)bt_data_ptr(w[1]->grad), *g8 = (const float *)bt_data_ptr(w[0]->grad);
            for (long i = 0; i < VP * C; i++) { ew = fmax(ew, fabs((double)g8[i] - g1[i])); nw = fmax(nw, fabs((double)g1[i])); }
            const float *r1 = (const float *)bt_data_ptr(st[1].buf), *r8 = (const float *)bt_data_ptr(c.buf);
            int amax_same = 1;
            for (int r = 0; r < 3; r++) amax_same &= memcmp(r1 + r * (2 + o.history), r8 + r * (2 + o.history), 4) == 0;
            BT_CHECK(el < 1e-6 && ew <= 1e-6 * nw && amax_same &&
                         !memcmp(bt_data_ptr(x[0]->grad), bt_data_ptr(x[1]->grad), 4 * (size_t)(N * C)),
                     "4 chunks against 1: loss %.3g, dw %.3g of max |dw|, amaxes %s, dx %s", el, nw > 0 ? ew / nw : ew,
                     amax_same ? "equal" : "differ", memcmp(bt_data_ptr(x[0]->grad), bt_data_ptr(x[1]->grad), 4 * (size_t)(N * C)) ? "differs" : "equal");
            bt_scope_end();
            bt_fp8_state_free(&c);
        }
        bt_scope_begin();                                 /* an evaluation: bt_linear_cross_entropy's loss, the state untouched */
        int g = bt_set_grad_enabled(0);
        unsigned seen = st[1].seen;
        bt_tensor *t = bt_from_data(tg, bt_shape2(B, T), BT_I32, CPU);
        bt_tensor *e8 = bt_linear_cross_entropy_fp8(x[1], w[1], t, V, -1, &st[1]), *e = bt_linear_cross_entropy(x[1], w[1], t, V, -1);
        bt_set_grad_enabled(g);
        BT_CHECK(!memcmp(bt_data_ptr(e8), bt_data_ptr(e), 4) && st[1].seen == seen && !e8->grad_fn, "without grad mode: not bt_linear_cross_entropy's loss");
        bt_scope_end();
        for (int k = 0; k < 2; k++) { bt_release(x[k]); bt_release(w[k]); bt_fp8_state_free(&st[k]); }
    }
    bt_scope_begin();
    bt_fp8_state s1;
    bt_fp8_state_init(&s1, NULL, CPU, NULL);
    bt_tensor *x = leaf_of(xv, bt_shape2(N, C), BT_F32, 1), *w = leaf_of(wv, bt_shape2(VP, C), BT_F32, 1);
    tg[3] = (int32_t)V;
    bt_tensor *t = bt_from_data(tg, bt_shape1(N), BT_I32, CPU);
    BT_EXPECT_ERROR(bt_linear_cross_entropy_fp8(x, w, t, V, -1, NULL), "linear_cross_entropy_fp8: no FP8 state");
    BT_EXPECT_ERROR(bt_linear_cross_entropy_fp8(x, w, t, V, -1, &s1),
                    "linear_cross_entropy_fp8: target 60 at position 3 is out of range [0, 60) and not ignore_index -1");
    BT_EXPECT_ERROR(bt_linear_cross_entropy_fp8(x, bt_randn(bt_shape2(VP, C + 1), BT_F32, CPU, 2), t, V, -1, &s1),
                    "linear_cross_entropy_fp8: x [32, 16] f32 cpu needs last dim = in of w [64, 17]");
    bt_release(x); bt_release(w);
    bt_fp8_state_free(&s1);
    bt_scope_end();
    free(xv); free(wv);
}

/* a bank's update (one pass over the buffer; one kernel on a GPU) leaves the rows, primed and seen bits
   of updating each state alone; states that are not the bank's slices in order are refused */
static void test_bank_update(void) {
    const int64_t n = 5;
    bt_fp8_opts o = bt_fp8_default_opts();
    o.recipe = BT_FP8_DELAYED; o.history = 3;
    int64_t per = bt_fp8_state_floats(&o);
    bt_fp8_state *a = NULL, *b = NULL;
    bt_tensor *ba = NULL, *bb = NULL;
    bt_fp8_bank_reset(&a, &ba, n, &o, CPU, "test");
    bt_fp8_bank_reset(&b, &bb, n, &o, CPU, "test");
    float *v = values(n * per, 1.0, BT_F32, 11, 0);
    for (int64_t i = 0; i < n * per; i++) v[i] = fabsf(v[i]) * (float)(i % 7 + 1);
    v[per + 2] = NAN; v[3 * per - 1] = INFINITY;
    memcpy(bt_data_ptr(ba), v, sizeof(float) * (size_t)(n * per));
    memcpy(bt_data_ptr(bb), v, sizeof(float) * (size_t)(n * per));
    for (int64_t i = 0; i < n; i++) { a[i].seen = b[i].seen = (unsigned)(i % 8); a[i].primed = b[i].primed = (unsigned)((i * 3) % 8); }
    for (int t = 0; t < 2; t++) {
        bt_fp8_bank_update(a, ba, n);
        for (int64_t i = 0; i < n; i++) bt_fp8_update(&b[i]);
    }
    BT_CHECK(!memcmp(bt_data_ptr(ba), bt_data_ptr(bb), sizeof(float) * (size_t)(n * per)), "the bank's rows differ from one update per state");
    int bits = 1;
    for (int64_t i = 0; i < n; i++) bits &= a[i].primed == b[i].primed && a[i].seen == 0 && b[i].seen == 0;
    BT_CHECK(bits, "primed and seen bits differ from one update per state");
    BT_EXPECT_ERROR(bt_fp8_bank_update(a, bb, n), "is not slice 0 of the bank's buffer");
    BT_EXPECT_ERROR(bt_fp8_bank_update(a, ba, n - 1), "the buffer holds");
    bt_fp8_bank_free(&a, &ba, n); bt_fp8_bank_free(&b, &bb, n);
    free(v);
}

/* no graph: the same y, bit for bit, and no node; only what the wanted gradients need is kept */
static void test_no_grad_and_partial(void) {
    const long R = 8, K = 24, N = 16;
    float *xv = values(R * K, 1.0, BT_BF16, 0, 0), *wv = values(N * K, 0.1, BT_BF16, 0, 0);
    bt_fp8_state st;
    bt_fp8_state_init(&st, NULL, CPU, NULL);
    bt_tensor *x = leaf_of(xv, bt_shape2(R, K), BT_BF16, 1), *w = leaf_of(wv, bt_shape2(N, K), BT_BF16, 1);
    bt_scope_begin();
    bt_tensor *y1 = bt_linear_fp8(x, w, NULL, &st);
    int old = bt_set_grad_enabled(0);
    bt_tensor *y2 = bt_linear_fp8(x, w, NULL, &st);
    bt_set_grad_enabled(old);
    BT_CHECK(y1->grad_fn && !y2->grad_fn && !memcmp(bt_data_ptr(y1), bt_data_ptr(y2), (size_t)(R * N) * 2), "no grad: the same bits, no node");
    BT_CHECK(y1->grad_fn->n_saved == 3 && !strcmp(y1->grad_fn->op, "linear_fp8"), "x and w want gradients: scales, qx^T, qw^T kept (%d)",
             y1->grad_fn->n_saved);
    bt_set_requires_grad(w, 0);
    bt_tensor *y3 = bt_linear_fp8(x, w, NULL, &st);              /* only dx: qw^T kept, not qx^T */
    BT_CHECK(y3->grad_fn && y3->grad_fn->n_saved == 2 && y3->grad_fn->saved[1]->shape[0] == K && y3->grad_fn->saved[1]->shape[1] == N &&
             y3->grad_fn->saved[1]->dtype == BT_F8E4M3, "only x wants a gradient: qw^T [K, N] e4m3 kept");
    bt_backward(bt_sum(bt_cast(y3, BT_F32), NULL, 0, 0));
    BT_CHECK(x->grad && !w->grad, "dx only");
    bt_scope_end();
    bt_release(x); bt_release(w);
    bt_fp8_state_free(&st);
    free(xv); free(wv);
}

/* bt_linear_add_fp8: r + the op within one rounding of the f32 sum (the add rides the product), the
   same x, w, b gradients bit for bit, r's gradient the output's; and its errors */
static void test_linear_add(void) {
    const long R = 16, K = 24, N = 32;
    float *xv = values(R * K, 1.0, BT_F32, 0, 0), *wv = values(N * K, 0.1, BT_F32, 0, 0), *bv = values(N, 0.5, BT_F32, 0, 0);
    float *rv = values(R * N, 2.0, BT_F32, 0, 0);
    bt_fp8_state s1, s2;
    bt_fp8_state_init(&s1, NULL, CPU, NULL); bt_fp8_state_init(&s2, NULL, CPU, NULL);
    bt_tensor *x[2], *w[2], *b[2], *r[2], *y[2];
    bt_scope_begin();
    for (int k = 0; k < 2; k++) {
        x[k] = leaf_of(xv, bt_shape2(R, K), BT_F32, 1); w[k] = leaf_of(wv, bt_shape2(N, K), BT_F32, 1);
        b[k] = leaf_of(bv, bt_shape1(N), BT_F32, 1); r[k] = leaf_of(rv, bt_shape2(R, N), BT_F32, 1);
        y[k] = k ? bt_linear_add_fp8(x[k], w[k], b[k], r[k], &s2) : bt_add(r[k], bt_linear_fp8(x[k], w[k], b[k], &s1));
        bt_tensor *wt = bt_randn(bt_shape2(R, N), BT_F32, CPU, 9);   /* the same upstream gradient both times */
        bt_backward(bt_sum(bt_mul(y[k], wt), NULL, 0, 0));
    }
    const float *y0 = (const float *)bt_data_ptr(y[0]), *y1 = (const float *)bt_data_ptr(y[1]);
    double worst = 0;
    for (long i = 0; i < R * N; i++) {   /* each side rounds two f32 sums of the same three terms: 2 u (|p| + |r| + |b|) apart at most */
        double rr = rv[i], bb = bv[i % N], p = (double)y0[i] - rr - bb;
        double e = fabs((double)y1[i] - y0[i]) / (2 * 0x1p-24 * 2 * (fabs(p) + fabs(rr) + fabs(bb)) + 1e-30);
        if (e > worst) worst = e;
    }
    BT_CHECK(worst <= 1, "y: %.3g of the bound from bt_add(r, bt_linear_fp8) (two f32 roundings a side)", worst);
    BT_CHECK(!strcmp(y[1]->grad_fn->op, "linear_fp8") && y[1]->grad_fn->n_in == 4, "one node with 4 inputs");
    bt_tensor *g0[4] = {x[0]->grad, w[0]->grad, b[0]->grad, r[0]->grad}, *g1[4] = {x[1]->grad, w[1]->grad, b[1]->grad, r[1]->grad};
    const char *nm[4] = {"x", "w", "b", "r"};
    for (int i = 0; i < 4; i++)
        BT_CHECK(g0[i] && g1[i] && !memcmp(bt_data_ptr(g0[i]), bt_data_ptr(g1[i]), sizeof(float) * (size_t)bt_numel(g0[i])),
                 "the gradient of %s differs", nm[i]);
    bt_tensor *xb = bt_randn(bt_shape2(R, K), BT_F32, CPU, 3), *wb = bt_randn(bt_shape2(N, K), BT_F32, CPU, 4);
    BT_EXPECT_ERROR(bt_linear_add_fp8(xb, wb, NULL, bt_randn(bt_shape2(R, N + 1), BT_F32, CPU, 5), &s1),
                    "linear_add_fp8: the residual r [16, 33] f32 cpu must have the output's shape");
    BT_EXPECT_ERROR(bt_linear_add_fp8(xb, wb, NULL, NULL, &s1), "linear_add_fp8: no residual r");
    BT_EXPECT_ERROR(bt_linear_add_fp8(xb, wb, NULL, bt_randn(bt_shape2(R, N), BT_F64, CPU, 5), &s1), "linear_fp8: dtypes differ");
    bt_scope_end();
    for (int k = 0; k < 2; k++) { bt_release(x[k]); bt_release(w[k]); bt_release(b[k]); bt_release(r[k]); }
    bt_fp8_state_free(&s1); bt_fp8_state_free(&s2);
    free(xv); free(wv); free(bv); free(rv);
}

/* bt_mlp_gelu_fp8 against the composition it stands for, bt_linear_add_fp8(gelu(bt_linear_fp8(x, w1,
   b1, s1)), w2, b2, r, s2), three steps of each recipe in f32 and bf16, with and without GELU's
   recompute: y, all six gradients and both states after each update the same bits (on the CPU the
   bias b1's sums too: the same reduction of the same dh); the remade qu^T leaves one tensor fewer
   saved; a forward without grad mode the same y; and the errors */
static void test_mlp_gelu_fp8(void) {
    const long B = 2, T = 16, K = 16, HID = 64, N = 16, R = B * T;
    const bt_dtype dts[2] = {BT_F32, BT_BF16};
    for (int d = 0; d < 2; d++)
        for (int rec = 0; rec < 2; rec++)
            for (int rc = 0; rc < 2; rc++) {
                bt_dtype dt = dts[d];
                bt_fp8_opts o = bt_fp8_default_opts();
                o.recipe = rec ? BT_FP8_DELAYED : BT_FP8_CURRENT; o.history = 4;
                bt_fp8_state st[2][2];
                for (int k = 0; k < 2; k++) { bt_fp8_state_init(&st[k][0], &o, CPU, NULL); bt_fp8_state_init(&st[k][1], &o, CPU, NULL); }
                float *xv = values(R * K, 1.0, dt, 0, 0), *w1v = values(HID * K, 0.2, dt, 0, 0), *b1v = values(HID, 0.3, dt, 0, 0);
                float *w2v = values(N * HID, 0.1, dt, 0, 0), *b2v = values(N, 0.3, dt, 0, 0), *rv = values(R * N, 1.0, dt, 0, 0);
                bt_tensor *lv[2][6];
                for (int k = 0; k < 2; k++) {
                    lv[k][0] = leaf_of(xv, bt_shape3(B, T, K), dt, 1); lv[k][1] = leaf_of(w1v, bt_shape2(HID, K), dt, 1);
                    lv[k][2] = leaf_of(b1v, bt_shape1(HID), dt, 1); lv[k][3] = leaf_of(w2v, bt_shape2(N, HID), dt, 1);
                    lv[k][4] = leaf_of(b2v, bt_shape1(N), dt, 1); lv[k][5] = leaf_of(rv, bt_shape3(B, T, N), dt, 1);
                }
                int old = bt_set_recompute(rc ? BT_RECOMPUTE_GELU : 0), bad_y = 0, bad_g = 0, bad_s = 0, saved = -1;
                for (int step = 0; step < 3; step++) {
                    bt_scope_begin();
                    bt_tensor *y[2] = {NULL, NULL}, *up = bt_cast(bt_randn(bt_shape3(B, T, N), BT_F32, CPU, 40 + step), dt);
                    for (int k = 0; k < 2; k++) {
                        bt_tensor **a = lv[k];
                        y[k] = k ? bt_mlp_gelu_fp8(a[0], a[1], a[2], a[3], a[4], a[5], &st[k][0], &st[k][1])
                                 : bt_linear_add_fp8(bt_gelu(bt_linear_fp8(a[0], a[1], a[2], &st[k][0])), a[3], a[4], a[5], &st[k][1]);
                        if (k) saved = y[k]->grad_fn->n_saved;
                        bt_backward(bt_sum(bt_mul(bt_cast(y[k], BT_F32), bt_cast(up, BT_F32)), NULL, 0, 0));
                    }
                    size_t es = bt_dtype_size(dt);
                    bad_y += memcmp(bt_data_ptr(y[0]), bt_data_ptr(y[1]), es * (size_t)bt_numel(y[0])) != 0;
                    for (int i = 0; i < 6; i++)
                        bad_g += !lv[0][i]->grad || !lv[1][i]->grad ||
                                 memcmp(bt_data_ptr(lv[0][i]->grad), bt_data_ptr(lv[1][i]->grad), es * (size_t)bt_numel(lv[0][i])) != 0;
                    for (int j = 0; j < 2; j++) {
                        bt_fp8_update(&st[0][j]); bt_fp8_update(&st[1][j]);
                        bad_s += memcmp(bt_data_ptr(st[0][j].buf), bt_data_ptr(st[1][j].buf), sizeof(float) * (size_t)bt_numel(st[0][j].buf)) ||
                                 st[0][j].primed != st[1][j].primed;
                    }
                    bt_scope_end();
                }
                BT_CHECK(!bad_y && !bad_g && !bad_s, "%s %s recompute %d: %d outputs, %d gradients, %d states differ from the composition's",
                         bt_dtype_name(dt), rec ? "delayed" : "current", rc, bad_y, bad_g, bad_s);
                BT_CHECK(saved == (rc ? 5 : 6), "%s recompute %d: %d tensors saved (scales, h, qx^T, qw1^T,%s qw2^T)", bt_dtype_name(dt), rc,
                         saved, rc ? "" : " qu^T,");
                bt_set_recompute(old);
                bt_scope_begin();                                   /* an evaluation: no node, the same y */
                int g = bt_set_grad_enabled(0);
                bt_tensor **a0 = lv[0], **a1 = lv[1];
                bt_tensor *e0 = bt_linear_add_fp8(bt_gelu(bt_linear_fp8(a0[0], a0[1], a0[2], &st[0][0])), a0[3], a0[4], a0[5], &st[0][1]);
                bt_tensor *e1 = bt_mlp_gelu_fp8(a1[0], a1[1], a1[2], a1[3], a1[4], a1[5], &st[1][0], &st[1][1]);
                bt_set_grad_enabled(g);
                BT_CHECK(!e1->grad_fn && !memcmp(bt_data_ptr(e0), bt_data_ptr(e1), bt_dtype_size(dt) * (size_t)bt_numel(e0)),
                         "%s: without grad mode the same y, no node", bt_dtype_name(dt));
                bt_scope_end();
                for (int k = 0; k < 2; k++) {
                    for (int i = 0; i < 6; i++) bt_release(lv[k][i]);
                    bt_fp8_state_free(&st[k][0]); bt_fp8_state_free(&st[k][1]);
                }
                free(xv); free(w1v); free(b1v); free(w2v); free(b2v); free(rv);
            }
    bt_scope_begin();
    bt_fp8_state s1, s2;
    bt_fp8_state_init(&s1, NULL, CPU, NULL); bt_fp8_state_init(&s2, NULL, CPU, NULL);
    bt_tensor *x = bt_randn(bt_shape2(R, K), BT_F32, CPU, 1), *w1 = bt_randn(bt_shape2(HID, K), BT_F32, CPU, 2);
    bt_tensor *w2 = bt_randn(bt_shape2(N, HID), BT_F32, CPU, 3);
    BT_EXPECT_ERROR(bt_mlp_gelu_fp8(x, w1, NULL, bt_randn(bt_shape2(N, HID + 1), BT_F32, CPU, 4), NULL, NULL, &s1, &s2),
                    "mlp_gelu_fp8: w2 [16, 65] f32 cpu must be [out, 64] (w1 [64, 16] f32 cpu is [64, in])");
    BT_EXPECT_ERROR(bt_mlp_gelu_fp8(x, w1, NULL, w2, bt_randn(bt_shape1(N + 1), BT_F32, CPU, 5), NULL, &s1, &s2),
                    "mlp_gelu_fp8: b2 [17] f32 cpu must be [16]");
    BT_EXPECT_ERROR(bt_mlp_gelu_fp8(x, w1, NULL, w2, NULL, bt_randn(bt_shape2(R, N + 1), BT_F32, CPU, 6), &s1, &s2),
                    "mlp_gelu_fp8: the residual r [32, 17] f32 cpu must have the output's shape");
    BT_EXPECT_ERROR(bt_mlp_gelu_fp8(x, w1, NULL, w2, NULL, NULL, &s1, NULL), "mlp_gelu_fp8: no FP8 state of the second linear");
    BT_EXPECT_ERROR(bt_mlp_gelu_fp8(x, bt_randn(bt_shape2(HID, K + 1), BT_F32, CPU, 7), NULL, w2, NULL, NULL, &s1, &s2),
                    "linear_fp8: x [32, 16] f32 cpu needs last dim = in of w [64, 17]");
    BT_EXPECT_ERROR(bt_mlp_gelu_fp8(x, w1, NULL, bt_cast(w2, BT_BF16), NULL, NULL, &s1, &s2), "mlp_gelu_fp8: dtypes differ");
    bt_fp8_state_free(&s1); bt_fp8_state_free(&s2);
    bt_scope_end();
}

/* bt_mlp_swiglu_fp8 against the composition it stands for, bt_linear_add_fp8(bt_swiglu(bt_linear_fp8(x,
   w13, NULL, s1)), w2, NULL, r, s2), three steps of each recipe in f32 and bf16, with and without the
   residual: y, the gradients and both states after each update the same bits; a forward without
   grad mode the same y and no node; and the errors */
static void test_mlp_swiglu_fp8(void) {
    const long B = 2, T = 16, K = 16, F = 32, N = 16, R = B * T;
    const bt_dtype dts[2] = {BT_F32, BT_BF16};
    for (int d = 0; d < 2; d++)
        for (int rec = 0; rec < 2; rec++)
            for (int res = 0; res < 2; res++) {
                bt_dtype dt = dts[d];
                bt_fp8_opts o = bt_fp8_default_opts();
                o.recipe = rec ? BT_FP8_DELAYED : BT_FP8_CURRENT; o.history = 4;
                bt_fp8_state st[2][2];
                for (int k = 0; k < 2; k++) { bt_fp8_state_init(&st[k][0], &o, CPU, NULL); bt_fp8_state_init(&st[k][1], &o, CPU, NULL); }
                float *xv = values(R * K, 1.0, dt, 0, 0), *w1v = values(2 * F * K, 0.4, dt, 0, 0);
                float *w2v = values(N * F, 0.2, dt, 0, 0), *rv = values(R * N, 1.0, dt, 0, 0);
                bt_tensor *lv[2][4];
                for (int k = 0; k < 2; k++) {
                    lv[k][0] = leaf_of(xv, bt_shape3(B, T, K), dt, 1); lv[k][1] = leaf_of(w1v, bt_shape2(2 * F, K), dt, 1);
                    lv[k][2] = leaf_of(w2v, bt_shape2(N, F), dt, 1); lv[k][3] = res ? leaf_of(rv, bt_shape3(B, T, N), dt, 1) : NULL;
                }
                int bad_y = 0, bad_g = 0, bad_s = 0, saved = -1;
                for (int step = 0; step < 3; step++) {
                    bt_scope_begin();
                    bt_tensor *y[2] = {NULL, NULL}, *up = bt_cast(bt_randn(bt_shape3(B, T, N), BT_F32, CPU, 50 + step), dt);
                    for (int k = 0; k < 2; k++) {
                        bt_tensor **a = lv[k];
                        if (k) y[k] = bt_mlp_swiglu_fp8(a[0], a[1], a[2], a[3], &st[k][0], &st[k][1]);
                        else {
                            bt_tensor *h = bt_swiglu(bt_linear_fp8(a[0], a[1], NULL, &st[k][0]));
                            y[k] = a[3] ? bt_linear_add_fp8(h, a[2], NULL, a[3], &st[k][1]) : bt_linear_fp8(h, a[2], NULL, &st[k][1]);
                        }
                        if (k) saved = y[k]->grad_fn->n_saved;
                        bt_backward(bt_sum(bt_mul(bt_cast(y[k], BT_F32), bt_cast(up, BT_F32)), NULL, 0, 0));
                    }
                    size_t es = bt_dtype_size(dt);
                    bad_y += memcmp(bt_data_ptr(y[0]), bt_data_ptr(y[1]), es * (size_t)bt_numel(y[0])) != 0;
                    for (int i = 0; i < 3 + res; i++)
                        bad_g += !lv[0][i]->grad || !lv[1][i]->grad ||
                                 memcmp(bt_data_ptr(lv[0][i]->grad), bt_data_ptr(lv[1][i]->grad), es * (size_t)bt_numel(lv[0][i])) != 0;
                    for (int j = 0; j < 2; j++) {
                        bt_fp8_update(&st[0][j]); bt_fp8_update(&st[1][j]);
                        bad_s += memcmp(bt_data_ptr(st[0][j].buf), bt_data_ptr(st[1][j].buf), sizeof(float) * (size_t)bt_numel(st[0][j].buf)) ||
                                 st[0][j].primed != st[1][j].primed;
                    }
                    bt_scope_end();
                }
                BT_CHECK(!bad_y && !bad_g && !bad_s, "%s %s residual %d: %d outputs, %d gradients, %d states differ from the composition's",
                         bt_dtype_name(dt), rec ? "delayed" : "current", res, bad_y, bad_g, bad_s);
                BT_CHECK(saved == 6, "%s: %d tensors saved (scales, [gate | up], qx^T, qw13^T, qy^T, qw2^T)", bt_dtype_name(dt), saved);
                bt_scope_begin();                                   /* an evaluation: no node, the same y */
                int g = bt_set_grad_enabled(0);
                bt_tensor **a0 = lv[0], **a1 = lv[1], *h0 = bt_swiglu(bt_linear_fp8(a0[0], a0[1], NULL, &st[0][0]));
                bt_tensor *e0 = a0[3] ? bt_linear_add_fp8(h0, a0[2], NULL, a0[3], &st[0][1]) : bt_linear_fp8(h0, a0[2], NULL, &st[0][1]);
                bt_tensor *e1 = bt_mlp_swiglu_fp8(a1[0], a1[1], a1[2], a1[3], &st[1][0], &st[1][1]);
                bt_set_grad_enabled(g);
                BT_CHECK(!e1->grad_fn && !memcmp(bt_data_ptr(e0), bt_data_ptr(e1), bt_dtype_size(dt) * (size_t)bt_numel(e0)),
                         "%s: without grad mode the same y, no node", bt_dtype_name(dt));
                bt_scope_end();
                for (int k = 0; k < 2; k++) {
                    for (int i = 0; i < 4; i++) bt_release(lv[k][i]);
                    bt_fp8_state_free(&st[k][0]); bt_fp8_state_free(&st[k][1]);
                }
                free(xv); free(w1v); free(w2v); free(rv);
            }
    bt_scope_begin();
    bt_fp8_state s1, s2;
    bt_fp8_state_init(&s1, NULL, CPU, NULL); bt_fp8_state_init(&s2, NULL, CPU, NULL);
    bt_tensor *x = bt_randn(bt_shape2(R, K), BT_F32, CPU, 1), *w1 = bt_randn(bt_shape2(2 * F, K), BT_F32, CPU, 2);
    bt_tensor *w2 = bt_randn(bt_shape2(N, F), BT_F32, CPU, 3);
    BT_EXPECT_ERROR(bt_mlp_swiglu_fp8(x, w1, bt_randn(bt_shape2(N, 2 * F), BT_F32, CPU, 4), NULL, &s1, &s2),
                    "mlp_swiglu_fp8: w2 [16, 64] f32 cpu must be [out, 32] (w13 [64, 16] f32 cpu is [2 x 32, in])");
    BT_EXPECT_ERROR(bt_mlp_swiglu_fp8(x, bt_randn(bt_shape2(2 * F + 1, K), BT_F32, CPU, 5), w2, NULL, &s1, &s2),
                    "mlp_swiglu_fp8: w13 [65, 16] f32 cpu must have 2 F rows (gate's F, then up's)");
    BT_EXPECT_ERROR(bt_mlp_swiglu_fp8(x, w1, w2, bt_randn(bt_shape2(R, N + 1), BT_F32, CPU, 6), &s1, &s2),
                    "mlp_swiglu_fp8: the residual r [32, 17] f32 cpu must have the output's shape");
    BT_EXPECT_ERROR(bt_mlp_swiglu_fp8(x, w1, w2, NULL, &s1, NULL), "mlp_swiglu_fp8: no FP8 state of the second linear");
    BT_EXPECT_ERROR(bt_mlp_swiglu_fp8(x, w1, bt_cast(w2, BT_BF16), NULL, &s1, &s2), "mlp_swiglu_fp8: dtypes differ");
    bt_fp8_state_free(&s1); bt_fp8_state_free(&s2);
    bt_scope_end();
}

/* bt_layernorm_linear_fp8 and bt_layernorm_mlp_gelu_fp8 on the CPU: the compositions they name (the
   fused kernel is the GPU's: tests/test_fp8_gpu.cu), every bit of y, the gradients (the layernorm's
   w and b included) and the states over three delayed steps, and the nodes the composition's */
static void test_norm_ops(void) {
    const long B = 2, T = 16, C = 16, HID = 32, R = B * T;
    bt_fp8_opts o = bt_fp8_default_opts();
    o.recipe = BT_FP8_DELAYED; o.history = 4;
    for (int mlp = 0; mlp < 2; mlp++) {
        bt_fp8_state st[2][2];
        for (int k = 0; k < 2; k++) { bt_fp8_state_init(&st[k][0], &o, CPU, NULL); bt_fp8_state_init(&st[k][1], &o, CPU, NULL); }
        const long sz[7] = {R * C, C, C, HID * C, HID, C * HID, C};
        const bt_shape shp[7] = {bt_shape3(B, T, C), bt_shape1(C), bt_shape1(C), bt_shape2(HID, C), bt_shape1(HID), bt_shape2(C, HID), bt_shape1(C)};
        bt_tensor *lv[2][7];
        for (int i = 0; i < 7; i++) {
            float *v = values(sz[i], i == 0 ? 1.0 : 0.3, BT_BF16, 0, 0);
            for (int k = 0; k < 2; k++) lv[k][i] = leaf_of(v, shp[i], BT_BF16, 1);
            free(v);
        }
        int bad = 0, fused = 0;
        for (int step = 0; step < 3; step++) {
            bt_scope_begin();
            bt_tensor *y[2] = {NULL, NULL}, *up = bt_randn(mlp ? bt_shape3(B, T, C) : bt_shape3(B, T, HID), BT_F32, CPU, 60 + step);
            for (int k = 0; k < 2; k++) {
                bt_tensor **a = lv[k];
                if (mlp) y[k] = k ? bt_layernorm_mlp_gelu_fp8(a[0], a[1], a[2], 1e-5, a[3], a[4], a[5], a[6], a[0], &st[k][0], &st[k][1])
                                  : bt_mlp_gelu_fp8(bt_layernorm(a[0], a[1], a[2], 1e-5), a[3], a[4], a[5], a[6], a[0], &st[k][0], &st[k][1]);
                else y[k] = k ? bt_layernorm_linear_fp8(a[0], a[1], a[2], 1e-5, a[3], a[4], &st[k][0])
                              : bt_linear_fp8(bt_layernorm(a[0], a[1], a[2], 1e-5), a[3], a[4], &st[k][0]);
                if (k) fused += !strncmp(y[k]->grad_fn->op, "layernorm_", 10);
                bt_backward(bt_sum(bt_mul(bt_cast(y[k], BT_F32), up), NULL, 0, 0));
            }
            bad += memcmp(bt_data_ptr(y[0]), bt_data_ptr(y[1]), 2 * (size_t)bt_numel(y[0])) != 0;
            for (int i = 0; i < (mlp ? 7 : 5); i++)
                bad += !lv[0][i]->grad || !lv[1][i]->grad || memcmp(bt_data_ptr(lv[0][i]->grad), bt_data_ptr(lv[1][i]->grad), 2 * (size_t)sz[i]) != 0;
            for (int j = 0; j < 1 + mlp; j++) {
                bt_fp8_update(&st[0][j]); bt_fp8_update(&st[1][j]);
                bad += memcmp(bt_data_ptr(st[0][j].buf), bt_data_ptr(st[1][j].buf), sizeof(float) * (size_t)bt_numel(st[0][j].buf)) != 0;
            }
            bt_scope_end();
        }
        BT_CHECK(bad == 0 && fused == 0, "%s: %d outputs, gradients or states differ from the composition; %d fused nodes on the CPU",
                 mlp ? "layernorm_mlp_gelu_fp8" : "layernorm_linear_fp8", bad, fused);
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < 7; i++) bt_release(lv[k][i]);
            bt_fp8_state_free(&st[k][0]); bt_fp8_state_free(&st[k][1]);
        }
    }
}
/* bad arguments: each error names the op and what was expected */
static void test_errors(void) {
    bt_scope_begin();
    bt_fp8_state st;
    bt_fp8_state_init(&st, NULL, CPU, NULL);
    bt_tensor *x = bt_randn(bt_shape2(4, 8), BT_F32, CPU, 1), *w = bt_randn(bt_shape2(5, 7), BT_F32, CPU, 2);
    bt_tensor *w8 = bt_randn(bt_shape2(5, 8), BT_F32, CPU, 3), *wb = bt_randn(bt_shape2(5, 8), BT_BF16, CPU, 4);
    BT_EXPECT_ERROR(bt_linear_fp8(x, w, NULL, &st), "linear_fp8: x [4, 8] f32 cpu needs last dim = in of w [5, 7]");
    BT_EXPECT_ERROR(bt_linear_fp8(x, w8, bt_randn(bt_shape1(4), BT_F32, CPU, 5), &st), "linear_fp8: bias [4] f32 cpu must be [5]");
    BT_EXPECT_ERROR(bt_linear_fp8(x, wb, NULL, &st), "linear_fp8: dtypes differ");
    BT_EXPECT_ERROR(bt_linear_fp8(bt_cast(x, BT_I32), w8, NULL, &st), "linear_fp8: x must be a float tensor, got [4, 8] i32");
    BT_EXPECT_ERROR(bt_linear_fp8(bt_cast(x, BT_F8E4M3), w8, NULL, &st), "must be a float tensor, got [4, 8] f8e4m3");
    BT_EXPECT_ERROR(bt_linear_fp8(x, w8, NULL, NULL), "linear_fp8: no FP8 state");
    BT_EXPECT_ERROR(bt_linear_fp8(bt_randn(bt_shape2(0, 8), BT_F32, CPU, 6), w8, NULL, &st), "an empty product");
    bt_fp8_opts o = bt_fp8_default_opts();
    o.history = 0;
    bt_fp8_state s2;
    BT_EXPECT_ERROR(bt_fp8_state_init(&s2, &o, CPU, NULL), "fp8_state_init: amax history of length 0 (1 to 1024 expected)");
    o.history = 4; o.recipe = (bt_fp8_recipe)7;
    BT_EXPECT_ERROR(bt_fp8_state_init(&s2, &o, CPU, NULL), "recipe 7 is neither");
    o.recipe = BT_FP8_DELAYED;
    BT_EXPECT_ERROR(bt_fp8_state_init(&s2, &o, CPU, bt_zeros(bt_shape1(17), BT_F32, CPU)), "must be a contiguous f32 tensor of 18 elements");
    bt_tensor *flat = bt_zeros(bt_shape1(40), BT_F32, CPU);     /* a slice of a larger buffer */
    bt_fp8_state_init(&s2, &o, CPU, bt_narrow(flat, 0, 20, 18));
    float *fp = (float *)bt_data_ptr(flat);
    BT_CHECK(fp[21] == 1.f && fp[27] == 1.f && fp[33] == 1.f && fp[20] == 0.f && fp[19] == 0.f && fp[38] == 0.f, "a state in a slice: scales 1");
    BT_EXPECT_ERROR(bt_fp8_update(NULL), "fp8_update: no FP8 state");
    bt_fp8_state_free(&s2);
    bt_fp8_state_free(&st);
    bt_scope_end();
}

int main(void) {
    BT_RUN(test_decode_all_codes);
    BT_RUN(test_encode_round_trip);
    BT_RUN(test_ties_to_even);
    BT_RUN(test_encode_vs_search);
    BT_RUN(test_storage_dtypes);
    BT_RUN(test_scale_rule);
    BT_RUN(test_linear_fp8_current);
    BT_RUN(test_recipes);
    BT_RUN(test_delayed_first_casts);
    BT_RUN(test_bank_update);
    BT_RUN(test_no_grad_and_partial);
    BT_RUN(test_linear_add);
    BT_RUN(test_mlp_gelu_fp8);
    BT_RUN(test_mlp_swiglu_fp8);
    BT_RUN(test_lxent_fp8);
    BT_RUN(test_norm_ops);
    BT_RUN(test_errors);
    return bt_test_summary("test_fp8");
}
