/* test_mlir_chains.h - the op chains that tests/test_mlir.c, tests/test_mlir_gpu.cu, the ahead-of-time
   step (make mlir-aot) and bench/bench_mlir.cu share: each one a body for bt_mlir_fn_new written with
   plain bt ops, the kind of each input, and the range its random values are drawn from. Also a small
   Llama-style block (RMSNorm + SwiGLU MLP) trainable with and without the fused path. Included after
   tests/bt_test.h it also gives the two tests' running and training helpers (chain_run, llama_train).
   Include after bt_mlir.h and bt_optim.h. */
#ifndef TEST_MLIR_CHAINS_H
#define TEST_MLIR_CHAINS_H

/* an input's shape in a frame [B, T, C] */
enum { IN_FULL, IN_COL, IN_ROW, IN_SCALAR };
typedef struct {
    const char *name;
    bt_mlir_body body;
    int n_in;
    int kind[4];
    double lo, hi;                 /* inputs uniform in [lo, hi) */
    int chain;                     /* 1: a real chain (layernorm, softmax ...), 0: one op */
} mlir_chain;

static bt_shape chain_shape(int kind, int64_t B, int64_t T, int64_t C) {
    switch (kind) {
    case IN_COL: return bt_shape1(C);
    case IN_ROW: return bt_shape3(B, T, 1);
    case IN_SCALAR: return bt_shape1(1);
    default: return bt_shape3(B, T, C);
    }
}

#define CHAIN_UNARY(nm, expr) static bt_tensor *ch_##nm(bt_tensor **in, int n, void *u) { (void)n; (void)u; bt_tensor *x = in[0]; return expr; }
CHAIN_UNARY(neg, bt_neg(x))
CHAIN_UNARY(exp, bt_exp(x))
CHAIN_UNARY(log, bt_log(x))
CHAIN_UNARY(sqrt, bt_sqrt(x))
CHAIN_UNARY(tanh, bt_tanh(x))
CHAIN_UNARY(relu, bt_relu(x))
CHAIN_UNARY(gelu, bt_gelu(x))
CHAIN_UNARY(square, bt_square(x))
CHAIN_UNARY(affine, bt_affine(x, 1.5, -0.25))
CHAIN_UNARY(scale, bt_scale(x, 3.0))
CHAIN_UNARY(add_scalar, bt_add_scalar(x, 2.0))
CHAIN_UNARY(sigmoid, bt_mlir_sigmoid_ops(x))
CHAIN_UNARY(silu, bt_mlir_silu_ops(x))
CHAIN_UNARY(cast_bf16, bt_scale(bt_cast(bt_cast(x, BT_BF16), BT_F32), 2.0))   /* rounds where the cast is */
CHAIN_UNARY(softmax, bt_softmax(x))
CHAIN_UNARY(log_softmax, bt_log_softmax(x))
#define CHAIN_BINARY(nm, expr) static bt_tensor *ch_##nm(bt_tensor **in, int n, void *u) { (void)n; (void)u; bt_tensor *a = in[0], *b = in[1]; return expr; }
CHAIN_BINARY(add, bt_add(a, b))
CHAIN_BINARY(sub, bt_sub(a, b))
CHAIN_BINARY(mul, bt_mul(a, b))
CHAIN_BINARY(div, bt_div(a, b))
CHAIN_BINARY(swiglu, bt_mul(bt_mlir_silu_ops(a), b))
CHAIN_BINARY(bias_gelu, bt_gelu(bt_add(a, b)))
CHAIN_BINARY(rmsnorm, bt_mlir_rmsnorm_ops(a, b, 1e-5))

static int last_dim = -1;
static bt_tensor *ch_sum_keep(bt_tensor **in, int n, void *u) { (void)n; (void)u; return bt_sum(in[0], &last_dim, 1, 1); }
static bt_tensor *ch_mean_squeezed(bt_tensor **in, int n, void *u) { (void)n; (void)u; return bt_mean(in[0], &last_dim, 1, 0); }
static bt_tensor *ch_max_keep(bt_tensor **in, int n, void *u) { (void)n; (void)u; return bt_max(in[0], -1, 1); }
/* softmax written out: exp(x - max) / sum (the gradient also flows through the max) */
static bt_tensor *ch_softmax_ops(bt_tensor **in, int n, void *u) {
    (void)n; (void)u;
    bt_tensor *e = bt_exp(bt_sub(in[0], bt_max(in[0], -1, 1)));
    return bt_div(e, bt_sum(e, &last_dim, 1, 1));
}
/* x - logsumexp(x): a row value broadcast back */
static bt_tensor *ch_logsumexp_sub(bt_tensor **in, int n, void *u) {
    (void)n; (void)u;
    bt_tensor *m = bt_max(in[0], -1, 1);
    bt_tensor *lse = bt_add(bt_log(bt_sum(bt_exp(bt_sub(in[0], m)), &last_dim, 1, 1)), m);
    return bt_sub(in[0], lse);
}
static bt_tensor *layernorm_ops(bt_tensor *x, bt_tensor *w, bt_tensor *b, double eps) {
    bt_tensor *xc = bt_sub(x, bt_mean(x, &last_dim, 1, 1));
    bt_tensor *var = bt_mean(bt_square(xc), &last_dim, 1, 1);
    return bt_add(bt_mul(bt_div(xc, bt_sqrt(bt_add_scalar(var, eps))), w), b);
}
static bt_tensor *ch_layernorm(bt_tensor **in, int n, void *u) { (void)n; (void)u; return layernorm_ops(in[0], in[1], in[2], 1e-5); }
/* the residual stream's add followed by layernorm */
static bt_tensor *ch_residual_layernorm(bt_tensor **in, int n, void *u) { (void)n; (void)u; return layernorm_ops(bt_add(in[0], in[1]), in[2], in[3], 1e-5); }
/* a row value and a scalar input, both broadcast: (x - r) * s */
static bt_tensor *ch_row_scalar(bt_tensor **in, int n, void *u) { (void)n; (void)u; return bt_mul(bt_sub(in[0], in[1]), in[2]); }
/* a column value made from the column input only, used twice */
static bt_tensor *ch_col_chain(bt_tensor **in, int n, void *u) { (void)n; (void)u; bt_tensor *e = bt_exp(in[1]); return bt_add(bt_mul(in[0], e), e); }

static const mlir_chain mlir_ops[] = {
    {"neg", ch_neg, 1, {IN_FULL}, -2, 2, 0},
    {"exp", ch_exp, 1, {IN_FULL}, -2, 2, 0},
    {"log", ch_log, 1, {IN_FULL}, 0.2, 3, 0},
    {"sqrt", ch_sqrt, 1, {IN_FULL}, 0.2, 3, 0},
    {"tanh", ch_tanh, 1, {IN_FULL}, -2, 2, 0},
    {"relu", ch_relu, 1, {IN_FULL}, -2, 2, 0},
    {"gelu", ch_gelu, 1, {IN_FULL}, -3, 3, 0},
    {"square", ch_square, 1, {IN_FULL}, -2, 2, 0},
    {"affine", ch_affine, 1, {IN_FULL}, -2, 2, 0},
    {"scale", ch_scale, 1, {IN_FULL}, -2, 2, 0},
    {"add_scalar", ch_add_scalar, 1, {IN_FULL}, -2, 2, 0},
    {"sigmoid", ch_sigmoid, 1, {IN_FULL}, -4, 4, 0},
    {"silu", ch_silu, 1, {IN_FULL}, -4, 4, 0},
    {"cast_bf16", ch_cast_bf16, 1, {IN_FULL}, -2, 2, 0},
    {"add_full", ch_add, 2, {IN_FULL, IN_FULL}, -2, 2, 0},
    {"add_col", ch_add, 2, {IN_FULL, IN_COL}, -2, 2, 0},
    {"sub_row", ch_sub, 2, {IN_FULL, IN_ROW}, -2, 2, 0},
    {"sub_scalar", ch_sub, 2, {IN_SCALAR, IN_FULL}, -2, 2, 0},
    {"mul_col", ch_mul, 2, {IN_FULL, IN_COL}, -2, 2, 0},
    {"mul_row", ch_mul, 2, {IN_ROW, IN_FULL}, -2, 2, 0},
    {"div_full", ch_div, 2, {IN_FULL, IN_FULL}, 0.5, 2, 0},
    {"div_col", ch_div, 2, {IN_FULL, IN_COL}, 0.5, 2, 0},
    {"sum_keep", ch_sum_keep, 1, {IN_FULL}, -2, 2, 0},
    {"mean_squeezed", ch_mean_squeezed, 1, {IN_FULL}, -2, 2, 0},
    {"max_keep", ch_max_keep, 1, {IN_FULL}, -2, 2, 0},
    {"row_scalar", ch_row_scalar, 3, {IN_FULL, IN_ROW, IN_SCALAR}, -2, 2, 0},
    {"col_chain", ch_col_chain, 2, {IN_FULL, IN_COL}, -1, 1, 0},
};
static const mlir_chain mlir_chains[] = {
    {"layernorm", ch_layernorm, 3, {IN_FULL, IN_COL, IN_COL}, -2, 2, 1},
    {"residual_layernorm", ch_residual_layernorm, 4, {IN_FULL, IN_FULL, IN_COL, IN_COL}, -2, 2, 1},
    {"rmsnorm", ch_rmsnorm, 2, {IN_FULL, IN_COL}, -2, 2, 1},
    {"softmax", ch_softmax, 1, {IN_FULL}, -3, 3, 1},
    {"log_softmax", ch_log_softmax, 1, {IN_FULL}, -3, 3, 1},
    {"softmax_ops", ch_softmax_ops, 1, {IN_FULL}, -3, 3, 1},
    {"logsumexp_sub", ch_logsumexp_sub, 1, {IN_FULL}, -3, 3, 1},
    {"swiglu", ch_swiglu, 2, {IN_FULL, IN_FULL}, -3, 3, 1},
    {"bias_gelu", ch_bias_gelu, 2, {IN_FULL, IN_COL}, -3, 3, 1},
};
#define N_MLIR_OPS ((int)(sizeof mlir_ops / sizeof *mlir_ops))
#define N_MLIR_CHAINS ((int)(sizeof mlir_chains / sizeof *mlir_chains))

/* random inputs of chain ch in a frame [B, T, C] (dtype dt, device dev, requiring grad) */
static void chain_inputs(const mlir_chain *ch, int64_t B, int64_t T, int64_t C, bt_dtype dt, bt_device dev,
                         uint64_t seed, bt_tensor **in) {
    for (int k = 0; k < ch->n_in; k++) {
        in[k] = bt_empty(chain_shape(ch->kind[k], B, T, C), dt, dev);
        bt_uniform_(in[k], ch->lo, ch->hi, seed + 17 * (uint64_t)k, 0);
        bt_set_requires_grad(in[k], 1);
    }
}

/* ---- a Llama-style MLP block: h = x + W2 (silu(W1 n) * (W3 n)), n = rmsnorm(x) w_n ----
   params: w_n [C], W1 and W3 [H, C], W2 [C, H]. fused: RMSNorm and SwiGLU through bt_mlir. */
typedef struct { bt_tensor *w_n, *w1, *w3, *w2; } llama_block;
static void llama_block_init(llama_block *b, int64_t C, int64_t H, bt_device dev, uint64_t seed) {
    b->w_n = bt_full(bt_shape1(C), 1.0, BT_F32, dev);
    b->w1 = bt_empty(bt_shape2(H, C), BT_F32, dev); bt_normal_(b->w1, 0, 1 / sqrt((double)C), seed, 0);
    b->w3 = bt_empty(bt_shape2(H, C), BT_F32, dev); bt_normal_(b->w3, 0, 1 / sqrt((double)C), seed + 1, 0);
    b->w2 = bt_empty(bt_shape2(C, H), BT_F32, dev); bt_normal_(b->w2, 0, 1 / sqrt((double)H), seed + 2, 0);
    bt_tensor *p[4] = {b->w_n, b->w1, b->w3, b->w2};
    for (int i = 0; i < 4; i++) { bt_keep(p[i]); bt_set_requires_grad(p[i], 1); }
}
static void llama_block_free(llama_block *b) { bt_release(b->w_n); bt_release(b->w1); bt_release(b->w3); bt_release(b->w2); }
static bt_tensor *llama_block_forward(const llama_block *b, bt_tensor *x, int fused) {
    bt_tensor *n = fused ? bt_mlir_rmsnorm(x, b->w_n, 1e-5) : bt_mlir_rmsnorm_ops(x, b->w_n, 1e-5);
    bt_tensor *g = bt_linear(n, b->w1, NULL), *v = bt_linear(n, b->w3, NULL);
    bt_tensor *a = fused ? bt_mlir_swiglu(g, v) : bt_mul(bt_mlir_silu_ops(g), v);
    return bt_add(x, bt_linear(a, b->w2, NULL));
}

/* ---- what tests/test_mlir.c and tests/test_mlir_gpu.cu check with (after tests/bt_test.h) ---- */
#ifdef BT_TEST_H
/* a new leaf (requiring grad) holding t's values in dt on dev */
static bt_tensor *chain_leaf_copy(bt_tensor *t, bt_dtype dt, bt_device dev) {
    int old = bt_set_grad_enabled(0);
    bt_tensor *c = bt_cast(bt_to(t, dev), dt);
    if (c == t) c = bt_clone(t);
    bt_set_grad_enabled(old);
    bt_set_requires_grad(c, 1);
    return c;
}
/* the shape of chain ch's result on in */
static bt_shape chain_out_shape(const mlir_chain *ch, bt_tensor **in) {
    int old = bt_set_grad_enabled(0);
    bt_shape s = bt_shape_of(ch->body(in, ch->n_in, NULL));
    bt_set_grad_enabled(old);
    return s;
}
static void chain_zero_grads(bt_tensor **in, int n) { for (int k = 0; k < n; k++) bt_test_drop_grad(in[k]); }
/* y = f(in) and the gradients of sum(y * r) into grads[] (clones): fused through fn, or (fn NULL)
   the body's own ops */
static bt_tensor *chain_run(bt_mlir_fn *fn, const mlir_chain *ch, bt_tensor **in, bt_tensor *r, bt_tensor **grads) {
    chain_zero_grads(in, ch->n_in);
    bt_tensor *y = fn ? bt_mlir_call(fn, in) : ch->body(in, ch->n_in, NULL);
    bt_backward_with(y, r->dtype == y->dtype ? r : bt_cast(r, y->dtype));
    for (int k = 0; k < ch->n_in; k++) grads[k] = in[k]->grad ? bt_clone(in[k]->grad) : NULL;
    return y;
}
/* steps of AdamW (lr) on the llama block [C, H] applied twice to random x [B, T, C] on dev, toward
   random targets by mean squared error, fused or not; returns the last loss, the first in *first */
typedef struct { bt_device dev; int64_t B, T, C, H; float lr; int steps; } llama_run;
static double llama_train(const llama_run *run, int fused, double *first) {
    bt_scope_begin();
    llama_block blk;
    llama_block_init(&blk, run->C, run->H, run->dev, 60);
    bt_tensor *params[4] = {blk.w_n, blk.w1, blk.w3, blk.w2};
    bt_adamw opt;
    bt_adamw_init(&opt, params, 4, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f);
    double loss = 0;
    for (int s = 0; s < run->steps; s++) {
        bt_scope_begin();
        bt_tensor *x = bt_randn(bt_shape3(run->B, run->T, run->C), BT_F32, run->dev, 70 + (uint64_t)s);
        bt_tensor *t = bt_randn(bt_shape3(run->B, run->T, run->C), BT_F32, run->dev, 170 + (uint64_t)s);
        bt_tensor *h = llama_block_forward(&blk, llama_block_forward(&blk, x, fused), fused);
        bt_tensor *l = bt_mean(bt_square(bt_sub(h, t)), NULL, 0, 0);
        bt_backward(l);
        loss = bt_item(l);
        if (s == 0) *first = loss;
        bt_adamw_step(&opt, run->lr);
        bt_zero_grad(params, 4);
        bt_scope_end();
    }
    bt_adamw_free(&opt);
    llama_block_free(&blk);
    bt_scope_end();
    return loss;
}
#endif
#endif
