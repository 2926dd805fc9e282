/* test_recompute_gpu.cu - activation recomputation (bt_set_recompute, train_gpt2 --recompute) on
   GPT-2 (gpt2.h): with gelu(h) and ln2's output remade in the MLP's backward instead of kept, the loss is the
   same bits (the forward pass is unchanged), every gradient but the MLP output projections' is the
   same bits (they never read gelu(h)), those are within rounding of the kept gelu(h) (the remade one
   comes from the stored h, the kept one from the GEMM epilogue), and the peak memory falls by at
   least the kept gelu(h) and ln2 output of every layer; also under a CUDA graph. fp32 and bf16.
   The regions, the layernorms' outputs remade (norm) and Llama's (its RMSNorms' too): the same
   bits as none. FP8 (bt_mlp_gelu_fp8): every mode the same bits. */
#include "gpt2_io.h"
#include "llama.h"
#include "bt_optim.h"
#include "tests/bt_test.h"

static int no_gpu(void) { if (bt_k_device_count() > 0) return 0; BT_SKIP("no GPU"); return 1; }

enum { L_ = 4, H_ = 4, C_ = 128, T_ = 64, B_ = 8, V_ = 512 };

typedef struct { double loss; float *grad; size_t peak; } pass_out;

/* one forward + backward of random tokens: the loss, the gradients (host copy), the peak memory */
static void one_pass(gpt2 *m, bt_dtype dt, int recompute, const int32_t *ids, pass_out *r) {
    int old = bt_set_recompute(recompute);
    bt_zero_(m->flat_grad);
    bt_synchronize(m->device);
    bt_alloc_reset_peak(m->device);
    bt_scope_begin();
    bt_tensor *idx = bt_from_data(ids, bt_shape2(B_, T_), BT_I32, m->device);
    bt_tensor *tgt = bt_from_data(ids + B_ * T_, bt_shape2(B_, T_), BT_I32, m->device);
    bt_tensor *loss = gpt2_loss(m, idx, tgt, dt);
    bt_backward(loss);
    r->loss = bt_item(loss);
    bt_scope_end();
    r->peak = bt_alloc_stats(m->device).peak_allocated;
    r->grad = (float *)malloc(sizeof(float) * (size_t)m->num_params);
    bt_to_host(m->flat_grad, r->grad, BT_F32);
    bt_set_recompute(old);
}

static int is_fcprojw(const gpt2 *m, const bt_tensor *p) {
    for (int l = 0; l < m->cfg.L; l++) if (m->layers[l].fcprojw == p) return 1;
    return 0;
}

static void parity(bt_dtype dt, double tol) {
    if (no_gpu()) return;
    bt_set_deterministic(1);   /* no float atomics (the embedding's backward): two passes give the same bits */
    gpt2_config c; c.L = L_; c.H = H_; c.C = C_; c.maxT = T_; c.V = V_; c.Vp = V_;
    gpt2 m; gpt2_build(&m, c, bt_cuda_device(0)); gpt2_init(&m, 5);
    int32_t ids[2 * B_ * T_];
    for (int i = 0; i < 2 * B_ * T_; i++) ids[i] = (int32_t)(bt_philox_uniform(21, (uint64_t)i) * V_);
    pass_out a, b;
    one_pass(&m, dt, 0, ids, &a);   /* a warm-up: matmul plans and lazy buffers are made in it */
    free(a.grad);
    one_pass(&m, dt, 0, ids, &a);
    one_pass(&m, dt, BT_RECOMPUTE_GELU, ids, &b);
    int64_t other_bad = 0;
    double num = 0, den = 0;
    for (int i = 0; i < m.n_params; i++) {
        bt_tensor *p = m.params[i];
        int64_t off = p->offset - m.flat->offset, n = bt_numel(p);
        if (is_fcprojw(&m, p)) {
            for (int64_t k = off; k < off + n; k++) { double d = (double)a.grad[k] - b.grad[k]; num += d * d; den += (double)a.grad[k] * a.grad[k]; }
        } else if (memcmp(a.grad + off, b.grad + off, sizeof(float) * (size_t)n)) {
            other_bad++;
            printf("  parameter %d (%lld elements at %lld) differs\n", i, (long long)n, (long long)off);
        }
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    size_t u_bytes = (size_t)L_ * B_ * T_ * 5 * C_ * bt_dtype_size(dt);   /* every layer's gelu(h) and ln2's output */
    printf("recompute gelu %s: loss %.9f vs %.9f; %lld other params differ; fc proj grads rel err %.2e; peak %.2f -> %.2f MiB "
           "(gelu(h) and ln2's output of all layers %.2f MiB)\n", bt_dtype_name(dt), a.loss, b.loss, (long long)other_bad, rel, a.peak / 1048576.0,
           b.peak / 1048576.0, u_bytes / 1048576.0);
    BT_CHECK(a.loss == b.loss, "%s: loss %.9f with gelu(h) kept, %.9f remade", bt_dtype_name(dt), a.loss, b.loss);
    BT_CHECK(other_bad == 0, "%s: %lld parameters' gradients (not the fc projections') differ", bt_dtype_name(dt), (long long)other_bad);
    BT_CHECK(rel < tol && den > 0, "%s: fc projection gradients differ by %.3e (bound %.1e)", bt_dtype_name(dt), rel, tol);
    /* the peak comes while every layer's activations are alive (the head, the last layers' backward):
       at least L - 1 layers' gelu(h) and ln2 output less, the last layer's remade ones alive there */
    size_t want = u_bytes / L_ * (L_ - 1);
    BT_CHECK(a.peak >= b.peak + want, "%s: peak %zu B kept, %zu B remade: less than %zu B saved", bt_dtype_name(dt), a.peak, b.peak, want);
    free(a.grad); free(b.grad);
    gpt2_free(&m);
    bt_set_deterministic(0);
}
/* fp32: h is the epilogue's fp32 pre-activation, gelu of it ours vs cuBLASLt's: ulps. bf16: the
   kept gelu(h) is rounded from the fp32 h, the remade one from h rounded to bf16: up to an ulp
   (4e-3) per element, averaged in the gradient's sums. */
static void test_recompute_fp32(void) { parity(BT_F32, 1e-5); }
static void test_recompute_bf16(void) { parity(BT_BF16, 1e-2); }

/* each mode's pass against none's (after a warm-up pass): the loss and every gradient the same bits;
   peak[k] <- mode k's peak memory, *none_peak <- none's */
typedef struct { int flags; const char *name; } rc_mode;
static void modes_vs_none(gpt2 *m, bt_dtype dt, const rc_mode *modes, size_t n, const char *what, const int32_t *ids, size_t *peak,
                          size_t *none_peak) {
    pass_out a, b;
    one_pass(m, dt, 0, ids, &a);   /* a warm-up */
    free(a.grad);
    one_pass(m, dt, 0, ids, &a);
    *none_peak = a.peak;
    for (size_t k = 0; k < n; k++) {
        one_pass(m, dt, modes[k].flags, ids, &b);
        int64_t bad = 0;
        for (int64_t i = 0; i < m->num_params; i++) bad += memcmp(a.grad + i, b.grad + i, sizeof(float)) != 0;
        printf("recompute %s %s: loss %.9f vs %.9f; %lld gradient elements differ; peak %.2f -> %.2f MiB\n", modes[k].name, what, a.loss,
               b.loss, (long long)bad, a.peak / 1048576.0, b.peak / 1048576.0);
        BT_CHECK(a.loss == b.loss && bad == 0, "%s %s: loss %.9f (none %.9f), %lld gradient elements differ from none's", modes[k].name,
                 what, b.loss, a.loss, (long long)bad);
        peak[k] = b.peak;
        free(b.grad);
    }
    free(a.grad);
}
/* the checkpointed regions (gpt2.h under BT_RECOMPUTE_ATTN, _MLP, _BLOCK; bt_checkpoint): the loss
   and every gradient the same bits as none (the same kernels on the same data, the same in-place
   sinks and column sums in the backward), and for block the peak at least (15 L - 16) B T C
   activations lower: at the start of the backward none holds 16 B T C per layer (gpt2.h's
   gpt2__block; the fused MLP's h and gelu(h) are held by its node rather than by the scope, but
   held), block one, and its backward adds one layer's 16 remade */
static void regions(bt_dtype dt) {
    if (no_gpu()) return;
    bt_set_deterministic(1);
    gpt2_config c; c.L = L_; c.H = H_; c.C = C_; c.maxT = T_; c.V = V_; c.Vp = V_;
    gpt2 m; gpt2_build(&m, c, bt_cuda_device(0)); gpt2_init(&m, 6);
    int32_t ids[2 * B_ * T_];
    for (int i = 0; i < 2 * B_ * T_; i++) ids[i] = (int32_t)(bt_philox_uniform(23, (uint64_t)i) * V_);
    static const rc_mode modes[] = {
        {BT_RECOMPUTE_ATTN, "attn"}, {BT_RECOMPUTE_MLP, "mlp"}, {BT_RECOMPUTE_BLOCK, "block"},
        {BT_RECOMPUTE_BLOCK | BT_RECOMPUTE_GELU, "block+gelu"}, {BT_RECOMPUTE_MLP | BT_RECOMPUTE_GELU, "mlp+gelu"},
        {BT_RECOMPUTE_ATTN | BT_RECOMPUTE_GELU, "attn+gelu"}, {BT_RECOMPUTE_NORM, "norm"},
        {BT_RECOMPUTE_NORM | BT_RECOMPUTE_MLP, "norm+mlp"}, {BT_RECOMPUTE_NORM | BT_RECOMPUTE_ATTN, "norm+attn"}};
    size_t peak[9], none_peak;   /* (norm+gelu: gelu's own rounding in the fc projections, as parity() measures) */
    modes_vs_none(&m, dt, modes, 9, bt_dtype_name(dt), ids, peak, &none_peak);
    size_t U = (size_t)B_ * T_ * C_ * bt_dtype_size(dt), want = (size_t)(15 * L_ - 16) * U;   /* modes[2]: block */
    BT_CHECK(none_peak >= peak[2] + want, "block %s: peak %zu B kept, %zu B remade: less than %zu B saved", bt_dtype_name(dt), none_peak,
             peak[2], want);
    /* norm (modes[6]): ln1's and ln2's outputs of every layer not kept, one layer's remade alive at a time */
    want = (size_t)(2 * L_ - 2) * U;
    BT_CHECK(none_peak >= peak[6] + want, "norm %s: peak %zu B kept, %zu B remade: less than %zu B saved", bt_dtype_name(dt), none_peak,
             peak[6], want);
    gpt2_free(&m);
    bt_set_deterministic(0);
}
static void test_regions_fp32(void) { regions(BT_F32); }
static void test_regions_bf16(void) { regions(BT_BF16); }

/* FP8 (gpt2_fp8_enable, current scaling): every mode gives none's loss and gradients bit for bit
   (the regions remake the FP8 casts with the same scales; GELU's remakes the e4m3 gelu(h)^T of
   bt_mlp_gelu_fp8 from h with the forward's scale), and GELU's peak is at least the e4m3 gelu(h)^T
   of L - 1 layers (4 B T C bytes each) lower */
static void test_fp8_modes(void) {
    if (no_gpu()) return;
    if (!bt_k_fp8_supported()) { BT_SKIP("the GPU has no FP8 tensor cores (compute capability below 8.9)"); return; }
    bt_set_deterministic(1);
    gpt2_config c; c.L = L_; c.H = H_; c.C = C_; c.maxT = T_; c.V = V_; c.Vp = V_;
    gpt2 m; gpt2_build(&m, c, bt_cuda_device(0)); gpt2_init(&m, 6);
    gpt2_fp8_enable(&m, NULL);
    int32_t ids[2 * B_ * T_];
    for (int i = 0; i < 2 * B_ * T_; i++) ids[i] = (int32_t)(bt_philox_uniform(29, (uint64_t)i) * V_);
    static const rc_mode modes[] = {
        {BT_RECOMPUTE_GELU, "gelu"}, {BT_RECOMPUTE_ATTN, "attn"}, {BT_RECOMPUTE_MLP, "mlp"}, {BT_RECOMPUTE_BLOCK, "block"},
        {BT_RECOMPUTE_BLOCK | BT_RECOMPUTE_GELU, "block+gelu"}};
    size_t peak[5], none_peak, want = (size_t)(L_ - 1) * 4 * B_ * T_ * C_;   /* modes[0]: gelu */
    modes_vs_none(&m, BT_BF16, modes, 5, "fp8", ids, peak, &none_peak);
    BT_CHECK(none_peak >= peak[0] + want, "fp8 gelu: peak %zu B kept, %zu B remade: less than %zu B saved", none_peak, peak[0], want);
    gpt2_free(&m);
    bt_set_deterministic(0);
}

/* the remade gelu(h), and the remade blocks, inside a captured micro-step: the graph gives the
   eager recomputed bits, and block's the bits of none */
static void graph_parity(int flags, float *ref, double *ref_loss);
static void test_recompute_in_graph(void) {
    if (no_gpu()) return;
    gpt2_config c; c.L = 2; c.H = H_; c.C = C_; c.maxT = T_; c.V = V_; c.Vp = V_;
    size_t n = (size_t)gpt2_num_params(&c);
    float *g0 = (float *)malloc(sizeof(float) * n), *g1 = (float *)malloc(sizeof(float) * n);
    double l0 = 0, l1 = 0;
    graph_parity(BT_RECOMPUTE_GELU, NULL, NULL);
    graph_parity(0, g0, &l0);
    graph_parity(BT_RECOMPUTE_BLOCK, g1, &l1);
    graph_parity(BT_RECOMPUTE_ATTN | BT_RECOMPUTE_MLP, NULL, NULL);
    BT_CHECK(l0 == l1 && !memcmp(g0, g1, sizeof(float) * n), "graphed block: loss %.9f vs none's %.9f, or the gradients differ", l1, l0);
    graph_parity(BT_RECOMPUTE_NORM, g1, &l1);
    BT_CHECK(l0 == l1 && !memcmp(g0, g1, sizeof(float) * n), "graphed norm: loss %.9f vs none's %.9f, or the gradients differ", l1, l0);
    free(g0); free(g1);
}
static void graph_parity(int flags, float *ref, double *ref_loss) {
    if (no_gpu()) return;
    bt_set_deterministic(1);
    gpt2_config c; c.L = 2; c.H = H_; c.C = C_; c.maxT = T_; c.V = V_; c.Vp = V_;
    gpt2 m; gpt2_build(&m, c, bt_cuda_device(0)); gpt2_init(&m, 9);
    bt_device dev = m.device;
    int32_t ids[2 * B_ * T_];
    for (int i = 0; i < 2 * B_ * T_; i++) ids[i] = (int32_t)(bt_philox_uniform(22, (uint64_t)i) * V_);
    int old = bt_set_recompute(flags);
    bt_tensor *idx = bt_from_data(ids, bt_shape2(B_, T_), BT_I32, dev), *tgt = bt_from_data(ids + B_ * T_, bt_shape2(B_, T_), BT_I32, dev);
    bt_tensor *lsum = bt_scalar(0, BT_F32, dev);
    float *ge = (float *)malloc(sizeof(float) * (size_t)m.num_params), *gg = (float *)malloc(sizeof(float) * (size_t)m.num_params);
    double le = 0, lg = 0;
    for (int mode = 0; mode < 2; mode++) {       /* 0: eager (also the warm-up), 1: captured, launched */
        bt_zero_(m.flat_grad); bt_zero_(lsum);
        bt_graph *g = mode ? bt_graph_capture_begin(dev) : NULL;
        bt_scope_begin();
        bt_tensor *loss = gpt2_loss(&m, idx, tgt, BT_BF16);
        bt_backward(loss);
        int og = bt_set_grad_enabled(0);
        bt_add_(lsum, bt_cast(loss, BT_F32), 1.0);
        bt_set_grad_enabled(og);
        bt_scope_end();
        if (g) { bt_graph_capture_end(g); bt_graph_launch(g); }
        if (mode) lg = bt_item(lsum);
        else le = bt_item(lsum);
        bt_to_host(m.flat_grad, mode ? gg : ge, BT_F32);
        bt_graph_free(g);
    }
    BT_CHECK(le == lg, "recompute %d: graph loss %.9f, eager %.9f", flags, lg, le);
    BT_CHECK(!memcmp(ge, gg, sizeof(float) * (size_t)m.num_params), "recompute %d: graph and eager gradients differ", flags);
    if (ref) memcpy(ref, gg, sizeof(float) * (size_t)m.num_params);
    if (ref_loss) *ref_loss = lg;
    bt_set_recompute(old);
    bt_set_deterministic(0);
    free(ge); free(gg);
    bt_release(idx); bt_release(tgt); bt_release(lsum);
    gpt2_free(&m);
}

/* Llama (llama.h's regions: grouped-query attention with RoPE, SwiGLU): attn, mlp, block and the
   RMSNorms' outputs remade (norm) against none on the GPU, loss and every gradient the same bits,
   fp32 and bf16 */
static void llama_pass(llama *m, bt_dtype dt, int flags, const int32_t *ids, double *loss, float *grad) {
    int old = bt_set_recompute(flags);
    bt_zero_(m->flat_grad);
    bt_scope_begin();
    bt_tensor *idx = bt_from_data(ids, bt_shape2(B_, T_), BT_I32, m->device);
    bt_tensor *tgt = bt_from_data(ids + B_ * T_, bt_shape2(B_, T_), BT_I32, m->device);
    bt_tensor *l = llama_loss(m, idx, tgt, dt);
    bt_backward(l);
    *loss = bt_item(l);
    bt_scope_end();
    bt_to_host(m->flat_grad, grad, BT_F32);
    bt_set_recompute(old);
}
static void test_llama_regions(void) {
    if (no_gpu()) return;
    bt_set_deterministic(1);
    llama_config c = llama_config_make(3, 8, 2, 512, 1024, V_, T_);
    llama m; llama_build(&m, c, bt_cuda_device(0)); llama_init(&m, 6);
    int32_t ids[2 * B_ * T_];
    for (int i = 0; i < 2 * B_ * T_; i++) ids[i] = (int32_t)(bt_philox_uniform(23, (uint64_t)i) * V_);
    float *g0 = (float *)malloc(sizeof(float) * (size_t)m.flat_numel), *g1 = (float *)malloc(sizeof(float) * (size_t)m.flat_numel);
    static const int flags[6] = {BT_RECOMPUTE_ATTN, BT_RECOMPUTE_MLP, BT_RECOMPUTE_BLOCK, BT_RECOMPUTE_ATTN | BT_RECOMPUTE_MLP, BT_RECOMPUTE_NORM,
                                 BT_RECOMPUTE_NORM | BT_RECOMPUTE_MLP};
    for (int d = 0; d < 2; d++) {
        bt_dtype dt = d ? BT_BF16 : BT_F32;
        double l0, l1;
        llama_pass(&m, dt, 0, ids, &l0, g0);   /* warm-up */
        llama_pass(&m, dt, 0, ids, &l0, g0);
        for (int k = 0; k < 6; k++) {
            llama_pass(&m, dt, flags[k], ids, &l1, g1);
            int64_t bad = 0;
            for (int64_t i = 0; i < m.flat_numel; i++) bad += memcmp(&g0[i], &g1[i], sizeof(float)) != 0;
            BT_CHECK(l0 == l1 && bad == 0, "Llama %s recompute %d: loss %.9f vs none's %.9f, %lld gradient elements differ", bt_dtype_name(dt),
                     flags[k], l1, l0, (long long)bad);
        }
    }
    free(g0); free(g1);
    llama_free(&m);
    bt_set_deterministic(0);
}

int main(void) {
    BT_RUN(test_recompute_fp32);
    BT_RUN(test_recompute_bf16);
    BT_RUN(test_regions_fp32);
    BT_RUN(test_regions_bf16);
    BT_RUN(test_recompute_in_graph);
    BT_RUN(test_llama_regions);
    BT_RUN(test_fp8_modes);
    return bt_test_summary("test_recompute_gpu");
}
