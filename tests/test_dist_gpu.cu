/* test_dist_gpu.cu - bt_dist.h on two GPUs through NCCL: every collective (f32 and bf16, plus
   f64/f16/i32 sums) against host-computed results, the mesh's sub-communicators, the DDP bucket
   engine (f32 and bf16 communication, ZeRO's reduce-to-owners with the all-gather back, no-sync
   accumulation, launch as ready, real autograd hooks; the copy-engine transport, and that it is
   used exactly where it applies; a synced pass captured in a CUDA graph and replayed, bit for bit
   against eager passes, on blocking and non-blocking communicators), the network transport (two separate
   launches with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, as between nodes), and faults: a rank
   SIGKILLed during a collective (rank 1, then rank 0) and a rank that stops taking part (the
   collective timeout; and inside a replayed CUDA graph, bt_dist_watch). Every test but the network one starts its ranks with the --nproc launcher
   (bt_dist_spawn) from a forked child; this process never initializes CUDA. Each test skips
   itself with fewer than 2 GPUs. Run: make test-gpu on a 2-GPU machine (about 1-2 minutes).
   NCCL_NVLS_ENABLE=0 is set in every rank (the launcher does it). */
/* g++ 12 sees a false "maybe uninitialized" in bt_grad_norm when it inlines this file's way */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "bt_autograd.h"
#pragma GCC diagnostic pop
#include "bt_dist.h"
#include "tests/bt_test.h"
#include "tests/proc_test.h"

#include <stdlib.h>
#include <unistd.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <cuda_runtime.h>

/* ---- process helpers (no CUDA in this process) ------------------------------------------ */

static void dump(const char *what, const char *path) {   /* shows a failed run's output */
    char *s = bt_test_read_file(path, NULL);
    fprintf(stderr, "  ---- %s (%s)\n%s\n  ----\n", what, path, s ? s : "(missing)");
    free(s);
}

/* ---- data: rank r's random inputs, reproducible on every rank ---------------------------- */

static double input(int rank, int64_t i, int salt) { return bt_philox_normal(1000 + 17 * (uint64_t)salt + (uint64_t)rank, (uint64_t)i); }

/* n values of rank r in dtype dt (bf16/f16 rounded), to the device; host copy as doubles */
static void *upload(bt_dtype dt, int rank, int64_t n, int salt, double *host) {
    size_t es = bt_dtype_size(dt);
    unsigned char *h = (unsigned char *)malloc((size_t)n * es);
    for (int64_t i = 0; i < n; i++) {
        double v = input(rank, i, salt);
        if (dt == BT_F32) { float f = (float)v; memcpy(h + i * es, &f, 4); v = f; }
        else if (dt == BT_F64) memcpy(h + i * es, &v, 8);
        else if (dt == BT_BF16) { uint16_t b = bt__f32_to_bf16((float)v); memcpy(h + i * es, &b, 2); v = bt__bf16_to_f32(b); }
        else if (dt == BT_F16) { __half x = __float2half((float)v); memcpy(h + i * es, &x, 2); v = __half2float(x); }
        else { int32_t k = (int32_t)(v * 1000); memcpy(h + i * es, &k, 4); v = k; }
        if (host) host[i] = v;
    }
    void *d = NULL;
    cudaMalloc(&d, (size_t)n * es + 16);
    cudaMemcpy(d, h, (size_t)n * es, cudaMemcpyHostToDevice);
    free(h);
    return d;
}
static void download(bt_dtype dt, const void *d, int64_t n, double *host) {
    size_t es = bt_dtype_size(dt);
    unsigned char *h = (unsigned char *)malloc((size_t)n * es);
    int dev = 0;
    cudaGetDevice(&dev);                       /* the rank's device (bt_dist_init made it current) */
    cudaStreamSynchronize(bt_k_current_stream(dev));
    cudaMemcpy(h, d, (size_t)n * es, cudaMemcpyDeviceToHost);
    for (int64_t i = 0; i < n; i++) {
        if (dt == BT_F32) { float f; memcpy(&f, h + i * es, 4); host[i] = f; }
        else if (dt == BT_F64) memcpy(&host[i], h + i * es, 8);
        else if (dt == BT_BF16) { uint16_t b; memcpy(&b, h + i * es, 2); host[i] = bt__bf16_to_f32(b); }
        else if (dt == BT_F16) { __half x; memcpy(&x, h + i * es, 2); host[i] = __half2float(x); }
        else { int32_t k; memcpy(&k, h + i * es, 4); host[i] = k; }
    }
    free(h);
}

static int fails;
static void expect(int rank, const char *what, bt_dtype dt, const double *got, const double *want, int64_t n) {
    /* sums over 2 ranks of values exact in dt: one rounding at most (bf16: the sum, then /W) */
    double tol = dt == BT_F32 ? BT_TOL_F32_ROUND : dt == BT_F64 ? BT_TOL_F64 : dt == BT_I32 ? BT_TOL_EXACT : dt == BT_F16 ? BT_TOL_F16 : BT_TOL_BF16_OP;
    double e = bt_test_relerr(got, want, n);
    if (e > tol) { fprintf(stderr, "FAIL rank %d: %s (%s): relative error %.3g > %.1g\n", rank, what, bt_dtype_name(dt), e, tol); fails++; }
}

/* ---- collectives ------------------------------------------------------------------------- */

/* want[i] = sum over ranks k < W of x[k][lo + i] */
static void sum_ranks(double **x, int W, int64_t lo, int64_t n, double *want) {
    for (int64_t i = 0; i < n; i++) {
        want[i] = 0;
        for (int k = 0; k < W; k++) want[i] += x[k][lo + i];
    }
}

static void check_collectives(bt_dist *d, bt_comm *c, bt_dtype dt, int64_t m) {
    int r = c->rank, W = c->size;
    int64_t n = W * m;
    double *x[2] = {NULL, NULL}, *got = (double *)calloc((size_t)n, sizeof(double)), *want = (double *)calloc((size_t)n, sizeof(double));
    void *dx[2] = {NULL, NULL};
    for (int k = 0; k < W; k++) { x[k] = (double *)malloc(sizeof(double) * (size_t)n); dx[k] = upload(dt, k, n, 1, x[k]); }
    void *out = upload(dt, r, n, 2, NULL);
    /* all-reduce: sum and mean, out of place and in place */
    bt_all_reduce(c, dx[r], out, n, dt, BT_RED_SUM, NULL);
    sum_ranks(x, W, 0, n, want);
    download(dt, out, n, got); expect(d->rank, "all_reduce sum", dt, got, want, n);
    if (dt != BT_I32) {
        bt_all_reduce(c, dx[r], dx[r], n, dt, BT_RED_AVG, NULL);
        sum_ranks(x, W, 0, n, want);
        for (int64_t i = 0; i < n; i++) want[i] /= W;
        download(dt, dx[r], n, got); expect(d->rank, "all_reduce avg in place", dt, got, want, n);
    }
    void *src = upload(dt, r, n, 1, NULL);
    /* reduce-scatter: this rank's block of the sum */
    bt_reduce_scatter(c, src, out, m, dt, BT_RED_SUM, NULL);
    sum_ranks(x, W, r * m, m, want);
    download(dt, out, m, got); expect(d->rank, "reduce_scatter", dt, got, want, m);
    /* all-gather: the first m of every rank, by rank; then in place */
    bt_all_gather(c, src, out, m, dt, NULL);
    for (int k = 0; k < W; k++) for (int64_t i = 0; i < m; i++) want[k * m + i] = x[k][i];
    download(dt, out, n, got); expect(d->rank, "all_gather", dt, got, want, n);
    size_t es = bt_dtype_size(dt);
    cudaMemcpy((char *)out + (size_t)(r * m) * es, src, (size_t)m * es, cudaMemcpyDeviceToDevice);
    bt_all_gather(c, (char *)out + (size_t)(r * m) * es, out, m, dt, NULL);
    download(dt, out, n, got); expect(d->rank, "all_gather in place", dt, got, want, n);
    /* broadcast from the last rank */
    bt_broadcast(c, src, out, n, dt, W - 1, NULL);
    download(dt, out, n, got); expect(d->rank, "broadcast", dt, got, x[W - 1], n);
    /* send/recv around the ring */
    bt_send_recv(c, src, n, (r + 1) % W, out, n, (r + W - 1) % W, dt, NULL);
    download(dt, out, n, got); expect(d->rank, "send_recv", dt, got, x[(r + W - 1) % W], n);
    /* reduce to owners: the span [3, n - 5) of a flat buffer split in shards of ceil(n / W) */
    if (dt != BT_I32) {
        int64_t S = bt_shard_numel(n, W, 1), lo = 3, hi = n - 5;
        void *span = upload(dt, r, n, 1, NULL);
        bt_reduce_to_owners(c, (char *)span + (size_t)lo * es, lo, hi - lo, S, dt, BT_RED_SUM, NULL);
        download(dt, span, n, got);
        int64_t a = r * S > lo ? r * S : lo, b = (r + 1) * S < hi ? (r + 1) * S : hi;
        sum_ranks(x, W, a, b - a, want + a);
        expect(d->rank, "reduce_to_owners", dt, got + a, want + a, b - a);
        cudaFree(span);
    }
    for (int k = 0; k < W; k++) { free(x[k]); cudaFree(dx[k]); }
    cudaFree(src); cudaFree(out); free(got); free(want);
}

static int collectives_rank(int rank) {
    bt_dist *d = bt_dist_init(NULL);
    if (d->rank != rank || d->world != 2 || d->device != rank) { fprintf(stderr, "FAIL rank %d: device %d\n", rank, d->device); fails++; }
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    if (!nvls || strcmp(nvls, "0")) { fprintf(stderr, "FAIL rank %d: NCCL_NVLS_ENABLE=%s\n", rank, nvls ? nvls : "(unset)"); fails++; }
    check_collectives(d, d->world_comm, BT_F32, (1 << 20) + 3);
    check_collectives(d, d->world_comm, BT_BF16, (1 << 20) + 3);
    check_collectives(d, d->world_comm, BT_F64, 1000);
    check_collectives(d, d->world_comm, BT_F16, 1000);
    check_collectives(d, d->world_comm, BT_I32, 1000);
    bt_mesh m;
    bt_comm *dp = NULL, *tp = NULL, *cp = NULL;
    bt_mesh_init(&m, 2, 2, 1);   /* tp = 2: the tp group is the world, dp and cp are single ranks */
    bt_dist_mesh_comms(d, &m, &dp, &tp, &cp);
    if (!dp || !tp || !cp || tp->size != 2 || tp->rank != rank || dp->size != 1 || cp->size != 1) {
        fprintf(stderr, "FAIL rank %d: mesh communicators\n", rank); fails++;
    } else {
        check_collectives(d, tp, BT_F32, 4097);
        check_collectives(d, dp, BT_F32, 4097);   /* one rank: local copies */
    }
    bt_dist_shutdown(d);
    fprintf(stderr, "rank %d: collectives done, %d failures\n", rank, fails);
    return fails ? 1 : 0;
}

static void test_collectives(void) {
    NEED_2_GPUS();
    char err[256];
    int code = launch2(collectives_rank, "coll", 5, 300, err, sizeof err, NULL);
    BT_CHECK(code == 0 && bt_test_file_has(err, "rank 0: collectives done, 0 failures") && bt_test_file_has(err, "rank 1: collectives done, 0 failures"),
             "exit %d", code);
    if (code) dump("collectives", err);
}

/* two separate "launches" (as on two nodes): torchrun variables, NCCL's network transport */
static void test_network_transport(void) {
    NEED_2_GPUS();
    char err[2][256];
    int port = bt_dist_free_port(NULL), codes[2];
    pid_t p[2];
    fflush(NULL);
    for (int r = 0; r < 2; r++) {
        snprintf(err[r], sizeof err[r], "%s/net_err_%d.txt", bt_test_dir, r);
        p[r] = fork();
        if (p[r] == 0) {
            int fe = open(err[r], O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fe, 2); close(fe);
            char v[16];
            snprintf(v, sizeof v, "%d", r); setenv("RANK", v, 1); setenv("LOCAL_RANK", v, 1);
            setenv("WORLD_SIZE", "2", 1); setenv("MASTER_ADDR", "127.0.0.1", 1);
            snprintf(v, sizeof v, "%d", port); setenv("MASTER_PORT", v, 1);
            setenv("NCCL_P2P_DISABLE", "1", 1); setenv("NCCL_SHM_DISABLE", "1", 1);
            if (r == 1) bt_test_sleep(1.0);   /* the other node comes up late */
            _exit(collectives_rank(r));
        }
    }
    for (int r = 0; r < 2; r++) codes[r] = wait_limit(p[r], 300);
    for (int r = 0; r < 2; r++) {
        BT_CHECK(codes[r] == 0, "rank %d exited %d", r, codes[r]);
        if (codes[r]) dump("network transport", err[r]);
    }
}

/* ---- DDP ---------------------------------------------------------------------------------- */

__global__ void spin_kernel(long long cycles) {   /* keeps the compute stream busy */
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}

enum { NP = 41 };
/* parameter sizes (the same on every rank), laid out back to back */
static int64_t ddp_layout(bt_param_span *ps) {
    int64_t off = 0;
    for (int i = 0; i < NP; i++) {
        int64_t n = 1000 + (int64_t)(bt_philox_uniform(7, (uint64_t)i) * (i % 7 == 0 ? 400000 : 60000));
        ps[i].offset = off; ps[i].numel = n; off += n;
    }
    return off;
}

/* one synced step of micro-batches: each parameter's gradient lands on the compute stream behind
   a busy kernel, then is reported; returns the buckets launched before the wait */
static int ddp_step(bt_ddp *dd, float *flat, const bt_param_span *ps, const float *g, int micro, cudaStream_t s) {
    int launched = 0;
    for (int mb = 0; mb < micro; mb++) {
        bt_ddp_set_sync(dd, mb == micro - 1);
        for (int i = NP - 1; i >= 0; i--) {   /* backward: the last parameter first */
            spin_kernel<<<1, 1, 0, s>>>(20000);
            cudaMemcpyAsync(flat + ps[i].offset, g + ps[i].offset, (size_t)ps[i].numel * 4, cudaMemcpyHostToDevice, s);
            bt_ddp_param_ready(dd, i, s);
        }
        if (mb < micro - 1 && bt_ddp_get_stats(dd).launched != 0) launched = -1000;   /* no-sync passes send nothing */
    }
    launched += bt_ddp_get_stats(dd).launched;
    bt_ddp_wait(dd, s);
    return launched;
}

/* the engine uses the copy engines exactly when asked and eligible (fp32 on the wire, no shards) */
static void expect_transport(bt_dist *d, bt_ddp *dd, const char *what, int ce, bt_dtype comm_dt, int zero) {
    int want = ce && comm_dt == BT_F32 && !zero, got = bt_ddp_get_stats(dd).copy_engines;
    if (got != want) { fprintf(stderr, "FAIL rank %d: %s: copy engines %s, expected %s\n", d->rank, what, got ? "on" : "off", want ? "on" : "off"); fails++; }
}

static void check_ddp(bt_dist *d, bt_dtype comm_dt, int zero, int as_ready, int thread, int step, int ce) {
    bt_param_span ps[NP];
    int64_t N = ddp_layout(ps), W = d->world, S = bt_shard_numel(N, (int)W, 64);
    int64_t alloc = zero ? W * S : N;
    cudaStream_t s = bt_k_current_stream(d->device);
    float *g[2], *flat = NULL, *got = (float *)malloc(sizeof(float) * (size_t)alloc);
    double *want = (double *)malloc(sizeof(double) * (size_t)alloc), *gotd = (double *)malloc(sizeof(double) * (size_t)alloc);
    for (int k = 0; k < 2; k++) {
        g[k] = (float *)malloc(sizeof(float) * (size_t)N);
        for (int64_t i = 0; i < N; i++) g[k][i] = (float)input(k, i, 10 + step);
    }
    for (int64_t i = 0; i < N; i++) want[i] = ((double)g[0][i] + g[1][i]) / 2;
    flat = (float *)bt_alloc(bt_cuda_device(d->device), sizeof(float) * (size_t)alloc, s);   /* bt_alloc: shareable (copy engines) */
    cudaMemsetAsync(flat, 0, sizeof(float) * (size_t)alloc, s);
    bt_ddp_opts o;
    memset(&o, 0, sizeof o);
    o.bucket_cap_bytes = (size_t)1 << 20; o.comm_dtype = comm_dt; o.shard_numel = zero ? S : 0; o.launch_as_ready = as_ready;
    o.launch_thread = thread; o.copy_engines = ce;
    bt_ddp *dd = bt_ddp_create(d->world_comm, flat, BT_F32, N, ps, NP, &o);
    int nb = bt_ddp_plan(dd)->n_buckets;
    char what[96];
    snprintf(what, sizeof what, "ddp %s%s%s%s%s step %d", bt_dtype_name(comm_dt), zero ? " zero" : "", as_ready ? " as-ready" : "",
             thread ? " launch-thread" : "", ce ? " copy-engines" : "", step);
    expect_transport(d, dd, what, ce, comm_dt, zero);
    for (int rep = 0; rep < 2; rep++) {   /* twice: the engine resets between steps */
        int launched = ddp_step(dd, flat, ps, g[d->rank], rep + 1, s);
        if (launched != nb) { fprintf(stderr, "FAIL rank %d: %s: %d of %d buckets launched before the wait\n", d->rank, what, launched, nb); fails++; }
        if (zero) bt_all_gather(d->world_comm, flat + d->rank * S, flat, S, BT_F32, s);   /* the updated shards back to all */
        cudaMemcpyAsync(got, flat, sizeof(float) * (size_t)N, cudaMemcpyDeviceToHost, s);
        cudaStreamSynchronize(s);
        for (int64_t i = 0; i < N; i++) gotd[i] = got[i];
        expect(d->rank, what, comm_dt, gotd, want, N);
    }
    bt_ddp_free(dd);
    bt_free(flat);
    free(g[0]); free(g[1]); free(got); free(want); free(gotd);
}

/* bt_ddp_add_rows: a [V, C] table whose dense gradient is reported first (its bucket goes out
   early, launched as ready, by the launch thread) and whose rows arrive last; the result is the
   mean of the dense parts plus the mean of every rank's scattered rows (rows in f32, then bf16) */
static void check_ddp_rows(bt_dist *d, bt_dtype rows_dt) {
    enum { V = 300, C = 24, N = 257, OTHER = 5000 };
    bt_param_span ps[2] = {{0, V * C}, {V * C, OTHER}};
    int64_t total = V * C + OTHER;
    cudaStream_t s = bt_k_current_stream(d->device);
    float *flat = NULL, *g = (float *)malloc(sizeof(float) * total), *got = (float *)malloc(sizeof(float) * total);
    double *want = (double *)calloc((size_t)total, sizeof(double)), *gotd = (double *)malloc(sizeof(double) * total);
    int32_t *idx[2];
    double *rows[2];
    for (int k = 0; k < 2; k++) {
        idx[k] = (int32_t *)malloc(sizeof(int32_t) * N);
        rows[k] = (double *)malloc(sizeof(double) * N * C);
        for (int i = 0; i < N; i++) idx[k][i] = (int32_t)((i * 7 + k * 13 + (i % 5) * 50) % V);   /* repeats within and across ranks */
        for (int j = 0; j < N * C; j++) {
            double v = input(k, j, 60);
            rows[k][j] = rows_dt == BT_BF16 ? (double)__bfloat162float(__float2bfloat16_rn((float)v)) : (double)(float)v;
        }
        for (int64_t i = 0; i < total; i++) want[i] += (double)(float)input(k, i, 61) / 2;
        for (int i = 0; i < N; i++) for (int c = 0; c < C; c++) want[(int64_t)idx[k][i] * C + c] += rows[k][i * C + c] / 2;
    }
    for (int64_t i = 0; i < total; i++) g[i] = (float)input(d->rank, i, 61);
    size_t es = bt_dtype_size(rows_dt);
    void *hrows = malloc(es * N * C), *drows = NULL;
    int32_t *didx = NULL;
    for (int j = 0; j < N * C; j++) {
        if (rows_dt == BT_BF16) ((__nv_bfloat16 *)hrows)[j] = __float2bfloat16_rn((float)rows[d->rank][j]);
        else ((float *)hrows)[j] = (float)rows[d->rank][j];
    }
    cudaMalloc(&flat, sizeof(float) * total); cudaMalloc(&drows, es * N * C); cudaMalloc(&didx, sizeof(int32_t) * N);
    cudaMemcpy(drows, hrows, es * N * C, cudaMemcpyHostToDevice);
    cudaMemcpy(didx, idx[d->rank], sizeof(int32_t) * N, cudaMemcpyHostToDevice);
    bt_ddp_opts o;
    memset(&o, 0, sizeof o);
    o.bucket_cap_bytes = (size_t)16 << 10; o.launch_as_ready = 1; o.launch_thread = 1;
    bt_ddp *dd = bt_ddp_create(d->world_comm, flat, BT_F32, total, ps, 2, &o);
    char what[64];
    snprintf(what, sizeof what, "ddp add_rows (%s rows)", bt_dtype_name(rows_dt));
    for (int rep = 0; rep < 2; rep++) {
        cudaMemcpyAsync(flat, g, sizeof(float) * total, cudaMemcpyHostToDevice, s);
        spin_kernel<<<1, 1, 0, s>>>(200000);
        bt_ddp_param_ready(dd, 0, s);                       /* the table's dense part is final */
        spin_kernel<<<1, 1, 0, s>>>(200000);
        int took = bt_ddp_add_rows(dd, 0, didx, drows, rows_dt, N, C, s);
        bt_ddp_param_ready(dd, 1, s);
        bt_ddp_wait(dd, s);
        cudaMemcpyAsync(got, flat, sizeof(float) * total, cudaMemcpyDeviceToHost, s);
        cudaStreamSynchronize(s);
        if (took != 1) { fprintf(stderr, "FAIL rank %d: %s: add_rows declined the rows\n", d->rank, what); fails++; }
        for (int64_t i = 0; i < total; i++) gotd[i] = got[i];
        expect(d->rank, what, BT_F32, gotd, want, total);
    }
    /* a pass that does not communicate declines the rows (the caller adds them) */
    bt_ddp_set_sync(dd, 0);
    if (bt_ddp_add_rows(dd, 0, didx, drows, rows_dt, N, C, s) != 0) { fprintf(stderr, "FAIL rank %d: %s: took rows in a no-sync pass\n", d->rank, what); fails++; }
    bt_ddp_set_sync(dd, 1);
    bt_ddp_free(dd);
    cudaFree(flat); cudaFree(drows); cudaFree(didx);
    for (int k = 0; k < 2; k++) { free(idx[k]); free(rows[k]); }
    free(g); free(got); free(want); free(gotd); free(hrows);
}

/* real autograd: leaves viewing a flat buffer on the GPU, hooks fire in backward order */
static void check_ddp_hooks(bt_dist *d) {
    enum { L = 6 };
    static const int64_t sizes[L] = {70000, 300, 250000, 4096, 100000, 12};
    int64_t total = 0;
    for (int i = 0; i < L; i++) total += sizes[i];
    bt_device dev = bt_cuda_device(d->device);
    bt_tensor *flat = bt_randn(bt_shape1(total), BT_F32, dev, 3), *flat_grad = bt_zeros(bt_shape1(total), BT_F32, dev);
    bt_tensor *params[L], *xs[L][2];
    int64_t off = 0;
    for (int i = 0; i < L; i++) {
        params[i] = bt_narrow(flat, 0, off, sizes[i]);
        bt_set_requires_grad(params[i], 1);
        params[i]->grad = bt_narrow(flat_grad, 0, off, sizes[i]);
        for (int k = 0; k < 2; k++) xs[i][k] = bt_randn(bt_shape1(sizes[i]), BT_F32, dev, 100 + 10 * (uint64_t)i + (uint64_t)k);
        off += sizes[i];
    }
    bt_param_span ps[L];
    if (bt_ddp_spans_from_grads(params, L, flat_grad, ps)) { fprintf(stderr, "FAIL: %s\n", bt_dist_error()); fails++; return; }
    bt_ddp_opts o;
    memset(&o, 0, sizeof o);
    o.bucket_cap_bytes = 400000;
    bt_ddp *dd = bt_ddp_create(d->world_comm, bt_data_ptr(flat_grad), BT_F32, total, ps, L, &o);
    for (int i = 0; i < L; i++) bt_register_grad_hook(params[i], bt_ddp_grad_hook, bt_ddp_hook_arg(dd, i));
    bt_scope_begin();
    bt_tensor *loss = bt_scalar(0, BT_F32, dev);   /* d loss / d w_i = x_i of this rank */
    for (int i = 0; i < L; i++) loss = bt_add(loss, bt_sum(bt_mul(params[i], xs[i][d->rank]), NULL, 0, 0));
    bt_backward(loss);
    bt_scope_end();
    int launched = bt_ddp_get_stats(dd).launched, nb = bt_ddp_plan(dd)->n_buckets;
    if (launched != nb) { fprintf(stderr, "FAIL rank %d: hooks launched %d of %d buckets\n", d->rank, launched, nb); fails++; }
    bt_ddp_wait(dd, NULL);
    double *got = (double *)malloc(sizeof(double) * (size_t)total), *want = (double *)malloc(sizeof(double) * (size_t)total);
    float *h = (float *)malloc(sizeof(float) * (size_t)total), *a = (float *)malloc(sizeof(float) * (size_t)total);
    bt_to_host(flat_grad, h, BT_F32);
    off = 0;
    for (int i = 0; i < L; i++) {
        bt_to_host(xs[i][0], a, BT_F32);
        for (int64_t j = 0; j < sizes[i]; j++) want[off + j] = a[j];
        bt_to_host(xs[i][1], a, BT_F32);
        for (int64_t j = 0; j < sizes[i]; j++) want[off + j] = (want[off + j] + a[j]) / 2;
        off += sizes[i];
    }
    for (int64_t j = 0; j < total; j++) got[j] = h[j];
    expect(d->rank, "ddp with autograd hooks", BT_F32, got, want, total);
    for (int i = 0; i < L; i++) while (params[i]->hooks) bt_remove_grad_hook(params[i]->hooks);
    bt_ddp_free(dd);
    for (int i = 0; i < L; i++) { bt_release(params[i]); bt_release(xs[i][0]); bt_release(xs[i][1]); }
    bt_release(flat); bt_release(flat_grad);
    free(got); free(want); free(h); free(a);
}

/* ---- DDP inside a CUDA graph ------------------------------------------------------------- */

/* one synced pass: each parameter's gradient copied on the device from src (behind a busy
   kernel), then reported; the stream waits for the buckets */
static void ddp_graph_pass(bt_ddp *dd, float *flat, const bt_param_span *ps, const float *src, cudaStream_t s) {
    bt_ddp_set_sync(dd, 1);
    for (int i = NP - 1; i >= 0; i--) {
        spin_kernel<<<1, 1, 0, s>>>(20000);
        cudaMemcpyAsync(flat + ps[i].offset, src + ps[i].offset, (size_t)ps[i].numel * 4, cudaMemcpyDeviceToDevice, s);
        bt_ddp_param_ready(dd, i, s);
    }
    bt_ddp_wait(dd, s);
}
/* the pass's result on the host (ZeRO: every rank's shard gathered back first, outside any graph) */
static void ddp_graph_result(bt_dist *d, float *flat, int64_t N, int64_t S, int zero, float *host, cudaStream_t s) {
    if (zero) bt_all_gather(d->world_comm, flat + d->rank * S, flat, S, BT_F32, s);
    cudaMemcpyAsync(host, flat, sizeof(float) * (size_t)N, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
}

/* A synced pass captured once (bt_graph) and replayed on new gradients gives the eager pass's
   bits on the same gradients (3 sets), and the engine runs eagerly again afterwards. The launch
   thread, when on, must stand aside inside the capture (a capture is thread-local). */
static void check_ddp_graph(bt_dist *d, bt_dtype comm_dt, int zero, int thread, int ce) {
    enum { SETS = 3 };
    bt_param_span ps[NP];
    int64_t N = ddp_layout(ps), W = d->world, S = bt_shard_numel(N, (int)W, 64), alloc = zero ? W * S : N;
    bt_device dev = bt_cuda_device(d->device);
    cudaStream_t s = (cudaStream_t)bt_stream_current(dev);
    float *g = (float *)malloc(sizeof(float) * (size_t)N * SETS), *ref = (float *)malloc(sizeof(float) * (size_t)N * SETS);
    float *got = (float *)malloc(sizeof(float) * (size_t)N), *flat = NULL, *src = NULL;
    double *gotd = (double *)malloc(sizeof(double) * (size_t)N), *want = (double *)malloc(sizeof(double) * (size_t)N);
    for (int k = 0; k < SETS; k++) for (int64_t i = 0; i < N; i++) g[(size_t)k * N + i] = (float)input(d->rank, i, 70 + k);
    flat = (float *)bt_alloc(dev, sizeof(float) * (size_t)alloc, s);
    cudaMalloc(&src, sizeof(float) * (size_t)N);
    cudaMemsetAsync(flat, 0, sizeof(float) * (size_t)alloc, s);
    bt_ddp_opts o;
    memset(&o, 0, sizeof o);
    o.bucket_cap_bytes = (size_t)1 << 20; o.comm_dtype = comm_dt; o.shard_numel = zero ? S : 0; o.launch_as_ready = 1;
    o.launch_thread = thread; o.trace = 1; o.copy_engines = ce;
    bt_ddp *dd = bt_ddp_create(d->world_comm, flat, BT_F32, N, ps, NP, &o);
    char what[96];
    snprintf(what, sizeof what, "ddp graph %s%s%s%s", bt_dtype_name(comm_dt), zero ? " zero" : "", thread ? " launch-thread" : "",
             ce ? " copy-engines" : "");
    expect_transport(d, dd, what, ce, comm_dt, zero);
    for (int k = 0; k < SETS; k++) {   /* the eager references */
        cudaMemcpy(src, g + (size_t)k * N, sizeof(float) * (size_t)N, cudaMemcpyHostToDevice);
        ddp_graph_pass(dd, flat, ps, src, s);
        ddp_graph_result(d, flat, N, S, zero, ref + (size_t)k * N, s);
    }
    bt_graph *gr = bt_graph_capture_begin(dev);
    ddp_graph_pass(dd, flat, ps, src, s);
    bt_graph_capture_end(gr);
    int nb = bt_ddp_plan(dd)->n_buckets, launched = bt_ddp_get_stats(dd).launched;
    if (launched != 0) { fprintf(stderr, "FAIL rank %d: %s: %d buckets still counted after the captured pass's wait\n", d->rank, what, launched); fails++; }
    for (int k = 0; k < SETS + 1; k++) {   /* replays, then one more eager pass */
        int kk = k % SETS;
        cudaMemcpy(src, g + (size_t)kk * N, sizeof(float) * (size_t)N, cudaMemcpyHostToDevice);
        if (k < SETS) { bt_graph_launch(gr); bt_dist_watch(d->world_comm, "ddp test graph", s); }
        else ddp_graph_pass(dd, flat, ps, src, s);
        ddp_graph_result(d, flat, N, S, zero, got, s);
        int64_t bad = 0;
        for (int64_t i = 0; i < N; i++) bad += memcmp(&got[i], &ref[(size_t)kk * N + i], 4) != 0;
        if (bad) { fprintf(stderr, "FAIL rank %d: %s: %s %d: %lld of %lld values differ from the eager pass's\n", d->rank, what,
                           k < SETS ? "replay" : "eager pass after the replays", k, (long long)bad, (long long)N); fails++; }
        for (int64_t i = 0; i < N; i++) {
            gotd[i] = got[i];
            want[i] = ((double)(float)input(0, i, 70 + kk) + (double)(float)input(1, i, 70 + kk)) / 2;
        }
        expect(d->rank, what, comm_dt, gotd, want, N);
    }
    if (d->rank == 0) fprintf(stderr, "%s: %d buckets, %d replays and an eager pass checked\n", what, nb, SETS);
    bt_graph_free(gr);
    bt_ddp_free(dd);
    bt_free(flat); cudaFree(src);
    free(g); free(ref); free(got); free(gotd); free(want);
}

/* blocking communicators (what train_gpt2 --cuda-graph on takes with several processes), then
   the default non-blocking ones (BT_NCCL_BLOCKING=0 in train_gpt2: NCCL enqueues from a thread of
   its own; a failure there prints "nonblocking" in its line) */
static int ddp_graph_blocking;
static int ddp_graph_rank(int rank) {
    bt_dist_opts o;
    memset(&o, 0, sizeof o);
    o.blocking_comms = ddp_graph_blocking;
    o.nccl_timeout_s = 60;
    bt_dist *d = bt_dist_init(&o);
    check_ddp_graph(d, BT_F32, 0, 0, 0);
    check_ddp_graph(d, BT_F32, 0, 1, 0);
    check_ddp_graph(d, BT_BF16, 0, 1, 0);
    check_ddp_graph(d, BT_F32, 1, 1, 0);
    check_ddp_graph(d, BT_BF16, 1, 0, 0);
    check_ddp_graph(d, BT_F32, 0, 0, 1);   /* copy engines: their waits and flags replayed */
    check_ddp_graph(d, BT_F32, 0, 1, 1);
    check_ddp_graph(d, BT_BF16, 0, 1, 1);  /* asked for, but bf16 on the wire: NCCL */
    bt_dist_shutdown(d);
    fprintf(stderr, "rank %d: ddp graph (%s communicators) done, %d failures\n", rank, ddp_graph_blocking ? "blocking" : "nonblocking", fails);
    return fails ? 1 : 0;
}
static void test_ddp_graph(void) {
    NEED_2_GPUS();
    for (int b = 1; b >= 0; b--) {
        char err[256], line[2][96];
        const char *kind = b ? "blocking" : "nonblocking";
        ddp_graph_blocking = b;
        int code = launch2(ddp_graph_rank, b ? "ddp_graph_blocking" : "ddp_graph_nonblocking", 5, 120, err, sizeof err, NULL);
        for (int r = 0; r < 2; r++) snprintf(line[r], sizeof line[r], "rank %d: ddp graph (%s communicators) done, 0 failures", r, kind);
        BT_CHECK(code == 0 && bt_test_file_has(err, line[0]) && bt_test_file_has(err, line[1]), "ddp graph with %s communicators: exit %d", kind, code);
        if (code || !bt_test_file_has(err, line[0])) dump(kind, err);
    }
}

static int ddp_rank(int rank) {
    bt_dist *d = bt_dist_init(NULL);
    check_ddp(d, BT_F32, 0, 0, 0, 0, 0);
    check_ddp(d, BT_BF16, 0, 0, 0, 1, 0);
    check_ddp(d, BT_F32, 1, 0, 0, 2, 0);
    check_ddp(d, BT_BF16, 1, 0, 0, 3, 0);
    check_ddp(d, BT_F32, 0, 1, 0, 4, 0);
    check_ddp(d, BT_F32, 0, 0, 1, 5, 0);   /* the collectives enqueued by the engine's own thread */
    check_ddp(d, BT_BF16, 1, 1, 1, 6, 0);
    check_ddp(d, BT_F32, 0, 0, 0, 7, 1);   /* copy engines: from this thread, the launch thread, as ready */
    check_ddp(d, BT_F32, 0, 0, 1, 8, 1);
    check_ddp(d, BT_F32, 0, 1, 1, 9, 1);
    check_ddp(d, BT_F32, 1, 0, 1, 10, 1);  /* asked for with ZeRO shards: NCCL */
    check_ddp_rows(d, BT_F32);
    check_ddp_rows(d, BT_BF16);
    check_ddp_hooks(d);
    bt_dist_shutdown(d);
    fprintf(stderr, "rank %d: ddp done, %d failures\n", rank, fails);
    return fails ? 1 : 0;
}

static void test_ddp(void) {
    NEED_2_GPUS();
    char err[256];
    int code = launch2(ddp_rank, "ddp", 5, 300, err, sizeof err, NULL);
    BT_CHECK(code == 0 && bt_test_file_has(err, "rank 0: ddp done, 0 failures") && bt_test_file_has(err, "rank 1: ddp done, 0 failures"), "exit %d", code);
    if (code) dump("ddp", err);
}

/* ---- faults ------------------------------------------------------------------------------- */

static int fault_victim, fault_mode;   /* mode 0: the victim SIGKILLs itself; 1: it stops taking part; 2: the same in a graph */

static int fault_rank(int rank) {
    bt_dist_opts o;
    memset(&o, 0, sizeof o);
    o.nccl_timeout_s = fault_mode >= 1 ? 5 : 60;
    o.blocking_comms = fault_mode == 2;
    bt_dist *d = bt_dist_init(&o);
    int64_t n = 16 << 20;
    float *buf = NULL;
    cudaMalloc(&buf, (size_t)n * 4);
    cudaMemset(buf, 0, (size_t)n * 4);
    if (fault_mode == 2) {   /* an all-reduce captured in a graph: only bt_dist_watch times its replays */
        bt_device dev = bt_cuda_device(d->device);
        bt_all_reduce(d->world_comm, buf, buf, n, BT_F32, BT_RED_SUM, NULL);   /* NCCL connects outside the capture */
        bt_graph *gr = bt_graph_capture_begin(dev);
        bt_all_reduce(d->world_comm, buf, buf, n, BT_F32, BT_RED_SUM, NULL);
        bt_graph_capture_end(gr);
        for (int it = 0; it < 200; it++) {
            if (rank == fault_victim && it == 5) for (;;) bt_test_sleep(1);
            bt_graph_launch(gr);
            bt_dist_watch(d->world_comm, "ddp test graph", NULL);
            cudaStreamSynchronize(bt_k_current_stream(d->device));
        }
        fprintf(stderr, "rank %d: the loop ended, which it must not\n", rank);
        return 0;
    }
    for (int it = 0; it < 200; it++) {
        if (rank == fault_victim && it == 5 && fault_mode == 1) for (;;) bt_test_sleep(1);   /* alive, silent */
        bt_all_reduce(d->world_comm, buf, buf, n, BT_F32, BT_RED_SUM, NULL);
        if (rank == fault_victim && it == 5) raise(SIGKILL);   /* its peer is inside this collective */
        cudaStreamSynchronize(bt_k_current_stream(d->device));
    }
    fprintf(stderr, "rank %d: the loop ended, which it must not\n", rank);
    return 0;
}

static void run_fault(int victim, int mode, const char *name, const char *want, const char *want2, double limit) {
    fault_victim = victim; fault_mode = mode;
    char err[256], line[256];
    double secs = 0;
    int code = launch2(fault_rank, name, 30, 120, err, sizeof err, &secs);
    int other = 1 - victim;
    BT_CHECK(code != 0 && code != -1, "%s: the launcher exited %d", name, code);
    snprintf(line, sizeof line, "bt_dist: rank %d exited with code 1", other);
    BT_CHECK(bt_test_file_has(err, line), "%s: rank %d did not exit by itself with code 1", name, other);
    snprintf(line, sizeof line, "[rank %d] rank %d (", other, other);
    BT_CHECK(bt_test_file_has(err, line) && bt_test_file_has(err, want) && bt_test_file_has(err, want2), "%s: no \"%s ... %s\" from rank %d", name, want,
             want2, other);
    BT_CHECK(secs < limit, "%s: took %.1f s (limit %.0f)", name, secs, limit);
    BT_CHECK(!bt_test_file_has(err, "the loop ended"), "%s: a rank went on", name);
    if (bt_test__cur_failed) dump(name, err);
}

static void test_fault_kill(void) {
    NEED_2_GPUS();
    run_fault(1, 0, "kill1", "): rank 1 (", "died", 25);
    run_fault(0, 0, "kill0", "): rank 0 (", "died", 25);
}

static void test_fault_timeout(void) {
    NEED_2_GPUS();
    run_fault(1, 1, "hang1", "collective all_reduce on communicator world timed out after", "a peer may have died or hung", 25);
}

/* a peer that stops taking part in a replayed graph's collective: the watch after the launch times it */
static void test_fault_graph_timeout(void) {
    NEED_2_GPUS();
    run_fault(1, 2, "hang_graph", "collective ddp test graph on communicator world timed out after", "a peer may have died or hung", 25);
}

/* BT_TEST_ONLY=word runs the tests whose name holds it (graph: the CUDA graph ones) */
static const char *g_only;
#define RUN(fn) do { if (!g_only || strstr(#fn, g_only)) BT_RUN(fn); } while (0)
int main(void) {
    if (bt_test_dir_make("test_dist_gpu")) return 1;
    signal(SIGPIPE, SIG_IGN);
    g_only = getenv("BT_TEST_ONLY");
    RUN(test_collectives);
    RUN(test_network_transport);
    RUN(test_ddp);
    RUN(test_ddp_graph);
    RUN(test_fault_kill);
    RUN(test_fault_timeout);
    RUN(test_fault_graph_timeout);
    bt_test_dir_remove();
    return bt_test_summary("test_dist_gpu");
}
