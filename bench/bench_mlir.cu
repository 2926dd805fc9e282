/* bench_mlir.cu - bt_mlir.h's fused kernels on the GPU at GPT-2 shapes: the chains of
   tests/test_mlir_chains.h fused (one MLIR kernel forward, one backward) against the same bt ops
   unfused and, where bt_kernels.cuh has one, the hand-written kernel; forward and forward+backward,
   in GB/s of the minimal traffic (every input read once and every output written once per pass) and
   as a share of the measured device-to-device copy bandwidth; then the compile time per chain, cold
   (trace + MLIR pipeline + driver load), from memory, and from the disk cache. Also the Llama-style
   block (RMSNorm + SwiGLU MLP, 2 layers) trained fused and unfused: tokens/s.

   Build and run (on the GPU machine; it needs libMLIR.so / libLLVM.so.19.1 and a CUDA toolkit's
   libdevice at run time, see tests/test_mlir_gpu.cu):
     make bench-mlir                 # = build/bench_mlir, then runs it
     build/bench_mlir [--quick] [--dtype bf16|f32]
   bench/bench_mlir_torch.py runs the same chains in PyTorch eager and torch.compile.
   Timing: CUDA events around each call on bt_k_current_stream(0), 5 warm-up calls, the median of 20, inputs
   rotated over 4 sets so that a call does not find the previous call's data in L2. */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_MLIR_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#include "bt_mlir.h"
#include "bt_optim.h"
#include "tests/test_mlir_chains.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GPU bt_cuda_device(0)
#define NSETS 4
#define WARMUP 5
#define REPS 20

static double now_ms(void) { struct timespec ts; timespec_get(&ts, TIME_UTC); return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec; }
static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

/* the hand-written kernel for a chain, when there is one */
static bt_tensor *hand_layernorm(bt_tensor **in) { return bt_layernorm(in[0], in[1], in[2], 1e-5); }
static bt_tensor *hand_softmax(bt_tensor **in) { return bt_softmax(in[0]); }
static bt_tensor *hand_log_softmax(bt_tensor **in) { return bt_log_softmax(in[0]); }
static bt_tensor *hand_res_ln(bt_tensor **in) { return bt_layernorm(bt_add(in[0], in[1]), in[2], in[3], 1e-5); }

typedef struct { const char *chain; int64_t B, T, C; bt_tensor *(*hand)(bt_tensor **); } bench_case;
static const bench_case cases[] = {
    {"layernorm", 8, 1024, 768, hand_layernorm},
    {"residual_layernorm", 8, 1024, 768, hand_res_ln},
    {"rmsnorm", 8, 1024, 768, NULL},
    {"bias_gelu", 8, 1024, 3072, NULL},
    {"swiglu", 8, 1024, 3072, NULL},
    {"softmax_ops", 8, 1024, 1024, hand_softmax},          /* attention-row sized */
    {"log_softmax", 4, 1024, 50304, hand_log_softmax},     /* the loss over the padded vocabulary */
};

static const mlir_chain *find_chain(const char *name) {
    for (int i = 0; i < N_MLIR_CHAINS; i++) if (!strcmp(mlir_chains[i].name, name)) return &mlir_chains[i];
    return NULL;
}
typedef enum { RUN_FUSED, RUN_OPS, RUN_HAND } run_kind;
/* median ms of one call (forward, or forward + backward) */
static double time_calls(const mlir_chain *ch, const bench_case *bc, bt_mlir_fn *fn, run_kind kind, int backward,
                         bt_tensor *sets[NSETS][4], bt_tensor **r) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    double ms[REPS];
    int old = bt_set_grad_enabled(backward);
    for (int it = 0; it < WARMUP + REPS; it++) {
        bt_tensor **in = sets[it % NSETS];
        bt_scope_begin();
        cudaEventRecord(e0, bt_k_current_stream(0));
        bt_tensor *y = kind == RUN_FUSED ? bt_mlir_call(fn, in) : kind == RUN_HAND ? bc->hand(in) : ch->body(in, ch->n_in, NULL);
        if (backward) bt_backward_with(y, r[it % NSETS]);
        cudaEventRecord(e1, bt_k_current_stream(0));
        bt_scope_end();
        cudaEventSynchronize(e1);
        float t = 0; cudaEventElapsedTime(&t, e0, e1);
        if (it >= WARMUP) ms[it - WARMUP] = t;
        if (backward) for (int k = 0; k < ch->n_in; k++) { bt_release(in[k]->grad); in[k]->grad = NULL; }
    }
    bt_set_grad_enabled(old);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    qsort(ms, REPS, sizeof(double), cmp_d);
    return ms[REPS / 2];
}
static double copy_gbs(void) {                 /* device-to-device copy, read + write counted */
    size_t n = (size_t)1 << 30;
    void *a = bt_alloc(GPU, n, bt_k_current_stream(0)), *b = bt_alloc(GPU, n, bt_k_current_stream(0));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    double best = 1e30;
    for (int i = 0; i < 8; i++) {
        cudaEventRecord(e0, bt_k_current_stream(0));
        cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, bt_k_current_stream(0));
        cudaEventRecord(e1, bt_k_current_stream(0));
        cudaEventSynchronize(e1);
        float t; cudaEventElapsedTime(&t, e0, e1);
        if (i > 1 && t < best) best = t;
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    bt_free(a); bt_free(b);
    return 2.0 * (double)n / (best * 1e6);
}

static void bench_chain(const bench_case *bc, bt_dtype dt, double copy, int quick) {
    const mlir_chain *ch = find_chain(bc->chain);
    int64_t T = quick ? bc->T / 4 : bc->T;
    bt_scope_begin();
    bt_tensor *sets[NSETS][4], *r[NSETS];
    for (int s = 0; s < NSETS; s++) {
        chain_inputs(ch, bc->B, T, bc->C, dt, GPU, 1000 + 10 * (uint64_t)s, sets[s]);
        int old = bt_set_grad_enabled(0);
        r[s] = bt_randn(bt_shape_of(ch->body(sets[s], ch->n_in, NULL)), dt, GPU, 77 + (uint64_t)s);
        bt_set_grad_enabled(old);
    }
    bt_mlir_fn *fn = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, BT_MLIR_STRICT);
    /* minimal traffic: inputs + output forward; inputs + output gradient + input gradients backward */
    double in_bytes = 0, out_bytes = (double)bt_numel(r[0]) * (double)bt_dtype_size(dt);
    for (int k = 0; k < ch->n_in; k++) in_bytes += (double)bt_numel(sets[0][k]) * (double)bt_dtype_size(dt);
    double fwd_bytes = in_bytes + out_bytes, fb_bytes = fwd_bytes + 2 * in_bytes + out_bytes;
    for (int backward = 0; backward < 2; backward++) {
        double bytes = backward ? fb_bytes : fwd_bytes;
        double tf = time_calls(ch, bc, fn, RUN_FUSED, backward, sets, r);
        double to = time_calls(ch, bc, fn, RUN_OPS, backward, sets, r);
        double th = bc->hand ? time_calls(ch, bc, fn, RUN_HAND, backward, sets, r) : 0;
        char hand[64] = "-";
        if (bc->hand) snprintf(hand, sizeof hand, "%8.1f (%3.0f%%)", bytes / (th * 1e6), 100 * bytes / (th * 1e6) / copy);
        printf("| %-18s | %-4s | %-3s | [%lld,%lld,%lld] | %7.3f | %8.1f (%3.0f%%) | %7.3f | %8.1f (%3.0f%%) | %s | %.2fx |\n",
               ch->name, bt_dtype_name(dt), backward ? "f+b" : "fwd", (long long)bc->B, (long long)T, (long long)bc->C,
               tf, bytes / (tf * 1e6), 100 * bytes / (tf * 1e6) / copy, to, bytes / (to * 1e6), 100 * bytes / (to * 1e6) / copy,
               hand, to / tf);
    }
    bt_mlir_fn_free(fn);
    bt_scope_end();
}
/* compile time of chain ch: cold (nothing cached), from memory (a new fn, same chain: a trace and a
   lookup), from the disk cache after bt_mlir_reset (a trace, reading the PTX, the driver's load) */
static void bench_compile(const mlir_chain *ch, const char *dir) {
    bt_scope_begin();
    bt_tensor *in[4];
    chain_inputs(ch, 8, 1024, 768, BT_BF16, GPU, 5, in);
    double t[3];
    bt_mlir_set_cache_dir(dir);                  /* cold: compiled, then written there; disk: read back */
    for (int mode = 0; mode < 3; mode++) {
        if (mode != 1) bt_mlir_reset();
        bt_mlir_fn *fn = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, BT_MLIR_STRICT);
        cudaDeviceSynchronize();
        double t0 = now_ms();
        bt_scope_begin();
        bt_backward_with(bt_mlir_call(fn, in), bt_full(bt_shape_of(in[0]), 1.0, BT_BF16, GPU));   /* forward + backward kernels */
        bt_scope_end();
        cudaDeviceSynchronize();
        t[mode] = now_ms() - t0;
        bt_mlir_fn_free(fn);
        for (int k = 0; k < ch->n_in; k++) { bt_release(in[k]->grad); in[k]->grad = NULL; }
    }
    printf("| %-18s | %8.1f | %8.1f | %8.1f |\n", ch->name, t[0], t[1], t[2]);
    bt_scope_end();
}
static double bench_llama(int fused, int steps) {
    bt_scope_begin();
    llama_block blk;
    llama_block_init(&blk, 768, 2048, GPU, 60);
    bt_tensor *params[4] = {blk.w_n, blk.w1, blk.w3, blk.w2};
    bt_adamw opt;
    bt_adamw_init(&opt, params, 4, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f);
    double t0 = 0;
    for (int s = 0; s < steps + 3; s++) {
        if (s == 3) { cudaDeviceSynchronize(); t0 = now_ms(); }
        bt_scope_begin();
        bt_tensor *x = bt_randn(bt_shape3(8, 1024, 768), BT_F32, GPU, 70 + (uint64_t)s);
        bt_tensor *h = llama_block_forward(&blk, llama_block_forward(&blk, x, fused), fused);
        bt_backward(bt_mean(bt_square(h), NULL, 0, 0));
        bt_adamw_step(&opt, 1e-4f);
        bt_zero_grad(params, 4);
        bt_scope_end();
    }
    cudaDeviceSynchronize();
    double ms = (now_ms() - t0) / steps;
    bt_adamw_free(&opt);
    llama_block_free(&blk);
    bt_scope_end();
    return 8.0 * 1024 / (ms * 1e-3);
}

int main(int argc, char **argv) {
    int quick = 0; bt_dtype only = BT_NDTYPES;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) { i++; only = !strcmp(argv[i], "bf16") ? BT_BF16 : BT_F32; }
        else { fprintf(stderr, "usage: %s [--quick] [--dtype bf16|f32]\n", argv[0]); return 2; }
    }
    if (bt_k_device_count() == 0) { fprintf(stderr, "bench_mlir: no CUDA device\n"); return 1; }
    if (!bt_mlir_can_compile()) { fprintf(stderr, "bench_mlir: built without MLIR (make MLIR=1)\n"); return 1; }
    cudaDeviceProp p; cudaGetDeviceProperties(&p, 0);
    time_t now = time(NULL); char date[32]; strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    bt_mlir_set_cache_dir("");
    double copy = copy_gbs();
    printf("bench_mlir: %s, %s; device-to-device copy %.0f GB/s (the %% columns are of it)\n\n", p.name, date, copy);
    printf("| chain | dtype | pass | shape | fused ms | fused GB/s | unfused ms | unfused GB/s | hand-written GB/s | fused speedup |\n");
    printf("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int d = 0; d < 2; d++) {
        bt_dtype dt = d ? BT_F32 : BT_BF16;
        if (only != BT_NDTYPES && dt != only) continue;
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) bench_chain(&cases[c], dt, copy, quick);
    }
    char dir[64]; snprintf(dir, sizeof dir, "/tmp/bench_mlir_cache.%ld", (long)getpid());
    printf("\ncompile time (ms; forward + backward kernels, bf16 [8,1024,768]; cold = trace + pipeline + PTX load)\n\n");
    printf("| chain | cold | memory | disk |\n| --- | ---: | ---: | ---: |\n");
    for (int i = 0; i < N_MLIR_CHAINS; i++) bench_compile(&mlir_chains[i], dir);
    char cmd[128]; snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    bt_mlir_set_cache_dir("");
    int steps = quick ? 5 : 20;
    double tf = bench_llama(1, steps), tu = bench_llama(0, steps);
    printf("\nLlama-style MLP block x2 (C 768, hidden 2048, B 8, T 1024, f32, AdamW): fused %.0f tokens/s, unfused %.0f tokens/s (%.2fx)\n",
           tf, tu, tf / tu);
    bt_mlir_shutdown();
    return 0;
}
