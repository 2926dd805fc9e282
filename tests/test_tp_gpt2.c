/* test_tp_gpt2.c - tensor and context parallelism (gpt2_parallel.h, train_gpt2 --tp/--cp) on the CPU: the
   shard table (which part of each tensor a rank holds, and that the shards tile the model), the
   file offsets of the shards (tp ranks initialised from a seed are exactly the 1-process weights,
   and a model file sliced into shards and gathered back is the same file), the flag checks (ZeRO
   with tp/cp: GPUs only), ZeRO's ranges of a tp rank's buffer (they tile it, and the gradient
   norm's split into whole and split tensors adds up), and
   whole runs: two CPU ranks (this binary re-executed as train_gpt2, started by the launcher
   variables RANK, WORLD_SIZE, ...; collectives through the TCP store) with --tp 2, --tp 2 --sp,
   --tp 2 --async-tp and --cp 2 with each --cp-comm, whose losses match one process on the same
   batch and whose --save file matches the 1-process one; and checkpoints across layouts: a --tp 2
   or --cp 2 checkpoint is the 1-process file, resumes bit for bit in its layout and on the
   1-process losses by one process (and the reverse), --offload adamw in the layout gives its
   losses and checkpoint bit for bit, --init-from and -s work with --tp 2. */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/train_runs.h"


static gpt2_config small_config(const char *preset) {
    gpt2_config c;
    if (gpt2_config_from_preset(preset, BT_GPT2_VOCAB, &c)) bt_error("no preset %s", preset);
    return c;
}

/* ---- 1. the shard table -------------------------------------------------------------------- */
/* the shards of all ranks tile every tensor: shard sizes x tp for the split tensors plus the
   whole ones = the parameter count; each split tensor's kind is the one Megatron's layout asks */
static void test_shard_table(void) {
    gpt2_config c = small_config("s4");   /* L 4, H 4, C 128 */
    int n = 4 + 12 * c.L;
    for (int tp = 1; tp <= 4; tp *= 2) {
        int64_t total = 0;
        for (int i = 0; i < n; i++) {
            bt_tp_shard s = gpt2_shard_of(&c, i);
            bt_shape sh = bt_tp_shard_shape(s, tp);
            int64_t numel = sh.ndim == 1 ? sh.d[0] : sh.d[0] * sh.d[1];
            total += s.kind == BT_TP_WHOLE ? numel : numel * tp;
        }
        BT_CHECK(total == gpt2_num_params(&c), "tp %d: shards cover %lld of %lld parameters", tp, (long long)total, (long long)gpt2_num_params(&c));
    }
    static const int kinds[12] = {BT_TP_WHOLE, BT_TP_WHOLE, BT_TP_PACKED, BT_TP_PACKED, BT_TP_COLS, BT_TP_WHOLE,
                                  BT_TP_WHOLE, BT_TP_WHOLE, BT_TP_ROWS, BT_TP_ROWS, BT_TP_COLS, BT_TP_WHOLE};
    for (int k = 0; k < 12; k++) BT_CHECK(gpt2_shard_of(&c, 2 + 12 * 2 + k).kind == kinds[k], "layer leaf %d: kind %d", k, gpt2_shard_of(&c, 2 + 24 + k).kind);
    BT_CHECK(gpt2_shard_of(&c, 0).kind == BT_TP_ROWS && gpt2_shard_of(&c, 1).kind == BT_TP_WHOLE, "wte rows, wpe whole");
    bt_shape q = bt_tp_shard_shape(gpt2_shard_of(&c, 2 + 2), 2), p = bt_tp_shard_shape(gpt2_shard_of(&c, 2 + 10), 2);
    BT_CHECK(q.ndim == 2 && q.d[0] == 3 * c.C / 2 && q.d[1] == c.C, "qkvw shard [%lld, %lld]", (long long)q.d[0], (long long)q.d[1]);
    BT_CHECK(p.ndim == 2 && p.d[0] == c.C && p.d[1] == 2 * c.C, "fcprojw shard [%lld, %lld]", (long long)p.d[0], (long long)p.d[1]);
    /* the leaves' file bases are gpt2_build_padded's */
    gpt2 m;
    gpt2_build(&m, c, bt_cpu());
    int same = 1;
    for (int i = 0; i < n; i++) same &= m.file_off[i] == gpt2_leaf_file_base(&c, i);
    BT_CHECK(same, "gpt2_leaf_file_base differs from gpt2_build's file offsets");
    gpt2_free(&m);
}

/* ---- 2. file offsets: the shards are the 1-process weights ----------------------------------- */
static float *file_of(gpt2 *m, int rank, float *file) {   /* m's (shard's) weights into file (whole model) */
    float *mem = (float *)malloc(sizeof(float) * (size_t)m->flat_numel);
    bt_to_host(m->flat, mem, BT_F32);
    if (m->tp > 1) gpt2_par_to_file_order(m, rank, mem, file);
    else gpt2_to_file_order(m, mem, file);
    free(mem);
    return file;
}
static void check_init_matches(const char *preset, int tp, uint64_t seed) {
    gpt2_config c = small_config(preset);
    int64_t N = gpt2_num_params(&c);
    float *one = (float *)calloc((size_t)N, sizeof(float)), *sharded = (float *)calloc((size_t)N, sizeof(float));
    float *mark = (float *)malloc(sizeof(float) * (size_t)N);
    for (int64_t i = 0; i < N; i++) sharded[i] = mark[i] = NAN;   /* every element must be written by some rank */
    gpt2 m;
    gpt2_build(&m, c, bt_cpu());
    gpt2_init(&m, seed);
    file_of(&m, 0, one);
    gpt2_free(&m);
    for (int r = 0; r < tp; r++) {
        gpt2 s;
        gpt2_build_tp(&s, c, bt_cpu(), tp, r, 1, BT_F32);
        BT_CHECK(s.num_params == N, "%s tp %d: num_params %lld", preset, tp, (long long)s.num_params);
        gpt2_init(&s, seed);   /* a shard's own init (gpt2_parallel.h) */
        file_of(&s, r, sharded);
        /* the load path: the whole file sliced into this rank's shard gives the same shard */
        float *mem = (float *)malloc(sizeof(float) * (size_t)s.flat_numel), *back = (float *)malloc(sizeof(float) * (size_t)s.flat_numel);
        bt_to_host(s.flat, mem, BT_F32);
        gpt2_from_file_order(&s, one, back);
        BT_CHECK(!memcmp(mem, back, sizeof(float) * (size_t)s.flat_numel), "%s tp %d rank %d: the file sliced differs from the shard", preset, tp, r);
        free(mem); free(back);
        gpt2_free(&s);
    }
    int64_t bad = -1;
    for (int64_t i = 0; i < N && bad < 0; i++) if (memcmp(&one[i], &sharded[i], sizeof(float))) bad = i;
    BT_CHECK(bad < 0, "%s tp %d: element %lld of the file: 1 process %g, shards %g", preset, tp, (long long)bad, bad >= 0 ? one[bad] : 0.0,
             bad >= 0 ? sharded[bad] : 0.0);
    free(one); free(sharded); free(mark);
}
static void test_shard_init_is_one_process(void) {
    check_init_matches("s2", 2, 1337);
    check_init_matches("s4", 2, 7);
    check_init_matches("s4", 4, 99);
}

/* ---- 3. the flags ------------------------------------------------------------------------- */
static int check_flags(const char *args, int world, int on_gpu, char *err, size_t n) {
    train_opts o;
    err[0] = 0;
    if (train_parse(args, &o, err, n)) return -2;
    trainer_config c = trainer_config_gpt2(small_config("s4"));
    if (resolve_opts(&o, on_gpu, &c, err, n)) return -3;
    return trainer_par_check(&o, &c, world, on_gpu, err, n);
}
static void test_flag_errors(void) {
    static const struct { const char *args; int world, on_gpu; const char *want; } bad[] = {
        {"--tp 2 -b 2 -t 16", 1, 1, "does not divide the 1 process"},
        {"--tp 2 --cp 2 -b 2 -t 16", 6, 1, "--tp 2 x --cp 2 = 4 does not divide the 6 processes"},
        {"--tp 8 -b 2 -t 16", 8, 1, "--tp 8 does not divide the model's 4 heads"},
        {"--tp 3 -b 2 -t 16", 3, 1, "--tp 3 does not divide the model's 4 heads"},
        {"--cp 2 -b 2 -t 18 -d 36", 2, 1, "-t 18 is not a multiple of 2 x --cp = 4"},
        {"--tp 4 --sp -b 2 -t 24 -d 48 --cp 4", 16, 1, "--sp: the 6 tokens per rank (-t 24 / --cp 4) are not a multiple of --tp 4"},
        {"--sp -b 2 -t 16", 2, 1, "--sp (sequence parallelism) needs --tp 2"},
        {"--async-tp -b 2 -t 16", 1, 1, "--async-tp needs --tp 2"},
        {"--cp-comm allgather -b 2 -t 16", 1, 1, "--cp-comm allgather needs --cp 2"},
        {"--tp 2 --cp 4 --cp-comm alltoall -b 2 -t 16", 8, 1, "--cp-comm alltoall: the 2 heads per tp rank are not a multiple of --cp 4"},
        {"--tp 2 --dp zero1 -b 2 -t 16", 2, 0, "--dp zero1 with --tp on CPUs: ZeRO shards the state over data-parallel ranks"},
        {"--cp 2 --dp zero2 -b 2 -t 16", 2, 0, "--dp zero2 with --cp on CPUs"},
        {"--cp 2 -t 16", 2, 1, "--cp needs -b"},
        {"--tp 2 -b 2 -t 16", 4, 0, "--tp on CPUs: collectives go through the TCP store"},
        {"--tp 2 --cp 2 -b 2 -t 16", 4, 0, "--tp with --cp on CPUs"},
    };
    char err[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = check_flags(bad[i].args, bad[i].world, bad[i].on_gpu, err, sizeof err);
        BT_CHECK(r == -1 && strstr(err, bad[i].want), "'%s' world %d: %d '%s' (want '%s')", bad[i].args, bad[i].world, r, err, bad[i].want);
    }
    BT_CHECK(check_flags("--cp-comm ulysses", 1, 1, err, sizeof err) == -2 && strstr(err, "--cp-comm must be ring, allgather or alltoall"), "%s", err);
    BT_CHECK(check_flags("--tp 0", 1, 1, err, sizeof err) == -2 && strstr(err, "--tp"), "%s", err);
    static const struct { const char *args; int world, on_gpu; } good[] = {
        {"--tp 2 --sp --async-tp -b 2 -t 16", 2, 1}, {"--tp 2 --cp 2 --cp-comm alltoall -b 2 -t 16", 8, 1},
        {"--cp 2 --cp-comm ring -b 2 -t 16", 2, 0}, {"--tp 4 -b 2 -t 16", 4, 0}, {"-b 2 -t 16", 1, 0},
        {"--tp 2 -b 2 -t 16 -s 5", 2, 1}, {"--tp 2 -b 2 -t 16 --ckpt-dir /tmp/x --ckpt-every 5 --resume auto", 2, 0},
        {"--cp 2 -b 2 -t 16 --init-from x.safetensors", 2, 0},
        {"--tp 2 --dp zero1 -b 2 -t 16", 2, 1}, {"--cp 2 --dp zero2 -b 2 -t 16", 2, 1}, {"--tp 2 --cp 2 --dp zero2 --sp -b 2 -t 16", 8, 1},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        BT_CHECK(check_flags(good[i].args, good[i].world, good[i].on_gpu, err, sizeof err) == 0, "'%s' world %d: %s", good[i].args, good[i].world, err);
}

/* ---- ZeRO over the ranks of one tp index: the ranges and the gradient norm's split ---------- */
/* A rank's buffer (tp = 1: the whole model; else its tp part, whole tensors first) padded for a
   ZeRO group of g ranks: the group's ranges (bt_zero_init for each rank of a stand-in communicator
   whose collectives are local copies) tile its parameters (AdamW's index space), and the parts of
   the ranges' squared gradients below and above the whole span (bt_zero_sumsq), added over the
   group, are the whole tensors' and the split tensors' sums of squares. */
static void check_zero_ranges(const gpt2_config *c, int tp, int g) {
    int64_t whole, n = gpt2_local_numel(c, tp, &whole), S = bt_shard_numel(n, g, 64);
    gpt2 m;
    if (tp > 1) gpt2_build_tp(&m, *c, bt_cpu(), tp, tp - 1, S * g, BT_F32);
    else { gpt2_build_padded(&m, *c, bt_cpu(), S * g, BT_F32); whole = n; }
    bt_adamw opt;
    bt_adamw_init(&opt, m.params, m.n_params, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    BT_CHECK(m.flat_numel == S * g && m.flat_numel >= n && opt.numel == n && (tp == 1 || gpt2_par_whole_numel(&m) == whole),
             "tp %d group %d: flat %lld, shard %lld, parameters %lld (optimizer %lld), whole %lld", tp, g, (long long)m.flat_numel,
             (long long)S, (long long)n, (long long)opt.numel, (long long)whole);
    bt_scope_begin();
    bt_copy_(m.flat_grad, bt_randn(bt_shape1(m.flat_numel), BT_F32, bt_cpu(), 11 + tp * 7 + g));   /* the padding too: never read */
    bt_tensor *sum = bt_zeros(bt_shape1(2), BT_F32, bt_cpu());
    int64_t at = 0, wsum = 0;
    int tiles = 1;
    for (int r = 0; r < g; r++) {
        bt_comm comm;
        memset(&comm, 0, sizeof comm);
        comm.rank = r; comm.size = g; snprintf(comm.name, sizeof comm.name, "stand-in");
        bt_zero z;
        bt_zero_init(&z, 1, &comm, opt.numel, S, bt_cpu());
        tiles &= z.lo == at && z.hi >= z.lo && z.hi - z.lo <= S;
        at = z.hi;
        wsum += bt_zero_below(&z, whole);
        bt_add_(sum, bt_zero_sumsq(&z, m.flat_grad, whole), 1.0);
        bt_zero_free(&z);
    }
    BT_CHECK(tiles && at == n && wsum == whole, "tp %d group %d: the ranges end at %lld of %lld, whole parts %lld of %lld", tp, g,
             (long long)at, (long long)n, (long long)wsum, (long long)whole);
    double want[2] = {bt_item(bt_sumsq(bt_narrow(m.flat_grad, 0, 0, whole))), n > whole ? bt_item(bt_sumsq(bt_narrow(m.flat_grad, 0, whole, n - whole))) : 0};
    float got[2];
    bt_to_host(sum, got, BT_F32);
    for (int k = 0; k < 2; k++)
        BT_CHECK(fabs(got[k] - want[k]) <= 1e-5 * want[k], "tp %d group %d: %s part %.7g, the span's %.7g", tp, g, k ? "split" : "whole", got[k], want[k]);
    bt_scope_end();
    bt_adamw_free(&opt);
    gpt2_free(&m);
}
static void test_zero_ranges(void) {
    gpt2_config c = small_config("s4");
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int g = 1; g <= 5; g++) check_zero_ranges(&c, tp, g);
    /* the split of a range at W: before, across, after it; a range past the parameters is empty */
    bt_zero z;
    memset(&z, 0, sizeof z);
    int ok = 1;
    static const int64_t cases[4][3] = {{0, 10, 10}, {20, 30, 5}, {30, 40, 0}, {40, 40, 0}};   /* lo, hi, the part below 25 */
    for (int i = 0; i < 4; i++) { z.lo = cases[i][0]; z.hi = cases[i][1]; ok &= bt_zero_below(&z, 25) == cases[i][2]; }
    BT_CHECK(ok, "bt_zero_below");
    bt_comm comm;
    memset(&comm, 0, sizeof comm);
    comm.rank = 3; comm.size = 4;
    bt_zero_init(&z, 1, &comm, 150, 64, bt_cpu());
    BT_CHECK(z.lo == 150 && z.hi == 150, "a range past the parameters: [%lld, %lld)", (long long)z.lo, (long long)z.hi);
    BT_EXPECT_ERROR(bt_zero_init(&z, 1, &comm, 300, 64, bt_cpu()), "do not cover 300 parameters");
}

/* ---- 4. whole runs on two CPU ranks ------------------------------------------------------- */
#define TP_OPTS "-b 2 -t 16 -d 64 -v 0 -g 0 -u 1 --seed 5"
#define TP_RUN "-e s2 " TP_OPTS
static void test_runs_match_one_process(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    int steps = quick() ? 2 : 3;
    char args[2000], out[65536], dir[700];
    double l1[16], l2[16];
    snprintf(dir, sizeof dir, "%s/one", bt_test_dir);
    snprintf(args, sizeof args, TP_RUN " -x %d -o %s --save %s/one.bin", steps, dir, bt_test_dir);
    int rc = run_ranks(1, args, "one", out, sizeof out);
    int n1 = read_losses(dir, l1, 16);
    BT_CHECK(rc == 0 && n1 == steps, "one process: exit %d, %d losses: %s", rc, n1, out);
    if (rc || n1 != steps) return;
    char ref[800];
    snprintf(ref, sizeof ref, "%s/one.bin", bt_test_dir);
    int64_t nw1 = 0;
    float *w1 = read_model(ref, &nw1);
    static const char *const modes[] = {"--tp 2", "--tp 2 --sp", "--tp 2 --async-tp", "--cp 2", "--cp 2 --cp-comm allgather", "--cp 2 --cp-comm alltoall"};
    int nmodes = quick() ? 2 : 6;
    for (int k = 0; k < nmodes; k++) {
        char tag[16];
        snprintf(tag, sizeof tag, "m%d", k);
        snprintf(dir, sizeof dir, "%s/%s", bt_test_dir, tag);
        snprintf(args, sizeof args, TP_RUN " -x %d -o %s --save %s/%s.bin %s", steps, dir, bt_test_dir, tag, modes[k]);
        rc = run_ranks(2, args, tag, out, sizeof out);
        int n2 = read_losses(dir, l2, 16);
        BT_CHECK(rc == 0 && n2 == steps && strstr(out, "model parallel: dp 1"), "%s: exit %d, %d losses: %s", modes[k], rc, n2, out);
        if (rc || n2 != steps) continue;
        double worst = 0;
        for (int i = 0; i < steps; i++) worst = fmax(worst, fabs(l2[i] - l1[i]) / fabs(l1[i]));
        BT_CHECK(worst < 1e-5, "%s: worst loss relative difference %.3g (step 1: %.6f vs %.6f)", modes[k], worst, l2[0], l1[0]);
        char path[800];
        snprintf(path, sizeof path, "%s/%s.bin", bt_test_dir, tag);
        int64_t nw2 = 0;
        float *w2 = read_model(path, &nw2);
        double e = w1 && w2 && nw1 == nw2 && nw1 > 0 ? rel_diff(w2, w1, nw1) : INFINITY;
        BT_CHECK(e < 1e-5, "%s: the saved model differs from one process's by %.3g (relative)", modes[k], e);
        fprintf(stderr, "  info: %s on 2 CPU ranks vs 1: worst loss relative difference %.2e, saved weights %.2e\n", modes[k], worst, e);
        free(w2);
    }
    /* a 1-process model file loads into the shards: the first loss of -e FILE is the same */
    snprintf(args, sizeof args, TP_RUN " -x 1 -e %s --tp 2 -o %s/load", ref, bt_test_dir);
    rc = run_ranks(2, args, "load2", out, sizeof out);
    snprintf(dir, sizeof dir, "%s/load", bt_test_dir);
    int n2 = read_losses(dir, l2, 16);
    snprintf(args, sizeof args, TP_RUN " -x 1 -e %s -o %s/load1", ref, bt_test_dir);
    int rc1 = run_ranks(1, args, "load1", out, sizeof out);
    snprintf(dir, sizeof dir, "%s/load1", bt_test_dir);
    int n1b = read_losses(dir, l1, 16);
    BT_CHECK(rc == 0 && rc1 == 0 && n2 == 1 && n1b == 1 && fabs(l2[0] - l1[0]) < 1e-5 * fabs(l1[0]), "-e FILE --tp 2: exit %d/%d, loss %.6f vs %.6f",
             rc, rc1, n2 == 1 ? l2[0] : NAN, n1b == 1 ? l1[0] : NAN);
    free(w1);
}
/* ---- 5. checkpoints, --init-from and samples with tp and cp ------------------------------------- */
/* Tolerances. The same layout resumed (tp 2 -> tp 2, cp 2 -> cp 2) runs the same math as the
   uninterrupted run: its last checkpoint (weights, m, v) must be bitwise the uninterrupted one's.
   Across layouts the sums run in another order (row-parallel partial sums, the vocabulary-
   parallel loss, cp's attention merge): losses within LOSS_TOL = 1e-5 relative, as the runs above;
   checkpoints within CKPT_TOL = 1e-4 relative norm per tensor (measured, the worst of params, m
   and v: 8e-6 for --tp 2, 4e-6 for --cp 2; printed as info lines: a tenth of the bound, since v
   holds squared gradients and so twice their relative rounding, and a longer run drifts more). */
#define LOSS_TOL 1e-5
#define CKPT_TOL 1e-4
#define CKPT_RUN TP_RUN " -x 4 --ckpt-every 2"
static void check_layout_checkpoints(const char *layout, const char *tag, const double *l1, const char *one_ck) {
    char args[2000], t[64], ck2[900], ck4[900], one2[900], a[900], b[900];
    double lu[8], lr[8];
    int bitwise;
    snprintf(args, sizeof args, CKPT_RUN " %s --ckpt-dir %s/%s.ck", layout, bt_test_dir, tag);
    snprintf(t, sizeof t, "%s_u", tag);
    if (run_logged(2, args, t, lu, 8) != 4) return;
    snprintf(t, sizeof t, "%s.ck", tag);
    ckpt_file(t, 2, ck2, sizeof ck2); ckpt_file(t, 4, ck4, sizeof ck4);
    /* its checkpoint is the 1-process run's file */
    ckpt_file(one_ck, 2, one2, sizeof one2);
    double e = ckpt_diff(ck2, one2, &bitwise);
    BT_CHECK(e < CKPT_TOL, "%s: the checkpoint of step 2 differs from one process's by %.3g (relative)", layout, e);
    fprintf(stderr, "  info: %s checkpoint vs 1 process's: params, m, v within %.2e relative\n", layout, e);
    /* resumed in the same layout: the same losses, the same last checkpoint bit for bit */
    snprintf(args, sizeof args, CKPT_RUN " %s --resume %s --ckpt-dir %s/%s_r.ck", layout, ck2, bt_test_dir, tag);
    snprintf(t, sizeof t, "%s_r", tag);
    if (run_logged(2, args, t, lr, 8) == 2) {
        BT_CHECK(lr[0] == lu[2] && lr[1] == lu[3], "%s resumed: losses %.6f %.6f, uninterrupted %.6f %.6f", layout, lr[0], lr[1], lu[2], lu[3]);
        snprintf(t, sizeof t, "%s_r.ck", tag);
        ckpt_file(t, 4, a, sizeof a);
        e = ckpt_diff(a, ck4, &bitwise);
        BT_CHECK(bitwise, "%s resumed in %s: the checkpoint of step 4 is not bitwise the uninterrupted run's (%.3g)", layout, layout, e);
    }
    /* --offload adamw in this layout (each rank's m and v in host memory): the same losses and last checkpoint, bit for bit */
    snprintf(args, sizeof args, CKPT_RUN " %s --offload adamw --ckpt-dir %s/%s_off.ck", layout, bt_test_dir, tag);
    snprintf(t, sizeof t, "%s_off", tag);
    int n_off = run_logged(2, args, t, lr, 8);
    BT_CHECK(n_off == 4, "%s --offload adamw: %d steps logged", layout, n_off);
    if (n_off == 4) {
        BT_CHECK(!memcmp(lr, lu, 4 * sizeof(double)), "%s --offload adamw: losses %.9f .. %.9f, without it %.9f .. %.9f", layout, lr[0], lr[3],
                 lu[0], lu[3]);
        snprintf(t, sizeof t, "%s_off.ck", tag);
        ckpt_file(t, 4, a, sizeof a);
        e = ckpt_diff(a, ck4, &bitwise);
        BT_CHECK(bitwise, "%s --offload adamw: the checkpoint of step 4 is not bitwise the run's without it (%.3g)", layout, e);
    }
    /* resumed by one process: the 1-process run's losses and weights */
    snprintf(args, sizeof args, CKPT_RUN " --resume %s --ckpt-dir %s/%s_1.ck", ck2, bt_test_dir, tag);
    snprintf(t, sizeof t, "%s_1", tag);
    if (run_logged(1, args, t, lr, 8) == 2) {
        double d = loss_diff(lr, l1 + 2, 2);
        BT_CHECK(d < LOSS_TOL, "%s checkpoint resumed by 1 process: losses %.6f %.6f, 1-process run %.6f %.6f", layout, lr[0], lr[1], l1[2], l1[3]);
        snprintf(t, sizeof t, "%s_1.ck", tag);
        ckpt_file(t, 4, a, sizeof a);
        ckpt_file(one_ck, 4, b, sizeof b);
        e = ckpt_diff(a, b, &bitwise);
        BT_CHECK(e < CKPT_TOL, "%s checkpoint resumed by 1 process: step 4 differs from the 1-process run's by %.3g", layout, e);
        fprintf(stderr, "  info: %s -> 1 process: losses within %.2e, checkpoint of step 4 within %.2e\n", layout, d, e);
    }
    /* the 1-process checkpoint resumed in this layout: this layout's losses */
    if (quick()) return;
    snprintf(args, sizeof args, CKPT_RUN " %s --resume %s --ckpt-dir %s/%s_x.ck", layout, one2, bt_test_dir, tag);
    snprintf(t, sizeof t, "%s_x", tag);
    if (run_logged(2, args, t, lr, 8) == 2) {
        double d = loss_diff(lr, lu + 2, 2);
        BT_CHECK(d < LOSS_TOL, "1-process checkpoint resumed with %s: losses %.6f %.6f, uninterrupted %.6f %.6f", layout, lr[0], lr[1], lu[2], lu[3]);
    }
}
static void test_checkpoints_across_layouts(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    char args[2000];
    double l1[8];
    snprintf(args, sizeof args, CKPT_RUN " --ckpt-dir %s/one.ck", bt_test_dir);
    if (run_logged(1, args, "ckone", l1, 8) != 4) return;
    check_layout_checkpoints("--tp 2", "tp", l1, "one.ck");
    if (!quick()) check_layout_checkpoints("--cp 2", "cp", l1, "one.ck");
}

/* --init-from with --tp 2 (a checkpoint's weights, and a Hugging Face export): the first loss is
   one process's from the same file; -s with --tp 2: the samples during the run come from the
   gathered model, the greedy one the same text as one process's */
static void greedy_text(const char *out, char *text, size_t n) {
    const char *a = strstr(out, "--- sample (greedy) ---\n"), *b = a ? strstr(a, "--- sample (top-") : NULL;
    text[0] = 0;
    if (a && b) snprintf(text, n, "%.*s", (int)(b - a), a);
}
static void test_init_from_and_samples(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    char args[2000], src[900], out[65536], t1[4096], t2[4096];
    double l1[4], l2[4];
    snprintf(args, sizeof args, TP_RUN " -x 2 --ckpt-dir %s/init.ck --export-hf %s/init.hf", bt_test_dir, bt_test_dir);
    if (run_logged(1, args, "init", l1, 4) != 2) return;
    ckpt_file("init.ck", 2, src, sizeof src);
    for (int k = 0; k < (quick() ? 1 : 2); k++) {
        const char *from = k == 0 ? src : "hf";
        if (k == 1) snprintf(src, sizeof src, "%s/init.hf", bt_test_dir);
        snprintf(args, sizeof args, TP_OPTS " -x 1 --init-from %s", src);
        int n1 = run_logged(1, args, k ? "hf1" : "from1", l1, 4);
        snprintf(args, sizeof args, TP_OPTS " -x 1 --tp 2 --init-from %s", src);
        int n2 = run_logged(2, args, k ? "hf2" : "from2", l2, 4);
        BT_CHECK(n1 == 1 && n2 == 1 && fabs(l2[0] - l1[0]) < LOSS_TOL * fabs(l1[0]), "--init-from %s --tp 2: loss %.6f, one process %.6f",
                 from, n2 == 1 ? l2[0] : NAN, n1 == 1 ? l1[0] : NAN);
    }
    /* -s 1 over 3 steps: two samples during the run and one at the end (the gathered model made,
       then refreshed twice) */
    snprintf(args, sizeof args, TP_RUN " -x 3 -d 32 -s 1 -g 12");
    int rc1 = run_ranks(1, args, "sample1", out, sizeof out);
    greedy_text(out, t1, sizeof t1);
    snprintf(args, sizeof args, TP_RUN " -x 3 -d 32 -s 1 -g 12 --tp 2");
    int rc2 = run_ranks(2, args, "sample2", out, sizeof out);
    greedy_text(out, t2, sizeof t2);
    int samples = 0;
    for (const char *p = out; (p = strstr(p, "--- sample (greedy) ---")); p++) samples++;
    BT_CHECK(rc1 == 0 && rc2 == 0 && samples == 3 && t1[0] && !strcmp(t1, t2), "-s 1 --tp 2: exit %d/%d, %d greedy samples; first: '%s' vs one process's '%s'",
             rc1, rc2, samples, t2, t1);
}
/* a CPU run with --tp but one process fails before training, naming the flag: a usage error (exit 2) */
static void test_run_errors(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_train.bin (make data)"); return; }
    char out[65536];
    int rc = run_ranks(1, TP_RUN " -x 1 --tp 2", "err1", out, sizeof out);
    BT_CHECK(rc == 2 && strstr(out, "--tp 2 x --cp 1 = 2 does not divide the 1 process") && !strstr(out, "step "), "exit %d: %s", rc, out);
    /* ZeRO on the CPU ranks' store path: refused on every rank before training, naming the flags */
    rc = run_ranks(2, TP_RUN " -x 1 --cp 2 --dp zero1", "err2", out, sizeof out);
    BT_CHECK((rc == 2 || rc == 1) && strstr(out, "--dp zero1 with --cp on CPUs") && !strstr(out, "step "), "exit %d: %s", rc, out);
    /* rank 1 finds the same error (exit 2), unless rank 0's exit reaches it first: then it says its
       peer died and exits 1 (a race a slow build, ASan's, shows); either way it never trains */
    char r1[4096], path[700];
    snprintf(path, sizeof path, "%s/err2.out.r1", bt_test_dir);
    slurp(path, r1, sizeof r1);
    BT_CHECK((strstr(r1, "--dp zero1 with --cp on CPUs") || strstr(r1, "died")) && !strstr(r1, "step "), "rank 1: %s", r1);
}

int main(int argc, char **argv) {
    if (train_runs_child(argc, argv)) return train_runs_child_main(argc, argv);
    train_runs_init("test_tp_gpt2");
    BT_RUN(test_shard_table);
    BT_RUN(test_shard_init_is_one_process);
    BT_RUN(test_flag_errors);
    BT_RUN(test_zero_ranges);
    BT_RUN(test_run_errors);
    BT_RUN(test_runs_match_one_process);
    BT_RUN(test_checkpoints_across_layouts);
    BT_RUN(test_init_from_and_samples);
    train_runs_done();
    return bt_test_summary("test_tp_gpt2");
}
