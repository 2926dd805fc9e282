/* bench_cpu.c - the CPU fp32 matrix product of bt_tensor.h (bt__sgemm) against the machine's
   measured peak and, when built with BT_BENCH_OPENBLAS, against OpenBLAS's cblas_sgemm (make
   bench-cpu, which then times the default CPU run with bench/bench_cpu_val6.sh).

     build/bench_cpu [--quick] [--reps N] [--only TEXT]        (make bench-cpu)
   --quick skips the products over 10^8 multiply-adds; --only keeps those whose name contains TEXT.

   Peak: an FMA loop with 12 independent accumulators in the widest vector the build has (AVX-512,
   else AVX2), one copy per OpenMP thread, best of 5 trials. "per core" divides the flops by the
   thread's own CPU time (what a core does while it runs: little affected by other processes
   sharing the machine), "wall" by the wall time of all threads together (what the machine gave
   us just now).
   Products: the shapes of the default CPU training run (GPT-2 s4: 4 layers, C 128, B 8 x T 64 = 512
   rows, vocabulary padded to 50304) with their transposes as linear/matmul call them, and 1024^3
   in all four transposes. Each is timed as the median of N calls after a warm-up, on random inputs,
   on one thread (against the per-core peak: the kernel's efficiency, the figure other processes
   disturb least) and on all threads (against the nominal peak, per-core peak x threads).
   GFLOP/s counts 2 M N K; the step total adds the products of one training step (layers x 4).
   The load average is printed with the results: timings on a shared machine are only comparable
   at similar loads. */
#define _POSIX_C_SOURCE 200809L
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#include "bt_tensor.h"
#ifdef BT_BENCH_OPENBLAS
#include <cblas.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- peak: 12 chains of FMAs per thread, long enough that the chains' latency is hidden ---- */
#if defined(__AVX512F__)
#define PEAK_ISA "AVX-512"
#define PEAK_W 16
typedef __m512 pv;
#define PV_SET(x) _mm512_set1_ps(x)
#define PV_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define PV_SUM(v) _mm512_reduce_add_ps(v)
#elif defined(__AVX2__) && defined(__FMA__)
#define PEAK_ISA "AVX2+FMA"
#define PEAK_W 8
typedef __m256 pv;
#define PV_SET(x) _mm256_set1_ps(x)
#define PV_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
static float pv_sum(__m256 v) { float f[8]; _mm256_storeu_ps(f, v); return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7]; }
#define PV_SUM(v) pv_sum(v)
#else
#define PEAK_ISA "scalar"
#define PEAK_W 1
typedef float pv;
#define PV_SET(x) (x)
#define PV_FMA(a, b, c) ((a) * (b) + (c))
#define PV_SUM(v) (v)
#endif
#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
/* flops per second of one thread's own CPU time; *sink keeps the result alive */
static double peak_thread(long iters, float *sink) {
    double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
#define DECL(i) pv a##i = PV_SET(0.001f * (i));
    R12(DECL)
    pv b = PV_SET(0.9999f), c = PV_SET(0.0001f);
    for (long it = 0; it < iters; it++) {
#define STEP(i) a##i = PV_FMA(a##i, b, c);
        R12(STEP)
#if PEAK_W > 1
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                         "+v"(a9), "+v"(a10), "+v"(a11));
#endif
    }
#define ADD(i) s += PV_SUM(a##i);
    float s = 0;
    R12(ADD)
    *sink = s;
    return 2.0 * PEAK_W * 12 * (double)iters / (clock_s(CLOCK_THREAD_CPUTIME_ID) - t0);
}
/* *per_core: the median thread's rate by its CPU time; returns the all-threads wall rate. The best
   of 5 trials each: a peak is what the cores can do, and a trial that another process (or another
   virtual machine on the same physical core) disturbed reads low. */
static double measure_peak(double *per_core) {
    long iters = 20000000 / PEAK_W * 8;
    int nt = omp_get_max_threads();
    double *rate = (double *)malloc(sizeof(double) * (size_t)nt), best_wall = 0;
    float sink = 0;
    *per_core = 0;
    for (int trial = 0; trial < 5; trial++) {
        double t0 = omp_get_wtime();
        #pragma omp parallel reduction(+ : sink)
        { float s; rate[omp_get_thread_num()] = peak_thread(iters, &s); sink += s; }
        double wall = 2.0 * PEAK_W * 12 * (double)iters * nt / (omp_get_wtime() - t0);
        qsort(rate, (size_t)nt, sizeof(double), cmp_double);
        if (rate[nt / 2] > *per_core) *per_core = rate[nt / 2];
        if (wall > best_wall) best_wall = wall;
    }
    free(rate);
    if (sink == 12345.f) printf(" ");
    return best_wall;
}

/* ---- products ---- */
typedef struct { const char *what; int64_t M, N, K; int ta, tb; } shape;
static const shape SHAPES[] = {
    /* per layer (x4): qkv, attention projection, fc, fc projection; forward y = x w^T (NT),
       backward dx = dy w (NN) and dw = dy^T x (TN) */
    {"qkv fwd", 512, 384, 128, 0, 1},   {"qkv dx", 512, 128, 384, 0, 0},   {"qkv dw", 384, 128, 512, 1, 0},
    {"proj fwd", 512, 128, 128, 0, 1},  {"proj dx", 512, 128, 128, 0, 0},  {"proj dw", 128, 128, 512, 1, 0},
    {"fc fwd", 512, 512, 128, 0, 1},    {"fc dx", 512, 128, 512, 0, 0},    {"fc dw", 512, 128, 512, 1, 0},
    {"fcproj fwd", 512, 128, 512, 0, 1}, {"fcproj dx", 512, 512, 128, 0, 0}, {"fcproj dw", 128, 512, 512, 1, 0},
    /* the tied lm head: logits = x wte^T, dx = dlogits wte, dwte = dlogits^T x */
    {"lm head fwd", 512, 50304, 128, 0, 1}, {"lm head dx", 512, 128, 50304, 0, 0}, {"lm head dw", 50304, 128, 512, 1, 0},
    {"1024^3 NN", 1024, 1024, 1024, 0, 0}, {"1024^3 NT", 1024, 1024, 1024, 0, 1},
    {"1024^3 TN", 1024, 1024, 1024, 1, 0}, {"1024^3 TT", 1024, 1024, 1024, 1, 1},
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

typedef void (*gemm_fn)(const shape *s, const float *A, const float *B, float *C);
static void ours(const shape *s, const float *A, const float *B, float *C) {
    bt__sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.f, A, B, 0.f, C, NULL);
}
#ifdef BT_BENCH_OPENBLAS
static void openblas(const shape *s, const float *A, const float *B, float *C) {
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, (int)s->M,
                (int)s->N, (int)s->K, 1.f, A, s->ta ? (int)s->M : (int)s->K, B, s->tb ? (int)s->K : (int)s->N, 0.f, C,
                (int)s->N);
}
#endif
/* median wall seconds of reps calls on nt threads. First a pause: the other implementation's idle
   threads (OpenMP's and OpenBLAS's both spin for a while after a call) must be asleep, or they take
   cores from this one. */
static double time_gemm(gemm_fn f, int nt, const shape *s, const float *A, const float *B, float *C, int reps) {
    double *t = (double *)malloc(sizeof(double) * (size_t)reps);
    struct timespec pause = {0, 300000000};
    omp_set_num_threads(nt);
#ifdef BT_BENCH_OPENBLAS
    openblas_set_num_threads(nt);
#endif
    nanosleep(&pause, NULL);
    f(s, A, B, C);                            /* warm-up: packing buffers, pages, caches */
    for (int r = 0; r < reps; r++) {
        double t0 = clock_s(CLOCK_MONOTONIC);
        f(s, A, B, C);
        t[r] = clock_s(CLOCK_MONOTONIC) - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    double med = t[reps / 2];
    free(t);
    return med;
}
static float *random_floats(int64_t n, uint64_t seed) {
    float *p = (float *)malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(2.0 * bt_philox_uniform(seed, (uint64_t)i) - 1.0);
    return p;
}
/* max |ours - other| / max |other|: the two implementations agree */
static double max_rel_diff(const float *a, const float *b, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]), v = fabs((double)b[i]);
        if (e > d) d = e;
        if (v > m) m = v;
    }
    return m > 0 ? d / m : d;
}

int main(int argc, char **argv) {
    int reps = 9, quick = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else { fprintf(stderr, "usage: %s [--quick] [--reps N] [--only TEXT]\n", argv[0]); return 2; }
    }
    if (reps < 1) reps = 1;
    double load[3] = {0, 0, 0};
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) { if (fscanf(lf, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1; fclose(lf); }
    int nt = omp_get_max_threads();
    double core_peak, wall_peak = measure_peak(&core_peak);
    double peak = core_peak * nt;
    printf("bench_cpu: %d threads, ISA %s, GEMM micro-tile %dx%d, load average %.2f %.2f %.2f\n", nt, PEAK_ISA, BT__MR,
           BT__NR, load[0], load[1], load[2]);
    printf("peak fp32 FMA: %.1f GFLOP/s per core (CPU time) -> nominal %.1f GFLOP/s on %d threads; %.1f GFLOP/s wall "
           "on %d threads just now\n", core_peak / 1e9, peak / 1e9, nt, wall_peak / 1e9, nt);
#ifdef BT_BENCH_OPENBLAS
    printf("OpenBLAS: %s, core %s\n", openblas_get_config(), openblas_get_corename());
#endif
    printf("%-12s %-19s | %-23s | %-31s", "product", "M x N x K op", "ours, 1 thread", "ours, all threads");
#ifdef BT_BENCH_OPENBLAS
    printf(" | %-23s | %-31s | %s", "OpenBLAS, 1 thread", "OpenBLAS, all threads", "max rel diff");
#endif
    printf("\n");
    double tot_flops = 0, tot_ours = 0, tot_blas = 0;
    for (int i = 0; i < NSHAPES; i++) {
        const shape *s = &SHAPES[i];
        if ((quick && s->M * s->N * s->K > 1e8) || (only && !strstr(s->what, only))) continue;
        double fl = 2.0 * s->M * s->N * s->K;
        float *A = random_floats(s->M * s->K, 1 + i), *B = random_floats(s->K * s->N, 100 + i);
        float *C = (float *)malloc(sizeof(float) * (size_t)(s->M * s->N));
        char dims[40];
        snprintf(dims, sizeof dims, "%lldx%lldx%lld %s%s", (long long)s->M, (long long)s->N, (long long)s->K,
                 s->ta ? "T" : "N", s->tb ? "T" : "N");
        double t1 = time_gemm(ours, 1, s, A, B, C, reps), tn = time_gemm(ours, nt, s, A, B, C, reps);
        printf("%-12s %-19s | %6.1f GF/s %5.1f%% core | %8.3f ms %6.1f GF/s %5.1f%%", s->what, dims, fl / t1 / 1e9,
               100 * fl / t1 / core_peak, tn * 1e3, fl / tn / 1e9, 100 * fl / tn / peak);
        int layer = i < 12;                   /* the per-layer products run once in each of the 4 layers */
        tot_flops += fl * (layer ? 4 : 1) * (i < 15);
        tot_ours += tn * (layer ? 4 : 1) * (i < 15);
#ifdef BT_BENCH_OPENBLAS
        float *C2 = (float *)malloc(sizeof(float) * (size_t)(s->M * s->N));
        double b1 = time_gemm(openblas, 1, s, A, B, C2, reps), bn = time_gemm(openblas, nt, s, A, B, C2, reps);
        tot_blas += bn * (layer ? 4 : 1) * (i < 15);
        printf(" | %6.1f GF/s %5.1f%% core | %8.3f ms %6.1f GF/s %5.1f%% | %.1e", fl / b1 / 1e9, 100 * fl / b1 / core_peak,
               bn * 1e3, fl / bn / 1e9, 100 * fl / bn / peak, max_rel_diff(C, C2, s->M * s->N));
        free(C2);
#endif
        printf("\n");
        fflush(stdout);
        free(A); free(B); free(C);
    }
    omp_set_num_threads(nt);
    if (!quick && !only) {
        printf("one training step's products (the 15 shapes above, layers x4): %.2f GFLOP in %.1f ms ours (%.1f GFLOP/s)",
               tot_flops / 1e9, tot_ours * 1e3, tot_flops / tot_ours / 1e9);
#ifdef BT_BENCH_OPENBLAS
        printf(", %.1f ms OpenBLAS (%.1f GFLOP/s)", tot_blas * 1e3, tot_flops / tot_blas / 1e9);
#endif
        printf("\n");
    }
    (void)tot_blas;
    return 0;
}
