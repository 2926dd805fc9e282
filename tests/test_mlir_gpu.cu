/* test_mlir_gpu.cu - bt_mlir.h on the GPU: the chains of tests/test_mlir_chains.h as PTX kernels against
   the same bt ops unfused on the GPU and against the hand-written kernels (bt_layernorm, bt_softmax,
   bt_gelu), forward and backward (fused and replay), f32 and bf16; the fused CPU and GPU kernels
   against each other; the column-gradient partial sums over many rows; a user stream; the
   Llama-style block trained both ways; and the ahead-of-time path.

   Two builds:
     plain nvcc (make test-gpu): no MLIR. Only the ahead-of-time test runs: its kernels come from the
       C file `make mlir-aot` wrote (compiled in when it exists: -DBT_MLIR_AOT_SOURCE) and from the
       cache directory $BT_MLIR_AOT_DIR (default build/mlir_aot). No compile may happen.
     make MLIR=1 test-gpu: everything (the PTX is compiled at run time; the machine needs libMLIR.so
       and libLLVM.so.19.1, e.g. Debian's libmlir-19 and libllvm19 unpacked with dpkg -x and found
       through LD_LIBRARY_PATH, and a CUDA toolkit's libdevice: BT_MLIR_CUDA_PATH).
   Without a GPU every test reports skipped.

   Tolerances (tests/bt_test.h's table): f32 BT_TOL_F32 (1e-5) relative against the unfused GPU ops
   (libdevice's exp/tanh are within a few ulp, reductions sum in other orders; the measured values
   are printed with BT_TEST_VERBOSE=1); bf16 BT_TOL_BF16_ROUND (4e-3) against an f64 CPU run of the
   same ops (one rounding to bf16, at most 2^-8 = 3.9e-3, plus the f32 part: 1.3e-3 to 2.3e-3 measured
   on the CPU's kernels). */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#define BT_MLIR_IMPLEMENTATION
#define BT_OPTIM_IMPLEMENTATION
#include "bt_mlir.h"
#include "bt_optim.h"
#include "tests/bt_test.h"
#include "tests/test_mlir_chains.h"
#ifdef BT_MLIR_AOT_SOURCE
#include BT_MLIR_AOT_SOURCE
#endif
#include <stdlib.h>

#define GPU bt_cuda_device(0)
#define CPU bt_cpu()
static int no_gpu(void) { if (bt_k_device_count() > 0) return 0; BT_SKIP("no CUDA device"); return 1; }
static int no_mlir(void) { if (bt_mlir_can_compile()) return 0; BT_SKIP("built without MLIR (make MLIR=1 test-gpu compiles PTX at run time)"); return 1; }

/* one chain on the GPU: fused (fused and replay backward) against unfused; bf16 against f64 on the CPU */
static void check_gpu_chain(const mlir_chain *ch, int64_t B, int64_t T, int64_t C, bt_dtype dt, uint64_t seed, int flags) {
    bt_scope_begin();
    bt_tensor *in[4], *g0[4], *g1[4], *g2[4];
    chain_inputs(ch, B, T, C, dt, GPU, seed, in);
    bt_mlir_fn *fused = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, flags);
    bt_mlir_fn *replay = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, BT_MLIR_REPLAY_BACKWARD | flags);
    bt_tensor *r = bt_randn(chain_out_shape(ch, in), BT_F32, GPU, seed + 99);
    bt_tensor *y1 = chain_run(fused, ch, in, r, g1), *y2 = chain_run(replay, ch, in, r, g2);
    BT_CHECK(bt_mlir_last_fused(fused), "%s: not fused: %s", ch->name, bt_mlir_last_reason(fused));
    double worst = 0;
    if (dt == BT_F32) {
        bt_tensor *y0 = chain_run(NULL, ch, in, r, g0);
        double ey = bt_test_relerr_t(y1, y0);
        BT_CHECK(ey < BT_TOL_F32, "%s C=%lld: forward rel err %.3g", ch->name, (long long)C, ey);
        for (int k = 0; k < ch->n_in; k++) {
            double e1 = bt_test_relerr_t(g1[k], g0[k]), e2 = bt_test_relerr_t(g2[k], g0[k]);
            BT_CHECK(e1 < BT_TOL_F32 && e2 < BT_TOL_F32, "%s C=%lld: grad %d fused %.3g, replay %.3g", ch->name, (long long)C, k, e1, e2);
            worst = fmax(worst, e1);
        }
        if (bt_test_verbose()) printf("info: %-20s f32 C=%-5lld forward %.2e worst grad %.2e\n", ch->name, (long long)C, ey, worst);
    } else {                                   /* against f64 on the CPU, from the same bf16 values */
        bt_tensor *in64[4];
        for (int k = 0; k < ch->n_in; k++) in64[k] = chain_leaf_copy(in[k], BT_F64, CPU);
        bt_tensor *y64 = chain_run(NULL, ch, in64, bt_to(bt_cast(bt_cast(r, BT_BF16), BT_F64), CPU), g0);
        double ey = bt_test_relerr_t(y1, y64);
        BT_CHECK(ey < BT_TOL_BF16_ROUND, "%s bf16 C=%lld: forward vs f64 rel err %.3g", ch->name, (long long)C, ey);
        for (int k = 0; k < ch->n_in; k++) {
            double e1 = bt_test_relerr_t(g1[k], g0[k]);
            BT_CHECK(e1 < BT_TOL_BF16_ROUND, "%s bf16 C=%lld: grad %d vs f64 rel err %.3g", ch->name, (long long)C, k, e1);
            worst = fmax(worst, e1);
        }
        if (bt_test_verbose()) printf("info: %-20s bf16 C=%-5lld forward %.2e worst grad %.2e (vs f64)\n", ch->name, (long long)C, ey, worst);
    }
    bt_scope_end();
    bt_mlir_fn_free(fused); bt_mlir_fn_free(replay);
}
static void test_gpu_chains(void) {
    if (no_gpu()) return;
    if (no_mlir()) return;
    const int64_t Cs[3] = {768, 100, 3072};
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < N_MLIR_CHAINS; i++) check_gpu_chain(&mlir_chains[i], 4, 33, Cs[c], d ? BT_BF16 : BT_F32, 10 + (uint64_t)i, BT_MLIR_STRICT);
}
static void test_gpu_ops(void) {
    if (no_gpu()) return;
    if (no_mlir()) return;
    for (int i = 0; i < N_MLIR_OPS; i++) check_gpu_chain(&mlir_ops[i], 3, 7, 129, BT_F32, 200 + (uint64_t)i, BT_MLIR_STRICT);
}
/* the fused chains against the hand-written kernels that compute the same thing */
static void test_gpu_vs_hand_written(void) {
    if (no_gpu()) return;
    if (no_mlir()) return;
    bt_scope_begin();
    bt_tensor *in[4];
    chain_inputs(&mlir_chains[0], 8, 64, 768, BT_F32, GPU, 7, in);
    bt_mlir_fn *ln = bt_mlir_fn_new("layernorm", ch_layernorm, 3, NULL, BT_MLIR_STRICT);
    bt_tensor *r = bt_randn(bt_shape3(8, 64, 768), BT_F32, GPU, 8), *g0[3], *g1[3];
    bt_tensor *y1 = chain_run(ln, &mlir_chains[0], in, r, g1);
    chain_zero_grads(in, 3);
    bt_tensor *y0 = bt_layernorm(in[0], in[1], in[2], 1e-5);
    bt_backward_with(y0, r);
    for (int k = 0; k < 3; k++) g0[k] = in[k]->grad;
    double e = bt_test_relerr_t(y1, y0), eg = fmax(bt_test_relerr_t(g1[0], g0[0]), fmax(bt_test_relerr_t(g1[1], g0[1]), bt_test_relerr_t(g1[2], g0[2])));
    BT_CHECK(e < BT_TOL_F32 && eg < BT_TOL_F32, "layernorm vs bt_layernorm: forward %.3g, worst grad %.3g", e, eg);
    bt_tensor *x = in[0];
    bt_mlir_fn *sm = bt_mlir_fn_new("softmax_ops", ch_softmax_ops, 1, NULL, BT_MLIR_STRICT);
    double es = bt_test_relerr_t(bt_mlir_call(sm, &x), bt_softmax(x));
    bt_tensor *bg[2] = {in[0], in[1]};
    double eb = bt_test_relerr_t(bt_mlir_bias_gelu(bg[0], bg[1]), bt_gelu(bt_add(bg[0], bg[1])));
    BT_CHECK(es < BT_TOL_F32 && eb < BT_TOL_F32, "softmax_ops vs bt_softmax %.3g, bias_gelu vs bt_gelu %.3g", es, eb);
    if (bt_test_verbose()) printf("info: vs hand-written: layernorm %.2e (grads %.2e) softmax %.2e gelu %.2e\n", e, eg, es, eb);
    bt_mlir_fn_free(ln); bt_mlir_fn_free(sm);
    bt_scope_end();
}
/* the same chain fused on the CPU (JIT) and on the GPU (PTX) */
static void test_gpu_cpu_agree(void) {
    if (no_gpu()) return;
    if (no_mlir()) return;
    for (int i = 0; i < N_MLIR_CHAINS; i++) {
        const mlir_chain *ch = &mlir_chains[i];
        bt_scope_begin();
        bt_tensor *ic[4], *ig[4], *gc[4], *gg[4];
        chain_inputs(ch, 2, 9, 200, BT_F32, CPU, 300 + (uint64_t)i, ic);
        for (int k = 0; k < ch->n_in; k++) ig[k] = chain_leaf_copy(ic[k], BT_F32, GPU);
        bt_mlir_fn *fn = bt_mlir_fn_new(ch->name, ch->body, ch->n_in, NULL, BT_MLIR_STRICT);
        bt_tensor *r = bt_randn(chain_out_shape(ch, ic), BT_F32, CPU, 400);
        bt_tensor *yc = chain_run(fn, ch, ic, r, gc), *yg = chain_run(fn, ch, ig, bt_to(r, GPU), gg);
        double e = bt_test_relerr_t(yg, yc), eg = 0;
        for (int k = 0; k < ch->n_in; k++) eg = fmax(eg, bt_test_relerr_t(gg[k], gc[k]));
        BT_CHECK(e < BT_TOL_F32 && eg < BT_TOL_F32, "%s: GPU vs CPU fused: forward %.3g, worst grad %.3g", ch->name, e, eg);
        bt_mlir_fn_free(fn);
        bt_scope_end();
    }
}
/* many rows: the column gradients' partial sums (one per row block, 8 blocks per SM) and the
   grid-stride row loop; the backward kernel launched on a user stream */
static void test_gpu_partials_and_stream(void) {
    if (no_gpu()) return;
    if (no_mlir()) return;
    bt_scope_begin();
    bt_device g = bt_cuda_device(0);
    void *s = bt_stream_create(g);
    bt_stream_push(g, s);
    check_gpu_chain(&mlir_chains[0], 16, 1024, 768, BT_F32, 77, BT_MLIR_STRICT);     /* 16384 rows */
    check_gpu_chain(&mlir_chains[2], 16, 1024, 768, BT_BF16, 78, BT_MLIR_STRICT);
    bt_synchronize(g);
    bt_stream_pop(g);
    bt_stream_destroy(g, s);
    bt_scope_end();
}
static void test_gpu_llama_block(void) {
    if (no_gpu()) return;
    if (no_mlir()) return;
    double f0, u0;
    const llama_run run = {GPU, 8, 128, 256, 1024, 1e-3f, 8};
    double lf = llama_train(&run, 1, &f0), lu = llama_train(&run, 0, &u0);
    BT_CHECK(fabs(lf - lu) < BT_TOL_F32_STEPS * fabs(lu) && fabs(f0 - u0) < BT_TOL_F32 * fabs(u0), "llama GPU: loss fused %.9g unfused %.9g (first %.9g %.9g)", lf, lu, f0, u0);
    BT_CHECK(lf < f0, "llama GPU: the loss did not go down (%.6g -> %.6g)", f0, lf);
}

/* the ahead-of-time path: the kernels make mlir-aot compiled (chains at C = 768 and 100, f32 and
   bf16), found in the compiled-in table and in the cache directory, with no compile and no
   fallback (two chains share their forward kernel: that one is found once, then in memory) */
static void run_aot_chains(const char *how) {
    bt_mlir_reset();
    bt_mlir_stats_t s0 = bt_mlir_stats();
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < N_MLIR_CHAINS; i++) check_gpu_chain(&mlir_chains[i], 3, 50, c ? 100 : 768, d ? BT_BF16 : BT_F32, 500 + (uint64_t)i, 0);
    bt_mlir_stats_t s1 = bt_mlir_stats();
    uint64_t hits = s1.aot_hits + s1.disk_hits - s0.aot_hits - s0.disk_hits;
    BT_CHECK(s1.compiles == s0.compiles && s1.fallbacks == s0.fallbacks && hits > 2 * 2 * N_MLIR_CHAINS &&
             s1.fused_backwards - s0.fused_backwards == 2 * 2 * N_MLIR_CHAINS,
             "AOT (%s): %llu compiles, %llu fallbacks, %llu kernels found, %llu fused backwards", how,
             (unsigned long long)(s1.compiles - s0.compiles), (unsigned long long)(s1.fallbacks - s0.fallbacks),
             (unsigned long long)hits, (unsigned long long)(s1.fused_backwards - s0.fused_backwards));
    if (bt_test_verbose()) printf("info: AOT (%s): %llu kernels loaded, no compile\n", how, (unsigned long long)hits);
}
static void test_gpu_aot(void) {
    if (no_gpu()) return;
    int ran = 0;
#ifdef BT_MLIR_AOT_SOURCE
    bt_mlir_set_cache_dir("");
    bt_mlir_register_aot(bt_mlir_aot_kernels, bt_mlir_aot_count);
    run_aot_chains("compiled-in table");
    bt_mlir_shutdown();                          /* unregisters the table */
    ran = 1;
#endif
    const char *dir = getenv("BT_MLIR_AOT_DIR") ? getenv("BT_MLIR_AOT_DIR") : "build/mlir_aot";
    char probe[600];
    snprintf(probe, sizeof probe, "%s/bt_mlir_aot.c", dir);
    FILE *f = fopen(probe, "r");
    if (f) {
        fclose(f);
        bt_mlir_set_cache_dir(dir);
        run_aot_chains("cache directory");
        bt_mlir_set_cache_dir("");
        ran = 1;
    }
    if (!ran) BT_SKIP("no ahead-of-time kernels (run make mlir-aot on a machine with MLIR, then rebuild)");
}
static void test_nothing_left(void) {
    bt_mlir_shutdown();
    size_t live = bt_alloc_stats(CPU).allocated;
    BT_CHECK(live == 0, "%zu host bytes still allocated", live);
}

int main(void) {
    bt_mlir_set_cache_dir("");
    BT_RUN(test_gpu_aot);
    BT_RUN(test_gpu_ops);
    BT_RUN(test_gpu_chains);
    BT_RUN(test_gpu_vs_hand_written);
    BT_RUN(test_gpu_cpu_agree);
    BT_RUN(test_gpu_partials_and_stream);
    BT_RUN(test_gpu_llama_block);
    BT_RUN(test_nothing_left);
    return bt_test_summary("test_mlir_gpu");
}
