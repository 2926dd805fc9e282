/* test_gpt2_mlir.c - train_gpt2's --mlir on the CPU: a tiny GPT-2 trained a few AdamW steps with the
   fc layer's bias + GELU as a fused MLIR kernel (bt_mlir_bias_gelu) and with the hand-written ops
   agrees at the parity test's tolerances (tests/test_gpt2.c: loss 1e-5, step losses 1e-4 relative),
   every layer's chain ran fused forward and backward (no silent fallback), the flag parses (or, in a
   build without MLIR, fails with a message that says how to get it), and a whole run of train_main
   with --mlir works. Built against MLIR when libmlir-19-dev is installed (mk/mlir.mk); otherwise the
   compiler tests report skipped. */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/train_runs.h"
#pragma GCC diagnostic ignored "-Wclobbered"   /* BT_EXPECT_ERROR's setjmp: a false positive */

#define STEPS 4

static int parse(const char *line, train_opts *o, char *err) { return train_parse(line, o, err, 256); }

static void test_flag(void) {
    train_opts o; char err[256] = "";
    int r = parse("-b 4 --mlir -x 3", &o, err);
#ifdef BT_MLIR
    BT_CHECK(r == 0 && o.mlir == 1 && o.B == 4 && o.steps == 3, "--mlir in a BT_MLIR build: %d '%s'", r, err);
#else
    BT_CHECK(r == -1 && strstr(err, "built without MLIR") && strstr(err, "make MLIR=1"), "--mlir without MLIR: %d '%s'", r, err);
#endif
    BT_CHECK(parse("-b 4", &o, err) == 0 && o.mlir == 0, "no --mlir: mlir off");
}

#ifdef BT_MLIR
/* STEPS AdamW steps of a tiny GPT-2 (2 layers, C 64, V 512) on random tokens; losses[s] before step s */
static void train_tiny(int use_mlir, double *losses) {
    gpt2_config cfg = {64, 500, 512, 2, 4, 64};
    int B = 4, T = 32;
    gpt2 m;
    gpt2_build(&m, cfg, bt_cpu());
    m.mlir = use_mlir;
    gpt2_init(&m, 7);
    bt_adamw opt;
    bt_adamw_init(&opt, m.params, m.n_params, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (size_t)(B * T)), *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)(B * T));
    uint64_t r = 12345;
    for (int i = 0; i < B * T; i++) {   /* a repeating random pattern the model can learn a little of in 4 steps */
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (int32_t)((r >> 33) % 500); y[i] = (x[i] * 7 + 3) % 500;
    }
    for (int s = 0; s < STEPS; s++) {
        bt_scope_begin();
        bt_zero_(m.flat_grad);
        bt_tensor *idx = bt_from_data(x, bt_shape2(B, T), BT_I32, m.device), *tgt = bt_from_data(y, bt_shape2(B, T), BT_I32, m.device);
        bt_tensor *loss = gpt2_loss(&m, idx, tgt, BT_F32);
        bt_backward(loss);
        losses[s] = bt_item(loss);
        bt_adamw_step(&opt, 3e-3f);
        bt_scope_end();
    }
    free(x); free(y);
    bt_adamw_free(&opt);
    gpt2_free(&m);
}

static void test_parity(void) {
    double ref[STEPS], got[STEPS];
    train_tiny(0, ref);
    bt_mlir_reset_stats();
    train_tiny(1, got);
    bt_mlir_stats_t st = bt_mlir_stats();
    double e0 = fabs(got[0] - ref[0]) / fabs(ref[0]), worst = 0;
    for (int s = 1; s < STEPS; s++) { double e = fabs(got[s] - ref[s]) / fabs(ref[s]); if (e > worst) worst = e; }
    printf("info: gpt2 --mlir cpu fp32: loss %.2e, worst step loss %.2e (losses %.6f .. %.6f), %llu fused calls, %llu fused backwards\n",
           e0, worst, got[0], got[STEPS - 1], (unsigned long long)st.fused_calls, (unsigned long long)st.fused_backwards);
    BT_CHECK(e0 < 1e-5, "first loss: --mlir %.9g, ops %.9g (relative %.3g > 1e-5)", got[0], ref[0], e0);
    BT_CHECK(worst < 1e-4, "step losses: worst relative difference %.3g > 1e-4", worst);
    BT_CHECK(st.fused_calls == 2 * STEPS && st.fused_backwards == 2 * STEPS && st.fallbacks == 0,
             "want %d fused calls and backwards, no fallbacks: %llu, %llu, %llu", 2 * STEPS, (unsigned long long)st.fused_calls,
             (unsigned long long)st.fused_backwards, (unsigned long long)st.fallbacks);
    BT_CHECK(got[STEPS - 1] < got[0], "the loss did not fall: %.6f -> %.6f", got[0], got[STEPS - 1]);
}

/* the flag end to end: train_main with --mlir on the Tiny Shakespeare shards (make test makes them) */
static void test_train_main(void) {
    if (access("data/tinyshakespeare_train.bin", R_OK)) { BT_SKIP("data/tinyshakespeare_train.bin missing (make data)"); return; }
    train_opts o; char err[256];
    BT_CHECK(parse("-e s2 -b 2 -t 16 -x 2 -v 0 -g 0 --quiet --device cpu --mlir", &o, err) == 0, "flags: %s", err);
    bt_mlir_reset_stats();
    int rc = train_main(&o);
    bt_mlir_stats_t st = bt_mlir_stats();
    BT_CHECK(rc == 0, "train_main --mlir returned %d", rc);
    BT_CHECK(st.fused_calls >= 2 * 2 && st.fallbacks == 0, "train_main --mlir: %llu fused calls, %llu fallbacks",
             (unsigned long long)st.fused_calls, (unsigned long long)st.fallbacks);
}
#else
static void test_parity(void) { BT_SKIP("built without MLIR (apt-get install libmlir-19-dev, then make test)"); }
static void test_train_main(void) { (void)train_main; BT_SKIP("built without MLIR"); }
#endif

int main(void) {
    setenv("BT_MLIR_CACHE_DIR", "", 1);   /* no disk cache: every run compiles, nothing left behind */
    BT_RUN(test_flag);
    BT_RUN(test_parity);
    BT_RUN(test_train_main);
#ifdef BT_MLIR
    bt_mlir_shutdown();
#endif
    return bt_test_summary("test_gpt2_mlir");
}
