/* test_fsdp_gpt2.c - train_gpt2 --dp fsdp (bt_parallel.h's engine under the model's units,
   bt_tensor.h's bt_units, trainer.h's wiring) for both families: GPT-2 (s2) and a Llama (ls2:
   grouped-query attention, 4 heads over 2 key/value heads, tied head). First llama.h's units in
   one process: a tied and an untied Llama whose parameters come from an in-process gather (copies
   of each unit, gradients summed by the hooks) give the plain model's loss bit for bit and its
   gradients, gathering each unit once per forward and each block again in the backward, reducing
   each unit once. Then runs on two CPU ranks: this binary re-executed as train_gpt2 with the
   launcher variables, the collectives through the TCP store (tests/train_runs.h). Against one
   process on the same global batch (one process accumulates twice the micro-batches of a rank):
   the losses of every step within 1e-5 relative (fp32), rank 0's memory under 0.6x one process's,
   the weights written (GPT-2's --save file, a Llama's --export-hf directory) and the checkpoints
   (weights, AdamW's m and v: the 1-process file) within the tolerances below; a resume with fsdp
   ranks bit for bit; the checkpoint and a Hugging Face export as --init-from of one process and of
   fsdp ranks; --offload adamw's losses and checkpoints bit for bit; the samples (during the run and at the end, from the weights gathered on rank 0) one
   process's; the flags fsdp does not take yet, and a resume by another number of ranks, refused
   with the reason. */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/train_runs.h"

#define FS_BASE "-b 2 -t 16 -v 0 -g 0 -u 1 --seed 5 --device cpu"
#define FS_OPTS FS_BASE " -d 64"
#define FS_RUN "-e %s " FS_OPTS   /* the model's preset first */
/* the presets the runs train: GPT-2's and a Llama's */
static const char *const models[2] = {"s2", "ls2"};
#define IS_LLAMA(model) ((model)[0] == 'l')
/* Tolerances: the losses, LOSS_TOL = 1e-5 relative (the bound for fp32), and the weights of
   a model file the same. A checkpoint's three tensors (weights, m, v) within CKPT_TOL = 1e-5
   relative norm each: the ranks' gradients are summed per unit and halved where one process adds
   two halves, so only rounding differs (v holds squared gradients: twice their relative rounding). */
#define LOSS_TOL 1e-5
#define CKPT_TOL 1e-5

/* ---- 1. the flags ------------------------------------------------------------------------ */
static int check_flags(const char *args, const char *preset, int world, int on_gpu, char *err, size_t n) {
    train_opts o;
    err[0] = 0;
    if (train_parse(args, &o, err, n)) return -2;
    trainer_config c;
    if (trainer_config_preset(preset, &c)) return -4;
    if (resolve_opts(&o, on_gpu, &c, err, n)) return -3;
    return trainer_par_check(&o, &c, world, on_gpu, err, n);
}
static void test_flag_errors(void) {
    static const struct { const char *args, *preset; int world, on_gpu; const char *want; } bad[] = {
        {"--dp fsdp --tp 2 -b 2 -t 16", "s4", 2, 1, "--dp fsdp: not with --tp/--cp"},
        {"--dp fsdp --cp 2 -b 2 -t 16", "s4", 4, 0, "--dp fsdp: not with --tp/--cp"},
        {"--dp fsdp --cuda-graph on -b 2 -t 16", "s4", 2, 1, "--dp fsdp: not with --cuda-graph on"},
        {"--dp fsdp --eval-only -b 2 -t 16", "s4", 2, 0, "--dp fsdp: not with --eval-only"},
        {"--dp fsdp --eval-mc x.jsonl -b 2 -t 16", "s4", 2, 1, "--dp fsdp: not with --eval-mc"},
    };
    char err[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = check_flags(bad[i].args, bad[i].preset, bad[i].world, bad[i].on_gpu, err, sizeof err);
        BT_CHECK(r == -1 && strstr(err, bad[i].want), "'%s' (%s) world %d: %d '%s' (want '%s')", bad[i].args, bad[i].preset, bad[i].world, r, err, bad[i].want);
    }
    BT_CHECK(check_flags("--dp fsdpx", "s4", 2, 0, err, sizeof err) == -2 && strstr(err, "--dp must be ddp, zero1, zero2 or fsdp"), "%s", err);
    static const struct { const char *args; int world, on_gpu; } good[] = {
        {"--dp fsdp -b 2 -t 16", 2, 0}, {"--dp fsdp -b 2 -t 16 --recompute block", 4, 1}, {"--dp fsdp --cuda-graph on -b 2 -t 16", 1, 1},
        {"--dp fsdp -b 2 -t 16 --ckpt-dir /tmp/x --ckpt-every 5 --resume auto --export-hf /tmp/y", 2, 0},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        for (int k = 0; k < 2; k++)
            BT_CHECK(check_flags(good[i].args, k ? "ls2" : "s4", good[i].world, good[i].on_gpu, err, sizeof err) == 0, "'%s' (%s) world %d: %s",
                     good[i].args, k ? "ls2" : "s4", good[i].world, err);
}

/* ---- 2. llama.h's units in one process: an in-process gather against the plain model ------------ */
/* the "engine": every unit a copy of its span of full (a new leaf with grad mode on), its gradient
   added to grad's span by the leaf's hook */
typedef struct fake_src fake_src;
typedef struct { fake_src *f; int u; } fake_arg;
struct fake_src { bt_tensor *full, *grad; int64_t lo[16]; fake_arg args[16]; int gathers, reduces; };
static void fake_hook(bt_tensor *leaf, void *user) {
    fake_arg *a = (fake_arg *)user;
    bt_add_(bt_narrow(a->f->grad, 0, a->f->lo[a->u], a->f->lo[a->u + 1] - a->f->lo[a->u]), leaf->grad, 1.0);
    a->f->reduces++;
}
static bt_tensor *fake_gather(void *ctx, int u, bt_dtype dt) {
    fake_src *f = (fake_src *)ctx;
    int grad = bt_grad_enabled(), old = bt_set_grad_enabled(0);
    bt_tensor *t = bt_cast(bt_clone(bt_narrow(f->full, 0, f->lo[u], f->lo[u + 1] - f->lo[u])), dt);
    bt_set_grad_enabled(old);
    f->gathers++;
    if (grad) {
        bt_set_requires_grad(t, 1);
        bt_register_grad_hook(t, fake_hook, &f->args[u]);
    }
    return t;
}
/* a 2-layer GQA Llama (H 4, Hkv 2, V 300), tied or not: the plain model under --recompute block (the
   regions fsdp forces) against the same weights through the units */
static void units_case(int tie) {
    llama_config c = llama_config_make(2, 4, 2, 64, 96, 300, 32);
    c.tie = tie;
    llama a, b;
    llama_build(&a, c, bt_cpu()); llama_init(&a, 7);
    llama_build(&b, c, bt_cpu()); llama_init(&b, 7);
    int32_t ids[2 * 16], tg[2 * 16];
    for (int i = 0; i < 32; i++) { ids[i] = (i * 37 + 11) % 300; tg[i] = (i * 53 + 5) % 300; }
    int old = bt_set_recompute(BT_RECOMPUTE_BLOCK);
    bt_scope_begin();
    bt_tensor *idx = bt_from_data(ids, bt_shape2(2, 16), BT_I32, bt_cpu()), *tgt = bt_from_data(tg, bt_shape2(2, 16), BT_I32, bt_cpu());
    bt_tensor *la = llama_loss(&a, idx, tgt, BT_F32);
    bt_backward(la);
    double want = bt_item(la);
    fake_src f;
    memset(&f, 0, sizeof f);
    f.full = bt_clone(b.flat);
    f.grad = bt_zeros(bt_shape1(b.num_params), BT_F32, bt_cpu());
    int n = llama_units_bounds(&b, f.lo);
    for (int u = 0; u < n; u++) { f.args[u].f = &f; f.args[u].u = u; }
    bt_units src = {fake_gather, &f};
    llama_set_units(&b, &src);
    bt_set_recompute(0);   /* the units force the block regions themselves */
    bt_tensor *lb = llama_loss(&b, idx, tgt, BT_F32);
    bt_backward(lb);
    double got = bt_item(lb), e = bt_test_relerr_t(f.grad, bt_narrow(a.flat_grad, 0, 0, a.num_params));
    int bitwise = !memcmp(bt_data_ptr(f.grad), bt_data_ptr(a.flat_grad), sizeof(float) * (size_t)a.num_params);
    BT_CHECK(n == 4 && f.lo[n] == b.num_params && f.lo[1] == (int64_t)c.Vp * c.C, "%s: %d units ending at %lld of %lld", tie ? "tied" : "untied",
             n, (long long)f.lo[n], (long long)b.num_params);
    BT_CHECK(got == want, "%s: the loss through the units %.9g, the plain model's %.9g", tie ? "tied" : "untied", got, want);
    BT_CHECK(e < 1e-6, "%s: the gradients through the units differ from the plain model's by %.3g (relative)", tie ? "tied" : "untied", e);
    BT_CHECK(f.gathers == 2 * c.L + 2 && f.reduces == c.L + 2, "%s: %d gathers (want 2 L + 2 = %d: the blocks again in the backward), %d reduces (want %d)",
             tie ? "tied" : "untied", f.gathers, 2 * c.L + 2, f.reduces, c.L + 2);
    double leaf_sq = bt_item(bt_sumsq(b.flat_grad));
    BT_CHECK(leaf_sq == 0, "%s: the model's own leaves got gradients (%g) under the units", tie ? "tied" : "untied", leaf_sq);
    /* evaluation (no graph): the same loss, each unit gathered once */
    f.gathers = 0;
    int g = bt_set_grad_enabled(0);
    double ev = bt_item(llama_loss(&b, idx, tgt, BT_F32));
    bt_set_grad_enabled(g);
    BT_CHECK(ev == want && f.gathers == c.L + 2, "%s, no grad: loss %.9g (want %.9g), %d gathers (want %d)", tie ? "tied" : "untied", ev, want,
             f.gathers, c.L + 2);
    fprintf(stderr, "  info: llama units (%s): loss bit for bit, gradients %s (%.2e)\n", tie ? "tied" : "untied", bitwise ? "bit for bit" : "within", e);
    bt_scope_end();
    bt_set_recompute(old);
    llama_set_units(&b, NULL);
    llama_free(&a); llama_free(&b);
}
static void test_llama_units(void) {
    units_case(1);
    units_case(0);
}

/* ---- 3. two ranks against one process: losses, the weights written, memory ---------------------- */
/* the "mem N MiB" of a run's first step line (bytes allocated then), -1 when absent */
static double step1_mib(const char *out) {
    const char *s = strstr(out, "step    1/"), *m = s ? strstr(s, "| mem ") : NULL;
    return m ? atof(m + 6) : -1;
}
/* the weights a run wrote (tag's --save file for GPT-2, its --export-hf directory for a Llama, read
   back by llama_io.h) as floats (malloc'd, *n of them); NULL when they cannot be read */
static const char *out_flag(const char *model, const char *tag) {
    static char buf[2][900];
    static int k;
    k ^= 1;
    if (IS_LLAMA(model)) snprintf(buf[k], sizeof buf[k], "--export-hf %s/%s.hf", bt_test_dir, tag);
    else snprintf(buf[k], sizeof buf[k], "--save %s/%s.bin", bt_test_dir, tag);
    return buf[k];
}
static float *out_weights(const char *model, const char *tag, int64_t *n) {
    char path[800], err[512];
    snprintf(path, sizeof path, "%s/%s.%s", bt_test_dir, tag, IS_LLAMA(model) ? "hf" : "bin");
    if (!IS_LLAMA(model)) return read_model(path, n);
    llama m;
    if (llama_hf_init_from(&m, path, bt_cpu(), err, sizeof err)) { fprintf(stderr, "  %s: %s\n", path, err); return NULL; }
    float *w = (float *)malloc(sizeof(float) * (size_t)m.num_params);
    if (w) memcpy(w, bt_data_ptr(m.flat), sizeof(float) * (size_t)m.num_params);
    *n = w ? m.num_params : 0;
    llama_free(&m);
    return w;
}
/* -d 128: one process accumulates four micro-batches, each rank two (reduce-scattered each time) */
#define ACC_RUN "-e %s " FS_BASE " -d 128"
static void runs_match_one_process(const char *model) {
    int steps = quick() ? 2 : 4;
    char args[2000], out[65536], dir[700], t1[64], t2[64];
    double l1[16], l2[16];
    snprintf(t1, sizeof t1, "one_%s", model);
    snprintf(t2, sizeof t2, "fsdp_%s", model);
    snprintf(dir, sizeof dir, "%s/%s", bt_test_dir, t1);
    snprintf(args, sizeof args, ACC_RUN " -x %d -o %s %s", model, steps, dir, out_flag(model, t1));
    int rc = run_ranks(1, args, t1, out, sizeof out), n1 = read_losses(dir, l1, 16);
    BT_CHECK(rc == 0 && n1 == steps, "%s, one process: exit %d, %d losses: %s", model, rc, n1, out);
    if (rc || n1 != steps) return;
    double mem1 = step1_mib(out);
    snprintf(dir, sizeof dir, "%s/%s", bt_test_dir, t2);
    snprintf(args, sizeof args, ACC_RUN " -x %d -o %s %s --dp fsdp", model, steps, dir, out_flag(model, t2));
    rc = run_ranks(2, args, t2, out, sizeof out);
    int n2 = read_losses(dir, l2, 16);
    BT_CHECK(rc == 0 && n2 == steps && strstr(out, "fsdp: weights, gradients and AdamW state in 2 shards of 4 units"), "%s --dp fsdp: exit %d, %d losses: %s",
             model, rc, n2, out);
    if (rc || n2 != steps) return;
    /* memory: one process holds 16 bytes a parameter (fp32 weights, gradients, m, v), an fsdp rank
       16 / 2 plus what a pass gathers (s2, ls2: the 3.3M parameters are 13 MiB in fp32, the tied
       embedding, gathered for the whole pass, 12.3 MiB of it) */
    double mem2 = step1_mib(out);
    BT_CHECK(mem1 > 0 && mem2 > 0 && mem2 < 0.6 * mem1, "%s --dp fsdp: rank 0 holds %.0f MiB at step 1, one process %.0f MiB (want < 0.6x)", model,
             mem2, mem1);
    double worst = loss_diff(l2, l1, steps);
    BT_CHECK(worst < LOSS_TOL, "%s --dp fsdp: worst loss relative difference %.3g (step 1: %.7f vs %.7f)", model, worst, l2[0], l1[0]);
    int64_t nw1 = 0, nw2 = 0;
    float *w1 = out_weights(model, t1, &nw1), *w2 = out_weights(model, t2, &nw2);
    double e = w1 && w2 && nw1 == nw2 && nw1 > 0 ? rel_diff(w2, w1, nw1) : INFINITY;
    BT_CHECK(e < LOSS_TOL, "%s --dp fsdp: the weights written (%s) differ from one process's by %.3g (relative)", model,
             IS_LLAMA(model) ? "--export-hf" : "--save", e);
    fprintf(stderr, "  info: %s --dp fsdp on 2 CPU ranks (2 micro-batches each) vs 1 process (4), %d steps: worst loss relative difference %.2e, "
            "%s weights %.2e; memory at step 1 %.0f vs %.0f MiB\n", model, steps, worst, IS_LLAMA(model) ? "exported" : "saved", e, mem2, mem1);
    free(w1); free(w2);
}
static void test_runs_match_one_process(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    for (int k = 0; k < 2; k++) runs_match_one_process(models[k]);
}

/* ---- 4. checkpoints: the 1-process file, resumed bit for bit, refused by another world --------- */
#define CKPT_RUN FS_RUN " -x 4 --ckpt-every 2"
static void checkpoints(const char *model) {
    char args[1600], one2[900], ck2[900], ck4[900], a[900], out[65536], d[6][64];   /* args: run_logged adds " -o DIR" (700) within 2400 */
    static const char *const tags[6] = {"one.ck", "fs.ck", "fs_r.ck", "ckone", "fs_u", "fs_r"};
    double l1[8], lu[8], lr[8];
    int bitwise;
    for (int i = 0; i < 6; i++) snprintf(d[i], sizeof d[i], "%s_%s", tags[i], model);
    snprintf(args, sizeof args, CKPT_RUN " --ckpt-dir %s/%s", model, bt_test_dir, d[0]);
    if (run_logged(1, args, d[3], l1, 8) != 4) return;
    snprintf(args, sizeof args, CKPT_RUN " --dp fsdp --ckpt-dir %s/%s", model, bt_test_dir, d[1]);
    if (run_logged(2, args, d[4], lu, 8) != 4) return;
    BT_CHECK(loss_diff(lu, l1, 4) < LOSS_TOL, "%s --dp fsdp with checkpoints: losses differ from one process's by %.3g", model, loss_diff(lu, l1, 4));
    ckpt_file(d[0], 2, one2, sizeof one2);
    ckpt_file(d[1], 2, ck2, sizeof ck2);
    ckpt_file(d[1], 4, ck4, sizeof ck4);
    double e = ckpt_diff(ck2, one2, &bitwise);
    BT_CHECK(e < CKPT_TOL, "%s --dp fsdp: the checkpoint of step 2 differs from one process's by %.3g (relative)", model, e);
    fprintf(stderr, "  info: %s --dp fsdp checkpoint vs 1 process's: params, m, v within %.2e relative\n", model, e);
    /* resumed by fsdp ranks (no -e: the checkpoint names the family): the same losses, the last
       checkpoint bit for bit */
    snprintf(args, sizeof args, FS_OPTS " -x 4 --ckpt-every 2 --dp fsdp --resume %s --ckpt-dir %s/%s", ck2, bt_test_dir, d[2]);
    if (run_logged(2, args, d[5], lr, 8) == 2) {
        BT_CHECK(lr[0] == lu[2] && lr[1] == lu[3], "%s --dp fsdp resumed: losses %.7f %.7f, uninterrupted %.7f %.7f", model, lr[0], lr[1], lu[2], lu[3]);
        ckpt_file(d[2], 4, a, sizeof a);
        e = ckpt_diff(a, ck4, &bitwise);
        BT_CHECK(bitwise, "%s --dp fsdp resumed: the checkpoint of step 4 is not bitwise the uninterrupted run's (%.3g)", model, e);
    }
    /* --offload adamw (each rank's shards of m and v in host memory): the same losses and last checkpoint, bit for bit */
    snprintf(args, sizeof args, CKPT_RUN " --dp fsdp --offload adamw --ckpt-dir %s/%s_off", model, bt_test_dir, d[1]);
    snprintf(a, sizeof a, "%s_off", d[4]);
    int n_off = run_logged(2, args, a, lr, 8);
    BT_CHECK(n_off == 4, "%s --dp fsdp --offload adamw: %d steps logged", model, n_off);
    if (n_off == 4) {
        BT_CHECK(!memcmp(lr, lu, 4 * sizeof(double)), "%s --dp fsdp --offload adamw: losses %.9f .. %.9f, without it %.9f .. %.9f", model,
                 lr[0], lr[3], lu[0], lu[3]);
        char off_dir[128];
        snprintf(off_dir, sizeof off_dir, "%s_off", d[1]);
        ckpt_file(off_dir, 4, a, sizeof a);
        e = ckpt_diff(a, ck4, &bitwise);
        BT_CHECK(bitwise, "%s --dp fsdp --offload adamw: the checkpoint of step 4 is not bitwise the run's without it (%.3g)", model, e);
    }
    /* a resume by one process (another data-parallel world: each rank's data position is the
       checkpoint's) is refused, naming it; the file's weights start one process (--init-from) */
    snprintf(args, sizeof args, CKPT_RUN " --resume %s -o %s/fs_1 --ckpt-dir %s/fs_1.ck", model, ck2, bt_test_dir, bt_test_dir);
    int rc = run_ranks(1, args, "fs_1", out, sizeof out);
    BT_CHECK(rc != 0 && strstr(out, "train.world = 2") && !strstr(out, "step "), "%s: one process resuming the fsdp checkpoint: exit %d: %s", model, rc, out);
}
static void test_checkpoints(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    for (int k = 0; k < 2; k++) checkpoints(models[k]);
}

/* ---- 5. --init-from: an fsdp checkpoint and export start one process, and the reverse ------------ */
static void init_from(const char *model) {
    char args[1600], src[900], hf[900], ck[64], tag[64];
    double l1[4], l2[4], l3[4];
    snprintf(ck, sizeof ck, "init_%s.ck", model);
    snprintf(args, sizeof args, FS_RUN " -x 2 --dp fsdp --ckpt-dir %s/%s --export-hf %s/init_%s.hf", model, bt_test_dir, ck, bt_test_dir, model);
    snprintf(tag, sizeof tag, "init_%s", model);
    if (run_logged(2, args, tag, l1, 4) != 2) return;
    ckpt_file(ck, 2, src, sizeof src);
    snprintf(hf, sizeof hf, "%s/init_%s.hf", bt_test_dir, model);
    for (int k = 0; k < (quick() ? 1 : 2); k++) {
        const char *from = k ? hf : src;
        snprintf(args, sizeof args, FS_OPTS " -x 1 --init-from %s", from);
        snprintf(tag, sizeof tag, "%s1_%s", k ? "hf" : "from", model);
        int n1 = run_logged(1, args, tag, l2, 4);
        snprintf(args, sizeof args, FS_OPTS " -x 1 --dp fsdp --init-from %s", from);
        snprintf(tag, sizeof tag, "%s2_%s", k ? "hf" : "from", model);
        int n2 = run_logged(2, args, tag, l3, 4);
        BT_CHECK(n1 == 1 && n2 == 1 && fabs(l3[0] - l2[0]) < LOSS_TOL * fabs(l2[0]), "%s --init-from %s (written by fsdp ranks): fsdp loss %.7f, one process %.7f",
                 model, k ? "the export" : "the checkpoint", n2 == 1 ? l3[0] : NAN, n1 == 1 ? l2[0] : NAN);
    }
}
static void test_init_from(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    for (int k = 0; k < 2; k++) init_from(models[k]);
}

/* ---- 6. samples: -s 1 over 2 steps (one during the run, one at the end) from the weights gathered
   on rank 0: the greedy texts are one process's ------------------------------------------------- */
static void greedy_texts(const char *out, char *text, size_t n) {   /* every greedy sample, concatenated */
    size_t len = 0;
    text[0] = 0;
    for (const char *a = out; (a = strstr(a, "--- sample (greedy) ---\n")); a++) {
        const char *b = strstr(a, "--- sample (top-");
        if (!b) break;
        len += (size_t)snprintf(text + len, len < n ? n - len : 0, "%.*s", (int)(b - a), a);
    }
}
static void samples(const char *model) {
    static char out[65536], t1[8192], t2[8192];
    char args[1000];
    snprintf(args, sizeof args, FS_RUN " -x 2 -s 1 -g 12", model);
    int rc1 = run_ranks(1, args, "sample1", out, sizeof out);
    greedy_texts(out, t1, sizeof t1);
    snprintf(args, sizeof args, FS_RUN " -x 2 -s 1 -g 12 --dp fsdp", model);
    int rc2 = run_ranks(2, args, "sample2", out, sizeof out);
    greedy_texts(out, t2, sizeof t2);
    int samples = 0;
    for (const char *p = out; (p = strstr(p, "--- sample (greedy) ---")); p++) samples++;
    BT_CHECK(rc1 == 0 && rc2 == 0 && samples == 2 && t1[0] && !strcmp(t1, t2), "%s -s 1 --dp fsdp: exit %d/%d, %d greedy samples: '%s' vs one process's '%s'",
             model, rc1, rc2, samples, t2, t1);
}
static void test_samples(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    for (int k = 0; k < 2; k++) samples(models[k]);
}

int main(int argc, char **argv) {
    if (train_runs_child(argc, argv)) return train_runs_child_main(argc, argv);
    train_runs_init("test_fsdp_gpt2");
    BT_RUN(test_flag_errors);
    BT_RUN(test_llama_units);
    BT_RUN(test_runs_match_one_process);
    BT_RUN(test_checkpoints);
    BT_RUN(test_init_from);
    BT_RUN(test_samples);
    train_runs_done();
    return bt_test_summary("test_fsdp_gpt2");
}
