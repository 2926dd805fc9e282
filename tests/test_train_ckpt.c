/* test_train_ckpt.c - checkpoints of train_gpt2.c on the CPU (issue 10): a run resumed from a
   middle checkpoint gives the uninterrupted run's losses and final state bit for bit; so does a
   run killed with SIGKILL at a random step and resumed with --resume auto; SIGINT makes a run
   checkpoint and exit 0, a second one ends it at once leaving no temporary; --resume auto skips
   a damaged or truncated newest checkpoint, naming the tensor and the bytes; a resume with other
   options is a clear error; --skip-nonfinite goes on; the Hugging Face export and --init-from
   give the same weights back, in transformers' layout and in the older one; bad --init-from files
   are clear errors. The checkpoint directory (issue 35): a failed last checkpoint costs neither
   --save nor --export-hf (exit 1); a rotation that cannot delete is a warning; the directory is
   locked by its run and refuses another run's checkpoints unless --resume auto or
   --ckpt-overwrite; a killed save's temporary goes when a run takes the directory; a resumed log
   has one entry per step; links at a checkpoint's name are refused. --offload adamw: the same bits,
   resumed either way; its flag's errors. --weight-copy's errors. Runs are this binary
   re-executed with --run-train ARGS, with train_gpt2's own signal handler (a fresh process: its
   exit status, output and leaks are its own). The runs use the s2 preset, -b 1 -t 8, ten steps or
   fewer (about 0.05 s each on a 2-core CPU, 0.5 s under ASan). */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/train_runs.h"
#include <float.h>

#define RUN "-e s2 -b 1 -t 8 -v 0 -g 0 --quiet"
#define RUN_NO_E "-b 1 -t 8 -v 0 -g 0 --quiet"
static int STEPS = 10;   /* of the reference run: 6 under BT_TEST_QUICK (ASan) */

/* polls until path has n lines; 0, or -1 when pid ended first or 60 s passed */
static int wait_lines(const char *path, int n, pid_t pid) {
    for (int i = 0; i < 6000; i++) {
        if (lines_of(path) >= n) return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
        sleep_ms(10);
    }
    return -1;
}

/* ---- what the runs leave ---- */
static int first_logged_step(const char *path) {
    int step = -1;
    FILE *f = fopen(path, "rb");
    if (f && fscanf(f, "{\"step\": %d", &step) != 1) step = -1;
    if (f) fclose(f);
    return step;
}
/* 1 when the two checkpoints hold the same bytes in every tensor and the same step counts */
static int same_state(const char *a, const char *b, char *why, size_t n) {
    static const char *const keys[3] = {"train.step", "adamw.step", NULL};
    return same_checkpoints(a, b, keys, why, n);
}
static int count_temporaries(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

/* the uninterrupted reference run: STEPS steps, a checkpoint every 2, all kept */
static int reference_ok;
static void make_reference(void) {
    char args[2000], out[65536];
    snprintf(args, sizeof args, RUN " -x %d --ckpt-every 2 --ckpt-keep 0 --ckpt-dir %s -o %s", STEPS, tp("ref"), tp("ref_log"));
    int rc = train_run(args, out, sizeof out);
    reference_ok = rc == 0 && !access(ckpt(tp("ref"), STEPS), R_OK);
    BT_CHECK(reference_ok, "the reference run: exit %d: %s", rc, out);
}

/* a run resumed from the checkpoint of step 4 continues bit for bit: the same losses, norms and
   learning rates in the log, the same checkpoints after (weights, AdamW state, steps) */
static void test_resume_bit_exact(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    make_reference();
    if (!reference_ok) return;
    char args[2000], out[65536], why[256];
    /* what the file holds */
    bt_ckpt_file *f = bt_ckpt_open(ckpt(tp("ref"), 4), BT_CKPT_VERIFY | BT_CKPT_REQUIRE_CHECKSUMS);
    BT_CHECK(f != NULL, "%s", bt_ckpt_error());
    if (f) {
        const bt_ckpt_meta *m = bt_ckpt_file_meta(f);
        const bt_ckpt_info *p = bt_ckpt_find(f, "params");
        int64_t step = -1, astep = -1;
        bt_loader_state st;
        BT_CHECK(bt_ckpt_count(f) == 3 && p && p->dtype == BT_CKPT_F32 && bt_ckpt_find(f, "adamw.m") && bt_ckpt_find(f, "adamw.v"),
                 "params, adamw.m, adamw.v (%d tensors)", bt_ckpt_count(f));
        BT_CHECK(!bt_ckpt_meta_get_i64(m, "train.step", &step) && step == 4 && !bt_ckpt_meta_get_i64(m, "adamw.step", &astep) && astep == 4,
                 "steps %lld %lld", (long long)step, (long long)astep);
        BT_CHECK(!bt_ckpt_meta_get_loader(m, 0, &st) && st.step == 4 && st.B == 1 && st.T == 8, "loader state: %s", bt_ckpt_error());
        BT_CHECK(bt_ckpt_meta_get(m, "train.lr") && bt_ckpt_meta_get(m, "train.seed") && bt_ckpt_meta_get(m, "train.precision") &&
                 bt_ckpt_meta_get(m, "train.world") && bt_ckpt_meta_get(m, "train.dp") && bt_ckpt_meta_get(m, "gpt2.C"), "the run's config");
        bt_ckpt_close(f);
    }
    snprintf(args, sizeof args, RUN " -x %d --ckpt-every 2 --ckpt-keep 0 --resume %s --ckpt-dir %s -o %s", STEPS, ckpt(tp("ref"), 4),
             tp("res"), tp("res_log"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "resumed from") && strstr(out, "after step 4"), "resume: exit %d: %s", rc, out);
    static char want[32768], got[32768];
    log_losses(tp("ref_log/log.jsonl"), 4, want, sizeof want);
    log_losses(tp("res_log/log.jsonl"), 4, got, sizeof got);
    BT_CHECK(first_logged_step(tp("res_log/log.jsonl")) == 5, "the resumed log starts at step %d", first_logged_step(tp("res_log/log.jsonl")));
    BT_CHECK(want[0] && !strcmp(want, got), "the losses after the resume differ:\n%s\nvs the uninterrupted run's:\n%s", got, want);
    for (int s = 6; s <= STEPS; s += 2)
        BT_CHECK(same_state(ckpt(tp("ref"), s), ckpt(tp("res"), s), why, sizeof why), "checkpoint of step %d: %s", s, why);
    /* the log reports the stall of each snapshot and the saves */
    char log[65536];
    slurp(tp("ref_log/log.jsonl"), log, sizeof log);
    BT_CHECK(strstr(log, "\"ckpt_stall_ms\"") && strstr(log, "\"ckpt_stall_total_ms\"") && strstr(log, "\"ckpt_saved_step\""), "log: %.300s", log);
}

/* a temporary as a save killed by kill -9 leaves it, of a process that is gone, written now */
static void plant_dead_temporary(const char *dir, int step) {
    char path[700];
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    snprintf(path, sizeof path, "%s.tmp.%d.0", ckpt(dir, step), (int)dead);
    bt_test_write_text(path, "half a checkpoint");
}

/* kill -9 at a random step, then --resume auto: the same final state as the uninterrupted run; the
   log (the same -o) has one entry per step, the uninterrupted run's (the killed run's steps past
   its last checkpoint are cut, not repeated); the temporaries of killed saves are gone at once,
   whatever their age, with --ckpt-keep 0 too (issue 35, findings 5 and 9) */
static void test_kill9_resume(void) {
    if (!have_data() || !reference_ok) { BT_SKIP(reference_ok ? "no data (make data)" : "no reference run"); return; }
    srand((unsigned)getpid());
    for (int round = 0; round < (quick() ? 1 : 2); round++) {
        char args[2000], out[65536], why[256], dir[64], log[64];
        int at = 3 + 2 * (rand() % ((STEPS - 4) / 2));   /* odd, past the first checkpoint (every 2): a step runs again */
        snprintf(dir, sizeof dir, "kill%d", round); snprintf(log, sizeof log, "kill%d_log", round);
        snprintf(args, sizeof args, RUN " -x %d --ckpt-every 2 --ckpt-dir %s -o %s", STEPS, tp(dir), tp(log));
        pid_t pid = train_spawn(args, tp("kill.out"));
        char lp[600];
        snprintf(lp, sizeof lp, "%s/log.jsonl", tp(log));
        int reached = wait_lines(lp, at, pid) == 0;
        kill(pid, SIGKILL);
        int st = train_wait(pid, 60);
        int done = lines_of(lp);
        printf("info: round %d: killed with SIGKILL after %d logged steps (aimed at %d), status %d\n", round, done, at, st);
        BT_CHECK(reached && st == 128 + SIGKILL, "the run was not killed mid-way (status %d, %d lines)", st, done);
        plant_dead_temporary(tp(dir), STEPS);
        snprintf(args, sizeof args, RUN " -x %d --ckpt-every 2 --ckpt-keep 0 --ckpt-dir %s --resume auto -o %s", STEPS, tp(dir), tp(log));
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 0 && strstr(out, "removed") && strstr(out, "of a killed save"), "resume after kill -9: exit %d: %s", rc, out);
        BT_CHECK(count_temporaries(tp(dir)) == 0, "a killed save's temporary survived the resumed run in %s", tp(dir));
        BT_CHECK(same_state(ckpt(tp("ref"), STEPS), ckpt(tp(dir), STEPS), why, sizeof why), "final state after kill -9 at %d: %s", done, why);
        static char want[32768], got[32768];
        log_losses(tp("ref_log/log.jsonl"), 0, want, sizeof want);
        log_losses(lp, 0, got, sizeof got);
        BT_CHECK(lines_of(lp) == STEPS && !strcmp(want, got), "the log after kill -9 at %d and the resume (%d lines) is not the uninterrupted "
                 "run's, one entry per step:\n%s\nvs\n%s", done, lines_of(lp), got, want);
    }
}

/* SIGINT: the step finishes, a checkpoint is written, exit 0; a resume goes on from it. Two
   signals: the process ends at once (by the signal), leaving no temporary and no bad file. */
static void test_sigint(void) {
    if (!have_data()) { BT_SKIP("no data (make data)"); return; }
    char args[2000], out[65536], lp[600];
    snprintf(args, sizeof args, RUN " -x 100000 --ckpt-dir %s -o %s", tp("int"), tp("int_log"));
    snprintf(lp, sizeof lp, "%s/log.jsonl", tp("int_log"));
    pid_t pid = train_spawn(args, tp("int.out"));
    BT_CHECK(wait_lines(lp, 3, pid) == 0, "the run did not start");
    kill(pid, SIGINT);
    int rc = train_wait(pid, 60);
    slurp(tp("int.out"), out, sizeof out);
    int steps = lines_of(lp);
    char want[64];
    snprintf(want, sizeof want, "stopped by SIGINT after step %d of 100000", steps);
    BT_CHECK(rc == 0 && strstr(out, want), "SIGINT: exit %d (want 0, '%s'): %s", rc, want, out);
    bt_ckpt_file *f = bt_ckpt_open(ckpt(tp("int"), steps), BT_CKPT_VERIFY | BT_CKPT_REQUIRE_CHECKSUMS);
    BT_CHECK(f != NULL, "the checkpoint of step %d: %s", steps, bt_ckpt_error());
    bt_ckpt_close(f);
    /* resumed, and stopped again by SIGTERM two steps later */
    snprintf(args, sizeof args, RUN " -x 100000 --ckpt-dir %s --resume auto -o %s", tp("int"), tp("int_log"));
    pid = train_spawn(args, tp("int.out"));
    BT_CHECK(wait_lines(lp, steps + 2, pid) == 0, "the resumed run did not go on");
    kill(pid, SIGTERM);
    rc = train_wait(pid, 60);
    slurp(tp("int.out"), out, sizeof out);
    snprintf(want, sizeof want, "after step %d", steps);
    BT_CHECK(rc == 0 && strstr(out, want) && strstr(out, "stopped by SIGTERM"), "resume + SIGTERM: exit %d: %s", rc, out);
    /* two signals: ended by the second, not by the loop (30 ms apart: two pending SIGINTs would
       merge into one; 250 ms: often inside the checkpoint's write, which must leave no temporary) */
    for (int delay = 30; delay <= 250; delay += 220) {
        char d2[32];
        snprintf(d2, sizeof d2, "int2_%d", delay);   /* a directory each: the first may leave a checkpoint */
        snprintf(args, sizeof args, RUN " -x 100000 --ckpt-dir %s", tp(d2));
        pid = train_spawn(args, tp("int2.out"));
        sleep_ms(1500);    /* into training (startup is ~0.5 s) */
        kill(pid, SIGINT);
        sleep_ms(delay);
        kill(pid, SIGINT);
        rc = train_wait(pid, 30);
        slurp(tp("int2.out"), out, sizeof out);
        if (delay == 30) BT_CHECK(rc == 128 + SIGINT && !strstr(out, "stopped by"), "two SIGINTs: status %d: %s", rc, out);
        else BT_CHECK(rc == 128 + SIGINT || rc == 0, "two SIGINTs %d ms apart: status %d: %s", delay, rc, out);
        BT_CHECK(count_temporaries(tp(d2)) == 0, "a temporary was left in %s", tp(d2));
        int64_t *steps_found = NULL;
        int n = bt_ckpt_list(tp(d2), &steps_found);
        for (int i = 0; i < n; i++) {
            bt_ckpt_file *g = bt_ckpt_open(ckpt(tp(d2), steps_found[i]), BT_CKPT_VERIFY | BT_CKPT_REQUIRE_CHECKSUMS);
            BT_CHECK(g != NULL, "a checkpoint left by the second signal is damaged: %s", bt_ckpt_error());
            bt_ckpt_close(g);
        }
        free(steps_found);
        if (delay > 30) printf("info: two SIGINTs %d ms apart: status %d, %d checkpoint(s) left, all whole\n", delay, rc, n);
    }
}

/* copies file src to dst */
static void copy_file(const char *src, const char *dst) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
    BT_CHECK(system(cmd) == 0, "%s", cmd);
}
/* --resume auto: the newest checkpoint damaged (a flipped byte in adamw.m), the next truncated:
   each reported (tensor, bytes), the one before used, the run the same as the reference */
static void test_resume_auto_skips_damaged(void) {
    if (!have_data() || !reference_ok) { BT_SKIP(reference_ok ? "no data (make data)" : "no reference run"); return; }
    char args[2000], out[65536], why[256];
    mkdir(tp("dmg"), 0755);
    for (int s = 2; s <= STEPS; s += 2) copy_file(ckpt(tp("ref"), s), ckpt(tp("dmg"), s));
    bt_ckpt_file *f = bt_ckpt_open(ckpt(tp("dmg"), STEPS), 0);
    uint64_t at = f ? bt_ckpt_find(f, "adamw.m")->offset + 1000 : 0;
    bt_ckpt_close(f);
    int fd = open(ckpt(tp("dmg"), STEPS), O_RDWR);
    unsigned char b = 0;
    BT_CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)at) == 1, "read");
    b ^= 0x10;
    BT_CHECK(pwrite(fd, &b, 1, (off_t)at) == 1, "write");
    close(fd);
    BT_CHECK(truncate(ckpt(tp("dmg"), STEPS - 2), 1000000) == 0, "truncate");
    snprintf(args, sizeof args, RUN " -x %d --ckpt-every 2 --ckpt-dir %s --resume auto", STEPS, tp("dmg"));
    int rc = train_run(args, out, sizeof out);
    char want[64];
    snprintf(want, sizeof want, "after step %d", STEPS - 4);
    char m1[96], m2[96];
    snprintf(m1, sizeof m1, "ckpt_%09d.safetensors: tensor 'adamw.m' (file bytes", STEPS);
    snprintf(m2, sizeof m2, "ckpt_%09d.safetensors: truncated", STEPS - 2);
    const char *w1 = strstr(out, m1), *w2 = strstr(out, m2);
    BT_CHECK(rc == 0 && w1 && strstr(out, "checksum") && w2 && strstr(out, want), "exit %d: %s", rc, out);
    BT_CHECK(same_state(ckpt(tp("ref"), STEPS), ckpt(tp("dmg"), STEPS), why, sizeof why), "the run from step %d: %s", STEPS - 4, why);
    /* nothing whole: an error; auto in an empty directory: a fresh start */
    mkdir(tp("dmg2"), 0755);
    copy_file(ckpt(tp("ref"), 2), ckpt(tp("dmg2"), 2));
    BT_CHECK(truncate(ckpt(tp("dmg2"), 2), 100) == 0, "truncate");
    snprintf(args, sizeof args, RUN " -x %d --resume %s", STEPS, tp("dmg2"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "none of its 1 checkpoints is whole") && !strstr(out, "step "), "exit %d: %s", rc, out);
    snprintf(args, sizeof args, RUN " -x 2 --ckpt-dir %s --resume auto -o %s", tp("fresh"), tp("fresh_log"));
    rc = train_run(args, out, sizeof out);
    char none[700];
    snprintf(none, sizeof none, "no checkpoint in %s: starting a new run", tp("fresh"));
    BT_CHECK(rc == 0 && first_logged_step(tp("fresh_log/log.jsonl")) == 1 && !strstr(out, "resumed") && strstr(out, none), "auto, nothing yet: exit %d: %s", rc, out);
}

/* a resume with options that change the run is refused before training, naming the option */
static void test_resume_config_mismatch(void) {
    if (!have_data() || !reference_ok) { BT_SKIP(reference_ok ? "no data (make data)" : "no reference run"); return; }
    char args[2000], out[65536];
    char xs[64];
    snprintf(xs, sizeof xs, "train.steps = %d (-x)", STEPS);
    const char *cases[][2] = {{"-l 1e-3", "train.lr = 0.002 (-l), this one 0.001"}, {"-b 4", "train.B = 1 (-b), this one 4"},
                              {"--seed 7", "train.seed = 1337 (--seed)"}, {"-x 12", xs}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, RUN " -x %d --resume %s %s", STEPS, ckpt(tp("ref"), 4), cases[i][0]);
        if (!strncmp(cases[i][0], "-x", 2)) snprintf(args, sizeof args, RUN " --resume %s %s", ckpt(tp("ref"), 4), cases[i][0]);
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 1 && strstr(out, cases[i][1]) && strstr(out, "--init-from") && !strstr(out, "step "), "%s: exit %d: %s", cases[i][0], rc, out);
    }
    snprintf(args, sizeof args, "-e s4 " RUN_NO_E " -x %d --resume %s", STEPS, ckpt(tp("ref"), 4));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "holds a model of L 2 H 2 C 64") && strstr(out, "-e s4 is L 4"), "-e s4: exit %d: %s", rc, out);
    snprintf(args, sizeof args, RUN " -x %d --resume %s", STEPS, tp("no_such.safetensors"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "no_such.safetensors") && !strstr(out, "step "), "missing file: exit %d: %s", rc, out);
    /* flags that cannot go together */
    train_opts o; char err[256];
    const char *bad[][2] = {{"--ckpt-every 5", "--ckpt-every needs --ckpt-dir"}, {"--resume auto", "--resume auto needs --ckpt-dir"},
                            {"--resume x --init-from y", "exclude each other"}, {"-e s2 --init-from y", "exclude each other"},
                            {"--ckpt-every -1 --ckpt-dir d", "bad value '-1' for --ckpt-every"},
                            {"--ckpt-overwrite", "--ckpt-overwrite needs --ckpt-dir"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = train_parse(bad[i][0], &o, err, sizeof err);
        BT_CHECK(r == -1 && strstr(err, bad[i][1]), "'%s': %d '%s'", bad[i][0], r, err);
    }
}

/* --skip-nonfinite: a model whose loss is NaN at every step trains on (each update skipped,
   warned), exits 0, and its checkpoint counts the steps but no AdamW update */
static void test_skip_nonfinite(void) {
    if (!have_data()) { BT_SKIP("no data (make data)"); return; }
    gpt2 m; char err[512], args[2000], out[65536];
    gpt2_config cfg;
    gpt2_config_from_preset("s2", BT_GPT2_VOCAB, &cfg);
    gpt2_build(&m, cfg, bt_cpu()); gpt2_init(&m, 5);
    bt_fill_(m.lnfw, FLT_MAX);   /* finite weights (NaN ones are refused), logits that are not */
    BT_CHECK(gpt2_save(&m, tp("nan.bin"), err, sizeof err) == 0, "%s", err);
    gpt2_free(&m);
    snprintf(args, sizeof args, "-e %s " RUN_NO_E " -x 3 --skip-nonfinite --ckpt-dir %s", tp("nan.bin"), tp("nan"));
    int rc = train_run(args, out, sizeof out);
    int warned = 0;
    for (const char *p = out; (p = strstr(p, "its update is skipped (--skip-nonfinite)")); p++) warned++;
    BT_CHECK(rc == 0 && warned == 3 && strstr(out, "3 updates skipped"), "exit %d, %d warnings: %s", rc, warned, out);
    bt_ckpt_file *f = bt_ckpt_open(ckpt(tp("nan"), 3), BT_CKPT_REQUIRE_CHECKSUMS);
    int64_t step = -1, astep = -1;
    BT_CHECK(f && !bt_ckpt_meta_get_i64(bt_ckpt_file_meta(f), "train.step", &step) && step == 3 &&
             !bt_ckpt_meta_get_i64(bt_ckpt_file_meta(f), "adamw.step", &astep) && astep == 0, "steps %lld, updates %lld", (long long)step, (long long)astep);
    bt_ckpt_close(f);
}

/* ---- the checkpoint directory (issue 35) ---- */
/* a checkpoint that cannot be written (a file-size limit between the model file's 13 MB and a
   checkpoint's 40 MB: a full disk there) does not cost the model file or the Hugging Face export:
   each is written, the failure said, the exit status 1; at the end of the steps and on SIGTERM */
static void test_failed_checkpoint_keeps_outputs(void) {
    if (!have_data()) { BT_SKIP("no data (make data)"); return; }
    char args[2000], out[65536], err[512], lp[600];
    const long long limit = 20 << 20;
    for (int sig = 0; sig < 2; sig++) {
        const char *dir = sig ? "fullt" : "full", *model = sig ? "fullt.bin" : "full.bin", *hf = sig ? "fullt_hf" : "full_hf";
        const char *log = sig ? "fullt_log" : "full_log";
        snprintf(args, sizeof args, RUN " -x %d --ckpt-dir %s --save %s --export-hf %s -o %s", sig ? 100000 : 2, tp(dir), tp(model), tp(hf), tp(log));
        snprintf(lp, sizeof lp, "%s/log.jsonl", tp(log));
        pid_t pid = train_spawn_limited(args, tp("full.out"), limit);
        if (sig) {
            BT_CHECK(wait_lines(lp, 2, pid) == 0, "the run did not start");
            kill(pid, SIGTERM);
        }
        int rc = train_wait(pid, 120);
        slurp(tp("full.out"), out, sizeof out);
        BT_CHECK(rc == 1 && strstr(out, "error: checkpoint") && strstr(out, "File too large") && strstr(out, "not every output was written"),
                 "%s: a failed checkpoint is an error, exit 1: exit %d: %s", sig ? "SIGTERM" : "the end", rc, out);
        BT_CHECK(strstr(out, "saved ") && strstr(out, "exported ") && (!sig || strstr(out, "stopped by SIGTERM")), "%s: the other outputs: %s",
                 sig ? "SIGTERM" : "the end", out);
        gpt2 m;
        gpt2_config cfg;
        gpt2_config_from_preset("s2", BT_GPT2_VOCAB, &cfg);
        gpt2_build(&m, cfg, bt_cpu());
        BT_CHECK(!gpt2_load_weights(&m, tp(model), err, sizeof err), "--save's file: %s", err);
        gpt2_free(&m);
        char hfp[700];
        snprintf(hfp, sizeof hfp, "%s/model.safetensors", tp(hf));
        bt_ckpt_file *f = bt_ckpt_open(hfp, BT_CKPT_VERIFY);
        BT_CHECK(f != NULL, "--export-hf's file: %s", bt_ckpt_error());
        bt_ckpt_close(f);
        BT_CHECK(count_temporaries(tp(dir)) == 0, "the failed checkpoint's temporary is left in %s", tp(dir));
    }
}

/* an old checkpoint that rotation cannot delete (a directory of its name, not empty) is a warning:
   the run saves, rotates what it can, writes --save and exits 0 */
static void test_rotation_failure_warns(void) {
    if (!have_data()) { BT_SKIP("no data (make data)"); return; }
    char args[2000], out[65536], p[700];
    snprintf(args, sizeof args, RUN " -x 4 --ckpt-every 1 --ckpt-keep 0 --ckpt-dir %s", tp("rot"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0, "the first run: exit %d: %s", rc, out);
    unlink(ckpt(tp("rot"), 4)); unlink(ckpt(tp("rot"), 3)); unlink(ckpt(tp("rot"), 1));
    BT_CHECK(mkdir(ckpt(tp("rot"), 1), 0755) == 0, "mkdir");
    snprintf(p, sizeof p, "%s/keep_me", ckpt(tp("rot"), 1));
    bt_test_write_text(p, "x");
    snprintf(args, sizeof args, RUN " -x 4 --ckpt-every 1 --ckpt-keep 1 --ckpt-dir %s --resume auto --save %s", tp("rot"), tp("rot.bin"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "after step 2") && strstr(out, "warning: checkpoint rotation: cannot delete") && strstr(out, "ckpt_000000001") &&
             strstr(out, "saved ") && !strstr(out, "error"), "exit %d: %s", rc, out);
    BT_CHECK(access(ckpt(tp("rot"), 4), F_OK) == 0 && access(ckpt(tp("rot"), 3), F_OK) != 0 && access(ckpt(tp("rot"), 2), F_OK) != 0,
             "the newest kept, the others rotated away");
}

/* --ckpt-dir belongs to one run: a second run while the first lives is refused, naming it; after
   it, a new run (no --resume) is refused, the flags named, and touches nothing (the log neither);
   --ckpt-overwrite deletes the old checkpoints and starts over; a resume from an earlier checkpoint
   of the directory, or from another one, does not mix its checkpoints with theirs */
static void test_dir_belongs_to_one_run(void) {
    if (!have_data()) { BT_SKIP("no data (make data)"); return; }
    char args[2000], out[65536], lp[600], want[64];
    snprintf(lp, sizeof lp, "%s/log.jsonl", tp("own_log"));
    snprintf(args, sizeof args, RUN " -x 100000 --ckpt-dir %s -o %s", tp("own"), tp("own_log"));
    pid_t a = train_spawn(args, tp("own_a.out"));
    BT_CHECK(wait_lines(lp, 2, a) == 0, "the first run did not start");
    snprintf(args, sizeof args, RUN " -x 2 --ckpt-dir %s", tp("own"));
    int rc = train_run(args, out, sizeof out);
    snprintf(want, sizeof want, "pid %d on host", (int)a);
    BT_CHECK(rc == 1 && strstr(out, "in use") && strstr(out, want) && !strstr(out, "| loss"), "a second run at once: exit %d: %s", rc, out);
    kill(a, SIGTERM);
    rc = train_wait(a, 60);
    int n = lines_of(lp);
    BT_CHECK(rc == 0 && access(ckpt(tp("own"), n), F_OK) == 0, "the first run: exit %d, %d steps", rc, n);
    /* a new run in its directory */
    snprintf(args, sizeof args, RUN " -x 2 --ckpt-dir %s -o %s", tp("own"), tp("own_log"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "of an earlier run") && strstr(out, "--resume auto continues") && strstr(out, "--ckpt-overwrite deletes") &&
             !strstr(out, "| loss"), "a new run in a used directory: exit %d: %s", rc, out);
    BT_CHECK(access(ckpt(tp("own"), n), F_OK) == 0 && lines_of(lp) == n, "the refused run touched the directory or the log");
    snprintf(args, sizeof args, RUN " -x 2 --ckpt-dir %s --ckpt-overwrite", tp("own"));
    rc = train_run(args, out, sizeof out);
    int64_t *steps = NULL;
    int k = bt_ckpt_list(tp("own"), &steps);
    BT_CHECK(rc == 0 && strstr(out, "--ckpt-overwrite: deleted 1 checkpoint") && k == 1 && steps[0] == 2, "--ckpt-overwrite: exit %d, %d left: %s", rc, k, out);
    free(steps);
    if (!reference_ok) return;
    /* going back to step 4 of a directory that holds later ones; a checkpoint of another directory */
    snprintf(args, sizeof args, RUN " -x %d --ckpt-every 2 --resume %s --ckpt-dir %s", STEPS, ckpt(tp("ref"), 4), tp("ref"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "after step 4, the one resumed") && strstr(out, "--ckpt-overwrite") && !strstr(out, "| loss"),
             "back to step 4: exit %d: %s", rc, out);
    BT_CHECK(access(ckpt(tp("ref"), STEPS), F_OK) == 0, "the refused run deleted a checkpoint");
    snprintf(args, sizeof args, RUN " -x %d --resume %s --ckpt-dir %s", STEPS, ckpt(tp("ref"), 4), tp("own"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "of another run") && strstr(out, "--ckpt-overwrite") && access(ckpt(tp("own"), 2), F_OK) == 0,
             "a checkpoint of another directory: exit %d: %s", rc, out);
}

/* a link planted where a checkpoint goes (one named like the next checkpoint) is refused, its
   target untouched; --resume auto skips it as it would a damaged file */
static void test_links_in_ckpt_dir(void) {
    if (!have_data() || !reference_ok) { BT_SKIP(reference_ok ? "no data (make data)" : "no reference run"); return; }
    char args[2000], out[65536];
    const char *victim = tp("victim.txt");
    mkdir(tp("lnk"), 0755);
    copy_file(ckpt(tp("ref"), 2), ckpt(tp("lnk"), 2));
    bt_test_write_text(victim, "precious");
    BT_CHECK(symlink(victim, ckpt(tp("lnk"), 4)) == 0, "symlink");
    snprintf(args, sizeof args, RUN " -x %d --ckpt-every 2 --ckpt-dir %s --resume auto", STEPS, tp("lnk"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "after step 2") && strstr(out, "symbolic link"), "exit %d: %s", rc, out);
    BT_CHECK(bt_test_file_has(victim, "precious"), "the link's target was written");
}

/* ---- Hugging Face files ---- */
/* --init-from PATH into a fresh model of the file's config; 0, or -1 with err */
static int init_from(const char *path, gpt2 *m, gpt2_config *cfg, char *err, size_t errlen) {
    train_opts o;
    train_default_opts(&o);
    o.init_from = path;
    trainer tr;
    memset(&tr, 0, sizeof tr);
    trainer_config tc;
    int r = trainer_source_open(&o, NULL, &tr.src, &tc, err, errlen);
    if (!r) *cfg = tc.gpt2;
    if (!r) {
        gpt2_build(&tr.model, *cfg, bt_cpu());
        r = trainer_source_load(&tr, err, errlen);
        *m = tr.model;
        if (r) gpt2_free(m);
    }
    bt_ckpt_close(tr.src.file);
    return r;
}
/* 1 when b's parameters are a's, but for wte's padding rows, which must be zeros in b */
static int same_weights(const gpt2 *a, const gpt2 *b) {
    const float *x = (const float *)bt_data_ptr(a->flat), *y = (const float *)bt_data_ptr(b->flat);
    int64_t real = (int64_t)a->cfg.V * a->cfg.C, pad = (int64_t)(a->cfg.Vp - a->cfg.V) * a->cfg.C;
    if (a->num_params != b->num_params || memcmp(x, y, sizeof(float) * (size_t)real)) return 0;
    for (int64_t i = 0; i < pad; i++) if (y[real + i] != 0) return 0;
    return !memcmp(x + real + pad, y + real + pad, sizeof(float) * (size_t)(a->num_params - real - pad));
}

/* export, then --init-from: the same weights; the file is transformers' layout */
static void test_hf_roundtrip(void) {
    gpt2 a, b; char err[1024], path[600];
    gpt2_config cfg = gpt2_config_make(2, 2, 32, 32, 300), got;
    gpt2_build(&a, cfg, bt_cpu()); gpt2_init(&a, 21);
    bt_normal_(a.layers[1].qkvb, 0, 0.1, 3, 0);        /* biases not zero: a transposed bias would show */
    bt_normal_(a.lnfb, 0, 0.1, 4, 0);
    mkdir(tp("hf"), 0755);
    BT_CHECK(gpt2_hf_export(&a, tp("hf"), err, sizeof err) == 0, "export: %s", err);
    snprintf(path, sizeof path, "%s/model.safetensors", tp("hf"));
    bt_ckpt_file *f = bt_ckpt_open(path, 0);
    BT_CHECK(f != NULL, "%s", bt_ckpt_error());
    if (f) {
        struct { const char *name; int64_t r, c; } want[] = {
            {"transformer.wte.weight", 300, 32}, {"transformer.wpe.weight", 32, 32}, {"transformer.h.1.attn.c_attn.weight", 32, 96},
            {"transformer.h.0.attn.c_proj.weight", 32, 32}, {"transformer.h.1.mlp.c_fc.weight", 32, 128},
            {"transformer.h.0.mlp.c_proj.weight", 128, 32}, {"transformer.ln_f.bias", 32, -1}};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const bt_ckpt_info *t = bt_ckpt_find(f, want[i].name);
            BT_CHECK(t && t->dtype == BT_CKPT_F32 && t->shape[0] == want[i].r && (want[i].c < 0 ? t->ndim == 1 : t->ndim == 2 && t->shape[1] == want[i].c),
                     "%s", want[i].name);
        }
        BT_CHECK(bt_ckpt_count(f) == 4 + 12 * 2 && !bt_ckpt_find(f, "lm_head.weight"), "%d tensors, no head (tied)", bt_ckpt_count(f));
        BT_CHECK(!strcmp(bt_ckpt_meta_get(bt_ckpt_file_meta(f), "format") ? bt_ckpt_meta_get(bt_ckpt_file_meta(f), "format") : "", "pt"), "format pt");
        float w[4], ours[4];   /* a Conv1D weight is ours transposed: file [in, out] */
        float *c_attn = (float *)malloc(32 * 96 * 4);
        BT_CHECK(!bt_ckpt_read(f, "transformer.h.1.attn.c_attn.weight", c_attn, 32 * 96 * 4), "%s", bt_ckpt_error());
        w[0] = c_attn[0 * 96 + 5]; w[1] = c_attn[7 * 96 + 90];
        ours[0] = (float)bt_get(a.layers[1].qkvw, (int64_t[]){5, 0}); ours[1] = (float)bt_get(a.layers[1].qkvw, (int64_t[]){90, 7});
        BT_CHECK(w[0] == ours[0] && w[1] == ours[1], "transpose: %g %g vs %g %g", w[0], w[1], ours[0], ours[1]);
        free(c_attn);
        bt_ckpt_close(f);
    }
    /* config.json */
    char cj[4096];
    snprintf(path, sizeof path, "%s/config.json", tp("hf"));
    slurp(path, cj, sizeof cj);
    bt_json_doc *d = bt_json_parse(cj, strlen(cj), 0);
    BT_CHECK(d != NULL, "config.json: %s", bt_data_error());
    if (d) {
        const bt_json *r = bt_json_root(d);
        int64_t v[5] = {0};
        static const char *const keys[5] = {"n_head", "n_layer", "n_embd", "n_positions", "vocab_size"};
        for (int i = 0; i < 5; i++) bt_json_i64(bt_json_get(r, keys[i]), &v[i]);
        BT_CHECK(v[0] == 2 && v[1] == 2 && v[2] == 32 && v[3] == 32 && v[4] == 300, "config fields");
        const bt_json *act = bt_json_get(r, "activation_function"), *tie = bt_json_get(r, "tie_word_embeddings"), *mt = bt_json_get(r, "model_type");
        BT_CHECK(act && !strcmp(act->str, "gelu_new") && tie && tie->type == BT_JSON_TRUE && mt && !strcmp(mt->str, "gpt2"), "activation, tie, type");
        bt_json_free(d);
    }
    int r = init_from(tp("hf"), &b, &got, err, sizeof err);
    BT_CHECK(r == 0, "init-from: %s", err);
    if (r == 0) {
        BT_CHECK(got.L == 2 && got.H == 2 && got.C == 32 && got.maxT == 32 && got.V == 300 && got.Vp == 384, "config from the file");
        BT_CHECK(same_weights(&a, &b), "the weights differ after export + --init-from");
        gpt2_free(&b);
    }
    /* a bf16 file (as transformers saves a bf16 model): converted, each weight a's rounded to bf16 */
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    char name[160];
    bt_scope_begin();
    for (int i = 0; i < a.n_params; i++) {
        int tr = gpt2_hf_name(&a, i, "transformer.", name, sizeof name);
        bt_ckpt_writer_add_tensor(w, name, bt_cast(a.params[i], BT_BF16), tr ? BT_CKPT_TRANSPOSE : 0, i == 0 ? a.cfg.V : 0);
    }
    mkdir(tp("hf16"), 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", tp("hf16"));
    BT_CHECK(bt_ckpt_writer_save(w, path) == 0, "%s", bt_ckpt_error());
    bt_ckpt_writer_free(w);
    bt_copy_(a.flat, bt_cast(bt_cast(a.flat, BT_BF16), BT_F32));
    bt_scope_end();
    r = init_from(path, &b, &got, err, sizeof err);   /* no config.json: H from no preset (C 32) */
    BT_CHECK(r == -1 && strstr(err, "no config.json"), "bf16 without config.json: %s", err);
    snprintf(path, sizeof path, "%s/config.json", tp("hf"));
    char cj2[600];
    snprintf(cj2, sizeof cj2, "%s/config.json", tp("hf16"));
    copy_file(path, cj2);
    r = init_from(tp("hf16"), &b, &got, err, sizeof err);
    BT_CHECK(r == 0, "bf16 file: %s", err);
    if (r == 0) {
        BT_CHECK(same_weights(&a, &b), "a bf16 file's weights differ from the rounded ones");
        gpt2_free(&b);
    }
    gpt2_free(&a);
}

/* a file of the older layout: no "transformer." prefix, the attention's mask buffers, a tied
   lm_head, no config.json (n_head from the preset of the same L and C: s2) */
static void write_old_layout(gpt2 *a, const char *path, int lm_head_perturbed, int extra_tensor) {
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    char name[160];
    for (int i = 0; i < a->n_params; i++) {
        int tr = gpt2_hf_name(a, i, "", name, sizeof name);
        bt_ckpt_writer_add_tensor(w, name, a->params[i], tr ? BT_CKPT_TRANSPOSE : 0, i == 0 ? a->cfg.V : 0);
    }
    static float mask[16 * 16], masked = -1e4f;
    int64_t ms[4] = {1, 1, 16, 16}, hs[2] = {a->cfg.V, a->cfg.C};
    float *head = (float *)malloc(sizeof(float) * (size_t)a->cfg.V * a->cfg.C);
    for (int i = 0; i < 256; i++) mask[i] = (i % 16) <= (i / 16);
    bt_ckpt_writer_add(w, "h.0.attn.bias", BT_CKPT_F32, 4, ms, mask);
    bt_ckpt_writer_add(w, "h.1.attn.masked_bias", BT_CKPT_F32, 0, NULL, &masked);
    memcpy(head, bt_data_ptr(a->wte), sizeof(float) * (size_t)a->cfg.V * a->cfg.C);
    if (lm_head_perturbed) head[77] += 1e-3f;
    bt_ckpt_writer_add(w, "lm_head.weight", BT_CKPT_F32, 2, hs, head);
    if (extra_tensor) bt_ckpt_writer_add(w, "h.1.attn.lora_a", BT_CKPT_F32, 4, ms, mask);
    BT_CHECK(bt_ckpt_writer_save(w, path) == 0, "%s", bt_ckpt_error());
    bt_ckpt_writer_free(w);
    free(head);
}
static void test_hf_old_layout(void) {
    gpt2 a, b; char err[1024];
    gpt2_config got;
    gpt2_build(&a, gpt2_config_make(2, 2, 64, 16, 300), bt_cpu()); gpt2_init(&a, 8);
    write_old_layout(&a, tp("old.safetensors"), 0, 0);
    int r = init_from(tp("old.safetensors"), &b, &got, err, sizeof err);
    BT_CHECK(r == 0, "old layout: %s", err);
    if (r == 0) {
        BT_CHECK(got.H == 2 && got.C == 64 && got.maxT == 16 && got.V == 300, "config (H from the s2 preset)");
        BT_CHECK(same_weights(&a, &b), "the weights of the old layout differ");
        gpt2_free(&b);
    }
    gpt2_free(&a);
}

/* bad --init-from files: each a clear error naming the file and what is wrong */
static void test_init_from_bad_files(void) {
    gpt2 a, b; char err[1024], path[600];
    gpt2_config got;
    gpt2_build(&a, gpt2_config_make(2, 2, 64, 16, 300), bt_cpu()); gpt2_init(&a, 9);
    /* missing, not safetensors */
    BT_CHECK(init_from(tp("nothing.safetensors"), &b, &got, err, sizeof err) == -1 && strstr(err, "--init-from") && strstr(err, "nothing.safetensors"), "%s", err);
    FILE *f = fopen(tp("garbage.safetensors"), "wb");
    for (int i = 0; i < 4096; i++) fputc((int)(bt_philox_uniform(3, (uint64_t)i) * 256), f);
    fclose(f);
    BT_CHECK(init_from(tp("garbage.safetensors"), &b, &got, err, sizeof err) == -1 && strstr(err, "garbage.safetensors"), "%s", err);
    /* an untied head, a tensor no GPT-2 has */
    write_old_layout(&a, tp("untied.safetensors"), 1, 0);
    BT_CHECK(init_from(tp("untied.safetensors"), &b, &got, err, sizeof err) == -1 && strstr(err, "lm_head.weight differs"), "%s", err);
    write_old_layout(&a, tp("extra.safetensors"), 0, 1);
    BT_CHECK(init_from(tp("extra.safetensors"), &b, &got, err, sizeof err) == -1 && strstr(err, "'h.1.attn.lora_a' is not part of a GPT-2"), "%s", err);
    /* transformers' layout with one tensor missing, one of the wrong shape (not transposed) */
    const char *which[2] = {"missing", "shape"};
    for (int k = 0; k < 2; k++) {
        bt_ckpt_writer *w = bt_ckpt_writer_new();
        char name[160];
        for (int i = 0; i < a.n_params; i++) {
            int tr = gpt2_hf_name(&a, i, "transformer.", name, sizeof name);
            if (k == 0 && !strcmp(name, "transformer.h.1.mlp.c_fc.weight")) continue;
            if (k == 1 && !strcmp(name, "transformer.h.0.attn.c_attn.weight")) tr = 0;
            bt_ckpt_writer_add_tensor(w, name, a.params[i], tr ? BT_CKPT_TRANSPOSE : 0, i == 0 ? a.cfg.V : 0);
        }
        snprintf(path, sizeof path, "%s/%s.safetensors", bt_test_dir, which[k]);
        BT_CHECK(bt_ckpt_writer_save(w, path) == 0, "%s", bt_ckpt_error());
        bt_ckpt_writer_free(w);
        int r = init_from(path, &b, &got, err, sizeof err);
        BT_CHECK(r == -1 && strstr(err, k ? "h.0.attn.c_attn.weight' has shape [192, 64]" : "no tensor 'transformer.h.1.mlp.c_fc.weight'"), "%s: %s", which[k], err);
    }
    /* config.json that disagrees, or names another activation; none, and no preset of that shape */
    mkdir(tp("cj"), 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", tp("cj"));
    BT_CHECK(gpt2_hf_export(&a, tp("cj"), err, sizeof err) == 0, "%s", err);
    const char *configs[][2] = {{"{\"n_head\": 2, \"n_layer\": 3}", "says n_layer 3, the tensors 2"},
                                {"{\"n_head\": 3}", "inconsistent config"},
                                {"{\"n_head\": 2, \"activation_function\": \"relu\"}", "activation_function \"relu\""},
                                {"{\"n_layer\": 2}", "\"n_head\" is missing"}, {"{\"n_head\": ", "config.json"}};
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        char cp[600];
        snprintf(cp, sizeof cp, "%s/config.json", tp("cj"));
        f = fopen(cp, "wb"); fputs(configs[i][0], f); fclose(f);
        BT_CHECK(init_from(tp("cj"), &b, &got, err, sizeof err) == -1 && strstr(err, configs[i][1]), "'%s': %s", configs[i][0], err);
    }
    gpt2_free(&a);
    gpt2_build(&a, gpt2_config_make(2, 2, 48, 16, 300), bt_cpu()); gpt2_init(&a, 9);
    write_old_layout(&a, tp("c48.safetensors"), 0, 0);
    BT_CHECK(init_from(tp("c48.safetensors"), &b, &got, err, sizeof err) == -1 && strstr(err, "no config.json") && strstr(err, "C 48"), "%s", err);
    gpt2_free(&a);
    BT_CHECK(bt_alloc_stats(bt_cpu()).allocated == 0, "leaked %zu bytes", bt_alloc_stats(bt_cpu()).allocated);
}

/* the flags end to end: a trained model exported, read back with --init-from; a checkpoint's
   weights as a new run's start; a bad file is an error before training */
static void test_hf_runs(void) {
    if (!have_data()) { BT_SKIP("no data (make data)"); return; }
    char args[2000], out[65536];
    snprintf(args, sizeof args, RUN " -x 2 --export-hf %s --save %s", tp("hf_run"), tp("a.bin"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "exported"), "export: exit %d: %s", rc, out);
    snprintf(args, sizeof args, RUN_NO_E " -x 0 --init-from %s --save %s", tp("hf_run"), tp("b.bin"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "Hugging Face"), "init-from: exit %d: %s", rc, out);
    gpt2 a, b; char err[512];
    gpt2_config cfg;
    gpt2_config_from_preset("s2", BT_GPT2_VOCAB, &cfg);
    gpt2_build(&a, cfg, bt_cpu()); gpt2_build(&b, cfg, bt_cpu());
    BT_CHECK(!gpt2_load_weights(&a, tp("a.bin"), err, sizeof err) && !gpt2_load_weights(&b, tp("b.bin"), err, sizeof err), "%s", err);
    BT_CHECK(same_weights(&a, &b), "a trained model exported and read back differs");
    gpt2_free(&a); gpt2_free(&b);
    if (reference_ok) {   /* a checkpoint's weights: step 0, fresh state */
        snprintf(args, sizeof args, RUN_NO_E " -x 1 --init-from %s -o %s", ckpt(tp("ref"), 4), tp("w_log"));
        rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 0 && first_logged_step(tp("w_log/log.jsonl")) == 1, "weights only: exit %d: %s", rc, out);
    }
    snprintf(args, sizeof args, RUN_NO_E " -x 1 --init-from %s", tp("garbage.safetensors"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "--init-from") && !strstr(out, "step "), "bad file: exit %d: %s", rc, out);
}

/* ---- issue 35, findings 7 and 8: messages that say what went wrong ---- */
/* checkpoint src copied to dst with metadata key = value (key NULL: none; value NULL: the key left
   out) and, nan_at >= 0, params[nan_at] = NaN; its checksums made anew */
static void ckpt_variant(const char *src, const char *dst, const char *key, const char *value, int64_t nan_at) {
    bt_ckpt_file *f = bt_ckpt_open(src, BT_CKPT_REQUIRE_CHECKSUMS);
    BT_CHECK(f != NULL, "%s", bt_ckpt_error());
    if (!f) return;
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    int n = bt_ckpt_count(f);
    void **bufs = (void **)calloc((size_t)n, sizeof *bufs);
    for (int i = 0; i < n; i++) {
        const bt_ckpt_info *t = bt_ckpt_info_at(f, i);
        bufs[i] = malloc(t->nbytes ? t->nbytes : 1);
        BT_CHECK(!bt_ckpt_read(f, t->name, bufs[i], t->nbytes), "%s", bt_ckpt_error());
        if (nan_at >= 0 && !strcmp(t->name, "params")) ((float *)bufs[i])[nan_at] = NAN;
        bt_ckpt_writer_add(w, t->name, t->dtype, t->ndim, t->shape, bufs[i]);
    }
    const bt_ckpt_meta *m = bt_ckpt_file_meta(f);
    for (int i = 0; i < bt_ckpt_meta_count(m); i++)
        if (strncmp(bt_ckpt_meta_key(m, i), "bt.", 3) && !(key && !value && !strcmp(bt_ckpt_meta_key(m, i), key)))
            bt_ckpt_meta_set(bt_ckpt_writer_meta(w), bt_ckpt_meta_key(m, i), bt_ckpt_meta_value(m, i));
    if (key && value) bt_ckpt_meta_set(bt_ckpt_writer_meta(w), key, value);
    BT_CHECK(!bt_ckpt_writer_save(w, dst), "%s", bt_ckpt_error());
    bt_ckpt_writer_free(w);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    bt_ckpt_close(f);
}

/* finding 7: a checkpoint's number that is missing, not an integer or out of range is named with
   its value (the reason was empty: "metadata \"gpt2.maxT\": ", "out of range ()"); a loader
   state that is not JSON names its key once (the message was formatted from its own buffer) */
static void test_ckpt_metadata_messages(void) {
    if (!have_data() || !reference_ok) { BT_SKIP(reference_ok ? "no data (make data)" : "no reference run"); return; }
    char args[2000], out[65536], steps[64];
    snprintf(steps, sizeof steps, "metadata \"train.step\": 50 is out of range (0..%d)", STEPS);
    const char *cases[][3] = {{"gpt2.maxT", "99999999999", "metadata \"gpt2.maxT\": 99999999999 is out of range (-2147483648..2147483647)"},
                              {"gpt2.C", "64.5", "metadata \"gpt2.C\": \"64.5\" is not a 64-bit integer"},
                              {"train.step", "50", steps}, {"adamw.step", "5", "metadata \"adamw.step\": 5 is out of range (0..4)"},
                              {"loader.0", "{\"magic\": ", "metadata \"loader.0\": JSON, byte"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ckpt_variant(ckpt(tp("ref"), 4), tp("meta.safetensors"), cases[i][0], cases[i][1], -1);
        snprintf(args, sizeof args, RUN " -x %d --resume %s", STEPS, tp("meta.safetensors"));
        int rc = train_run(args, out, sizeof out);
        const char *at = strstr(out, cases[i][2]);
        BT_CHECK(rc == 1 && strstr(out, "meta.safetensors") && at && !strstr(at + 1, "metadata") && !strstr(out, "step "),
                 "%s = %s: exit %d: %s", cases[i][0], cases[i][1], rc, out);
    }
}

/* train.grad_dtype (--grad-dtype): a checkpoint written before the key existed resumes as f32
   gradients; one of bf16 gradients resumed without the flag is refused, naming it */
static void test_grad_dtype_field(void) {
    if (!have_data() || !reference_ok) { BT_SKIP(reference_ok ? "no data (make data)" : "no reference run"); return; }
    char args[2000], out[65536];
    ckpt_variant(ckpt(tp("ref"), 4), tp("old.safetensors"), "train.grad_dtype", NULL, -1);
    snprintf(args, sizeof args, RUN " -x %d --resume %s", STEPS, tp("old.safetensors"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "step "), "a checkpoint without train.grad_dtype: exit %d: %s", rc, out);
    ckpt_variant(ckpt(tp("ref"), 4), tp("gbf16.safetensors"), "train.grad_dtype", "bf16", -1);
    snprintf(args, sizeof args, RUN " -x %d --resume %s", STEPS, tp("gbf16.safetensors"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "train.grad_dtype = bf16 (--grad-dtype), this one f32") && !strstr(out, "step "),
             "train.grad_dtype = bf16: exit %d: %s", rc, out);
}

/* --offload adamw (AdamW's m and v in host memory, streamed in chunks; on a CPU the chunked path
   runs all the same): the reference run's losses and checkpoints bit for bit; a resume from an
   offloaded run's checkpoint without the flag, and the other way, bit for bit; its refusals */
static void test_offload_adamw(void) {
    if (!have_data() || !reference_ok) { BT_SKIP(reference_ok ? "no data (make data)" : "no reference run"); return; }
    char args[2000], out[65536], why[256];
    static char want[32768], got[32768];
    snprintf(args, sizeof args, RUN " -x %d --offload adamw --ckpt-every 2 --ckpt-keep 0 --ckpt-dir %s -o %s", STEPS, tp("off"),
             tp("off_log"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0, "--offload adamw: exit %d: %s", rc, out);
    log_losses(tp("ref_log/log.jsonl"), 0, want, sizeof want);
    log_losses(tp("off_log/log.jsonl"), 0, got, sizeof got);
    BT_CHECK(want[0] && !strcmp(want, got), "--offload adamw's losses differ:\n%s\nvs:\n%s", got, want);
    for (int s = 2; s <= STEPS; s += 2)
        BT_CHECK(same_state(ckpt(tp("ref"), s), ckpt(tp("off"), s), why, sizeof why), "--offload adamw, checkpoint of step %d: %s", s, why);
    const char *flag[2] = {"", "--offload adamw"};
    char from[2][512];
    snprintf(from[0], sizeof from[0], "%s", tp("off"));
    snprintf(from[1], sizeof from[1], "%s", tp("ref"));
    for (int k = 0; k < 2; k++) {
        char dir[64];
        snprintf(dir, sizeof dir, "off_res%d", k);
        snprintf(args, sizeof args, RUN " -x %d %s --ckpt-every 2 --ckpt-keep 0 --resume %s --ckpt-dir %s", STEPS, flag[k],
                 ckpt(from[k], 4), tp(dir));
        rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 0 && strstr(out, "after step 4"), "resume %s: exit %d: %s", flag[k], rc, out);
        BT_CHECK(same_state(ckpt(tp("ref"), STEPS), ckpt(tp(dir), STEPS), why, sizeof why), "resumed %s from %s: %s", flag[k],
                 k ? "the reference" : "the offloaded run", why);
    }
    snprintf(args, sizeof args, RUN " -x 2 --offload sgd");
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 2 && strstr(out, "--offload must be none or adamw, got 'sgd'"), "--offload sgd: exit %d: %s", rc, out);
}

/* a choice flag on a CPU run: "FLAG BAD" refused as a usage error whose message has bad_msg,
   "FLAG GPU_ONLY" refused with gpu_msg, "FLAG CPU_OK" trains */
static void choice_flag(const char *flag, const char *bad, const char *bad_msg, const char *gpu_only, const char *gpu_msg,
                        const char *cpu_ok) {
    char args[2000], out[65536];
    const char *val[3] = {bad, gpu_only, cpu_ok}, *msg[3] = {bad_msg, gpu_msg, "step "};
    for (int k = 0; k < 3; k++) {
        if (k == 2 && !have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
        snprintf(args, sizeof args, RUN " -x 2 %s %s", flag, val[k]);
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == (k < 2 ? 2 : 0) && strstr(out, msg[k]), "%s %s on a CPU: exit %d: %s", flag, val[k], rc, out);
    }
}
/* --weight-copy (a CPU run computes in fp32: the halves' runs, resumed bit for bit, are the GPU
   suite's resume part) and --grads (lazy ones need a GPU; the suite compares them with flat) */
static void test_weight_copy_flag(void) {
    choice_flag("--weight-copy", "thirds", "--weight-copy must be halves or separate, got 'thirds'", "halves",
                "--weight-copy halves needs a bf16 compute dtype", "separate");
}
static void test_grads_flag(void) {
    choice_flag("--grads", "sparse", "--grads must be lazy or flat, got 'sparse'", "lazy", "--grads lazy needs one process on a GPU", "flat");
}

/* finding 7: weights that are not finite in the file a run starts from (-e, --init-from,
   --resume) are refused before training, naming the file, not blamed on the learning rate */
static void test_nonfinite_weights_refused(void) {
    if (!have_data() || !reference_ok) { BT_SKIP(reference_ok ? "no data (make data)" : "no reference run"); return; }
    char args[2000], out[65536], err[512];
    gpt2 m;
    gpt2_config cfg;
    gpt2_config_from_preset("s2", BT_GPT2_VOCAB, &cfg);
    gpt2_build(&m, cfg, bt_cpu()); gpt2_init(&m, 5);
    bt_fill_(m.layers[1].fcb, INFINITY);
    BT_CHECK(gpt2_save(&m, tp("inf.bin"), err, sizeof err) == 0, "%s", err);
    gpt2_free(&m);
    ckpt_variant(ckpt(tp("ref"), 4), tp("nan.safetensors"), NULL, NULL, 1000);
    const char *cases[][2] = {{"-e %s " RUN_NO_E " -x 2", "inf.bin"}, {RUN_NO_E " -x 2 --init-from %s", "nan.safetensors"},
                              {RUN " -x %d --resume %s", "nan.safetensors"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (i == 2) snprintf(args, sizeof args, cases[i][0], STEPS, tp(cases[i][1]));
        else snprintf(args, sizeof args, cases[i][0], tp(cases[i][1]));
        int rc = train_run(args, out, sizeof out);
        char want[600];
        snprintf(want, sizeof want, "%s: its weights are not all finite", tp(cases[i][1]));
        BT_CHECK(rc == 1 && strstr(out, want) && !strstr(out, "training diverged") && !strstr(out, "step "), "'%s': exit %d: %s", args, rc, out);
    }
}

/* finding 8: --init-from refuses a Hugging Face file whose weight is an integer tensor (it was
   converted to floats), naming the tensor and its dtype; finding 7: a config.json that is there
   but cannot be read (a loop of links) says so, not "no config.json beside it" */
static void test_hf_bad_dtype_and_config_link(void) {
    gpt2 a, b; char err[1024], path[600], cj[600];
    gpt2_config got;
    gpt2_build(&a, gpt2_config_make(2, 2, 64, 16, 300), bt_cpu()); gpt2_init(&a, 9);
    mkdir(tp("hf_int"), 0755);
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    char name[160];
    int64_t ids[64] = {0}, shape[1] = {64};
    for (int i = 0; i < a.n_params; i++) {
        int tr = gpt2_hf_name(&a, i, "transformer.", name, sizeof name);
        if (!strcmp(name, "transformer.h.1.ln_2.bias")) bt_ckpt_writer_add(w, name, BT_CKPT_I64, 1, shape, ids);
        else bt_ckpt_writer_add_tensor(w, name, a.params[i], tr ? BT_CKPT_TRANSPOSE : 0, i == 0 ? a.cfg.V : 0);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", tp("hf_int"));
    BT_CHECK(bt_ckpt_writer_save(w, path) == 0, "%s", bt_ckpt_error());
    bt_ckpt_writer_free(w);
    int r = init_from(tp("hf_int"), &b, &got, err, sizeof err);   /* no config.json: H from the s2 preset */
    BT_CHECK(r == -1 && strstr(err, "tensor 'transformer.h.1.ln_2.bias' is I64") && strstr(err, "float"), "an I64 weight: %d %s", r, err);
    if (r == 0) gpt2_free(&b);
    snprintf(cj, sizeof cj, "%s/config.json", tp("hf_int"));
    BT_CHECK(symlink("config.json", cj) == 0, "symlink");
    r = init_from(tp("hf_int"), &b, &got, err, sizeof err);
    BT_CHECK(r == -1 && strstr(err, "config.json") && strstr(err, "Too many levels of symbolic links") && !strstr(err, "no config.json"),
             "config.json -> config.json: %d %s", r, err);
    if (r == 0) gpt2_free(&b);
    gpt2_free(&a);
}

int main(int argc, char **argv) {
    if (train_runs_child(argc, argv)) return train_runs_child_main(argc, argv);
    train_runs_init("test_train_ckpt");
    if (quick()) STEPS = 6;
    BT_RUN(test_resume_bit_exact);
    BT_RUN(test_kill9_resume);
    BT_RUN(test_sigint);
    BT_RUN(test_resume_auto_skips_damaged);
    BT_RUN(test_resume_config_mismatch);
    BT_RUN(test_skip_nonfinite);
    BT_RUN(test_failed_checkpoint_keeps_outputs);
    BT_RUN(test_rotation_failure_warns);
    BT_RUN(test_dir_belongs_to_one_run);
    BT_RUN(test_links_in_ckpt_dir);
    BT_RUN(test_hf_roundtrip);
    BT_RUN(test_hf_old_layout);
    BT_RUN(test_init_from_bad_files);
    BT_RUN(test_hf_runs);
    BT_RUN(test_ckpt_metadata_messages);
    BT_RUN(test_grad_dtype_field);
    BT_RUN(test_offload_adamw);
    BT_RUN(test_weight_copy_flag);
    BT_RUN(test_grads_flag);
    BT_RUN(test_nonfinite_weights_refused);
    BT_RUN(test_hf_bad_dtype_and_config_link);
    train_runs_done();
    return bt_test_summary("test_train_ckpt");
}
