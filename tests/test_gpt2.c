/* test_gpt2.c - the GPT-2 model of gpt2.h and its files (gpt2_io.h) on the CPU: llm.c model files
   written and read back (the weights, the init's statistics, corrupt and special files named in
   the errors, concurrent saves), the KV cache against the full forward pass, learning (a tiny GPT
   overfits one sequence), its gradients held per unit (bt_grads_lazy) against the flat buffer,
   and parity with PyTorch on the tiny fixture (tests/fixtures/gpt2_tiny*.bin, made by
   tests/gpt2_ref.py --config tiny). Nothing here needs train_gpt2.c: the headers stand alone.
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

/* gradients per unit (bt_grads_lazy over gpt2_units_bounds: the embeddings, each block, the final
   layernorm), as train_gpt2 --grads lazy holds them: two micro-batches' gradients equal the flat
   buffer's bit for bit (the tied embedding's two contributions into unit 0 included), nothing held
   before the backward, everything after, and a drop gives the memory back */
static void test_grads_per_unit(void) {
    gpt2 m[2];
    for (int k = 0; k < 2; k++) { gpt2_build(&m[k], gpt2_config_make(3, 2, 32, 32, 64), bt_cpu()); gpt2_init(&m[k], 9); }
    int64_t lo[8];
    int nu = gpt2_units_bounds(&m[1], lo);
    BT_CHECK(nu == 5 && lo[0] == 0 && lo[nu] == m[1].num_params, "units: %d, ending at %lld of %lld", nu, (long long)lo[nu],
             (long long)m[1].num_params);
    bt_tensor **units = bt_grads_lazy(m[1].params, m[1].n_params, lo, nu);
    bt_release(m[1].flat_grad);
    m[1].flat_grad = NULL;
    int held = 0;
    for (int u = 0; u < nu; u++) held += bt_lazy_held(units[u]);
    BT_CHECK(held == 0, "%d units held before any backward", held);
    int T = 16; int32_t x[17];
    for (int i = 0; i < T + 1; i++) x[i] = (int32_t)(bt_philox_uniform(43, (uint64_t)i) * 64);
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 2; k++) {
            bt_scope_begin();
            bt_tensor *idx = bt_from_data(x + a, bt_shape2(1, T - a), BT_I32, bt_cpu()), *tgt = bt_from_data(x + 1 + a, bt_shape2(1, T - a), BT_I32, bt_cpu());
            bt_backward(gpt2_loss(&m[k], idx, tgt, BT_F32));
            bt_scope_end();
        }
    for (int u = 0; u < nu; u++) held += bt_lazy_held(units[u]);
    int64_t diff = 0;
    for (int i = 0; i < m[0].n_params; i++) {
        double *a = bt_test_host(m[0].params[i]->grad), *b = bt_test_host(m[1].params[i]->grad);
        for (int64_t j = 0; j < bt_numel(m[0].params[i]); j++) diff += a[j] != b[j];
        free(a); free(b);
    }
    BT_CHECK(held == nu && diff == 0, "after two backward passes: %d of %d units held, %lld gradient elements differ", held, nu,
             (long long)diff);
    size_t after = bt_alloc_stats(bt_cpu()).allocated;
    bt_grads_drop(units, nu);
    BT_CHECK(after - bt_alloc_stats(bt_cpu()).allocated >= (size_t)m[1].num_params * 4, "a drop gave back %zu bytes of %lld",
             after - bt_alloc_stats(bt_cpu()).allocated, (long long)m[1].num_params * 4);
    bt_grads_free(units, nu);
    gpt2_free(&m[0]); gpt2_free(&m[1]);
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

/* activation checkpointing per block (bt_set_recompute's ATTN, MLP, BLOCK: gpt2.h wraps the
   sublayers in bt_checkpoint): the same losses and every gradient the same bits as none, over a
   few AdamW steps of the s2 preset (the optimizer then sees the same gradients, so the weights stay
   equal too) */
enum { RC_STEPS = 3, RC_B = 4, RC_T = 32, RC_V = 256 };
static void rc_run(int flags, double *loss, float **grads) {
    gpt2_config c;
    gpt2_config_from_preset("s2", RC_V, &c);
    gpt2 m; gpt2_build(&m, c, bt_cpu()); gpt2_init(&m, 11);
    bt_adamw opt; bt_adamw_init(&opt, m.params, m.n_params, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    int32_t x[RC_B * RC_T + 1];
    int old = bt_set_recompute(flags);
    for (int step = 0; step < RC_STEPS; step++) {
        for (int i = 0; i <= RC_B * RC_T; i++) x[i] = (int32_t)(bt_philox_uniform(77 + step, (uint64_t)i) * RC_V);
        bt_zero_(m.flat_grad);
        bt_scope_begin();
        bt_tensor *idx = bt_from_data(x, bt_shape2(RC_B, RC_T), BT_I32, bt_cpu()), *tgt = bt_from_data(x + 1, bt_shape2(RC_B, RC_T), BT_I32, bt_cpu());
        bt_tensor *l = gpt2_loss(&m, idx, tgt, BT_F32);
        bt_backward(l);
        loss[step] = bt_item(l);
        bt_scope_end();
        grads[step] = (float *)malloc(sizeof(float) * (size_t)m.flat_numel);
        bt_to_host(m.flat_grad, grads[step], BT_F32);
        bt_adamw_step(&opt, 1e-3f);
    }
    bt_set_recompute(old);
    bt_adamw_free(&opt); gpt2_free(&m);
}
static void test_recompute_modes(void) {
    static const struct { int flags; const char *name; } modes[] = {
        {BT_RECOMPUTE_ATTN, "attn"}, {BT_RECOMPUTE_MLP, "mlp"}, {BT_RECOMPUTE_BLOCK, "block"},
        {BT_RECOMPUTE_ATTN | BT_RECOMPUTE_MLP, "attn+mlp"}, {BT_RECOMPUTE_BLOCK | BT_RECOMPUTE_GELU, "block+gelu"},
        {BT_RECOMPUTE_NORM, "norm"}, {BT_RECOMPUTE_NORM | BT_RECOMPUTE_MLP, "norm+mlp"}, {BT_RECOMPUTE_NORM | BT_RECOMPUTE_ATTN, "norm+attn"}};
    gpt2_config c; gpt2_config_from_preset("s2", RC_V, &c);
    size_t n = (size_t)gpt2_num_params(&c);
    double l0[RC_STEPS], l1[RC_STEPS]; float *g0[RC_STEPS], *g1[RC_STEPS];
    rc_run(0, l0, g0);
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        rc_run(modes[k].flags, l1, g1);
        for (int s = 0; s < RC_STEPS; s++) {
            BT_CHECK(l1[s] == l0[s], "%s step %d: loss %.9g, none %.9g", modes[k].name, s, l1[s], l0[s]);
            BT_CHECK(!memcmp(g1[s], g0[s], sizeof(float) * n), "%s step %d: the gradients differ from none's", modes[k].name, s);
            free(g1[s]);
        }
    }
    for (int s = 0; s < RC_STEPS; s++) free(g0[s]);
    BT_CHECK(bt_alloc_stats(bt_cpu()).allocated == 0, "leaked %zu bytes", bt_alloc_stats(bt_cpu()).allocated);
}
/* the most bytes allocated on the CPU during one forward + backward of m on tokens x [B, T] (the
   targets x too); its loss in *loss */
static size_t step_peak(gpt2 *m, const int32_t *x, int B, int T, double *loss) {
    bt_zero_(m->flat_grad);
    bt_alloc_reset_peak(bt_cpu());
    bt_scope_begin();
    bt_tensor *idx = bt_from_data(x, bt_shape2(B, T), BT_I32, bt_cpu());
    bt_tensor *l = gpt2_loss(m, idx, idx, BT_F32);
    bt_backward(l);
    *loss = bt_item(l);
    bt_scope_end();
    return bt_alloc_stats(bt_cpu()).peak_allocated;
}
/* The peak of a forward + backward, s4 (L 4, C 128) at B 8, T 256, where the activations dominate.
   Unit U = B T C floats (1 MiB). Without recomputation every layer's 16 U stay alive to the end of
   the step (the backward nodes save them: ln1 1, qkv 3, attention 1, x1 1, ln2 1, h 4, gelu(h) 4,
   x2 1; the CPU MLP is unfused), so the peak is at least fixed + 16 L U + the backward's
   transient. With BLOCK the forward keeps L U (each block's output) and the backward adds one
   block's remade 16 U (the layer being differentiated) on top of the same transient: the peak
   falls by at least (16 L - L - 16) U = 44 U for L = 4 (of the 64 U kept). */
enum { MEM_B = 8, MEM_T = 256 };
/* the memory tests' model (s4 on the CPU, seed 5) and MEM_B x MEM_T tokens drawn from seed */
static int32_t *mem_setup(gpt2 *m, gpt2_config *c, uint64_t seed) {
    gpt2_config_from_preset("s4", RC_V, c);
    gpt2_build(m, *c, bt_cpu()); gpt2_init(m, 5);
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * MEM_B * MEM_T);
    for (int i = 0; i < MEM_B * MEM_T; i++) x[i] = (int32_t)(bt_philox_uniform(seed, (uint64_t)i) * RC_V);
    return x;
}
static void test_recompute_memory(void) {
    enum { B = MEM_B, T = MEM_T };
    gpt2_config c; gpt2 m;
    int32_t *x = mem_setup(&m, &c, 3);
    size_t peak[3]; double loss[3];
    for (int k = 0; k < 3; k++) {
        int old = bt_set_recompute(k == 1 ? BT_RECOMPUTE_BLOCK : k == 2 ? BT_RECOMPUTE_NORM : 0);
        peak[k] = step_peak(&m, x, B, T, &loss[k]);
        bt_set_recompute(old);
    }
    size_t U = (size_t)B * T * c.C * sizeof(float), want = (size_t)(15 * c.L - 16) * U;
    printf("recompute block, s4 B %d T %d: peak %.1f -> %.1f MiB (at least %.1f MiB less expected)\n", B, T, peak[0] / 1048576.0,
           peak[1] / 1048576.0, want / 1048576.0);
    BT_CHECK(loss[0] == loss[1], "loss %.9g with block, %.9g without", loss[1], loss[0]);
    BT_CHECK(peak[0] >= peak[1] + want, "peak %zu B without, %zu B with block: less than %zu B saved", peak[0], peak[1], want);
    /* NORM on the CPU: ln1's output (1 U a layer) not kept by the qkv product (the CPU's MLP is
       unfused: ln2's stays); the backward remakes one layer's at a time */
    want = (size_t)(c.L - 1) * U;
    printf("recompute norm, s4 B %d T %d: peak %.1f -> %.1f MiB (at least %.1f MiB less expected)\n", B, T, peak[0] / 1048576.0,
           peak[2] / 1048576.0, want / 1048576.0);
    BT_CHECK(loss[0] == loss[2], "loss %.9g with norm, %.9g without", loss[2], loss[0]);
    BT_CHECK(peak[0] >= peak[2] + want, "peak %zu B without, %zu B with norm: less than %zu B saved", peak[0], peak[2], want);
    free(x); gpt2_free(&m);
}

/* FP8 keeps less than the f32 path: its linears save e4m3 x^T (a byte an element) instead of x, so
   the f32 inputs they read (ln1's out 1 U, ln2's out 1 U, gelu(h) 4 U) must be freed at the block's
   end (the block's scope, bt_scope_return), not held to the step's. Per layer it keeps qkv 3,
   attention's out 1 (the attention's own save) + 1/4, x1 1, h 4, x2 1 and 1/4 + 1/4 + 1 of e4m3:
   11.75 U against 16 U. The peak falls by at least 2 U a layer (the rest of the 4.25 U is margin for
   the backward's transients, which differ: 14-15.5 MiB fall here, with and without ASan). With the
   inputs held (the bug this guards) it rose by 1.75 U a layer instead. */
static void test_fp8_memory(void) {
    enum { B = MEM_B, T = MEM_T };
    gpt2_config c; gpt2 m;
    int32_t *x = mem_setup(&m, &c, 4);
    size_t peak[2]; double loss[2];
    for (int k = 0; k < 2; k++) {
        if (k) gpt2_fp8_enable(&m, NULL);
        peak[k] = step_peak(&m, x, B, T, &loss[k]);
    }
    size_t U = (size_t)B * T * c.C * sizeof(float), want = 2 * c.L * U;
    printf("fp8, s4 B %d T %d: peak %.1f MiB (f32) -> %.1f MiB (fp8), at least %.1f MiB less expected\n", B, T, peak[0] / 1048576.0,
           peak[1] / 1048576.0, want / 1048576.0);
    BT_CHECK(fabs(loss[1] - loss[0]) < 0.05 * fabs(loss[0]), "fp8 loss %.6g, f32 %.6g", loss[1], loss[0]);
    BT_CHECK(peak[0] >= peak[1] + want, "peak %zu B in f32, %zu B in fp8: less than %zu B saved", peak[0], peak[1], want);
    free(x); gpt2_free(&m);
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
    BT_RUN(test_recompute_modes);
    BT_RUN(test_recompute_memory);
    BT_RUN(test_fp8_memory);
    BT_RUN(test_grads_per_unit);
    BT_RUN(test_parity_tiny);
    bt_test_dir_remove();
    return bt_test_summary("test_gpt2");
}
