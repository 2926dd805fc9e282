/* test_llama.c - examples/train_llama.c on the CPU: the flags (and --mlir's message in a build without
   MLIR), the tiny preset (l2) trained on Tiny Shakespeare with RMSNorm and SwiGLU fused by MLIR and as
   plain ops: the losses agree (first step 1e-5, later steps 1e-4 relative: the parity test's bounds;
   each fused chain differs from the ops by f32 roundings, 1e-6), every chain ran fused (no fallback),
   and the loss falls. Built against MLIR when libmlir-19-dev is installed (mk/mlir.mk, mk/llama.mk);
   otherwise only the unfused run and the flags are checked, the rest reports skipped. */
#define TRAIN_LLAMA_NO_MAIN
#include "examples/train_llama.c"
#include "tests/bt_test.h"
#include <unistd.h>

#define STEPS 10

static int parse(const char *line, llama_opts *o, char *err) {
    char buf[512], *argv[32]; int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    argv[argc++] = (char *)"train_llama";
    for (char *t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
    llama_default_opts(o);
    return llama_parse_args(argc, argv, o, err, 256);
}

static void test_flags(void) {
    llama_opts o; char err[256] = "";
    BT_CHECK(parse("-e l2 -b 2 -t 16 -x 3", &o, err) == 0 && o.B == 2 && o.T == 16 && o.steps == 3, "good flags: %s", err);
    int r = parse("--mlir", &o, err);
    if (bt_mlir_can_compile()) BT_CHECK(r == 0 && o.mlir, "--mlir: %d %s", r, err);
    else BT_CHECK(r == -1 && strstr(err, "built without MLIR") && strstr(err, "make MLIR=1"), "--mlir without MLIR: %d '%s'", r, err);
    const char *bad[][2] = {{"-b 0", "bad value '0' for -b"}, {"--precision fp8", "--precision must be"}, {"--bogus 1", "unknown option"},
                            {"-x", "-x needs a value"}, {"--device tpu", "--device must be"}};
    for (int i = 0; i < 5; i++) BT_CHECK(parse(bad[i][0], &o, err) == -1 && strstr(err, bad[i][1]), "'%s': '%s'", bad[i][0], err);
    llama_config cfg;
    parse("-e l9", &o, err);
    BT_CHECK(llama_resolve(&o, 0, &cfg, err, 256) == -1 && strstr(err, "not a preset"), "-e l9: %s", err);
    parse("-e l2 -t 4096", &o, err);
    BT_CHECK(llama_resolve(&o, 0, &cfg, err, 256) == -1 && strstr(err, "longer than"), "-t 4096: %s", err);
    parse("--precision bf16", &o, err);
    BT_CHECK(llama_resolve(&o, 0, &cfg, err, 256) == -1 && strstr(err, "needs a GPU"), "bf16 on a CPU: %s", err);
    parse("", &o, err);
    BT_CHECK(llama_resolve(&o, 0, &cfg, err, 256) == 0 && cfg.C == 64 && cfg.F == 192 && o.B == 4 && o.T == 64, "cpu defaults: C %d F %d", cfg.C, cfg.F);
}

static int run(int mlir, double *losses) {
    llama_opts o; char err[256];
    if (parse("-e l2 -b 4 -t 32 -x 10 -l 1e-2 --device cpu --quiet", &o, err)) { BT_CHECK(0, "flags: %s", err); return 1; }
    o.mlir = mlir;
    return llama_train(&o, losses);
}

static void test_train(void) {
    if (access("data/tinyshakespeare_train.bin", R_OK)) { BT_SKIP("data/tinyshakespeare_train.bin missing (make data)"); return; }
    double ref[STEPS], got[STEPS];
    BT_CHECK(run(0, ref) == 0, "the unfused run failed");
    BT_CHECK(ref[STEPS - 1] < ref[0] - 1.0, "unfused: the loss did not fall by 1: %.4f -> %.4f", ref[0], ref[STEPS - 1]);
    if (!bt_mlir_can_compile()) { BT_SKIP("built without MLIR (apt-get install libmlir-19-dev, then make test): --mlir not run"); return; }
    bt_mlir_reset_stats();
    BT_CHECK(run(1, got) == 0, "the --mlir run failed");
    bt_mlir_stats_t st = bt_mlir_stats();
    double e0 = fabs(got[0] - ref[0]) / fabs(ref[0]), worst = 0;
    for (int s = 1; s < STEPS; s++) { double e = fabs(got[s] - ref[s]) / fabs(ref[s]); if (e > worst) worst = e; }
    printf("info: llama --mlir cpu fp32: first loss %.2e, worst step loss %.2e relative (%.4f -> %.4f)\n", e0, worst, got[0], got[STEPS - 1]);
    BT_CHECK(e0 < BT_TOL_F32, "first loss: --mlir %.9g, ops %.9g", got[0], ref[0]);
    BT_CHECK(worst < BT_TOL_F32_STEPS, "step losses: worst relative difference %.3g", worst);
    /* per step: 2 RMSNorms per layer (2 layers) + the final one, 1 SwiGLU per layer = 7 chains */
    BT_CHECK(st.fused_calls == 7 * STEPS && st.fused_backwards == 7 * STEPS && st.fallbacks == 0,
             "want %d fused calls and backwards, no fallbacks: %llu %llu %llu", 7 * STEPS, (unsigned long long)st.fused_calls,
             (unsigned long long)st.fused_backwards, (unsigned long long)st.fallbacks);
    BT_CHECK(got[STEPS - 1] < got[0] - 1.0, "--mlir: the loss did not fall by 1: %.4f -> %.4f", got[0], got[STEPS - 1]);
}

static void test_bad_data(void) {
    llama_opts o; char err[256];
    parse("-e l2 -b 2 -t 16 -x 1 --device cpu -i /nonexistent/shard_*.bin", &o, err);
    BT_CHECK(llama_train(&o, NULL) == 1, "a missing shard must fail cleanly");
}

int main(void) {
    setenv("BT_MLIR_CACHE_DIR", "", 1);   /* no disk cache: nothing left behind */
    BT_RUN(test_flags);
    BT_RUN(test_train);
    BT_RUN(test_bad_data);
    return bt_test_summary("test_llama");
}
