/* test_gpt2.c - GPT-2 of train_gpt2.c on the CPU: command line, model files, learning (overfit
   one sequence; the loss falls on Tiny Shakespeare), and parity with PyTorch on the tiny
   fixture (tests/fixtures/gpt2_tiny*.bin, made by tests/gpt2_ref.py --config tiny). */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/gpt2_parity.h"
#include <unistd.h>

static int quick(void) { return getenv("BT_TEST_QUICK") != NULL; }

static int parse(const char *line, train_opts *o, char *err) {
    char buf[512], *argv[32]; int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    argv[argc++] = (char *)"train_gpt2";
    for (char *t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
    default_opts(o);
    return parse_args(argc, argv, o, err, 256);
}

static void test_cli(void) {
    train_opts o; char err[256];
    BT_CHECK(parse("-b 4 -t 32 -x 10 --precision bf16", &o, err) == 0 && o.B == 4 && o.T == 32 && o.steps == 10, "good flags: %s", err);
    BT_CHECK(parse("-h", &o, err) == 1, "-h asks for help");
    BT_CHECK(parse("--device cuda:1", &o, err) == 0 && !strcmp(o.device, "cuda:1"), "--device cuda:1: %s", err);
    struct { const char *args, *msg; } bad[] = {
        {"-b", "-b needs a value"}, {"-b 0", "bad value '0' for -b"}, {"-b x", "bad value 'x' for -b"},
        {"-t 12abc", "bad value '12abc' for -t"}, {"-l -1", "bad value '-1' for -l"}, {"--bogus 1", "unknown option '--bogus'"},
        {"--precision fp8", "--precision must be fp32, tf32 or bf16"}, {"--device tpu", "--device must be auto, cpu, cuda or cuda:N"},
        {"-q 2", "bad value '2' for -q"}, {"--device cuda:x", "--device must be"}, {"--device cuda:99", "--device must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = parse(bad[i].args, &o, err);
        BT_CHECK(r == -1 && strstr(err, bad[i].msg), "'%s' gave %d '%s', expected '%s'", bad[i].args, r, err, bad[i].msg);
    }
    gpt2_config cfg; gpt2_config_from_preset("s2", 50257, &cfg);
    parse("-t 4096", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "longer than the model's context"), "T > maxT: %s", err);
    parse("-b 4 -t 32 -d 100", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "not a multiple of B*T"), "bad -d: %s", err);
    parse("--precision bf16", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == -1 && strstr(err, "needs a GPU"), "bf16 on cpu: %s", err);
    parse("", &o, err);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, 256) == 0 && o.B == 8 && o.T == 64 && o.total_batch == 512, "cpu defaults");
}

static gpt2_config small_cfg(int V) {
    gpt2_config c; c.L = 2; c.H = 2; c.C = 32; c.maxT = 32; c.V = V; c.Vp = round_up(V, 128);
    return c;
}

static void test_model_file(void) {
    gpt2 a, b; char err[512];
    gpt2_config cfg = small_cfg(300);
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

/* a tiny GPT must drive the loss on one short sequence to ~0: the whole forward/backward/AdamW
   path works together */
static void test_overfit(void) {
    gpt2 m; gpt2_build(&m, small_cfg(64), bt_cpu()); gpt2_init(&m, 3);
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

/* a small GPT on Tiny Shakespeare: the validation loss falls well below ln(V) within 40 steps */
static void test_shakespeare_loss_falls(void) {
    if (access("data/tinyshakespeare_train.bin", R_OK) || access("data/tinyshakespeare_val.bin", R_OK)) {
        BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return;
    }
    train_opts o; char err[256];
    parse(quick() ? "-e s2 -b 4 -t 32 -x 15 -v 0 -g 0 -l 3e-3 -m 4 --quiet" : "-e s2 -b 8 -t 32 -x 40 -v 0 -g 0 -l 3e-3 -m 8 --quiet", &o, err);
    gpt2_config cfg; gpt2_config_from_preset("s2", BT_GPT2_VOCAB, &cfg);
    BT_CHECK(resolve_opts(&o, 0, &cfg, err, sizeof err) == 0, "%s", err);
    trainer tr; memset(&tr, 0, sizeof tr); tr.o = o; tr.dt = BT_F32; tr.val_B = o.B;
    tr.train = bt_loader_open(o.train_glob, o.B, o.T, 0, 1, 1, 1); tr.val = bt_loader_open(o.val_glob, o.B, o.T, 0, 1, 0, 0);
    BT_CHECK(tr.train && tr.val, "loaders: %s", bt_data_error());
    if (!tr.train || !tr.val) return;
    tr.inputs = (int32_t *)malloc(4 * (size_t)o.B * o.T); tr.targets = (int32_t *)malloc(4 * (size_t)o.B * o.T);
    gpt2_build(&tr.model, cfg, bt_cpu()); gpt2_init(&tr.model, 1);
    bt_adamw_init(&tr.opt, tr.model.params, tr.model.n_params, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    double before = evaluate(&tr), norm = 0;
    for (int s = 0; s < o.steps; s++) train_step(&tr, s, o.lr, &norm);
    double after = evaluate(&tr);
    BT_CHECK(fabs(before - log(50257.0)) < 0.5, "initial val loss %.3f should be near ln(50257) = 10.82", before);
    BT_CHECK(after < before - (quick() ? 1.0 : 2.0), "val loss %.3f -> %.3f did not fall enough", before, after);
    BT_CHECK(norm == norm && norm > 0, "grad norm %f", norm);
    bt_adamw_free(&tr.opt); gpt2_free(&tr.model); bt_loader_close(tr.train); bt_loader_close(tr.val);
    free(tr.inputs); free(tr.targets);
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

int main(void) {
    (void)train_main;
    BT_RUN(test_cli);
    BT_RUN(test_model_file);
    BT_RUN(test_overfit);
    BT_RUN(test_parity_tiny);
    BT_RUN(test_shakespeare_loss_falls);
    return bt_test_summary("test_gpt2");
}
