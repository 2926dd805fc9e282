/* proc_test.h - process helpers shared by the multi-process tests (test_dist, test_parallel and
   their GPU twins): this process as the only rank, waiting for a child with a time limit, forking
   ranks, starting ranks through the --nproc launcher with their output in files, and (CUDA builds)
   counting GPUs in a child process so the parent never initialises CUDA before it forks.
   Include after bt_dist.h (bt_dist_spawn) and tests/bt_test.h (bt_test_now_ms, bt_test_sleep); it brings
   tests/bt_test_files.h (the scratch directory the launched ranks write their output into). */
#ifndef BT_PROC_TEST_H
#define BT_PROC_TEST_H
#include "tests/bt_test_files.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/wait.h>

/* waits for pid up to limit_s (then SIGKILL); returns the exit code, 128 + signal, or -1 */
static inline int wait_limit(pid_t pid, double limit_s) {
    double end = bt_test_now_ms() / 1e3 + limit_s;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0) return -1;
        if (bt_test_now_ms() / 1e3 > end) { kill(pid, SIGKILL); waitpid(pid, &st, 0); return -1; }
        bt_test_sleep(0.005);
    }
}

/* this process as the only rank, without a launcher (store_only: no NCCL communicators); *env
   must outlive the bt_dist */
static inline bt_dist *one_rank_init(bt_dist_env *env, bt_dist_opts *o, int store_only) {
    memset(env, 0, sizeof *env); memset(o, 0, sizeof *o);
    env->world = 1; env->local_world = 1;
    o->env = env; o->store_only = store_only;
    return bt_dist_init(o);
}

/* rank of world forked processes meeting at 127.0.0.1:port, collectives through the TCP store (no NCCL):
   the launcher variables torchrun would set, in *env and *o (for bt_dist_init; *env must outlive it) */
static inline void store_rank_opts(bt_dist_env *env, bt_dist_opts *o, int rank, int world, int port, double timeout_s) {
    memset(env, 0, sizeof *env); memset(o, 0, sizeof *o);
    env->launcher = BT_LAUNCHER_TORCHRUN; env->rank = rank; env->world = world; env->local_rank = rank; env->local_world = world;
    snprintf(env->master_addr, sizeof env->master_addr, "127.0.0.1");
    env->master_port = port;
    o->store_only = 1; o->env = env; o->timeout_s = timeout_s;
}

/* forks world processes running body(rank, arg); codes[k] = rank k's exit code (wait_limit's) */
typedef int (*proc_rank_body)(int rank, void *arg);
static inline void run_ranks(int world, proc_rank_body body, void *arg, int *codes, double limit_s) {
    pid_t pids[16];
    fflush(NULL);
    for (int k = 0; k < world && k < 16; k++) {
        pids[k] = fork();
        if (pids[k] == 0) _exit(body(k, arg));
    }
    for (int k = 0; k < world && k < 16; k++) codes[k] = wait_limit(pids[k], limit_s);
}

/* world forked ranks meeting through the TCP store (store_rank_opts, a 60 s timeout), each running
   check(its world communicator) with *fails (the test's per-rank failure counter, which check
   raises) zeroed first, then exiting non-zero when it failed; a BT_CHECK per rank that it exited 0 */
typedef void (*proc_comm_check)(bt_comm *c);
typedef struct { int port, world; proc_comm_check check; int *fails; } proc_world_args;
static inline int proc__world_body(int rank, void *arg) {
    proc_world_args *a = (proc_world_args *)arg;
    static bt_dist_env env;
    bt_dist_opts o;
    store_rank_opts(&env, &o, rank, a->world, a->port, 60);
    bt_dist *d = bt_dist_init(&o);
    *a->fails = 0;
    a->check(d->world_comm);
    fprintf(stderr, "rank %d of %d: %d failures\n", rank, a->world, *a->fails);
    bt_dist_shutdown(d);
    return *a->fails ? 1 : 0;
}
static inline void run_store_world(int world, proc_comm_check check, int *fails) {
    proc_world_args a = {bt_dist_free_port(NULL), world, check, fails};
    int codes[16];
    run_ranks(world, proc__world_body, &a, codes, 120);
    for (int k = 0; k < world && k < 16; k++)
        BT_CHECK(codes[k] == 0, "world %d: rank %d exited %d (its failures are above)", world, k, codes[k]);
}

/* forks a child that starts nproc ranks with the --nproc launcher (bt_dist_spawn, with its
   stop_delay_s and kill_grace_s), each running fn(rank), their stdout and stderr to the files out
   and err; returns the child's pid, whose exit code (wait_limit) is the launcher's */
typedef int (*proc_rank_fn)(int rank);
static inline pid_t start_launcher(int nproc, double stop_delay_s, double kill_grace_s, proc_rank_fn fn, const char *out, const char *err) {
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1); dup2(fe, 2); close(fo); close(fe);
        bt_spawn_opts o;
        memset(&o, 0, sizeof o);
        o.nproc = nproc; o.stop_delay_s = stop_delay_s; o.kill_grace_s = kill_grace_s;
        int rank = bt_dist_spawn(&o);
        if (rank < 0) { fprintf(stderr, "spawn: %s\n", bt_dist_error()); _exit(99); }
        int code = fn(rank);
        fflush(NULL);
        _exit(code);
    }
    return p;
}

#ifdef BT_CUDA
/* the number of GPUs, asked in a child (CUDA must not be initialised before the ranks fork) */
static inline int gpu_count(void) {
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) { int n = bt_k_device_count(); _exit(n > 100 ? 100 : n); }
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}
#define NEED_2_GPUS() do { int n__ = gpu_count(); if (n__ < 2) { BT_SKIP("needs 2 GPUs, found %d", n__); return; } } while (0)

/* two ranks (one per GPU) of fn through the launcher, their output in bt_test_dir's <name>_out.txt
   and <name>_err.txt (the latter's path into err); returns the launcher's exit code, -1 when it
   ran past limit_s; *secs (when not NULL) the time it took */
static inline int launch2(proc_rank_fn fn, const char *name, double stop_delay_s, double limit_s, char *err, size_t errlen, double *secs) {
    char out[512];
    snprintf(out, sizeof out, "%s/%s_out.txt", bt_test_dir, name);
    snprintf(err, errlen, "%s/%s_err.txt", bt_test_dir, name);
    double t0 = bt_test_now_ms() / 1e3;
    int code = wait_limit(start_launcher(2, stop_delay_s, 2, fn, out, err), limit_s);
    if (secs) *secs = bt_test_now_ms() / 1e3 - t0;
    return code;
}
#endif
#endif
