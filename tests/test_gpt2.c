/* test_gpt2.c - the GPT-2 model of gpt2.h and its files (gpt2_io.h) on the CPU: llm.c model files
   written and read back (the weights, the init's statistics, corrupt and special files named in
   the errors, concurrent saves), the KV cache against the full forward pass, learning (a tiny GPT
   overfits one sequence), and parity with PyTorch on the tiny fixture (tests/fixtures/gpt2_tiny*.bin,
   made by tests/gpt2_ref.py --config tiny). Nothing here needs train_gpt2.c: the headers stand alone.
   --save-loop PATH SEED N (this binary re-executed) saves a model N times, for the concurrent saves. */
#define _XOPEN_SOURCE 700   /* mknod, for a device node of our own */
#include "gpt2_io.h"
#include "bt_optim.h"
#include "tests/bt_test.h"
#include "tests/bt_test_files.h"
#include "tests/gpt2_parity.h"
#include "tests/gpt2_kv_check.h"
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static char self_exe[1024];
static const char *tp(const char *name) { return bt_test_path(name); }   /* a path in the scratch directory */

/* finding 6: a model header's fields bounded, the error naming the field */
static void test_header_bounds(void) {
    char err[512];
    struct { int32_t maxT, V, L, H, C, Vp; const char *want; } bad[] = {
        {1024, 50257, 12, 1, 1 << 30, 50304, "header field C = 1073741824"},
        {1024, 50257, 12, 12, 768, -5, "header field Vp = -5"},
        {1 << 30, 50257, 12, 12, 768, 50304, "header field maxT"},
        {1024, 50257, 4096, 16, 65536, 50304, "more than 2^40"},
        {1024, 50257, 12, 12, 768, 50304, "the file has 1024 bytes"},   /* GPT-2 124M's header alone */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t h[256] = {20240326, 3, bad[i].maxT, bad[i].V, bad[i].L, bad[i].H, bad[i].C, bad[i].Vp};
        FILE *f = fopen("build/tests/big_model.bin", "wb"); fwrite(h, 4, 256, f); fclose(f);
        gpt2_config c2;
        int r = gpt2_read_header("build/tests/big_model.bin", &c2, err, sizeof err);
        BT_CHECK(r == -1 && strstr(err, bad[i].want), "case %zu: %d '%s', expected '%s'", i, r, err, bad[i].want);
    }
}

static void test_model_file(void) {
    gpt2 a, b; char err[512];
    gpt2_config cfg = gpt2_config_make(2, 2, 32, 32, 300);
    BT_CHECK(cfg.Vp == 384, "Vp %d", cfg.Vp);
    gpt2_build(&a, cfg, bt_cpu()); gpt2_init(&a, 7);
    const char *path = "build/tests/model_roundtrip.bin";
    BT_CHECK(gpt2_save(&a, path, err, sizeof err) == 0, "save: %s", err);
    gpt2_config c2;
    BT_CHECK(gpt2_read_header(path, &c2, err, sizeof err) == 0 && c2.L == 2 && c2.C == 32 && c2.Vp == 384, "header: %s", err);
    gpt2_build(&b, c2, bt_cpu());
    BT_CHECK(gpt2_load_weights(&b, path, err, sizeof err) == 0, "load: %s", err);
    BT_CHECK(!memcmp(bt_data_ptr(a.flat), bt_data_ptr(b.flat), 4 * (size_t)a.num_params), "weights differ after a round trip");
    /* init: std 0.02 on wte, residual projections smaller, layernorm gains 1 */
    double s = 0; const float *w = (const float *)bt_data_ptr(a.wte);
    for (int64_t i = 0; i < bt_numel(a.wte); i++) s += (double)w[i] * w[i];
    double std = sqrt(s / bt_numel(a.wte));
    BT_CHECK(fabs(std - 0.02) < 0.002, "wte std %.4f", std);
    BT_CHECK(bt_get(a.layers[1].ln2w, (int64_t[]){5}) == 1.0, "ln gain");
    /* a save into a missing directory fails and leaves the earlier file whole */
    BT_CHECK(gpt2_save(&a, "build/no/such/dir/m.bin", err, sizeof err) == -1 && strstr(err, "no/such/dir"), "bad save: %s", err);
    /* corrupt files give errors naming the file and the problem */
    FILE *f = fopen("build/tests/bad_model.bin", "wb"); int32_t h[256] = {12345, 3}; fwrite(h, 4, 256, f); fclose(f);
    BT_CHECK(gpt2_read_header("build/tests/bad_model.bin", &c2, err, sizeof err) == -1 && strstr(err, "bad magic 12345"), "%s", err);
    f = fopen("build/tests/short_model.bin", "wb"); fwrite(h, 4, 10, f); fclose(f);
    BT_CHECK(gpt2_read_header("build/tests/short_model.bin", &c2, err, sizeof err) == -1 && strstr(err, "too short"), "%s", err);
    f = fopen("build/tests/trunc_model.bin", "wb"); int32_t hh[256] = {GPT2_MODEL_MAGIC, 3, 32, 300, 2, 2, 32, 384};
    fwrite(hh, 4, 256, f); fwrite(bt_data_ptr(a.flat), 4, 100, f); fclose(f);
    BT_CHECK(gpt2_load_weights(&b, "build/tests/trunc_model.bin", err, sizeof err) == -1 && strstr(err, "expected exactly"), "truncated: %s", err);
    gpt2_free(&a); gpt2_free(&b);
}

/* findings 2, 3, 7: a save writes through a symlink, refuses a device node and a FIFO (without
   blocking), and reading a header refuses a FIFO or a directory without blocking */
static void test_save_special_targets(void) {
    gpt2 a; char err[512]; struct stat st;
    gpt2_build(&a, gpt2_config_make(2, 2, 32, 32, 300), bt_cpu()); gpt2_init(&a, 7);
    alarm(30);   /* a blocking open would hang: the alarm ends the test binary instead */
    mkdir(tp("real"), 0755);
    BT_CHECK(symlink("real/model.bin", tp("model_link")) == 0, "symlink");
    BT_CHECK(gpt2_save(&a, tp("model_link"), err, sizeof err) == 0, "save through a link: %s", err);
    BT_CHECK(lstat(tp("model_link"), &st) == 0 && S_ISLNK(st.st_mode), "the link survives the save");
    gpt2_config c2;
    BT_CHECK(gpt2_read_header(tp("real/model.bin"), &c2, err, sizeof err) == 0 && c2.C == 32, "the target holds the model: %s", err);
    if (mknod(tp("dev"), S_IFCHR | 0666, makedev(1, 3)) == 0) {   /* a /dev/null of our own (root only) */
        BT_CHECK(gpt2_save(&a, tp("dev"), err, sizeof err) == -1 && strstr(err, "character device"), "device: %s", err);
        BT_CHECK(stat(tp("dev"), &st) == 0 && S_ISCHR(st.st_mode), "the device node is still a device");
    }
    BT_CHECK(mkfifo(tp("fifo"), 0644) == 0, "mkfifo");
    BT_CHECK(gpt2_save(&a, tp("fifo"), err, sizeof err) == -1 && strstr(err, "FIFO"), "save to a FIFO: %s", err);
    BT_CHECK(stat(tp("fifo"), &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is still there");
    BT_CHECK(gpt2_read_header(tp("fifo"), &c2, err, sizeof err) == -1 && strstr(err, "FIFO"), "-e FIFO: %s", err);
    BT_CHECK(gpt2_read_header(bt_test_dir, &c2, err, sizeof err) == -1 && strstr(err, "directory"), "-e DIR: %s", err);
    alarm(0);
    gpt2_free(&a);
}

/* finding 3: two processes saving different models to one path at once: every save succeeds and
   the file is always one whole model */
static void test_concurrent_saves(void) {
    char cmd[4096], path[512];
    snprintf(path, sizeof path, "%s", tp("shared.bin"));
    snprintf(cmd, sizeof cmd, "%s --save-loop %s 1 12 & %s --save-loop %s 2 12; b=$?; wait $!; a=$?; exit $((a | b))", self_exe, path, self_exe, path);
    int st = system(cmd);
    BT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "concurrent saves: a save failed (status %d)", st);
    gpt2 a, b; char err[512];
    gpt2_build(&a, gpt2_config_make(2, 2, 32, 32, 300), bt_cpu()); gpt2_build(&b, gpt2_config_make(2, 2, 32, 32, 300), bt_cpu());
    BT_CHECK(gpt2_load_weights(&a, path, err, sizeof err) == 0, "load: %s", err);
    gpt2_init(&b, 1);
    int same1 = !memcmp(bt_data_ptr(a.flat), bt_data_ptr(b.flat), 4 * (size_t)a.num_params);
    gpt2_init(&b, 2);
    int same2 = !memcmp(bt_data_ptr(a.flat), bt_data_ptr(b.flat), 4 * (size_t)a.num_params);
    BT_CHECK(same1 || same2, "the file is neither model");
    gpt2_free(&a); gpt2_free(&b);
}

/* finding 12: the KV cache gives the full forward pass's logits at every position (fp32 1e-5),
   filling the context exactly; one more position is an error; sampling past the context works */
static void test_kv_cache(void) {
    gpt2 m;
    gpt2_config cfg = gpt2_config_make(2, 2, 32, 32, 300);
    gpt2_build(&m, cfg, bt_cpu()); gpt2_init(&m, 11);
    int32_t ids[32];
    for (int i = 0; i < 32; i++) ids[i] = (int32_t)(bt_philox_uniform(9, (uint64_t)i) * 300);
    double e1 = kv_cache_worst_relerr(&m, ids, 32, 1, BT_F32), e5 = kv_cache_worst_relerr(&m, ids, 20, 5, BT_F32);
    printf("info: kv cache vs full forward, fp32 cpu: worst relative error %.2e (1 prompt token, 32 positions), %.2e (5, 20)\n", e1, e5);
    BT_CHECK(e1 < 1e-5 && e5 < 1e-5, "kv cache logits differ: %.3e, %.3e", e1, e5);
    gpt2_kv_cache *kv = gpt2_kv_cache_create(&m, BT_F32);
    bt_scope_begin();
    gpt2_forward_cached(&m, kv, ids, 32);
    BT_EXPECT_ERROR(gpt2_forward_cached(&m, kv, ids, 1), "do not fit the context of 32");
    gpt2_kv_cache_reset(kv);
    BT_CHECK(gpt2_forward_cached(&m, kv, ids, 2) != NULL && kv->len == 2, "reset");
    bt_scope_end();
    gpt2_kv_cache_free(kv, cfg.L);
    gpt2_sample(&m, NULL, 40, 5, 1.0, 3, BT_F32);   /* 40 tokens through a context of 32: the cache restarts */
    gpt2_free(&m);
    BT_CHECK(bt_alloc_stats(bt_cpu()).allocated == 0, "leaked %zu bytes", bt_alloc_stats(bt_cpu()).allocated);
}

/* a tiny GPT must drive the loss on one short sequence to ~0: the whole forward/backward/AdamW
   path works together */
static void test_overfit(void) {
    gpt2 m; gpt2_build(&m, gpt2_config_make(2, 2, 32, 32, 64), bt_cpu()); gpt2_init(&m, 3);
    int T = 16; int32_t x[17];
    for (int i = 0; i < T + 1; i++) x[i] = (int32_t)(bt_philox_uniform(42, (uint64_t)i) * 64);
    bt_adamw opt; bt_adamw_init(&opt, m.params, m.n_params, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f);
    double first = 0, loss = 0;
    for (int step = 0; step < 150; step++) {
        bt_zero_(m.flat_grad);
        bt_scope_begin();
        bt_tensor *idx = bt_from_data(x, bt_shape2(1, T), BT_I32, bt_cpu()), *tgt = bt_from_data(x + 1, bt_shape2(1, T), BT_I32, bt_cpu());
        bt_tensor *l = gpt2_loss(&m, idx, tgt, BT_F32);
        loss = bt_item(l); if (step == 0) first = loss;
        bt_backward(l);
        bt_scope_end();
        bt_adamw_step(&opt, 1e-2f);
        if (loss < 0.05) break;
    }
    BT_CHECK(fabs(first - log(64.0)) < 0.3, "initial loss %.3f should be near ln(64) = %.3f", first, log(64.0));
    BT_CHECK(loss < 0.1, "overfit loss %.4f not below 0.1", loss);
    bt_adamw_free(&opt); gpt2_free(&m);
    BT_CHECK(bt_alloc_stats(bt_cpu()).allocated == 0, "leaked %zu bytes", bt_alloc_stats(bt_cpu()).allocated);
}

/* fp32 on the CPU against PyTorch fp32 (TF32 off): both sides sum in different orders, so
   errors are rounding-sized. Measured: logits ~1e-7, loss ~1e-8, grads <~1e-6, steps ~1e-7; the
   bounds leave one to two orders of margin and stay far below what a wrong formula gives. */
static void test_parity_tiny(void) {
    const char *model = "tests/fixtures/gpt2_tiny.bin", *state = "tests/fixtures/gpt2_tiny_state.bin";
    if (access(model, R_OK) || access(state, R_OK)) { BT_SKIP("no %s (python3 tests/gpt2_ref.py --config tiny, on a machine with torch)", state); return; }
    parity_tol tol = {1e-5, 1e-5, 1e-4, 1e-4};
    parity_result r;
    gpt2_parity(model, state, bt_cpu(), BT_F32, tol, &r);
    printf("parity tiny cpu fp32: logits %.2e loss %.2e worst grad %.2e (%s) worst step loss %.2e\n",
           r.logits, r.loss, r.grad_worst, r.grad_worst_name, r.step_loss_worst);
}

/* --save-loop PATH SEED N: save the small model of init SEED to PATH N times */
static int save_loop(const char *path, int seed, int n) {
    gpt2 m; char err[512];
    gpt2_build(&m, gpt2_config_make(2, 2, 32, 32, 300), bt_cpu()); gpt2_init(&m, (uint64_t)seed);
    int bad = 0;
    for (int i = 0; i < n; i++) if (gpt2_save(&m, path, err, sizeof err)) { fprintf(stderr, "save %d: %s\n", i, err); bad++; }
    gpt2_free(&m);
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--save-loop")) return save_loop(argv[2], atoi(argv[3]), atoi(argv[4]));
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    self_exe[n > 0 ? n : 0] = 0;
    if (bt_test_dir_make("test_gpt2")) return 1;
    BT_RUN(test_header_bounds);
    BT_RUN(test_model_file);
    BT_RUN(test_save_special_targets);
    BT_RUN(test_concurrent_saves);
    BT_RUN(test_kv_cache);
    BT_RUN(test_overfit);
    BT_RUN(test_parity_tiny);
    bt_test_dir_remove();
    return bt_test_summary("test_gpt2");
}
