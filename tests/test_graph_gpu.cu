/* test_graph_gpu.cu - CUDA graphs: bt_graph (bt_tensor.h) captures and replays, an error inside a
   capture, and train_gpt2.c's micro-step in a graph (--cuda-graph) against the eager step: the same
   losses, gradient norms, validation losses and weights, bit for bit, in fp32 and bf16, with
   gradient accumulation, across a change of micro-batch that captures anew; the bf16 weights
   written by AdamW's pass against a cast of their own, the same bits. */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include <unistd.h>

static int no_gpu(void) { if (bt_k_device_count() > 0) return 0; BT_SKIP("no GPU"); return 1; }

/* --cuda-graph and --recompute: parsed, and resolved against the run (no GPU needed) */
static void test_graph_flags(void) {
    train_opts o; char err[256];
    const char *on[] = {"train_gpt2", "--cuda-graph", "on", "--recompute", "gelu"}, *bad[] = {"train_gpt2", "--cuda-graph", "yes"};
    const char *badr[] = {"train_gpt2", "--recompute", "all"};
    train_default_opts(&o);
    BT_CHECK(parse_args(5, (char **)on, &o, err, sizeof err) == 0 && o.cuda_graph == 1 && o.recompute == BT_RECOMPUTE_GELU, "flags: %s", err);
    train_default_opts(&o);
    BT_CHECK(parse_args(3, (char **)bad, &o, err, sizeof err) < 0 && strstr(err, "--cuda-graph must be on or off"), "bad value: %s", err);
    train_default_opts(&o);
    BT_CHECK(parse_args(3, (char **)badr, &o, err, sizeof err) < 0 && strstr(err, "--recompute must be none, norm, gelu, attn, mlp or block"), "bad value: %s", err);
    train_default_opts(&o);
    BT_CHECK(o.cuda_graph == -1 && o.recompute == -1, "defaults %d %d", o.cuda_graph, o.recompute);
    BT_CHECK(resolve_graph(&o, 1, err, sizeof err) == 0 && o.cuda_graph == 1, "on a GPU (one or several data-parallel processes): on by default");
    o.cuda_graph = -1;
    BT_CHECK(resolve_graph(&o, 0, err, sizeof err) == 0 && o.cuda_graph == 0, "the CPU ignores it");
    o.cuda_graph = 0;
    BT_CHECK(resolve_graph(&o, 1, err, sizeof err) == 0 && o.cuda_graph == 0, "off when asked: %s", err);
    o.cuda_graph = 1; o.mlir = 1;
    BT_CHECK(resolve_graph(&o, 1, err, sizeof err) < 0 && strstr(err, "--mlir"), "on with --mlir: %s", err);
    o.cuda_graph = -1;
    BT_CHECK(resolve_graph(&o, 1, err, sizeof err) == 0 && o.cuda_graph == 0, "--mlir: off by default: %s", err);
    o.mlir = 0;
    o.cuda_graph = 1; o.tp = 2;
    BT_CHECK(resolve_graph(&o, 1, err, sizeof err) < 0 && strstr(err, "--tp or --cp"), "on with --tp: %s", err);
    o.cuda_graph = -1;
    BT_CHECK(resolve_graph(&o, 1, err, sizeof err) == 0 && o.cuda_graph == 0, "--tp: off by default: %s", err);
}

/* y = 2 x + 1 captured once; every launch reads x's current contents into y */
static void test_graph_replays(void) {
    if (no_gpu()) return;
    bt_device dev = bt_cuda_device(0);
    bt_tensor *x = bt_randn(bt_shape1(1000), BT_F32, dev, 3), *y = bt_zeros(bt_shape1(1000), BT_F32, dev);
    bt_tensor *ref = bt_empty(bt_shape1(1000), BT_F32, dev);
    bt_copy_(ref, y);   /* no work in flight on the tensors when the capture starts */
    bt_graph *g = bt_graph_capture_begin(dev);
    bt_scope_begin();
    bt_copy_(y, bt_affine(x, 2.0, 1.0));
    bt_scope_end();
    bt_graph_capture_end(g);
    BT_CHECK(bt_graph_pool(g) > 0, "pool id %d", bt_graph_pool(g));
    double worst = 0;
    for (int r = 0; r < 3; r++) {
        bt_normal_(x, 0, 1, 11, (uint64_t)r * 1000);   /* new inputs in place */
        bt_graph_launch(g);
        bt_scope_begin();
        double e = bt_item(bt_sum(bt_square(bt_sub(y, bt_affine(x, 2.0, 1.0))), NULL, 0, 0));
        bt_scope_end();
        if (e > worst) worst = e;
    }
    BT_CHECK(worst == 0, "a replay differs from the eager op: sum of squared differences %.3e", worst);
    bt_graph_free(g);
    bt_release(x); bt_release(y); bt_release(ref);
}

/* an error inside a capture (a host sync; a bad shape) names the capture, and the stream works
   again after it */
static void test_graph_capture_error(void) {
    if (no_gpu()) return;
    bt_device dev = bt_cuda_device(0);
    bt_tensor *x = bt_full(bt_shape2(4, 4), 3.0, BT_F32, dev), *w = bt_full(bt_shape2(5, 4), 1.0, BT_F32, dev);
    static bt_graph *g;
    g = NULL;
    BT_EXPECT_ERROR((g = bt_graph_capture_begin(dev), (void)bt_item(bt_narrow(x, 0, 0, 1))), "capturing a CUDA graph");
    bt_graph_free(g);
    g = NULL;
    BT_EXPECT_ERROR((g = bt_graph_capture_begin(dev), (void)bt_matmul(x, w)), "capturing a CUDA graph");
    bt_graph_free(g);
    bt_scope_begin();
    double v = bt_item(bt_sum(bt_add(x, x), NULL, 0, 0));
    bt_scope_end();
    BT_CHECK(v == 96.0, "after the failed captures an eager sum gives %g, expected 96", v);
    BT_EXPECT_ERROR(bt_graph_launch(NULL), "NULL");
    bt_release(x); bt_release(w);
}

static int g_copy_off;   /* 1: the bf16 weights by a cast of their own, not AdamW's pass (copy_in_update 0) */
/* a small GPT-2 trainer on Tiny Shakespeare: B x T micro-batches, accum of them per step */
static int setup(trainer *tr, int graph, bt_dtype dt, int B, int T, int accum) {
    memset(tr, 0, sizeof *tr);
    train_default_opts(&tr->o);
    tr->o.copy_in_update = !g_copy_off;
    tr->o.B = B; tr->o.T = T; tr->o.total_batch = B * T * accum; tr->o.cuda_graph = graph;
    tr->dt = dt;
    gpt2_config c = gpt2_config_make(2, 4, 64, 128, BT_GPT2_VOCAB);
    gpt2_build(&tr->model, c, bt_cuda_device(0));
    gpt2_init(&tr->model, 7);
    bt_adamw_init(&tr->opt, tr->model.params, tr->model.n_params, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    tr->train = bt_loader_open("data/tinyshakespeare_train.bin", B, T, 0, 1, 1, 1337);
    tr->val_B = B; tr->o.val_batches = 3;
    tr->val = bt_loader_open("data/tinyshakespeare_val.bin", B, T, 0, 1, 0, 0);
    tr->inputs = (int32_t *)malloc(sizeof(int32_t) * (size_t)B * T);
    tr->targets = (int32_t *)malloc(sizeof(int32_t) * (size_t)B * T);
    return tr->train && tr->val;
}
/* a new micro-batch size for the next steps (the same total batch) */
static void change_B(trainer *tr, int B) {
    bt_loader_close(tr->train); bt_loader_close(tr->val);
    tr->o.B = B; tr->val_B = B;
    tr->train = bt_loader_open("data/tinyshakespeare_train.bin", B, tr->o.T, 0, 1, 1, 99);
    tr->val = bt_loader_open("data/tinyshakespeare_val.bin", B, tr->o.T, 0, 1, 0, 0);
    tr->inputs = (int32_t *)realloc(tr->inputs, sizeof(int32_t) * (size_t)B * tr->o.T);
    tr->targets = (int32_t *)realloc(tr->targets, sizeof(int32_t) * (size_t)B * tr->o.T);
}

#define STEPS 6
typedef struct { double loss[STEPS], norm[STEPS], val[2]; float *w; int captures, graphed, copied; } run_out;

/* STEPS steps (lr from the schedule), validation after step 2 and at the end; with B2 > 0 the
   micro-batch becomes B2 after step 3 */
static void run(int graph, bt_dtype dt, int B, int B2, run_out *r) {
    trainer tr;
    memset(r, 0, sizeof *r);
    if (!setup(&tr, graph, dt, B, 64, 2)) { BT_CHECK(0, "no loader: %s", bt_data_error()); trainer_end(&tr, 0); return; }
    for (int s = 0; s < STEPS; s++) {
        if (B2 > 0 && s == 3) change_B(&tr, B2);
        double lr = bt_lr_cosine(s, 1, STEPS, 3e-3, 3e-4);
        BT_CHECK(train_step(&tr, s, lr, &r->loss[s], &r->norm[s]), "step %d not finite", s);
        if (s == 2) r->val[0] = evaluate(&tr);
    }
    r->val[1] = evaluate(&tr);
    r->w = (float *)malloc(sizeof(float) * (size_t)tr.model.num_params);
    bt_scope_begin();
    bt_to_host(bt_narrow(tr.model.flat, 0, 0, tr.model.num_params), r->w, BT_F32);
    bt_scope_end();
    r->captures = tr.sg.captures;
    r->copied = tr.opt.copy != NULL;
    r->graphed = tr.sg.graph[0] != NULL && tr.sg.graph[1] == NULL;   /* one process: one kind of micro-step */
    trainer_end(&tr, 0);
}

static void compare(const char *tag, bt_dtype dt, int B, int B2, int want_captures) {
    if (no_gpu()) return;
    if (access("data/tinyshakespeare_train.bin", R_OK) || access("data/tinyshakespeare_val.bin", R_OK)) {
        BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return;
    }
    bt_set_deterministic(1);   /* the same matmul algorithms in both runs (no autotuning) */
    run_out e, g;
    run(0, dt, B, B2, &e);
    run(1, dt, B, B2, &g);
    int n = 0;
    for (int i = 0; i < STEPS; i++) n += e.loss[i] != g.loss[i] || e.norm[i] != g.norm[i];
    int64_t np = 0, nbad = 0;
    { gpt2_config c = gpt2_config_make(2, 4, 64, 128, BT_GPT2_VOCAB); np = gpt2_num_params(&c); }
    if (e.w && g.w) for (int64_t i = 0; i < np; i++) nbad += memcmp(&e.w[i], &g.w[i], sizeof(float)) != 0;
    printf("%s: losses eager %.9f .. %.9f graph %.9f .. %.9f; val %.9f %.9f vs %.9f %.9f; %lld of %lld weights differ; %d captures\n",
           tag, e.loss[0], e.loss[STEPS - 1], g.loss[0], g.loss[STEPS - 1], e.val[0], e.val[1], g.val[0], g.val[1],
           (long long)nbad, (long long)np, g.captures);
    BT_CHECK(n == 0, "%s: %d steps' loss or norm differ between eager and graph", tag, n);
    BT_CHECK(e.val[0] == g.val[0] && e.val[1] == g.val[1], "%s: validation losses differ", tag);
    BT_CHECK(e.w && g.w && nbad == 0, "%s: %lld weights differ", tag, (long long)nbad);
    BT_CHECK(g.captures == want_captures && g.graphed && e.captures == 0, "%s: %d captures (expected %d), graph %d, eager captures %d",
             tag, g.captures, want_captures, g.graphed, e.captures);
    BT_CHECK(e.loss[STEPS - 1] < e.loss[0], "%s: the loss did not fall (%.4f -> %.4f)", tag, e.loss[0], e.loss[STEPS - 1]);
    free(e.w); free(g.w);
    bt_set_deterministic(0);
}
/* AdamW writing the bf16 weights in its update (trainer_update) against a cast of their own before
   each forward: the same bits, eagerly and under the graph */
static void test_copy_in_update(void) {
    if (no_gpu()) return;
    if (access("data/tinyshakespeare_train.bin", R_OK) || access("data/tinyshakespeare_val.bin", R_OK)) {
        BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return;
    }
    bt_set_deterministic(1);
    int64_t np = 0;
    { gpt2_config c = gpt2_config_make(2, 4, 64, 128, BT_GPT2_VOCAB); np = gpt2_num_params(&c); }
    for (int graph = 0; graph < 2; graph++) {
        run_out a, b;
        g_copy_off = 1; run(graph, BT_BF16, 4, 0, &a);
        g_copy_off = 0; run(graph, BT_BF16, 4, 0, &b);
        int n = 0;
        int64_t nbad = 0;
        for (int i = 0; i < STEPS; i++) n += a.loss[i] != b.loss[i] || a.norm[i] != b.norm[i];
        if (a.w && b.w) for (int64_t i = 0; i < np; i++) nbad += memcmp(&a.w[i], &b.w[i], sizeof(float)) != 0;
        printf("copy in the update (graph %d): losses %.9f .. %.9f against %.9f .. %.9f, %lld weights differ\n", graph, b.loss[0],
               b.loss[STEPS - 1], a.loss[0], a.loss[STEPS - 1], (long long)nbad);
        BT_CHECK(b.copied && !a.copied, "graph %d: the update wrote the copy %d, the reference %d", graph, b.copied, a.copied);
        BT_CHECK(n == 0 && a.val[0] == b.val[0] && a.val[1] == b.val[1], "graph %d: %d steps' loss or norm, or a validation, differ", graph, n);
        BT_CHECK(a.w && b.w && nbad == 0, "graph %d: %lld weights differ", graph, (long long)nbad);
        free(a.w); free(b.w);
    }
    bt_set_deterministic(0);
}
static void test_graph_step_fp32(void) { compare("fp32 B=4 accum 2", BT_F32, 4, 0, 1); }
static void test_graph_step_bf16(void) { compare("bf16 B=4 accum 2", BT_BF16, 4, 0, 1); }
static void test_graph_recapture(void) { compare("bf16 B=4 then B=2", BT_BF16, 4, 2, 2); }

int main(void) {
    BT_RUN(test_graph_flags);
    BT_RUN(test_graph_replays);
    BT_RUN(test_graph_capture_error);
    BT_RUN(test_graph_step_fp32);
    BT_RUN(test_graph_step_bf16);
    BT_RUN(test_graph_recapture);
    BT_RUN(test_copy_in_update);
    return bt_test_summary("test_graph_gpu");
}
