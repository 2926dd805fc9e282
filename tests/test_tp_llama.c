/* test_tp_llama.c - a Llama under tensor and context parallelism (llama_parallel.h, train_gpt2 -e ls2
   --tp/--cp) on the CPU, as test_tp_gpt2.c does for GPT-2:
   - the shard table (Megatron's split of a grouped-query model: the kinds, that the shards tile the
     model) and the refusals (tp not dividing H, Hkv: the numbers named);
   - two forked CPU ranks (collectives through the TCP store) with tp 2, tp 2 + sp, tp 2 async, and
     cp 2 with ring, allgather and alltoall, on small grouped-query models (H 4, Hkv 2; tied and
     untied heads): the shards' init is the 1-process weights bit for bit, the loss and every
     gradient (gathered into the 1-process layout) match one process's, the gradient norm too, and
     after 3 AdamW steps the weights (gathered) match one process's; a shard sliced out of the whole
     model and gathered back is the same buffer bit for bit;
   - whole runs of train_gpt2 -e ls2 on two CPU ranks (this binary re-executed, tests/train_runs.h):
     losses of --tp 2, --tp 2 --sp and --cp 2 with each --cp-comm match one process's; a --tp 2
     checkpoint is the 1-process file (within CKPT_TOL), resumes bit for bit at --tp 2 and on the
     1-process losses by one process, and a 1-process checkpoint resumes at --tp 2; --export-hf of a
     --tp 2 run read back by one process gives the run's last validation loss. */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#define run_ranks proc_run_ranks   /* proc_test.h's forked ranks, beside train_runs.h's re-executed ones */
#include "tests/proc_test.h"
#undef run_ranks
#include "tests/train_runs.h"

#define LOSS_TOL 1e-5    /* fp32: the row-parallel sums, the vocabulary-parallel loss and cp's merge run in another order */
#define GRAD_TOL 1e-5    /* relative norm per tensor (measured: a few 1e-7) */
#define CKPT_TOL 1e-4    /* test_tp_gpt2.c's: params, m and v after a run, relative norm per tensor */

static double rel_norm(const float *a, const float *b, int64_t n) { return rel_diff(a, b, n); }
static float *host_of(bt_tensor *t) {
    float *x = (float *)malloc(sizeof(float) * (size_t)bt_numel(t));
    bt_to_host(t, x, BT_F32);
    return x;
}

/* ---- 1. the shard table and the refusals -------------------------------------------------- */
static void test_shard_table(void) {
    for (int tie = 0; tie < 2; tie++) {
        llama_config c = llama_config_make(3, 8, 4, 64, 96, 300, 64);
        c.tie = tie;
        int n = llama_n_leaves(&c);
        for (int tp = 1; tp <= 4; tp *= 2) {
            int64_t total = 0, whole = 0, local = llama_local_numel(&c, tp, &whole), sum = 0;
            for (int i = 0; i < n; i++) {
                bt_tp_shard s = llama_shard_of(&c, i);
                int64_t k = bt_tp_shard_numel(s, tp);
                total += s.kind == BT_TP_WHOLE ? k : k * tp;
                sum += k;
            }
            BT_CHECK(total == llama_num_params(&c) && sum == local && whole == (tp == 1 ? total : (2 * 3 + 1) * 64), "tie %d tp %d: shards cover %lld of %lld, local %lld/%lld, whole %lld",
                     tie, tp, (long long)total, (long long)llama_num_params(&c), (long long)sum, (long long)local, (long long)whole);
        }
        static const int kinds[6] = {BT_TP_WHOLE, BT_TP_PACKED, BT_TP_COLS, BT_TP_WHOLE, BT_TP_PACKED, BT_TP_COLS};
        for (int k = 0; k < 6; k++) BT_CHECK(llama_shard_of(&c, 1 + 6 + k).kind == kinds[k], "layer leaf %d: kind %d", k, llama_shard_of(&c, 7 + k).kind);
        BT_CHECK(llama_shard_of(&c, 0).kind == BT_TP_ROWS && llama_shard_of(&c, 1 + 18).kind == BT_TP_WHOLE, "emb rows, norm whole");
        if (!tie) BT_CHECK(llama_shard_of(&c, 2 + 18).kind == BT_TP_ROWS, "the untied head: rows");
        bt_tp_shard q = llama_shard_of(&c, 2);   /* wqkv: H D, Hkv D, Hkv D rows (D 8) */
        bt_shape qs = bt_tp_shard_shape(q, 2);
        BT_CHECK(q.nparts == 3 && q.part[0] == 64 && q.part[1] == 32 && q.part[2] == 32 && qs.d[0] == 64 && qs.d[1] == 64, "wqkv's parts");
    }
    /* the layout's whole tensors come first, and a model's leaves sit at its offsets */
    llama_config c = llama_config_make(2, 4, 2, 32, 48, 200, 32);
    c.tie = 1;
    llama m;
    llama_build_tp(&m, c, bt_cpu(), 2, 1, 1, BT_F32);
    int64_t whole;
    llama_local_numel(&c, 2, &whole);
    BT_CHECK(m.num_params == llama_num_params(&c) && m.flat_numel == llama_local_numel(&c, 2, NULL) && m.layers[0].attn_norm->offset == 0 &&
             m.norm->offset == 2 * 2 * 32 && m.emb->offset == whole && m.head == m.emb, "llama_build_tp's layout");
    BT_CHECK(m.layers[1].wqkv->shape[0] == (2 + 2 * 1) * 8 && m.layers[1].wo->shape[1] == 16 && m.layers[0].w13->shape[0] == 48 &&
             m.layers[0].w2->shape[1] == 24, "shard shapes");
    llama_free(&m);
}
static int check_flags(const char *args, int world, char *err, size_t n) {
    train_opts o;
    err[0] = 0;
    if (train_parse(args, &o, err, n)) return -2;
    trainer_config c;
    trainer_config_preset("ls2", &c);
    if (resolve_opts(&o, 0, &c, err, n)) return -3;
    return trainer_par_check(&o, &c, world, 0, err, n);
}
static void test_refusals(void) {
    char err[1024];
    llama_config c = llama_config_make(2, 6, 3, 48, 48, 300, 32);   /* H 6, Hkv 3: tp 2 divides H, not Hkv; Vp 384 */
    BT_CHECK(llama_tp_check(&c, 2, err, sizeof err) == -1 && strstr(err, "--tp 2 does not divide the model's 6 query heads and 3 key/value heads"), "%s", err);
    BT_CHECK(llama_tp_check(&c, 3, err, sizeof err) == 0, "tp 3 divides H 6, Hkv 3, F 48, Vp 384: %s", err);
    c = llama_config_make(2, 4, 2, 32, 51, 200, 32);
    BT_CHECK(llama_tp_check(&c, 2, err, sizeof err) == -1 && strstr(err, "MLP width F = 51"), "%s", err);
    llama m;
    BT_EXPECT_ERROR(llama_build_tp(&m, llama_config_make(2, 6, 3, 48, 48, 200, 32), bt_cpu(), 2, 0, 1, BT_F32), "6 query heads and 3 key/value heads");
    /* train_gpt2's flags: ls2 has H 4, Hkv 2 */
    BT_CHECK(check_flags("-e ls2 --tp 4 -b 2 -t 16", 4, err, sizeof err) == -1 && strstr(err, "--tp 4 does not divide the model's 4 query heads and 2 key/value heads"), "%s", err);
    BT_CHECK(check_flags("-e ls2 --tp 2 --cp 2 -b 2 -t 16", 4, err, sizeof err) == -1 && strstr(err, "--tp with --cp on CPUs"), "%s", err);
    BT_CHECK(check_flags("-e ls2 --tp 2 --sp --async-tp -b 2 -t 16", 2, err, sizeof err) == 0, "%s", err);
    BT_CHECK(check_flags("-e ls2 --cp 2 --cp-comm alltoall -b 2 -t 16", 2, err, sizeof err) == 0, "%s", err);
    BT_CHECK(check_flags("-e ls2 --tp 2 --recompute block -b 2 -t 16", 2, err, sizeof err) < 0 && strstr(err, "--recompute attn, mlp or block: not with --tp"), "%s", err);
}

/* ---- 2. forked ranks: the loss, every gradient and AdamW steps against one process ----------- */
typedef struct { int port, tp, cp, sp, async, tie; const char *cp_comm; } grad_case;
#define GB 2
#define GT 16
static int rank_fails;
static double rank_worst;   /* the largest relative difference seen (an info line) */
static void close_or_fail(int rank, const char *what, double e, double tol) {
    if (e > rank_worst) rank_worst = e;
    if (!(e <= tol)) { fprintf(stderr, "  FAIL rank %d: %s: relative difference %.3g (tolerance %.1g)\n", rank, what, e, tol); rank_fails++; }
}
/* an ignored target only without cp: a cp rank's loss is its tokens' mean, the mean of the ranks'
   means the sequence's only when they hold equal counts of targets (as training's batches do) */
static void batch_of(int step, int32_t *in, int32_t *tg, int V, int cp) {
    for (int i = 0; i < GB * GT; i++) {
        in[i] = (int32_t)(bt_philox_uniform(77 + step, (uint64_t)i) * V);
        tg[i] = (int32_t)(bt_philox_uniform(91 + step, (uint64_t)i) * V);
    }
    if (cp == 1) tg[3] = -1;
}
/* one process's model and this rank's shard, the same steps on both; rank 0 compares the
   gathered gradients and weights (the other ranks take part in the gathers) */
static int grad_body(int rank, void *arg) {
    grad_case *g = (grad_case *)arg;
    static bt_dist_env env;
    bt_dist_opts dop;
    store_rank_opts(&env, &dop, rank, g->tp * g->cp, g->port, 60);
    bt_dist *d = bt_dist_init(&dop);
    rank_fails = 0; rank_worst = 0;
    llama_config c = llama_config_make(2, 4, 2, 32, 48, 200, GT);
    c.tie = g->tie;
    c.rope.theta = 10000.0;
    bt_par_opts po;
    memset(&po, 0, sizeof po);
    po.tp = g->tp; po.cp = g->cp; po.sp = g->sp; po.async_tp = g->async; po.cp_comm = g->cp_comm; po.B = GB; po.T = GT;
    bt_par *p = bt_par_open(&po, d, 0);
    llama one, sh;
    llama_build(&one, c, bt_cpu());
    llama_init(&one, 1234);
    if (g->tp > 1) llama_build_tp(&sh, c, bt_cpu(), g->tp, p->tp_rank, 1, BT_F32);
    else llama_build(&sh, c, bt_cpu());
    llama_par_attach(p, &sh);
    llama_init(&sh, 1234);
    bt_scope_begin();
    /* the shard's init is the slice of one process's weights, bit for bit; sliced and gathered back: the same */
    bt_tensor *want = bt_par_shard_of_whole(p, one.flat, sh.flat_numel);
    int same = !memcmp(bt_data_ptr(want), bt_data_ptr(sh.flat), sizeof(float) * (size_t)sh.flat_numel);
    if (!same) { fprintf(stderr, "  FAIL rank %d: the shard's init differs from one process's weights\n", rank); rank_fails++; }
    if (g->tp > 1) {
        bt_tensor *back = bt_par_gather_whole(p, sh.flat);
        if (back && memcmp(bt_data_ptr(back), bt_data_ptr(one.flat), sizeof(float) * (size_t)one.num_params)) {
            fprintf(stderr, "  FAIL rank %d: the shards gathered differ from one process's weights\n", rank); rank_fails++;
        }
        bt_release(back);
    }
    bt_scope_end();
    bt_adamw o1, o2;
    bt_adamw_init(&o1, one.params, one.n_params, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    bt_adamw_init(&o2, sh.params, sh.n_params, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    int32_t in[GB * GT], tg[GB * GT];
    for (int step = 0; step < 3; step++) {
        bt_scope_begin();
        batch_of(step, in, tg, c.V, g->cp);
        bt_tensor *idx = bt_from_data(in, bt_shape2(GB, GT), BT_I32, bt_cpu()), *tgt = bt_from_data(tg, bt_shape2(GB, GT), BT_I32, bt_cpu());
        bt_zero_(one.flat_grad); bt_zero_(sh.flat_grad);
        bt_tensor *l1 = llama_loss(&one, idx, tgt, BT_F32);
        bt_backward(l1);
        bt_par_batch(p, in, tg, GB, GT, bt_cpu(), &idx, &tgt);
        bt_tensor *l2 = llama_loss(&sh, idx, tgt, BT_F32);
        bt_backward(l2);
        bt_par_reduce_grads(p, sh.flat_grad, NULL);
        int old = bt_set_grad_enabled(0);
        l2 = bt_clone(l2);   /* the mean over cp: an in-place collective on a copy outside the graph */
        bt_par_mean(p, l2);
        bt_set_grad_enabled(old);
        char what[96];
        snprintf(what, sizeof what, "step %d loss %.7f vs %.7f", step, bt_item(l2), bt_item(l1));
        close_or_fail(rank, what, fabs(bt_item(l2) - bt_item(l1)) / fabs(bt_item(l1)), LOSS_TOL);
        bt_tensor *n1 = bt_grad_norm(one.params, one.n_params);
        bt_tensor *n2 = g->tp > 1 ? bt_par_grad_norm(p, sh.flat_grad) : bt_grad_norm(sh.params, sh.n_params);
        snprintf(what, sizeof what, "step %d gradient norm", step);
        close_or_fail(rank, what, fabs(bt_item(n2) - bt_item(n1)) / bt_item(n1), LOSS_TOL);
        /* every leaf's gradient in the 1-process layout */
        bt_tensor *gw = g->tp > 1 ? bt_par_gather_whole(p, sh.flat_grad) : bt_retain(sh.flat_grad);
        if (gw && step == 0) {
            float *a = host_of(gw), *b = host_of(one.flat_grad);
            for (int i = 0; i < one.n_params; i++) {
                int64_t off = one.params[i]->offset - one.flat->offset;
                snprintf(what, sizeof what, "step %d gradient of leaf %d (%lld values)", step, i, (long long)bt_numel(one.params[i]));
                close_or_fail(rank, what, rel_norm(a + off, b + off, bt_numel(one.params[i])), GRAD_TOL);
            }
            free(a); free(b);
        }
        bt_release(gw);
        bt_adamw_set_grad_norm(&o1, n1); bt_adamw_update(&o1, 1e-2f, NULL);
        bt_adamw_set_grad_norm(&o2, n2); bt_adamw_update(&o2, 1e-2f, NULL);
        bt_scope_end();
    }
    bt_scope_begin();
    bt_tensor *w = g->tp > 1 ? bt_par_gather_whole(p, sh.flat) : bt_retain(sh.flat);
    if (w) {
        float *a = host_of(w), *b = host_of(one.flat);
        close_or_fail(rank, "the weights after 3 AdamW steps", rel_norm(a, b, one.num_params), LOSS_TOL);
        free(a); free(b);
    }
    bt_release(w);
    bt_scope_end();
    if (rank == 0)
        fprintf(stderr, "  info: tp %d%s%s cp %d%s%s, %s head: loss, gradients, norm and weights within %.2e relative of one process's\n", g->tp,
                g->sp ? " sp" : "", g->async ? " async" : "", g->cp, g->cp_comm ? " " : "", g->cp_comm ? g->cp_comm : "", g->tie ? "tied" : "untied",
                rank_worst);
    bt_adamw_free(&o1); bt_adamw_free(&o2);
    llama_free(&one); llama_free(&sh);
    bt_par_free(p);
    bt_dist_shutdown(d);
    return rank_fails ? 1 : 0;
}
static void run_grad_case(const char *name, grad_case g) {
    g.port = bt_dist_free_port(NULL);
    int codes[2] = {-1, -1};
    proc_run_ranks(2, grad_body, &g, codes, 120);
    BT_CHECK(codes[0] == 0 && codes[1] == 0, "%s: ranks exited %d, %d (their failures are above)", name, codes[0], codes[1]);
}
static void test_ranks_match_one_process(void) {
    for (int tie = 0; tie < 2; tie++) {
        grad_case g = {0, 2, 1, 0, 0, tie, NULL};
        run_grad_case(tie ? "tp 2, tied" : "tp 2, untied", g);
        g.sp = 1;
        run_grad_case(tie ? "tp 2 sp, tied" : "tp 2 sp, untied", g);
    }
    grad_case a = {0, 2, 1, 1, 1, 0, NULL};
    run_grad_case("tp 2 sp async", a);
    static const char *const comms[3] = {"ring", "allgather", "alltoall"};
    for (int k = 0; k < 3; k++) {
        grad_case g = {0, 1, 2, 0, 0, k == 1, comms[k]};
        run_grad_case(comms[k], g);
    }
}

/* cp attention of a grouped-query projection with RoPE, one rank: bt_attention_qkv_ex's math */
static void test_cp_attention_ex_one_rank(void) {
    bt_dist_env env;
    bt_dist_opts o;
    bt_dist *d = one_rank_init(&env, &o, 1);
    bt_cp *cp = bt_cp_create(d->world_comm, BT_CP_RING);
    bt_rope_opts r = {10000.0, 0, 0, 0, 0};
    bt_scope_begin();
    bt_tensor *x = bt_randn(bt_shape3(2, 8, (4 + 2 * 2) * 8), BT_F64, bt_cpu(), 3), *w = bt_randn(bt_shape3(2, 8, 32), BT_F64, bt_cpu(), 4);
    bt_set_requires_grad(x, 1);
    bt_tensor *a = bt_cp_attention_qkv_ex(cp, x, 4, 2, &r, 1);
    bt_backward(bt_sum(bt_mul(a, w), NULL, 0, 0));
    bt_tensor *ga = bt_clone(x->grad);
    bt_release(x->grad); x->grad = NULL;
    bt_tensor *b = bt_attention_qkv_ex(x, 4, 2, &r);
    bt_backward(bt_sum(bt_mul(b, w), NULL, 0, 0));
    BT_CHECK(bt_test_relerr_t(a, b) < 1e-12 && bt_test_relerr_t(ga, x->grad) < 1e-12, "cp_attention_qkv_ex vs attention_qkv_ex: %.3g, gradient %.3g",
             bt_test_relerr_t(a, b), bt_test_relerr_t(ga, x->grad));
    BT_EXPECT_ERROR(bt_cp_attention_qkv_ex(cp, bt_randn(bt_shape3(1, 8, 50), BT_F64, bt_cpu(), 5), 4, 2, &r, 1), "with Hkv = 2 dividing H = 4");
    bt_scope_end();
    bt_cp_free(cp);
    bt_dist_shutdown(d);
}

/* ---- 3. whole runs of train_gpt2 -e ls2 on two CPU ranks ----------------------------------- */
#define TP_RUN "-e ls2 -b 2 -t 16 -d 64 -v 0 -g 0 -u 1 --seed 5"
static void test_runs_match_one_process(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    int steps = quick() ? 2 : 3;
    char args[2000];
    double l1[16], l2[16];
    snprintf(args, sizeof args, TP_RUN " -x %d", steps);
    if (run_logged(1, args, "one", l1, 16) != steps) return;
    static const char *const modes[] = {"--tp 2", "--tp 2 --sp", "--cp 2", "--cp 2 --cp-comm allgather", "--cp 2 --cp-comm alltoall"};
    int nmodes = quick() ? 2 : 5;
    for (int k = 0; k < nmodes; k++) {
        char tag[16];
        snprintf(tag, sizeof tag, "m%d", k);
        snprintf(args, sizeof args, TP_RUN " -x %d %s", steps, modes[k]);
        if (run_logged(2, args, tag, l2, 16) != steps) continue;
        double worst = loss_diff(l2, l1, steps);
        BT_CHECK(worst < LOSS_TOL, "%s: worst loss relative difference %.3g (step 1: %.6f vs %.6f)", modes[k], worst, l2[0], l1[0]);
        fprintf(stderr, "  info: -e ls2 %s on 2 CPU ranks vs 1: worst loss relative difference %.2e\n", modes[k], worst);
    }
}
/* a --tp 2 checkpoint is the 1-process file, resumes bit for bit at --tp 2 and on the 1-process
   losses by one process; the 1-process checkpoint resumes at --tp 2 */
#define CKPT_RUN TP_RUN " -x 4 --ckpt-every 2"
static void test_checkpoints_across_layouts(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    char args[2000], ck2[900], ck4[900], one2[900], one4[900], a[900];
    double l1[8], lu[8], lr[8];
    int bitwise;
    snprintf(args, sizeof args, CKPT_RUN " --ckpt-dir %s/one.ck", bt_test_dir);
    if (run_logged(1, args, "ckone", l1, 8) != 4) return;
    snprintf(args, sizeof args, CKPT_RUN " --tp 2 --ckpt-dir %s/tp.ck", bt_test_dir);
    if (run_logged(2, args, "cktp", lu, 8) != 4) return;
    ckpt_file("tp.ck", 2, ck2, sizeof ck2); ckpt_file("tp.ck", 4, ck4, sizeof ck4);
    ckpt_file("one.ck", 2, one2, sizeof one2); ckpt_file("one.ck", 4, one4, sizeof one4);
    double e = ckpt_diff(ck2, one2, &bitwise);
    BT_CHECK(e < CKPT_TOL, "--tp 2: the checkpoint of step 2 differs from one process's by %.3g (relative)", e);
    fprintf(stderr, "  info: -e ls2 --tp 2 checkpoint vs 1 process's: params, m, v within %.2e relative\n", e);
    /* resumed in the same layout: the same losses, the same last checkpoint bit for bit */
    snprintf(args, sizeof args, CKPT_RUN " --tp 2 --resume %s --ckpt-dir %s/tp_r.ck", ck2, bt_test_dir);
    if (run_logged(2, args, "tp_r", lr, 8) == 2) {
        BT_CHECK(lr[0] == lu[2] && lr[1] == lu[3], "--tp 2 resumed: losses %.6f %.6f, uninterrupted %.6f %.6f", lr[0], lr[1], lu[2], lu[3]);
        ckpt_file("tp_r.ck", 4, a, sizeof a);
        e = ckpt_diff(a, ck4, &bitwise);
        BT_CHECK(bitwise, "--tp 2 resumed at --tp 2: the checkpoint of step 4 is not bitwise the uninterrupted run's (%.3g)", e);
    }
    /* resumed by one process: the 1-process run's losses and checkpoint */
    snprintf(args, sizeof args, CKPT_RUN " --resume %s --ckpt-dir %s/tp_1.ck", ck2, bt_test_dir);
    if (run_logged(1, args, "tp_1", lr, 8) == 2) {
        double dl = loss_diff(lr, l1 + 2, 2);
        BT_CHECK(dl < LOSS_TOL, "--tp 2 checkpoint resumed by 1 process: losses %.6f %.6f, 1-process run %.6f %.6f", lr[0], lr[1], l1[2], l1[3]);
        ckpt_file("tp_1.ck", 4, a, sizeof a);
        e = ckpt_diff(a, one4, &bitwise);
        BT_CHECK(e < CKPT_TOL, "--tp 2 checkpoint resumed by 1 process: step 4 differs from the 1-process run's by %.3g", e);
    }
    /* the 1-process checkpoint resumed at --tp 2: the --tp 2 run's losses */
    snprintf(args, sizeof args, CKPT_RUN " --tp 2 --resume %s --ckpt-dir %s/one_tp.ck", one2, bt_test_dir);
    if (run_logged(2, args, "one_tp", lr, 8) == 2) {
        double dl = loss_diff(lr, lu + 2, 2);
        BT_CHECK(dl < LOSS_TOL, "1-process checkpoint resumed with --tp 2: losses %.6f %.6f, uninterrupted %.6f %.6f", lr[0], lr[1], lu[2], lu[3]);
    }
}
/* --export-hf of a --tp 2 run (the shards gathered on rank 0) read back by one process: the
   run's last validation loss; samples come from the gathered model */
static void test_export_and_samples(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    char args[2000], out[65536], lp[700];
    snprintf(args, sizeof args, TP_RUN " -x 2 -v 2 -m 2 -g 8 --tp 2 --export-hf %s/hf -o %s/exp", bt_test_dir, bt_test_dir);
    int rc = run_ranks(2, args, "exp", out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "exported") && strstr(out, "--- sample (greedy) ---"), "--tp 2 --export-hf: exit %d: %s", rc, out);
    if (rc) return;
    snprintf(lp, sizeof lp, "%s/exp/log.jsonl", bt_test_dir);
    static char text[1 << 16];
    slurp(lp, text, sizeof text);
    const char *v = strstr(text, "\"val_loss\": ");
    double want = v ? atof(v + 12) : NAN;
    snprintf(args, sizeof args, "-b 2 -t 16 -v 2 -m 2 --eval-only --init-from %s/hf -o %s/ev", bt_test_dir, bt_test_dir);
    rc = run_ranks(1, args, "ev", out, sizeof out);
    const char *g = strstr(out, "val loss ");
    double got = g ? atof(g + 9) : NAN;
    BT_CHECK(rc == 0 && fabs(got - want) < 1e-4 * fabs(want), "the --tp 2 export read back: val loss %.6f, the run's %.6f: %s", got, want, out);
}

int main(int argc, char **argv) {
    if (train_runs_child(argc, argv)) return train_runs_child_main(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    train_runs_init("test_tp_llama");
    /* the forked ranks first: libgomp's thread pool does not survive a fork */
    BT_RUN(test_ranks_match_one_process);
    BT_RUN(test_shard_table);
    BT_RUN(test_refusals);
    BT_RUN(test_cp_attention_ex_one_rank);
    BT_RUN(test_runs_match_one_process);
    BT_RUN(test_checkpoints_across_layouts);
    BT_RUN(test_export_and_samples);
    train_runs_done();
    return bt_test_summary("test_tp_llama");
}
