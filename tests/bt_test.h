/* bt_test.h - the tiny test harness shared by every test in tests/.

   A test is a function; it passes when every BT_CHECK in it holds.
       static void test_thing(void) { BT_CHECK(1 + 1 == 2, "math: %d", 2); }
       int main(void) { BT_RUN(test_thing); return bt_test_summary("test_thing"); }
   A test that cannot run here (no GPU) calls BT_SKIP("why") and returns.
   Each binary prints "<name>: N passed, N failed, N skipped" last; the Makefile
   sums these lines into the one closing line of `make test`.
   BT_EXPECT_ERROR(stmt, "substr") runs stmt and checks that it raised a bt_error
   (bt_alloc.h's error hook) whose message contains substr. */
#ifndef BT_TEST_H
#define BT_TEST_H
#include <stdio.h>
#include <string.h>
#include <setjmp.h>
#include <math.h>

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
    bt_test__errmsg[0] = 0; int raised__ = 0; \
    bt_set_error_handler(bt_test__on_error, NULL); \
    if (setjmp(bt_test__jmp) == 0) { stmt; } else { raised__ = 1; } \
    bt_set_error_handler(old_fn__, old_user__); \
    BT_CHECK(raised__, "expected an error from `%s`", #stmt); \
    BT_CHECK(!raised__ || strstr(bt_test__errmsg, substr), "error \"%s\" lacks \"%s\"", bt_test__errmsg, substr); \
} while (0)
#endif

#endif /* BT_TEST_H */
