/* test_dist.c - bt_dist.h on the CPU: the launchers' environments (each launcher, each malformed
   case), mesh arithmetic, the bucket planner (fixed and random parameter lists), the TCP store
   with 2-4 forked processes on loopback (broadcast, all-gather, barrier, a port nobody listens
   on, mismatched worlds), strangers at its rendezvous (forged hellos, garbage, silent
   connections, a process without the secret, a rank 0 without it; SHA-256 and HMAC against
   their standards' vectors; a loopback MASTER_ADDR listened on only there), liveness (a killed rank is reported by the survivors; a clean shutdown
   reports nothing), the --nproc launcher (stdout of rank 0 only, stderr prefixed, a failing rank
   stops the others, SIGTERM passed on), the DDP engine's bookkeeping on one rank with real
   autograd hooks, and the one-rank collectives. Every multi-process test has a hard time limit. */
#define _POSIX_C_SOURCE 200809L
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#define BT_DIST_IMPLEMENTATION
#include "bt_autograd.h"
#include "bt_dist.h"
#include "tests/bt_test.h"
#include "tests/proc_test.h"

#include <stdlib.h>
#include <unistd.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <ifaddrs.h>


/* ---- helpers ---------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {   /* xorshift64* */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}
static int64_t rnd_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }
static void fill_pattern(unsigned char *p, size_t n, uint64_t seed) {   /* never all zeros */
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(((seed + 1) * 2654435761u + i * 40503u) >> 7 | 1);
}

static int count_in_file(const char *path, const char *needle) {
    char *s = bt_test_read_file(path, NULL);
    int n = 0;
    for (char *p = s; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    free(s);
    return n;
}
static void path_of(char *out, size_t n, const char *name, int rank) { snprintf(out, n, "%s/%s_%d.txt", bt_test_dir, name, rank); }

/* ---- 1. launcher environments ----------------------------------------------------------- */

static const char *fake_get(const char *name, void *user) {
    const char **kv = (const char **)user;
    size_t n = strlen(name);
    for (; *kv; kv++) if (!strncmp(*kv, name, n) && (*kv)[n] == '=') return *kv + n + 1;
    return NULL;
}
static int parse(const char **kv, bt_dist_env *e) { return bt_dist_env_parse(fake_get, (void *)kv, e); }
#define ENV_ERR(msg, ...) do { const char *kv__[] = {__VA_ARGS__, NULL}; bt_dist_env e__; \
    BT_CHECK(parse(kv__, &e__) == -1, "accepted a bad environment; expected \"%s\"", msg); \
    BT_CHECK(strstr(bt_dist_error(), msg), "error \"%s\" lacks \"%s\"", bt_dist_error(), msg); } while (0)

static void test_env_single(void) {
    const char *kv[] = {"PATH=/bin", NULL};
    bt_dist_env e;
    BT_CHECK(parse(kv, &e) == 0, "%s", bt_dist_error());
    BT_CHECK(e.launcher == BT_LAUNCHER_NONE && e.world == 1 && e.rank == 0 && e.local_rank == 0, "single: %d %d %d", e.launcher, e.world, e.rank);
}

static void test_env_torchrun(void) {
    const char *kv[] = {"RANK=3", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=node1.cluster", "MASTER_PORT=1234", NULL};
    bt_dist_env e;
    BT_CHECK(parse(kv, &e) == 0, "%s", bt_dist_error());
    BT_CHECK(e.launcher == BT_LAUNCHER_TORCHRUN && e.rank == 3 && e.world == 8 && e.local_rank == 1 && e.local_world == 2,
             "fields %d %d %d %d", e.rank, e.world, e.local_rank, e.local_world);
    BT_CHECK(!strcmp(e.master_addr, "node1.cluster") && e.master_port == 1234, "master %s:%d", e.master_addr, e.master_port);
    BT_CHECK(!strcmp(bt_launcher_name(e.launcher), "torchrun"), "name %s", bt_launcher_name(e.launcher));
    const char *kv2[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=10.0.0.1", NULL};
    BT_CHECK(parse(kv2, &e) == 0 && e.master_port == 29500 && e.local_world == 0, "default port %d", e.master_port);
    BT_CHECK(!e.secret[0] && !e.secret_set, "no BT_DIST_SECRET: secret \"%s\"", e.secret);
    const char *kv3[] = {"RANK=0", "WORLD_SIZE=1", "BT_DIST_SECRET=", NULL};   /* one process: nothing else needed */
    BT_CHECK(parse(kv3, &e) == 0 && e.world == 1, "world 1: %s", bt_dist_error());
    const char *kv4[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h", "BT_DIST_SECRET=f00d 42", "SLURM_JOB_ID=7", NULL};
    BT_CHECK(parse(kv4, &e) == 0 && !strcmp(e.secret, "f00d 42") && e.secret_set == 1, "BT_DIST_SECRET: \"%s\"", e.secret);
}

static void test_env_torchrun_errors(void) {
    ENV_ERR("WORLD_SIZE is not", "RANK=1");
    ENV_ERR("RANK is not", "WORLD_SIZE=2");
    ENV_ERR("RANK=2 is not below WORLD_SIZE=2", "RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=h");
    ENV_ERR("RANK=\"x\"", "RANK=x", "WORLD_SIZE=2");
    ENV_ERR("RANK=\"-1\"", "RANK=-1", "WORLD_SIZE=2");
    ENV_ERR("RANK=\" 1\"", "RANK= 1", "WORLD_SIZE=2");
    ENV_ERR("WORLD_SIZE=\"2.5\"", "RANK=1", "WORLD_SIZE=2.5");
    ENV_ERR("RANK is set but empty", "RANK=", "WORLD_SIZE=2");
    ENV_ERR("WORLD_SIZE=0 is out of range", "RANK=0", "WORLD_SIZE=0");
    ENV_ERR("MASTER_ADDR is not set", "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1");
    ENV_ERR("MASTER_ADDR is not set", "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=");
    ENV_ERR("MASTER_PORT=70000 is out of range", "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h", "MASTER_PORT=70000");
    ENV_ERR("MASTER_PORT=0 is out of range", "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h", "MASTER_PORT=0");
    ENV_ERR("MASTER_PORT=\"http\"", "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h", "MASTER_PORT=http");
    ENV_ERR("LOCAL_RANK is not set", "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h");
    ENV_ERR("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2", "RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=h");
    ENV_ERR("LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4", "RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=8", "MASTER_ADDR=h");
    ENV_ERR("LOCAL_RANK=4 is not below WORLD_SIZE=4", "RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=4", "MASTER_ADDR=h");
    ENV_ERR("BT_DIST_SECRET is set but empty", "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h", "BT_DIST_SECRET=");
    char long_secret[300 + 16] = "BT_DIST_SECRET=";
    memset(long_secret + 15, 'x', 300);
    long_secret[315] = 0;
    ENV_ERR("BT_DIST_SECRET is longer than 255", "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h", long_secret);
}

static void test_env_mpi(void) {
    const char *kv[] = {"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=16", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                        "OMPI_COMM_WORLD_LOCAL_SIZE=4", "MASTER_ADDR=head", "SLURM_PROCID=0", "SLURM_NTASKS=1", NULL};
    bt_dist_env e;
    BT_CHECK(parse(kv, &e) == 0, "%s", bt_dist_error());
    BT_CHECK(e.launcher == BT_LAUNCHER_MPI && e.rank == 5 && e.world == 16 && e.local_rank == 1 && e.local_world == 4 &&
             !strcmp(e.master_addr, "head") && e.master_port == 29500, "mpi fields %d %d %d %d %s", e.rank, e.world, e.local_rank,
             e.local_world, e.master_addr);
    ENV_ERR("mpirun -x MASTER_ADDR", "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1",
            "OMPI_COMM_WORLD_LOCAL_SIZE=2");
    ENV_ERR("OMPI_COMM_WORLD_LOCAL_RANK is not set", "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2");
    ENV_ERR("OMPI_COMM_WORLD_RANK=3 is not below OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=2",
            "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2", "MASTER_ADDR=h");
    /* torchrun's variables win over Open MPI's and Slurm's */
    const char *kv2[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=h", "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=4", NULL};
    BT_CHECK(parse(kv2, &e) == 0 && e.launcher == BT_LAUNCHER_TORCHRUN && e.world == 2, "precedence: launcher %d", e.launcher);
}

static void test_env_slurm(void) {
    const char *kv[] = {"SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1", "SLURM_TASKS_PER_NODE=2(x4)", "SLURM_NODEID=2",
                        "SLURM_JOB_NODELIST=gpu[07-10]", "SLURM_JOB_ID=123456", NULL};
    bt_dist_env e;
    BT_CHECK(parse(kv, &e) == 0, "%s", bt_dist_error());
    BT_CHECK(e.launcher == BT_LAUNCHER_SLURM && e.rank == 5 && e.world == 8 && e.local_rank == 1 && e.local_world == 2,
             "slurm fields %d %d %d %d", e.rank, e.world, e.local_rank, e.local_world);
    BT_CHECK(!strcmp(e.master_addr, "gpu07") && e.master_port == 20000 + 123456 % 20000, "master %s:%d", e.master_addr, e.master_port);
    BT_CHECK(!strcmp(e.secret, "slurm job 123456") && !e.secret_set, "no BT_DIST_SECRET under Slurm: \"%s\"", e.secret);
    /* the step's variables first; uneven tasks per node; a two-bracket host list */
    const char *kv2[] = {"SLURM_PROCID=3", "SLURM_NTASKS=16", "SLURM_STEP_NUM_TASKS=5", "SLURM_LOCALID=0",
                         "SLURM_STEP_TASKS_PER_NODE=3,2", "SLURM_TASKS_PER_NODE=9", "SLURM_NODEID=1",
                         "SLURM_STEP_NODELIST=rack[1-2]-node[03-04,9]-ib,login", "SLURM_JOB_NODELIST=x[1-9]", NULL};
    BT_CHECK(parse(kv2, &e) == 0, "%s", bt_dist_error());
    BT_CHECK(e.world == 5 && e.local_world == 2 && !strcmp(e.master_addr, "rack1-node03-ib") && e.master_port == 29500,
             "step: world %d local %d master %s:%d", e.world, e.local_world, e.master_addr, e.master_port);
    const char *kv3[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0", "SLURM_NTASKS_PER_NODE=4", "SLURM_NODELIST=a,b",
                         "MASTER_ADDR=10.1.1.1", "MASTER_PORT=4242", NULL};
    BT_CHECK(parse(kv3, &e) == 0 && e.local_world == 4 && !strcmp(e.master_addr, "10.1.1.1") && e.master_port == 4242,
             "overrides: local %d master %s:%d", e.local_world, e.master_addr, e.master_port);
    const char *kv4[] = {"SLURM_PROCID=0", "SLURM_NTASKS=6", "SLURM_LOCALID=0", "SLURM_TASKS_PER_NODE=3,2(x2)", "SLURM_NODELIST=n1", NULL};
    BT_CHECK(parse(kv4, &e) == 0 && e.local_world == 0 && !strcmp(e.master_addr, "n1"), "uneven without a node id: %d", e.local_world);
    ENV_ERR("SLURM_JOB_NODELIST=\"gpu[07-10\"", "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SLURM_JOB_NODELIST=gpu[07-10");
    ENV_ERR("SLURM_NODELIST=\"a[x-1]\"", "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SLURM_NODELIST=a[x-1]");
    ENV_ERR("SLURM_TASKS_PER_NODE=\"2(x\"", "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SLURM_TASKS_PER_NODE=2(x", "MASTER_ADDR=h");
    ENV_ERR("SLURM_TASKS_PER_NODE=\"0\"", "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SLURM_TASKS_PER_NODE=0", "MASTER_ADDR=h");
    ENV_ERR("none of SLURM_STEP_NUM_TASKS", "SLURM_PROCID=0", "SLURM_LOCALID=0");
    ENV_ERR("SLURM_LOCALID is not set", "SLURM_PROCID=0", "SLURM_NTASKS=2");
    ENV_ERR("set MASTER_ADDR", "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0");
    ENV_ERR("SLURM_PROCID=2 is not below SLURM_NTASKS=2", "SLURM_PROCID=2", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "MASTER_ADDR=h");
    ENV_ERR("SLURM_LOCALID=2 is not below SLURM_NTASKS_PER_NODE=2", "SLURM_PROCID=1", "SLURM_NTASKS=4", "SLURM_LOCALID=2",
            "SLURM_NTASKS_PER_NODE=2", "MASTER_ADDR=h");
    ENV_ERR("SLURM_JOB_ID=\"12a\"", "SLURM_PROCID=1", "SLURM_NTASKS=4", "SLURM_LOCALID=1", "MASTER_ADDR=h", "SLURM_JOB_ID=12a");
}

/* ---- 2. mesh ---------------------------------------------------------------------------- */

static void test_mesh(void) {
    static const int shapes[][3] = {{16, 2, 2}, {8, 1, 1}, {8, 8, 1}, {12, 3, 2}, {1, 1, 1}, {24, 2, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        bt_mesh m;
        int W = shapes[s][0], TP = shapes[s][1], CP = shapes[s][2];
        BT_CHECK(bt_mesh_init(&m, W, TP, CP) == 0 && m.dp * m.tp * m.cp == W && m.dp == W / (TP * CP), "mesh %d %d %d", W, TP, CP);
        int seen[64] = {0};
        for (int r = 0; r < W; r++) {
            int dp = bt_mesh_coord(&m, r, BT_MESH_DP), tp = bt_mesh_coord(&m, r, BT_MESH_TP), cp = bt_mesh_coord(&m, r, BT_MESH_CP);
            BT_CHECK(bt_mesh_rank(&m, dp, tp, cp) == r, "round trip of rank %d", r);
            BT_CHECK(r == (dp * CP + cp) * TP + tp, "rank %d is not (dp*cp + cp_i)*tp + tp_i", r);
            seen[r]++;
            for (int a = 0; a < 3; a++) {
                int g[64], n = bt_mesh_group(&m, r, (bt_mesh_axis)a, g), mine = 0;
                BT_CHECK(n == bt_mesh_size(&m, (bt_mesh_axis)a), "group size %d", n);
                for (int i = 0; i < n; i++) {
                    BT_CHECK(bt_mesh_coord(&m, g[i], (bt_mesh_axis)a) == i, "member %d of axis %d has coordinate %d", i, a,
                             bt_mesh_coord(&m, g[i], (bt_mesh_axis)a));
                    BT_CHECK(bt_mesh_color(&m, g[i], (bt_mesh_axis)a) == bt_mesh_color(&m, r, (bt_mesh_axis)a), "one group, two colors");
                    for (int b = 0; b < 3; b++)
                        if (b != a) BT_CHECK(bt_mesh_coord(&m, g[i], (bt_mesh_axis)b) == bt_mesh_coord(&m, r, (bt_mesh_axis)b), "other coords differ");
                    mine += g[i] == r;
                }
                BT_CHECK(mine == 1, "rank %d appears %d times in its own group", r, mine);
            }
        }
        for (int r = 0; r < W; r++) BT_CHECK(seen[r] == 1, "rank %d", r);
    }
    bt_mesh m;
    BT_CHECK(bt_mesh_init(&m, 16, 2, 2) == 0 && bt_mesh_coord(&m, 1, BT_MESH_TP) == 1 && bt_mesh_coord(&m, 2, BT_MESH_CP) == 1 &&
             bt_mesh_coord(&m, 4, BT_MESH_DP) == 1, "tp fastest, then cp, then dp");
    BT_CHECK(bt_mesh_init(&m, 6, 4, 1) == -1 && strstr(bt_dist_error(), "not divisible"), "6 / 4: %s", bt_dist_error());
    BT_CHECK(bt_mesh_init(&m, 8, 0, 1) == -1 && strstr(bt_dist_error(), ">= 1"), "tp 0: %s", bt_dist_error());
    BT_CHECK(bt_mesh_init(&m, 0, 1, 1) == -1 && strstr(bt_dist_error(), "world size 0"), "world 0: %s", bt_dist_error());
}

/* ---- 3. bucket planner ------------------------------------------------------------------ */

/* every parameter in exactly one bucket, buckets contiguous, disjoint, in backward order, at
   parameter boundaries, within the cap unless alone, and greedy (the next one did not fit) */
static int check_plan(const bt_bucket_plan *p, const bt_param_span *ps, int n, size_t es, size_t cap) {
    int bad = 0, *count = (int *)calloc((size_t)n + 1, sizeof(int));
    int64_t capn = (int64_t)(cap / es);
    for (int b = 0; b < p->n_buckets; b++) {
        const bt_bucket *B = &p->buckets[b];
        int lo_ok = 0, hi_ok = 0;
        if (B->count < 1 || B->lo > B->hi) bad++;
        if (B->count > 1 && B->hi - B->lo > capn) bad++;
        if (b + 1 < p->n_buckets && p->buckets[b + 1].hi > B->lo) bad++;                      /* backward, disjoint */
        if (b + 1 < p->n_buckets) {                                                              /* greedy */
            const bt_param_span *nx = &ps[p->order[p->buckets[b + 1].first + p->buckets[b + 1].count - 1]];
            if (B->hi - nx->offset <= capn) bad++;
        }
        for (int k = B->first; k < B->first + B->count; k++) {
            int i = p->order[k];
            count[i]++;
            if (p->param_bucket[i] != b || ps[i].offset < B->lo || ps[i].offset + ps[i].numel > B->hi) bad++;
            lo_ok |= ps[i].offset == B->lo;
            hi_ok |= ps[i].offset + ps[i].numel == B->hi;
            if (k > 0 && ps[p->order[k - 1]].offset < ps[i].offset) bad++;                      /* descending */
        }
        if (!lo_ok || !hi_ok) bad++;
    }
    for (int i = 0; i < n; i++) if (count[i] != 1) bad++;
    if (n && p->buckets[p->param_bucket[p->order[0]]].hi < ps[p->order[0]].offset + ps[p->order[0]].numel) bad++;
    free(count);
    return bad;
}

static void test_planner_fixed(void) {
    bt_param_span ps[4] = {{0, 10}, {10, 20}, {30, 30}, {60, 40}};
    bt_bucket_plan p;
    BT_CHECK(bt_bucket_plan_make(&p, ps, 4, 4, 200) == 0, "%s", bt_dist_error());
    BT_CHECK(p.n_buckets == 3, "%d buckets", p.n_buckets);
    if (p.n_buckets == 3) {
        BT_CHECK(p.buckets[0].lo == 60 && p.buckets[0].hi == 100 && p.buckets[0].count == 1, "bucket 0 [%lld, %lld)",
                 (long long)p.buckets[0].lo, (long long)p.buckets[0].hi);
        BT_CHECK(p.buckets[1].lo == 10 && p.buckets[1].hi == 60 && p.buckets[1].count == 2, "bucket 1 [%lld, %lld)",
                 (long long)p.buckets[1].lo, (long long)p.buckets[1].hi);
        BT_CHECK(p.buckets[2].lo == 0 && p.buckets[2].hi == 10, "bucket 2");
        BT_CHECK(p.param_bucket[0] == 2 && p.param_bucket[1] == 1 && p.param_bucket[2] == 1 && p.param_bucket[3] == 0, "param buckets");
    }
    BT_CHECK(check_plan(&p, ps, 4, 4, 200) == 0, "invariants");
    bt_bucket_plan_free(&p);
    /* a parameter larger than the cap gets a bucket alone; the default cap holds everything small */
    bt_param_span big[3] = {{0, 5}, {5, 1000}, {1005, 5}};
    BT_CHECK(bt_bucket_plan_make(&p, big, 3, 4, 100) == 0 && p.n_buckets == 3 && p.buckets[1].count == 1 && p.buckets[1].lo == 5,
             "oversize: %d buckets", p.n_buckets);
    bt_bucket_plan_free(&p);
    BT_CHECK(bt_bucket_plan_make(&p, big, 3, 4, 0) == 0 && p.n_buckets == 1 && p.buckets[0].lo == 0 && p.buckets[0].hi == 1010,
             "default cap: %d buckets", p.n_buckets);
    bt_bucket_plan_free(&p);
    BT_CHECK(bt_bucket_plan_make(&p, NULL, 0, 4, 0) == 0 && p.n_buckets == 0, "no parameters");
    bt_bucket_plan_free(&p);
    bt_param_span ov[2] = {{0, 10}, {5, 10}};
    BT_CHECK(bt_bucket_plan_make(&p, ov, 2, 4, 0) == -1 && strstr(bt_dist_error(), "overlap"), "overlap: %s", bt_dist_error());
    bt_param_span neg[1] = {{-1, 10}};
    BT_CHECK(bt_bucket_plan_make(&p, neg, 1, 4, 0) == -1 && strstr(bt_dist_error(), "offset -1"), "negative: %s", bt_dist_error());
    BT_CHECK(bt_shard_numel(10, 3, 1) == 4 && bt_shard_numel(10, 3, 8) == 8 && bt_shard_numel(100, 8, 16) == 16 &&
             bt_shard_numel(128, 8, 16) == 16, "shard sizes");
}

static void test_planner_random(void) {
    bt_param_span ps[80];
    int failures = 0;
    for (int trial = 0; trial < 300; trial++) {
        int n = (int)rnd_in(1, 80);
        size_t es = rnd() & 1 ? 4 : 2, cap = (size_t)rnd_in(64, 6000);
        int64_t at = rnd_in(0, 50);
        for (int i = 0; i < n; i++) {   /* increasing offsets with gaps; some empty, some over the cap */
            ps[i].offset = at;
            ps[i].numel = rnd() % 10 == 0 ? 0 : rnd() % 7 == 0 ? rnd_in(1, 4000) : rnd_in(1, 300);
            at += ps[i].numel + (rnd() % 3 == 0 ? rnd_in(1, 5) : 0);
        }
        for (int i = n - 1; i > 0; i--) {   /* hand them over in any order */
            int j = (int)rnd_in(0, i);
            bt_param_span t = ps[i]; ps[i] = ps[j]; ps[j] = t;
        }
        bt_bucket_plan p;
        if (bt_bucket_plan_make(&p, ps, n, es, cap)) { failures++; continue; }
        int bad = check_plan(&p, ps, n, es, cap);
        if (bad) fprintf(stderr, "  trial %d: n %d es %zu cap %zu: %d violations\n", trial, n, es, cap, bad);
        failures += bad != 0;
        bt_bucket_plan_free(&p);
    }
    BT_CHECK(failures == 0, "%d of 300 random plans broke an invariant", failures);
}

/* ---- 5. TCP store ----------------------------------------------------------------------- */

typedef struct { int port, world; double rank0_delay; } store_args;

static int store_body(int rank, void *arg) {
    store_args *a = (store_args *)arg;
    if (rank == 0) bt__sleep(a->rank0_delay);   /* the others must retry while rank 0 starts */
    bt_store *s = bt_store_open("127.0.0.1", a->port, rank, a->world, 10, NULL);
    if (!s) { fprintf(stderr, "rank %d: %s\n", rank, bt_dist_error()); return 10; }
    unsigned char id[128], want[128], blob[24], all[16 * 24];
    fill_pattern(want, sizeof want, 77);
    if (rank == 0) memcpy(id, want, sizeof id); else memset(id, 0, sizeof id);
    if (bt_store_broadcast(s, id, sizeof id) || memcmp(id, want, sizeof id)) return 11;
    fill_pattern(blob, sizeof blob, (uint64_t)rank);
    if (bt_store_allgather(s, blob, all, sizeof blob)) return 12;
    for (int k = 0; k < a->world; k++) {
        fill_pattern(blob, sizeof blob, (uint64_t)k);
        if (memcmp(all + k * 24, blob, 24)) return 13;
    }
    if (rank == a->world - 1) bt__sleep(0.3);   /* nobody leaves the barrier before the last arrives */
    double t0 = bt__now();
    if (bt_store_barrier(s)) return 14;
    if (rank != a->world - 1 && bt__now() - t0 < 0.2) return 15;
    if (bt_store_barrier(s) || bt_store_allgather(s, NULL, NULL, 0)) return 16;
    bt_store_close(s);
    return 0;
}

static void test_store_ops(void) {
    for (int world = 2; world <= 4; world++) {
        store_args a = {bt_dist_free_port(NULL), world, world == 3 ? 0.3 : 0.0};
        int codes[16];
        double t0 = bt__now();
        run_ranks(world, store_body, &a, codes, 20);
        for (int k = 0; k < world; k++) BT_CHECK(codes[k] == 0, "world %d rank %d exited %d", world, k, codes[k]);
        BT_CHECK(bt__now() - t0 < 10, "world %d took %.1f s", world, bt__now() - t0);
    }
}

/* a socket listening on 127.0.0.1:port, or -1 */
static int raw_listen(int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET; a.sin_port = htons((uint16_t)port); a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4))) { close(fd); return -1; }
    return fd;
}

static void test_store_timeouts(void) {
    int port = bt_dist_free_port(NULL);
    double t0 = bt__now();
    bt_store *s = bt_store_open("127.0.0.1", port, 1, 2, 0.5, NULL);
    double dt = bt__now() - t0;
    char want[128];
    snprintf(want, sizeof want, "could not reach rank 0 at 127.0.0.1:%d after", port);
    BT_CHECK(!s && strstr(bt_dist_error(), want), "no listener: %s", bt_dist_error());
    BT_CHECK(dt >= 0.45 && dt < 3.0, "gave up after %.2f s, timeout 0.5 s", dt);
    t0 = bt__now();
    s = bt_store_open("127.0.0.1", port, 0, 3, 0.5, NULL);
    dt = bt__now() - t0;
    BT_CHECK(!s && strstr(bt_dist_error(), "waiting for rank(s) 1, 2 to connect"), "no peers: %s", bt_dist_error());
    BT_CHECK(dt >= 0.45 && dt < 3.0, "rank 0 gave up after %.2f s, timeout 0.5 s", dt);
    BT_CHECK(!bt_store_open("127.0.0.1", 0, 1, 2, 0.5, NULL) && strstr(bt_dist_error(), "port 0 (MASTER_PORT)"), "port 0: %s", bt_dist_error());
    BT_CHECK(!bt_store_open("127.0.0.1", port, 2, 2, 0.5, NULL) && strstr(bt_dist_error(), "rank 2 of world 2"), "rank 2: %s", bt_dist_error());
    int busy = raw_listen(port);   /* the port taken: an error, not another interface */
    BT_CHECK(busy >= 0 && !bt_store_open("127.0.0.1", port, 0, 2, 0.3, NULL) && strstr(bt_dist_error(), "Address already in use"),
             "a port in use: %s", bt_dist_error());
    close(busy);
    int err2 = dup(2), nul = open("/dev/null", O_WRONLY);   /* rank 0's note on it is not for this log */
    dup2(nul, 2); close(nul);
    s = bt_store_open("203.0.113.7", port, 0, 2, 0.3, NULL);   /* not an address of this host: every interface */
    dup2(err2, 2); close(err2);
    BT_CHECK(!s && strstr(bt_dist_error(), "on every interface"), "a foreign MASTER_ADDR: %s", bt_dist_error());
    s = bt_store_open("127.0.0.1", port, 0, 1, 0.5, NULL);   /* one rank: nothing to connect */
    unsigned char x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, all[8];
    BT_CHECK(s && bt_store_broadcast(s, x, 8) == 0 && bt_store_allgather(s, x, all, 8) == 0 && !memcmp(all, x, 8) &&
             bt_store_barrier(s) == 0, "world 1 store");
    bt_store_close(s);
}

typedef struct { int port; int worlds[4]; int ranks[4]; } mismatch_args;
static int mismatch_body(int k, void *arg) {
    mismatch_args *a = (mismatch_args *)arg;
    char path[256];
    if (a->ranks[k] == 2) bt__sleep(0.5);
    bt_store *s = bt_store_open("127.0.0.1", a->port, a->ranks[k], a->worlds[k], 2, NULL);
    path_of(path, sizeof path, "mismatch", k);
    bt_test_write_text(path, s ? "opened" : bt_dist_error());
    if (s) bt_store_close(s);
    return s ? 0 : 1;
}

static void test_store_mismatch(void) {
    char p0[256], p1[256];
    int codes[4];
    mismatch_args a = {bt_dist_free_port(NULL), {2, 3}, {0, 1}};
    run_ranks(2, mismatch_body, &a, codes, 10);
    path_of(p0, sizeof p0, "mismatch", 0); path_of(p1, sizeof p1, "mismatch", 1);
    BT_CHECK(codes[0] == 1 && bt_test_file_has(p0, "disagree on WORLD_SIZE"), "rank 0 accepted world 3 (exit %d)", codes[0]);
    BT_CHECK(codes[1] == 1 && bt_test_file_has(p1, "refused this process: its world size differs"), "rank 1 was not told (exit %d)", codes[1]);
    mismatch_args b = {bt_dist_free_port(NULL), {3, 3, 3, 3}, {0, 1, 1, 2}};   /* two processes claim rank 1 */
    run_ranks(4, mismatch_body, &b, codes, 10);
    BT_CHECK(codes[0] == 1 && bt_test_file_has(p0, "two processes claim rank 1"), "duplicate rank not caught (exit %d)", codes[0]);
}

/* ---- 5. the handshake's hash and proofs: FIPS 180-4 and RFC 4231 vectors ------------------ */

static int hex_is(const unsigned char d[32], const char *want) {
    char h[65];
    for (int i = 0; i < 32; i++) snprintf(h + 2 * i, 3, "%02x", d[i]);
    return !strcmp(h, want);
}
static void test_sha256_hmac(void) {
    static const char *msgs[3] = {"abc", "", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"};
    static const char *sums[3] = {"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                                  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                                  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"};
    unsigned char d[32], key[131];
    bt__sha256 c;
    for (int i = 0; i < 3; i++) {
        bt__sha256_init(&c); bt__sha256_add(&c, msgs[i], strlen(msgs[i])); bt__sha256_end(&c, d);
        BT_CHECK(hex_is(d, sums[i]), "sha256(\"%s\")", msgs[i]);
    }
    char a[997];   /* a million 'a's in pieces that cross the 64-byte blocks */
    memset(a, 'a', sizeof a);
    bt__sha256_init(&c);
    for (size_t left = 1000000; left;) { size_t k = left < sizeof a ? left : sizeof a; bt__sha256_add(&c, a, k); left -= k; }
    bt__sha256_end(&c, d);
    BT_CHECK(hex_is(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "sha256 of a million a's");
    memset(key, 0x0b, 20);
    bt__hmac_sha256(key, 20, "Hi There", 8, d);
    BT_CHECK(hex_is(d, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"), "RFC 4231 case 1");
    bt__hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);
    BT_CHECK(hex_is(d, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"), "RFC 4231 case 2");
    memset(key, 0xaa, sizeof key);   /* a key longer than a block is hashed first */
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    bt__hmac_sha256(key, sizeof key, m6, strlen(m6), d);
    BT_CHECK(hex_is(d, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"), "RFC 4231 case 6");
    unsigned char n1[32], n2[32];
    bt__nonce(n1); bt__nonce(n2);
    BT_CHECK(memcmp(n1, n2, 32) != 0, "two nonces are the same");
    BT_CHECK(bt__host_loopback("127.0.0.1") && bt__host_loopback("127.1.2.3") && bt__host_loopback("::1") &&
             bt__host_loopback("localhost") && bt__host_loopback("::ffff:127.0.0.1"), "loopback names");
    BT_CHECK(!bt__host_loopback("10.0.0.1") && !bt__host_loopback("node0") && !bt__host_loopback("::") && !bt__host_loopback("0.0.0.0"),
             "names that are not loopback");
}

/* ---- 5. strangers at the rendezvous: forged hellos, silent connections, the bind address -- */

/* a raw TCP connection to ip:port, retrying up to wait_s while the listener starts; fd or -1 */
static int raw_connect(const char *ip, int port, double wait_s) {
    double end = bt__now() + wait_s;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET; a.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) return -1;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        if (fd >= 0) close(fd);
        if (bt__now() > end) return -1;
        bt__sleep(0.01);
    }
}

/* ranks 0..world-1 are the job's, rank `world` a stranger: kind 0
   sends forged hellos and garbage, kind 1 opens 10 connections that say nothing, kind 2 70 (more
   than rank 0 keeps waiting); the job's other ranks start once it has */
typedef struct { int port, world, kind; } stranger_args;

static int stranger_body(int k, void *arg) {
    stranger_args *a = (stranger_args *)arg;
    char path[256];
    path_of(path, sizeof path, "stranger", k);
    if (k == a->world) {
        int fds[70], n = a->kind == 0 ? 4 : a->kind == 1 ? 10 : 70;
        for (int i = 0; i < n; i++) {
            unsigned char m[80];
            memset(m, 0, sizeof m);
            if ((fds[i] = raw_connect("127.0.0.1", a->port, 5)) < 0) { fprintf(stderr, "connection %d: %s\n", i, strerror(errno)); return 1; }
            if (a->kind != 0) continue;   /* silent */
            if (i == 3) { fill_pattern(m, sizeof m, 9); bt__io(fds[i], m, sizeof m, bt__now() + 1, 1); continue; }   /* garbage */
            /* whole hellos without a valid proof: world + 5 (which once aborted rank 0), then rank 1's two */
            bt__msg_pack(m, i == 2 ? BT__M_HELLO_LIVE : BT__M_HELLO_DATA, 1, (uint32_t)(i == 0 ? a->world + 5 : a->world));
            bt__io(fds[i], m, i == 0 ? 16 : sizeof m, bt__now() + 1, 1);
        }
        bt_test_write_text(path, "ready");   /* the job's other ranks may come */
        bt__sleep(2.5);   /* open through the rendezvous, which must not wait for them */
        for (int i = 0; i < n; i++) close(fds[i]);
        return 0;
    }
    char ready[256];
    path_of(ready, sizeof ready, "stranger", a->world);
    for (int i = 0; k > 0 && i < 1000 && !bt_test_file_has(ready, "ready"); i++) bt__sleep(0.005);
    if (k == 0) { int fe = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644); dup2(fe, 2); close(fe); }   /* rank 0's warnings */
    double t0 = bt__now();
    bt_store *s = bt_store_open("127.0.0.1", a->port, k, a->world, 10, NULL);
    double dt = bt__now() - t0;
    if (!s) { fprintf(stderr, "%s\n", bt_dist_error()); return 1; }
    int v = k, all[8], bad = bt_store_allgather(s, &v, all, sizeof v) != 0;
    for (int j = 0; j < a->world && !bad; j++) bad = all[j] != j;
    bt_store_close(s);
    return bad ? 2 : dt > 2.0 ? 3 : 0;   /* the rank joined at once, whatever the stranger did */
}

static void run_strangers(int kind, const char *what) {
    stranger_args a = {bt_dist_free_port(NULL), 3, kind};
    int codes[8];
    char path[256];
    path_of(path, sizeof path, "stranger", a.world);
    unlink(path);
    run_ranks(a.world + 1, stranger_body, &a, codes, 20);
    path_of(path, sizeof path, "stranger", 0);
    char *log = bt_test_read_file(path, NULL);
    for (int k = 0; k < a.world; k++)
        BT_CHECK(codes[k] == 0, "%s: rank %d exited %d (3: its rendezvous took too long); rank 0 said: %s", what, k, codes[k], log ? log : "");
    BT_CHECK(codes[a.world] == 0, "%s: the stranger exited %d", what, codes[a.world]);
    if (kind == 0)   /* the hellos of the right length: no proof; the garbage: no hello */
        BT_CHECK(log && count_in_file(path, "refused a connection from 127.0.0.1") == 3 && strstr(log, "does not prove this job's secret") &&
                 strstr(log, "not a BluTrain-C hello"), "%s: rank 0 did not report the stranger: %s", what, log ? log : "");
    if (kind == 2)   /* the oldest pushed out, five reported */
        BT_CHECK(log && count_in_file(path, "too many connections were waiting") == 5 && strstr(log, "further refusals are not reported"),
                 "%s: rank 0 said: %s", what, log ? log : "");
    free(log);
}
static void test_store_forged_hello(void) { run_strangers(0, "forged hellos"); }
static void test_store_silent_peers(void) {
    run_strangers(1, "10 silent connections");
    run_strangers(2, "70 silent connections");
}

/* a process without the secret tries to be rank 1 before the real one: refused, and the job's
   ranks meet all the same */
typedef struct { int port; } secret_args;
static int secret_body(int k, void *arg) {
    secret_args *a = (secret_args *)arg;
    char path[256];
    path_of(path, sizeof path, "secret", k);
    if (k == 3) {   /* the impostor: a real store, another secret */
        bt_store *s = bt_store_open("127.0.0.1", a->port, 1, 3, 5, "not this job's secret");
        bt_test_write_text(path, s ? "joined" : bt_dist_error());
        return s ? 1 : 0;
    }
    if (k > 0) bt__sleep(0.5);
    else { int fe = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644); dup2(fe, 2); close(fe); }
    bt_store *s = bt_store_open("127.0.0.1", a->port, k, 3, 10, "s3cret of this job");
    if (!s) { fprintf(stderr, "%s\n", bt_dist_error()); return 1; }
    int v = k, all[3], bad = bt_store_allgather(s, &v, all, sizeof v) || all[0] != 0 || all[1] != 1 || all[2] != 2;
    bt_store_close(s);
    return bad ? 2 : 0;
}

/* a fake rank 0 that answers every hello with an ACK but no valid proof */
static int fake_root_body(int k, void *arg) {
    int port = *(int *)arg;
    if (k == 1) {
        bt_store *s = bt_store_open("127.0.0.1", port, 1, 2, 5, "the job's secret");
        return !s && strstr(bt_dist_error(), "answered without this job's secret") ? 0 : 1;
    }
    int l = raw_listen(port);
    if (l < 0) return 2;
    int fd = accept(l, NULL, NULL);
    unsigned char m[80];
    memset(m, 0, sizeof m);
    bt__msg_pack(m, BT__M_CHALLENGE, 0, 32);
    if (bt__io(fd, m, 48, bt__now() + 5, 1) || bt__io(fd, m, 80, bt__now() + 5, 0)) return 3;
    memset(m, 0, sizeof m);
    bt__msg_pack(m, BT__M_ACK, 0, 2);
    bt__io(fd, m, 48, bt__now() + 5, 1);
    bt__sleep(0.5);
    close(fd); close(l);
    return 0;
}

static void test_store_secret(void) {
    secret_args a = {bt_dist_free_port(NULL)};
    int codes[4];
    char p0[256], p3[256];
    run_ranks(4, secret_body, &a, codes, 20);
    path_of(p0, sizeof p0, "secret", 0); path_of(p3, sizeof p3, "secret", 3);
    char *log = bt_test_read_file(p0, NULL), *imp = bt_test_read_file(p3, NULL);
    for (int k = 0; k < 3; k++) BT_CHECK(codes[k] == 0, "rank %d exited %d; rank 0 said: %s", k, codes[k], log ? log : "");
    BT_CHECK(codes[3] == 0 && imp && strstr(imp, "refused this process: it did not prove this job's secret"),
             "the impostor (exit %d): %s", codes[3], imp ? imp : "");
    BT_CHECK(log && strstr(log, "does not prove this job's secret (BT_DIST_SECRET)"), "rank 0 did not report the impostor: %s", log ? log : "");
    free(log); free(imp);
    int port = bt_dist_free_port(NULL);
    run_ranks(2, fake_root_body, &port, codes, 20);
    BT_CHECK(codes[0] == 0 && codes[1] == 0, "a rank 0 without the secret: exits %d %d", codes[0], codes[1]);
}

/* the sockets listening on port (/proc/net/tcp, tcp6): how many; *loopback of them on a loopback address */
static int listeners_on(int port, int *loopback) {
    int n = 0;
    *loopback = 0;
    for (int v6 = 0; v6 < 2; v6++) {
        FILE *f = fopen(v6 ? "/proc/net/tcp6" : "/proc/net/tcp", "r");
        char line[512], addr[64];
        unsigned p, st;
        if (!f) continue;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%x %*s %x", addr, &p, &st) == 3 && (int)p == port && st == 0x0A) {
                unsigned char b[16];   /* the address as printed: 32-bit words in host order */
                for (int w = 0; w < (v6 ? 4 : 1); w++) {
                    char word[9];
                    memcpy(word, addr + 8 * w, 8); word[8] = 0;
                    uint32_t x = (uint32_t)strtoul(word, NULL, 16);
                    memcpy(b + 4 * w, &x, 4);
                }
                static const unsigned char one6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
                static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
                int lo = v6 ? !memcmp(b, one6, 16) || (!memcmp(b, mapped, 12) && b[12] == 127) : b[0] == 127;
                n++; *loopback += lo;
            }
        fclose(f);
    }
    return n;
}

/* a non-loopback IPv4 address of this host in out, or 0 */
static int other_interface(char *out, size_t n) {
    struct ifaddrs *ifs = NULL;
    int found = 0;
    if (getifaddrs(&ifs) != 0) return 0;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            const struct in_addr *a = &((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr;
            found = (ntohl(a->s_addr) >> 24) != 127 && inet_ntop(AF_INET, a, out, (socklen_t)n) != NULL;
        }
    freeifaddrs(ifs);
    return found;
}

/* rank 1 looks at rank 0's listener from outside before it joins: 0, or what it saw */
static int bind_body(int rank, void *arg) {
    int port = *(int *)arg, code = 0, lo = 0, n = 0;
    char ip[64], path[256];
    path_of(path, sizeof path, "bind", rank);
    if (rank == 1) {
        for (int i = 0; i < 500 && (n = listeners_on(port, &lo)) == 0; i++) bt__sleep(0.01);
        if (n != lo) code = 4;   /* some listener is not on loopback */
        if (n == 0) code = 5;    /* none seen: /proc/net/tcp unreadable, or rank 0 never listened */
        int fd = other_interface(ip, sizeof ip) ? raw_connect(ip, port, 0) : -1;
        if (fd >= 0) { close(fd); code = 6; }   /* reached through another interface */
    }
    bt_store *s = bt_store_open("127.0.0.1", port, rank, 2, 10, NULL);
    if (!s) { bt_test_write_text(path, bt_dist_error()); return 1; }
    bt_store_close(s);
    return code;
}

static void test_store_bind_loopback(void) {
    int port = bt_dist_free_port(NULL), codes[2];
    char ip[64];
    run_ranks(2, bind_body, &port, codes, 20);
    BT_CHECK(codes[0] == 0, "rank 0 exited %d", codes[0]);
    BT_CHECK(codes[1] != 4, "MASTER_ADDR 127.0.0.1: rank 0 listened on more than loopback");
    BT_CHECK(codes[1] != 6, "MASTER_ADDR 127.0.0.1: rank 0 was reached through %s", other_interface(ip, sizeof ip) ? ip : "?");
    if (codes[1] == 5) BT_SKIP("no listener seen in /proc/net/tcp");
    else BT_CHECK(codes[1] == 0, "rank 1 exited %d", codes[1]);
}

/* ---- 4-6. liveness through bt_dist_init (store only) ------------------------------------ */

typedef struct { int port, world, victim; int how; } live_args;   /* how: 0 SIGKILL, 1 bt_error, 2 clean */

static void on_fault(const char *msg, void *user) {
    bt_test_write_text((const char *)user, msg);
    _exit(42);
}

static bt_dist *live_init(int rank, live_args *a, char *path, size_t pl) {
    static bt_dist_env env;
    static bt_dist_opts o;
    store_rank_opts(&env, &o, rank, a->world, a->port, 10);
    path_of(path, pl, "live", rank);
    o.on_fault = on_fault; o.on_fault_user = path;
    return bt_dist_init(&o);
}

static int live_body(int rank, void *arg) {
    live_args *a = (live_args *)arg;
    static char path[256];
    bt_dist *d = live_init(rank, a, path, sizeof path);
    if (bt_store_barrier(bt_dist_store(d))) return 30;
    if (rank == a->victim && a->how == 0) raise(SIGKILL);
    if (rank == a->victim && a->how == 1) bt_error("boom in rank %d", rank);
    for (int i = 0; i < 500; i++) bt__sleep(0.01);   /* 5 s: the watchdog must end this first */
    return 20;
}

static void check_survivors(const live_args *a, const int *codes, const char *want, double dt) {
    char path[256], who[64];
    snprintf(who, sizeof who, "rank %d (", a->victim);
    for (int k = 0; k < a->world; k++) {
        path_of(path, sizeof path, "live", k);
        if (k == a->victim) {
            if (a->how == 1) BT_CHECK(codes[k] == 42 && bt_test_file_has(path, "bt error: boom in rank"), "the failing rank: exit %d", codes[k]);
            continue;
        }
        char *msg = bt_test_read_file(path, NULL);
        BT_CHECK(codes[k] == 42, "rank %d exited %d, expected the watchdog's fault", k, codes[k]);
        BT_CHECK(msg && strstr(msg, who) && strstr(msg, want), "rank %d said \"%s\"; expected \"%s...%s\"", k, msg ? msg : "", who, want);
        free(msg);
    }
    BT_CHECK(dt < 4.0, "the survivors took %.2f s", dt);
}

static void test_liveness_kill(void) {
    for (int victim = 2; victim >= 0; victim -= 2) {   /* a non-zero rank, then rank 0 */
        live_args a = {bt_dist_free_port(NULL), 3, victim, 0};
        int codes[16];
        double t0 = bt__now();
        run_ranks(3, live_body, &a, codes, 15);
        BT_CHECK(codes[victim] == 128 + SIGKILL, "victim exit %d", codes[victim]);
        check_survivors(&a, codes, "died", bt__now() - t0);
    }
}

static void test_liveness_error(void) {
    live_args a = {bt_dist_free_port(NULL), 3, 1, 1};
    int codes[16];
    double t0 = bt__now();
    run_ranks(3, live_body, &a, codes, 15);
    check_survivors(&a, codes, "failed", bt__now() - t0);
}

static int clean_body(int rank, void *arg) {
    live_args *a = (live_args *)arg;
    static char path[256];
    rng_state += (uint64_t)rank * 7919;
    bt_dist *d = live_init(rank, a, path, sizeof path);
    for (int i = 0; i < 3; i++) {
        bt__sleep((double)rnd_in(0, 100) * 1e-3);
        int v = rank * 10 + i, all[8];
        if (bt_store_allgather(bt_dist_store(d), &v, all, sizeof v)) return 31;
        for (int k = 0; k < a->world; k++) if (all[k] != k * 10 + i) return 32;
    }
    bt__sleep((double)rnd_in(0, 200) * 1e-3);
    bt_dist_shutdown(d);
    bt__sleep(0.3);   /* nothing may fire after a clean shutdown */
    return 0;
}

static void test_clean_shutdown(void) {
    live_args a = {bt_dist_free_port(NULL), 4, -1, 2};
    int codes[16];
    run_ranks(4, clean_body, &a, codes, 15);
    for (int k = 0; k < 4; k++) {
        char path[256];
        path_of(path, sizeof path, "live", k);
        char *msg = bt_test_read_file(path, NULL);
        BT_CHECK(codes[k] == 0, "rank %d exited %d (%s)", k, codes[k], msg ? msg : "");
        free(msg);
    }
}

/* ---- 4. the --nproc launcher ------------------------------------------------------------ */

static volatile sig_atomic_t got_term;
static void on_term(int sig) { (void)sig; got_term = 1; }

static int ok_body(int rank) {
    bt_dist_env e;
    printf("out from rank %d\n", rank);
    fflush(stdout);
    fprintf(stderr, "err from rank %d\npartial %d", rank, rank);
    fprintf(stderr, "\n");
    if (bt_dist_env_read(&e)) { fprintf(stderr, "env: %s\n", bt_dist_error()); return 5; }
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    if (!e.secret_set || strlen(e.secret) != 64 || strspn(e.secret, "0123456789abcdef") != 64) {
        fprintf(stderr, "secret \"%s\": expected the launcher's 64 hex digits\n", e.secret);
        return 8;
    }
    if (e.rank != rank || e.world != 3 || e.local_rank != rank || e.local_world != 3 || strcmp(e.master_addr, "127.0.0.1") ||
        !nvls || strcmp(nvls, "0")) { fprintf(stderr, "env wrong\n"); return 6; }
    bt_store *s = bt_store_open(e.master_addr, e.master_port, e.rank, e.world, 10, e.secret);   /* the rendezvous the env describes */
    int all[3];
    if (!s || bt_store_allgather(s, &rank, all, sizeof rank) || all[0] != 0 || all[1] != 1 || all[2] != 2) return 7;
    bt_store_close(s);
    fprintf(stderr, "env ok\ntail %d", rank);   /* a last line without a newline */
    return 0;
}

static int fail_body(int rank) {
    if (rank == 1) { bt__sleep(0.1); return 3; }
    fprintf(stderr, "waiting\n");
    for (int i = 0; i < 2000; i++) bt__sleep(0.01);
    fprintf(stderr, "finished\n");
    return 0;
}

static int kill_body(int rank) {
    if (rank == 2) { bt__sleep(0.1); raise(SIGKILL); }
    for (int i = 0; i < 2000; i++) bt__sleep(0.01);
    return 0;
}

static int term_body(int rank) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    fprintf(stderr, "ready\n");
    for (int i = 0; i < 1000 && !got_term; i++) bt__sleep(0.01);
    fprintf(stderr, "got SIGTERM in rank %d\n", rank);
    return got_term ? 0 : 9;
}

static void test_launcher_ok(void) {
    char out[256], err[256];
    path_of(out, sizeof out, "launch_out", 0); path_of(err, sizeof err, "launch_err", 0);
    setenv("BT_DIST_SECRET", "inherited", 1);   /* each launch makes its own */
    int code = wait_limit(start_launcher(3, 0.2, 0.5, ok_body, out, err), 20);
    unsetenv("BT_DIST_SECRET");
    char *o = bt_test_read_file(out, NULL);
    BT_CHECK(code == 0, "launcher exited %d", code);
    BT_CHECK(o && !strcmp(o, "out from rank 0\n"), "stdout \"%s\"; expected rank 0's line only", o ? o : "");
    free(o);
    for (int k = 0; k < 3; k++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "[rank %d] err from rank %d\n", k, k);
        snprintf(b, sizeof b, "[rank %d] partial %d\n", k, k);
        BT_CHECK(bt_test_file_has(err, a) && bt_test_file_has(err, b), "stderr of rank %d not prefixed line by line", k);
        snprintf(a, sizeof a, "[rank %d] tail %d\n", k, k);
        BT_CHECK(bt_test_file_has(err, a), "rank %d's unterminated last line was lost", k);
    }
    BT_CHECK(count_in_file(err, "] env ok") == 3, "%d ranks saw a consistent environment", count_in_file(err, "] env ok"));
}

static void test_launcher_failure(void) {
    char out[256], err[256];
    path_of(out, sizeof out, "launch_out", 1); path_of(err, sizeof err, "launch_err", 1);
    double t0 = bt__now();
    int code = wait_limit(start_launcher(3, 0.2, 0.5, fail_body, out, err), 20);
    double dt = bt__now() - t0;
    BT_CHECK(code == 3, "launcher exited %d; expected rank 1's code 3", code);
    BT_CHECK(bt_test_file_has(err, "bt_dist: rank 1 exited with code 3"), "no report of rank 1");
    BT_CHECK(!bt_test_file_has(err, "finished"), "the other ranks were not stopped");
    BT_CHECK(dt < 5, "took %.1f s", dt);
    t0 = bt__now();
    code = wait_limit(start_launcher(3, 0.2, 0.5, kill_body, out, err), 20);
    BT_CHECK(code == 128 + SIGKILL, "launcher exited %d after a SIGKILL", code);
    BT_CHECK(bt_test_file_has(err, "bt_dist: rank 2 was killed by signal 9"), "no report of rank 2's signal");
    BT_CHECK(bt__now() - t0 < 5, "took %.1f s", bt__now() - t0);
}

static void test_launcher_signal(void) {
    char out[256], err[256];
    path_of(out, sizeof out, "launch_out", 2); path_of(err, sizeof err, "launch_err", 2);
    pid_t p = start_launcher(2, 0.2, 0.5, term_body, out, err);
    for (int i = 0; i < 500 && count_in_file(err, "ready") < 2; i++) bt__sleep(0.01);
    BT_CHECK(count_in_file(err, "ready") == 2, "the ranks did not start");
    kill(p, SIGTERM);
    int code = wait_limit(p, 10);
    BT_CHECK(code == 128 + SIGTERM, "launcher exited %d after SIGTERM", code);
    BT_CHECK(bt_test_file_has(err, "[rank 0] got SIGTERM in rank 0") && bt_test_file_has(err, "[rank 1] got SIGTERM in rank 1"),
             "SIGTERM was not passed on to every rank");
    bt_spawn_opts o;
    memset(&o, 0, sizeof o);
    o.nproc = 0;
    BT_CHECK(bt_dist_spawn(&o) == -1 && strstr(bt_dist_error(), "--nproc 0"), "nproc 0: %s", bt_dist_error());
    o.nproc = 1;
    BT_CHECK(bt_dist_spawn(&o) == 0, "nproc 1 must not fork");
    BT_CHECK(bt_dist_launch(1) == 0, "launch(1)");
    BT_EXPECT_ERROR(bt_dist_launch(2), "this build has no CUDA/NCCL; build with nvcc");
}

/* ---- 6-8. one rank: init, collectives, DDP bookkeeping with autograd hooks -------------- */

static void test_single_rank(void) {
    bt_dist_env env;
    bt_dist_opts o;
    bt_dist *d = one_rank_init(&env, &o, 0);
    BT_CHECK(d->world == 1 && d->world_comm->size == 1 && !bt_dist_store(d), "one rank");
    float a[6] = {1.5f, -2, 3, 4.25f, 5, -6}, b[6] = {0};
    bt_all_reduce(d->world_comm, a, b, 6, BT_F32, BT_RED_AVG, NULL);
    BT_CHECK(!memcmp(a, b, sizeof a), "all_reduce of one rank is a copy");
    memset(b, 0, sizeof b);
    bt_all_gather(d->world_comm, a, b, 6, BT_F32, NULL);
    BT_CHECK(!memcmp(a, b, sizeof a), "all_gather of one rank is a copy");
    memset(b, 0, sizeof b);
    bt_send_recv(d->world_comm, a, 6, 0, b, 6, 0, BT_F32, NULL);
    BT_CHECK(!memcmp(a, b, sizeof a), "send_recv to self");
    BT_EXPECT_ERROR(bt_all_reduce(d->world_comm, a, b, 3, BT_U16, BT_RED_SUM, NULL), "dtype u16");
    BT_EXPECT_ERROR(bt_broadcast(d->world_comm, a, b, 3, BT_F32, 1, NULL), "root 1");
    BT_EXPECT_ERROR(bt_send_recv(d->world_comm, a, 6, 0, b, 5, 0, BT_F32, NULL), "matching receive");
    bt_mesh m;
    bt_comm *dp, *tp, *cp;
    bt_mesh_init(&m, 1, 1, 1);
    bt_dist_mesh_comms(d, &m, &dp, &tp, &cp);
    BT_CHECK(dp && tp && cp && dp->size == 1 && tp->size == 1 && !strcmp(cp->name, "cp"), "mesh comms of one rank");
    bt_dist_shutdown(d);
    memset(&env, 0, sizeof env);
    env.world = 2; env.rank = 1; env.local_world = 2; env.local_rank = 1;
    BT_EXPECT_ERROR(bt_dist_init(&o), "this build has no CUDA/NCCL; build with nvcc");
}

/* ---- 7. collectives of ranks without NCCL: host buffers through the store ------------------- */
/* 3 ranks (store_only): rank r's element i is v(r, i); each collective against its definition
   (the failing check's number is the exit code) */
static float coll_v(int r, int i) { return (float)(r + 1) * 0.5f + (float)i * 0.25f - (float)(r == 1 && i == 2) * 7.f; }
static int coll_body(int rank, void *arg) {
    live_args *a = (live_args *)arg;
    static bt_dist_env env;
    static bt_dist_opts o;
    store_rank_opts(&env, &o, rank, a->world, a->port, 10);
    bt_dist *d = bt_dist_init(&o);
    bt_comm *c = d->world_comm;
    const int W = 3, N = 6, S = 2;   /* reduce_to_owners: shards of 2 elements, a span [1, 6) over all three owners */
    float x[6], y[18], z[18];
    for (int i = 0; i < N; i++) x[i] = coll_v(rank, i);
    bt_all_reduce(c, x, y, N, BT_F32, BT_RED_SUM, NULL);
    for (int i = 0; i < N; i++) if (y[i] != coll_v(0, i) + coll_v(1, i) + coll_v(2, i)) return 10;
    bt_all_reduce(c, x, y, N, BT_F32, BT_RED_AVG, NULL);
    for (int i = 0; i < N; i++) if (y[i] != (float)(((double)coll_v(0, i) + coll_v(1, i) + coll_v(2, i)) / W)) return 11;
    memcpy(y, x, sizeof x);
    bt_all_reduce(c, y, y, N, BT_F32, BT_RED_MIN, NULL);   /* in place */
    if (y[2] != coll_v(1, 2) || y[0] != coll_v(0, 0)) return 12;
    int32_t k = rank == 2 ? 5 : rank;
    bt_all_reduce(c, &k, &k, 1, BT_I32, BT_RED_MAX, NULL);
    if (k != 5) return 13;
    for (int i = 0; i < W * S; i++) z[i] = coll_v(rank, i);
    bt_reduce_scatter(c, z, y, S, BT_F32, BT_RED_SUM, NULL);   /* block `rank` of the sum */
    for (int i = 0; i < S; i++) if (y[i] != coll_v(0, rank * S + i) + coll_v(1, rank * S + i) + coll_v(2, rank * S + i)) return 14;
    memset(z, 0, sizeof z);
    for (int i = 0; i < N; i++) z[rank * N + i] = x[i];
    bt_all_gather(c, z + rank * N, z, N, BT_F32, NULL);   /* in place */
    for (int r = 0; r < W; r++) for (int i = 0; i < N; i++) if (z[r * N + i] != coll_v(r, i)) return 15;
    memcpy(y, x, sizeof x);
    bt_broadcast(c, y, y, N, BT_F32, 1, NULL);
    for (int i = 0; i < N; i++) if (y[i] != coll_v(1, i)) return 16;
    memcpy(y, x + 1, sizeof(float) * 5);   /* elements [1, 6) of a buffer of 3 shards of 2 */
    bt_reduce_to_owners(c, y, 1, 5, S, BT_F32, BT_RED_AVG, NULL);
    for (int i = 1; i < N; i++) {
        int mine = i / S == rank;
        float want = mine ? (float)(((double)coll_v(0, i) + coll_v(1, i) + coll_v(2, i)) / W) : x[i];   /* others' elements untouched */
        if (y[i - 1] != want) return 17;
    }
    bt_dist_shutdown(d);
    return 0;
}
static void test_store_collectives(void) {
    live_args a = {bt_dist_free_port(NULL), 3, -1, 2};
    int codes[16];
    run_ranks(3, coll_body, &a, codes, 20);
    for (int r = 0; r < 3; r++) BT_CHECK(codes[r] == 0, "rank %d: exit %d (10-17: the failing collective)", r, codes[r]);
}

/* params viewing one flat buffer, as train_gpt2.c builds them */
static bt_tensor *leaf_in(bt_tensor *flat, bt_tensor *flat_grad, int64_t off, int64_t n) {
    bt_tensor *p = bt_narrow(flat, 0, off, n);
    bt_set_requires_grad(p, 1);
    p->grad = bt_narrow(flat_grad, 0, off, n);
    return p;
}

static void expect_ddp_misuse(bt_ddp *dd, int reported) {
    BT_EXPECT_ERROR(bt_ddp_param_ready(dd, reported, NULL), "reported ready twice");
    BT_EXPECT_ERROR(bt_ddp_set_sync(dd, 0), "middle of a synced pass");
    BT_EXPECT_ERROR(bt_ddp_param_ready(dd, 99, NULL), "parameter 99; expected 0..6");
}

static void test_ddp_bookkeeping(void) {
    enum { NP = 7 };
    static const int64_t sizes[NP] = {300, 20, 500, 64, 64, 1000, 8};
    bt_dist_env env;
    bt_dist_opts o;
    bt_dist *d = one_rank_init(&env, &o, 0);
    int64_t total = 0;
    for (int i = 0; i < NP; i++) total += sizes[i];
    bt_tensor *flat = bt_randn(bt_shape1(total), BT_F32, bt_cpu(), 5), *flat_grad = bt_zeros(bt_shape1(total), BT_F32, bt_cpu());
    bt_tensor *params[NP];
    bt_param_span spans[NP];
    int64_t off = 0;
    for (int i = 0; i < NP; i++) { params[i] = leaf_in(flat, flat_grad, off, sizes[i]); off += sizes[i]; }
    BT_CHECK(bt_ddp_spans_from_grads(params, NP, flat_grad, spans) == 0, "%s", bt_dist_error());
    off = 0;
    for (int i = 0; i < NP; i++) { BT_CHECK(spans[i].offset == off && spans[i].numel == sizes[i], "span %d", i); off += sizes[i]; }
    bt_ddp_opts dopt;
    memset(&dopt, 0, sizeof dopt);
    dopt.bucket_cap_bytes = 600 * 4;
    bt_ddp *dd = bt_ddp_create(d->world_comm, bt_data_ptr(flat_grad), BT_F32, total, spans, NP, &dopt);
    const bt_bucket_plan *p = bt_ddp_plan(dd);
    BT_CHECK(p->n_buckets == 5 && check_plan(p, spans, NP, 4, 600 * 4) == 0, "%d buckets", p->n_buckets);
    /* out of order: bucket 1 fills before bucket 0, but goes out only after it */
    int b1 = p->order[p->buckets[1].first];
    bt_ddp_param_ready(dd, b1, NULL);
    for (int k = p->buckets[1].first + 1; k < p->buckets[1].first + p->buckets[1].count; k++) bt_ddp_param_ready(dd, p->order[k], NULL);
    BT_CHECK(bt_ddp_get_stats(dd).launched == 0, "bucket 1 launched before bucket 0");
    for (int k = p->buckets[0].first; k < p->buckets[0].first + p->buckets[0].count; k++) bt_ddp_param_ready(dd, p->order[k], NULL);
    BT_CHECK(bt_ddp_get_stats(dd).launched == 2, "launched %d after buckets 0 and 1", bt_ddp_get_stats(dd).launched);
    expect_ddp_misuse(dd, b1);
    {   /* launch_as_ready: bucket 1 goes out as soon as it is full */
        bt_ddp_opts o2 = dopt;
        o2.launch_as_ready = 1;
        bt_ddp *d2 = bt_ddp_create(d->world_comm, bt_data_ptr(flat_grad), BT_F32, total, spans, NP, &o2);
        for (int k = p->buckets[1].first; k < p->buckets[1].first + p->buckets[1].count; k++) bt_ddp_param_ready(d2, p->order[k], NULL);
        BT_CHECK(bt_ddp_get_stats(d2).launched == 1, "as ready: %d launched after bucket 1 filled", bt_ddp_get_stats(d2).launched);
        for (int k = p->buckets[0].first; k < p->buckets[0].first + p->buckets[0].count; k++) bt_ddp_param_ready(d2, p->order[k], NULL);
        BT_CHECK(bt_ddp_get_stats(d2).launched == 2, "as ready: %d launched", bt_ddp_get_stats(d2).launched);
        bt_ddp_wait(d2, NULL);
        BT_CHECK(bt_ddp_get_stats(d2).launched == 0 && bt_ddp_get_stats(d2).passes == 1, "as ready: reset");
        bt_ddp_free(d2);
    }
    bt_ddp_wait(dd, NULL);   /* the rest had no gradient: launched here */
    bt_ddp_stats st = bt_ddp_get_stats(dd);
    BT_CHECK(st.passes == 1 && st.launched == 0, "after wait: passes %d launched %d", st.passes, st.launched);
    /* accumulation: a no-sync pass communicates nothing and needs no wait */
    bt_ddp_set_sync(dd, 0);
    for (int i = 0; i < NP; i++) bt_ddp_param_ready(dd, i, NULL);
    BT_CHECK(bt_ddp_get_stats(dd).launched == 0, "no-sync pass launched");
    bt_ddp_set_sync(dd, 1);
    /* a real backward pass: every hook fires, newest layer first */
    for (int i = 0; i < NP; i++) bt_register_grad_hook(params[i], bt_ddp_grad_hook, bt_ddp_hook_arg(dd, i));
    bt_scope_begin();
    bt_tensor *loss = bt_scalar(0, BT_F32, bt_cpu());
    for (int i = 0; i < NP; i++) loss = bt_add(loss, bt_sum(bt_mul(params[i], params[i]), NULL, 0, 0));
    bt_backward(loss);
    bt_scope_end();
    BT_CHECK(bt_ddp_get_stats(dd).launched == p->n_buckets, "after backward %d of %d buckets launched", bt_ddp_get_stats(dd).launched,
             p->n_buckets);
    bt_ddp_wait(dd, NULL);
    float g = 0, w = 0;
    int64_t i0[1] = {0};
    g = (float)bt_get(flat_grad, i0); w = (float)bt_get(flat, i0);
    BT_CHECK(fabsf(g - 2 * w) <= BT_TOL_F32_ROUND * fabsf(2 * w), "gradient %g of w %g", g, w);
    BT_CHECK(bt_ddp_get_stats(dd).passes == 2, "passes %d", bt_ddp_get_stats(dd).passes);
    for (int i = 0; i < NP; i++) while (params[i]->hooks) bt_remove_grad_hook(params[i]->hooks);
    bt_tensor *stray = bt_zeros(bt_shape1(4), BT_F32, bt_cpu());
    bt_tensor *sp = bt_narrow(stray, 0, 0, 4);
    bt_tensor *bad = bt_narrow(flat, 0, 0, 4);
    bad->grad = sp;
    BT_CHECK(bt_ddp_spans_from_grads(&bad, 1, flat_grad, spans) == -1 && strstr(bt_dist_error(), "not a contiguous f32 view"),
             "a foreign gradient: %s", bt_dist_error());
    bt_release(bad); bt_release(stray);
    bt_ddp_free(dd);
    for (int i = 0; i < NP; i++) bt_release(params[i]);
    bt_release(flat); bt_release(flat_grad);
    bt_dist_shutdown(d);
}

int main(void) {
    if (bt_test_dir_make("test_dist")) return 1;
    signal(SIGPIPE, SIG_IGN);
    BT_RUN(test_env_single);
    BT_RUN(test_env_torchrun);
    BT_RUN(test_env_torchrun_errors);
    BT_RUN(test_env_mpi);
    BT_RUN(test_env_slurm);
    BT_RUN(test_mesh);
    BT_RUN(test_planner_fixed);
    BT_RUN(test_planner_random);
    BT_RUN(test_sha256_hmac);
    BT_RUN(test_store_ops);
    BT_RUN(test_store_timeouts);
    BT_RUN(test_store_mismatch);
    BT_RUN(test_store_forged_hello);
    BT_RUN(test_store_silent_peers);
    BT_RUN(test_store_secret);
    BT_RUN(test_store_bind_loopback);
    BT_RUN(test_liveness_kill);
    BT_RUN(test_liveness_error);
    BT_RUN(test_clean_shutdown);
    BT_RUN(test_launcher_ok);
    BT_RUN(test_launcher_failure);
    BT_RUN(test_launcher_signal);
    BT_RUN(test_single_rank);
    BT_RUN(test_store_collectives);
    BT_RUN(test_ddp_bookkeeping);
    bt_test_dir_remove();
    return bt_test_summary("test_dist");
}
