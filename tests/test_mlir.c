/* test_mlir.c - bt_mlir.h on the CPU: every supported op and the chains of tests/test_mlir_chains.h
   (layernorm, RMSNorm, softmax, SwiGLU, bias + GELU, ...) run fused against the same bt ops unfused,
   forward and backward (the fused backward kernel and the replay), in f32 and bf16; the caches (memory,
   disk across processes, a changed source on disk); unsupported chains (fallback and strict error);
   the region form; the ready-made chains; PTX for sm_90 checked by ptxas; a Llama-style block trained
   both ways. Built against MLIR when libmlir-19-dev is installed (mk/mlir.mk), else every test that
   needs the compiler reports skipped and only the no-compiler fallback is checked.

   Tolerances (tests/bt_test.h's table) and why:
     f32   BT_TOL_F32_ROUND, 1e-6 relative (||fused - unfused|| / ||unfused||): both compute in f32,
           the unfused ops round every intermediate to f32 (computed in double), the fused kernel
           keeps f32 registers; the difference is a few f32 roundings (6e-8 each) through chains of
           up to ~10 ops.
     bf16  BT_TOL_BF16_ROUND, 4e-3, against an f64 run of the same ops on the same (exactly
           representable) inputs: the fused kernel computes in f32 and rounds once, to the bf16
           output (8 significant bits): at most 2^-8 = 3.9e-3 relative per element, so normwise
           too; 4e-3 leaves room for the f32 part (measured: 1.3e-3 to 2.3e-3). The unfused bf16
           ops round every intermediate (measured up to 3.3e-3 on these chains); BT_TEST_VERBOSE=1
           prints both.
   Usage: test_mlir (the tests); test_mlir --disk-child DIR (one process of the disk-cache test);
          test_mlir --aot DIR (make mlir-aot: PTX of the GPU tests' chains into DIR). */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_MLIR_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#include "bt_mlir.h"
#include "bt_optim.h"
#include "tests/bt_test.h"
#include "tests/test_mlir_chains.h"
#pragma GCC diagnostic ignored "-Wclobbered"   /* BT_EXPECT_ERROR's setjmp: a false positive */
#include <stdlib.h>
#include <stdint.h>
#include <unistd.h>

#define CPU bt_cpu()
static const char *argv0;
static char cache_dir[512];

static int no_mlir(void) { if (bt_mlir_can_compile()) return 0; BT_SKIP("built without MLIR (apt-get install libmlir-19-dev, then make test)"); return 1; }

/* chain ch fused (both backward modes) against unfused, f32, frame [B, T, C] */
static void check_chain_f32(const mlir_chain *ch, int64_t B, int64_t T, int64_t C, uint64_t seed) {
    bt_scope_begin();
    bt_tensor *in[4], *g0[4], *g1[4], *g2[4];
    chain_inputs(ch, B, T, C, BT_F32, CPU, seed, in);
    bt_mlir_fn *fused = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, BT_MLIR_STRICT);
    bt_mlir_fn *replay = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, BT_MLIR_STRICT | BT_MLIR_REPLAY_BACKWARD);
    bt_tensor *r = bt_randn(chain_out_shape(ch, in), BT_F32, CPU, seed + 99);
    bt_tensor *y0 = chain_run(NULL, ch, in, r, g0);
    bt_mlir_stats_t st0 = bt_mlir_stats();
    bt_tensor *y1 = chain_run(fused, ch, in, r, g1);
    bt_mlir_stats_t st1 = bt_mlir_stats();
    bt_tensor *y2 = chain_run(replay, ch, in, r, g2);
    bt_mlir_stats_t st2 = bt_mlir_stats();
    BT_CHECK(bt_mlir_last_fused(fused) && bt_mlir_last_fused(replay), "%s: not fused: %s", ch->name, bt_mlir_last_reason(fused));
    BT_CHECK(st1.fused_backwards == st0.fused_backwards + 1 && st2.replay_backwards == st1.replay_backwards + 1,
             "%s: backward modes: fused %llu -> %llu, replay %llu -> %llu", ch->name, (unsigned long long)st0.fused_backwards,
             (unsigned long long)st1.fused_backwards, (unsigned long long)st1.replay_backwards, (unsigned long long)st2.replay_backwards);
    BT_CHECK(y1->ndim == y0->ndim && !memcmp(y1->shape, y0->shape, sizeof(int64_t) * (size_t)y0->ndim) && y1->dtype == y0->dtype,
             "%s: fused output shape/dtype differ", ch->name);
    double ey = bt_test_relerr_t(y1, y0), ey2 = bt_test_relerr_t(y2, y0), worst = 0;
    BT_CHECK(ey < BT_TOL_F32_ROUND && ey2 < BT_TOL_F32_ROUND, "%s C=%lld: forward rel err %.3g (replay fn %.3g)", ch->name, (long long)C, ey, ey2);
    for (int k = 0; k < ch->n_in; k++) {
        double e1 = bt_test_relerr_t(g1[k], g0[k]), e2 = bt_test_relerr_t(g2[k], g0[k]), e12 = bt_test_relerr_t(g1[k], g2[k]);
        worst = fmax(worst, e1);
        BT_CHECK(e1 < BT_TOL_F32_ROUND, "%s C=%lld: grad %d, fused backward vs unfused: rel err %.3g", ch->name, (long long)C, k, e1);
        BT_CHECK(e2 < BT_TOL_F32_ROUND, "%s C=%lld: grad %d, replay backward vs unfused: rel err %.3g", ch->name, (long long)C, k, e2);
        BT_CHECK(e12 < BT_TOL_F32_ROUND, "%s C=%lld: grad %d, fused vs replay backward: rel err %.3g", ch->name, (long long)C, k, e12);
        BT_CHECK(g1[k] && g1[k]->ndim == in[k]->ndim && g1[k]->dtype == in[k]->dtype, "%s: grad %d missing or of the wrong shape", ch->name, k);
    }
    if (bt_test_verbose()) printf("info: %-20s f32 C=%-4lld forward err %.2e, worst grad err %.2e\n", ch->name, (long long)C, ey, worst);
    bt_scope_end();
    bt_mlir_fn_free(fused); bt_mlir_fn_free(replay);
}
static void test_ops_f32(void) {
    if (no_mlir()) return;
    for (int i = 0; i < N_MLIR_OPS; i++) check_chain_f32(&mlir_ops[i], 3, 5, 37, 100 + 10 * (uint64_t)i);
}
static void test_chains_f32(void) {
    if (no_mlir()) return;
    const int64_t Cs[3] = {40, 768, 1};
    for (int i = 0; i < N_MLIR_CHAINS; i++)
        for (int c = 0; c < (bt_test_quick() ? 1 : 3); c++) {
            /* one column: a softmax is 1, a norm is +-1 and its gradient pure cancellation */
            if (Cs[c] == 1 && (strstr(mlir_chains[i].name, "softmax") || strstr(mlir_chains[i].name, "norm"))) continue;
            check_chain_f32(&mlir_chains[i], 2, c == 1 ? 3 : 5, Cs[c], 500 + 10 * (uint64_t)i + (uint64_t)c);
        }
}

/* bf16: fused and unfused against the same ops in f64 */
static void check_chain_bf16(const mlir_chain *ch, int64_t B, int64_t T, int64_t C, uint64_t seed) {
    bt_scope_begin();
    bt_tensor *in[4], *in64[4], *g[4], *gu[4], *g64[4];
    chain_inputs(ch, B, T, C, BT_BF16, CPU, seed, in);
    for (int k = 0; k < ch->n_in; k++) in64[k] = chain_leaf_copy(in[k], BT_F64, CPU);
    bt_mlir_fn *fn = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, BT_MLIR_STRICT);
    bt_tensor *r = bt_cast(bt_randn(chain_out_shape(ch, in), BT_F32, CPU, seed + 99), BT_BF16);
    bt_tensor *y64 = chain_run(NULL, ch, in64, bt_cast(r, BT_F64), g64);
    bt_tensor *yu = chain_run(NULL, ch, in, r, gu);
    bt_tensor *yf = chain_run(fn, ch, in, r, g);
    double ef = bt_test_relerr_t(yf, y64), eu = bt_test_relerr_t(yu, y64);
    BT_CHECK(yf->dtype == BT_BF16 && ef < BT_TOL_BF16_ROUND, "%s bf16: fused forward vs f64 rel err %.3g (unfused bf16 %.3g)", ch->name, ef, eu);
    for (int k = 0; k < ch->n_in; k++) {
        double e = bt_test_relerr_t(g[k], g64[k]), e2 = bt_test_relerr_t(gu[k], g64[k]);
        BT_CHECK(g[k] && g[k]->dtype == BT_BF16 && e < BT_TOL_BF16_ROUND, "%s bf16: grad %d fused vs f64 rel err %.3g (unfused bf16 %.3g)", ch->name, k, e, e2);
    }
    if (bt_test_verbose()) printf("info: %-20s bf16 forward err fused %.2e unfused %.2e\n", ch->name, ef, eu);
    bt_scope_end();
    bt_mlir_fn_free(fn);
}
static void test_chains_bf16(void) {
    if (no_mlir()) return;
    for (int i = 0; i < N_MLIR_CHAINS; i++) check_chain_bf16(&mlir_chains[i], 2, 5, 96, 900 + 10 * (uint64_t)i);
    for (int i = 0; i < N_MLIR_OPS; i++)
        if (strcmp(mlir_ops[i].name, "cast_bf16")) check_chain_bf16(&mlir_ops[i], 2, 3, 40, 1300 + 10 * (uint64_t)i);
}
/* f64 chains compute in f64 on the CPU */
static void test_f64(void) {
    if (no_mlir()) return;
    const mlir_chain *ch = &mlir_chains[0];
    bt_scope_begin();
    bt_tensor *in[4], *g0[4], *g1[4];
    chain_inputs(ch, 2, 3, 50, BT_F64, CPU, 77, in);
    bt_mlir_fn *fn = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, BT_MLIR_STRICT);
    bt_tensor *r = bt_randn(bt_shape3(2, 3, 50), BT_F64, CPU, 78);
    bt_tensor *y0 = chain_run(NULL, ch, in, r, g0), *y1 = chain_run(fn, ch, in, r, g1);
    double e = bt_test_relerr_t(y1, y0), eg = 0;
    for (int k = 0; k < 3; k++) eg = fmax(eg, bt_test_relerr_t(g1[k], g0[k]));
    BT_CHECK(e < BT_TOL_F64_ULP && eg < BT_TOL_F64_ULP, "layernorm f64: forward %.3g, worst grad %.3g", e, eg);
    bt_scope_end();
    bt_mlir_fn_free(fn);
}

/* ---- sigmoid, silu and rsqrt as ops of their own ----
   bt_tensor.h has no such ops yet; when it gets them (op names "sigmoid", "silu", "rsqrt"), the
   capture knows them by name. Here they are made the way an op of bt_tensor.h is: the value computed
   without recording, then one node with the op's own backward (bt__record / bt__save). */
static void back_sigmoid(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *y = n->saved[0];
    gin[0] = bt_mul(g, bt_mul(y, bt_affine(y, -1, 1)));
}
static void back_silu(bt_node *n, bt_tensor *g, bt_tensor **gin) {      /* s (1 + x (1 - s)) */
    bt_tensor *x = n->saved[0], *s = bt_mlir_sigmoid_ops(x);
    gin[0] = bt_mul(g, bt_mul(s, bt_add_scalar(bt_mul(x, bt_affine(s, -1, 1)), 1)));
}
static void back_rsqrt(bt_node *n, bt_tensor *g, bt_tensor **gin) {     /* -y^3 / 2 */
    bt_tensor *y = n->saved[0];
    gin[0] = bt_mul(g, bt_scale(bt_mul(y, bt_square(y)), -0.5));
}
static bt_tensor *own_op(const char *name, bt_backward_fn back, bt_tensor *x, int save_output) {
    int old = bt_set_grad_enabled(0);
    bt_tensor *y = !strcmp(name, "sigmoid") ? bt_mlir_sigmoid_ops(x) : !strcmp(name, "silu") ? bt_mlir_silu_ops(x)
                 : bt_div(bt_full(bt_shape_of(x), 1.0, x->dtype, bt_device_of(x)), bt_sqrt(x));
    bt_set_grad_enabled(old);
    bt_node *n = bt__record(name, back, y, &x, 1);
    if (n) bt__save(n, save_output ? y : x);
    return y;
}
static bt_tensor *ch_sigmoid_op(bt_tensor **in, int n, void *u) { (void)n; (void)u; return bt_scale(own_op("sigmoid", back_sigmoid, in[0], 1), 3.0); }
static bt_tensor *ch_swiglu_op(bt_tensor **in, int n, void *u) { (void)n; (void)u; return bt_mul(own_op("silu", back_silu, in[0], 0), in[1]); }
static bt_tensor *ch_rmsnorm_rsqrt(bt_tensor **in, int n, void *u) {
    (void)n; (void)u;
    bt_tensor *r = own_op("rsqrt", back_rsqrt, bt_add_scalar(bt_mean(bt_square(in[0]), &last_dim, 1, 1), 1e-5), 1);
    return bt_mul(bt_mul(in[0], r), in[1]);
}
static void test_own_ops(void) {
    if (no_mlir()) return;
    const mlir_chain chains[3] = {
        {"sigmoid_op", ch_sigmoid_op, 1, {IN_FULL}, -4, 4, 0},
        {"swiglu_silu_op", ch_swiglu_op, 2, {IN_FULL, IN_FULL}, -4, 4, 1},
        {"rmsnorm_rsqrt_op", ch_rmsnorm_rsqrt, 2, {IN_FULL, IN_COL}, -2, 2, 1},
    };
    for (int i = 0; i < 3; i++) check_chain_f32(&chains[i], 2, 5, 96, 1500 + 10 * (uint64_t)i);
}

/* the CPU kernel's f32 -> bf16 rounding (integer ops in the JIT: bt__me_trunc_bf16) against
   bt_cast's, bit for bit (but the sign of a zero: the unfused scale by 2 returns +0 for -0), on the
   values where roundings differ: ties to even both ways, carries into the exponent, overflow to
   infinity, infinities, zeros, subnormals, NaN */
static void test_cast_bf16_bits(void) {
    if (no_mlir()) return;
    const uint32_t u[16] = {0x3F808000u, 0x3F818000u, 0xBF808000u, 0xBF818000u, 0x3F80FFFFu, 0x3FFFFFFFu, 0x7F7FFFFFu,
                            0xFF7FFFFFu, 0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u, 0x00008000u, 0x00018000u,
                            0x7FC00001u, 0xFF800001u};
    float x[16];
    memcpy(x, u, sizeof x);
    const mlir_chain *ch = NULL;
    for (int i = 0; i < N_MLIR_OPS; i++) if (!strcmp(mlir_ops[i].name, "cast_bf16")) ch = &mlir_ops[i];
    BT_CHECK(ch != NULL, "no cast_bf16 chain in tests/test_mlir_chains.h");
    if (!ch) return;
    bt_scope_begin();
    bt_tensor *in[1] = {bt_from_data(x, bt_shape3(1, 1, 16), BT_F32, CPU)};
    bt_mlir_fn *fused = bt_mlir_fn_new(ch->name, ch->body, 1, NULL, BT_MLIR_STRICT);
    int old = bt_set_grad_enabled(0);
    bt_tensor *y0 = ch->body(in, 1, NULL), *y1 = bt_mlir_call(fused, in);
    bt_set_grad_enabled(old);
    BT_CHECK(bt_mlir_last_fused(fused), "cast_bf16: not fused: %s", bt_mlir_last_reason(fused));
    float a[16], b[16];
    bt_to_host(y0, a, BT_F32);
    bt_to_host(y1, b, BT_F32);
    for (int i = 0; i < 16; i++) {
        uint32_t ua, ub;
        memcpy(&ua, &a[i], 4); memcpy(&ub, &b[i], 4);
        BT_CHECK(ua == ub || (a[i] == 0.f && b[i] == 0.f) || (a[i] != a[i] && b[i] != b[i]), "cast_bf16: input 0x%08X: fused 0x%08X, bt_cast 0x%08X", u[i], ub, ua);
    }
    bt_scope_end();
    bt_mlir_fn_free(fused);
}

/* ---- caches ---- */
static bt_tensor *ln_result(bt_mlir_fn *fn, int64_t B, uint64_t seed) {
    bt_tensor *in[3];
    chain_inputs(&mlir_chains[0], B, 4, 64, BT_F32, CPU, seed, in);
    return bt_mlir_call(fn, in);
}
static void test_cache_memory(void) {
    if (no_mlir()) return;
    bt_mlir_reset();
    bt_scope_begin();
    bt_mlir_fn *a = bt_mlir_fn_new("ln_a", ch_layernorm, 3, NULL, BT_MLIR_STRICT), *b = bt_mlir_fn_new("ln_b", ch_layernorm, 3, NULL, BT_MLIR_STRICT);
    bt_mlir_stats_t s0 = bt_mlir_stats();
    ln_result(a, 2, 1);
    bt_mlir_stats_t s1 = bt_mlir_stats();
    ln_result(a, 2, 2);                    /* same signature: neither a trace nor a lookup */
    bt_mlir_stats_t s2 = bt_mlir_stats();
    ln_result(a, 7, 3);                    /* another batch size: a trace, the same kernel (same C) */
    bt_mlir_stats_t s3 = bt_mlir_stats();
    ln_result(b, 2, 4);                    /* another fn with the same chain: the same kernel */
    bt_mlir_stats_t s4 = bt_mlir_stats();
    BT_CHECK(s1.traces == s0.traces + 1 && s1.compiles + s1.disk_hits == s0.compiles + s0.disk_hits + 1, "first call: %llu traces, %llu compiles",
             (unsigned long long)(s1.traces - s0.traces), (unsigned long long)(s1.compiles - s0.compiles));
    BT_CHECK(s2.traces == s1.traces && s2.compiles == s1.compiles && s2.memory_hits == s1.memory_hits, "same signature traced or looked up again");
    BT_CHECK(s3.traces == s2.traces + 1 && s3.compiles == s2.compiles && s3.memory_hits == s2.memory_hits + 1,
             "new batch size: %llu traces %llu compiles %llu memory hits", (unsigned long long)(s3.traces - s2.traces),
             (unsigned long long)(s3.compiles - s2.compiles), (unsigned long long)(s3.memory_hits - s2.memory_hits));
    BT_CHECK(s4.compiles == s3.compiles && s4.memory_hits == s3.memory_hits + 1, "same chain in another fn compiled again");
    bt_scope_end();
    bt_mlir_fn_free(a); bt_mlir_fn_free(b);
}
/* one process of the disk test: layernorm forward and backward from dir; prints its counts */
static int disk_child(const char *dir) {
    bt_mlir_set_cache_dir(dir);
    bt_scope_begin();
    bt_mlir_fn *fn = bt_mlir_fn_new("ln", ch_layernorm, 3, NULL, BT_MLIR_STRICT);
    bt_tensor *in[3], *g[3], *g0[3];
    chain_inputs(&mlir_chains[0], 3, 4, 64, BT_F32, CPU, 31, in);
    bt_tensor *r = bt_randn(bt_shape3(3, 4, 64), BT_F32, CPU, 32);
    bt_tensor *y = chain_run(fn, &mlir_chains[0], in, r, g), *y0 = chain_run(NULL, &mlir_chains[0], in, r, g0);
    double e = bt_test_relerr_t(y, y0);
    for (int k = 0; k < 3; k++) e = fmax(e, bt_test_relerr_t(g[k], g0[k]));
    bt_mlir_stats_t st = bt_mlir_stats();
    printf("compiles %llu disk_hits %llu err %.3g\n", (unsigned long long)st.compiles, (unsigned long long)st.disk_hits, e);
    bt_scope_end();
    bt_mlir_fn_free(fn);
    bt_mlir_shutdown();
    return e < BT_TOL_F32_ROUND ? 0 : 1;
}
static int run_child(const char *dir, unsigned long long *compiles, unsigned long long *hits) {
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' --disk-child '%s' > '%s/child.out' 2>&1", dir, argv0, dir, dir);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "%s/child.out", dir);
    FILE *f = fopen(cmd, "r");
    *compiles = *hits = 99;
    if (f) { if (fscanf(f, "compiles %llu disk_hits %llu", compiles, hits) != 2) *compiles = 99; fclose(f); }
    return rc;
}
static void test_cache_disk(void) {
    if (no_mlir()) return;
    char dir[600], cmd[700];
    snprintf(dir, sizeof dir, "%s/disk", cache_dir);
    unsigned long long c1, h1, c2, h2, c3, h3;
    int rc1 = run_child(dir, &c1, &h1), rc2 = run_child(dir, &c2, &h2);
    BT_CHECK(rc1 == 0 && c1 == 2 && h1 == 0, "first process: rc %d, %llu compiles, %llu disk hits (want 2, 0)", rc1, c1, h1);
    BT_CHECK(rc2 == 0 && c2 == 0 && h2 == 2, "second process: rc %d, %llu compiles, %llu disk hits (want 0, 2)", rc2, c2, h2);
    /* a stored source that differs from the kernel's (a hash collision, a stale file) is not used */
    snprintf(cmd, sizeof cmd, "for f in '%s'/*.cpu.mlir; do echo '// changed' >> \"$f\"; done", dir);
    int rc = system(cmd);
    int rc3 = run_child(dir, &c3, &h3);
    BT_CHECK(rc == 0 && rc3 == 0 && c3 == 2 && h3 == 0, "changed sources: rc %d, %llu compiles, %llu disk hits (want 2, 0)", rc3, c3, h3);
}

/* ---- unsupported chains ---- */
static bt_tensor *ch_matmul(bt_tensor **in, int n, void *u) { (void)n; (void)u; return bt_gelu(bt_matmul(in[0], in[1])); }
static bt_tensor *ch_constant(bt_tensor **in, int n, void *u) {
    (void)n; (void)u;
    return bt_mul(in[0], bt_full(bt_shape_of(in[0]), 2.0, in[0]->dtype, bt_device_of(in[0])));
}
static bt_tensor *ch_sum_rows(bt_tensor **in, int n, void *u) { (void)n; (void)u; int d0 = 0; return bt_exp(bt_sum(in[0], &d0, 1, 1)); }
static bt_tensor *ch_part_bcast(bt_tensor **in, int n, void *u) { (void)n; (void)u; return bt_mul(in[0], in[1]); }
static bt_tensor *ch_transpose(bt_tensor **in, int n, void *u) { (void)n; (void)u; return bt_exp(bt_transpose(in[0], 1, 2)); }
static bt_tensor *ch_identity(bt_tensor **in, int n, void *u) { (void)n; (void)u; return in[0]; }
static void check_unsupported(const char *name, bt_mlir_body body, bt_tensor **in, int n, const char *why) {
    bt_mlir_fn *fn = bt_mlir_fn_new(name, body, n, NULL, 0), *strict = bt_mlir_fn_new(name, body, n, NULL, BT_MLIR_STRICT);
    bt_mlir_stats_t s0 = bt_mlir_stats();
    bt_tensor *y = bt_mlir_call(fn, in), *y0 = body(in, n, NULL);
    bt_mlir_stats_t s1 = bt_mlir_stats();
    BT_CHECK(!bt_mlir_last_fused(fn) && strstr(bt_mlir_last_reason(fn), why), "%s: fused %d, reason \"%s\" lacks \"%s\"", name,
             bt_mlir_last_fused(fn), bt_mlir_last_reason(fn), why);
    BT_CHECK(s1.fallbacks == s0.fallbacks + 1 && bt_test_relerr_t(y, y0) == 0, "%s: the fallback is not the body's result", name);
    if (y->requires_grad) {                 /* the fallback's graph is the body's: gradients flow */
        bt_backward_with(y, bt_full(bt_shape_of(y), 1.0, y->dtype, bt_device_of(y)));
        BT_CHECK(in[0]->grad != NULL, "%s: no gradient through the fallback", name);
    }
    BT_EXPECT_ERROR(bt_mlir_call(strict, in), why);
    bt_mlir_fn_free(fn); bt_mlir_fn_free(strict);
}
static void test_unsupported(void) {
    bt_scope_begin();
    bt_tensor *a = bt_randn(bt_shape3(2, 3, 8), BT_F32, CPU, 5), *w = bt_randn(bt_shape2(8, 8), BT_F32, CPU, 6);
    bt_tensor *p = bt_randn(bt_shape3(2, 1, 8), BT_F32, CPU, 7);
    bt_set_requires_grad(a, 1);
    bt_tensor *in[2] = {a, w};
    check_unsupported("matmul", ch_matmul, in, 2, "op 'matmul' is not supported");
    check_unsupported("constant", ch_constant, in, 1, "not one of the inputs");
    check_unsupported("sum_rows", ch_sum_rows, in, 1, "dims other than the last");
    check_unsupported("transpose", ch_transpose, in, 1, "op 'permute'");
    check_unsupported("identity", ch_identity, in, 1, "not made by ops");
    in[1] = p;
    check_unsupported("part_bcast", ch_part_bcast, in, 2, "[2, 1, 8]");
    /* argument errors */
    BT_EXPECT_ERROR(bt_mlir_fn_new("x", ch_exp, 0, NULL, 0), "0 inputs");
    BT_EXPECT_ERROR(bt_mlir_fn_new("x", ch_exp, 7, NULL, 0), "7 inputs");
    BT_EXPECT_ERROR(bt_mlir_fn_new("x", NULL, 1, NULL, 0), "body is NULL");
    BT_EXPECT_ERROR(bt_mlir_fn_new("x", ch_exp, 1, NULL, 8), "unknown flags");
    bt_mlir_fn *fn = bt_mlir_fn_new("exp", ch_exp, 1, NULL, 0);
    bt_tensor *bad[1] = {NULL};
    BT_EXPECT_ERROR(bt_mlir_call(fn, bad), "input 0 is NULL");
    bad[0] = bt_zeros(bt_shape1(4), BT_I32, CPU);
    BT_EXPECT_ERROR(bt_mlir_call(fn, bad), "float dtypes only");
    BT_EXPECT_ERROR(bt_mlir_precompile(fn, in, "gfx90a"), "neither \"cpu\" nor a chip");
    BT_EXPECT_ERROR(bt_mlir_set_gpu_chip("90"), "not a chip name");
    bt_mlir_fn_free(fn);
    bt_scope_end();
}
/* without a compiler (a build without MLIR), a CPU chain runs its ops and says why */
static void test_no_compiler_fallback(void) {
    if (bt_mlir_can_compile()) { BT_SKIP("this build compiles (the no-MLIR fallback is checked by a build without MLIR)"); return; }
    bt_scope_begin();
    bt_tensor *in[3];
    chain_inputs(&mlir_chains[0], 2, 3, 16, BT_F32, CPU, 3, in);
    bt_mlir_fn *fn = bt_mlir_fn_new("ln", ch_layernorm, 3, NULL, 0);
    bt_tensor *y = bt_mlir_call(fn, in), *y0 = ch_layernorm(in, 3, NULL);
    BT_CHECK(!bt_mlir_last_fused(fn) && strstr(bt_mlir_last_reason(fn), "MLIR") && bt_test_relerr_t(y, y0) == 0,
             "no-compiler fallback: fused %d, reason %s", bt_mlir_last_fused(fn), bt_mlir_last_reason(fn));
    bt_mlir_fn *strict = bt_mlir_fn_new("ln", ch_layernorm, 3, NULL, BT_MLIR_STRICT);
    BT_EXPECT_ERROR(bt_mlir_call(strict, in), "make MLIR=1");
    bt_mlir_fn_free(fn); bt_mlir_fn_free(strict);
    bt_scope_end();
}
static void test_disabled(void) {
    bt_scope_begin();
    bt_tensor *in[2];
    chain_inputs(&mlir_chains[7], 2, 3, 16, BT_F32, CPU, 4, in);
    bt_mlir_fn *fn = bt_mlir_fn_new("swiglu", ch_swiglu, 2, NULL, BT_MLIR_STRICT);
    bt_mlir_set_enabled(0);
    bt_tensor *y = bt_mlir_call(fn, in);
    bt_mlir_set_enabled(1);
    BT_CHECK(!bt_mlir_last_fused(fn) && strstr(bt_mlir_last_reason(fn), "disabled") && bt_test_relerr_t(y, ch_swiglu(in, 2, NULL)) == 0 &&
             bt_mlir_enabled(), "disabled: fused %d (%s)", bt_mlir_last_fused(fn), bt_mlir_last_reason(fn));
    bt_mlir_fn_free(fn);
    bt_scope_end();
}

/* ---- the region form ---- */
static bt_tensor *region_ln(bt_mlir_fn *reg, bt_tensor **in) {
    bt_tensor *y = bt_mlir_begin(reg, in);
    if (!y) y = bt_mlir_end(reg, layernorm_ops(in[0], in[1], in[2], 1e-5));
    return y;
}
static void test_region(void) {
    if (no_mlir()) return;
    bt_scope_begin();
    bt_mlir_fn *reg = bt_mlir_region_new("ln_region", 3, 0);
    bt_tensor *in[3], *g0[3];
    chain_inputs(&mlir_chains[0], 2, 5, 48, BT_F32, CPU, 40, in);
    bt_set_requires_grad(in[2], 0);                     /* b needs no grad: recorded with grad, then restored */
    bt_tensor *r = bt_randn(bt_shape3(2, 5, 48), BT_F32, CPU, 41);
    bt_tensor *y0 = chain_run(NULL, &mlir_chains[0], in, r, g0);
    for (int pass = 0; pass < 2; pass++) {             /* pass 0 records, pass 1 runs the kernel from begin */
        chain_zero_grads(in, 3);
        bt_mlir_stats_t s0 = bt_mlir_stats();
        bt_tensor *y = region_ln(reg, in);
        bt_mlir_stats_t s1 = bt_mlir_stats();
        bt_backward_with(y, r);
        BT_CHECK(bt_mlir_last_fused(reg) && s1.fused_calls == s0.fused_calls + 1 && s1.traces == s0.traces + (pass == 0),
                 "region pass %d: fused %d (%s), traces +%llu", pass, bt_mlir_last_fused(reg), bt_mlir_last_reason(reg),
                 (unsigned long long)(s1.traces - s0.traces));
        BT_CHECK(bt_test_relerr_t(y, y0) < BT_TOL_F32_ROUND && bt_test_relerr_t(in[0]->grad, g0[0]) < BT_TOL_F32_ROUND &&
                 bt_test_relerr_t(in[1]->grad, g0[1]) < BT_TOL_F32_ROUND,
                 "region pass %d: values or grads differ", pass);
        BT_CHECK(!in[2]->requires_grad && !in[2]->grad, "region pass %d: b's requires_grad was not restored", pass);
    }
    BT_EXPECT_ERROR(bt_mlir_end(reg, in[0]), "no bt_mlir_begin is recording");
    BT_EXPECT_ERROR(bt_mlir_region_new("r", 1, BT_MLIR_REPLAY_BACKWARD), "no body to replay");
    BT_EXPECT_ERROR(bt_mlir_call(reg, in), "is a region");
    /* an unsupported region: end gives back the recorded result, whose graph reaches only what needs grad */
    bt_mlir_fn *bad = bt_mlir_region_new("matmul_region", 2, 0);
    bt_tensor *w = bt_randn(bt_shape2(48, 48), BT_F32, CPU, 42), *x2[2] = {in[0], w};
    chain_zero_grads(in, 1);
    bt_tensor *y = bt_mlir_begin(bad, x2);
    BT_CHECK(y == NULL, "an unknown region must record first");
    y = bt_mlir_end(bad, bt_gelu(bt_matmul(x2[0], x2[1])));
    BT_CHECK(!bt_mlir_last_fused(bad) && strstr(bt_mlir_last_reason(bad), "matmul"), "unsupported region: %s", bt_mlir_last_reason(bad));
    bt_backward_with(y, bt_full(bt_shape_of(y), 1.0, BT_F32, CPU));
    BT_CHECK(in[0]->grad && !w->grad && !w->requires_grad, "unsupported region: x grad %p, w grad %p", (void *)in[0]->grad, (void *)w->grad);
    BT_CHECK(bt_mlir_begin(bad, x2) == NULL, "an unsupported region runs its ops");
    bt_mlir_end(bad, bt_gelu(bt_matmul(x2[0], x2[1])));
    bt_mlir_fn_free(reg); bt_mlir_fn_free(bad);
    bt_scope_end();
}

/* ---- ready-made chains and the Llama-style block ---- */
static void test_ready_made(void) {
    if (no_mlir()) return;
    bt_scope_begin();
    bt_tensor *x = bt_randn(bt_shape3(2, 3, 64), BT_F32, CPU, 50), *w = bt_randn(bt_shape1(64), BT_F32, CPU, 51);
    bt_tensor *v = bt_randn(bt_shape3(2, 3, 64), BT_F32, CPU, 52);
    double e1 = bt_test_relerr_t(bt_mlir_rmsnorm(x, w, 1e-5), bt_mlir_rmsnorm_ops(x, w, 1e-5));
    double e2 = bt_test_relerr_t(bt_mlir_rmsnorm(x, w, 1e-2), bt_mlir_rmsnorm_ops(x, w, 1e-2));      /* another eps, another fn */
    double e3 = bt_test_relerr_t(bt_mlir_swiglu(x, v), bt_mul(bt_mlir_silu_ops(x), v));
    double e4 = bt_test_relerr_t(bt_mlir_bias_gelu(x, w), bt_gelu(bt_add(x, w)));
    BT_CHECK(e1 < BT_TOL_F32_ROUND && e2 < BT_TOL_F32_ROUND && e3 < BT_TOL_F32_ROUND && e4 < BT_TOL_F32_ROUND, "ready-made: rmsnorm %.3g / %.3g, swiglu %.3g, bias_gelu %.3g", e1, e2, e3, e4);
    bt_scope_end();
}
static void test_llama_block(void) {
    if (no_mlir()) return;
    double f0, u0;
    bt_mlir_stats_t s0 = bt_mlir_stats();
    const llama_run run = {CPU, 4, 8, 48, 96, 1e-2f, 6};
    double lf = llama_train(&run, 1, &f0);
    bt_mlir_stats_t s1 = bt_mlir_stats();
    double lu = llama_train(&run, 0, &u0);
    BT_CHECK(s1.fused_calls - s0.fused_calls == 6 * 4 && s1.fused_backwards - s0.fused_backwards == 6 * 4,
             "llama: %llu fused calls, %llu fused backwards (want 24 each)", (unsigned long long)(s1.fused_calls - s0.fused_calls),
             (unsigned long long)(s1.fused_backwards - s0.fused_backwards));
    BT_CHECK(fabs(lf - lu) < BT_TOL_F32 * fabs(lu) && fabs(f0 - u0) < BT_TOL_F32_ROUND * fabs(u0), "llama: loss fused %.9g unfused %.9g (first %.9g %.9g)", lf, lu, f0, u0);
    BT_CHECK(lf < 0.9 * f0, "llama: the loss did not go down (%.6g -> %.6g)", f0, lf);
}

/* ---- PTX for sm_90, checked by ptxas (no GPU needed) ---- */
static const char *find_ptxas(void) {
    static char path[512];
    const char *cands[] = {"/usr/local/cuda/bin/ptxas", "/usr/bin/ptxas"};
    for (int i = 0; i < 2; i++) if (access(cands[i], X_OK) == 0) return cands[i];
    const char *home = getenv("CUDA_HOME");
    if (home) { snprintf(path, sizeof path, "%s/bin/ptxas", home); if (access(path, X_OK) == 0) return path; }
    return NULL;
}
static void test_ptx(void) {
    if (no_mlir()) return;
    const char *ptxas = find_ptxas();
    if (!ptxas) { BT_SKIP("no ptxas (CUDA toolkit) found"); return; }
    bt_mlir_reset();
    bt_scope_begin();
    int made = 0, want = 0;
    for (int dt = 0; dt < 2; dt++)
        for (int i = 0; i < N_MLIR_CHAINS + N_MLIR_OPS; i += (bt_test_quick() && i >= N_MLIR_CHAINS) ? 4 : 1) {
            const mlir_chain *ch = i < N_MLIR_CHAINS ? &mlir_chains[i] : &mlir_ops[i - N_MLIR_CHAINS];
            bt_tensor *in[4];
            chain_inputs(ch, 2, 3, dt ? 768 : 100, dt ? BT_BF16 : BT_F32, CPU, 1, in);
            bt_mlir_fn *fn = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, 0);
            int k = bt_mlir_precompile(fn, in, "sm_90");
            BT_CHECK(k == 2, "%s: precompile for sm_90: %s", ch->name, bt_mlir_last_reason(fn));
            made += k; want += 2;
            bt_mlir_fn_free(fn);
        }
    bt_scope_end();
    int n = bt_mlir_kernels(NULL, 0), bad = 0, checked = 0;
    bt_mlir_kernel_info *ki = (bt_mlir_kernel_info *)malloc(sizeof *ki * (size_t)n);
    bt_mlir_kernels(ki, n);
    for (int i = 0; i < n; i++) {
        if (strcmp(ki[i].target, "sm_90")) continue;
        char path[700], cmd[1600];
        snprintf(path, sizeof path, "%s/k%d.ptx", cache_dir, i);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(ki[i].binary, 1, ki[i].size, f) != ki[i].size) { BT_CHECK(0, "cannot write %s", path); if (f) fclose(f); continue; }
        fclose(f);
        snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90 '%s' -o /dev/null", ptxas, path);
        int rc = system(cmd);
        BT_CHECK(rc == 0, "ptxas rejects %s (%s)", ki[i].name, path);
        BT_CHECK(strstr(ki[i].binary, ".target sm_90") && strstr(ki[i].binary, ".entry k("), "%s: not an sm_90 PTX with entry k", ki[i].name);
        bad += rc != 0; checked++;
    }
    free(ki);
    BT_CHECK(made == want && checked > 0, "%d of %d kernels made, %d checked by ptxas", made, want, checked);
    if (bt_test_verbose()) printf("info: %d PTX kernels accepted by ptxas, %d rejected\n", checked - bad, bad);
}

/* make mlir-aot: the GPU tests' chains (test_mlir_gpu.cu: the chains at C = 768 and 100, f32 and bf16)
   compiled for sm_90 into dir (a cache directory) and dir/bt_mlir_aot.c */
static int write_aot(const char *dir) {
#ifndef BT_MLIR
    fprintf(stderr, "test_mlir --aot: this build has no MLIR (apt-get install libmlir-19-dev)\n");
    (void)dir; return 1;
#else
    bt_mlir_set_cache_dir(dir);
    bt_scope_begin();
    int ok = 1;
    for (int dt = 0; dt < 2; dt++)
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < N_MLIR_CHAINS; i++) {
                const mlir_chain *ch = &mlir_chains[i];
                bt_tensor *in[4];
                chain_inputs(ch, 2, 3, c ? 100 : 768, dt ? BT_BF16 : BT_F32, CPU, 1, in);
                bt_mlir_fn *fn = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, 0);
                if (bt_mlir_precompile(fn, in, "sm_90") != 2) { fprintf(stderr, "%s: %s\n", ch->name, bt_mlir_last_reason(fn)); ok = 0; }
                bt_mlir_fn_free(fn);
            }
    bt_scope_end();
    char path[600];
    snprintf(path, sizeof path, "%s/bt_mlir_aot.c", dir);
    int n = bt_mlir_write_aot_source(path);
    printf("test_mlir --aot: %d kernels in %s and %s\n", n, dir, path);
    bt_mlir_shutdown();
    return ok && n > 0 ? 0 : 1;
#endif
}

static void test_nothing_left(void) {
    bt_mlir_shutdown();
    size_t live = bt_alloc_stats(CPU).allocated;
    BT_CHECK(live == 0, "%zu bytes still allocated after all the tests", live);
}

int main(int argc, char **argv) {
    argv0 = argv[0];
    if (argc == 3 && !strcmp(argv[1], "--disk-child")) return disk_child(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--aot")) return write_aot(argv[2]);
    snprintf(cache_dir, sizeof cache_dir, "/tmp/bt_test_mlir.%ld", (long)getpid());
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", cache_dir, cache_dir);
    if (system(cmd) != 0) { fprintf(stderr, "cannot make %s\n", cache_dir); return 1; }
    bt_mlir_set_cache_dir("");                          /* in-process tests: memory only */
    BT_RUN(test_ops_f32);
    BT_RUN(test_chains_f32);
    BT_RUN(test_chains_bf16);
    BT_RUN(test_f64);
    BT_RUN(test_own_ops);
    BT_RUN(test_cast_bf16_bits);
    BT_RUN(test_cache_memory);
    BT_RUN(test_cache_disk);
    BT_RUN(test_unsupported);
    BT_RUN(test_no_compiler_fallback);
    BT_RUN(test_disabled);
    BT_RUN(test_region);
    BT_RUN(test_ready_made);
    BT_RUN(test_llama_block);
    BT_RUN(test_ptx);
    BT_RUN(test_nothing_left);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", cache_dir);
    return bt_test_summary("test_mlir");
}
