/* test_ops.c - every op of bt_tensor.h: (1) the forward against a plain reference loop written here
   in double precision, on random shapes with odd sizes, in f32 (rel err < BT_TOL_F32), f64
   (< BT_TOL_F64) and for a few ops bf16 (< BT_TOL_BF16_OP: tests/bt_test.h's table); (2) the backward of every differentiable op against float64 central
   finite differences (gradcheck below), alone and in small composite graphs; (3) every op of the
   BT_UNARY_OPS list against a hand-written reference and finite differences; (4) the op table of
   tests/op_cases.h, forward and backward, run on the CPU in f32, bf16 and f16 against the same
   table in f64 (tests/test_ops_gpu.cu runs it on every GPU). (1)-(3) make the f64 path the
   reference that (4) and the GPU tests stand on. */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#include "bt_autograd.h"
#include "tests/bt_test.h"
#include "tests/op_cases.h"
#pragma GCC diagnostic ignored "-Wclobbered"   /* BT_EXPECT_ERROR's setjmp: a false positive */
#include <stdlib.h>
#include <stdint.h>
#include <omp.h>

#define CPU bt_cpu()
static uint64_t seed_ctr = 1000;       /* every tensor gets a fresh Philox seed */
static uint64_t next_seed(void) { return seed_ctr++; }

static bt_tensor *rnd(bt_shape s, bt_dtype dt) { return bt_randn(s, dt, CPU, next_seed()); }
/* uniform in [lo, hi): for log, sqrt and divisors */
static bt_tensor *rnd_in(bt_shape s, bt_dtype dt, double lo, double hi) {
    bt_tensor *t = bt_empty(s, dt, CPU); bt_uniform_(t, lo, hi, next_seed(), 0); return t;
}
/* one op forward against double: f64, f32, and bf16 (a rounded output of rounded operands) */
static double tol_of(bt_dtype dt) { return dt == BT_F64 ? BT_TOL_F64 : dt == BT_F32 ? BT_TOL_F32 : BT_TOL_BF16_OP; }
static int same_shape(bt_tensor *t, bt_shape s) {
    if (t->ndim != s.ndim) return 0;
    for (int d = 0; d < s.ndim; d++) if (t->shape[d] != s.d[d]) return 0;
    return 1;
}
/* got (any dtype) against want (double), with a shape check */
static void expect_close(const char *what, bt_tensor *got, bt_shape shape, const double *want, double tol) {
    if (!same_shape(got, shape)) {
        char b[160];
        BT_CHECK(0, "%s: shape %s, expected %d dims", what, bt_shape_str(got, b, sizeof b), shape.ndim);
        return;
    }
    int64_t n = bt_numel(got);
    double *g = bt_test_host(got);
    double e = bt_test_relerr(g, want, n);
    BT_CHECK(tol > 0 ? e < tol : e == 0, "%s (%s): rel err %.3g, tolerance %.1g", what, bt_dtype_name(got->dtype), e, tol);
    free(g);
}
static int64_t numel_of(bt_shape s) { int64_t n = 1; for (int d = 0; d < s.ndim; d++) n *= s.d[d]; return n; }
/* linear index into a (contiguous) tensor of shape `in` broadcast to `out`, from out's linear index */
static int64_t bidx(bt_shape out, bt_shape in, int64_t lin) {
    int64_t idx = 0, st = 1;
    for (int d = out.ndim - 1; d >= 0; d--) {
        int64_t c = lin % out.d[d]; lin /= out.d[d];
        int di = d - (out.ndim - in.ndim);
        if (di >= 0) { if (in.d[di] != 1) idx += c * st; st *= in.d[di]; }
    }
    return idx;
}
static bt_shape bshape(bt_shape a, bt_shape b) {
    bt_shape s; s.ndim = a.ndim > b.ndim ? a.ndim : b.ndim;
    for (int d = 0; d < s.ndim; d++) {
        int da = d - (s.ndim - a.ndim), db = d - (s.ndim - b.ndim);
        int64_t x = da >= 0 ? a.d[da] : 1, y = db >= 0 ? b.d[db] : 1;
        s.d[d] = x == 1 ? y : x;
    }
    return s;
}
static bt_shape S(int nd, const int64_t *d) { return bt_shapev(nd, d); }
#define SH(...) S((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static const bt_dtype DTS[2] = {BT_F32, BT_F64};

/* =============================================================================================
   references in double precision
   ============================================================================================= */
#define GELU_K 0.7978845608028654
static double ref_uop(int op, double x) {
    switch (op) {
    case 0: return -x;
    case 1: return exp(x);
    case 2: return log(x);
    case 3: return sqrt(x);
    case 4: return tanh(x);
    case 5: return x > 0 ? x : 0;
    case 6: return 0.5 * x * (1 + tanh(GELU_K * (x + 0.044715 * x * x * x)));
    default: return x * x;
    }
}
static bt_tensor *apply_uop(int op, bt_tensor *x) {
    switch (op) {
    case 0: return bt_neg(x);
    case 1: return bt_exp(x);
    case 2: return bt_log(x);
    case 3: return bt_sqrt(x);
    case 4: return bt_tanh(x);
    case 5: return bt_relu(x);
    case 6: return bt_gelu(x);
    default: return bt_square(x);
    }
}
static const char *uop_name[8] = {"neg", "exp", "log", "sqrt", "tanh", "relu", "gelu", "square"};
static double ref_bop(int op, double a, double b) { return op == 0 ? a + b : op == 1 ? a - b : op == 2 ? a * b : a / b; }
static bt_tensor *apply_bop(int op, bt_tensor *a, bt_tensor *b) {
    return op == 0 ? bt_add(a, b) : op == 1 ? bt_sub(a, b) : op == 2 ? bt_mul(a, b) : bt_div(a, b);
}
static const char *bop_name[4] = {"add", "sub", "mul", "div"};

/* C = op(A) op(B), batch dims broadcast; A, B contiguous with >= 2 dims */
static double *ref_matmul(const double *A, bt_shape as, const double *B, bt_shape bs, int ta, int tb, bt_shape *cs) {
    int64_t ra = as.d[as.ndim - 2], ca = as.d[as.ndim - 1], rb = bs.d[bs.ndim - 2], cb = bs.d[bs.ndim - 1];
    int64_t M = ta ? ca : ra, K = ta ? ra : ca, N = tb ? rb : cb;
    bt_shape ab = as, bb = bs; ab.ndim -= 2; bb.ndim -= 2;
    bt_shape ob = bshape(ab, bb);
    *cs = ob; cs->d[cs->ndim++] = M; cs->d[cs->ndim++] = N;
    int64_t nb = numel_of(ob);
    double *C = (double *)malloc(sizeof(double) * (size_t)(nb * M * N));
    for (int64_t b = 0; b < nb; b++) {
        const double *a = A + bidx(ob, ab, b) * ra * ca, *bm = B + bidx(ob, bb, b) * rb * cb;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += (ta ? a[k * ca + i] : a[i * ca + k]) * (tb ? bm[j * cb + k] : bm[k * cb + j]);
                C[(b * M + i) * N + j] = s;
            }
    }
    return C;
}

/* =============================================================================================
   (1) forward against the references
   ============================================================================================= */
static void test_unary_forward(void) {
    const bt_shape shapes[] = {SH(1), SH(3, 7), SH(13, 33), SH(67), SH(2, 3, 5)};
    int ns = bt_test_quick() ? 3 : 5;
    bt_scope_begin();
    for (int k = 0; k < 2; k++)
        for (int op = 0; op < 8; op++)
            for (int si = 0; si < ns; si++) {
                bt_dtype dt = DTS[k];
                bt_tensor *x = op == 2 || op == 3 ? rnd_in(shapes[si], dt, 0.1, 3.0) : bt_scale(rnd(shapes[si], dt), 2.0);
                double *xh = bt_test_host(x); int64_t n = bt_numel(x);
                double *want = (double *)malloc(sizeof(double) * n);
                for (int64_t i = 0; i < n; i++) want[i] = ref_uop(op, xh[i]);
                char what[64]; snprintf(what, sizeof what, "%s shape %d", uop_name[op], si);
                expect_close(what, apply_uop(op, x), shapes[si], want, tol_of(dt));
                free(xh); free(want);
            }
    /* a transposed (strided) input */
    bt_tensor *x = rnd(SH(7, 13), BT_F64), *t = bt_transpose(x, 0, 1);
    double *xh = bt_test_host(t), want[91];
    for (int i = 0; i < 91; i++) want[i] = ref_uop(6, xh[i]);
    expect_close("gelu of a transpose", bt_gelu(t), SH(13, 7), want, BT_TOL_F64);
    free(xh);
    /* known values, so that the reference formula itself is pinned */
    double kv[3] = {1.0, -0.5, 2.0};
    bt_tensor *kx = bt_from_data(kv, SH(3), BT_F64, CPU);
    double gk[3] = {0.8411919906082768, -0.15428599017485606, 1.954597694087775};
    expect_close("gelu known values", bt_gelu(kx), SH(3), gk, BT_TOL_F64);
    /* scalar ops */
    for (int k = 0; k < 2; k++) {
        bt_tensor *y = rnd(SH(13, 33), DTS[k]);
        double *yh = bt_test_host(y), *w = (double *)malloc(sizeof(double) * 429);
        for (int i = 0; i < 429; i++) w[i] = -1.75 * yh[i] + 0.3;
        expect_close("affine", bt_affine(y, -1.75, 0.3), SH(13, 33), w, tol_of(DTS[k]));
        for (int i = 0; i < 429; i++) w[i] = 3.5 * yh[i];
        expect_close("scale", bt_scale(y, 3.5), SH(13, 33), w, tol_of(DTS[k]));
        for (int i = 0; i < 429; i++) w[i] = yh[i] - 2.25;
        expect_close("add_scalar", bt_add_scalar(y, -2.25), SH(13, 33), w, tol_of(DTS[k]));
        free(yh); free(w);
    }
    bt_scope_end();
}

static void test_binary_forward(void) {
    struct { bt_shape a, b; } cases[] = {
        {SH(3, 1, 5), SH(4, 1)}, {SH(4, 1), SH(3, 1, 5)}, {SH(13, 33), SH(13, 33)}, {SH(2, 3), SH(3)},
        {SH(7), SH(1)}, {SH(1), SH(67)}, {SH(2, 1, 3, 1), SH(5, 1, 4)}, {SH(6, 5), SH(6, 1)}};
    int nc = (int)(sizeof cases / sizeof cases[0]);
    bt_scope_begin();
    for (int k = 0; k < 2; k++)
        for (int op = 0; op < 4; op++)
            for (int c = 0; c < nc; c++) {
                bt_dtype dt = DTS[k];
                bt_tensor *a = rnd(cases[c].a, dt), *b = op == 3 ? rnd_in(cases[c].b, dt, 0.5, 2.0) : rnd(cases[c].b, dt);
                bt_shape os = bshape(cases[c].a, cases[c].b);
                double *ah = bt_test_host(a), *bh = bt_test_host(b); int64_t n = numel_of(os);
                double *want = (double *)malloc(sizeof(double) * n);
                for (int64_t i = 0; i < n; i++) want[i] = ref_bop(op, ah[bidx(os, cases[c].a, i)], bh[bidx(os, cases[c].b, i)]);
                char what[64]; snprintf(what, sizeof what, "%s case %d", bop_name[op], c);
                expect_close(what, apply_bop(op, a, b), os, want, tol_of(dt));
                free(ah); free(bh); free(want);
            }
    /* strided operands: a transposed a, an expanded b */
    bt_tensor *a = rnd(SH(5, 4), BT_F32), *b = rnd(SH(5), BT_F32);
    bt_tensor *at = bt_transpose(a, 0, 1), *be = bt_expand(bt_unsqueeze(b, 0), SH(4, 5));
    double *ah = bt_test_host(at), *bh = bt_test_host(b), want[20];
    for (int i = 0; i < 20; i++) want[i] = ah[i] * bh[i % 5];
    expect_close("mul of strided views", bt_mul(at, be), SH(4, 5), want, BT_TOL_F32_ROUND);
    /* in place: a += alpha b with broadcasting */
    bt_tensor *acc = rnd(SH(4, 5), BT_F64), *row = rnd(SH(5), BT_F64);
    double *h0 = bt_test_host(acc), *rh = bt_test_host(row), w2[20];
    for (int i = 0; i < 20; i++) w2[i] = h0[i] - 0.5 * rh[i % 5];
    bt_add_(acc, row, -0.5);
    expect_close("add_ broadcast", acc, SH(4, 5), w2, BT_TOL_F64);
    bt_mul_scalar_(acc, 3.0);
    for (int i = 0; i < 20; i++) w2[i] *= 3.0;
    expect_close("mul_scalar_", acc, SH(4, 5), w2, BT_TOL_F64);
    free(ah); free(bh); free(h0); free(rh);
    bt_scope_end();
}

/* sum / mean over dim sets (with and without keepdim, consecutive or not), max / argmax over a dim */
static void test_reduce_forward(void) {
    int64_t dims4[4] = {3, 4, 5, 6};
    bt_shape xs = S(4, dims4);
    struct { int n; int d[4]; } sets[] = {{1, {0}}, {1, {3}}, {2, {1, 2}}, {2, {0, 2}}, {2, {1, 3}}, {3, {0, 1, 3}},
                                          {4, {0, 1, 2, 3}}, {2, {-1, 0}}, {0, {0}}};
    int nsets = (int)(sizeof sets / sizeof sets[0]);
    bt_scope_begin();
    for (int k = 0; k < 2; k++)
        for (int si = 0; si < nsets; si++)
            for (int keep = 0; keep < 2; keep++)
                for (int mean = 0; mean < 2; mean++)
                    for (int perm = 0; perm < 2; perm++) {
                        bt_dtype dt = DTS[k];
                        bt_tensor *x = rnd(xs, dt);
                        if (perm) {          /* a strided input with the same shape */
                            bt_tensor *base = rnd(SH(6, 5, 4, 3), dt);
                            x = bt_permute(base, (int[]){3, 2, 1, 0});
                        }
                        int mask[4] = {0};
                        if (sets[si].n == 0) for (int d = 0; d < 4; d++) mask[d] = 1;
                        for (int j = 0; j < sets[si].n; j++) mask[(sets[si].d[j] + 4) % 4] = 1;
                        bt_shape os; os.ndim = 0; int64_t cnt = 1;
                        for (int d = 0; d < 4; d++) { if (!mask[d]) os.d[os.ndim++] = xs.d[d]; else { cnt *= xs.d[d]; if (keep) os.d[os.ndim++] = 1; } }
                        double *xh = bt_test_host(x), want[360] = {0};
                        for (int64_t i = 0; i < 360; i++) {
                            int64_t rem = i, c[4], o = 0;
                            for (int d = 3; d >= 0; d--) { c[d] = rem % xs.d[d]; rem /= xs.d[d]; }
                            for (int d = 0; d < 4; d++) if (!mask[d]) o = o * xs.d[d] + c[d];
                            want[o] += xh[i];
                        }
                        if (mean) for (int64_t i = 0; i < 360 / cnt; i++) want[i] /= (double)cnt;
                        bt_tensor *y = mean ? bt_mean(x, sets[si].n ? sets[si].d : NULL, sets[si].n, keep)
                                            : bt_sum(x, sets[si].n ? sets[si].d : NULL, sets[si].n, keep);
                        char what[80]; snprintf(what, sizeof what, "%s set %d keepdim %d strided %d", mean ? "mean" : "sum", si, keep, perm);
                        expect_close(what, y, os, want, tol_of(dt));
                        free(xh);
                    }
    for (int k = 0; k < 2; k++)
        for (int dim = -1; dim < 4; dim++)
            for (int keep = 0; keep < 2; keep++) {
                bt_tensor *x = rnd(xs, DTS[k]);
                int d0 = (dim + 4) % 4;
                double *xh = bt_test_host(x);
                bt_shape os; os.ndim = 0;
                for (int d = 0; d < 4; d++) if (d != d0) os.d[os.ndim++] = xs.d[d]; else if (keep) os.d[os.ndim++] = 1;
                double want[120]; int32_t wam[120]; int64_t outn = 360 / xs.d[d0];
                for (int64_t o = 0; o < outn; o++) want[o] = -INFINITY;
                for (int64_t i = 0; i < 360; i++) {
                    int64_t rem = i, c[4], o = 0;
                    for (int d = 3; d >= 0; d--) { c[d] = rem % xs.d[d]; rem /= xs.d[d]; }
                    for (int d = 0; d < 4; d++) if (d != d0) o = o * xs.d[d] + c[d];
                    if (xh[i] > want[o]) { want[o] = xh[i]; wam[o] = (int32_t)c[d0]; }
                }
                bt_tensor *m = bt_max(x, dim, keep), *am = bt_argmax(x, dim);
                expect_close("max", m, os, want, BT_TOL_EXACT);
                bt_shape as; as.ndim = 0;
                for (int d = 0; d < 4; d++) if (d != d0) as.d[as.ndim++] = xs.d[d];
                int ok = am->dtype == BT_I32 && same_shape(am, as);
                for (int64_t o = 0; ok && o < outn; o++) ok &= ((int32_t *)bt_data_ptr(am))[o] == wam[o];
                BT_CHECK(ok, "argmax over dim %d (%s)", dim, bt_dtype_name(DTS[k]));
                free(xh);
            }
    /* ties: the first maximum wins */
    double tv[6] = {1, 3, 3, 2, 5, 5};
    bt_tensor *tx = bt_from_data(tv, SH(2, 3), BT_F64, CPU);
    bt_tensor *tam = bt_argmax(tx, 1);
    BT_CHECK(((int32_t *)bt_data_ptr(tam))[0] == 1 && ((int32_t *)bt_data_ptr(tam))[1] == 1, "argmax ties");
    bt_scope_end();
}

static void check_matmul(const char *what, bt_tensor *a, bt_tensor *b, int ta, int tb, double tol) {
    bt_tensor *ac = bt_contiguous(a), *bc = bt_contiguous(b);
    double *ah = bt_test_host(ac), *bh = bt_test_host(bc);
    bt_shape cs;
    double *want = ref_matmul(ah, bt_shape_of(a), bh, bt_shape_of(b), ta, tb, &cs);
    expect_close(what, bt_matmul_t(a, b, ta, tb), cs, want, tol);
    free(ah); free(bh); free(want);
}
static void test_matmul_forward(void) {
    struct { int64_t M, N, K; } mm[] = {{1, 1, 1}, {3, 7, 5}, {13, 1, 33}, {37, 300, 45}, {64, 512, 128}, {5, 17, 3}, {4, 16, 9}};
    int nmm = (int)(sizeof mm / sizeof mm[0]);
    bt_scope_begin();
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < nmm; c++)
            for (int t = 0; t < 4; t++) {
                if (bt_test_quick() && c == 4 && t) continue;
                int ta = t & 1, tb = t >> 1;
                int64_t M = mm[c].M, N = mm[c].N, K = mm[c].K;
                bt_tensor *a = ta ? rnd(SH(K, M), DTS[k]) : rnd(SH(M, K), DTS[k]);
                bt_tensor *b = tb ? rnd(SH(N, K), DTS[k]) : rnd(SH(K, N), DTS[k]);
                char what[96]; snprintf(what, sizeof what, "matmul %lldx%lldx%lld ta %d tb %d", (long long)M, (long long)N, (long long)K, ta, tb);
                check_matmul(what, a, b, ta, tb, tol_of(DTS[k]));
            }
    for (int k = 0; k < 2; k++) {
        double tol = tol_of(DTS[k]);
        for (int t = 0; t < 4; t++) {
            int ta = t & 1, tb = t >> 1;
            /* batched, same batch */
            check_matmul("batched", ta ? rnd(SH(2, 3, 7, 5), DTS[k]) : rnd(SH(2, 3, 5, 7), DTS[k]),
                         tb ? rnd(SH(2, 3, 4, 7), DTS[k]) : rnd(SH(2, 3, 7, 4), DTS[k]), ta, tb, tol);
            /* broadcast batch: [3, 1, ..] x [2, ..] */
            check_matmul("broadcast batch", ta ? rnd(SH(3, 1, 6, 5), DTS[k]) : rnd(SH(3, 1, 5, 6), DTS[k]),
                         tb ? rnd(SH(2, 4, 6), DTS[k]) : rnd(SH(2, 6, 4), DTS[k]), ta, tb, tol);
            /* a 3-D x a 2-D weight (the folded path) and the reverse */
            check_matmul("3-D x 2-D", ta ? rnd(SH(2, 33, 13), DTS[k]) : rnd(SH(2, 13, 33), DTS[k]),
                         tb ? rnd(SH(67, 33), DTS[k]) : rnd(SH(33, 67), DTS[k]), ta, tb, tol);
            check_matmul("2-D x 3-D", ta ? rnd(SH(7, 3), DTS[k]) : rnd(SH(3, 7), DTS[k]),
                         tb ? rnd(SH(4, 5, 7), DTS[k]) : rnd(SH(4, 7, 5), DTS[k]), ta, tb, tol);
        }
        BT_EXPECT_ERROR(bt_matmul(rnd(SH(2, 3), DTS[k]), rnd(SH(2, 3), DTS[k])), "matmul: inner dims differ");
        /* strided operands */
        check_matmul("transposed views", bt_transpose(rnd(SH(9, 6), DTS[k]), 0, 1), bt_transpose(rnd(SH(11, 9), DTS[k]), 0, 1), 0, 0, tol);
        /* 1-D operands */
        bt_tensor *A = rnd(SH(13, 7), DTS[k]), *v = rnd(SH(7), DTS[k]), *u = rnd(SH(13), DTS[k]);
        double *ah = bt_test_host(A), *vh = bt_test_host(v), *uh = bt_test_host(u), w1[13] = {0}, w2[7] = {0}, dot = 0;
        for (int i = 0; i < 13; i++) for (int j = 0; j < 7; j++) { w1[i] += ah[i * 7 + j] * vh[j]; w2[j] += uh[i] * ah[i * 7 + j]; }
        for (int j = 0; j < 7; j++) dot += vh[j] * vh[j];
        expect_close("matrix x vector", bt_matmul(A, v), SH(13), w1, tol);
        expect_close("vector x matrix", bt_matmul(u, A), SH(7), w2, tol);
        expect_close("transa matrix x vector", bt_matmul_t(A, u, 1, 0), SH(7), w2, tol);
        bt_shape s0; s0.ndim = 0;
        expect_close("vector x vector", bt_matmul(v, v), s0, &dot, tol);
        bt_tensor *B3 = rnd(SH(2, 13, 7), DTS[k]);
        double *b3 = bt_test_host(B3), w3[26] = {0};
        for (int b = 0; b < 2; b++) for (int i = 0; i < 13; i++) for (int j = 0; j < 7; j++) w3[b * 13 + i] += b3[(b * 13 + i) * 7 + j] * vh[j];
        expect_close("batched matrix x vector", bt_matmul(B3, v), SH(2, 13), w3, tol);
        free(ah); free(vh); free(uh); free(b3);
    }
    bt_scope_end();
}

static void test_linear_forward(void) {
    bt_scope_begin();
    for (int k = 0; k < 2; k++)
        for (int hb = 0; hb < 2; hb++) {
            bt_tensor *x = rnd(SH(2, 7, 13), DTS[k]), *w = rnd(SH(33, 13), DTS[k]), *b = hb ? rnd(SH(33), DTS[k]) : NULL;
            double *xh = bt_test_host(x), *wh = bt_test_host(w), *bh = hb ? bt_test_host(b) : NULL;
            double *want = (double *)malloc(sizeof(double) * 14 * 33);
            for (int r = 0; r < 14; r++) for (int o = 0; o < 33; o++) {
                double s = bh ? bh[o] : 0;
                for (int i = 0; i < 13; i++) s += xh[r * 13 + i] * wh[o * 13 + i];
                want[r * 33 + o] = s;
            }
            expect_close(hb ? "linear with bias" : "linear without bias", bt_linear(x, w, b), SH(2, 7, 33), want, tol_of(DTS[k]));
            /* a transposed x goes through the same path */
            bt_tensor *xt = bt_transpose(bt_contiguous(bt_transpose(x, 0, 1)), 0, 1);
            expect_close("linear of a strided x", bt_linear(xt, w, b), SH(2, 7, 33), want, tol_of(DTS[k]));
            free(xh); free(wh); free(bh); free(want);
        }
    /* the blocked fp32 path with a bias and ragged edges: rows 37, out 300, in 45 */
    bt_tensor *x = rnd(SH(37, 45), BT_F32), *w = rnd(SH(300, 45), BT_F32), *b = rnd(SH(300), BT_F32);
    double *xh = bt_test_host(x), *wh = bt_test_host(w), *bh = bt_test_host(b), *want = (double *)malloc(sizeof(double) * 37 * 300);
    for (int r = 0; r < 37; r++) for (int o = 0; o < 300; o++) {
        double s = bh[o];
        for (int i = 0; i < 45; i++) s += xh[r * 45 + i] * wh[o * 45 + i];
        want[r * 300 + o] = s;
    }
    expect_close("linear 37x300x45", bt_linear(x, w, b), SH(37, 300), want, BT_TOL_F32);
    free(xh); free(wh); free(bh); free(want);
    bt_scope_end();
}

static void test_softmax_layernorm_forward(void) {
    const bt_shape shapes[] = {SH(1), SH(3, 7), SH(2, 3, 13), SH(5, 67), SH(4, 1)};
    bt_scope_begin();
    for (int k = 0; k < 2; k++)
        for (int si = 0; si < 5; si++) {
            bt_tensor *x = bt_scale(rnd(shapes[si], DTS[k]), 3.0);
            int64_t n = bt_numel(x), C = shapes[si].d[shapes[si].ndim - 1], rows = n / C;
            double *xh = bt_test_host(x), *sm = (double *)malloc(sizeof(double) * n), *ls = (double *)malloc(sizeof(double) * n);
            for (int64_t r = 0; r < rows; r++) {
                double mx = -INFINITY, s = 0;
                for (int64_t j = 0; j < C; j++) mx = fmax(mx, xh[r * C + j]);
                for (int64_t j = 0; j < C; j++) s += exp(xh[r * C + j] - mx);
                for (int64_t j = 0; j < C; j++) { sm[r * C + j] = exp(xh[r * C + j] - mx) / s; ls[r * C + j] = xh[r * C + j] - mx - log(s); }
            }
            expect_close("softmax", bt_softmax(x), shapes[si], sm, tol_of(DTS[k]));
            expect_close("log_softmax", bt_log_softmax(x), shapes[si], ls, tol_of(DTS[k]));
            /* layernorm, all four combinations of w and b */
            if (C < 2) { free(xh); free(sm); free(ls); continue; }
            bt_tensor *w = rnd(SH(C), DTS[k]), *b = rnd(SH(C), DTS[k]);
            double *wh = bt_test_host(w), *bh = bt_test_host(b), *ln = (double *)malloc(sizeof(double) * n);
            for (int c = 0; c < 4; c++) {
                int hw = c & 1, hb = c >> 1;
                for (int64_t r = 0; r < rows; r++) {
                    double m = 0, v = 0;
                    for (int64_t j = 0; j < C; j++) m += xh[r * C + j];
                    m /= C;
                    for (int64_t j = 0; j < C; j++) v += (xh[r * C + j] - m) * (xh[r * C + j] - m);
                    double rs = 1 / sqrt(v / C + 1e-5);
                    for (int64_t j = 0; j < C; j++) ln[r * C + j] = (xh[r * C + j] - m) * rs * (hw ? wh[j] : 1) + (hb ? bh[j] : 0);
                }
                char what[64]; snprintf(what, sizeof what, "layernorm w %d b %d C %lld", hw, hb, (long long)C);
                expect_close(what, bt_layernorm(x, hw ? w : NULL, hb ? b : NULL, 1e-5), shapes[si], ln, tol_of(DTS[k]));
            }
            free(xh); free(sm); free(ls); free(wh); free(bh); free(ln);
        }
    bt_scope_end();
}

static void test_embedding_xent_forward(void) {
    bt_scope_begin();
    for (int k = 0; k < 2; k++) {
        bt_tensor *table = rnd(SH(11, 13), DTS[k]);
        int32_t idx[21];
        for (int i = 0; i < 21; i++) idx[i] = (int32_t)((i * 7 + 3) % 11);
        bt_tensor *ix = bt_from_data(idx, SH(3, 7), BT_I32, CPU);
        double *th = bt_test_host(table), want[21 * 13];
        for (int i = 0; i < 21; i++) for (int c = 0; c < 13; c++) want[i * 13 + c] = th[idx[i] * 13 + c];
        expect_close("embedding", bt_embedding(table, ix), SH(3, 7, 13), want, BT_TOL_EXACT);
        free(th);
        /* cross-entropy over V = 5 of Vp = 8 columns; the padding holds large values that would
           change the loss if they were counted; two rows are ignored */
        bt_tensor *logits = rnd(SH(2, 3, 8), DTS[k]);
        bt_tensor *pad = bt_narrow(logits, 2, 5, 3);
        bt_fill_(pad, 40.0);
        int32_t tg[6] = {0, 4, -100, 2, -100, 3};
        bt_tensor *tt = bt_from_data(tg, SH(2, 3), BT_I32, CPU);
        double *lh = bt_test_host(logits), tot = 0; int valid = 0;
        for (int r = 0; r < 6; r++) {
            if (tg[r] == -100) continue;
            double mx = -INFINITY, s = 0;
            for (int j = 0; j < 5; j++) mx = fmax(mx, lh[r * 8 + j]);
            for (int j = 0; j < 5; j++) s += exp(lh[r * 8 + j] - mx);
            tot += mx + log(s) - lh[r * 8 + tg[r]]; valid++;
        }
        double loss = tot / valid;
        bt_shape s0; s0.ndim = 0;
        expect_close("cross_entropy V < Vp with ignored rows", bt_cross_entropy(logits, tt, 5, -100), s0, &loss, tol_of(DTS[k]));
        /* V <= 0: all columns; ignore_index another value */
        int32_t tg2[6] = {7, 0, 6, 1, 5, 2};
        double tot2 = 0;
        for (int r = 0; r < 6; r++) {
            double mx = -INFINITY, s = 0;
            for (int j = 0; j < 8; j++) mx = fmax(mx, lh[r * 8 + j]);
            for (int j = 0; j < 8; j++) s += exp(lh[r * 8 + j] - mx);
            if (r != 2) tot2 += mx + log(s) - lh[r * 8 + tg2[r]];
        }
        tot2 /= 5;
        expect_close("cross_entropy all columns", bt_cross_entropy(logits, bt_from_data(tg2, SH(2, 3), BT_I32, CPU), 0, 6), s0, &tot2, tol_of(DTS[k]));
        /* every row ignored: a loss of 0, not NaN */
        int32_t tg3[6] = {-1, -1, -1, -1, -1, -1};
        double zero = 0;
        bt_tensor *l3 = bt_cross_entropy(logits, bt_from_data(tg3, SH(2, 3), BT_I32, CPU), 5, -1);
        BT_CHECK(bt_item(l3) == 0, "cross_entropy with every row ignored: %g", bt_item(l3));
        (void)zero;
        free(lh);
    }
    bt_scope_end();
}

static void test_attention_forward(void) {
    struct { int64_t B, H, T, D; } cs[] = {{2, 3, 7, 5}, {1, 1, 1, 3}, {1, 2, 13, 8}, {2, 1, 33, 4}};
    bt_scope_begin();
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < 4; c++) {
            int64_t B = cs[c].B, H = cs[c].H, T = cs[c].T, D = cs[c].D;
            bt_shape s = SH(B, H, T, D);
            bt_tensor *q = rnd(s, DTS[k]), *kk = rnd(s, DTS[k]), *v = rnd(s, DTS[k]);
            double *qh = bt_test_host(q), *kh = bt_test_host(kk), *vh = bt_test_host(v);
            double *want = (double *)calloc((size_t)numel_of(s), sizeof(double)), *p = (double *)malloc(sizeof(double) * T);
            for (int64_t bh = 0; bh < B * H; bh++)
                for (int64_t i = 0; i < T; i++) {
                    double mx = -INFINITY, z = 0;
                    for (int64_t j = 0; j <= i; j++) {
                        double d = 0;
                        for (int64_t e = 0; e < D; e++) d += qh[(bh * T + i) * D + e] * kh[(bh * T + j) * D + e];
                        p[j] = d / sqrt((double)D); mx = fmax(mx, p[j]);
                    }
                    for (int64_t j = 0; j <= i; j++) { p[j] = exp(p[j] - mx); z += p[j]; }
                    for (int64_t j = 0; j <= i; j++)
                        for (int64_t e = 0; e < D; e++) want[(bh * T + i) * D + e] += p[j] / z * vh[(bh * T + j) * D + e];
                }
            char what[112]; snprintf(what, sizeof what, "attention B%lld H%lld T%lld D%lld", (long long)B, (long long)H, (long long)T, (long long)D);
            expect_close(what, bt_attention(q, kk, v), s, want, tol_of(DTS[k]));
            free(qh); free(kh); free(vh); free(want); free(p);
        }
    bt_scope_end();
}

static void test_concat_split_forward(void) {
    bt_scope_begin();
    for (int k = 0; k < 2; k++)
        for (int dim = 0; dim < 3; dim++) {
            bt_tensor *ps[11]; int64_t off[12] = {0};
            for (int i = 0; i < 11; i++) {
                int64_t d[3] = {2, 3, 4}; d[dim] = 1 + i % 3;
                ps[i] = rnd(S(3, d), DTS[k]);
                off[i + 1] = off[i] + d[dim];
            }
            bt_tensor *c = bt_concat(ps, 11, dim);
            int64_t od[3] = {2, 3, 4}; od[dim] = off[11];
            int ok = same_shape(c, S(3, od));
            for (int i = 0; ok && i < 11; i++)
                for (int64_t a = 0; a < ps[i]->shape[0]; a++) for (int64_t b = 0; b < ps[i]->shape[1]; b++) for (int64_t e = 0; e < ps[i]->shape[2]; e++) {
                    int64_t ix[3] = {a, b, e}, cx[3] = {a, b, e}; cx[dim] += off[i];
                    ok &= bt_get(c, cx) == bt_get(ps[i], ix);
                }
            BT_CHECK(ok, "concat of 11 pieces along dim %d (%s)", dim, bt_dtype_name(DTS[k]));
            /* split undoes it */
            int64_t sizes[11]; bt_tensor *outs[11];
            for (int i = 0; i < 11; i++) sizes[i] = ps[i]->shape[dim];
            bt_split(c, sizes, 11, dim, outs);
            ok = 1;
            for (int i = 0; i < 11; i++) {
                bt_tensor *d = bt_sub(outs[i], ps[i]);
                double *dh = bt_test_host(d);
                for (int64_t j = 0; j < bt_numel(d); j++) ok &= dh[j] == 0;
                ok &= outs[i]->storage == c->storage;
                free(dh);
            }
            BT_CHECK(ok, "split along dim %d", dim);
        }
    bt_tensor *two[2] = {rnd(SH(3, 2), BT_F32), rnd(SH(3, 5), BT_F32)};
    bt_tensor *c2 = bt_concat(two, 2, -1);
    BT_CHECK(c2->shape[1] == 7 && bt_get(c2, (int64_t[]){2, 6}) == bt_get(two[1], (int64_t[]){2, 4}), "concat dim -1");
    bt_scope_end();
}

/* bf16 forward: the reference is computed from the bf16 inputs in double, the output rounds to bf16 */
static void test_bf16_forward(void) {
    bt_scope_begin();
    bt_tensor *a = rnd(SH(13, 33), BT_BF16), *b = rnd(SH(33), BT_BF16), *w = rnd(SH(33, 7), BT_BF16);
    double *ah = bt_test_host(a), *bh = bt_test_host(b), *wh = bt_test_host(w);
    double *want = (double *)malloc(sizeof(double) * 13 * 33);
    for (int i = 0; i < 13 * 33; i++) want[i] = ah[i] + bh[i % 33];
    expect_close("bf16 add", bt_add(a, b), SH(13, 33), want, BT_TOL_BF16_OP);
    for (int i = 0; i < 13 * 33; i++) want[i] = ref_uop(6, ah[i]);
    expect_close("bf16 gelu", bt_gelu(a), SH(13, 33), want, BT_TOL_BF16_OP);
    for (int r = 0; r < 13; r++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < 33; j++) mx = fmax(mx, ah[r * 33 + j]);
        for (int j = 0; j < 33; j++) s += exp(ah[r * 33 + j] - mx);
        for (int j = 0; j < 33; j++) want[r * 33 + j] = exp(ah[r * 33 + j] - mx) / s;
    }
    expect_close("bf16 softmax", bt_softmax(a), SH(13, 33), want, BT_TOL_BF16_OP);
    double mw[13 * 7];
    for (int i = 0; i < 13; i++) for (int j = 0; j < 7; j++) { double s = 0; for (int k = 0; k < 33; k++) s += ah[i * 33 + k] * wh[k * 7 + j]; mw[i * 7 + j] = s; }
    expect_close("bf16 matmul", bt_matmul(a, w), SH(13, 7), mw, BT_TOL_BF16_OP);
    for (int r = 0; r < 13; r++) {
        double m = 0, v = 0;
        for (int j = 0; j < 33; j++) m += ah[r * 33 + j];
        m /= 33;
        for (int j = 0; j < 33; j++) v += (ah[r * 33 + j] - m) * (ah[r * 33 + j] - m);
        for (int j = 0; j < 33; j++) want[r * 33 + j] = (ah[r * 33 + j] - m) / sqrt(v / 33 + 1e-5) + bh[j];
    }
    expect_close("bf16 layernorm", bt_layernorm(a, NULL, b, 1e-5), SH(13, 33), want, BT_TOL_BF16_OP);
    double sw[13] = {0};
    for (int r = 0; r < 13; r++) for (int j = 0; j < 33; j++) sw[r] += ah[r * 33 + j];
    expect_close("bf16 sum", bt_sum(a, (int[]){1}, 1, 0), SH(13), sw, BT_TOL_BF16_OP);
    free(ah); free(bh); free(wh); free(want);
    bt_scope_end();
}

/* =============================================================================================
   (2) gradcheck: analytic gradients against float64 central differences
   f(inputs) = sum(op(inputs) * R) with R a fixed random tensor, so that every output element
   weighs in with its own coefficient (a permuted or mis-scaled gradient cannot cancel out).
   Tolerance BT_TOL_FD, 1e-6, relative over each input's whole gradient: with h = 1e-6 in float64 the central
   difference has truncation error ~ h^2 |f'''| / 6 ~ 1e-13 and rounding error ~ eps |f| / h ~ 1e-10
   |f|, both far below 1e-6 for O(1) values; a wrong backward formula is off by O(1). Inputs stay
   small so that the 2 * (number of elements) forward evaluations are cheap.
   ============================================================================================= */
typedef struct { int i[8]; double f[4]; bt_tensor *aux[4]; } gc_ctx;
typedef bt_tensor *(*gc_fn)(bt_tensor **in, const gc_ctx *c);

static double gc_eval(gc_fn f, bt_tensor **in, const gc_ctx *c, const double *R) {
    bt_scope_begin();
    bt_tensor *y = f(in, c);
    double *yh = bt_test_host(y), s = 0;
    for (int64_t i = 0; i < bt_numel(y); i++) s += yh[i] * R[i];
    free(yh);
    bt_scope_end();
    return s;
}
/* checks d f / d in[k] for every k whose tensor requires grad; inputs must be contiguous f64 leaves */
static void gradcheck(const char *name, gc_fn f, bt_tensor **in, int n, const gc_ctx *c) {
    const double h = 1e-6;
    for (int k = 0; k < n; k++) if (in[k]) { bt_release(in[k]->grad); in[k]->grad = NULL; }
    bt_scope_begin();
    bt_tensor *y = f(in, c);
    BT_CHECK(y->dtype == BT_F64 && y->grad_fn, "%s: output is not an f64 graph result", name);
    bt_tensor *R = rnd(bt_shape_of(y), BT_F64);
    bt_backward(bt_sum(bt_mul(y, R), NULL, 0, 0));
    double *Rh = bt_test_host(R);
    int old = bt_set_grad_enabled(0);
    for (int k = 0; k < n; k++) {
        bt_tensor *x = in[k];
        if (!x || !x->requires_grad) continue;
        if (!x->grad || !same_shape(x->grad, bt_shape_of(x)) || x->grad->dtype != BT_F64) {
            BT_CHECK(0, "%s: input %d has no gradient of its shape and dtype", name, k);
            continue;
        }
        int64_t m = bt_numel(x);
        double *an = bt_test_host(x->grad), *num = (double *)calloc((size_t)m + 1, sizeof(double)), *xp = (double *)bt_data_ptr(x);
        for (int64_t i = 0; i < m; i++) {
            double save = xp[i];
            xp[i] = save + h; double fp = gc_eval(f, in, c, Rh);
            xp[i] = save - h; double fm = gc_eval(f, in, c, Rh);
            xp[i] = save;
            num[i] = (fp - fm) / (2 * h);
        }
        double e = bt_test_relerr(an, num, m), nn = 0;
        for (int64_t i = 0; i < m; i++) nn += num[i] * num[i];
        BT_CHECK(e < BT_TOL_FD, "%s: input %d (%lld elements): gradient rel err %.3g", name, k, (long long)m, e);
        BT_CHECK(nn > 0, "%s: input %d: numeric gradient is all zero (the check would be vacuous)", name, k);
        free(an); free(num);
    }
    bt_set_grad_enabled(old);
    free(Rh);
    bt_scope_end();
    for (int k = 0; k < n; k++) if (in[k]) { bt_release(in[k]->grad); in[k]->grad = NULL; }
}
/* a leaf f64 tensor that requires grad, owned by the caller */
static bt_tensor *leaf_in(bt_shape s, double lo, double hi) {
    bt_scope_begin();
    bt_tensor *t = bt_keep(lo < hi ? rnd_in(s, BT_F64, lo, hi) : rnd(s, BT_F64));
    bt_scope_end();
    bt_set_requires_grad(t, 1);
    return t;
}
static bt_tensor *leaf(bt_shape s) { return leaf_in(s, 0, 0); }
static void release_all(bt_tensor **in, int n) { for (int k = 0; k < n; k++) bt_release(in[k]); }

static bt_tensor *f_unary(bt_tensor **in, const gc_ctx *c) { return apply_uop(c->i[0], in[0]); }
static bt_tensor *f_affine(bt_tensor **in, const gc_ctx *c) {
    return c->i[0] == 0 ? bt_affine(in[0], c->f[0], c->f[1]) : c->i[0] == 1 ? bt_scale(in[0], c->f[0]) : bt_add_scalar(bt_square(in[0]), c->f[1]);
}
static bt_tensor *f_binary(bt_tensor **in, const gc_ctx *c) { return apply_bop(c->i[0], in[0], in[1]); }
static bt_tensor *f_sum(bt_tensor **in, const gc_ctx *c) {
    return c->i[5] ? bt_mean(in[0], c->i[1] ? c->i + 2 : NULL, c->i[1], c->i[6]) : bt_sum(in[0], c->i[1] ? c->i + 2 : NULL, c->i[1], c->i[6]);
}
static bt_tensor *f_max(bt_tensor **in, const gc_ctx *c) { return bt_max(in[0], c->i[0], c->i[1]); }
static bt_tensor *f_matmul(bt_tensor **in, const gc_ctx *c) { return bt_matmul_t(in[0], in[1], c->i[0], c->i[1]); }
static bt_tensor *f_linear(bt_tensor **in, const gc_ctx *c) { (void)c; return bt_linear(in[0], in[1], in[2]); }
static bt_tensor *f_linear_add(bt_tensor **in, const gc_ctx *c) { (void)c; return bt_linear_add(in[0], in[1], in[2], in[3]); }
static bt_tensor *f_mlp_gelu(bt_tensor **in, const gc_ctx *c) { (void)c; return bt_mlp_gelu(in[0], in[1], in[2], in[3], in[4], in[5]); }
static bt_tensor *f_softmax(bt_tensor **in, const gc_ctx *c) { return c->i[0] ? bt_log_softmax(in[0]) : bt_softmax(in[0]); }
static bt_tensor *f_layernorm(bt_tensor **in, const gc_ctx *c) { return bt_layernorm(in[0], in[1], in[2], c->f[0]); }
static bt_tensor *f_embedding(bt_tensor **in, const gc_ctx *c) { return bt_embedding(in[0], c->aux[0]); }
static bt_tensor *f_xent(bt_tensor **in, const gc_ctx *c) { return bt_cross_entropy(in[0], c->aux[0], c->i[0], c->i[1]); }
static bt_tensor *f_xent_rows(bt_tensor **in, const gc_ctx *c) { return bt_cross_entropy_rows(in[0], c->aux[0], c->i[0], c->i[1]); }
static bt_tensor *f_attention(bt_tensor **in, const gc_ctx *c) { (void)c; return bt_attention(in[0], in[1], in[2]); }
static bt_tensor *f_concat(bt_tensor **in, const gc_ctx *c) { return bt_concat(in, c->i[0], c->i[1]); }
static bt_tensor *f_split(bt_tensor **in, const gc_ctx *c) {
    int64_t sizes[3] = {2, 4, 3}; bt_tensor *p[3];
    bt_split(in[0], sizes, 3, c->i[1], p);
    bt_tensor *q[3] = {bt_square(p[2]), p[0], bt_scale(p[1], -2.0)};    /* reordered, each transformed */
    return bt_concat(q, 3, c->i[1]);
}
static bt_tensor *f_views(bt_tensor **in, const gc_ctx *c) {
    bt_tensor *x = in[0];     /* [3, 4, 5] */
    switch (c->i[0]) {
    case 0: return bt_mul(bt_transpose(x, 0, 2), bt_transpose(x, 0, 2));
    case 1: return bt_tanh(bt_permute(x, (int[]){1, 2, 0}));
    case 2: return bt_square(bt_narrow(x, 1, 1, 2));
    case 3: return bt_exp(bt_select(x, 2, 3));
    case 4: return bt_mul(bt_expand(bt_narrow(x, 0, 1, 1), SH(2, 3, 4, 5)), bt_unsqueeze(bt_square(x), 0));
    case 5: return bt_squeeze(bt_unsqueeze(bt_tanh(x), 1), 1);
    case 6: return bt_view(bt_square(x), SH(-1, 10));
    case 7: return bt_reshape(bt_transpose(bt_tanh(x), 0, 1), SH(4, 15));   /* a copy: strides do not allow a view */
    case 8: return bt_contiguous(bt_permute(x, (int[]){2, 0, 1}));
    case 9: return bt_clone(bt_select(bt_transpose(x, 1, 2), 0, 1));
    default: {                 /* one tensor read through several overlapping views */
        bt_tensor *a = bt_narrow(x, 2, 0, 3), *b = bt_narrow(x, 2, 2, 3);
        return bt_add(bt_mul(a, b), bt_transpose(bt_narrow(bt_transpose(bt_select(x, 0, 2), 0, 1), 0, 1, 3), 0, 1));
    }
    }
}
/* h + linear(layernorm(h)), h = 2 x: the layernorm's input gradient is added in place into the
   skip path's (bt__pending_grad_sink) */
static bt_tensor *f_residual_ln(bt_tensor **in, const gc_ctx *c) {
    (void)c;
    bt_tensor *h = bt_scale(in[0], 2.0);
    return bt_linear_add(bt_layernorm(h, in[1], in[2], 1e-5), in[3], in[4], h);
}
/* 2-layer MLP: linear -> layernorm -> gelu -> linear, on a 3-D input */
static bt_tensor *f_mlp(bt_tensor **in, const gc_ctx *c) {
    (void)c;
    bt_tensor *h = bt_linear(in[0], in[1], in[2]);
    h = bt_gelu(bt_layernorm(h, in[3], in[4], 1e-5));
    return bt_linear(h, in[5], in[6]);
}
/* a tiny attention block: one qkv projection split by views, heads by view + transpose, attention,
   heads merged back by transpose + reshape (a copy), output projection, residual and loss */
static bt_tensor *f_attn_block(bt_tensor **in, const gc_ctx *c) {
    int64_t B = c->i[0], T = c->i[1], H = c->i[2], D = c->i[3], C = H * D;
    bt_tensor *x = in[0];
    bt_tensor *qkv = bt_linear(bt_layernorm(x, in[3], NULL, 1e-5), in[1], in[2]);     /* [B, T, 3C] */
    bt_tensor *qkv5 = bt_view(qkv, SH(B, T, 3, H, D));
    bt_tensor *q = bt_transpose(bt_select(qkv5, 2, 0), 1, 2);    /* [B, H, T, D], strided */
    bt_tensor *k = bt_transpose(bt_select(qkv5, 2, 1), 1, 2);
    bt_tensor *v = bt_permute(bt_select(qkv5, 2, 2), (int[]){0, 2, 1, 3});
    bt_tensor *o = bt_attention(q, k, v);
    bt_tensor *merged = bt_reshape(bt_transpose(o, 1, 2), SH(B, T, C));
    bt_tensor *y = bt_add(x, bt_matmul_t(merged, in[4], 0, 1));
    return bt_cross_entropy(y, c->aux[0], -1, -100);
}

static void test_gradcheck_elementwise(void) {
    for (int op = 0; op < 8; op++) {
        bt_tensor *x = op == 2 || op == 3 ? leaf_in(SH(3, 4), 0.2, 2.0) : leaf(SH(3, 4));
        gc_ctx c = {.i = {op}}; char what[32]; snprintf(what, sizeof what, "gradcheck %s", uop_name[op]);
        gradcheck(what, f_unary, &x, 1, &c);
        bt_release(x);
    }
    for (int m = 0; m < 3; m++) {
        bt_tensor *x = leaf(SH(2, 5));
        gc_ctx c = {.i = {m}, .f = {-1.5, 0.75}};
        gradcheck(m == 0 ? "gradcheck affine" : m == 1 ? "gradcheck scale" : "gradcheck add_scalar", f_affine, &x, 1, &c);
        bt_release(x);
    }
    struct { bt_shape a, b; } cases[] = {{SH(3, 1, 5), SH(4, 1)}, {SH(4, 1), SH(3, 1, 5)}, {SH(2, 3), SH(3)}, {SH(1), SH(2, 2)}, {SH(3, 4), SH(3, 4)}};
    for (int op = 0; op < 4; op++)
        for (int ci = 0; ci < 5; ci++) {
            bt_tensor *in[2] = {leaf(cases[ci].a), op == 3 ? leaf_in(cases[ci].b, 0.5, 2.0) : leaf(cases[ci].b)};
            gc_ctx c = {.i = {op}}; char what[48]; snprintf(what, sizeof what, "gradcheck %s case %d", bop_name[op], ci);
            gradcheck(what, f_binary, in, 2, &c);
            release_all(in, 2);
        }
    /* only one side requires grad */
    bt_scope_begin();
    bt_tensor *in[2] = {leaf(SH(3, 4)), bt_keep(rnd_in(SH(4), BT_F64, 0.5, 2.0))};
    bt_scope_end();
    gc_ctx c = {.i = {3}};
    gradcheck("gradcheck div, a only", f_binary, in, 2, &c);
    BT_CHECK(in[1]->grad == NULL, "a tensor that does not require grad got one");
    release_all(in, 2);
}

static void test_gradcheck_reductions(void) {
    struct { int n; int d[4]; } sets[] = {{1, {1}}, {2, {0, 2}}, {2, {1, 2}}, {0, {0}}, {1, {-1}}, {3, {0, 1, 2}}};
    for (int si = 0; si < 6; si++)
        for (int keep = 0; keep < 2; keep++)
            for (int mean = 0; mean < 2; mean++) {
                bt_tensor *x = leaf(SH(3, 4, 5));
                gc_ctx c; memset(&c, 0, sizeof c);
                c.i[1] = sets[si].n; for (int j = 0; j < sets[si].n; j++) c.i[2 + j] = sets[si].d[j];
                c.i[5] = mean; c.i[6] = keep;
                char what[64]; snprintf(what, sizeof what, "gradcheck %s set %d keepdim %d", mean ? "mean" : "sum", si, keep);
                gradcheck(what, f_sum, &x, 1, &c);
                bt_release(x);
            }
    for (int dim = -1; dim < 3; dim++)
        for (int keep = 0; keep < 2; keep++) {
            bt_tensor *x = leaf(SH(3, 4, 5));
            gc_ctx c = {.i = {dim, keep}};
            gradcheck("gradcheck max", f_max, &x, 1, &c);
            bt_release(x);
        }
}

static void test_gradcheck_matmul(void) {
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1;
        gc_ctx c = {.i = {ta, tb}};
        char what[64];
        bt_tensor *in[2] = {ta ? leaf(SH(4, 3)) : leaf(SH(3, 4)), tb ? leaf(SH(5, 4)) : leaf(SH(4, 5))};
        snprintf(what, sizeof what, "gradcheck matmul 2-D ta %d tb %d", ta, tb);
        gradcheck(what, f_matmul, in, 2, &c); release_all(in, 2);
        bt_tensor *in2[2] = {ta ? leaf(SH(3, 1, 4, 3)) : leaf(SH(3, 1, 3, 4)), tb ? leaf(SH(2, 5, 4)) : leaf(SH(2, 4, 5))};
        snprintf(what, sizeof what, "gradcheck matmul broadcast batch ta %d tb %d", ta, tb);
        gradcheck(what, f_matmul, in2, 2, &c); release_all(in2, 2);
        bt_tensor *in3[2] = {ta ? leaf(SH(2, 4, 3)) : leaf(SH(2, 3, 4)), tb ? leaf(SH(5, 4)) : leaf(SH(4, 5))};
        snprintf(what, sizeof what, "gradcheck matmul 3-D x 2-D ta %d tb %d", ta, tb);
        gradcheck(what, f_matmul, in3, 2, &c); release_all(in3, 2);
        bt_tensor *in4[2] = {ta ? leaf(SH(4, 3)) : leaf(SH(3, 4)), tb ? leaf(SH(2, 5, 4)) : leaf(SH(2, 4, 5))};
        snprintf(what, sizeof what, "gradcheck matmul 2-D x 3-D ta %d tb %d", ta, tb);
        gradcheck(what, f_matmul, in4, 2, &c); release_all(in4, 2);
    }
    gc_ctx c0 = {.i = {0, 0}};
    bt_tensor *mv[2] = {leaf(SH(2, 3, 4)), leaf(SH(4))};
    gradcheck("gradcheck matmul batched matrix x vector", f_matmul, mv, 2, &c0); release_all(mv, 2);
    bt_tensor *vm[2] = {leaf(SH(3)), leaf(SH(3, 5))};
    gradcheck("gradcheck matmul vector x matrix", f_matmul, vm, 2, &c0); release_all(vm, 2);
    bt_tensor *vv[2] = {leaf(SH(6)), leaf(SH(6))};
    gradcheck("gradcheck matmul vector x vector", f_matmul, vv, 2, &c0); release_all(vv, 2);
    gc_ctx c1 = {.i = {1, 0}};
    bt_tensor *tv[2] = {leaf(SH(4, 3)), leaf(SH(4))};
    gradcheck("gradcheck matmul transa matrix x vector", f_matmul, tv, 2, &c1); release_all(tv, 2);
    for (int hb = 0; hb < 2; hb++) {
        bt_tensor *in[3] = {leaf(SH(2, 3, 4)), leaf(SH(5, 4)), hb ? leaf(SH(5)) : NULL};
        gradcheck(hb ? "gradcheck linear with bias" : "gradcheck linear without bias", f_linear, in, 3, &c0);
        release_all(in, 3);
    }
}

static void test_gradcheck_nn(void) {
    for (int lg = 0; lg < 2; lg++) {
        bt_tensor *x = leaf(SH(2, 3, 5));
        gc_ctx c = {.i = {lg}};
        gradcheck(lg ? "gradcheck log_softmax" : "gradcheck softmax", f_softmax, &x, 1, &c);
        bt_release(x);
    }
    for (int m = 0; m < 4; m++) {
        bt_tensor *in[3] = {leaf(SH(3, 6)), m & 1 ? leaf(SH(6)) : NULL, m & 2 ? leaf(SH(6)) : NULL};
        gc_ctx c = {.i = {0}, .f = {1e-5}};
        char what[48]; snprintf(what, sizeof what, "gradcheck layernorm w %d b %d", m & 1, m >> 1);
        gradcheck(what, f_layernorm, in, 3, &c);
        release_all(in, 3);
    }
    bt_scope_begin();
    int32_t idx[8] = {1, 4, 1, 0, 4, 4, 2, 1};   /* repeats: their gradients add up */
    gc_ctx ce = {.i = {0}};
    ce.aux[0] = bt_keep(bt_from_data(idx, SH(2, 4), BT_I32, CPU));
    int32_t tg[6] = {0, 4, -100, 2, 1, 3};
    gc_ctx cx = {.i = {5, -100}};
    cx.aux[0] = bt_keep(bt_from_data(tg, SH(2, 3), BT_I32, CPU));
    bt_scope_end();
    bt_tensor *table = leaf(SH(5, 3));
    gradcheck("gradcheck embedding", f_embedding, &table, 1, &ce);
    bt_release(table); bt_release(ce.aux[0]);
    bt_tensor *logits = leaf(SH(2, 3, 7));
    gradcheck("gradcheck cross_entropy V < Vp with ignore_index", f_xent, &logits, 1, &cx);
    gradcheck("gradcheck cross_entropy_rows V < Vp with ignore_index", f_xent_rows, &logits, 1, &cx);
    bt_release(logits); bt_release(cx.aux[0]);
    bt_tensor *qkv[3] = {leaf(SH(1, 2, 7, 5)), leaf(SH(1, 2, 7, 5)), leaf(SH(1, 2, 7, 5))};
    gradcheck("gradcheck attention T 7 D 5", f_attention, qkv, 3, &ce);
    release_all(qkv, 3);
    bt_tensor *qkv2[3] = {leaf(SH(2, 1, 3, 2)), leaf(SH(2, 1, 3, 2)), leaf(SH(2, 1, 3, 2))};
    gradcheck("gradcheck attention B 2", f_attention, qkv2, 3, &ce);
    release_all(qkv2, 3);
    bt_tensor *gqa[3] = {leaf(SH(2, 6, 5, 4)), leaf(SH(2, 2, 5, 4)), leaf(SH(2, 2, 5, 4))};
    gradcheck("gradcheck grouped-query attention H 6 Hkv 2", f_attention, gqa, 3, &ce);
    release_all(gqa, 3);
}

static void test_gradcheck_shape_ops(void) {
    for (int dim = 0; dim < 2; dim++) {
        bt_tensor *ps[10];
        for (int i = 0; i < 10; i++) ps[i] = dim ? leaf(SH(2, 1 + i % 2)) : leaf(SH(1 + i % 2, 3));
        gc_ctx c = {.i = {10, dim}};
        gradcheck(dim ? "gradcheck concat of 10 along dim 1" : "gradcheck concat of 10 along dim 0", f_concat, ps, 10, &c);
        release_all(ps, 10);
        bt_tensor *x = dim ? leaf(SH(2, 9)) : leaf(SH(9, 2));
        gradcheck("gradcheck split", f_split, &x, 1, &c);
        bt_release(x);
    }
    for (int v = 0; v < 11; v++) {
        bt_tensor *x = leaf(SH(3, 4, 5));
        gc_ctx c = {.i = {v}};
        char what[32]; snprintf(what, sizeof what, "gradcheck views %d", v);
        gradcheck(what, f_views, &x, 1, &c);
        bt_release(x);
    }
}

static void test_gradcheck_composite(void) {
    bt_tensor *mlp[7] = {leaf(SH(2, 3, 4)), leaf(SH(6, 4)), leaf(SH(6)), leaf(SH(6)), leaf(SH(6)), leaf(SH(3, 6)), leaf(SH(3))};
    gc_ctx c0; memset(&c0, 0, sizeof c0);
    gradcheck("gradcheck MLP (linear, layernorm, gelu, linear)", f_mlp, mlp, 7, &c0);
    release_all(mlp, 7);
    bt_tensor *mg[6] = {leaf(SH(2, 3, 5)), leaf(SH(7, 5)), leaf(SH(7)), leaf(SH(4, 7)), leaf(SH(4)), leaf(SH(2, 3, 4))};
    gradcheck("gradcheck mlp_gelu with a residual", f_mlp_gelu, mg, 6, &c0);
    bt_tensor *res = mg[5];
    mg[5] = NULL;
    gradcheck("gradcheck mlp_gelu", f_mlp_gelu, mg, 5, &c0);
    bt_release(res);
    release_all(mg, 5);
    bt_tensor *rl[5] = {leaf(SH(2, 3, 6)), leaf(SH(6)), leaf(SH(6)), leaf(SH(6, 6)), leaf(SH(6))};
    gradcheck("gradcheck h + linear(layernorm(h)) (gradient summed in place)", f_residual_ln, rl, 5, &c0);
    release_all(rl, 5);
    bt_tensor *la[4] = {leaf(SH(2, 3, 5)), leaf(SH(4, 5)), leaf(SH(4)), leaf(SH(2, 3, 4))};
    gradcheck("gradcheck linear_add", f_linear_add, la, 4, &c0);
    BT_EXPECT_ERROR(bt_linear_add(la[0], la[1], la[2], NULL), "no residual");
    release_all(la, 4);
    int64_t B = 2, T = 3, H = 2, D = 2, C = H * D;
    bt_tensor *blk[5] = {leaf(SH(B, T, C)), leaf(SH(3 * C, C)), leaf(SH(3 * C)), leaf(SH(C)), leaf(SH(C, C))};
    gc_ctx c = {.i = {(int)B, (int)T, (int)H, (int)D}};
    int32_t tg[6] = {0, 3, 1, -100, 2, 2};
    bt_scope_begin(); c.aux[0] = bt_keep(bt_from_data(tg, SH(2, 3), BT_I32, CPU)); bt_scope_end();
    gradcheck("gradcheck attention block (views, permutes, attention, reshape)", f_attn_block, blk, 5, &c);
    release_all(blk, 5); bt_release(c.aux[0]);
}


/* =============================================================================================
   (3) the whole unary op list: a reference written here for every op of BT_UNARY_OPS, independent
   of the list's own formulas, and float64 finite differences of each. An op added to the list
   without a reference here fails (so its formula is checked once by hand).
   ============================================================================================= */
static int ref_unary(int op, double x, double *y) {
    switch (op) {
    case BT_UOP_NEG: *y = -x; return 1;
    case BT_UOP_EXP: *y = exp(x); return 1;
    case BT_UOP_LOG: *y = log(x); return 1;
    case BT_UOP_SQRT: *y = sqrt(x); return 1;
    case BT_UOP_RSQRT: *y = 1.0 / sqrt(x); return 1;
    case BT_UOP_TANH: *y = tanh(x); return 1;
    case BT_UOP_SIGMOID: *y = 1.0 / (1.0 + exp(-x)); return 1;
    case BT_UOP_SILU: *y = x / (1.0 + exp(-x)); return 1;
    case BT_UOP_RELU: *y = x > 0 ? x : 0; return 1;
    case BT_UOP_GELU: *y = ref_uop(6, x); return 1;
    case BT_UOP_SQUARE: *y = x * x; return 1;
    case BT_UOP_RECIP: *y = 1.0 / x; return 1;
    default: return 0;
    }
}
static bt_tensor *f_unary_list(bt_tensor **in, const gc_ctx *c) { return oc_unary_fn[c->i[0]](in[0]); }
static void test_unary_list(void) {
    bt_scope_begin();
    for (int op = 0; op < BT_NUOPS; op++) {
        const char *name = bt_unary_op_name((bt_unary_op)op);
        int pos = oc_unary_positive(op);
        bt_tensor *x = pos ? rnd_in(SH(67), BT_F64, 0.25, 3.0) : bt_scale(rnd(SH(67), BT_F64), 1.5);
        double *xh = bt_test_host(x), want[67];
        int ok = 1;
        for (int i = 0; i < 67; i++) ok &= ref_unary(op, xh[i], &want[i]);
        BT_CHECK(ok, "unary op %s has no hand-written reference in test_ops.c (ref_unary)", name);
        if (ok) {
            char what[48]; snprintf(what, sizeof what, "unary list %s", name);
            expect_close(what, oc_unary_fn[op](x), SH(67), want, BT_TOL_F64);
            bt_tensor *xf = bt_cast(x, BT_F32);
            double *xfh = bt_test_host(xf);
            for (int i = 0; i < 67; i++) ref_unary(op, xfh[i], &want[i]);
            expect_close(what, oc_unary_fn[op](xf), SH(67), want, BT_TOL_F32_ROUND);
            free(xfh);
        }
        free(xh);
    }
    bt_scope_end();
    for (int op = 0; op < BT_NUOPS; op++) {
        bt_tensor *x = oc_unary_positive(op) ? leaf_in(SH(3, 4), 0.25, 3.0) : leaf(SH(3, 4));
        gc_ctx c = {.i = {op}};
        char what[48]; snprintf(what, sizeof what, "gradcheck unary list %s", bt_unary_op_name((bt_unary_op)op));
        gradcheck(what, f_unary_list, &x, 1, &c);
        bt_release(x);
    }
}

/* =============================================================================================
   Llama's ops: rmsnorm, swiglu, rope. Gradchecks (f64 central differences), values against hand
   references and the plain ops they fuse, the rounding conventions, and the errors.
   ============================================================================================= */
static bt_tensor *f_rmsnorm(bt_tensor **in, const gc_ctx *c) { return bt_rmsnorm(in[0], in[1], c->f[0]); }
static bt_tensor *f_swiglu(bt_tensor **in, const gc_ctx *c) {
    return c->i[0] ? bt_swiglu(bt_transpose(in[0], 0, 1)) : bt_swiglu(in[0]);
}
/* rope at pos0 i[0], theta f[0], llama3 when i[2]; i[1] 1: x = the k heads (narrow) of a
   [B, T, 3H, D] buffer in[0], with H = i[3] */
static bt_tensor *f_rope(bt_tensor **in, const gc_ctx *c) {
    bt_rope_opts o = {c->f[0], 0, 0, 0, 0};
    if (c->i[2]) { o.factor = 8; o.low_freq_factor = 1; o.high_freq_factor = 4; o.original_max_position_embeddings = 64; }
    bt_tensor *x = c->i[1] ? bt_narrow(in[0], 2, c->i[3], c->i[3]) : in[0];
    return bt_rope_ex(x, &o, c->i[0]);
}
/* h + linear(rmsnorm(h)), h = 2 x, no bias: the rmsnorm's input gradient added in place into the skip path's */
static bt_tensor *f_residual_rms(bt_tensor **in, const gc_ctx *c) {
    (void)c;
    bt_tensor *h = bt_scale(in[0], 2.0);
    return bt_linear_add(bt_rmsnorm(h, in[1], 1e-5), in[2], NULL, h);
}
/* Llama's packed attention: H i[0], Hkv i[1], RoPE (theta 10000, llama3 when i[2]) */
static bt_tensor *f_attention_qkv_ex(bt_tensor **in, const gc_ctx *c) {
    bt_rope_opts o = {10000.0, 0, 0, 0, 0};
    if (c->i[2]) { o.factor = 8; o.low_freq_factor = 1; o.high_freq_factor = 4; o.original_max_position_embeddings = 4; }
    return bt_attention_qkv_ex(in[0], c->i[0], c->i[1], &o);
}
static void test_gradcheck_llama(void) {
    for (int j = 0; j < 2; j++) {
        bt_tensor *x = leaf(j ? SH(1, 6, (4 + 2 * 1) * 4) : SH(2, 5, (4 + 2 * 2) * 6));
        gc_ctx c = {.i = {4, j ? 1 : 2, j}};
        gradcheck(j ? "gradcheck attention_qkv_ex H 4 Hkv 1 rope llama3" : "gradcheck attention_qkv_ex H 4 Hkv 2 rope", f_attention_qkv_ex, &x,
                  1, &c);
        bt_release(x);
    }
    for (int m = 0; m < 2; m++) {
        bt_tensor *in[2] = {leaf(SH(3, 6)), m ? leaf(SH(6)) : NULL};
        gc_ctx c = {.f = {1e-5}};
        gradcheck(m ? "gradcheck rmsnorm w" : "gradcheck rmsnorm", f_rmsnorm, in, 2, &c);
        release_all(in, 2);
    }
    bt_tensor *rl[3] = {leaf(SH(4, 6)), leaf(SH(6)), leaf(SH(6, 6))};
    gc_ctx c0 = {.i = {0}};
    gradcheck("gradcheck h + linear(rmsnorm(h)) (gradient summed in place)", f_residual_rms, rl, 3, &c0);
    release_all(rl, 3);
    for (int t = 0; t < 2; t++) {
        bt_tensor *x = t ? leaf(SH(10, 3)) : leaf(SH(2, 3, 10));
        gc_ctx c = {.i = {t}};
        gradcheck(t ? "gradcheck swiglu of a transposed view" : "gradcheck swiglu", f_swiglu, &x, 1, &c);
        bt_release(x);
    }
    struct { int pos0, view, llama3; double theta; } rc[4] = {{0, 0, 0, 10000.0}, {5, 0, 0, 10000.0}, {3, 1, 0, 100.0}, {50, 0, 1, 500000.0}};
    for (int j = 0; j < 4; j++) {
        bt_tensor *x = rc[j].view ? leaf(SH(2, 3, 6, 4)) : leaf(SH(2, 3, 2, 8));
        gc_ctx c = {.i = {rc[j].pos0, rc[j].view, rc[j].llama3, 2}, .f = {rc[j].theta}};
        char what[80];
        snprintf(what, sizeof what, "gradcheck rope pos0 %d%s%s", rc[j].pos0, rc[j].view ? " of a qkv buffer's k" : "", rc[j].llama3 ? " llama3" : "");
        gradcheck(what, f_rope, &x, 1, &c);
        bt_release(x);
    }
}
/* rmsnorm: a hand loop in f64; the composite of plain ops (value and gradients); a constant row;
   the bf16 convention (round(round(x rstd) w)) bit for bit on the CPU */
static void test_rmsnorm_values(void) {
    bt_scope_begin();
    const int64_t R = 3, C = 7;
    bt_tensor *x = rnd(SH(R, C), BT_F64), *w = rnd(SH(C), BT_F64), *g = rnd(SH(R, C), BT_F64);
    bt_set_requires_grad(x, 1); bt_set_requires_grad(w, 1);
    bt_tensor *y = bt_rmsnorm(x, w, 1e-6);
    double *xh = bt_test_host(x), *wh = bt_test_host(w), want[21];
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t j = 0; j < C; j++) ss += xh[r * C + j] * xh[r * C + j];
        for (int64_t j = 0; j < C; j++) want[r * C + j] = xh[r * C + j] / sqrt(ss / C + 1e-6) * wh[j];
    }
    expect_close("rmsnorm against a loop", y, SH(R, C), want, BT_TOL_F64_ROUND * 10);
    bt_backward_with(y, g);
    bt_tensor *gx = bt_clone(x->grad), *gw = bt_clone(w->grad);
    bt_zero_(x->grad); bt_zero_(w->grad);
    int last = -1;
    bt_tensor *ms = bt_mean(bt_square(x), &last, 1, 1);                   /* [R, 1] */
    bt_tensor *y2 = bt_mul(bt_mul(x, bt_rsqrt(bt_add_scalar(ms, 1e-6))), w);
    bt_backward_with(y2, g);
    BT_CHECK(bt_test_relerr_t(y, y2) < BT_TOL_F64 && bt_test_relerr_t(gx, x->grad) < BT_TOL_F64 && bt_test_relerr_t(gw, w->grad) < BT_TOL_F64,
             "rmsnorm against x rsqrt(mean(x^2) + eps) w: value %g, gx %g, gw %g", bt_test_relerr_t(y, y2),
             bt_test_relerr_t(gx, x->grad), bt_test_relerr_t(gw, w->grad));
    free(xh); free(wh);
    /* a constant row c: y = c / sqrt(c^2 + eps), without and with w */
    bt_tensor *k = bt_full(SH(2, 5), -3.0, BT_F64, CPU), *kw = bt_add_scalar(bt_arange(5, BT_F64, CPU), 1.0);
    bt_tensor *ky = bt_rmsnorm(k, NULL, 1e-5), *kyw = bt_rmsnorm(k, kw, 1e-5);
    double e = 0, v = -3.0 / sqrt(9.0 + 1e-5);
    for (int64_t j = 0; j < 5; j++) {
        e = fmax(e, fabs(bt_get(ky, (int64_t[]){1, j}) - v));
        e = fmax(e, fabs(bt_get(kyw, (int64_t[]){0, j}) - v * (double)(j + 1)));
    }
    BT_CHECK(e < 1e-15, "rmsnorm of a constant row -3: max err %g", e);
    /* bf16: the normalised x is rounded to bf16 before the product with w, the product rounded again */
    bt_tensor *xb = bt_cast(rnd(SH(4, 9), BT_F32), BT_BF16), *wb = bt_cast(rnd(SH(9), BT_F32), BT_BF16);
    bt_tensor *yb = bt_rmsnorm(xb, wb, 1e-5);
    int bad = 0;
    for (int64_t r = 0; r < 4; r++) {
        double ss = 0;
        for (int64_t j = 0; j < 9; j++) { double t = bt_get(xb, (int64_t[]){r, j}); ss += t * t; }
        float rs = (float)(1.0 / sqrt(ss / 9 + 1e-5));
        for (int64_t j = 0; j < 9; j++) {
            uint16_t nb = bt__f32_to_bf16((float)(bt_get(xb, (int64_t[]){r, j}) * rs));
            float want1 = bt__bf16_to_f32(bt__f32_to_bf16((float)((double)bt__bf16_to_f32(nb) * bt_get(wb, (int64_t[]){j}))));
            bad += bt_get(yb, (int64_t[]){r, j}) != want1;
        }
    }
    BT_CHECK(bad == 0, "rmsnorm bf16: %d of 36 values differ from round(round(x rstd) w)", bad);
    bt_scope_end();
}
/* swiglu: gate first, against silu(x[.., :F]) * x[.., F:] from plain ops (value and gradient), and
   hand values */
static void test_swiglu_values(void) {
    bt_scope_begin();
    bt_tensor *x = rnd(SH(3, 2, 10), BT_F64), *g = rnd(SH(3, 2, 5), BT_F64);
    bt_set_requires_grad(x, 1);
    bt_tensor *y = bt_swiglu(x);
    bt_backward_with(y, g);
    bt_tensor *gx = bt_clone(x->grad);
    bt_zero_(x->grad);
    bt_tensor *y2 = bt_mul(bt_silu(bt_narrow(x, 2, 0, 5)), bt_narrow(x, 2, 5, 5));
    bt_backward_with(y2, g);
    BT_CHECK(bt_test_relerr_t(y, y2) < BT_TOL_F64_ROUND * 10 && bt_test_relerr_t(gx, x->grad) < BT_TOL_F64_ROUND * 10,
             "swiglu against silu(gate) * up: value %g, gradient %g", bt_test_relerr_t(y, y2), bt_test_relerr_t(gx, x->grad));
    double hv[6] = {0.0, 1.0, -2.0, 3.0, 2.0, 0.5};   /* gate 0, 1, -2; up 3, 2, 0.5 */
    bt_tensor *h = bt_swiglu(bt_from_data(hv, SH(1, 6), BT_F64, CPU));
    double want[3] = {0.0, 2.0 / (1.0 + exp(-1.0)), 0.5 * -2.0 / (1.0 + exp(2.0))};
    expect_close("swiglu hand values", h, SH(1, 3), want, 1e-15);
    bt_scope_end();
}
/* rope: the identity at position 0; a hand value; each pair's norm kept; the gradient is the inverse
   rotation (rope(grad) == the upstream gradient); a strided view gives the bits of its contiguous
   copy; llama3 frequencies by region */
static void test_rope_values(void) {
    bt_scope_begin();
    bt_tensor *x = rnd(SH(2, 4, 3, 8), BT_F32);
    bt_tensor *y = bt_rope(x, 10000.0, 0);
    double e0 = 0;
    for (int64_t b = 0; b < 2; b++) for (int64_t h = 0; h < 3; h++) for (int64_t d = 0; d < 8; d++)
        e0 = fmax(e0, fabs(bt_get(y, (int64_t[]){b, 0, h, d}) - bt_get(x, (int64_t[]){b, 0, h, d})));
    BT_CHECK(e0 == 0, "rope at position 0 must be the identity, max diff %g", e0);
    double xv[4] = {1.0, 2.0, 3.0, 4.0};   /* D 4: inv_freq {1, 0.01}; position 1 (pos0 1, t 0) */
    bt_tensor *hy = bt_rope(bt_from_data(xv, SH(1, 1, 1, 4), BT_F64, CPU), 10000.0, 1);
    double a1 = (double)0.01f;
    double want[4] = {cos(1.0) - 3 * sin(1.0), 2 * cos(a1) - 4 * sin(a1), 3 * cos(1.0) + sin(1.0), 4 * cos(a1) + 2 * sin(a1)};
    expect_close("rope hand values", hy, SH(1, 1, 1, 4), want, 1e-15);
    bt_tensor *x64 = rnd(SH(2, 5, 2, 64), BT_F64), *r = rnd(SH(2, 5, 2, 64), BT_F64);
    bt_set_requires_grad(x64, 1);
    bt_tensor *y64 = bt_rope(x64, 10000.0, 4000);
    double en = 0;
    for (int64_t t = 0; t < 5; t++) for (int64_t i = 0; i < 32; i++) {
        int64_t a[4] = {1, t, 1, i}, b[4] = {1, t, 1, i + 32};
        double nx = hypot(bt_get(x64, a), bt_get(x64, b)), ny = hypot(bt_get(y64, a), bt_get(y64, b));
        en = fmax(en, fabs(nx - ny) / nx);
    }
    BT_CHECK(en < 1e-14, "rope must keep each pair's norm, max rel err %g", en);
    bt_backward_with(y64, r);
    bt_tensor *back = bt_rope(x64->grad, 10000.0, 4000);
    BT_CHECK(bt_test_relerr_t(back, r) < 1e-14, "rope's gradient must be the inverse rotation: rel err %g", bt_test_relerr_t(back, r));
    bt_tensor *buf = rnd(SH(2, 3, 8, 16), BT_F32);     /* [B, T, H + 2 Hkv, D], H 4, Hkv 2: the k heads */
    bt_tensor *kv = bt_narrow(buf, 2, 4, 2);
    BT_CHECK(bt_test_relerr_t(bt_rope(kv, 10000.0, 9), bt_rope(bt_contiguous(kv), 10000.0, 9)) == 0,
             "rope of a strided view must equal rope of its contiguous copy");
    bt_rope_opts o = {500000.0, 8, 1, 4, 64}, o0 = {500000.0, 0, 0, 0, 0};
    float f[32], f0[32];
    bt_rope_inv_freq(&o, 64, f); bt_rope_inv_freq(&o0, 64, f0);
    int nh = 0, nl = 0, nm = 0, bad = 0;
    for (int i = 0; i < 32; i++) {
        float wl = 6.2831853f / f0[i];
        if (wl < 16) { nh++; bad += f[i] != f0[i]; }
        else if (wl > 64) { nl++; bad += f[i] != f0[i] / 8.0f; }
        else { nm++; bad += !(f[i] < f0[i] && f[i] > f0[i] / 8.0f); }
    }
    BT_CHECK(bad == 0 && nh > 0 && nl > 0 && nm > 0, "llama3 inv_freq: %d wrong (high %d, low %d, medium %d)", bad, nh, nl, nm);
    BT_CHECK(f0[0] == 1.0f && f0[16] == 1.0f / powf(500000.0f, 0.5f), "default inv_freq: %g, %g", f0[0], f0[16]);
    bt_scope_end();
}
static void test_llama_errors(void) {
    bt_scope_begin();
    bt_tensor *x = rnd(SH(2, 3, 4, 6), BT_F32);
    BT_EXPECT_ERROR(bt_rmsnorm(x, rnd(SH(5), BT_F32), 1e-5), "rmsnorm: w");
    BT_EXPECT_ERROR(bt_rmsnorm(x, rnd(SH(6), BT_F64), 1e-5), "rmsnorm: dtypes differ");
    BT_EXPECT_ERROR(bt_rmsnorm(x, NULL, 0.0), "rmsnorm: eps");
    BT_EXPECT_ERROR(bt_rmsnorm(bt_scalar(1.0, BT_F32, CPU), NULL, 1e-5), "rmsnorm: needs at least 1 dim");
    BT_EXPECT_ERROR(bt_swiglu(rnd(SH(3, 7), BT_F32)), "swiglu: the last dim");
    BT_EXPECT_ERROR(bt_swiglu(bt_zeros(SH(3, 4), BT_I32, CPU)), "swiglu: x must be a float tensor");
    BT_EXPECT_ERROR(bt_rope(rnd(SH(2, 3, 4, 5), BT_F32), 10000.0, 0), "rope: the head dim D");
    BT_EXPECT_ERROR(bt_rope(rnd(SH(2, 3, 1, 514), BT_F32), 10000.0, 0), "at most 512");
    BT_EXPECT_ERROR(bt_rope(rnd(SH(3, 4, 6), BT_F32), 10000.0, 0), "rope: x must be [B, T, H, D]");
    BT_EXPECT_ERROR(bt_rope(x, 10000.0, -1), "rope: positions");
    BT_EXPECT_ERROR(bt_rope(x, 0.0, 0), "rope: theta");
    bt_rope_opts bad = {500000.0, 8, 4, 1, 8192};
    BT_EXPECT_ERROR(bt_rope_ex(x, &bad, 0), "llama3 scaling");
    bt_scope_end();
}

/* =============================================================================================
   (4) the op table of tests/op_cases.h on the CPU, in f32, bf16 and f16, each case against the
   same case in f64 from the same (rounded) inputs; tolerances in op_cases.h
   ============================================================================================= */
static void run_table(bt_dtype dt) {
    char where[32];
    snprintf(where, sizeof where, "cpu %s", bt_dtype_name(dt));
    oc_build_table();
    oc_stats st; memset(&st, 0, sizeof st);
    for (int i = 0; i < oc_ncases; i++) {
        oc_result ref;
        if (oc_run_guarded(i, CPU, CPU, BT_F64, dt, &ref)) {
            BT_CHECK(0, "%s reference of %s: error: %s", where, oc_cases[i].name, oc_error_msg);
            st.failed++;
            continue;
        }
        oc_check(where, i, CPU, CPU, dt, 0, &ref, &st);
        oc_result_free(&ref);
    }
    oc_report(where, &st);
}
static void test_table_cpu_f32(void) { run_table(BT_F32); }
static void test_table_cpu_bf16(void) { run_table(BT_BF16); }
static void test_table_cpu_f16(void) { run_table(BT_F16); }

/* no case is vacuous: every reference output and gradient is finite and not all zero (except
   bt_zeros'), every differentiable case has a gradient for each of its inputs, and the table
   holds every op of the two op lists */
static void test_table_references(void) {
    oc_build_table();
    int n_unary = 0, n_binary = 0;
    for (int i = 0; i < oc_ncases; i++) {
        const oc_case *k = &oc_cases[i];
        n_unary += k->fn == oc_f_unary && !k->i[1];
        n_binary += k->fn == oc_f_binary && k->i[1];
        oc_result r;
        if (oc_run_guarded(i, CPU, CPU, BT_F64, BT_F32, &r)) { BT_CHECK(0, "%s: error: %s", k->name, oc_error_msg); continue; }
        BT_CHECK(r.n >= 1 + !(k->flags & OC_NO_BACKWARD), "%s: %d results", k->name, r.n);
        for (int j = 0; j < r.n; j++) {
            BT_CHECK(r.have[j], "%s: result %d missing", k->name, j);
            if (!r.have[j]) continue;
            int64_t n = 1;
            for (int d = 0; d < r.shape[j].ndim; d++) n *= r.shape[j].d[d];
            double s = 0;
            for (int64_t e = 0; e < n; e++) s += r.v[j][e] * r.v[j][e];
            BT_CHECK(isfinite(s), "%s: result %d is not finite", k->name, j);
            BT_CHECK(n > 0 && (s > 0 || (k->flags & OC_ZERO_OK)), "%s: result %d is all zero (the check would be vacuous)", k->name, j);
        }
        oc_result_free(&r);
    }
    BT_CHECK(n_unary == BT_NUOPS, "%d unary cases for %d ops in BT_UNARY_OPS", n_unary, (int)BT_NUOPS);
    BT_CHECK(n_binary == BT_NBOPS, "%d strided binary cases for %d ops in BT_BINARY_OPS", n_binary, (int)BT_NBOPS);
    printf("info: op table: %d cases\n", oc_ncases);
}

static void test_nothing_left(void) {
    size_t live = bt_alloc_stats(CPU).allocated;
    BT_CHECK(live == 0, "%zu bytes still allocated after all the tests", live);
}

/* bt_cast_cached: the value is the cache (no conversion happens), the gradient is cast back to the
   leaf's dtype exactly as bt_cast's; a shape mismatch is an error */
static void test_cast_cached(void) {
    bt_scope_begin();
    bt_tensor *x = bt_randn(bt_shape2(3, 5), BT_F32, bt_cpu(), 901);
    bt_set_requires_grad(x, 1);
    bt_tensor *cache = bt_cast(bt_randn(bt_shape2(3, 5), BT_F32, bt_cpu(), 902), BT_BF16);   /* deliberately not x */
    bt_tensor *y = bt_cast_cached(x, cache);
    BT_CHECK(y->dtype == BT_BF16 && bt_get(y, (int64_t[]){2, 4}) == bt_get(cache, (int64_t[]){2, 4}), "value must be the cache's");
    bt_tensor *w = bt_cast(bt_randn(bt_shape2(3, 5), BT_F32, bt_cpu(), 903), BT_BF16);
    bt_backward(bt_sum(bt_mul(y, w), NULL, 0, 0));
    BT_CHECK(x->grad && x->grad->dtype == BT_F32, "grad dtype");
    double e = 0;
    for (int64_t i = 0; i < 3; i++) for (int64_t j = 0; j < 5; j++) {
        int64_t ix[2] = {i, j};
        e = fmax(e, fabs(bt_get(x->grad, ix) - bt_get(w, ix)));
    }
    BT_CHECK(e == 0, "d sum(y*w)/dx must be w exactly (bf16 values are exact in f32), max diff %g", e);
    BT_EXPECT_ERROR(bt_cast_cached(x, bt_zeros(bt_shape2(5, 3), BT_BF16, bt_cpu())), "cast_cached: cache");
    bt_scope_end();
}

/* bt_attention_qkv on a packed [B, T, 3C] projection equals bt_attention on q, k, v split out of it
   by views and copies, in value and in the gradient of the packed input (f64, odd sizes) */
static void test_attention_qkv(void) {
    int64_t B = 2, T = 7, H = 3, D = 5, C = H * D;
    bt_scope_begin();
    bt_tensor *x = bt_randn(bt_shape3(B, T, 3 * C), BT_F64, bt_cpu(), 911);
    bt_tensor *r = bt_randn(bt_shape3(B, T, C), BT_F64, bt_cpu(), 912);
    bt_set_requires_grad(x, 1);
    bt_tensor *y1 = bt_attention_qkv(x, H);
    bt_backward(bt_sum(bt_mul(y1, r), NULL, 0, 0));
    bt_tensor *g1 = bt_clone(x->grad);
    bt_zero_(x->grad);
    int perm[4] = {0, 2, 1, 3};
    bt_tensor *parts[3];
    for (int i = 0; i < 3; i++)
        parts[i] = bt_contiguous(bt_permute(bt_view(bt_narrow(x, 2, i * C, C), bt_shape4(B, T, H, D)), perm));
    bt_tensor *y2 = bt_reshape(bt_permute(bt_attention(parts[0], parts[1], parts[2]), perm), bt_shape3(B, T, C));
    bt_backward(bt_sum(bt_mul(y2, r), NULL, 0, 0));
    double ey = bt_test_relerr_t(y1, y2), eg = bt_test_relerr_t(g1, x->grad);
    BT_CHECK(ey < BT_TOL_F64 && eg < BT_TOL_F64, "packed vs split attention: value rel err %g, grad rel err %g", ey, eg);
    BT_CHECK(fabs(bt_get(g1, (int64_t[]){1, 3, 2 * C + 1})) > 0, "the v part must receive gradient");
    BT_EXPECT_ERROR(bt_attention_qkv(x, 4), "attention_qkv: qkv");
    bt_scope_end();
}
/* Llama's packed op (grouped-query attention + RoPE on a [B, T, (H + 2 Hkv) D] projection) against
   its composition from plain ops: q, k narrowed, rotated by bt_rope_ex, K and V repeated to H heads
   by expand + copy (transformers' repeat_kv), multi-head attention; value and input gradient, f64 */
static void test_attention_qkv_gqa(void) {
    int64_t B = 2, T = 9, H = 6, Hkv = 2, G = H / Hkv, D = 8, W = (H + 2 * Hkv) * D;
    bt_rope_opts ro = {500000.0, 8, 1, 4, 4};   /* llama3 scaling over a short original context */
    bt_scope_begin();
    bt_tensor *x = bt_randn(bt_shape3(B, T, W), BT_F64, bt_cpu(), 921);
    bt_tensor *r = bt_randn(bt_shape3(B, T, H * D), BT_F64, bt_cpu(), 922);
    bt_set_requires_grad(x, 1);
    bt_tensor *y1 = bt_attention_qkv_ex(x, H, Hkv, &ro);
    bt_backward(bt_sum(bt_mul(y1, r), NULL, 0, 0));
    bt_tensor *g1 = bt_clone(x->grad);
    bt_zero_(x->grad);
    int perm[4] = {0, 2, 1, 3};
    bt_tensor *x4 = bt_view(x, bt_shape4(B, T, H + 2 * Hkv, D));
    bt_tensor *q = bt_rope_ex(bt_narrow(x4, 2, 0, H), &ro, 0), *k = bt_rope_ex(bt_narrow(x4, 2, H, Hkv), &ro, 0);
    bt_tensor *v = bt_narrow(x4, 2, H + Hkv, Hkv), *kv[2] = {k, v};
    for (int i = 0; i < 2; i++) {
        const int64_t wide[5] = {B, T, Hkv, G, D};
        kv[i] = bt_reshape(bt_expand(bt_unsqueeze(kv[i], 3), bt_shapev(5, wide)), bt_shape4(B, T, H, D));
    }
    bt_tensor *y2 = bt_reshape(bt_permute(bt_attention(bt_permute(q, perm), bt_permute(kv[0], perm), bt_permute(kv[1], perm)), perm),
                               bt_shape3(B, T, H * D));
    bt_backward(bt_sum(bt_mul(y2, r), NULL, 0, 0));
    double ey = bt_test_relerr_t(y1, y2), eg = bt_test_relerr_t(g1, x->grad);
    BT_CHECK(ey < BT_TOL_F64 && eg < BT_TOL_F64, "packed GQA + RoPE vs its composition: value rel err %g, grad rel err %g", ey, eg);
    /* the same through bt_attention with Hkv-head k, v (no repeat) */
    bt_zero_(x->grad);
    x4 = bt_view(x, bt_shape4(B, T, H + 2 * Hkv, D));   /* the graph again: the first backward freed it */
    q = bt_rope_ex(bt_narrow(x4, 2, 0, H), &ro, 0); k = bt_rope_ex(bt_narrow(x4, 2, H, Hkv), &ro, 0); v = bt_narrow(x4, 2, H + Hkv, Hkv);
    bt_tensor *y3 = bt_reshape(bt_permute(bt_attention(bt_permute(q, perm), bt_permute(k, perm), bt_permute(v, perm)), perm),
                               bt_shape3(B, T, H * D));
    bt_backward(bt_sum(bt_mul(y3, r), NULL, 0, 0));
    ey = bt_test_relerr_t(y3, y2); eg = bt_test_relerr_t(g1, x->grad);
    BT_CHECK(ey < BT_TOL_F64 && eg < BT_TOL_F64, "bt_attention with Hkv heads vs repeated: value rel err %g, grad rel err %g", ey, eg);
    BT_EXPECT_ERROR(bt_attention_qkv_ex(x, 6, 4, &ro), "attention_qkv: qkv");
    BT_EXPECT_ERROR(bt_attention_qkv_ex(bt_randn(bt_shape3(1, 2, 5 * 3), BT_F64, bt_cpu(), 1), 3, 1, &ro), "even head dim");
    BT_EXPECT_ERROR(bt_attention(bt_permute(q, perm), bt_permute(bt_narrow(x4, 2, 0, 4), perm), bt_permute(bt_narrow(x4, 2, 0, 4), perm)),
                    "dividing H");
    bt_scope_end();
}

/* =============================================================================================
   (3) the fp32 CPU paths against float64: the blocked GEMM (bt__cpu_gemm) at edge sizes, and
   the float loops of the op list, cross-entropy and attention (forward and backward) against the
   same ops on float64 copies of the inputs
   ============================================================================================= */
/* C = alpha op(A) op(B) + beta C0 (+ bias) for every (ta, tb): against a double loop, with guard
   floats after C that must stay untouched */
static void check_sgemm(int64_t M, int64_t N, int64_t K, float alpha, float beta, int has_bias) {
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1;
        bt_scope_begin();
        bt_tensor *a = rnd(SH(M * K + 1), BT_F32), *b = rnd(SH(K * N + 1), BT_F32);
        bt_tensor *c = rnd(SH(M * N + 8), BT_F32), *bias = rnd(SH(N), BT_F32);
        const float *A = (const float *)bt_data_ptr(a), *B = (const float *)bt_data_ptr(b), *bs = (const float *)bt_data_ptr(bias);
        float *C = (float *)bt_data_ptr(c);
        double *want = (double *)malloc(sizeof(double) * (size_t)(M * N + 8));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += (double)(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
                want[i * N + j] = alpha * s + (beta != 0 ? beta * (double)C[i * N + j] : 0) + (has_bias ? bs[j] : 0);
            }
        for (int64_t i = M * N; i < M * N + 8; i++) want[i] = C[i];
        bt__cpu_gemm(BT_F32, C, A, B, has_bias ? bs : NULL, M, N, K, ta, tb, alpha, beta);
        double got_err = 0, den = 0;
        for (int64_t i = 0; i < M * N; i++) { double d = C[i] - want[i]; got_err += d * d; den += want[i] * want[i]; }
        int guard_ok = 1;
        for (int64_t i = M * N; i < M * N + 8; i++) guard_ok &= C[i] == (float)want[i];
        double e = sqrt(got_err) / (den > 0 ? sqrt(den) : 1);
        BT_CHECK(e < BT_TOL_F32, "sgemm %lldx%lldx%lld ta %d tb %d alpha %g beta %g bias %d: rel err %.3g", (long long)M,
                 (long long)N, (long long)K, ta, tb, alpha, beta, has_bias, e);
        BT_CHECK(guard_ok, "sgemm %lldx%lldx%lld ta %d tb %d: wrote past C", (long long)M, (long long)N, (long long)K, ta, tb);
        free(want);
        bt_scope_end();
    }
}
static void test_sgemm_edges(void) {
    struct { int64_t M, N, K; } cs[] = {
        {1, 1, 1}, {1, 37, 5}, {37, 1, 5}, {13, 17, 19}, {5, 3, 0},                 /* K = 0: C = beta C + bias */
        {BT__MR, BT__NR, BT__KC}, {BT__MR + 1, BT__NR + 1, BT__KC + 1},              /* one tile, one past */
        {BT__MC + 5, 40, 30}, {20, BT__NC + 3, 30}, {30, 20, 2 * BT__KC + 7},        /* past a block */
        {13, 7, 16 * BT__KC + 3},                                                   /* K split into parts */
        {512, 128, 384},                                                            /* the model's shapes */
    };
    float ab[3][2] = {{1, 0}, {0.5f, 1}, {-2, 0}};
    for (int i = 0; i < (int)(sizeof cs / sizeof cs[0]); i++)
        for (int v = 0; v < 3; v++) {
            if (bt_test_quick() && v && cs[i].M * cs[i].N * cs[i].K > 100000) continue;
            check_sgemm(cs[i].M, cs[i].N, cs[i].K, ab[v][0], ab[v][1], v > 0);
        }
    /* the task grid depends on the shape only: the same bits on 1 thread and on several */
    bt_scope_begin();
    int64_t M = 70, N = 45, K = 20 * BT__KC;
    bt_tensor *a = rnd(SH(M, K), BT_F32), *b = rnd(SH(K, N), BT_F32), *c1 = rnd(SH(M, N), BT_F32), *c2 = rnd(SH(M, N), BT_F32);
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    bt__cpu_gemm(BT_F32, bt_data_ptr(c1), bt_data_ptr(a), bt_data_ptr(b), NULL, M, N, K, 0, 0, 1.0, 0.0);
    omp_set_num_threads(nt > 1 ? nt : 2);
    bt__cpu_gemm(BT_F32, bt_data_ptr(c2), bt_data_ptr(a), bt_data_ptr(b), NULL, M, N, K, 0, 0, 1.0, 0.0);
    omp_set_num_threads(nt);
    BT_CHECK(!memcmp(bt_data_ptr(c1), bt_data_ptr(c2), sizeof(float) * (size_t)(M * N)), "sgemm: 1 thread and %d differ", nt > 1 ? nt : 2);
    bt_scope_end();
}

/* f on float32 copies of the f64 leaves `in` against f on `in`: the output and every gradient */
static void check_f32_path(const char *name, gc_fn f, bt_tensor **in, int n, const gc_ctx *c, double tol) {
    bt_tensor *in32[8] = {0};
    bt_scope_begin();
    for (int k = 0; k < n; k++)
        if (in[k]) {
            int old = bt_set_grad_enabled(0);
            in32[k] = bt_keep(bt_cast(in[k], BT_F32));
            bt_set_grad_enabled(old);
            bt_set_requires_grad(in32[k], 1);
        }
    bt_tensor *y64 = f(in, c), *y32 = f(in32, c);
    bt_tensor *R = rnd(bt_shape_of(y64), BT_F64);
    bt_backward(bt_sum(bt_mul(y64, R), NULL, 0, 0));
    bt_backward(bt_sum(bt_mul(y32, bt_cast(R, BT_F32)), NULL, 0, 0));
    double *want = bt_test_host(y64);
    char what[128];
    snprintf(what, sizeof what, "%s f32 forward", name);
    expect_close(what, y32, bt_shape_of(y64), want, tol);
    free(want);
    for (int k = 0; k < n; k++) {
        if (!in[k]) continue;
        BT_CHECK(in[k]->grad && in32[k]->grad, "%s: input %d got no gradient", name, k);
        if (!in[k]->grad || !in32[k]->grad) continue;
        double *gw = bt_test_host(in[k]->grad);
        snprintf(what, sizeof what, "%s f32 gradient of input %d", name, k);
        expect_close(what, in32[k]->grad, bt_shape_of(in[k]), gw, tol);
        free(gw);
        bt_release(in[k]->grad); in[k]->grad = NULL;
    }
    bt_scope_end();
    for (int k = 0; k < n; k++) bt_release(in32[k]);
}
static bt_tensor *f_unary_op(bt_tensor **in, const gc_ctx *c) {
    switch (c->i[0]) {
#define BT__X(N, n_, f, df) case BT_UOP_##N: return bt_##n_(in[0]);
    BT_UNARY_OPS(BT__X)
#undef BT__X
    default: return NULL;
    }
}
static bt_tensor *f_attention_qkv(bt_tensor **in, const gc_ctx *c) { return bt_attention_qkv(in[0], c->i[0]); }
static void test_fp32_paths(void) {
    for (int op = 0; op < BT_NUOPS; op++) {
        /* positive inputs for the ops defined there (log, sqrt, rsqrt, recip); wide ones elsewhere
           (exp, tanh, gelu reach both tails) */
        int pos = op == BT_UOP_LOG || op == BT_UOP_SQRT || op == BT_UOP_RSQRT || op == BT_UOP_RECIP;
        bt_tensor *x = pos ? leaf_in(SH(37, 29), 0.2, 3.0) : leaf_in(SH(37, 29), -9.0, 9.0);
        gc_ctx c = {.i = {op}};
        char what[48]; snprintf(what, sizeof what, "unary %s", bt_unary_op_name((bt_unary_op)op));
        check_f32_path(what, f_unary_op, &x, 1, &c, BT_TOL_F32);
        bt_release(x);
    }
    for (int op = 0; op < 4; op++) {
        bt_tensor *ab[2] = {leaf(SH(41, 33)), op == 3 ? leaf_in(SH(41, 33), 0.5, 2.0) : leaf(SH(41, 33))};
        gc_ctx c = {.i = {op}};
        char what[48]; snprintf(what, sizeof what, "binary %s", bop_name[op]);
        check_f32_path(what, f_binary, ab, 2, &c, BT_TOL_F32);
        release_all(ab, 2);
    }
    /* cross-entropy over 1000 of 1031 columns (padding), one ignored row */
    bt_scope_begin();
    int32_t tg[6] = {0, 999, -100, 517, 3, 42};
    gc_ctx cx = {.i = {1000, -100}};
    cx.aux[0] = bt_keep(bt_from_data(tg, SH(2, 3), BT_I32, CPU));
    bt_scope_end();
    bt_tensor *logits = leaf_in(SH(2, 3, 1031), -8.0, 8.0);
    check_f32_path("cross_entropy", f_xent, &logits, 1, &cx, BT_TOL_F32);
    bt_release(logits); bt_release(cx.aux[0]);
    /* layernorm with and without its affine parameters (x offset from 0, so centring matters) */
    for (int m = 0; m < 4; m++) {
        bt_tensor *in[3] = {leaf_in(SH(37, 129), 2.0, 5.0), m & 1 ? leaf(SH(129)) : NULL, m & 2 ? leaf(SH(129)) : NULL};
        gc_ctx c = {.f = {1e-5}};
        char what[48]; snprintf(what, sizeof what, "layernorm w %d b %d", m & 1, m >> 1);
        check_f32_path(what, f_layernorm, in, 3, &c, BT_TOL_F32);
        release_all(in, 3);
    }
    /* attention, and the packed projection the model uses */
    bt_tensor *qkv[3] = {leaf(SH(2, 3, 33, 8)), leaf(SH(2, 3, 33, 8)), leaf(SH(2, 3, 33, 8))};
    gc_ctx c0 = {.i = {0}};
    check_f32_path("attention", f_attention, qkv, 3, &c0, BT_TOL_F32);
    release_all(qkv, 3);
    bt_tensor *packed = leaf(SH(2, 17, 3 * 4 * 8));
    gc_ctx ch = {.i = {4}};
    check_f32_path("attention_qkv", f_attention_qkv, &packed, 1, &ch, BT_TOL_F32);
    bt_release(packed);
}

int main(void) {
    BT_RUN(test_unary_forward);
    BT_RUN(test_binary_forward);
    BT_RUN(test_reduce_forward);
    BT_RUN(test_matmul_forward);
    BT_RUN(test_linear_forward);
    BT_RUN(test_softmax_layernorm_forward);
    BT_RUN(test_embedding_xent_forward);
    BT_RUN(test_attention_forward);
    BT_RUN(test_concat_split_forward);
    BT_RUN(test_bf16_forward);
    BT_RUN(test_gradcheck_elementwise);
    BT_RUN(test_gradcheck_reductions);
    BT_RUN(test_gradcheck_matmul);
    BT_RUN(test_gradcheck_nn);
    BT_RUN(test_gradcheck_shape_ops);
    BT_RUN(test_gradcheck_composite);
    BT_RUN(test_gradcheck_llama);
    BT_RUN(test_rmsnorm_values);
    BT_RUN(test_swiglu_values);
    BT_RUN(test_rope_values);
    BT_RUN(test_llama_errors);
    BT_RUN(test_cast_cached);
    BT_RUN(test_attention_qkv);
    BT_RUN(test_attention_qkv_gqa);
    BT_RUN(test_unary_list);
    BT_RUN(test_table_references);
    BT_RUN(test_table_cpu_f32);
    BT_RUN(test_table_cpu_bf16);
    BT_RUN(test_table_cpu_f16);
    BT_RUN(test_sgemm_edges);
    BT_RUN(test_fp32_paths);
    BT_RUN(test_nothing_left);
    return bt_test_summary("test_ops");
}
