/* train_runs.h - runs of train_gpt2 in a child process, for the tests of the program
   (test_train_gpt2.c, test_train_ckpt.c, test_tp_gpt2.c, test_fsdp_gpt2.c, test_gpt2_mlir.c).

   A test binary that includes train_gpt2.c (with TRAIN_GPT2_NO_MAIN) is also the program: its
   main starts with
       if (train_runs_child(argc, argv)) return train_runs_child_main(argc, argv);
   and train_run("ARGS", out, cap) re-executes it as `--run-train ARGS`, a fresh process running
   train_gpt2's main as the program does (train_gpt2_main: its own launcher, signal handlers,
   exit code, output and, under ASan, leaks).
   train_runs_init("name") makes the test's scratch directory (tests/bt_test_files.h); tp("file")
   names a path in it; train_runs_done() removes it. The helpers are inline: each test uses some of them. */
#ifndef TRAIN_RUNS_H
#define TRAIN_RUNS_H
#include "tests/bt_test_files.h"
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char train_runs_exe[1024];
static inline int quick(void) { return bt_test_quick(); }
static inline int have_data(void) { return !access("data/tinyshakespeare_train.bin", R_OK) && !access("data/tinyshakespeare_val.bin", R_OK); }
static inline void sleep_ms(int ms) { struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L}; nanosleep(&ts, NULL); }

static inline const char *tp(const char *name) { return bt_test_path(name); }   /* a path in the scratch directory */
static inline void train_runs_init(const char *name) {
    ssize_t n = readlink("/proc/self/exe", train_runs_exe, sizeof train_runs_exe - 1);
    train_runs_exe[n > 0 ? n : 0] = 0;
    if (bt_test_dir_make(name)) exit(1);
}
static inline void train_runs_done(void) { bt_test_dir_remove(); }
/* this process was started as `--run-train ARGS`: train_gpt2's main, as the program runs it */
static inline int train_runs_child(int argc, char **argv) { return argc > 1 && !strcmp(argv[1], "--run-train"); }
static inline int train_runs_child_main(int argc, char **argv) { return train_gpt2_main(argc - 1, argv + 1); }

/* train_gpt2's flags from one line (split at spaces) into o: parse_args's result, err its reason. The
   options point into the line's copy, which stays until the fourth call after. */
static inline int train_parse(const char *line, train_opts *o, char *err, size_t errlen) {
    static char buf[4][512];
    static int k;
    char *argv[64];
    int argc = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s", line);
    argv[argc++] = (char *)"train_gpt2";
    for (char *t = strtok(buf[k], " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = t;
    train_default_opts(o);
    return parse_args(argc, argv, o, err, errlen);
}
static inline void slurp(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
}
static inline int lines_of(const char *path) {   /* -1: no such file */
    FILE *f = fopen(path, "rb");
    int n = 0, c;
    if (!f) return -1;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}
/* DIR's checkpoint of step s (bt_ckpt_path's name), in one of four rotating buffers */
static inline const char *ckpt(const char *dir, int step) {
    static char buf[4][600]; static int k;
    k = (k + 1) % 4;
    bt_ckpt_path(dir, step, buf[k], sizeof buf[k]);
    return buf[k];
}
/* 1 when two checkpoints hold the same bytes in params, adamw.m and adamw.v and the same values of
   the metadata keys (a NULL-ended list, or NULL); else 0 with why saying what differs */
static inline int same_checkpoints(const char *a, const char *b, const char *const *keys, char *why, size_t n) {
    bt_ckpt_file *fa = bt_ckpt_open(a, BT_CKPT_REQUIRE_CHECKSUMS), *fb = bt_ckpt_open(b, BT_CKPT_REQUIRE_CHECKSUMS);
    static const char *const names[3] = {"params", "adamw.m", "adamw.v"};
    int same = fa && fb;
    if (!same) snprintf(why, n, "cannot open: %.200s", bt_ckpt_error());
    for (int i = 0; same && i < 3; i++) {
        const bt_ckpt_info *ia = bt_ckpt_find(fa, names[i]), *ib = bt_ckpt_find(fb, names[i]);
        if (!ia || !ib || ia->nbytes != ib->nbytes) { snprintf(why, n, "%s: missing or of another size", names[i]); same = 0; break; }
        void *x = malloc(ia->nbytes), *y = malloc(ib->nbytes);
        if (bt_ckpt_read(fa, names[i], x, ia->nbytes) || bt_ckpt_read(fb, names[i], y, ib->nbytes)) { snprintf(why, n, "read: %.200s", bt_ckpt_error()); same = 0; }
        else if (memcmp(x, y, ia->nbytes)) { snprintf(why, n, "%s differs", names[i]); same = 0; }
        free(x); free(y);
    }
    for (int i = 0; same && keys && keys[i]; i++) {
        const char *va = bt_ckpt_meta_get(bt_ckpt_file_meta(fa), keys[i]), *vb = bt_ckpt_meta_get(bt_ckpt_file_meta(fb), keys[i]);
        if (!va || !vb || strcmp(va, vb)) { snprintf(why, n, "%s: %s vs %s", keys[i], va ? va : "-", vb ? vb : "-"); same = 0; }
    }
    bt_ckpt_close(fa); bt_ckpt_close(fb);
    return same;
}
/* starts `--run-train ARGS` (split at spaces), its stdout and stderr into out_path; its pid.
   fsize > 0: the child's files may not grow past fsize bytes (RLIMIT_FSIZE, SIGXFSZ ignored): a
   write beyond fails with EFBIG, as on a full disk */
static inline pid_t train_spawn_limited(const char *args, const char *out_path, long long fsize) {
    char buf[4096], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", args);
    argv[argc++] = train_runs_exe;
    argv[argc++] = (char *)"--run-train";
    for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
        if (fsize > 0) {
            struct rlimit rl = {(rlim_t)fsize, (rlim_t)fsize};
            signal(SIGXFSZ, SIG_IGN);
            if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(126);
        }
        execv(train_runs_exe, argv);
        _exit(127);
    }
    return pid;
}
static inline pid_t train_spawn(const char *args, const char *out_path) { return train_spawn_limited(args, out_path, 0); }
/* waits for pid: its exit code, 128 + signal when a signal ended it, -1 past timeout_s (killed) */
static inline int train_wait(pid_t pid, double timeout_s) {
    int st;
    for (double t = 0; t < timeout_s; t += 0.01) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0) return -1;
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}
/* a whole run: its exit code, its output (stdout and stderr) into out */
static inline int train_run(const char *args, char *out, size_t cap) {
    const char *path = tp("run.out");
    int rc = train_wait(train_spawn(args, path), 300);
    slurp(path, out, cap);
    return rc;
}
/* the train_loss column of DIR/log.jsonl; the count, -1 without the file */
/* the step, loss, lr and norm of each log line of a step > after, as the log printed them: the part
   of each line before "ms" (timings differ between runs, these must not) */
static inline void log_losses(const char *path, int after, char *out, size_t cap) {
    char line[2048];
    FILE *f = fopen(path, "rb");
    size_t len = 0;
    out[0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        int step;
        char *ms = strstr(line, ", \"ms\"");
        if (sscanf(line, "{\"step\": %d", &step) != 1 || step <= after || !ms) continue;
        *ms = 0;
        len += (size_t)snprintf(out + len, cap - len, "%s\n", line);
        if (len >= cap) break;
    }
    if (f) fclose(f);
}
static inline int read_losses(const char *dir, double *loss, int cap) {
    char path[800], line[2048];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    if (!f) return -1;
    while (n < cap && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"train_loss\": ");
        if (p) loss[n++] = atof(p + 14);
    }
    fclose(f);
    return n;
}

/* ---- several ranks of this binary on the CPU (test_tp_gpt2.c, test_fsdp_gpt2.c): each started
   with the launcher variables (RANK, WORLD_SIZE, ...), collectives through the TCP store; and the
   files such runs leave (llm.c model files, checkpoints). Need tests/bt_test.h (BT_CHECK). ---- */
/* runs `nproc` ranks of this binary with args (and the launcher variables), rank 0's output in
   out; 0 when every rank exited 0 */
static inline int run_ranks(int nproc, const char *args, const char *tag, char *out, size_t cap) {
    char cmd[8192], outfile[700];
    int port = bt_dist_free_port(NULL), len = 0;
    snprintf(outfile, sizeof outfile, "%s/%s.out", bt_test_dir, tag);
    len += snprintf(cmd + len, sizeof cmd - len, "(");
    for (int r = 0; r < nproc; r++)
        len += snprintf(cmd + len, sizeof cmd - len,
                        "RANK=%d WORLD_SIZE=%d LOCAL_RANK=%d LOCAL_WORLD_SIZE=%d MASTER_ADDR=127.0.0.1 MASTER_PORT=%d OMP_NUM_THREADS=1 "
                        "timeout 120 %s --run-train %s > %s%s 2>&1 & pids=\"$pids $!\"; ", r, nproc, r, nproc, port, train_runs_exe, args, outfile, r ? ".r1" : "");
    snprintf(cmd + len, sizeof cmd - len, "fail=0; for j in $pids; do wait $j || fail=$?; done; exit $fail)");
    int rc = system(cmd);
    out[0] = 0;
    FILE *f = fopen(outfile, "rb");
    if (f) { size_t n = fread(out, 1, cap - 1, f); out[n] = 0; fclose(f); }
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}
static inline float *read_model(const char *path, int64_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    *n = (size - 1024) / 4;
    float *w = (float *)malloc((size_t)(size > 1024 ? size - 1024 : 1));
    fseek(f, 1024, SEEK_SET);
    if (fread(w, 4, (size_t)*n, f) != (size_t)*n) *n = 0;
    fclose(f);
    return w;
}
static inline double rel_diff(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { double d = (double)a[i] - b[i]; num += d * d; den += (double)b[i] * b[i]; }
    return num != num ? INFINITY : sqrt(num) / (den > 0 ? sqrt(den) : 1);
}

/* a checkpoint's 1-D tensor `name` as floats (malloc'd, *n elements); NULL when it cannot be read */
static inline float *ckpt_tensor(const char *path, const char *name, int64_t *n) {
    bt_ckpt_file *f = bt_ckpt_open(path, BT_CKPT_REQUIRE_CHECKSUMS);
    const bt_ckpt_info *t = f ? bt_ckpt_find(f, name) : NULL;
    float *x = t && t->ndim == 1 ? (float *)malloc(sizeof(float) * (size_t)t->shape[0]) : NULL;
    *n = 0;
    if (x) {
        bt_scope_begin();
        if (bt_ckpt_load(f, name, bt_from_blob(x, bt_shape1(t->shape[0]), BT_F32, bt_cpu()), 0)) { free(x); x = NULL; }
        else *n = t->shape[0];
        bt_scope_end();
    }
    bt_ckpt_close(f);
    return x;
}
/* two checkpoints' weights and AdamW moments: the worst relative difference (norm) of the three
   tensors, *bitwise = 1 when all three are equal bit for bit; INFINITY when one is missing */
static inline double ckpt_diff(const char *a, const char *b, int *bitwise) {
    static const char *const names[3] = {"params", "adamw.m", "adamw.v"};
    double worst = 0;
    *bitwise = 1;
    for (int k = 0; k < 3; k++) {
        int64_t na = 0, nb = 0;
        float *x = ckpt_tensor(a, names[k], &na), *y = ckpt_tensor(b, names[k], &nb);
        int ok = x && y && na == nb && na > 0, same = ok && !memcmp(x, y, sizeof(float) * (size_t)na);
        worst = fmax(worst, !ok ? INFINITY : same ? 0 : rel_diff(x, y, na));
        *bitwise &= same;
        free(x); free(y);
    }
    return worst;
}
static inline void ckpt_file(const char *dir, int step, char *path, size_t n) {
    char d[800];
    snprintf(d, sizeof d, "%s/%s", bt_test_dir, dir);
    if (bt_ckpt_path(d, step, path, n)) path[0] = 0;
}
/* runs nproc ranks with args, `-o bt_test_dir/tag`; the losses of its log into loss (cap), their count
   (-1 when the run failed: said) */
static inline int run_logged(int nproc, const char *args, const char *tag, double *loss, int cap) {
    char full[2400], dir[700], out[65536];
    snprintf(dir, sizeof dir, "%s/%s", bt_test_dir, tag);
    snprintf(full, sizeof full, "%s -o %s", args, dir);
    int rc = run_ranks(nproc, full, tag, out, sizeof out), n = rc ? -1 : read_losses(dir, loss, cap);
    BT_CHECK(rc == 0 && n > 0, "%s (%d process%s): exit %d, %d losses: %s", args, nproc, nproc > 1 ? "es" : "", rc, n, out);
    return rc ? -1 : n;
}
/* worst relative difference of a's n losses from b's */
static inline double loss_diff(const double *a, const double *b, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) w = fmax(w, fabs(a[i] - b[i]) / fabs(b[i]));
    return w;
}

#endif /* TRAIN_RUNS_H */
