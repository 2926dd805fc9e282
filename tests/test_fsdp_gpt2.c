/* test_fsdp_gpt2.c - train_gpt2 --dp fsdp (bt_parallel.h's engine under gpt2.h's units, trainer.h's
   wiring) on two CPU ranks: this binary re-executed as train_gpt2 with the launcher variables, the
   collectives through the TCP store (tests/train_runs.h). Against one process on the same global
   batch (one process accumulates twice the micro-batches of a rank): the losses of every step
   within 1e-5 relative (fp32), rank 0's memory under 0.6x one process's, the --save model file and the checkpoints (weights, AdamW's m and v:
   the 1-process file) within the tolerances below; a resume with fsdp ranks bit for bit; the
   checkpoint and a Hugging Face export as --init-from of one process and of fsdp ranks; the samples
   (during the run and at the end, from the weights gathered on rank 0) one process's; the flags
   fsdp does not take yet, and a resume by another number of ranks, refused with the reason. */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/train_runs.h"

#define FS_BASE "-b 2 -t 16 -v 0 -g 0 -u 1 --seed 5 --device cpu"
#define FS_OPTS FS_BASE " -d 64"
#define FS_RUN "-e s2 " FS_OPTS
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
        {"--dp fsdp -b 2 -t 16", "ls2", 2, 1, "--dp fsdp: not with a Llama model"},
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
        BT_CHECK(check_flags(good[i].args, "s4", good[i].world, good[i].on_gpu, err, sizeof err) == 0, "'%s' world %d: %s", good[i].args, good[i].world, err);
}

/* ---- 2. two ranks against one process: losses, the model file, memory ------------------------ */
/* the "mem N MiB" of a run's first step line (bytes allocated then), -1 when absent */
static double step1_mib(const char *out) {
    const char *s = strstr(out, "step    1/"), *m = s ? strstr(s, "| mem ") : NULL;
    return m ? atof(m + 6) : -1;
}
/* -d 128: one process accumulates four micro-batches, each rank two (reduce-scattered each time) */
#define ACC_RUN "-e s2 " FS_BASE " -d 128"
static void test_runs_match_one_process(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    int steps = quick() ? 2 : 4;
    char args[2000], out[65536], dir[700], ref[800], path[800];
    double l1[16], l2[16];
    snprintf(dir, sizeof dir, "%s/one", bt_test_dir);
    snprintf(args, sizeof args, ACC_RUN " -x %d -o %s --save %s/one.bin", steps, dir, bt_test_dir);
    int rc = run_ranks(1, args, "one", out, sizeof out), n1 = read_losses(dir, l1, 16);
    BT_CHECK(rc == 0 && n1 == steps, "one process: exit %d, %d losses: %s", rc, n1, out);
    if (rc || n1 != steps) return;
    double mem1 = step1_mib(out);
    snprintf(dir, sizeof dir, "%s/fsdp", bt_test_dir);
    snprintf(args, sizeof args, ACC_RUN " -x %d -o %s --save %s/fsdp.bin --dp fsdp", steps, dir, bt_test_dir);
    rc = run_ranks(2, args, "fsdp", out, sizeof out);
    int n2 = read_losses(dir, l2, 16);
    BT_CHECK(rc == 0 && n2 == steps && strstr(out, "fsdp: weights, gradients and AdamW state in 2 shards of 4 units"), "--dp fsdp: exit %d, %d losses: %s",
             rc, n2, out);
    if (rc || n2 != steps) return;
    /* memory: one process holds 16 bytes a parameter (fp32 weights, gradients, m, v), an fsdp rank
       16 / 2 plus what a pass gathers (s2: the 3.3M parameters are 13 MiB in fp32) */
    double mem2 = step1_mib(out);
    BT_CHECK(mem1 > 0 && mem2 > 0 && mem2 < 0.6 * mem1, "--dp fsdp: rank 0 holds %.0f MiB at step 1, one process %.0f MiB (want < 0.6x)", mem2, mem1);
    double worst = loss_diff(l2, l1, steps);
    BT_CHECK(worst < LOSS_TOL, "--dp fsdp: worst loss relative difference %.3g (step 1: %.7f vs %.7f)", worst, l2[0], l1[0]);
    int64_t nw1 = 0, nw2 = 0;
    snprintf(ref, sizeof ref, "%s/one.bin", bt_test_dir);
    snprintf(path, sizeof path, "%s/fsdp.bin", bt_test_dir);
    float *w1 = read_model(ref, &nw1), *w2 = read_model(path, &nw2);
    double e = w1 && w2 && nw1 == nw2 && nw1 > 0 ? rel_diff(w2, w1, nw1) : INFINITY;
    BT_CHECK(e < LOSS_TOL, "--dp fsdp: the saved model differs from one process's by %.3g (relative)", e);
    fprintf(stderr, "  info: --dp fsdp on 2 CPU ranks (2 micro-batches each) vs 1 process (4), %d steps: worst loss relative difference %.2e, "
            "saved weights %.2e; memory at step 1 %.0f vs %.0f MiB\n", steps, worst, e, mem2, mem1);
    free(w1); free(w2);
}

/* ---- 3. checkpoints: the 1-process file, resumed bit for bit, refused by another world --------- */
#define CKPT_RUN FS_RUN " -x 4 --ckpt-every 2"
static void test_checkpoints(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    char args[2000], one2[900], ck2[900], ck4[900], a[900], out[65536];
    double l1[8], lu[8], lr[8];
    int bitwise;
    snprintf(args, sizeof args, CKPT_RUN " --ckpt-dir %s/one.ck", bt_test_dir);
    if (run_logged(1, args, "ckone", l1, 8) != 4) return;
    snprintf(args, sizeof args, CKPT_RUN " --dp fsdp --ckpt-dir %s/fs.ck", bt_test_dir);
    if (run_logged(2, args, "fs_u", lu, 8) != 4) return;
    BT_CHECK(loss_diff(lu, l1, 4) < LOSS_TOL, "--dp fsdp with checkpoints: losses differ from one process's by %.3g", loss_diff(lu, l1, 4));
    ckpt_file("one.ck", 2, one2, sizeof one2);
    ckpt_file("fs.ck", 2, ck2, sizeof ck2);
    ckpt_file("fs.ck", 4, ck4, sizeof ck4);
    double e = ckpt_diff(ck2, one2, &bitwise);
    BT_CHECK(e < CKPT_TOL, "--dp fsdp: the checkpoint of step 2 differs from one process's by %.3g (relative)", e);
    fprintf(stderr, "  info: --dp fsdp checkpoint vs 1 process's: params, m, v within %.2e relative\n", e);
    /* resumed by fsdp ranks: the same losses, the last checkpoint bit for bit */
    snprintf(args, sizeof args, CKPT_RUN " --dp fsdp --resume %s --ckpt-dir %s/fs_r.ck", ck2, bt_test_dir);
    if (run_logged(2, args, "fs_r", lr, 8) == 2) {
        BT_CHECK(lr[0] == lu[2] && lr[1] == lu[3], "--dp fsdp resumed: losses %.7f %.7f, uninterrupted %.7f %.7f", lr[0], lr[1], lu[2], lu[3]);
        ckpt_file("fs_r.ck", 4, a, sizeof a);
        e = ckpt_diff(a, ck4, &bitwise);
        BT_CHECK(bitwise, "--dp fsdp resumed: the checkpoint of step 4 is not bitwise the uninterrupted run's (%.3g)", e);
    }
    /* a resume by one process (another data-parallel world: each rank's data position is the
       checkpoint's) is refused, naming it; the file's weights start one process (--init-from) */
    snprintf(args, sizeof args, CKPT_RUN " --resume %s -o %s/fs_1 --ckpt-dir %s/fs_1.ck", ck2, bt_test_dir, bt_test_dir);
    int rc = run_ranks(1, args, "fs_1", out, sizeof out);
    BT_CHECK(rc != 0 && strstr(out, "train.world = 2") && !strstr(out, "step "), "one process resuming the fsdp checkpoint: exit %d: %s", rc, out);
}

/* ---- 4. --init-from: an fsdp checkpoint and export start one process, and the reverse ------------ */
static void test_init_from(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    char args[2000], src[900], hf[900];
    double l1[4], l2[4], l3[4];
    snprintf(args, sizeof args, FS_RUN " -x 2 --dp fsdp --ckpt-dir %s/init.ck --export-hf %s/init.hf", bt_test_dir, bt_test_dir);
    if (run_logged(2, args, "init", l1, 4) != 2) return;
    ckpt_file("init.ck", 2, src, sizeof src);
    snprintf(hf, sizeof hf, "%s/init.hf", bt_test_dir);
    for (int k = 0; k < (quick() ? 1 : 2); k++) {
        const char *from = k ? hf : src;
        snprintf(args, sizeof args, FS_OPTS " -x 1 --init-from %s", from);
        int n1 = run_logged(1, args, k ? "hf1" : "from1", l2, 4);
        snprintf(args, sizeof args, FS_OPTS " -x 1 --dp fsdp --init-from %s", from);
        int n2 = run_logged(2, args, k ? "hf2" : "from2", l3, 4);
        BT_CHECK(n1 == 1 && n2 == 1 && fabs(l3[0] - l2[0]) < LOSS_TOL * fabs(l2[0]), "--init-from %s (written by fsdp ranks): fsdp loss %.7f, one process %.7f",
                 k ? "the export" : "the checkpoint", n2 == 1 ? l3[0] : NAN, n1 == 1 ? l2[0] : NAN);
    }
}

/* ---- 5. samples: -s 1 over 2 steps (one during the run, one at the end) from the weights gathered
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
static void test_samples(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    static char out[65536], t1[8192], t2[8192];
    int rc1 = run_ranks(1, FS_RUN " -x 2 -s 1 -g 12", "sample1", out, sizeof out);
    greedy_texts(out, t1, sizeof t1);
    int rc2 = run_ranks(2, FS_RUN " -x 2 -s 1 -g 12 --dp fsdp", "sample2", out, sizeof out);
    greedy_texts(out, t2, sizeof t2);
    int samples = 0;
    for (const char *p = out; (p = strstr(p, "--- sample (greedy) ---")); p++) samples++;
    BT_CHECK(rc1 == 0 && rc2 == 0 && samples == 2 && t1[0] && !strcmp(t1, t2), "-s 1 --dp fsdp: exit %d/%d, %d greedy samples: '%s' vs one process's '%s'",
             rc1, rc2, samples, t2, t1);
}

int main(int argc, char **argv) {
    if (train_runs_child(argc, argv)) return train_runs_child_main(argc, argv);
    train_runs_init("test_fsdp_gpt2");
    BT_RUN(test_flag_errors);
    BT_RUN(test_runs_match_one_process);
    BT_RUN(test_checkpoints);
    BT_RUN(test_init_from);
    BT_RUN(test_samples);
    train_runs_done();
    return bt_test_summary("test_fsdp_gpt2");
}
