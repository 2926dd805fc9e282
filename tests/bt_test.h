/* bt_test.h - the tiny test harness shared by every test in tests/.

   A test is a function; it passes when every BT_CHECK in it holds.
       static void test_thing(void) { BT_CHECK(1 + 1 == 2, "math: %d", 2); }
       int main(void) { BT_RUN(test_thing); return bt_test_summary("test_thing"); }
   A test that cannot run here (no GPU) calls BT_SKIP("why") and returns.
   Each binary prints "<name>: N passed, N failed, N skipped" last; the Makefile
   sums these lines into the one closing line of `make test`.
   BT_EXPECT_ERROR(stmt, "substr") runs stmt and checks that it raised a bt_error
   (bt_alloc.h's error hook) whose message contains substr.
   BT_TOL_*: the one table of relative-error tolerances, by dtype and kind of comparison.
   Included after bt_tensor.h it also gives tensor helpers: bt_test_tol (an op's tolerance by
   dtype), bt_test_host, bt_test_relerr_t, bt_test_leaf, bt_test_leaf_of, bt_test_drop_grad. */
#ifndef BT_TEST_H
#define BT_TEST_H
#include <stdio.h>
#include <string.h>
#include <setjmp.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>

static int bt_test__passed, bt_test__failed, bt_test__skipped;
static int bt_test__cur_failed, bt_test__cur_skipped;
static const char *bt_test__cur_name = "";

#define BT_CHECK(cond, ...) do { if (!(cond)) { \
    fprintf(stderr, "  FAIL %s (%s:%d): %s: ", bt_test__cur_name, __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); bt_test__cur_failed++; } } while (0)

#define BT_SKIP(...) do { fprintf(stderr, "  SKIP %s: ", bt_test__cur_name); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); bt_test__cur_skipped = 1; } while (0)

#define BT_RUN(fn) do { bt_test__cur_name = #fn; bt_test__cur_failed = 0; bt_test__cur_skipped = 0; \
    fn(); \
    if (bt_test__cur_failed) { bt_test__failed++; fprintf(stderr, "FAILED %s\n", #fn); } \
    else if (bt_test__cur_skipped) { bt_test__skipped++; } \
    else { bt_test__passed++; fprintf(stderr, "ok %s\n", #fn); } } while (0)

static int bt_test_summary(const char *name) {
    printf("%s: %d passed, %d failed, %d skipped\n", name, bt_test__passed, bt_test__failed, bt_test__skipped);
    return bt_test__failed ? 1 : 0;
}

/* BT_TEST_QUICK set and not 0: smaller sizes (the sanitizer runs); BT_TEST_VERBOSE likewise: print
   the measured errors, not only the failures */
/* a monotonic clock in ms, a sleep in s: POSIX, so for the tests that ask for it (_POSIX_C_SOURCE,
   _XOPEN_SOURCE) and the CUDA ones (C++ with glibc's defaults) */
#if defined(__cplusplus) || (defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 199309L) || defined(_XOPEN_SOURCE)
#include <time.h>
static inline double bt_test_now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec * 1e-6; }
static inline void bt_test_sleep(double s) { struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)}; nanosleep(&t, NULL); }
#endif
static inline int bt_test__env_on(const char *name) { const char *e = getenv(name); return e && *e && *e != '0'; }
static inline int bt_test_quick(void) { return bt_test__env_on("BT_TEST_QUICK"); }
static inline int bt_test_verbose(void) { return bt_test__env_on("BT_TEST_VERBOSE"); }

/* ---- tolerances ----
   Every comparison of computed numbers is a relative error, ||got - want|| / ||want|| over a whole
   output (bt_test_relerr), against a reference in wider precision (usually f64 on the CPU from the
   very same rounded inputs) or the same work done another way. The bound follows from the dtype
   the work rounds in and how many roundings stand between input and output; a wrong formula,
   index, stride, stream or device is off by order 1, far above all of these.
     f64  unit roundoff 2^-53 = 1.1e-16: a few roundings stay near 1e-15; another summation order
          or algorithm over thousands of terms near 1e-14..1e-13.
     f32  2^-24 = 6e-8 per rounding: elementwise chains stay far under 1e-6; sums of up to a few
          thousand terms with random signs near 1e-7..1e-6 (hence 1e-5); long reductions (20,000
          terms, attention's online softmax) a little more.
     tf32 f32 data on TF32 tensor cores: operands keep a 10-bit mantissa, 2^-11 (rounded) to
          2^-10 (truncated, biased, so errors need not cancel) each: ~3e-4 to 1e-3 per product;
          a backward chains two or three products (and a layernorm's rstd) before a comparison.
     bf16 8-bit mantissa, 2^-8 = 3.9e-3 per rounding at most, ~1e-3 typical: an op rounds its
          operands and its output (1e-3..1e-2); a backward chain rounds 2 to 4 intermediates
          before a sum; attention's kernels round P and dS inside.
     f16  11-bit mantissa, 2^-11 = 4.9e-4 per rounding: the bf16 counts at an eighth of the cost.
   A check uses the tightest kind that names its case, never a looser one. */
#define BT_TOL_EXACT       0.0     /* data movement, casts, fills, max: every device uses the same
                                      conversion and rounding functions, so the bits agree */
#define BT_TOL_F64_ROUND   1e-15   /* f64, one formula up to a few roundings (x + x against 2x) */
#define BT_TOL_F64_ULP     1e-14   /* f64 through the transcendentals of two libraries (CUDA's are
                                      within 2 ulp of glibc's), a fused multiply-add on one side */
#define BT_TOL_F64         1e-12   /* f64 sums in another order or by another algorithm */
#define BT_TOL_FD          1e-6    /* an f64 gradient against central differences, h = 1e-6:
                                      truncation ~h^2 |f'''| = 1e-13, rounding ~eps |f| / h = 1e-10 */
#define BT_TOL_F32_ROUND   1e-6    /* f32 with a few roundings per element and no long sum:
                                      elementwise ops, a fused chain against its ops */
#define BT_TOL_F32         1e-5    /* f32 sums of up to a few thousand terms, in another order than
                                      the reference's */
#define BT_TOL_F32_LOOSE   3e-5    /* f32 long reductions, attention's online softmax */
#define BT_TOL_F32_STEPS   1e-4    /* an f32 loss after several optimizer steps taken two ways: each
                                      update carries the last one's roundings forward */
#define BT_TOL_TF32        5e-3    /* one product on TF32 tensor cores (K-term dot products) */
#define BT_TOL_TF32_CHAIN  1e-2    /* TF32 products chained: a backward, a layernorm after a matmul */
#define BT_TOL_BF16_ROUND  4e-3    /* one rounding to bf16 of a result computed in f32 or wider */
#define BT_TOL_BF16_OP     1e-2    /* a bf16 op's output: rounded operands, an f32 sum, a rounded
                                      output; a sum of bf16 values across ranks */
#define BT_TOL_BF16        2e-2    /* a bf16 backward chain: 2 to 4 roundings before a sum */
#define BT_TOL_BF16_LOOSE  3e-2    /* bf16 long reductions, attention, several ops composed */
#define BT_TOL_F16         5e-3    /* f16, the counts of BT_TOL_BF16 */
#define BT_TOL_F16_LOOSE   1e-2    /* f16, the counts of BT_TOL_BF16_LOOSE (or BT_TOL_BF16_OP) */

/* relative error ||a - b|| / max(||b||, tiny) over n doubles */
static inline double bt_test_relerr(const double *a, const double *b, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) { double d = a[i] - b[i]; num += d * d; den += b[i] * b[i]; }
    if (num != num) return INFINITY;
    return sqrt(num) / (den > 1e-300 ? sqrt(den) : 1.0);
}

#ifdef BT_ALLOC_H
static jmp_buf bt_test__jmp;
static char bt_test__errmsg[1024];
static inline void bt_test__on_error(const char *msg, void *user) {
    (void)user; snprintf(bt_test__errmsg, sizeof bt_test__errmsg, "%s", msg); longjmp(bt_test__jmp, 1);
}
/* stmt must raise bt_error with a message containing substr */
#define BT_EXPECT_ERROR(stmt, substr) do { \
    bt_error_fn old_fn__; void *old_user__; bt_get_error_handler(&old_fn__, &old_user__); \
    bt_test__errmsg[0] = 0; volatile int raised__ = 0; \
    bt_set_error_handler(bt_test__on_error, NULL); \
    if (setjmp(bt_test__jmp) == 0) { stmt; } else { raised__ = 1; } \
    bt_set_error_handler(old_fn__, old_user__); \
    BT_CHECK(raised__, "expected an error from `%s`", #stmt); \
    BT_CHECK(!raised__ || strstr(bt_test__errmsg, substr), "error \"%s\" lacks \"%s\"", bt_test__errmsg, substr); \
} while (0)
#endif

#ifdef BT_TENSOR_H
/* the tolerance of an op's output or gradient computed in dt against f64 (loose: a long reduction,
   attention, several ops composed); f32 data with TF32 matmuls is BT_TOL_TF32 or BT_TOL_TF32_CHAIN */
static inline double bt_test_tol(bt_dtype dt, int loose) {
    switch (dt) {
    case BT_F64: return BT_TOL_F64;
    case BT_F32: return loose ? BT_TOL_F32_LOOSE : BT_TOL_F32;
    case BT_BF16: return loose ? BT_TOL_BF16_LOOSE : BT_TOL_BF16;
    case BT_F16: return loose ? BT_TOL_F16_LOOSE : BT_TOL_F16;
    default: return BT_TOL_EXACT;
    }
}
/* t's values as doubles (any device and dtype), malloc'd: the caller frees them */
static inline double *bt_test_host(bt_tensor *t) {
    int64_t n = bt_numel(t);
    double *p = (double *)malloc(sizeof(double) * (size_t)(n ? n : 1));
    bt_to_host(t, p, BT_F64);
    return p;
}
/* bt_test_relerr of two tensors of one shape; INFINITY when either is missing or the shapes differ */
static inline double bt_test_relerr_t(bt_tensor *got, bt_tensor *want) {
    if (!got || !want || got->ndim != want->ndim || memcmp(got->shape, want->shape, sizeof(int64_t) * (size_t)got->ndim)) return INFINITY;
    double *a = bt_test_host(got), *b = bt_test_host(want), e = bt_test_relerr(a, b, (long)bt_numel(got));
    free(a); free(b);
    return e;
}
/* bt_test_leaf draws with this seed, then the next; a test may set its own start */
static uint64_t bt_test_seed = 1;
/* a fresh leaf of N(0, 1) values on the CPU, owned by the caller */
static inline bt_tensor *bt_test_leaf(bt_shape s, bt_dtype dt, int requires_grad) {
    bt_scope_begin();
    bt_tensor *t = bt_keep(bt_randn(s, dt, bt_cpu(), bt_test_seed++));
    bt_scope_end();
    if (requires_grad) bt_set_requires_grad(t, 1);
    return t;
}
/* a new leaf (requiring grad) holding t's values, in its dtype on its device */
static inline bt_tensor *bt_test_leaf_of(bt_tensor *t) {
    int old = bt_set_grad_enabled(0);
    bt_tensor *c = bt_clone(t);
    bt_set_grad_enabled(old);
    bt_set_requires_grad(c, 1);
    return c;
}
static inline void bt_test_drop_grad(bt_tensor *t) { bt_release(t->grad); t->grad = NULL; }
#endif

#endif /* BT_TEST_H */
