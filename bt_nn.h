/* bt_nn.h - the network ops of bt_tensor.h: their forward and backward passes and CPU paths.

   Not a header of its own: bt_tensor.h's implementation includes it (section 6, between the matmuls
   and concat/split), so it is compiled where BT_TENSOR_IMPLEMENTATION is defined and nowhere else;
   the ops are declared in bt_tensor.h with the rest. Keep it beside bt_tensor.h.

   What it holds: GPT-2's fused MLP, softmax and log_softmax, layernorm, RMSNorm, SwiGLU, RoPE, the
   embedding, the cross-entropy (mean and per row), the classifier fused into the loss, causal
   self-attention (and on a packed qkv), the FP8 linear layer and its scaling state, and a model's
   parameters taken from gathered units (bt_units_*: fully sharded data parallelism). The
   elementwise ops, reductions and matmuls stay in bt_tensor.h; the CUDA kernels of both are in
   bt_kernels.cuh and its parts bt_attention.cuh and bt_fp8.cuh.
*/
#ifndef BT_TENSOR_IMPLEMENTATION_DONE
#error "bt_nn.h is part of bt_tensor.h's implementation: define BT_TENSOR_IMPLEMENTATION and include bt_tensor.h"
#endif

/* ---- GPT-2's MLP as one op: y = r + linear(gelu(linear(x, w1, b1)), w2, b2) ----
   Fused (a GPU, fused epilogues on, cuBLASLt offering the algorithms): the first GEMM adds b1 and
   applies GELU in its epilogue, writing u = gelu(h) and the pre-activation h (kept for the
   backward); the second adds b2 and the residual r. The backward's dh = (g w2) * gelu'(h) comes
   out of the GEMM g w2 (DGELU epilogue; a separate kernel when cuBLASLt has none); db1 and db2 are the
   column sums of dh and g (bt__linear_wgrad). Per call that saves the GELU kernels (forward: read
   and write rows x hid; backward: read 2, write 1) and the residual add. (cuBLASLt's DGELU_BGRAD,
   dh and db1 in one GEMM, ran at a fifth of the product's rate on an H100: slower than this. With
   DGELU and GELU_AUX_BIAS cuBLASLt 13.0 runs 531-550 TFLOP/s at GPT-2's B=128 shapes against 780
   for the plain product, and the other operand layout (the weight stored transposed) measured no
   faster; still cheaper than a separate GELU pass.) Otherwise it is the ops it names, recorded as
   such. */
/* The node's saved tensors: x2 (the input [rows, in]), w1, h, w2, then gelu(h) when kept (i[1]),
   or (i[0], bt_layernorm_mlp_gelu) the layernorm's input in x2's place and its w, b last, f[0] eps. */
/* the MLP's saved gelu(h), or (BT_RECOMPUTE_GELU: not saved) gelu(h) remade: +1 either way */
static bt_tensor *bt__mlp_saved_u(bt_node *n, bt_tensor *h) {
    if (n->i[1]) return bt_retain(n->saved[4]);
    bt_tensor *u = bt__new(bt_shape_of(h), h->dtype, bt_device_of(h));
#ifdef BT_CUDA
    BT__ON_GPU(bt_device_of(h), stream) bt_k_unary(BT_UOP_GELU, h->dtype, bt_data_ptr(u), bt_data_ptr(h), bt_numel(h), stream);
#endif
    return u;
}
/* the layernorm's output remade from its saved input by the forward's op (grad mode is off in a
   backward: no node): the same bits; a new reference */
static bt_tensor *bt__mlp_remade_ln(bt_node *n) {
    return bt_retain(bt_layernorm(n->saved[0], n->saved[n->n_saved - 2], n->saved[n->n_saved - 1], n->f[0]));
}
static void bt__mlp_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *x2 = n->i[0] ? bt__mlp_remade_ln(n) : bt_retain(n->saved[0]);
    bt_tensor *w1 = n->saved[1], *h = n->saved[2], *w2 = n->saved[3], *u = bt__mlp_saved_u(n, h);
    int64_t rows = x2->shape[0], in_f = w1->shape[1], hid = w1->shape[0], out_f = w2->shape[0];
    bt_dtype dt = g->dtype;
    bt_device dev = bt_device_of(g);
    (void)h;                                                         /* read by the GPU's epilogue only */
    bt_tensor *gc = bt__contig(g), *g2 = bt__view_dense(gc, bt_shape2(rows, out_f));
    bt__linear_wgrad(n, 3, 4, g2, u, gin);                          /* dw2 = g^T u, db2 */
    bt_release(u);                                                  /* a remade u goes at once */
    if (bt__wants(n, 0) || bt__wants(n, 1) || bt__wants(n, 2)) {
        bt_tensor *dh = bt__new(bt_shape2(rows, hid), dt, dev);
#ifdef BT_CUDA
        BT__ON_GPU(dev, stream) {
            int fused = bt__fused(BT_FUSE_EPILOGUES) &&
                        bt_k_matmul_epi(dt, dt, bt_data_ptr(dh), bt_data_ptr(g2), bt_data_ptr(w2), rows, hid, out_f, 0, 0, 0.f,
                                        BT_K_EPI_DGELU, NULL, bt_data_ptr(h), bt__g.precision, stream);
            if (!fused) {                                            /* du = g w2, then dh = du gelu'(h) in place */
                bt_k_matmul(dt, bt_data_ptr(dh), bt_data_ptr(g2), bt_data_ptr(w2), NULL, rows, hid, out_f, 0, 0, 1, 0, 0, 0, 1.f, 0.f,
                            bt__g.precision, stream);
                bt_k_unary_backward(BT_UOP_GELU, dt, bt_data_ptr(dh), bt_data_ptr(dh), bt_data_ptr(h), rows * hid, stream);
            }
        }
#endif
        bt__linear_wgrad(n, 1, 2, dh, x2, gin);                     /* dw1 = dh^T x, db1 */
        if (bt__wants(n, 0)) {
            bt_tensor *gx = bt__new(n->in_shape[0], dt, dev);
            bt__gemm(dt, dev, bt_data_ptr(gx), bt_data_ptr(dh), bt_data_ptr(w1), NULL, rows, in_f, hid, 0, 0, 1, 0, 0, 0, 1.0, 0.0);
            gin[0] = bt__register(gx);
        }
        bt_release(dh);
    }
    if (n->n_in > 5 && bt__wants(n, 5)) gin[5] = bt__register(bt_retain(g));   /* the residual's: g, as add's */
    bt_release(g2); bt_release(gc); bt_release(x2);
}
/* y [.., out] from the fused GEMMs, or NULL when cuBLASLt has no GELU epilogue for these shapes */
static bt_tensor *bt__mlp_fused(bt_tensor *x, bt_tensor *w1, bt_tensor *b1, bt_tensor *w2, bt_tensor *b2, bt_tensor *r,
                                const bt__ln_src *ln) {
    bt_tensor *y = NULL;
#ifdef BT_CUDA
    int64_t in_f = w1->shape[1], hid = w1->shape[0], out_f = w2->shape[0], rows = bt_numel(x) / (in_f ? in_f : 1);
    bt_dtype dt = x->dtype;
    bt_device dev = bt_device_of(x);
    bt_tensor *xc = bt__contig(x), *w1c = bt__contig(w1), *b1c = bt__contig(b1), *w2c = bt__contig(w2), *b2c = bt__contig(b2);
    bt_tensor *x2 = bt__view_dense(xc, bt_shape2(rows, in_f));
    bt_tensor *h = bt__new(bt_shape2(rows, hid), dt, dev), *u = bt__new(bt_shape2(rows, hid), dt, dev);
    int ok = 0;
    BT__ON_GPU(dev, stream)
        ok = bt_k_matmul_epi(dt, dt, bt_data_ptr(u), bt_data_ptr(x2), bt_data_ptr(w1c), rows, hid, in_f, 0, 1, 0.f,
                             BT_K_EPI_GELU_AUX_BIAS, bt_data_ptr(b1c), bt_data_ptr(h), bt__g.precision, stream);
    if (ok) {
        bt_shape os = bt_shape_of(x); os.d[os.ndim - 1] = out_f;
        y = bt__new(os, dt, dev);
        bt_tensor *rc = r ? bt__contig(r) : NULL;
        BT__ON_GPU(dev, stream) {
            if (rc) bt_k_matmul_add(dt, bt_data_ptr(y), bt_data_ptr(u), bt_data_ptr(w2c), bt_data_ptr(b2c), bt_data_ptr(rc), rows, out_f, hid,
                                    0, 1, bt__g.precision, stream);
            else bt_k_matmul(dt, bt_data_ptr(y), bt_data_ptr(u), bt_data_ptr(w2c), bt_data_ptr(b2c), rows, out_f, hid, 0, 1, 1, 0, 0, 0,
                             1.f, 0.f, bt__g.precision, stream);
        }
        bt_release(rc);
        bt_tensor *in[6] = {x, w1, b1, w2, b2, r};
        bt_node *n = bt__record("mlp_gelu", bt__mlp_back, y, in, r ? 6 : 5);
        if (n) {   /* saved[4], gelu(h), only when the backward is not to remake it (bt__mlp_saved_u) */
            int remake = ln && (bt__g.recompute & (BT_RECOMPUTE_GELU | BT_RECOMPUTE_NORM));
            bt_tensor *lx = remake ? bt__contig(ln->x) : NULL, *lx2 = lx ? bt__view_dense(lx, bt_shape2(rows, in_f)) : NULL;
            bt__save(n, remake ? lx2 : x2); bt__save(n, w1c); bt__save(n, h); bt__save(n, w2c);
            n->i[1] = !(bt__g.recompute & BT_RECOMPUTE_GELU);
            if (n->i[1]) bt__save(n, u);
            n->i[0] = remake;
            if (remake) {
                bt_tensor *lw = bt__contig(ln->w), *lb = bt__contig(ln->b);
                bt__save(n, lw); bt__save(n, lb);
                n->f[0] = ln->eps;
                bt_release(lw); bt_release(lb);
            }
            bt_release(lx2); bt_release(lx);
        }
    }
    bt_release(h); bt_release(u); bt_release(x2);
    bt_release(xc); bt_release(w1c); bt_release(b1c); bt_release(w2c); bt_release(b2c);
#else
    (void)x; (void)w1; (void)b1; (void)w2; (void)b2; (void)r; (void)ln; (void)bt__mlp_back;   /* no GPU: never fused */
#endif
    return y;
}
static bt_tensor *bt__mlp_gelu(bt_tensor *x, bt_tensor *w1, bt_tensor *b1, bt_tensor *w2, bt_tensor *b2, bt_tensor *r,
                               const bt__ln_src *ln) {
    bt__need_float(x, "mlp_gelu", "x"); bt__need_float(w1, "mlp_gelu", "w1"); bt__need_float(w2, "mlp_gelu", "w2");
    if (w1->ndim != 2 || w2->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w1->shape[1] || w2->shape[1] != w1->shape[0])
        bt_error("mlp_gelu: x %s, w1 %s, w2 %s: expected x [.., in], w1 [hid, in], w2 [out, hid]", bt__s(x), bt__s(w1), bt__s(w2));
    int fusable = bt__is_gpu(x) && b1 && b2 && x->dtype != BT_F64 && bt__fused(BT_FUSE_EPILOGUES) && bt_numel(x) > 0 && w1->dtype == x->dtype &&
                  w2->dtype == x->dtype && b1->dtype == x->dtype && b2->dtype == x->dtype && b1->ndim == 1 && b2->ndim == 1 &&
                  b1->shape[0] == w1->shape[0] && b2->shape[0] == w2->shape[0] && bt__is_gpu(w1) && bt__is_gpu(w2) && bt__is_gpu(b1) &&
                  bt__is_gpu(b2) && bt_device_of(w1).index == bt_device_of(x).index && bt_device_of(w2).index == bt_device_of(x).index &&
                  bt_device_of(b1).index == bt_device_of(x).index && bt_device_of(b2).index == bt_device_of(x).index;
    if (fusable && r) {   /* r: y's shape exactly, on x's device, in its dtype */
        bt_shape os = bt_shape_of(x); os.d[os.ndim - 1] = w2->shape[0];
        fusable = r->dtype == x->dtype && bt__is_gpu(r) && bt_device_of(r).index == bt_device_of(x).index && r->ndim == os.ndim &&
                  !memcmp(r->shape, os.d, sizeof(int64_t) * (size_t)os.ndim);
    }
    bt_tensor *y = fusable ? bt__mlp_fused(x, w1, b1, w2, b2, r, ln) : NULL;
    if (y) return bt__register(y);
    if (r) return bt_linear_add(bt_gelu(bt_linear(x, w1, b1)), w2, b2, r);
    return bt_linear(bt_gelu(bt_linear(x, w1, b1)), w2, b2);   /* the linears check the rest */
}
BTDEF bt_tensor *bt_mlp_gelu(bt_tensor *x, bt_tensor *w1, bt_tensor *b1, bt_tensor *w2, bt_tensor *b2, bt_tensor *r) {
    return bt__mlp_gelu(x, w1, b1, w2, b2, r, NULL);
}
BTDEF bt_tensor *bt_layernorm_mlp_gelu(bt_tensor *x, bt_tensor *lnw, bt_tensor *lnb, double eps, bt_tensor *w1, bt_tensor *b1,
                                       bt_tensor *w2, bt_tensor *b2, bt_tensor *r) {
    bt_tensor *h = bt_layernorm(x, lnw, lnb, eps);   /* checks x, lnw, lnb (x's dtype); its node keeps x */
    bt__ln_src ln = {x, lnw, lnb, eps, 0};
    /* a strided x: the layernorm keeps a contiguous copy of its own, the MLP would keep another */
    return bt__mlp_gelu(h, w1, b1, w2, b2, r, lnw && lnb && bt_is_contiguous(x) ? &ln : NULL);
}

/* linear(norm(x)) whose node keeps the normalisation's input x (its node keeps it too: no bytes of
   its own) in the place of the output (bt__linear with ln), remade in the backward by the forward's
   own op on the same input (grad mode is off there: no node), so the same bits on every device */
static void bt__linear_ln_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *x = n->saved[0], *nw = n->saved[2];
    bt_tensor *x2 = n->i[2] ? bt_rmsnorm(x, nw, n->f[0]) : bt_layernorm(x, nw, n->saved[3], n->f[0]);
    bt__linear_grads(n, g, (int)n->i[1], x2, gin);
}
/* a strided x: the normalisation keeps a contiguous copy of its own, this node would keep another */
BTDEF bt_tensor *bt_layernorm_linear(bt_tensor *x, bt_tensor *lnw, bt_tensor *lnb, double eps, bt_tensor *w, bt_tensor *b) {
    bt_tensor *h = bt_layernorm(x, lnw, lnb, eps);   /* checks x, lnw, lnb (x's dtype) */
    bt__ln_src ln = {x, lnw, lnb, eps, 0};
    int remake = (bt__g.recompute & BT_RECOMPUTE_NORM) && lnw && lnb && bt_is_contiguous(x);
    return bt__linear(h, w, b, remake ? &ln : NULL);
}
BTDEF bt_tensor *bt_rmsnorm_linear(bt_tensor *x, bt_tensor *nw, double eps, bt_tensor *w, bt_tensor *b) {
    bt_tensor *h = bt_rmsnorm(x, nw, eps);   /* checks x, nw (x's dtype) */
    bt__ln_src ln = {x, nw, NULL, eps, 1};
    int remake = (bt__g.recompute & BT_RECOMPUTE_NORM) && nw && bt_is_contiguous(x);
    return bt__linear(h, w, b, remake ? &ln : NULL);
}

/* ---- softmax / log_softmax over the last dim ---- */
static void bt__softmax_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *y = n->saved[0];
    int lg = (int)n->i[0];
    int64_t cols = y->ndim ? y->shape[y->ndim - 1] : 1, rows = cols ? bt_numel(y) / cols : 0;
    bt_tensor *gc = bt__contig(g), *gx = bt__new(bt_shape_of(y), y->dtype, bt_device_of(y));
    if (bt__is_gpu(y)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(y), stream) bt_k_softmax_backward(y->dtype, bt_data_ptr(gx), bt_data_ptr(gc), bt_data_ptr(y), rows, cols, lg, stream);
#endif
    } else {
        const void *gp = bt_data_ptr(gc), *yp = bt_data_ptr(y); void *xp = bt_data_ptr(gx); bt_dtype dt = y->dtype;
        #pragma omp parallel for if (rows * cols > BT__PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            int64_t o = r * cols; double s = 0;
            for (int64_t j = 0; j < cols; j++) s += lg ? bt__ld(gp, dt, o + j) : bt__ld(gp, dt, o + j) * bt__ld(yp, dt, o + j);
            for (int64_t j = 0; j < cols; j++) {
                double gj = bt__ld(gp, dt, o + j), yj = bt__ld(yp, dt, o + j);
                bt__st(xp, dt, o + j, lg ? gj - exp(yj) * s : yj * (gj - s));
            }
        }
    }
    bt_release(gc);
    gin[0] = bt__register(gx);
}
static bt_tensor *bt__softmax(bt_tensor *x, int lg) {
    const char *name = lg ? "log_softmax" : "softmax";
    bt__need_float(x, name, "x");
    if (x->ndim == 0) bt_error("%s: needs at least 1 dim, got %s", name, bt__s(x));
    int64_t cols = x->shape[x->ndim - 1], rows = cols ? bt_numel(x) / cols : 0;
    bt_tensor *xc = bt__contig(x), *y = bt__new(bt_shape_of(x), x->dtype, bt_device_of(x));
    if (bt__is_gpu(x)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(x), stream) bt_k_softmax(x->dtype, bt_data_ptr(y), bt_data_ptr(xc), rows, cols, lg, stream);
#endif
    } else {
        const void *xp = bt_data_ptr(xc); void *yp = bt_data_ptr(y); bt_dtype dt = x->dtype;
        #pragma omp parallel for if (rows * cols > BT__PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            int64_t o = r * cols; double mx = -INFINITY, s = 0;
            for (int64_t j = 0; j < cols; j++) { double v = bt__ld(xp, dt, o + j); if (v > mx) mx = v; }
            for (int64_t j = 0; j < cols; j++) s += exp(bt__ld(xp, dt, o + j) - mx);
            double ls = log(s);
            for (int64_t j = 0; j < cols; j++) {
                double z = bt__ld(xp, dt, o + j) - mx;
                bt__st(yp, dt, o + j, lg ? z - ls : exp(z - ls));
            }
        }
    }
    bt_release(xc);
    bt_node *n = bt__record(name, bt__softmax_back, y, &x, 1);
    if (n) { n->i[0] = lg; bt__save(n, y); }
    return bt__register(y);
}
BTDEF bt_tensor *bt_softmax(bt_tensor *x) { return bt__softmax(x, 0); }
BTDEF bt_tensor *bt_log_softmax(bt_tensor *x) { return bt__softmax(x, 1); }

/* ---- layernorm over the last dim C ----
   y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps) (biased variance).
   Backward with xhat = (x - mean) rstd and dxhat = dy w:
   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dw = sum dy xhat, db = sum dy. */
static bt_dtype bt__stat_dtype(bt_tensor *x) { return x->dtype == BT_F64 ? BT_F64 : BT_F32; }
/* its CPU loops for fp32 (mean and rstd in f32): float loads and stores around the same double
   arithmetic, vectorised; w, b, gx, gw, gb may be NULL */
static void bt__layernorm_f32(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
                              int64_t rows, int64_t C, double eps) {
    #pragma omp parallel for if (rows * C > BT__PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        double m = 0, v = 0;
        #pragma omp simd reduction(+ : m)
        for (int64_t j = 0; j < C; j++) m += xr[j];
        m /= (double)C;
        #pragma omp simd reduction(+ : v)
        for (int64_t j = 0; j < C; j++) v += (xr[j] - m) * (xr[j] - m);
        double rs = 1.0 / sqrt(v / (double)C + eps);
        #pragma omp simd
        for (int64_t j = 0; j < C; j++) yr[j] = (float)((xr[j] - m) * rs * (w ? w[j] : 1.0) + (b ? b[j] : 0.0));
        mean[r] = (float)m; rstd[r] = (float)rs;
    }
}
/* gx = dx, or gx += dx with gx_add; gw, gb written (the caller's zeros) */
static void bt__layernorm_back_f32(float *gx, int gx_add, float *gw, float *gb, const float *g, const float *x, const float *w,
                                   const float *mean, const float *rstd, int64_t rows, int64_t C) {
    if (gx) {
        #pragma omp parallel for if (rows * C > BT__PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * C, *gr = g + r * C;
            double m = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
            #pragma omp simd reduction(+ : s1, s2)
            for (int64_t j = 0; j < C; j++) {
                double dxh = gr[j] * (w ? w[j] : 1.0);
                s1 += dxh; s2 += dxh * ((xr[j] - m) * rs);
            }
            s1 /= (double)C; s2 /= (double)C;
            #pragma omp simd
            for (int64_t j = 0; j < C; j++) {
                double xh = (xr[j] - m) * rs, dxh = gr[j] * (w ? w[j] : 1.0);
                gx[r * C + j] = (float)((gx_add ? gx[r * C + j] : 0.0) + rs * (dxh - s1 - xh * s2));
            }
        }
    }
    if (gw || gb) {                           /* column sums: 64 columns a task, rows streamed in order */
        #pragma omp parallel for if (rows * C > BT__PAR_MIN)
        for (int64_t j0 = 0; j0 < C; j0 += 64) {
            int64_t nj = C - j0 < 64 ? C - j0 : 64;
            double sw[64] = {0}, sb[64] = {0};
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = x + r * C + j0, *gr = g + r * C + j0;
                double m = mean[r], rs = rstd[r];
                #pragma omp simd
                for (int64_t j = 0; j < nj; j++) { sw[j] += gr[j] * ((xr[j] - m) * rs); sb[j] += gr[j]; }
            }
            for (int64_t j = 0; j < nj; j++) { if (gw) gw[j0 + j] = (float)sw[j]; if (gb) gb[j0 + j] = (float)sb[j]; }
        }
    }
}
/* the .grad of the leaf behind input i when a GPU kernel of x's dtype may add into it */
static bt_tensor *bt__ln_param_sink(bt_node *n, int i, bt_tensor *x) {
    bt_tensor *sink = bt__is_gpu(x) ? bt__grad_sink(n, i, x->dtype) : NULL;
    if (!sink || sink->dtype != x->dtype) return NULL;
    sink->storage->version++;
    return sink;
}
/* layernorm's gradients from g (its output's): x's into gin[0] (node input 0; added in place into
   `into` when given, which becomes gin[0]), w's and b's into gin[iw], gin[iw + 1] (inputs iw,
   iw + 1), from the saved x, mean, rstd and w (NULL: none) */
static void bt__layernorm_grads(bt_node *n, bt_tensor *g, bt_tensor *x, bt_tensor *mean, bt_tensor *rstd, bt_tensor *w, int has_w,
                                int has_b, int iw, bt_tensor *into, bt_tensor **gin) {
    const int ib = iw + 1;
    int64_t C = x->shape[x->ndim - 1], rows = C ? bt_numel(x) / C : 0;
    bt_device dev = bt_device_of(x); bt_dtype dt = x->dtype;
    bt_tensor *gc = bt__contig(g);
    bt_tensor *gsum = into ? into : bt__wants(n, 0) ? bt__pending_grad_sink(n, 0) : NULL;   /* gx += dx in the kernel */
    bt_tensor *gx = gsum ? gsum : bt__wants(n, 0) ? bt__new(bt_shape_of(x), dt, dev) : NULL;
    /* on a GPU the kernel adds gw and gb into the leaves' .grad where it has x's dtype (bf16 gradients:
       one rounding of the fp32 sum), else into zeros returned in gin */
    bt_tensor *sw = has_w && bt__wants(n, iw) ? bt__ln_param_sink(n, iw, x) : NULL, *sb = has_b && bt__wants(n, ib) ? bt__ln_param_sink(n, ib, x) : NULL;
    bt_tensor *gw = sw ? sw : has_w && bt__wants(n, iw) ? bt_zeros(bt_shape1(C), dt, dev) : NULL;
    bt_tensor *gb = sb ? sb : has_b && bt__wants(n, ib) ? bt_zeros(bt_shape1(C), dt, dev) : NULL;
    if (bt__is_gpu(x)) {
#ifdef BT_CUDA
        float *cs = bt__colsum_for(gx, C);   /* the next linear layer's bias gradient, in the same pass */
        BT__ON_GPU(dev, stream) bt_k_layernorm_backward(dt, gx ? bt_data_ptr(gx) : NULL, gsum != NULL, gw ? bt_data_ptr(gw) : NULL, gb ? bt_data_ptr(gb) : NULL,
                                cs, bt_data_ptr(gc), bt_data_ptr(x), w ? bt_data_ptr(w) : NULL, (const float *)bt_data_ptr(mean),
                                (const float *)bt_data_ptr(rstd), rows, C, stream);
        bt__colsum_leave(gx, cs, C);
#endif
    } else {
        const void *gp = bt_data_ptr(gc), *xp = bt_data_ptr(x), *wp = w ? bt_data_ptr(w) : NULL;
        const void *mp = bt_data_ptr(mean), *rp = bt_data_ptr(rstd); bt_dtype sdt = mean->dtype;
        if (dt == BT_F32) {
            bt__layernorm_back_f32(gx ? (float *)bt_data_ptr(gx) : NULL, gsum != NULL, gw ? (float *)bt_data_ptr(gw) : NULL,
                                   gb ? (float *)bt_data_ptr(gb) : NULL, (const float *)gp, (const float *)xp,
                                   (const float *)wp, (const float *)mp, (const float *)rp, rows, C);
        } else if (gx) {
            #pragma omp parallel for if (rows * C > BT__PAR_MIN)
            for (int64_t r = 0; r < rows; r++) {
                double m = bt__ld(mp, sdt, r), rs = bt__ld(rp, sdt, r), s1 = 0, s2 = 0;
                for (int64_t j = 0; j < C; j++) {
                    double xh = (bt__ld(xp, dt, r * C + j) - m) * rs, dxh = bt__ld(gp, dt, r * C + j) * (wp ? bt__ld(wp, dt, j) : 1);
                    s1 += dxh; s2 += dxh * xh;
                }
                s1 /= (double)C; s2 /= (double)C;
                for (int64_t j = 0; j < C; j++) {
                    double xh = (bt__ld(xp, dt, r * C + j) - m) * rs, dxh = bt__ld(gp, dt, r * C + j) * (wp ? bt__ld(wp, dt, j) : 1);
                    double prev = gsum ? bt__ld(bt_data_ptr(gx), dt, r * C + j) : 0.0;
                    bt__st(bt_data_ptr(gx), dt, r * C + j, prev + rs * (dxh - s1 - xh * s2));
                }
            }
        }
        if (dt != BT_F32 && (gw || gb)) {
            #pragma omp parallel for if (rows * C > BT__PAR_MIN)
            for (int64_t j = 0; j < C; j++) {
                double sw = 0, sb = 0;
                for (int64_t r = 0; r < rows; r++) {
                    double gv = bt__ld(gp, dt, r * C + j);
                    sw += gv * (bt__ld(xp, dt, r * C + j) - bt__ld(mp, sdt, r)) * bt__ld(rp, sdt, r); sb += gv;
                }
                if (gw) bt__st(bt_data_ptr(gw), dt, j, sw);
                if (gb) bt__st(bt_data_ptr(gb), dt, j, sb);
            }
        }
    }
    bt_release(gc);
    gin[0] = into ? into : gx && !gsum ? bt__register(gx) : NULL;   /* a sunk gx is the producer's own gradient */
    gin[iw] = sw ? NULL : gw; gin[ib] = sb ? NULL : gb;
}
static void bt__layernorm_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt__layernorm_grads(n, g, n->saved[0], n->saved[1], n->saved[2], n->n_saved > 3 ? n->saved[3] : NULL, (int)n->i[0], (int)n->i[1], 1,
                        NULL, gin);
}
BTDEF bt_tensor *bt_layernorm(bt_tensor *x, bt_tensor *w, bt_tensor *b, double eps) {
    bt__need_float(x, "layernorm", "x");
    if (x->ndim == 0) bt_error("layernorm: needs at least 1 dim, got %s", bt__s(x));
    int64_t C = x->shape[x->ndim - 1], rows = C ? bt_numel(x) / C : 0;
    bt_tensor *p[2] = {w, b}; const char *pn[2] = {"w", "b"};
    for (int k = 0; k < 2; k++) if (p[k]) {
        bt__need_float(p[k], "layernorm", pn[k]); bt__same_device(x, p[k], "layernorm"); bt__same_dtype(x, p[k], "layernorm");
        if (p[k]->ndim != 1 || p[k]->shape[0] != C) bt_error("layernorm: %s %s must be [%lld] for x %s", pn[k], bt__s(p[k]), (long long)C, bt__s(x));
    }
    if (!(eps > 0)) bt_error("layernorm: eps must be > 0, got %g", eps);
    bt_device dev = bt_device_of(x); bt_dtype dt = x->dtype;
    if (dev.type == BT_GPU && dt == BT_F64) bt_error("layernorm: f64 is CPU-only (gradient checks), got %s", bt__s(x));
    bt_tensor *xc = bt__contig(x), *wc = w ? bt__contig(w) : NULL, *bc = b ? bt__contig(b) : NULL;
    bt_tensor *y = bt__new(bt_shape_of(x), dt, dev);
    bt_tensor *mean = bt__new(bt_shape1(rows), bt__stat_dtype(x), dev), *rstd = bt__new(bt_shape1(rows), bt__stat_dtype(x), dev);
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        BT__ON_GPU(dev, stream) bt_k_layernorm(dt, bt_data_ptr(y), (float *)bt_data_ptr(mean), (float *)bt_data_ptr(rstd), bt_data_ptr(xc),
                       wc ? bt_data_ptr(wc) : NULL, bc ? bt_data_ptr(bc) : NULL, rows, C, (float)eps, stream);
#endif
    } else {
        const void *xp = bt_data_ptr(xc), *wp = wc ? bt_data_ptr(wc) : NULL, *bp = bc ? bt_data_ptr(bc) : NULL;
        void *yp = bt_data_ptr(y); bt_dtype sdt = mean->dtype;
        if (dt == BT_F32) bt__layernorm_f32((float *)yp, (float *)bt_data_ptr(mean), (float *)bt_data_ptr(rstd), (const float *)xp,
                                            (const float *)wp, (const float *)bp, rows, C, eps);
        else {
            #pragma omp parallel for if (rows * C > BT__PAR_MIN)
            for (int64_t r = 0; r < rows; r++) {
                double m = 0, v = 0;
                for (int64_t j = 0; j < C; j++) m += bt__ld(xp, dt, r * C + j);
                m /= (double)C;
                for (int64_t j = 0; j < C; j++) { double d = bt__ld(xp, dt, r * C + j) - m; v += d * d; }
                double rs = 1.0 / sqrt(v / (double)C + eps);
                for (int64_t j = 0; j < C; j++) {
                    double o = (bt__ld(xp, dt, r * C + j) - m) * rs;
                    if (wp) o *= bt__ld(wp, dt, j);
                    if (bp) o += bt__ld(bp, dt, j);
                    bt__st(yp, dt, r * C + j, o);
                }
                bt__st(bt_data_ptr(mean), sdt, r, m); bt__st(bt_data_ptr(rstd), sdt, r, rs);
            }
        }
    }
    bt_tensor *in[3] = {x, w, b};
    bt_node *n = bt__record("layernorm", bt__layernorm_back, y, in, 3);
    if (n) { n->i[0] = w != NULL; n->i[1] = b != NULL; bt__save(n, xc); bt__save(n, mean); bt__save(n, rstd); if (wc) bt__save(n, wc); }
    bt_release(xc); bt_release(wc); bt_release(bc); bt_release(mean); bt_release(rstd);
    return bt__register(y);
}

/* ---- RMSNorm over the last dim C (Llama) ----
   y = round(x rstd) w, rstd = 1 / sqrt(mean_j x_j^2 + eps), round: to x's dtype (transformers'
   LlamaRMSNorm casts the normalised x back before the weight; the identity in f64, a float store in
   f32). Backward with xhat = x rstd, dxhat = dy w:
     dx = rstd (dxhat - xhat mean_j(dxhat xhat)),  dw = sum_rows dy xhat.
   The GPU kernels are layernorm's with the mean and its gradient term compiled out (bt_kernels.cuh
   section 6): the same one-pass warp rows, saved statistic and fixed-order (deterministic) dw sums. */
static double bt__round_as(bt_dtype dt, double v) {
    switch (dt) {
    case BT_F32: return (float)v;
    case BT_BF16: return bt__bf16_to_f32(bt__f32_to_bf16((float)v));
    case BT_F16: return bt__f16_to_f32(bt__f32_to_f16((float)v));
    default: return v;
    }
}
/* RMSNorm's gradients as bt__layernorm_grads gives layernorm's: x's into gin[0] (or added into
   `into`, which becomes gin[0]), w's into gin[iw] */
static void bt__rmsnorm_grads(bt_node *n, bt_tensor *g, bt_tensor *x, bt_tensor *rstd, bt_tensor *w, int iw, bt_tensor *into,
                              bt_tensor **gin) {
    int64_t C = x->shape[x->ndim - 1], rows = C ? bt_numel(x) / C : 0;
    bt_device dev = bt_device_of(x); bt_dtype dt = x->dtype;
    bt_tensor *gc = bt__contig(g);
    bt_tensor *gsum = into ? into : bt__wants(n, 0) ? bt__pending_grad_sink(n, 0) : NULL;   /* gx += dx in the kernel */
    bt_tensor *gx = gsum ? gsum : bt__wants(n, 0) ? bt__new(bt_shape_of(x), dt, dev) : NULL;
    bt_tensor *sw = w && bt__wants(n, iw) ? bt__ln_param_sink(n, iw, x) : NULL;   /* as layernorm's */
    bt_tensor *gw = sw ? sw : w && bt__wants(n, iw) ? bt_zeros(bt_shape1(C), dt, dev) : NULL;
    if (bt__is_gpu(x)) {
#ifdef BT_CUDA
        float *cs = bt__colsum_for(gx, C);
        BT__ON_GPU(dev, stream) bt_k_rmsnorm_backward(dt, gx ? bt_data_ptr(gx) : NULL, gsum != NULL, gw ? bt_data_ptr(gw) : NULL, cs,
                                bt_data_ptr(gc), bt_data_ptr(x), w ? bt_data_ptr(w) : NULL, (const float *)bt_data_ptr(rstd),
                                rows, C, stream);
        bt__colsum_leave(gx, cs, C);
#endif
    } else {
        const void *gp = bt_data_ptr(gc), *xp = bt_data_ptr(x), *wp = w ? bt_data_ptr(w) : NULL, *rp = bt_data_ptr(rstd);
        bt_dtype sdt = rstd->dtype;
        if (gx) {
            void *gxp = bt_data_ptr(gx);
            #pragma omp parallel for if (rows * C > BT__PAR_MIN)
            for (int64_t r = 0; r < rows; r++) {
                double rs = bt__ld(rp, sdt, r), s2 = 0;
                for (int64_t j = 0; j < C; j++)
                    s2 += bt__ld(gp, dt, r * C + j) * (wp ? bt__ld(wp, dt, j) : 1.0) * bt__ld(xp, dt, r * C + j) * rs;
                s2 /= (double)C;
                for (int64_t j = 0; j < C; j++) {
                    double xh = bt__ld(xp, dt, r * C + j) * rs, dxh = bt__ld(gp, dt, r * C + j) * (wp ? bt__ld(wp, dt, j) : 1.0);
                    double prev = gsum ? bt__ld(gxp, dt, r * C + j) : 0.0;
                    bt__st(gxp, dt, r * C + j, prev + rs * (dxh - xh * s2));
                }
            }
        }
        if (gw) {                             /* column sums: 64 columns a task, rows streamed in order */
            void *gwp = bt_data_ptr(gw);
            #pragma omp parallel for if (rows * C > BT__PAR_MIN)
            for (int64_t j0 = 0; j0 < C; j0 += 64) {
                int64_t nj = C - j0 < 64 ? C - j0 : 64;
                double sw[64] = {0};
                for (int64_t r = 0; r < rows; r++) {
                    double rs = bt__ld(rp, sdt, r);
                    for (int64_t j = 0; j < nj; j++) sw[j] += bt__ld(gp, dt, r * C + j0 + j) * bt__ld(xp, dt, r * C + j0 + j) * rs;
                }
                for (int64_t j = 0; j < nj; j++) bt__st(gwp, dt, j0 + j, sw[j]);
            }
        }
    }
    bt_release(gc);
    gin[0] = into ? into : gx && !gsum ? bt__register(gx) : NULL;   /* a sunk gx is the producer's own gradient */
    gin[iw] = sw ? NULL : gw;
}
static void bt__rmsnorm_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt__rmsnorm_grads(n, g, n->saved[0], n->saved[1], n->n_saved > 2 ? n->saved[2] : NULL, 1, NULL, gin);
}
BTDEF bt_tensor *bt_rmsnorm(bt_tensor *x, bt_tensor *w, double eps) {
    bt__need_float(x, "rmsnorm", "x");
    if (x->ndim == 0) bt_error("rmsnorm: needs at least 1 dim, got %s", bt__s(x));
    int64_t C = x->shape[x->ndim - 1], rows = C ? bt_numel(x) / C : 0;
    if (w) {
        bt__need_float(w, "rmsnorm", "w"); bt__same_device(x, w, "rmsnorm"); bt__same_dtype(x, w, "rmsnorm");
        if (w->ndim != 1 || w->shape[0] != C) bt_error("rmsnorm: w %s must be [%lld] for x %s", bt__s(w), (long long)C, bt__s(x));
    }
    if (!(eps > 0)) bt_error("rmsnorm: eps must be > 0, got %g", eps);
    bt_device dev = bt_device_of(x); bt_dtype dt = x->dtype;
    if (dev.type == BT_GPU && dt == BT_F64) bt_error("rmsnorm: f64 is CPU-only (gradient checks), got %s", bt__s(x));
    bt_tensor *xc = bt__contig(x), *wc = w ? bt__contig(w) : NULL;
    bt_tensor *y = bt__new(bt_shape_of(x), dt, dev), *rstd = bt__new(bt_shape1(rows), bt__stat_dtype(x), dev);
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        BT__ON_GPU(dev, stream) bt_k_rmsnorm(dt, bt_data_ptr(y), (float *)bt_data_ptr(rstd), bt_data_ptr(xc), wc ? bt_data_ptr(wc) : NULL,
                                             rows, C, (float)eps, stream);
#endif
    } else {
        const void *xp = bt_data_ptr(xc), *wp = wc ? bt_data_ptr(wc) : NULL;
        void *yp = bt_data_ptr(y), *rp = bt_data_ptr(rstd); bt_dtype sdt = rstd->dtype;
        #pragma omp parallel for if (rows * C > BT__PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            double ss = 0;
            for (int64_t j = 0; j < C; j++) { double v = bt__ld(xp, dt, r * C + j); ss += v * v; }
            double rs = bt__round_as(sdt, 1.0 / sqrt(ss / (double)C + eps));   /* the saved statistic's value */
            for (int64_t j = 0; j < C; j++) {
                double o = bt__round_as(dt, bt__ld(xp, dt, r * C + j) * rs);
                bt__st(yp, dt, r * C + j, wp ? o * bt__ld(wp, dt, j) : o);
            }
            bt__st(rp, sdt, r, rs);
        }
    }
    bt_tensor *in[2] = {x, w};
    bt_node *n = bt__record("rmsnorm", bt__rmsnorm_back, y, in, 2);
    if (n) { bt__save(n, xc); bt__save(n, rstd); if (wc) bt__save(n, wc); }
    bt_release(xc); bt_release(wc); bt_release(rstd);
    return bt__register(y);
}

/* ---- SwiGLU on a packed [.., 2F] projection: y = silu(a) * u, a = x[.., :F] (gate), u = x[.., F:] ----
   Forward rounds silu(a) to x's dtype before the product (transformers' act_fn(gate) * up).
   Backward, s = sigmoid(a): ga = g u s (1 + a (1 - s)), gu = g a s, both halves in one pass. */
/* the gradient of x (contiguous [.., 2F]) from g (y's, [.., F]): a new tensor (also bt_mlp_swiglu_fp8's CPU side) */
static bt_tensor *bt__swiglu_grad_eval(bt_tensor *x, bt_tensor *g) {
    int64_t F2 = x->shape[x->ndim - 1], F = F2 / 2, rows = F2 ? bt_numel(x) / F2 : 0;
    bt_dtype dt = x->dtype;
    bt_tensor *gc = bt__contig(g), *gx = bt__new(bt_shape_of(x), dt, bt_device_of(x));
    if (bt__is_gpu(x)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(x), stream) bt_k_swiglu_backward(dt, bt_data_ptr(gx), bt_data_ptr(gc), bt_data_ptr(x), rows, F, stream);
#endif
    } else {
        const void *xp = bt_data_ptr(x), *gp = bt_data_ptr(gc); void *gxp = bt_data_ptr(gx);
        int64_t nel = rows * F;
        #pragma omp parallel for if (nel > BT__PAR_MIN)
        for (int64_t i = 0; i < nel; i++) {
            int64_t r = i / F, j = i - r * F;
            double a = bt__ld(xp, dt, r * F2 + j), u = bt__ld(xp, dt, r * F2 + F + j), gv = bt__ld(gp, dt, i);
            double s = 1.0 / (1.0 + exp(-a));
            bt__st(gxp, dt, r * F2 + j, gv * u * s * (1.0 + a * (1.0 - s)));
            bt__st(gxp, dt, r * F2 + F + j, gv * a * s);
        }
    }
    bt_release(gc);
    return gx;
}
static void bt__swiglu_back(bt_node *n, bt_tensor *g, bt_tensor **gin) { gin[0] = bt__register(bt__swiglu_grad_eval(n->saved[0], g)); }
/* y [.., F] of xc (contiguous [.., 2F]): a new tensor (also bt_mlp_swiglu_fp8's CPU side) */
static bt_tensor *bt__swiglu_eval(bt_tensor *xc) {
    int64_t F2 = xc->shape[xc->ndim - 1], F = F2 / 2, rows = F2 ? bt_numel(xc) / F2 : 0;
    bt_shape ys = bt_shape_of(xc); ys.d[ys.ndim - 1] = F;
    bt_dtype dt = xc->dtype;
    bt_tensor *y = bt__new(ys, dt, bt_device_of(xc));
    if (bt__is_gpu(xc)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(xc), stream) bt_k_swiglu(dt, bt_data_ptr(y), bt_data_ptr(xc), rows, F, stream);
#endif
    } else {
        const void *xp = bt_data_ptr(xc); void *yp = bt_data_ptr(y);
        int64_t nel = rows * F;
        #pragma omp parallel for if (nel > BT__PAR_MIN)
        for (int64_t i = 0; i < nel; i++) {
            int64_t r = i / F, j = i - r * F;
            double a = bt__ld(xp, dt, r * F2 + j);
            bt__st(yp, dt, i, bt__round_as(dt, a / (1.0 + exp(-a))) * bt__ld(xp, dt, r * F2 + F + j));
        }
    }
    return y;
}
BTDEF bt_tensor *bt_swiglu(bt_tensor *x) {
    bt__need_float(x, "swiglu", "x");
    if (x->ndim == 0) bt_error("swiglu: needs at least 1 dim, got %s", bt__s(x));
    int64_t F2 = x->shape[x->ndim - 1];
    if (F2 % 2) bt_error("swiglu: the last dim of x %s must be even (gate then up, F each)", bt__s(x));
    bt_tensor *xc = bt__contig(x), *y = bt__swiglu_eval(xc);
    bt_node *n = bt__record("swiglu", bt__swiglu_back, y, &x, 1);
    if (n) bt__save(n, xc);
    bt_release(xc);
    return bt__register(y);
}

/* ---- RoPE on x [B, T, H, D] (transformers' rotate_half convention, see the declaration) ----
   For each (b, t) one fp32 angle per frequency, p inv_freq[i] with p = pos0 + t, shared by the H
   heads; a pair (i, i + D/2) rotated by it (by minus it in the backward: R(-a) = R(a)^T). Traffic:
   x read once (any strides), y written once; the angles cost a sin and a cos per (b, t, i). */
#define BT__ROPE_MAXD 512
static void bt__rope_check_opts(const bt_rope_opts *o, int64_t D) {
    if (!o) bt_error("rope: opts is NULL");
    if (!(o->theta > 0)) bt_error("rope: theta must be > 0, got %g", o->theta);
    if (D < 0 || D % 2 || D > BT__ROPE_MAXD) bt_error("rope: the head dim D = %lld must be even, in [0, %d]", (long long)D, BT__ROPE_MAXD);
    if (o->factor != 0 && !(o->factor > 0 && o->low_freq_factor > 0 && o->high_freq_factor > o->low_freq_factor &&
                            o->original_max_position_embeddings > 0))
        bt_error("rope: llama3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                 "original_max_position_embeddings > 0, got %g, %g, %g, %lld", o->factor, o->low_freq_factor,
                 o->high_freq_factor, (long long)o->original_max_position_embeddings);
}
/* in fp32 step by step as transformers' _compute_default_rope_parameters and
   _compute_llama3_parameters compute them (torch float32 tensors with python scalars) */
BTDEF void bt_rope_inv_freq(const bt_rope_opts *o, int64_t D, float *out) {
    bt__rope_check_opts(o, D);
    for (int64_t i = 0; i < D / 2; i++) {
        float inv = 1.0f / powf((float)o->theta, (float)(2 * i) / (float)D);
        if (o->factor > 0) {
            double L = (double)o->original_max_position_embeddings;
            float wl = (float)6.283185307179586 / inv;
            float low = (float)(L / o->low_freq_factor), high = (float)(L / o->high_freq_factor);
            float il = wl > low ? inv / (float)o->factor : inv;
            float sf = ((float)L / wl - (float)o->low_freq_factor) / (float)(o->high_freq_factor - o->low_freq_factor);
            float sm = (1.0f - sf) * il / (float)o->factor + sf * il;
            inv = !(wl < high) && !(wl > low) ? sm : il;
        }
        out[i] = inv;
    }
}
/* y = x rotated by sign * angle (+1) in heads h < Hr, copied in the others: y, x [B, T, H, D] views
   (D contiguous; y may be x: each pair is read before it is written) */
static void bt__rope_into(bt_tensor *y, bt_tensor *x, int64_t Hr, const float *inv, int64_t pos0, int sign) {
    int64_t B = x->shape[0], T = x->shape[1], H = x->shape[2], D = x->shape[3], half = D / 2;
    bt_dtype dt = x->dtype;
    if (bt__is_gpu(x)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(x), stream)
            bt_k_rope(dt, bt_data_ptr(y), y->stride, bt_data_ptr(x), x->stride, B, T, H, Hr, D, pos0, inv, sign, stream);
#endif
        return;
    }
    const void *xp = x->storage->data; void *yp = y->storage->data;
    const int64_t *st = x->stride, *sy = y->stride;
    #pragma omp parallel for if (bt_numel(x) > BT__PAR_MIN)
    for (int64_t bt = 0; bt < B * T; bt++) {
        int64_t b = bt / T, t = bt - b * T;
        float p = (float)(pos0 + t);
        for (int64_t i = 0; i < half; i++) {
            float a = p * inv[i];                       /* fp32, as transformers' freqs */
            double c = cos((double)a), s = sign * sin((double)a);
            if (dt != BT_F64) { c = (float)c; s = (float)s; }   /* fp32 cos and sin */
            for (int64_t h = 0; h < H; h++) {
                int64_t o = x->offset + b * st[0] + t * st[1] + h * st[2], oy = y->offset + b * sy[0] + t * sy[1] + h * sy[2];
                double x1 = bt__ld(xp, dt, o + i), x2 = bt__ld(xp, dt, o + i + half);
                bt__st(yp, dt, oy + i, h < Hr ? x1 * c - x2 * s : x1);
                bt__st(yp, dt, oy + i + half, h < Hr ? x2 * c + x1 * s : x2);
            }
        }
    }
}
/* y (new, contiguous [B, T, H, D]) = x rotated by sign * angle (+1) */
static bt_tensor *bt__rope_apply(bt_tensor *x, const float *inv, int64_t pos0, int sign) {
    bt_tensor *xc = x->stride[3] == 1 ? bt_retain(x) : bt__contig(x), *y = bt__new(bt_shape_of(x), x->dtype, bt_device_of(x));
    bt__rope_into(y, xc, x->shape[2], inv, pos0, sign);
    bt_release(xc);
    return y;
}
static void bt__rope_opts_of(const bt_node *n, bt_rope_opts *o) {
    o->theta = n->f[0]; o->factor = n->f[1]; o->low_freq_factor = n->f[2]; o->high_freq_factor = n->f[3];
    o->original_max_position_embeddings = n->i[1];
}
static void bt__rope_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_rope_opts o; float inv[BT__ROPE_MAXD / 2];
    bt__rope_opts_of(n, &o);
    int64_t D = n->in_shape[0].d[3];
    bt_rope_inv_freq(&o, D, inv);
    gin[0] = bt__register(bt__rope_apply(g, inv, n->i[0], -1));
}
BTDEF bt_tensor *bt_rope_ex(bt_tensor *x, const bt_rope_opts *o, int64_t pos0) {
    bt__need_float(x, "rope", "x");
    if (x->ndim != 4) bt_error("rope: x must be [B, T, H, D], got %s", bt__s(x));
    if (x->shape[3] % 2 || x->shape[3] > BT__ROPE_MAXD)
        bt_error("rope: the head dim D of x %s must be even and at most %d", bt__s(x), BT__ROPE_MAXD);
    if (pos0 < 0 || pos0 + x->shape[1] > (1 << 24))
        bt_error("rope: positions %lld .. %lld out of [0, 2^24] (fp32 positions are exact there), x %s", (long long)pos0,
                 (long long)(pos0 + x->shape[1]), bt__s(x));
    float inv[BT__ROPE_MAXD / 2];
    bt_rope_inv_freq(o, x->shape[3], inv);
    bt_tensor *y = bt__rope_apply(x, inv, pos0, 1);
    bt_node *n = bt__record("rope", bt__rope_back, y, &x, 1);
    if (n) {
        n->f[0] = o->theta; n->f[1] = o->factor; n->f[2] = o->low_freq_factor; n->f[3] = o->high_freq_factor;
        n->i[0] = pos0; n->i[1] = o->original_max_position_embeddings;
    }
    return bt__register(y);
}
BTDEF bt_tensor *bt_rope(bt_tensor *x, double theta, int64_t pos0) {
    bt_rope_opts o = {theta, 0, 0, 0, 0};
    return bt_rope_ex(x, &o, pos0);
}

/* ---- embedding: out[i, :] = table[idx[i], :]; backward scatter-adds rows into [V, C] ---- */
static void bt__embedding_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *idx = n->saved[0];
    int64_t V = n->in_shape[0].d[0], C = n->in_shape[0].d[1], cnt = bt_numel(idx);
    (void)V;   /* the GPU kernel's bound */
    bt_tensor *leaf = bt__edge_leaf(n, 0);
    if (leaf && leaf->rows_hook) {
        bt_tensor *gc = bt__contig(g);
        int taken = leaf->rows_hook(leaf, idx, gc, leaf->rows_user);
        bt_release(gc);
        if (taken) { gin[0] = NULL; return; }
    }
    bt_tensor *sink = bt__is_gpu(g) ? bt__grad_sink(n, 0, g->dtype) : NULL;
    if (sink && sink->dtype == BT_F32) {   /* rows straight into the leaf's fp32 gradient */
#ifdef BT_CUDA
        bt_tensor *gc = bt__contig(g);
        sink->storage->version++;
        BT__ON_GPU(bt_device_of(g), stream) bt_k_embedding_backward_f32(g->dtype, (float *)bt_data_ptr(sink), bt_data_ptr(gc),
                                    (const int32_t *)bt_data_ptr(idx), cnt, C, V, 1.f, bt__g.deterministic, stream);
        bt_release(gc);
#endif
        gin[0] = NULL;
        return;
    }
    bt_tensor *gc = bt__contig(g), *gt = bt_zeros(n->in_shape[0], g->dtype, bt_device_of(g));
    if (bt__is_gpu(g)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(g), stream) bt_k_embedding_backward(g->dtype, bt_data_ptr(gt), bt_data_ptr(gc), (const int32_t *)bt_data_ptr(idx), cnt, C, V,
                                bt__g.deterministic, stream);
#endif
    } else {
        const int32_t *ip = (const int32_t *)bt_data_ptr(idx); const void *gp = bt_data_ptr(gc); void *tp = bt_data_ptr(gt);
        bt_dtype dt = g->dtype;
        /* parallel over channels: each thread owns a column range, rows add in index order */
        #pragma omp parallel for if (cnt * C > BT__PAR_MIN)
        for (int64_t j = 0; j < C; j++)
            for (int64_t i = 0; i < cnt; i++) {
                int64_t o = (int64_t)ip[i] * C + j;
                bt__st(tp, dt, o, bt__ld(tp, dt, o) + bt__ld(gp, dt, i * C + j));
            }
    }
    bt_release(gc);
    gin[0] = gt;
}
BTDEF void bt_set_rows_hook(bt_tensor *leaf, bt_rows_hook_fn fn, void *user) {
    if (!leaf) bt_error("set_rows_hook: leaf must not be NULL");
    if (leaf->grad_fn) bt_error("set_rows_hook: tensor is not a leaf (made by %s)", leaf->grad_fn->op);
    leaf->rows_hook = fn; leaf->rows_user = fn ? user : NULL;
}
BTDEF bt_tensor *bt_embedding(bt_tensor *table, bt_tensor *idx) {
    bt__need_float(table, "embedding", "table"); bt__need(idx, "embedding", "idx");
    if (table->ndim != 2) bt_error("embedding: table must be [V, C], got %s", bt__s(table));
    if (idx->dtype != BT_I32) bt_error("embedding: idx must be i32, got %s", bt__s(idx));
    bt__same_device(table, idx, "embedding");
    if (idx->ndim + 1 > BT_MAX_DIMS) bt_error("embedding: idx %s has too many dims", bt__s(idx));
    int64_t V = table->shape[0], C = table->shape[1], cnt = bt_numel(idx);
    bt_tensor *ic = bt__contig(idx), *tc = bt__contig(table);
    bt_shape os = bt_shape_of(idx); os.d[os.ndim++] = C;
    bt_tensor *out = bt__new(os, table->dtype, bt_device_of(table));
    if (bt__is_gpu(table)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(table), stream) bt_k_embedding(table->dtype, bt_data_ptr(out), bt_data_ptr(tc), (const int32_t *)bt_data_ptr(ic), cnt, C, V,
                       bt__bad(bt_device_of(table)), stream);
#endif
    } else {
        const int32_t *ip = (const int32_t *)bt_data_ptr(ic);
        for (int64_t i = 0; i < cnt; i++)
            if (ip[i] < 0 || ip[i] >= V) {
                int64_t bad = ip[i]; bt_release(ic); bt_release(tc); bt_release(out);
                bt_error("embedding: index %lld at position %lld is out of range [0, %lld) for table %s", (long long)bad, (long long)i, (long long)V, bt__s(table));
            }
        size_t es = bt_dtype_size(table->dtype); const char *tp = (const char *)bt_data_ptr(tc); char *op_ = (char *)bt_data_ptr(out);
        #pragma omp parallel for if (cnt * C > BT__PAR_MIN)
        for (int64_t i = 0; i < cnt; i++) memcpy(op_ + i * C * es, tp + (int64_t)ip[i] * C * es, (size_t)C * es);
    }
    bt_tensor *in[2] = {table, NULL};
    bt_node *n = bt__record("embedding", bt__embedding_back, out, in, 1);
    if (n) bt__save(n, ic);
    bt_release(ic); bt_release(tc);
    return bt__register(out);
}

/* ---- cross-entropy over the first V of Vp columns ----
   loss = (1 / n_valid) sum_{i valid} (logsumexp_{j<V} z_ij - z_{i,t_i});
   dz_ij = g / n_valid (softmax_j - [j = t_i]) for j < V, 0 for padding and ignored rows.
   The three steps below serve bt_cross_entropy and bt_linear_cross_entropy on either device. */
/* losses[r] and lse[r] (stat dtype) of N rows of z [N, Vp]; a target out of [0, V) that is not
   ignore is an error (on the GPU flagged, raised at the next host sync). CPU: 0, or -1 with *bad_row. */
static int bt__xent_rows(bt_device dev, bt_dtype dt, const void *z, const int32_t *tg, int64_t N, int64_t V, int64_t Vp,
                         int ign, void *losses, void *lse, bt_dtype sdt, int64_t *bad_row) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        int *bad = bt__bad(dev);
        BT__ON_GPU(dev, st) bt_k_cross_entropy(dt, (float *)losses, (float *)lse, z, tg, N, V, Vp, ign, bad, st);
#endif
        return 0;
    }
    for (int64_t r = 0; r < N; r++)
        if (tg[r] != ign && (tg[r] < 0 || tg[r] >= V)) { *bad_row = r; return -1; }
    #pragma omp parallel for if (N * V > BT__PAR_MIN)
    for (int64_t r = 0; r < N; r++) {
        double mx = -INFINITY, s = 0;
        if (dt == BT_F32) {   /* float loads and exp, double sums (vectorised) */
            mx = bt__max_f32((const float *)z + r * Vp, V);
            s = bt__sum_exp_f32((const float *)z + r * Vp, V, (float)mx);
        } else {
            for (int64_t j = 0; j < V; j++) { double v = bt__ld(z, dt, r * Vp + j); if (v > mx) mx = v; }
            for (int64_t j = 0; j < V; j++) s += exp(bt__ld(z, dt, r * Vp + j) - mx);
        }
        double l = mx + log(s);
        bt__st(lse, sdt, r, l);
        bt__st(losses, sdt, r, tg[r] == ign ? 0 : l - bt__ld(z, dt, r * Vp + tg[r]));
    }
    return 0;
}
/* gz [N, Vp] = gl[r] (softmax(z_r) - onehot(t_r)) over the first V columns, 0 elsewhere and on
   ignored rows; gz may be z itself (each element is read, then written, by one thread) */
static void bt__xent_grad(bt_device dev, bt_dtype dt, void *gz, const void *z, const void *lse, const int32_t *tg,
                          const void *gl, bt_dtype sdt, int64_t N, int64_t V, int64_t Vp, int ign) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        BT__ON_GPU(dev, stream) bt_k_cross_entropy_backward(dt, gz, z, (const float *)lse, tg, (const float *)gl, N, V, Vp, ign, stream);
#endif
        return;
    }
    #pragma omp parallel for if (N * Vp > BT__PAR_MIN)
    for (int64_t r = 0; r < N; r++) {
        int valid = tg[r] != ign; double l = bt__ld(lse, sdt, r), s = valid ? bt__ld(gl, sdt, r) : 0;
        if (dt == BT_F32) {               /* s softmax_j in float; then -s at the target; 0 past V */
            const float *zr = (const float *)z + r * Vp; float *o = (float *)gz + r * Vp, fl = (float)l, fs = (float)s;
            int64_t j0 = valid ? V : 0;
            float zt = valid ? zr[tg[r]] : 0;   /* read before the row is overwritten (gz may be z) */
            #pragma omp simd
            for (int64_t j = 0; j < j0; j++) o[j] = fs * bt__expf(zr[j] - fl);
            if (valid) o[tg[r]] = (float)(s * ((double)bt__expf(zt - fl) - 1));
            memset(o + j0, 0, sizeof(float) * (size_t)(Vp - j0));
            continue;
        }
        for (int64_t j = 0; j < Vp; j++) {
            double v = j < V && valid ? s * (exp(bt__ld(z, dt, r * Vp + j) - l) - (j == tg[r])) : 0;
            bt__st(gz, dt, r * Vp + j, v);
        }
    }
}
/* *inv = 1 / max(1, #{r : tg[r] != ign}) (stat dtype, one element on the device, no host sync) */
static void bt__xent_inv_count(bt_device dev, void *inv, const int32_t *tg, int64_t N, int ign, bt_dtype sdt) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        BT__ON_GPU(dev, st) bt_k_inv_count_ne((float *)inv, tg, N, ign, st);
#endif
        return;
    }
    int64_t valid = 0;
    for (int64_t r = 0; r < N; r++) valid += tg[r] != ign;
    bt__st(inv, sdt, 0, 1.0 / (double)(valid ? valid : 1));
}
/* *acc += sum of n values (stat dtype) */
static void bt__sum_into(bt_device dev, void *acc, const void *x, int64_t n, bt_dtype sdt) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        BT__ON_GPU(dev, st) bt_k_sum_rows_acc(BT_F32, (float *)acc, x, n, 1, st);
#endif
        return;
    }
    double s = bt__ld(acc, sdt, 0);
    for (int64_t i = 0; i < n; i++) s += bt__ld(x, sdt, i);
    bt__st(acc, sdt, 0, s);
}
/* x[0] *= s[0] (one element each, stat dtype) */
static void bt__scale_by(bt_device dev, void *x, const void *s, bt_dtype sdt) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        int64_t one = 1, st0 = 0;
        BT__ON_GPU(dev, st) bt_k_binary(BT_BOP_MUL, BT_F32, x, x, &st0, s, &st0, 1, &one, st);
#endif
        return;
    }
    bt__st(x, sdt, 0, bt__ld(x, sdt, 0) * bt__ld(s, sdt, 0));
}
/* the per-row upstream gradient g * inv_count as an [N] tensor of the stat dtype, no host sync */
static bt_tensor *bt__xent_row_grads(bt_tensor *g, bt_tensor *inv, int64_t N) {
    bt_tensor *scale = bt_mul(bt_cast(g, inv->dtype), inv);
    return bt__contig(bt_expand(bt_reshape(scale, bt_shape1(1)), bt_shape1(N)));
}
static void bt__xent_check(bt_tensor *logits_or_x, bt_tensor *targets, int64_t lead_dims, const char *op) {
    if (targets->dtype != BT_I32) bt_error("%s: targets must be i32, got %s", op, bt__s(targets));
    bt__same_device(logits_or_x, targets, op);
    if (logits_or_x->ndim < 1 || logits_or_x->ndim != targets->ndim + 1)
        bt_error("%s: %s must be targets %s plus a last dim", op, bt__s(logits_or_x), bt__s(targets));
    for (int d = 0; d < lead_dims; d++)
        if (targets->shape[d] != logits_or_x->shape[d]) bt_error("%s: %s and targets %s differ in dim %d", op, bt__s(logits_or_x), bt__s(targets), d);
    if (bt__is_gpu(logits_or_x) && logits_or_x->dtype == BT_F64) bt_error("%s: f64 is CPU-only (gradient checks), got %s", op, bt__s(logits_or_x));
}

/* the logits' gradient of either loss from its rows' upstream gradients gl [N] (stat dtype) */
static void bt__xent_grad_in(bt_node *n, bt_tensor *gl, bt_tensor **gin) {
    bt_tensor *logits = n->saved[0], *tg = n->saved[1], *lse = n->saved[2];
    int64_t N = logits->shape[0], Vp = logits->shape[1], V = n->i[0]; int ign = (int)n->i[1];
    bt_tensor *gz = bt__new(bt_shape2(N, Vp), logits->dtype, bt_device_of(logits));
    bt__xent_grad(bt_device_of(logits), logits->dtype, bt_data_ptr(gz), bt_data_ptr(logits), bt_data_ptr(lse),
                  (const int32_t *)bt_data_ptr(tg), bt_data_ptr(gl), lse->dtype, N, V, Vp, ign);
    bt_release(gl);
    gin[0] = bt_reshape(bt__register(gz), n->in_shape[0]);
}
/* the mean: every row's upstream gradient is g / n_valid */
static void bt__xent_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt__xent_grad_in(n, bt__xent_row_grads(g, n->saved[3], n->saved[0]->shape[0]), gin);
}
/* per-row losses: each row's own upstream gradient g_r */
static void bt__xent_rows_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt__xent_grad_in(n, bt__contig(bt_reshape(bt_cast(g, n->saved[2]->dtype), bt_shape1(n->saved[0]->shape[0]))), gin);
}
/* The forward both share: the checks, then every row's loss (losses, of losses_shape) and
   log-sum-exp. z2 [N, Vp] and t1 [N] are the dense views the node saves. */
typedef struct { bt_tensor *zc, *tc, *z2, *t1, *losses, *lse; int64_t N, V; } bt__xent_fw;
static bt__xent_fw bt__xent_forward(bt_tensor *logits, bt_tensor *targets, int64_t V, int ign, const char *op, int rows_shape) {
    bt__need_float(logits, op, "logits"); bt__need(targets, op, "targets");
    bt__xent_check(logits, targets, targets->ndim, op);
    bt__xent_fw f;
    int64_t Vp = logits->shape[logits->ndim - 1];
    f.N = bt_numel(targets);
    f.V = V <= 0 ? Vp : V;
    if (f.V > Vp) bt_error("%s: V = %lld but logits %s have only %lld columns", op, (long long)f.V, bt__s(logits), (long long)Vp);
    bt_device dev = bt_device_of(logits);
    bt_dtype sdt = bt__stat_dtype(logits);
    f.zc = bt__contig(logits); f.tc = bt__contig(targets);
    f.z2 = bt__view_dense(f.zc, bt_shape2(f.N, Vp)); f.t1 = bt__view_dense(f.tc, bt_shape1(f.N));
    f.losses = bt__new(rows_shape ? bt_shapev(targets->ndim, targets->shape) : bt_shape1(f.N), sdt, dev);
    f.lse = bt__new(bt_shape1(f.N), sdt, dev);
    int64_t bad = 0;
    const int32_t *tp = (const int32_t *)bt_data_ptr(f.t1);
    if (bt__xent_rows(dev, logits->dtype, bt_data_ptr(f.z2), tp, f.N, f.V, Vp, ign, bt_data_ptr(f.losses), bt_data_ptr(f.lse), sdt, &bad)) {
        int64_t t = tp[bad];
        bt_release(f.zc); bt_release(f.tc); bt_release(f.z2); bt_release(f.t1); bt_release(f.losses); bt_release(f.lse);
        bt_error("%s: target %lld at position %lld is out of range [0, %lld) and not ignore_index %d", op, (long long)t,
                 (long long)bad, (long long)f.V, ign);
    }
    return f;
}
BTDEF bt_tensor *bt_cross_entropy(bt_tensor *logits, bt_tensor *targets, int64_t V, int ignore_index) {
    bt__xent_fw f = bt__xent_forward(logits, targets, V, ignore_index, "cross_entropy", 0);
    bt_device dev = bt_device_of(logits);
    bt_dtype sdt = f.lse->dtype;
    bt_tensor *inv = bt__new(bt_shape1(1), sdt, dev);   /* 1 / max(1, n_valid) */
    bt__xent_inv_count(dev, bt_data_ptr(inv), (const int32_t *)bt_data_ptr(f.t1), f.N, ignore_index, sdt);
    bt_tensor *loss = bt__new(bt_shapev(0, NULL), sdt, dev);
    bt_fill_(loss, 0.0);
    bt__sum_into(dev, bt_data_ptr(loss), bt_data_ptr(f.losses), f.N, sdt);
    bt__scale_by(dev, bt_data_ptr(loss), bt_data_ptr(inv), sdt);
    bt_node *n = bt__record("cross_entropy", bt__xent_back, loss, &logits, 1);
    if (n) { n->i[0] = f.V; n->i[1] = ignore_index; bt__save(n, f.z2); bt__save(n, f.t1); bt__save(n, f.lse); bt__save(n, inv); }
    bt_release(f.zc); bt_release(f.tc); bt_release(f.z2); bt_release(f.t1); bt_release(f.losses); bt_release(f.lse); bt_release(inv);
    return bt__register(loss);
}
BTDEF bt_tensor *bt_cross_entropy_rows(bt_tensor *logits, bt_tensor *targets, int64_t V, int ignore_index) {
    bt__xent_fw f = bt__xent_forward(logits, targets, V, ignore_index, "cross_entropy_rows", 1);
    bt_node *n = bt__record("cross_entropy_rows", bt__xent_rows_back, f.losses, &logits, 1);
    if (n) { n->i[0] = f.V; n->i[1] = ignore_index; bt__save(n, f.z2); bt__save(n, f.t1); bt__save(n, f.lse); }
    bt_release(f.zc); bt_release(f.tc); bt_release(f.z2); bt_release(f.t1); bt_release(f.lse);
    return bt__register(f.losses);
}

/* ---- the classifier: cross_entropy(linear(x, w), targets) without the [rows, Vp] logits ----
   x [.., C], w [Vp, C] (PyTorch's layout; GPT-2's is the tied embedding), targets i32 [..]. The
   logits are made a chunk of rows at a time into one bounded temporary; the loss needs only their
   per-row log-sum-exp. When a gradient is wanted the chunk's logit gradient is taken at once, in
   place (d loss / d z for an upstream gradient of 1), and turned into its parts of dx = dz w and
   dw = dz^T x before the next chunk; the backward only scales those two by the upstream gradient
   (the gradient is linear in it). Same three GEMMs as unfused; what goes is the largest activation
   of a language model (1.6 GB of bf16 logits for GPT-2 at 16 x 1024 rows) and two of the
   cross-entropy's passes over it. */
/* 1 GiB of logits a chunk: GPT-2's bf16 head at 10,672 rows a chunk.
   Measured on an H100 at 131,072 rows: the three GEMMs of a chunk ran at 707-775 TFLOP/s there
   against 657-750 at 256 MiB (2,668 rows, where dx's output fills half the SMs' tiles and dw's
   fp32 accumulator is re-read 4x as often); bench/RESULTS.md. */
static size_t bt__lxent_chunk_bytes = (size_t)1 << 30;
BTDEF size_t bt_linear_cross_entropy_chunk(size_t bytes) {
    size_t old = bt__lxent_chunk_bytes;
    if (bytes) bt__lxent_chunk_bytes = bytes;
    return old;
}
/* rows a chunk: the fewest chunks under the cap (rows), made equal (so no chunk holds more logits
   than the work needs: 8,192 rows, not 10,672, at GPT-2's B 16 x 1024), rounded up to 64 rows (the
   GEMMs' tiles) where that stays under the cap */
static int64_t bt__lxent_rows(int64_t N, int64_t cap) {
    if (cap < 1) cap = 1;
    if (N <= cap) return N;
    const int64_t nch = (N + cap - 1) / cap, even = (N + nch - 1) / nch, up = (even + 63) / 64 * 64;
    return up <= cap ? up : even;
}
/* y += a[0] x over n elements of dtype dt (a: one element of dt, on y's device) */
static void bt__axpy_dev(bt_device dev, bt_dtype dt, void *y, const void *a, const void *x, int64_t n) {
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        if (dt != BT_F32) bt_error("linear_cross_entropy: a %s gradient accumulator on the GPU (f32 expected)", bt_dtype_name(dt));
        BT__ON_GPU(dev, st) bt_k_axpy_f32((float *)y, (const float *)a, (const float *)x, n, st);
#endif
        return;
    }
    double av = bt__ld(a, dt, 0);
    #pragma omp parallel for if (n > BT__PAR_MIN)
    for (int64_t i = 0; i < n; i++) bt__st(y, dt, i, bt__ld(y, dt, i) + av * bt__ld(x, dt, i));
}
static void bt__lxent_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *dx = n->n_saved > 0 && n->i[0] ? n->saved[0] : NULL, *dw = n->i[1] ? n->saved[n->i[0] ? 1 : 0] : NULL;
    if (dx && bt__wants(n, 0)) gin[0] = bt_reshape(bt_mul(dx, bt_cast(g, dx->dtype)), n->in_shape[0]);
    if (!dw || !bt__wants(n, 1)) return;
    bt_tensor *gs = bt_contiguous(bt_reshape(bt_cast(g, dw->dtype), bt_shape1(1)));
    bt_tensor *sink = bt__grad_sink(n, 1, dw->dtype);
    if (sink && sink->dtype == dw->dtype) {            /* dw_leaf += g dw, no temporary */
        sink->storage->version++;
        bt__axpy_dev(bt_device_of(dw), dw->dtype, bt_data_ptr(sink), bt_data_ptr(gs), bt_data_ptr(dw), bt_numel(dw));
    } else gin[1] = bt_cast(bt_mul(dw, gs), n->in_dtype[1]);
}
static void bt__fp8_check_state(const char *op, const char *which, bt_fp8_state *st, bt_tensor *x);
static void bt__fp8_cast(bt_fp8_state *st, int role, bt_tensor *x2, bt_tensor *q, bt_tensor *qt, float *slot);
/* st's row of role [amax of this step, scale, history]: a cast of role is about to run and update it */
static float *bt__fp8_role_row(bt_fp8_state *st, int role) {
    st->seen |= 1u << role;
    st->buf->storage->version++;
    return (float *)bt_data_ptr(st->buf) + role * (2 + st->opts.history);
}
/* 1 when a cast of role scales by its row's scale (delayed recipe, the role primed), 0 when it must
   measure its amax first (current recipe, or the role's first cast) */
static int bt__fp8_delayed(const bt_fp8_state *st, int role) {
    return st->opts.recipe != BT_FP8_CURRENT && (st->primed >> role & 1u);
}
/* 1 when a cast of one of st's roles (roles: a mask of 1 << role) is not delayed: the current
   recipe, or a role's first cast. Such a cast takes its amax into slot 1 of its node's scale slots
   ([scale, amax, -, -] each) by atomics from zero, where a delayed one writes slot 0 alone; so a
   node zeroes its slots only when this holds for one of its casts (in the steady state of the
   delayed recipe a launch fewer per node, 6 a GPT-2 layer). */
static int bt__fp8_any_current(const bt_fp8_state *st, unsigned roles) {
    return st->opts.recipe == BT_FP8_CURRENT || (~st->primed & roles) != 0;
}
static void bt__fp8_gemm(bt_device dev, bt_dtype dt, bt_tensor *C, bt_tensor *A, const float *sa, bt_tensor *B, const float *sb,
                         bt_tensor *bias, bt_tensor *R, int64_t M, int64_t N, int64_t K, int fast_accum);
/* The head's FP8 products (bt_linear_cross_entropy_fp8): w cast once (e4m3 w, and w^T for dx); each
   chunk's x (e4m3 x, and x^T for dw) and logit gradient (e5m2 dz, and dz^T for dw) cast before its
   products. sc [12] f32 holds the [scale, amax, -, -] of x, w and dz (x's and dz's those of the
   chunk in hand: a current cast scales each chunk by its own amax; a delayed one all by the history's). */
typedef struct { bt_fp8_state *st; bt_tensor *x2, *sc, *qw, *qwt, *qx, *qxt, *qg, *qgt; } bt__lxent_f8;   /* x2: x as [N, C] */
static void bt__lxent_f8_free(bt__lxent_f8 *f) {
    bt_release(f->x2); bt_release(f->sc); bt_release(f->qw); bt_release(f->qwt); bt_release(f->qx); bt_release(f->qxt); bt_release(f->qg); bt_release(f->qgt);
}
/* the first rows cols bytes of t's buffer (a fresh t, offset 0, whose values are no longer needed) as a
   contiguous [rows, cols] tensor of the 1-byte dtype fmt (owned: released by the caller) */
static bt_tensor *bt__bytes_view(bt_tensor *t, bt_dtype fmt, int64_t rows, int64_t cols) {
    if (t->offset || bt_dtype_size(fmt) != 1 || (size_t)(rows * cols) > t->storage->nbytes)
        bt_error("bytes_view: [%lld, %lld] bytes do not fit %s's buffer", (long long)rows, (long long)cols, bt__s(t));
    bt_tensor *v = bt__view_dense(t, bt_shape2(rows, cols));
    v->dtype = fmt;
    return v;
}
/* rows [r0, r0 + n) of a contiguous t read as [n, cols] (owned: released by the caller) */
static bt_tensor *bt__rows_view(bt_tensor *t, int64_t r0, int64_t n, int64_t cols) {
    const int64_t shape[2] = {n, cols}, stride[2] = {cols, 1};
    return bt__view_raw(t, 2, shape, stride, t->offset + r0 * cols);
}
/* the cast of the chunk's rows [r0, r0 + n) of x [N, C] or z [chunk, Vp] (role) into the first n rows of
   q and the first n columns' worth of qt (both may be NULL), with slot k of sc */
static void bt__lxent_f8_cast(bt__lxent_f8 *f, int role, bt_tensor *src, int64_t r0, int64_t n, int64_t cols, bt_tensor *q, bt_tensor *qt) {
    int k = role == BT_FP8_X ? 0 : 8;
    bt_tensor *s2 = bt__rows_view(src, r0, n, cols), *slot = bt__rows_view(f->sc, k / 4, 1, 4);
    bt_tensor *q2 = q ? bt__view_dense(q, bt_shape2(n, cols)) : NULL, *qt2 = qt ? bt__view_dense(qt, bt_shape2(cols, n)) : NULL;
    bt_zero_(slot);                                   /* the amax a current cast accumulates */
    bt__fp8_cast(f->st, role, s2, q2, qt2, (float *)bt_data_ptr(f->sc) + k);
    bt_release(s2); bt_release(slot); bt_release(q2); bt_release(qt2);
}
/* bt_linear_cross_entropy, with st: its three products in FP8 when a gradient is wanted */
static bt_tensor *bt__lxent(bt_tensor *x, bt_tensor *w, bt_tensor *targets, int64_t V, int ignore_index, bt_fp8_state *st) {
    const char *op = st ? "linear_cross_entropy_fp8" : "linear_cross_entropy";
    bt__need_float(x, op, "x"); bt__need_float(w, op, "w"); bt__need(targets, op, "targets");
    bt__same_device(x, w, op); bt__same_dtype(x, w, op);
    bt__xent_check(x, targets, targets->ndim, op);
    if (w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[1])
        bt_error("%s: x %s needs last dim = in of w %s ([Vp, C])", op, bt__s(x), bt__s(w));
    int64_t N = bt_numel(targets), C = w->shape[1], Vp = w->shape[0];
    if (V <= 0) V = Vp;
    if (V > Vp) bt_error("%s: V = %lld but w %s has only %lld rows", op, (long long)V, bt__s(w), (long long)Vp);
    bt_device dev = bt_device_of(x); bt_dtype dt = x->dtype, sdt = bt__stat_dtype(x);
    int want_dx = bt__g.grad_enabled && bt__needs_grad(x), want_dw = bt__g.grad_enabled && bt__needs_grad(w);
    if (want_dw && dev.type == BT_CPU && dt != sdt)
        bt_error("%s: a gradient of a %s w on the CPU is not supported (f32 or f64)", op, bt_dtype_name(dt));
    int f8 = st && (want_dx || want_dw);              /* without a gradient: the products of x's dtype (docs/fp8.md) */
    if (f8) {
        bt__fp8_check_state(op, "", st, x);
        if (dt == BT_F64) bt_error("%s: x %s: FP8 products of f64 are not supported", op, bt__s(x));
        if (dev.type == BT_GPU && (N % 16 || C % 16 || Vp % 16))
            bt_error("%s: %lld rows of x, C %lld, Vp %lld: on a GPU each must be a multiple of 16 (cuBLASLt's FP8 operands)", op,
                     (long long)N, (long long)C, (long long)Vp);
    }
    bt_tensor *xc = bt__contig(x), *wc = bt__contig(w), *tc = bt__contig(targets);
    const int32_t *tp = (const int32_t *)bt_data_ptr(tc);
    size_t es = bt_dtype_size(dt);
    /* the cap counts a chunk's logits; in FP8 their gradient's e5m2 bytes and its transpose come on
       top (2 bytes a logit: 1 GiB more at the default cap). Counting them too halved FP8's chunks,
       doubling the passes over dw's fp32 accumulator (50 chunks of 5,248 rows in the default run
       instead of 25 of 10,496): 0.9% of its tokens/s (H200, 2026-12-04, bench/RESULTS.md#fp8) */
    int64_t chunk = bt__lxent_rows(N, (int64_t)(bt_linear_cross_entropy_chunk(0) / ((size_t)Vp * es)));
    if (f8 && dev.type == BT_GPU && chunk < N) chunk = chunk >= 16 ? chunk / 16 * 16 : 16;   /* every chunk's rows a multiple of 16 */
    bt_tensor *inv = bt__new(bt_shape1(1), sdt, dev), *loss = bt__new(bt_shapev(0, NULL), sdt, dev);
    bt_tensor *z = bt__new(bt_shape2(chunk, Vp), dt, dev), *losses = bt__new(bt_shape1(chunk), sdt, dev);
    bt_tensor *lse = bt__new(bt_shape1(chunk), sdt, dev), *gl = NULL;
    bt_tensor *dx = want_dx ? bt__new(bt_shape2(N, C), dt, dev) : NULL, *dw = want_dw ? bt__new(bt_shape2(Vp, C), sdt, dev) : NULL;
    bt__lxent_f8 f = {st, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const float *sx = NULL, *sw = NULL, *sg = NULL;
    int gt_in_z = 0;
    if (f8) {
        f.x2 = bt__view_dense(xc, bt_shape2(N, C));
        f.sc = bt__new(bt_shape1(12), BT_F32, dev);
        if (bt__fp8_any_current(st, 1u << BT_FP8_X | 1u << BT_FP8_W | 1u << BT_FP8_G)) bt_zero_(f.sc);
        f.qw = bt__new(bt_shape2(Vp, C), BT_F8E4M3, dev); f.qwt = dx ? bt__new(bt_shape2(C, Vp), BT_F8E4M3, dev) : NULL;
        f.qx = bt__new(bt_shape2(chunk, C), BT_F8E4M3, dev); f.qxt = dw ? bt__new(bt_shape2(C, chunk), BT_F8E4M3, dev) : NULL;
        f.qg = dx ? bt__new(bt_shape2(chunk, Vp), BT_F8E5M2, dev) : NULL;
        /* dz^T goes into the chunk's logit buffer z, made from dz's bytes after z's last read (the
           delayed recipe on a GPU: by the pass that writes the bytes, or in its first step by the cast
           of the gradient, which then writes dz's bytes alone, and a transpose): the head holds 3
           bytes a logit, not 4. Its gradient's bytes are read twice then, in the first step only. */
        gt_in_z = dw && dev.type == BT_GPU && bt__fused(BT_FUSE_XENT) && st->opts.recipe == BT_FP8_DELAYED;
        if (dw) f.qgt = gt_in_z ? bt__bytes_view(z, BT_F8E5M2, Vp, chunk) : bt__new(bt_shape2(Vp, chunk), BT_F8E5M2, dev);
        bt_tensor *w2 = bt__view_dense(wc, bt_shape2(Vp, C));
        bt__fp8_cast(st, BT_FP8_W, w2, f.qw, f.qwt, (float *)bt_data_ptr(f.sc) + 4);
        bt_release(w2);
        sx = (const float *)bt_data_ptr(f.sc); sw = sx + 4; sg = sx + 8;
    }
    bt_fill_(loss, 0.0);
    bt__xent_inv_count(dev, bt_data_ptr(inv), tp, N, ignore_index, sdt);
    if (want_dx || want_dw) {                          /* d loss / d z_r = inv (softmax - onehot) */
        int old = bt_set_grad_enabled(0);
        bt_scope_begin();
        gl = bt_retain(bt_contiguous(bt_expand(inv, bt_shape1(chunk))));
        bt_scope_end();
        bt_set_grad_enabled(old);
    }
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
        int64_t n = N - r0 < chunk ? N - r0 : chunk, bad = 0;
        const char *xr = (const char *)bt_data_ptr(xc) + r0 * C * (int64_t)es;
        if (f8) {            /* z = (sx sw) qx qw^T */
            bt__lxent_f8_cast(&f, BT_FP8_X, f.x2, r0, n, C, f.qx, f.qxt);
            bt_tensor *qx = bt__view_dense(f.qx, bt_shape2(n, C)), *z2 = bt__view_dense(z, bt_shape2(n, Vp));
            bt__fp8_gemm(dev, dt, z2, qx, sx, f.qw, sw, NULL, NULL, n, Vp, C, st->opts.fast_accum & BT_FP8_FAST_FWD);
            bt_release(qx); bt_release(z2);
        } else bt__gemm(dt, dev, bt_data_ptr(z), xr, bt_data_ptr(wc), NULL, n, Vp, C, 0, 1, 1, 0, 0, 0, 1.0, 0.0);
        int fused = 0, gcast = f8;   /* the loss and the logit gradient in one pass over z (GPU); gcast: dz still to cast */
#ifdef BT_CUDA
        if (gl && dev.type == BT_GPU && bt__fused(BT_FUSE_XENT)) {   /* else the two kernels below */
            if (f8 && bt__fp8_delayed(st, BT_FP8_G)) {   /* dz's e5m2 bytes (and dz^T) from the pass that makes dz */
                float *row = bt__fp8_role_row(st, BT_FP8_G);
                BT__ON_GPU(dev, stream)
                    bt_k_cross_entropy_fused_fp8(dt, bt_fp8_format(BT_FP8_G), (float *)bt_data_ptr(losses), NULL, bt_data_ptr(z),
                                                 f.qg ? (uint8_t *)bt_data_ptr(f.qg) : NULL, f.qgt ? (uint8_t *)bt_data_ptr(f.qgt) : NULL,
                                                 tp + r0, (const float *)bt_data_ptr(gl), n, V, Vp, ignore_index, bt__bad(dev), row + 1,
                                                 (float *)bt_data_ptr(f.sc) + 8, row, stream);
                gcast = 0;
            } else
                BT__ON_GPU(dev, stream) bt_k_cross_entropy_fused(dt, (float *)bt_data_ptr(losses), NULL, bt_data_ptr(z), tp + r0,
                                                                 (const float *)bt_data_ptr(gl), n, V, Vp, ignore_index, bt__bad(dev), stream);
            fused = 1;
        }
#endif
        if (!fused &&
            bt__xent_rows(dev, dt, bt_data_ptr(z), tp + r0, n, V, Vp, ignore_index, bt_data_ptr(losses), bt_data_ptr(lse), sdt, &bad)) {
            int64_t t = tp[r0 + bad];
            bt_release(xc); bt_release(wc); bt_release(tc); bt_release(inv); bt_release(loss); bt_release(z); bt_release(losses);
            bt_release(lse); bt_release(gl); bt_release(dx); bt_release(dw); bt__lxent_f8_free(&f);
            bt_error("%s: target %lld at position %lld is out of range [0, %lld) and not ignore_index %d", op, (long long)t,
                     (long long)(r0 + bad), (long long)V, ignore_index);
        }
        bt__sum_into(dev, bt_data_ptr(loss), bt_data_ptr(losses), n, sdt);
        if (!gl) continue;
        if (!fused) bt__xent_grad(dev, dt, bt_data_ptr(z), bt_data_ptr(z), bt_data_ptr(lse), tp + r0, bt_data_ptr(gl), sdt, n, V, Vp, ignore_index);
        if (f8) {            /* dz to e5m2 (and its transpose); dx = (sg sw) qg qw, dw (+)= (sg sx) qg^T qx, fp32 across chunks */
#ifdef BT_CUDA
            if (gcast && gt_in_z) {   /* dz's bytes first, then dz^T over z */
                bt_tensor *q = f.qg ? bt_retain(f.qg) : bt__new(bt_shape2(n, Vp), BT_F8E5M2, dev);
                bt__lxent_f8_cast(&f, BT_FP8_G, z, 0, n, Vp, q, NULL);
                BT__ON_GPU(dev, stream) bt_k_fp8_transpose((uint8_t *)bt_data_ptr(f.qgt), (const uint8_t *)bt_data_ptr(q), n, Vp, stream);
                bt_release(q);
                gcast = 0;
            }
#endif
            if (gcast) bt__lxent_f8_cast(&f, BT_FP8_G, z, 0, n, Vp, f.qg, f.qgt);
            if (dx) {
                bt_tensor *dxr = bt__rows_view(dx, r0, n, C), *qg = bt__view_dense(f.qg, bt_shape2(n, Vp));
                bt__fp8_gemm(dev, dt, dxr, qg, sg, f.qwt, sw, NULL, NULL, n, C, Vp, 0);
                bt_release(dxr); bt_release(qg);
            }
            if (dw) {
                bt_tensor *qgt = bt__view_dense(f.qgt, bt_shape2(Vp, n)), *qxt = bt__view_dense(f.qxt, bt_shape2(C, n));
                bt__fp8_gemm(dev, sdt, dw, qgt, sg, qxt, sx, NULL, r0 ? dw : NULL, Vp, C, n, 0);
                bt_release(qgt); bt_release(qxt);
            }
            continue;
        }
        if (dx)      /* dx[r0 : r0 + n] = dz w */
            bt__gemm(dt, dev, (char *)bt_data_ptr(dx) + r0 * C * (int64_t)es, bt_data_ptr(z), bt_data_ptr(wc), NULL, n, C, Vp, 0, 0, 1, 0, 0, 0, 1.0, 0.0);
        if (dw) {    /* dw (+)= dz^T x[r0 : r0 + n], in the stat dtype */
            if (dev.type == BT_GPU) {
#ifdef BT_CUDA
                BT__ON_GPU(dev, st_) bt_k_matmul_out(dt, sdt, bt_data_ptr(dw), bt_data_ptr(z), xr, NULL, Vp, C, n, 1, 0, 1, 0, 0, 0, 1.f,
                                                     r0 ? 1.f : 0.f, bt__g.precision, st_);
#endif
            } else bt__gemm(dt, dev, bt_data_ptr(dw), bt_data_ptr(z), xr, NULL, Vp, C, n, 1, 0, 1, 0, 0, 0, 1.0, r0 ? 1.0 : 0.0);
        }
    }
    bt__scale_by(dev, bt_data_ptr(loss), bt_data_ptr(inv), sdt);
    bt_tensor *in[2] = {x, w};
    bt_node *nd = bt__record(op, bt__lxent_back, loss, in, 2);
    if (nd) {
        nd->i[0] = dx != NULL; nd->i[1] = dw != NULL;
        if (dx) bt__save(nd, dx);
        if (dw) bt__save(nd, dw);
    }
    bt_release(xc); bt_release(wc); bt_release(tc); bt_release(inv); bt_release(z); bt_release(losses); bt_release(lse);
    bt_release(gl); bt_release(dx); bt_release(dw); bt__lxent_f8_free(&f);
    return bt__register(loss);
}
BTDEF bt_tensor *bt_linear_cross_entropy(bt_tensor *x, bt_tensor *w, bt_tensor *targets, int64_t V, int ignore_index) {
    return bt__lxent(x, w, targets, V, ignore_index, NULL);
}
BTDEF bt_tensor *bt_linear_cross_entropy_fp8(bt_tensor *x, bt_tensor *w, bt_tensor *targets, int64_t V, int ignore_index, bt_fp8_state *st) {
    if (!st) bt_error("linear_cross_entropy_fp8: no FP8 state (st is NULL: bt_fp8_state_init)");
    return bt__lxent(x, w, targets, V, ignore_index, st);
}

/* the additive mask of KV-cache generation (declared in bt_tensor.h) */
BTDEF bt_tensor *bt_causal_mask(int n, int len, bt_dtype dt, bt_device dev) {
    if (n < 1 || len < 0) bt_error("causal_mask: %d new positions after %d cached ones", n, len);
    int64_t T = (int64_t)len + n;
    float *mk = (float *)malloc(sizeof(float) * (size_t)(n * T));
    if (!mk) bt_error("causal_mask: out of host memory for [%d, %lld]", n, (long long)T);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < T; j++) mk[i * T + j] = j <= len + i ? 0.0f : -INFINITY;
    bt_tensor *t = bt_cast(bt_from_data(mk, bt_shape2(n, T), BT_F32, dev), dt);
    free(mk);
    return t;
}

/* ---- causal self-attention, q k v [B, H, T, D] ----
   S = q k^T / sqrt(D) with S_ij = -inf for j > i; P = softmax_j(S); out = P v; lse_i saved.
   Backward (P recomputed from lse): dv = P^T dout, dP = dout v^T, dS = P (dP - rowsum(dout * out)),
   dq = dS k / sqrt(D), dk = dS^T q / sqrt(D).
   q, k, v are read through their strides whenever D is contiguous (a head split of a [B, T, C]
   activation costs no copy), and out, dq, dk, dv are laid out like q, so the permute back to
   [B, T, H, D] is a view. */

/* a new tensor of t's shape whose memory follows t's dimension order (dims sorted by stride),
   dense: a permuted view of t's layout keeps that permutation */
static bt_tensor *bt__new_like_layout(bt_tensor *t, bt_dtype dt) {
    int order[BT_MAX_DIMS], nd = t->ndim;
    for (int d = 0; d < nd; d++) order[d] = d;
    for (int i = 1; i < nd; i++)              /* stable: outermost (largest stride) first */
        for (int j = i; j > 0 && t->stride[order[j]] > t->stride[order[j - 1]]; j--) { int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x; }
    bt_shape ps; ps.ndim = nd;
    for (int d = 0; d < nd; d++) ps.d[d] = t->shape[order[d]];
    bt_tensor *dense = bt__new(ps, dt, bt_device_of(t)), *v = bt__alias(dense);
    for (int d = 0; d < nd; d++) { v->shape[order[d]] = dense->shape[d]; v->stride[order[d]] = dense->stride[d]; }
    bt_release(dense);
    return v;
}
/* t itself (+1) when its last dim is contiguous, else a contiguous copy */
static bt_tensor *bt__rows_dense(bt_tensor *t) { return t->stride[t->ndim - 1] == 1 ? bt_retain(t) : bt__contig(t); }
/* element offset of [b, h, t, 0] */
static inline int64_t bt__bht(const bt_tensor *x, int64_t b, int64_t h, int64_t t) {
    return x->offset + b * x->stride[0] + h * x->stride[1] + t * x->stride[2];
}

/* The same math in float for fp32 on the CPU (scores, exponentials and the weighted sum of v
   vectorised along j or d; the row sums in double). q, k, v, o: base pointers with strides st[3]
   (b, h, t; d contiguous). */
static void bt__attention_compute_f32(const float *q, const int64_t *qs, const float *k, const int64_t *ks,
                                      const float *v, const int64_t *vs, float *o, const int64_t *os, float *lse,
                                      int64_t B, int64_t H, int64_t G, int64_t T, int64_t D, float scale) {
    #pragma omp parallel for if (B * H * T * T * D > BT__PAR_MIN)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H, hk = h / G;
        float *s = (float *)malloc(sizeof(float) * (size_t)(T + D)), *acc = s + T;
        for (int64_t i = 0; i < T; i++) {
            const float *qi = q + b * qs[0] + h * qs[1] + i * qs[2];
            for (int64_t j = 0; j <= i; j++) {
                const float *kj = k + b * ks[0] + hk * ks[1] + j * ks[2];
                float d_ = 0;
                #pragma omp simd reduction(+ : d_)
                for (int64_t d = 0; d < D; d++) d_ += qi[d] * kj[d];
                s[j] = d_ * scale;
            }
            float mx = bt__max_f32(s, i + 1), sum = 0;
            #pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j <= i; j++) { s[j] = bt__expf(s[j] - mx); sum += s[j]; }
            for (int64_t d = 0; d < D; d++) acc[d] = 0;
            for (int64_t j = 0; j <= i; j++) {
                const float *vj = v + b * vs[0] + hk * vs[1] + j * vs[2];
                float p = s[j];
                #pragma omp simd
                for (int64_t d = 0; d < D; d++) acc[d] += p * vj[d];
            }
            float *oi = o + b * os[0] + h * os[1] + i * os[2];
            for (int64_t d = 0; d < D; d++) oi[d] = acc[d] / sum;
            lse[bh * T + i] = mx + logf(sum);
        }
        free(s);
    }
}
/* the attention math on [B, H, T, D] views (any strides with D contiguous): o and lse written */
static void bt__attention_compute(bt_tensor *q, bt_tensor *k, bt_tensor *v, bt_tensor *o, bt_tensor *lse) {
    int64_t B = q->shape[0], H = q->shape[1], Hkv = k->shape[1], G = H / Hkv, T = q->shape[2], D = q->shape[3];
    bt_dtype dt = q->dtype;
    double scale = 1.0 / sqrt((double)(D ? D : 1));
    if (bt__is_gpu(q)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(q), stream) bt_k_attention_strided(dt, bt_data_ptr(o), o->stride, (float *)bt_data_ptr(lse), bt_data_ptr(q), q->stride,
                               bt_data_ptr(k), k->stride, bt_data_ptr(v), v->stride, B, H, Hkv, T, D, (float)scale, 1, bt__g.precision,
                               stream);
#endif
        return;
    }
    if (dt == BT_F32) {
        bt__attention_compute_f32((const float *)q->storage->data + q->offset, q->stride, (const float *)k->storage->data + k->offset,
                                  k->stride, (const float *)v->storage->data + v->offset, v->stride,
                                  (float *)o->storage->data + o->offset, o->stride, (float *)bt_data_ptr(lse), B, H, G, T, D, (float)scale);
        return;
    }
    const void *qp = q->storage->data, *kp = k->storage->data, *vp = v->storage->data; bt_dtype ldt = lse->dtype;
    #pragma omp parallel for if (B * H * T * T * D > BT__PAR_MIN)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t b = bh / H, h = bh % H, hk = h / G;
        double *s = (double *)malloc(sizeof(double) * (size_t)(T + D));
        double *acc = s + T;
        for (int64_t i = 0; i < T; i++) {
            int64_t qi = bt__bht(q, b, h, i);
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= i; j++) {
                double d_ = 0; int64_t kj = bt__bht(k, b, hk, j);
                for (int64_t d = 0; d < D; d++) d_ += bt__ld(qp, dt, qi + d) * bt__ld(kp, dt, kj + d);
                s[j] = d_ * scale; if (s[j] > mx) mx = s[j];
            }
            for (int64_t d = 0; d < D; d++) acc[d] = 0;
            for (int64_t j = 0; j <= i; j++) {
                double p = exp(s[j] - mx); int64_t vj = bt__bht(v, b, hk, j); sum += p;
                for (int64_t d = 0; d < D; d++) acc[d] += p * bt__ld(vp, dt, vj + d);
            }
            for (int64_t d = 0; d < D; d++) bt__st(o->storage->data, dt, bt__bht(o, b, h, i) + d, acc[d] / sum);
            bt__st(bt_data_ptr(lse), ldt, bh * T + i, mx + log(sum));
        }
        free(s);
    }
}
/* its backward in float for fp32 on the CPU, the same loops as bt__attention_grads below; g and
   the outputs gq, gk, gv as base pointers with strides like the inputs. One task a key/value head
   (b, hk): dK, dV summed over its G query heads h = hk G .. hk G + G - 1 in that order */
static void bt__attention_grads_f32(const float *q, const int64_t *qs, const float *k, const int64_t *ks,
                                    const float *v, const int64_t *vs, const float *o, const int64_t *os,
                                    const float *lse, const float *g, const int64_t *gs, float *gq, const int64_t *gqs,
                                    float *gk, const int64_t *gks, float *gv, const int64_t *gvs, int64_t B, int64_t H,
                                    int64_t G, int64_t T, int64_t D, float scale) {
    const int64_t Hkv = H / G;
    #pragma omp parallel for if (B * H * T * T * D > BT__PAR_MIN)
    for (int64_t bk = 0; bk < B * Hkv; bk++) {
        int64_t b = bk / Hkv, hk = bk % Hkv;
        float *dq = (float *)calloc((size_t)(3 * T * D + T), sizeof(float));
        float *dk = dq + T * D, *dv = dk + T * D, *p = dv + T * D;
        for (int64_t h = hk * G; h < hk * G + G; h++) {
            int64_t bh = b * H + h;
            memset(dq, 0, sizeof(float) * (size_t)(T * D));
            for (int64_t i = 0; i < T; i++) {
                const float *qi = q + b * qs[0] + h * qs[1] + i * qs[2], *gi = g + b * gs[0] + h * gs[1] + i * gs[2];
                const float *oi = o + b * os[0] + h * os[1] + i * os[2];
                float l = lse[bh * T + i], Di = 0;
                #pragma omp simd reduction(+ : Di)
                for (int64_t d = 0; d < D; d++) Di += gi[d] * oi[d];
                for (int64_t j = 0; j <= i; j++) {
                    const float *kj = k + b * ks[0] + hk * ks[1] + j * ks[2];
                    float s_ = 0;
                    #pragma omp simd reduction(+ : s_)
                    for (int64_t d = 0; d < D; d++) s_ += qi[d] * kj[d];
                    p[j] = s_ * scale - l;
                }
                #pragma omp simd
                for (int64_t j = 0; j <= i; j++) p[j] = bt__expf(p[j]);
                for (int64_t j = 0; j <= i; j++) {
                    const float *kj = k + b * ks[0] + hk * ks[1] + j * ks[2], *vj = v + b * vs[0] + hk * vs[1] + j * vs[2];
                    float dp = 0, pj = p[j];
                    #pragma omp simd reduction(+ : dp)
                    for (int64_t d = 0; d < D; d++) { dv[j * D + d] += pj * gi[d]; dp += gi[d] * vj[d]; }
                    float ds = pj * (dp - Di) * scale;
                    #pragma omp simd
                    for (int64_t d = 0; d < D; d++) { dq[i * D + d] += ds * kj[d]; dk[j * D + d] += ds * qi[d]; }
                }
            }
            for (int64_t t = 0; t < T; t++) memcpy(gq + b * gqs[0] + h * gqs[1] + t * gqs[2], dq + t * D, sizeof(float) * (size_t)D);
        }
        for (int64_t t = 0; t < T; t++) {
            memcpy(gk + b * gks[0] + hk * gks[1] + t * gks[2], dk + t * D, sizeof(float) * (size_t)D);
            memcpy(gv + b * gvs[0] + hk * gvs[1] + t * gvs[2], dv + t * D, sizeof(float) * (size_t)D);
        }
        free(dq);
    }
}
/* its backward: gq, gk, gv (views, written) from g = d loss / d o; colsum (GPU, may be NULL): the
   column sums of gq, gk, gv as [3, H, D], when the kernel gives them (returns 1) */
static int bt__attention_grads(bt_tensor *q, bt_tensor *k, bt_tensor *v, bt_tensor *o, bt_tensor *lse, bt_tensor *gc,
                               bt_tensor *gq, bt_tensor *gk, bt_tensor *gv, float *colsum) {
    int64_t B = q->shape[0], H = q->shape[1], Hkv = k->shape[1], G = H / Hkv, T = q->shape[2], D = q->shape[3];
    bt_dtype dt = q->dtype;
    double scale = 1.0 / sqrt((double)(D ? D : 1));
    if (bt__is_gpu(q)) {
        int given = 0;
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(q), stream) given = bt_k_attention_backward_colsum(dt, bt_data_ptr(gq), gq->stride, bt_data_ptr(gk), gk->stride, bt_data_ptr(gv), gv->stride,
                                        bt_data_ptr(gc), gc->stride, bt_data_ptr(q), q->stride, bt_data_ptr(k), k->stride,
                                        bt_data_ptr(v), v->stride, bt_data_ptr(o), o->stride, (const float *)bt_data_ptr(lse),
                                        B, H, Hkv, T, D, (float)scale, 1, bt__g.precision, colsum, stream);
#else
        (void)colsum;
#endif
        return given;
    }
    if (dt == BT_F32) {
#define BT__F(t) (float *)(t)->storage->data + (t)->offset, (t)->stride
        bt__attention_grads_f32(BT__F(q), BT__F(k), BT__F(v), BT__F(o), (const float *)bt_data_ptr(lse), BT__F(gc), BT__F(gq),
                                BT__F(gk), BT__F(gv), B, H, G, T, D, (float)scale);
#undef BT__F
        return 0;
    }
    const void *qp = q->storage->data, *kp = k->storage->data, *vp = v->storage->data, *op_ = o->storage->data, *gp = gc->storage->data;
    const void *lp = bt_data_ptr(lse); bt_dtype ldt = lse->dtype;
    #pragma omp parallel for if (B * H * T * T * D > BT__PAR_MIN)
    for (int64_t bk = 0; bk < B * Hkv; bk++) {   /* a key/value head, its G query heads in turn */
        int64_t b = bk / Hkv, hk = bk % Hkv;
        double *dq = (double *)calloc((size_t)(3 * T * D + T), sizeof(double));
        double *dk = dq + T * D, *dv = dk + T * D, *p = dv + T * D;
        for (int64_t h = hk * G; h < hk * G + G; h++) {
            int64_t bh = b * H + h;
            memset(dq, 0, sizeof(double) * (size_t)(T * D));
            for (int64_t i = 0; i < T; i++) {
                int64_t qi = bt__bht(q, b, h, i), gi = bt__bht(gc, b, h, i), oi = bt__bht(o, b, h, i);
                double l = bt__ld(lp, ldt, bh * T + i), Di = 0;
                for (int64_t d = 0; d < D; d++) Di += bt__ld(gp, dt, gi + d) * bt__ld(op_, dt, oi + d);
                for (int64_t j = 0; j <= i; j++) {
                    double s = 0; int64_t kj = bt__bht(k, b, hk, j);
                    for (int64_t d = 0; d < D; d++) s += bt__ld(qp, dt, qi + d) * bt__ld(kp, dt, kj + d);
                    p[j] = exp(s * scale - l);
                }
                for (int64_t j = 0; j <= i; j++) {
                    double dp = 0; int64_t kj = bt__bht(k, b, hk, j), vj = bt__bht(v, b, hk, j);
                    for (int64_t d = 0; d < D; d++) {
                        double go = bt__ld(gp, dt, gi + d);
                        dv[j * D + d] += p[j] * go;
                        dp += go * bt__ld(vp, dt, vj + d);
                    }
                    double ds = p[j] * (dp - Di) * scale;
                    for (int64_t d = 0; d < D; d++) {
                        dq[i * D + d] += ds * bt__ld(kp, dt, kj + d);
                        dk[j * D + d] += ds * bt__ld(qp, dt, qi + d);
                    }
                }
            }
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) bt__st(gq->storage->data, dt, bt__bht(gq, b, h, t) + d, dq[t * D + d]);
        }
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < D; d++) {
                bt__st(gk->storage->data, dt, bt__bht(gk, b, hk, t) + d, dk[t * D + d]);
                bt__st(gv->storage->data, dt, bt__bht(gv, b, hk, t) + d, dv[t * D + d]);
            }
        free(dq);
    }
    return 0;
}

static void bt__attention_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *q = n->saved[0], *k = n->saved[1], *v = n->saved[2], *o = n->saved[3], *lse = n->saved[4];
    bt_tensor *gc = bt__rows_dense(g);
    bt_tensor *gq = bt__new_like_layout(q, q->dtype), *gk = bt__new_like_layout(k, k->dtype), *gv = bt__new_like_layout(v, v->dtype);
    bt__attention_grads(q, k, v, o, lse, gc, gq, gk, gv, NULL);
    bt_release(gc);
    gin[0] = bt__register(gq); gin[1] = bt__register(gk); gin[2] = bt__register(gv);
}
static void bt__attention_check(bt_tensor *q, const char *op) {
    if (bt__is_gpu(q) && q->dtype == BT_F64) bt_error("%s: f64 is CPU-only (gradient checks), got %s", op, bt__s(q));
}
BTDEF bt_tensor *bt_attention(bt_tensor *q, bt_tensor *k, bt_tensor *v) {
    bt__need_float(q, "attention", "q"); bt__need_float(k, "attention", "k"); bt__need_float(v, "attention", "v");
    bt__same_device(q, k, "attention"); bt__same_device(q, v, "attention");
    bt__same_dtype(q, k, "attention"); bt__same_dtype(q, v, "attention");
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || memcmp(k->shape, v->shape, 4 * sizeof(int64_t)) || k->shape[0] != q->shape[0] ||
        k->shape[2] != q->shape[2] || k->shape[3] != q->shape[3] || k->shape[1] <= 0 || q->shape[1] % k->shape[1])
        bt_error("attention: q %s, k %s, v %s must be [B, H, T, D], [B, Hkv, T, D] twice, with Hkv dividing H", bt__s(q), bt__s(k),
                 bt__s(v));
    bt__attention_check(q, "attention");
    bt_tensor *qc = bt__rows_dense(q), *kc = bt__rows_dense(k), *vc = bt__rows_dense(v);
    bt_tensor *o = bt__new_like_layout(qc, q->dtype);
    bt_tensor *lse = bt__new(bt_shape3(q->shape[0], q->shape[1], q->shape[2]), bt__stat_dtype(q), bt_device_of(q));
    bt__attention_compute(qc, kc, vc, o, lse);
    bt_tensor *in[3] = {q, k, v};
    bt_node *n = bt__record("attention", bt__attention_back, o, in, 3);
    if (n) { bt__save(n, qc); bt__save(n, kc); bt__save(n, vc); bt__save(n, o); bt__save(n, lse); }
    bt_release(qc); bt_release(kc); bt_release(vc); bt_release(lse);
    return bt__register(o);
}

/* heads h0 .. h0 + n - 1 of a contiguous [B, T, W] buffer holding heads of D columns side by side, as
   [B, n, T, D], no copy: the q, k or v of a packed projection, or a [B, T, C] activation split into heads */
static bt_tensor *bt__heads(bt_tensor *t, int64_t n, int64_t h0, int64_t D) {
    int64_t B = t->shape[0], T = t->shape[1], W = t->shape[2];
    int64_t shape[4] = {B, n, T, D}, stride[4] = {T * W, D, W, 1};
    return bt__view_raw(t, 4, shape, stride, t->offset + h0 * D);
}
/* heads [0, n) of a contiguous [B, T, W] buffer as [B, T, n, D] (RoPE's layout) */
static bt_tensor *bt__heads_bt(bt_tensor *t, int64_t n, int64_t D) {
    int64_t B = t->shape[0], T = t->shape[1], W = t->shape[2];
    int64_t shape[4] = {B, T, n, D}, stride[4] = {T * W, W, D, 1};
    return bt__view_raw(t, 4, shape, stride, t->offset);
}
static void bt__linear_fp8_back(bt_node *n, bt_tensor *g, bt_tensor **gin);
static void bt__attention_qkv_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_tensor *qkv = n->saved[0], *o = n->saved[1], *lse = n->saved[2];
    int64_t H = n->i[0], Hkv = n->i[1], D = qkv->shape[2] / (H + 2 * Hkv);
    int rope = n->i[2] != 0;
    bt_tensor *gc = bt__contig(g), *g4 = bt__heads(gc, H, 0, D);
    bt_tensor *gqkv = bt__new(bt_shape_of(qkv), qkv->dtype, bt_device_of(qkv));
    const int64_t nh[3] = {H, Hkv, Hkv}, h0[3] = {0, H, H + Hkv};
    bt_tensor *p[6];
    for (int i = 0; i < 3; i++) { p[i] = bt__heads(qkv, nh[i], h0[i], D); p[3 + i] = bt__heads(gqkv, nh[i], h0[i], D); }
#ifdef BT_CUDA
    /* the qkv projection's bias gradient, from the kernel's own pass (multi-head, no RoPE: the kernel's
       gradients are gqkv's); not for an FP8 projection, whose gradient's cast sums the columns in the
       pass it makes anyway (bt__fp8_grad_cast: the kernel's epilogue sums cost more, bench/RESULTS.md#fp8) */
    int64_t W = qkv->shape[2];
    bt_node *prod = n->next[0].node;
    float *cs = rope || Hkv != H || (prod && prod->backward == bt__linear_fp8_back) ? NULL : bt__colsum_for(gqkv, W);
    if (bt__attention_grads(p[0], p[1], p[2], o, lse, g4, p[3], p[4], p[5], cs)) bt__colsum_leave(gqkv, cs, W);
    else if (cs) bt_free(cs);
#else
    bt__attention_grads(p[0], p[1], p[2], o, lse, g4, p[3], p[4], p[5], NULL);
#endif
    if (rope) {   /* back through the rotation of q and k: rotate their gradients by -angle, in place */
        bt_rope_opts ro = {n->f[0], n->f[1], n->f[2], n->f[3], n->i[3]};
        float inv[BT__ROPE_MAXD / 2];
        bt_rope_inv_freq(&ro, D, inv);
        bt_tensor *r = bt__heads_bt(gqkv, H + Hkv, D);
        bt__rope_into(r, r, H + Hkv, inv, 0, -1);
        bt_release(r);
    }
    for (int i = 0; i < 6; i++) bt_release(p[i]);
    bt_release(g4); bt_release(gc);
    gin[0] = bt__register(gqkv);
}
BTDEF bt_tensor *bt_attention_qkv_ex(bt_tensor *qkv, int64_t H, int64_t Hkv, const bt_rope_opts *rope) {
    bt__need_float(qkv, "attention_qkv", "qkv");
    if (qkv->ndim != 3 || H <= 0 || Hkv <= 0 || H % Hkv || qkv->shape[2] % (H + 2 * Hkv))
        bt_error("attention_qkv: qkv %s must be [B, T, (H + 2 Hkv) D] with Hkv = %lld dividing H = %lld", bt__s(qkv),
                 (long long)Hkv, (long long)H);
    bt__attention_check(qkv, "attention_qkv");
    int64_t B = qkv->shape[0], T = qkv->shape[1], D = qkv->shape[2] / (H + 2 * Hkv);
    float inv[BT__ROPE_MAXD / 2];
    if (rope) {
        if (D % 2) bt_error("attention_qkv: RoPE needs an even head dim, qkv %s has D = %lld", bt__s(qkv), (long long)D);
        if (T > (1 << 24)) bt_error("attention_qkv: RoPE positions up to %lld exceed 2^24, qkv %s", (long long)T, bt__s(qkv));
        bt_rope_inv_freq(rope, D, inv);
    }
    bt_tensor *qc = bt__contig(qkv);
    if (rope) {   /* q and k rotated, v copied: the packed buffer the kernels read and the backward keeps */
        bt_tensor *r = bt__new(bt_shape_of(qc), qc->dtype, bt_device_of(qc));
        bt_tensor *rv = bt__heads_bt(r, H + 2 * Hkv, D), *xv = bt__heads_bt(qc, H + 2 * Hkv, D);
        bt__rope_into(rv, xv, H + Hkv, inv, 0, 1);
        bt_release(rv); bt_release(xv); bt_release(qc);
        qc = r;
    }
    bt_tensor *out = bt__new(bt_shape3(B, T, H * D), qkv->dtype, bt_device_of(qkv));
    bt_tensor *o = bt__heads(out, H, 0, D);        /* the output's [B, T, H D] buffer as [B, H, T, D] */
    bt_tensor *lse = bt__new(bt_shape3(B, H, T), bt__stat_dtype(qkv), bt_device_of(qkv));
    bt_tensor *q = bt__heads(qc, H, 0, D), *k = bt__heads(qc, Hkv, H, D), *v = bt__heads(qc, Hkv, H + Hkv, D);
    bt__attention_compute(q, k, v, o, lse);
    bt_release(q); bt_release(k); bt_release(v);
    bt_node *n = bt__record("attention_qkv", bt__attention_qkv_back, out, &qkv, 1);
    if (n) {
        n->i[0] = H; n->i[1] = Hkv; n->i[2] = rope != NULL;
        if (rope) {
            n->f[0] = rope->theta; n->f[1] = rope->factor; n->f[2] = rope->low_freq_factor; n->f[3] = rope->high_freq_factor;
            n->i[3] = rope->original_max_position_embeddings;
        }
        bt__save(n, qc); bt__save(n, o); bt__save(n, lse);
    }
    bt_release(qc); bt_release(o); bt_release(lse);
    return bt__register(out);
}
BTDEF bt_tensor *bt_attention_qkv(bt_tensor *qkv, int64_t H) { return bt_attention_qkv_ex(qkv, H, H, NULL); }

/* ---- FP8 linear layers: y = x w^T + b with the products in FP8 (bt_tensor.h states the math,
   the scales and the recipes; the kernels are bt_fp8.cuh's) ----
   Forward: x's and w's scaled casts (each also writes the transpose that a backward product needs:
   cuBLASLt's FP8 products take both operands K-contiguous, "TN", so dx = qg qw needs qw^T [K, N] and
   dw = qg^T qx needs qg^T [N, R] and qx^T [K, R]), then one product. The node keeps qx^T (when w
   wants a gradient), qw^T (when x does) and the two scales; qx and qw themselves go at once.
   Backward: gy's cast (qg and its transpose, as the gradients wanted), two products, the bias
   gradient as bt_linear's (bt__bias_grad_reduce). Memory the node keeps: R K + K N bytes, where
   bt_linear keeps its bf16 x (2 R K bytes) and a reference to w. */
BTDEF bt_fp8_opts bt_fp8_default_opts(void) { bt_fp8_opts o = {BT_FP8_CURRENT, 16, 0}; return o; }
static void bt__fp8_check_opts(const bt_fp8_opts *o, const char *op) {
    if (o->recipe != BT_FP8_CURRENT && o->recipe != BT_FP8_DELAYED)
        bt_error("%s: recipe %d is neither BT_FP8_CURRENT (0) nor BT_FP8_DELAYED (1)", op, (int)o->recipe);
    if (o->history < 1 || o->history > 1024) bt_error("%s: amax history of length %d (1 to 1024 expected)", op, o->history);
    if (o->fast_accum & ~(BT_FP8_FAST_FWD | BT_FP8_FAST_DX))
        bt_error("%s: fast_accum %d has bits other than BT_FP8_FAST_FWD (1) and BT_FP8_FAST_DX (2)", op, o->fast_accum);
}
BTDEF int64_t bt_fp8_state_floats(const bt_fp8_opts *o) {
    bt_fp8_opts d = bt_fp8_default_opts();
    if (!o) o = &d;
    bt__fp8_check_opts(o, "fp8_state_floats");
    return (int64_t)BT_FP8_ROLES * (2 + o->history);
}
BTDEF void bt_fp8_state_init(bt_fp8_state *st, const bt_fp8_opts *o, bt_device dev, bt_tensor *buf) {
    if (!st) bt_error("fp8_state_init: st is NULL");
    bt_fp8_opts d = bt_fp8_default_opts();
    if (!o) o = &d;
    bt__fp8_check_opts(o, "fp8_state_init");
    int64_t nf = bt_fp8_state_floats(o), row = 2 + o->history;
    if (buf) {
        bt__need(buf, "fp8_state_init", "buf");
        if (buf->dtype != BT_F32 || !bt_is_contiguous(buf) || bt_numel(buf) != nf || !bt_device_eq(bt_device_of(buf), dev))
            bt_error("fp8_state_init: buf %s must be a contiguous f32 tensor of %lld elements (3 x (2 + history %d)) on %s", bt__s(buf),
                     (long long)nf, o->history, bt_device_name(dev));
        bt_retain(buf);
    } else buf = bt__new(bt_shape2(BT_FP8_ROLES, row), BT_F32, dev);
    float *init = (float *)bt__xmalloc(sizeof(float) * (size_t)nf, "an FP8 state");
    for (int64_t i = 0; i < nf; i++) init[i] = i % row == 1 ? 1.f : 0.f;   /* [amax 0, scale 1, history 0...] per row */
    bt_tensor *h = bt__new(bt_shape1(nf), BT_F32, bt_cpu());
    memcpy(bt_data_ptr(h), init, sizeof(float) * (size_t)nf);
    free(init);
    bt_tensor *flat = bt__view_dense(buf, bt_shape1(nf));
    bt_copy_(flat, h);
    bt_release(flat); bt_release(h);
    st->opts = *o; st->buf = buf; st->primed = 0; st->seen = 0;
}
BTDEF void bt_fp8_state_free(bt_fp8_state *st) {
    if (!st) return;
    bt_release(st->buf);
    st->buf = NULL; st->primed = 0; st->seen = 0;
}
BTDEF void bt_fp8_bank_reset(bt_fp8_state **states, bt_tensor **buf, int64_t n, const bt_fp8_opts *o, bt_device dev, const char *who) {
    int64_t per = bt_fp8_state_floats(o);
    if (*states && bt_numel(*buf) != n * per)
        bt_error("%s: the model's FP8 states hold %lld floats, these options %lld (another history length)", who,
                 (long long)bt_numel(*buf), (long long)(n * per));
    bt_scope_begin();
    if (!*states) {
        *states = (bt_fp8_state *)calloc((size_t)n, sizeof **states);
        if (!*states) bt_error("%s: out of host memory", who);
        *buf = bt_keep(bt_zeros(bt_shape1(n * per), BT_F32, dev));
    }
    for (int64_t i = 0; i < n; i++) {
        bt_fp8_state_free(&(*states)[i]);
        bt_fp8_state_init(&(*states)[i], o, dev, bt_narrow(*buf, 0, i * per, per));
    }
    bt_scope_end();
}
BTDEF void bt_fp8_bank_free(bt_fp8_state **states, bt_tensor **buf, int64_t n) {
    for (int64_t i = 0; *states && i < n; i++) bt_fp8_state_free(&(*states)[i]);
    free(*states);
    bt_release(*buf);
    *states = NULL; *buf = NULL;
}
/* the rows of ns consecutive states from p (on buf's device): one kernel on a GPU */
static void bt__fp8_roll_states(bt_tensor *buf, float *p, int hist, int64_t ns) {
    buf->storage->version++;
    if (bt__is_gpu(buf)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(buf), stream) bt_k_fp8_update(p, hist, ns, stream);
#endif
        return;
    }
    for (int64_t r = 0; r < ns * BT_FP8_ROLES; r++) bt__fp8_roll(p + r * (2 + hist), hist, bt_fp8_max(bt_fp8_format((int)(r % BT_FP8_ROLES))));
}
BTDEF void bt_fp8_update(bt_fp8_state *st) {
    if (!st || !st->buf) bt_error("fp8_update: no FP8 state (bt_fp8_state_init first)");
    bt__fp8_roll_states(st->buf, (float *)bt_data_ptr(st->buf), st->opts.history, 1);
    st->primed |= st->seen; st->seen = 0;
}
BTDEF void bt_fp8_bank_update(bt_fp8_state *states, bt_tensor *buf, int64_t n) {
    if (!states || !buf || n < 1) bt_error("fp8_bank_update: no bank (bt_fp8_bank_reset first)");
    int64_t per = bt_fp8_state_floats(&states[0].opts);
    if (bt_numel(buf) != n * per) bt_error("fp8_bank_update: the buffer holds %lld floats, %lld states %lld", (long long)bt_numel(buf), (long long)n, (long long)(n * per));
    for (int64_t i = 0; i < n; i++)     /* the states are buf's slices, in order (bt_fp8_bank_reset made them so) */
        if (!states[i].buf || bt_data_ptr(states[i].buf) != (float *)bt_data_ptr(buf) + i * per || states[i].opts.history != states[0].opts.history)
            bt_error("fp8_bank_update: state %lld is not slice %lld of the bank's buffer", (long long)i, (long long)i);
    bt__fp8_roll_states(buf, (float *)bt_data_ptr(buf), states[0].opts.history, n);
    for (int64_t i = 0; i < n; i++) { states[i].primed |= states[i].seen; states[i].seen = 0; }
}

/* *acc <- the larger of *acc and the value whose |.| bits are `bits` (NaN wins, as on the GPU) */
static void bt__fp8_amax_into(float *acc, uint32_t bits) {
    if (bits > bt__abs_bits(*acc)) memcpy(acc, &bits, 4);
}
static uint32_t bt__fp8_amax_cpu(bt_dtype dt, const void *x, int64_t n) {
    uint32_t m = 0;
    #pragma omp parallel for reduction(max : m) if (n > BT__PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = bt__abs_bits((float)bt__ld(x, dt, i));
        if (b > m) m = b;
    }
    return m;
}
/* The CPU's scaled cast, the twin of the kernel bt_k_fp8_cast (the same arguments, host pointers):
   x [rows, cols] of dtype dt -> q [rows, cols] and/or qt [cols, rows] (either may be NULL) in fmt,
   with s = bt_fp8_scale_of(*amax_in) (current scaling) or *scale_in (delayed): one of the two is
   given. *scale_used <- s; *amax_acc (may be NULL) <- the larger of it and x's amax (*amax_in when
   given, else measured here). Each element: bt_fp8_quantize(x, 1 / s), the kernel's operations. */
static void bt__fp8_cast_cpu(bt_dtype dt, bt_dtype fmt, uint8_t *q, uint8_t *qt, const void *x, int64_t rows, int64_t cols,
                             const float *amax_in, const float *scale_in, float *scale_used, float *amax_acc) {
    float s = amax_in ? bt_fp8_scale_of(*amax_in, bt_fp8_max(fmt)) : *scale_in, r = 1.f / s;
    #pragma omp parallel for if (rows * cols > BT__PAR_MIN)
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            uint8_t b = bt_fp8_quantize((float)bt__ld(x, dt, i * cols + j), r, fmt);
            if (q) q[i * cols + j] = b;
            if (qt) qt[j * rows + i] = b;
        }
    *scale_used = s;
    if (amax_acc) bt__fp8_amax_into(amax_acc, amax_in ? bt__abs_bits(*amax_in) : bt__fp8_amax_cpu(dt, x, rows * cols));
}
/* The CPU's FP8 product, the twin of bt_k_matmul_fp8: C [M, N] (dtype dt) = (sa sb) A [M, K] B [N, K]^T
   (+ R [M, N], dtype dt, may be C) (+ bias [N], dtype dt), A and B fp8 bytes of formats fa, fb, both
   K-contiguous. Each product of two decoded values is exact in f32 (at most 4 + 4 significant bits,
   exponents within f32's); the sum of K of them is f32 (bt__sgemm); then (sa sb), R and the bias in
   f32 and one rounding to dt. Decoding: a 256-entry table per format. */
static void bt__fp8_gemm_cpu(bt_dtype dt, void *C, const uint8_t *A, bt_dtype fa, float sa, const uint8_t *B, bt_dtype fb, float sb,
                             const void *bias, const void *R, int64_t M, int64_t N, int64_t K) {
    float ta[256], tb[256];
    for (int c = 0; c < 256; c++) { ta[c] = bt_fp8_decode((uint8_t)c, fa); tb[c] = bt_fp8_decode((uint8_t)c, fb); }
    float *a = (float *)bt__xmalloc(sizeof(float) * (size_t)(M * K), "linear_fp8's decoded A");
    float *b = (float *)bt__xmalloc(sizeof(float) * (size_t)(N * K), "linear_fp8's decoded B");
    float *acc = (float *)bt__xmalloc(sizeof(float) * (size_t)(M * N), "linear_fp8's f32 product");
    for (int64_t i = 0; i < M * K; i++) a[i] = ta[A[i]];
    for (int64_t i = 0; i < N * K; i++) b[i] = tb[B[i]];
    bt__cpu_gemm(BT_F32, acc, a, b, NULL, M, N, K, 0, 1, 1.0, 0.0);
    float s = sa * sb;
    #pragma omp parallel for if (M * N > BT__PAR_MIN)
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float v = acc[i * N + j] * s;
            if (R) v += (float)bt__ld(R, dt, i * N + j);
            if (bias) v += (float)bt__ld(bias, dt, j);
            bt__st(C, dt, i * N + j, v);
        }
    free(a); free(b); free(acc);
}

/* one tensor's scaled cast per st's recipe, on x2's device: x2 [rows, cols] (contiguous) -> q and/or
   qt (fp8 tensors [rows, cols] and [cols, rows], or NULL), the state's row `role` accumulating the
   amax. slot: two f32 of a zeroed scratch on x2's device: [0] <- the scale used, [1] <- the amax it
   came from (current scaling). act (a GPU only): what is cast is gelu(x2), or x2 gelu'(h2) with
   colsum (may be NULL) <- its column sums per 64 rows, or swiglu(x2) ([rows, cols / 2]), or
   SwiGLU's gradient of its input h2 from x2 ([rows, 2 cols]) (bt_k_fp8_cast_act). */
static void bt__fp8_cast_act(bt_fp8_state *st, int role, bt_fp8_act act, bt_tensor *x2, bt_tensor *h2, bt_tensor *q, bt_tensor *qt,
                             bt_tensor *colsum, float *slot) {
    int current = !bt__fp8_delayed(st, role);
    float *row = bt__fp8_role_row(st, role);
    bt_dtype fmt = bt_fp8_format(role);
    int64_t rows = x2->shape[0], cols = act == BT_FP8_ACT_SWIGLU ? x2->shape[1] / 2 : act == BT_FP8_ACT_DSWIGLU ? 2 * x2->shape[1] : x2->shape[1];
    uint8_t *qp = q ? (uint8_t *)bt_data_ptr(q) : NULL, *qtp = qt ? (uint8_t *)bt_data_ptr(qt) : NULL;
    if (bt__is_gpu(x2)) {
#ifdef BT_CUDA
        const void *hp = h2 ? bt_data_ptr(h2) : NULL;
        BT__ON_GPU(bt_device_of(x2), stream) {
            if (current) bt_k_fp8_amax_act(x2->dtype, act, slot + 1, bt_data_ptr(x2), hp, rows, cols, stream);
            const float *ain = current ? slot + 1 : NULL, *sin = current ? NULL : row + 1;
            if (act == BT_FP8_ACT_X && !colsum) bt_k_fp8_cast(x2->dtype, fmt, qp, qtp, bt_data_ptr(x2), rows, cols, ain, sin, slot, row, stream);
            else bt_k_fp8_cast_act(x2->dtype, fmt, act, qp, qtp, colsum ? (float *)bt_data_ptr(colsum) : NULL, bt_data_ptr(x2), hp, rows,
                                   cols, ain, sin, slot, row, stream);
        }
#endif
        return;
    }
    if (act != BT_FP8_ACT_X) bt_error("fp8 cast: an activation folded into a cast on the CPU (the op makes the activation's tensor there)");
    (void)h2; (void)colsum;
    if (current) { uint32_t m = bt__fp8_amax_cpu(x2->dtype, bt_data_ptr(x2), rows * cols); memcpy(slot + 1, &m, 4); }
    bt__fp8_cast_cpu(x2->dtype, fmt, qp, qtp, bt_data_ptr(x2), rows, cols, current ? slot + 1 : NULL, current ? NULL : row + 1, slot, row);
}
static void bt__fp8_cast(bt_fp8_state *st, int role, bt_tensor *x2, bt_tensor *q, bt_tensor *qt, float *slot) {
    bt__fp8_cast_act(st, role, BT_FP8_ACT_X, x2, NULL, q, qt, NULL, slot);
}
/* A linear's output gradient g2 [R, N] cast by st's gradient role into qg and/or gt (slot: as
   bt__fp8_cast's), and input ib's bias gradient (ib < 0: none) as the column sums of g2: on a GPU
   from the sums a layernorm or attention backward left on g2's storage, else from the cast itself
   (its per-64-row sums, one read of g2 for both: bt_k_fp8_cast_act with BT_FP8_ACT_X), else (CPU,
   rows off 16 bytes) bt__bias_grad_reduce's pass. */
static void bt__fp8_grad_cast(bt_node *n, int ib, bt_fp8_state *st, bt_tensor *g2, bt_tensor *qg, bt_tensor *gt, float *slot, bt_tensor **gin) {
    int want_b = ib >= 0 && bt__wants(n, ib);
    bt_tensor *part = NULL;
#ifdef BT_CUDA
    int64_t R = g2->shape[0], N = g2->shape[1];
    if (want_b && bt__is_gpu(g2) && !bt__cached_colsum(g2) && N % 8 == 0 && R % 16 == 0 && ((uintptr_t)bt_data_ptr(g2) & 15) == 0)
        part = bt__new(bt_shape2((R + 63) / 64, N), BT_F32, bt_device_of(g2));
#endif
    bt__fp8_cast_act(st, BT_FP8_G, BT_FP8_ACT_X, g2, NULL, qg, gt, part, slot);
    if (!want_b) return;
    if (part) {
        bt__bias_grad_sums(ib, bt__grad_sink(n, ib, g2->dtype), g2->dtype, bt_device_of(g2), BT_F32, bt_data_ptr(part), part->shape[0],
                           part->shape[1], gin);
        bt_release(part);
    } else bt__bias_grad_reduce(n, ib, g2, gin);
}
/* C (dtype dt) = (sa sb) A B^T (+ R) (+ bias) on dev: A [M, K] and B [N, K] fp8 tensors, sa and sb f32 on
   dev, R (dtype dt, or NULL) C itself to accumulate */
static void bt__fp8_gemm(bt_device dev, bt_dtype dt, bt_tensor *C, bt_tensor *A, const float *sa, bt_tensor *B, const float *sb,
                         bt_tensor *bias, bt_tensor *R, int64_t M, int64_t N, int64_t K, int fast_accum) {
    const void *bp = bias ? bt_data_ptr(bias) : NULL, *rp = R ? bt_data_ptr(R) : NULL;
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        BT__ON_GPU(dev, stream)
            bt_k_matmul_fp8(dt, bt_data_ptr(C), bt_data_ptr(A), A->dtype, sa, bt_data_ptr(B), B->dtype, sb, bp, rp, M, N, K, fast_accum,
                            stream);
#else
        (void)fast_accum;
#endif
        return;
    }
    bt__fp8_gemm_cpu(dt, bt_data_ptr(C), (const uint8_t *)bt_data_ptr(A), A->dtype, *sa, (const uint8_t *)bt_data_ptr(B), B->dtype, *sb,
                     bp, rp, M, N, K);
}

/* a weight's gradient dw [N, K] = (sa sb) A B^T, A [N, R] and B [K, R] fp8 (the K-contiguous transposes):
   on a GPU the product adds it into input i's .grad (bt__grad_sink: no dw tensor, no add), else a new
   tensor of dtype dt into gin[i] */
static void bt__fp8_weight_grad(bt_node *n, int i, bt_tensor *g, bt_tensor **gin, bt_tensor *A, const float *sa, bt_tensor *B,
                                const float *sb, int64_t N, int64_t K, int64_t R) {
    bt_device dev = bt_device_of(g);
    bt_tensor *sink = bt__is_gpu(g) ? bt__grad_sink(n, i, g->dtype) : NULL;
    if (sink) {
        sink->storage->version++;
        bt__fp8_gemm(dev, sink->dtype, sink, A, sa, B, sb, NULL, sink, N, K, R, 0);
        return;
    }
    bt_tensor *gw = bt__new(bt_shape2(N, K), g->dtype, dev);
    bt__fp8_gemm(dev, g->dtype, gw, A, sa, B, sb, NULL, NULL, N, K, R, 0);
    gin[i] = bt__register(gw);
}
/* ---- a layernorm or RMSNorm fused into the cast of an FP8 op's input (bt_layernorm_linear_fp8,
   bt_layernorm_mlp_gelu_fp8, bt_rmsnorm_linear_fp8, bt_rmsnorm_mlp_swiglu_fp8): the op's input is
   the norm's x, and the e4m3 x and x^T of norm(x) come from bt_k_layernorm_fp8 (bt_k_rmsnorm_fp8)
   with the state's delayed scale, the norm's output never stored. The op's node takes the norm's
   w (and b) as inputs iw (and iw + 1) and keeps x, mean (not RMSNorm's), rstd and w after its own
   saved tensors (from n->i[3] on; n->i[4], n->i[5]: w, b given; n->i[6]: RMSNorm); its backward
   gives the gradient of the norm's output as x's, which bt__fp8_ln_back turns into the norm's
   gradients (bt__layernorm_grads, bt__rmsnorm_grads). */
typedef struct { bt_tensor *w, *b; double eps; int rms; bt_tensor *mean, *rstd; } bt__fp8_ln;   /* rms: RMSNorm, no b, no mean */
/* 1 when layernorm(x, w, b, eps) feeding st's linear fuses here: a GPU, the delayed recipe with x's
   history primed, a layout bt_k_layernorm_fp8 takes, parameters as bt_layernorm wants them (else the
   composition, whose layernorm names what is wrong), and x needing a gradient wherever w or b do
   (the layernorm's gradients start from x's slot) */
static int bt__fp8_ln_fuses(bt_fp8_state *st, bt_tensor *x, bt_tensor *w, bt_tensor *b, double eps, int rms) {
    if (!bt__fused(BT_FUSE_NORM_FP8) || !st || !st->buf || !bt__is_gpu(x) || !bt__fp8_delayed(st, BT_FP8_X) ||
        !bt_device_eq(bt_device_of(st->buf), bt_device_of(x)) || !(eps > 0) || x->ndim < 1)
        return 0;
    int64_t C = x->shape[x->ndim - 1], R = C ? bt_numel(x) / C : 0;
    if (rms && b) return 0;
    bt_tensor *p[2] = {w, b};
    for (int k = 0; k < 2; k++)
        if (p[k] && (p[k]->dtype != x->dtype || !bt_device_eq(bt_device_of(p[k]), bt_device_of(x)) || p[k]->ndim != 1 ||
                     p[k]->shape[0] != C || !bt_is_contiguous(p[k])))
            return 0;
    if (bt__g.grad_enabled && !bt__needs_grad(x) && ((w && bt__needs_grad(w)) || (b && bt__needs_grad(b)))) return 0;
    int ok = 0;
#ifdef BT_CUDA
    BT__ON_DEVICE(bt_device_of(x))
        ok = bt_k_norm_fp8_fits(x->dtype, R, C, bt_is_contiguous(x) ? bt_data_ptr(x) : NULL, w ? bt_data_ptr(w) : NULL,
                                b ? bt_data_ptr(b) : NULL, NULL, NULL);
#else
    (void)R;
#endif
    return ok;
}
/* the fused input cast: x2 [rows, C] (the layernorm's input, contiguous) -> q, qt of its output with
   st's delayed scale, the amax into st's x row (what bt__fp8_cast does to the output), ln->mean and
   ln->rstd made; slot[0] <- the scale */
static void bt__fp8_ln_cast(bt_fp8_state *st, bt__fp8_ln *ln, bt_tensor *x2, bt_tensor *q, bt_tensor *qt, float *slot) {
    int64_t rows = x2->shape[0], C = x2->shape[1];
    bt_device dev = bt_device_of(x2);
    float *row = bt__fp8_role_row(st, BT_FP8_X);
    ln->mean = ln->rms ? NULL : bt__new(bt_shape1(rows), BT_F32, dev);
    ln->rstd = bt__new(bt_shape1(rows), BT_F32, dev);
#ifdef BT_CUDA
    uint8_t *qp = (uint8_t *)bt_data_ptr(q), *qtp = qt ? (uint8_t *)bt_data_ptr(qt) : NULL;
    const void *wp = ln->w ? bt_data_ptr(ln->w) : NULL;
    BT__ON_GPU(dev, stream) {
        if (ln->rms)
            bt_k_rmsnorm_fp8(x2->dtype, qp, qtp, (float *)bt_data_ptr(ln->rstd), bt_data_ptr(x2), wp, rows, C, (float)ln->eps, row + 1, slot,
                             row, stream);
        else
            bt_k_layernorm_fp8(x2->dtype, qp, qtp, (float *)bt_data_ptr(ln->mean), (float *)bt_data_ptr(ln->rstd), bt_data_ptr(x2), wp,
                               ln->b ? bt_data_ptr(ln->b) : NULL, rows, C, (float)ln->eps, row + 1, slot, row, stream);
    }
#else
    (void)q; (void)qt; (void)slot; (void)row; (void)C;
#endif
}
/* the op's node n (may be NULL: no graph) keeps x (xc), mean, rstd and w after its own saved
   tensors; the op's references to mean and rstd end here */
static void bt__fp8_ln_keep(bt_node *n, bt__fp8_ln *ln, bt_tensor *xc) {
    if (n) {
        n->i[3] = n->n_saved; n->i[4] = ln->w != NULL; n->i[5] = ln->b != NULL; n->i[6] = ln->rms;
        bt__save(n, xc);
        if (!ln->rms) bt__save(n, ln->mean);
        bt__save(n, ln->rstd);
        if (ln->w) bt__save(n, ln->w);
    }
    bt_release(ln->mean); bt_release(ln->rstd);
}
/* after the op's backward: gin[0], the gradient of the layernorm's output, into the layernorm's
   gradients (x's in gin[0], w's and b's in gin[iw], gin[iw + 1]). When x is also the op's residual
   (input ir; GPT-2's MLP), its two gradients meet as the composition's two nodes add them: the
   residual's g into x's pending gradient first, then the layernorm's kernel adding into that (one
   rounding of dx + g): g itself when x has none yet (g is this node's alone: n->grad and gin[ir]). */
static void bt__fp8_ln_back(bt_node *n, int iw, int ir, bt_tensor **gin) {
    if (!n->i[3] || !gin[0]) return;
    bt_tensor *gh = gin[0], *into = NULL;             /* gh: the scope's, freed when this backward ends */
    gin[0] = NULL;
    bt_node *m = n->next[0].node;
    bt_tensor *g = gin[ir];
    if (g && m && n->next[ir].node == m) {
        if (m->grad && bt__exclusive(m->grad) && m->grad->dtype == g->dtype) { bt_add_(m->grad, g, 1.0); gin[ir] = NULL; }
        else if (!m->grad && g == n->grad && g->refcount == 2 && g->storage->refcount == 1 && bt_is_contiguous(g)) { into = g; gin[ir] = NULL; }
    }
    int k = (int)n->i[3];
    if (n->i[6]) bt__rmsnorm_grads(n, gh, n->saved[k], n->saved[k + 1], n->i[4] ? n->saved[k + 2] : NULL, iw, into, gin);
    else bt__layernorm_grads(n, gh, n->saved[k], n->saved[k + 1], n->saved[k + 2], n->i[4] ? n->saved[k + 3] : NULL, (int)n->i[4],
                             (int)n->i[5], iw, into, gin);
}
/* saved: [0] the scales [2, 4] (x's row, w's: [scale, amax, -, -]), then qx^T [K, R] when i[0],
   qw^T [K, N] when i[1]; aux: the state. Inputs x, w, b (may be NULL), r (bt_linear_add_fp8; its
   gradient is g itself). On a GPU dw goes straight into w's fp32 .grad (the product accumulates:
   bt__grad_sink), no bf16 dw and add. */
static void bt__linear_fp8_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt_fp8_state *st = (bt_fp8_state *)n->aux;
    bt_tensor *sc = n->saved[0];
    int k = 1;
    bt_tensor *xt = n->i[0] ? n->saved[k++] : NULL, *wt = n->i[1] ? n->saved[k++] : NULL;
    int64_t N = n->in_shape[1].d[0], K = n->in_shape[1].d[1], R = bt_numel(g) / N;
    bt_device dev = bt_device_of(g);
    bt_dtype dt = g->dtype;
    bt_tensor *gc = bt__contig(g), *g2 = bt__view_dense(gc, bt_shape2(R, N));
    int want_x = bt__wants(n, 0), want_w = bt__wants(n, 1);
    if ((want_x && !wt) || (want_w && !xt)) bt_error("linear_fp8: backward: the forward kept no quantised %s", want_x && !wt ? "w^T" : "x^T");
    if (want_x || want_w) {
        const float *sx = (const float *)bt_data_ptr(sc), *sw = sx + 4;
        bt_tensor *sg = bt__new(bt_shape1(4), BT_F32, dev);      /* [scale, amax, -, -] of gy */
        if (bt__fp8_any_current(st, 1u << BT_FP8_G)) bt_zero_(sg);
        bt_tensor *qg = want_x ? bt__new(bt_shape2(R, N), BT_F8E5M2, dev) : NULL, *gt = want_w ? bt__new(bt_shape2(N, R), BT_F8E5M2, dev) : NULL;
        bt__fp8_grad_cast(n, n->n_in > 2 ? 2 : -1, st, g2, qg, gt, (float *)bt_data_ptr(sg), gin);
        if (want_x) {                                            /* dx [R, K] = (sg sw) qg [R, N] (qw^T [K, N])^T */
            bt_tensor *gx = bt__new(n->in_shape[0], dt, dev);
            bt__fp8_gemm(dev, dt, gx, qg, (const float *)bt_data_ptr(sg), wt, sw, NULL, NULL, R, K, N, st->opts.fast_accum & BT_FP8_FAST_DX);
            gin[0] = bt__register(gx);
        }
        if (want_w) bt__fp8_weight_grad(n, 1, g, gin, gt, (const float *)bt_data_ptr(sg), xt, sx, N, K, R);   /* dw [N, K] = (sg sx) qg^T (qx^T)^T */
        bt_release(qg); bt_release(gt); bt_release(sg);
    } else if (n->n_in > 2 && bt__wants(n, 2)) bt__bias_grad_reduce(n, 2, g2, gin);
    if (n->n_in > 3 && bt__wants(n, 3)) gin[3] = bt__register(bt_retain(g));
    bt_release(g2); bt_release(gc);
    bt__fp8_ln_back(n, 4, 3, gin);
}
/* the GPU's conditions: a dtype the kernels read, dimensions cuBLASLt's FP8 layout takes, a device with FP8 tensor cores */
static void bt__linear_fp8_check_gpu(bt_tensor *x, int64_t R, int64_t N, int64_t K) {
    if (x->dtype != BT_F32 && x->dtype != BT_BF16 && x->dtype != BT_F16)
        bt_error("linear_fp8: x %s: on a GPU x, w and b must be bf16, f16 or f32", bt__s(x));
    if (K % 16 || N % 16 || R % 16)
        bt_error("linear_fp8: x %s as [%lld, %lld], w [%lld, %lld]: on a GPU the rows of x (%lld), N (%lld) and K (%lld) must be "
                 "multiples of 16 (cuBLASLt's FP8 operands need 16-byte rows): %s is not", bt__s(x), (long long)R, (long long)K,
                 (long long)N, (long long)K, (long long)R, (long long)N, (long long)K, K % 16 ? "K" : N % 16 ? "N" : "the row count");
    int ok = 1;
#ifdef BT_CUDA
    BT__ON_DEVICE(bt_device_of(x)) ok = bt_k_fp8_supported();
#endif
    if (!ok) bt_error("linear_fp8: %s is on %s: FP8 products need compute capability 8.9 or newer (Ada, Hopper)", bt__s(x),
                      bt_device_name(bt_device_of(x)));
}
/* st a state on x's device (which: "" or which linear's, for the message) */
static void bt__fp8_check_state(const char *op, const char *which, bt_fp8_state *st, bt_tensor *x) {
    if (!st || !st->buf) bt_error("%s: no FP8 state%s (bt_fp8_state_init one per layer)", op, which);
    if (!bt_device_eq(bt_device_of(st->buf), bt_device_of(x)))
        bt_error("%s: the FP8 state%s is on %s, x %s on another device", op, which, bt_device_name(bt_device_of(st->buf)), bt__s(x));
}
/* the residual r (may be NULL) of the output's shape, x's with its last dim N; rop names the add */
static void bt__fp8_check_residual(const char *op, const char *rop, bt_tensor *x, bt_tensor *r, int64_t N) {
    if (!r) return;
    bt_shape os = bt_shape_of(x); os.d[os.ndim - 1] = N;
    bt__need_float(r, op, "r"); bt__same_device(x, r, op); bt__same_dtype(x, r, op);
    if (r->ndim != os.ndim || memcmp(r->shape, os.d, sizeof(int64_t) * (size_t)os.ndim))
        bt_error("%s: the residual r %s must have the output's shape: x %s with its last dim %lld", rop, bt__s(r), bt__s(x), (long long)N);
}
/* the arguments of r + x w^T + b (r, b may be NULL), checked before anything is made */
static void bt__linear_fp8_check(bt_tensor *x, bt_tensor *w, bt_tensor *b, bt_tensor *r, bt_fp8_state *st) {
    bt__need_float(x, "linear_fp8", "x"); bt__need_float(w, "linear_fp8", "w");
    bt__same_device(x, w, "linear_fp8"); bt__same_dtype(x, w, "linear_fp8");
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        bt_error("linear_fp8: x %s needs last dim = in of w %s ([out, in])", bt__s(x), bt__s(w));
    if (b) {
        bt__need_float(b, "linear_fp8", "b"); bt__same_device(x, b, "linear_fp8"); bt__same_dtype(x, b, "linear_fp8");
        if (b->ndim != 1 || b->shape[0] != w->shape[0]) bt_error("linear_fp8: bias %s must be [%lld]", bt__s(b), (long long)w->shape[0]);
    }
    bt__fp8_check_state("linear_fp8", "", st, x);
    int64_t K = w->shape[1], N = w->shape[0], R = K ? bt_numel(x) / K : 0;
    if (R == 0 || N == 0 || K == 0) bt_error("linear_fp8: x %s, w %s: an empty product", bt__s(x), bt__s(w));
    bt__fp8_check_residual("linear_fp8", "linear_add_fp8", x, r, N);
    if (bt__is_gpu(x)) bt__linear_fp8_check_gpu(x, R, N, K);
}
/* y [R, N] = (sx sw) qx qw^T (+ bias) (+ r): qx [R, K] cast by the caller, its scale at scp[0]; w [N, K]
   cast here by st (its scale to scp[4], its transpose into wt unless NULL), the product in st's
   accumulation. The forward of every FP8 linear, after its input's cast. */
static void bt__fp8_product(bt_fp8_state *st, bt_tensor *qx, bt_tensor *wc, bt_tensor *wt, float *scp, bt_tensor *bias, bt_tensor *r,
                            bt_tensor *y, int64_t R, int64_t N, int64_t K) {
    bt_device dev = bt_device_of(wc);
    bt_tensor *qw = bt__new(bt_shape2(N, K), BT_F8E4M3, dev);
    bt__fp8_cast(st, BT_FP8_W, wc, qw, wt, scp + 4);
    bt__fp8_gemm(dev, y->dtype, y, qx, scp, qw, scp + 4, bias, r, R, N, K, st->opts.fast_accum & BT_FP8_FAST_FWD);
    bt_release(qw);
}
/* r + x w^T + b (r, b may be NULL); with ln, x is the layernorm's input (bt__fp8_ln) */
static bt_tensor *bt__linear_fp8(bt_tensor *x, bt_tensor *w, bt_tensor *b, bt_tensor *r, bt_fp8_state *st, bt__fp8_ln *ln) {
    bt__linear_fp8_check(x, w, b, r, st);
    int64_t K = w->shape[1], N = w->shape[0], R = bt_numel(x) / K;
    bt_shape os = bt_shape_of(x); os.d[os.ndim - 1] = N;
    bt_device dev = bt_device_of(x);
    int grad = bt__g.grad_enabled, want_xt = grad && bt__needs_grad(w), want_wt = grad && bt__needs_grad(x);
    bt_tensor *xc = bt__contig(x), *wc = bt__contig(w), *bc = b ? bt__contig(b) : NULL;
    bt_tensor *x2 = bt__view_dense(xc, bt_shape2(R, K));
    bt_tensor *sc = bt__new(bt_shape2(2, 4), BT_F32, dev);      /* x's row, w's: [scale, amax, -, -]: 16-byte aligned scales */
    if (bt__fp8_any_current(st, 1u << BT_FP8_X | 1u << BT_FP8_W)) bt_zero_(sc);
    float *scp = (float *)bt_data_ptr(sc);
    bt_tensor *qx = bt__new(bt_shape2(R, K), BT_F8E4M3, dev);
    bt_tensor *xt = want_xt ? bt__new(bt_shape2(K, R), BT_F8E4M3, dev) : NULL, *wt = want_wt ? bt__new(bt_shape2(K, N), BT_F8E4M3, dev) : NULL;
    if (ln) bt__fp8_ln_cast(st, ln, x2, qx, xt, scp);
    else bt__fp8_cast(st, BT_FP8_X, x2, qx, xt, scp);
    bt_tensor *rc = r ? bt__contig(r) : NULL;
    bt_tensor *y = bt__new(os, x->dtype, dev);
    bt__fp8_product(st, qx, wc, wt, scp, bc, rc, y, R, N, K);
    bt_tensor *in[6] = {x, w, b, r, ln ? ln->w : NULL, ln ? ln->b : NULL};
    bt_node *n = bt__record(ln ? "layernorm_linear_fp8" : "linear_fp8", bt__linear_fp8_back, y, in, ln ? 6 : r ? 4 : b ? 3 : 2);
    if (n) {
        n->aux = st; n->i[0] = xt != NULL; n->i[1] = wt != NULL;
        bt__save(n, sc);
        if (xt) bt__save(n, xt);
        if (wt) bt__save(n, wt);
    }
    if (ln) bt__fp8_ln_keep(n, ln, xc);
    bt_release(qx); bt_release(xt); bt_release(wt); bt_release(sc);
    bt_release(x2); bt_release(xc); bt_release(wc); bt_release(bc); bt_release(rc);
    return bt__register(y);
}
BTDEF bt_tensor *bt_linear_fp8(bt_tensor *x, bt_tensor *w, bt_tensor *b, bt_fp8_state *st) { return bt__linear_fp8(x, w, b, NULL, st, NULL); }
BTDEF bt_tensor *bt_linear_add_fp8(bt_tensor *x, bt_tensor *w, bt_tensor *b, bt_tensor *r, bt_fp8_state *st) {
    if (!r) bt_error("linear_add_fp8: no residual r (bt_linear_fp8 is the op without one)");
    return bt__linear_fp8(x, w, b, r, st, NULL);
}
BTDEF bt_tensor *bt_layernorm_linear_fp8(bt_tensor *x, bt_tensor *lnw, bt_tensor *lnb, double eps, bt_tensor *w, bt_tensor *b,
                                         bt_fp8_state *st) {
    if (!bt__fp8_ln_fuses(st, x, lnw, lnb, eps, 0)) return bt_linear_fp8(bt_layernorm(x, lnw, lnb, eps), w, b, st);
    bt__fp8_ln ln = {lnw, lnb, eps, 0, NULL, NULL};
    return bt__linear_fp8(x, w, b, NULL, st, &ln);
}
BTDEF bt_tensor *bt_rmsnorm_linear_fp8(bt_tensor *x, bt_tensor *nw, double eps, bt_tensor *w, bt_tensor *b, bt_fp8_state *st) {
    if (!bt__fp8_ln_fuses(st, x, nw, NULL, eps, 1)) return bt_linear_fp8(bt_rmsnorm(x, nw, eps), w, b, st);
    bt__fp8_ln ln = {nw, NULL, eps, 1, NULL, NULL};
    return bt__linear_fp8(x, w, b, NULL, st, &ln);
}

/* ---- GPT-2's MLP in FP8 (bt_mlp_gelu_fp8): the two linears of bt_linear_fp8 with gelu between, gelu
   and its derivative folded into the casts that read h and the hidden gradient ----
   saved: [0] the scales [4, 4] (rows x, w1, u = gelu(h), w2: [scale, amax, -, -]), then by n->i[0]'s
   bits: 1 h [R, hid], 2 qx^T [K, R], 4 qw1^T [K, hid], 8 qu^T [hid, R], 16 qw2^T [hid, N]. n->i[1]:
   qu^T is remade from h (GELU recompute). aux: the two states. */
typedef struct { bt_fp8_state *s1, *s2; } bt__fp8_pair;
/* qu^T [hid, R] again from h with the forward's scale (*scale): the same bytes, no state touched */
static bt_tensor *bt__mlp_fp8_remake_ut(bt_tensor *h, const float *scale) {
    int64_t R = h->shape[0], hid = h->shape[1];
    bt_tensor *ut = bt__new(bt_shape2(hid, R), BT_F8E4M3, bt_device_of(h));
    if (bt__is_gpu(h)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(h), stream)
            bt_k_fp8_cast_act(h->dtype, BT_F8E4M3, BT_FP8_ACT_GELU, NULL, (uint8_t *)bt_data_ptr(ut), NULL, bt_data_ptr(h), NULL, R, hid, NULL,
                              scale, NULL, NULL, stream);
#endif
        return ut;
    }
    bt_tensor *u = bt__unary_eval(BT_UOP_GELU, h, NULL);
    float used;
    bt__fp8_cast_cpu(u->dtype, BT_F8E4M3, NULL, (uint8_t *)bt_data_ptr(ut), bt_data_ptr(u), R, hid, NULL, scale, &used, NULL);
    bt_release(u);
    return ut;
}
static void bt__mlp_fp8_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt__fp8_pair *st = (bt__fp8_pair *)n->aux;
    int has = (int)n->i[0], k = 1;
    bt_tensor *sc = n->saved[0];
    bt_tensor *h = has & 1 ? n->saved[k++] : NULL, *xt = has & 2 ? n->saved[k++] : NULL, *w1t = has & 4 ? n->saved[k++] : NULL;
    bt_tensor *ut = has & 8 ? n->saved[k++] : NULL, *w2t = has & 16 ? n->saved[k++] : NULL;
    int64_t hid = n->in_shape[1].d[0], K = n->in_shape[1].d[1], N = n->in_shape[3].d[0], R = bt_numel(g) / N;
    bt_device dev = bt_device_of(g);
    bt_dtype dt = g->dtype;
    const float *scp = (const float *)bt_data_ptr(sc);           /* x, w1, u, w2: a row of 4 each */
    int want_x = bt__wants(n, 0), want_w1 = bt__wants(n, 1), want_b1 = n->n_in > 2 && bt__wants(n, 2);
    int want_w2 = bt__wants(n, 3), want_b2 = n->n_in > 4 && bt__wants(n, 4), want_dh = want_x || want_w1 || want_b1;
    if ((want_dh && (!h || !w2t)) || (want_x && !w1t) || (want_w1 && !xt) || (want_w2 && !ut && !(n->i[1] && h)))
        bt_error("mlp_gelu_fp8: backward: the forward kept no tensor for a gradient asked now");
    bt_tensor *gc = bt__contig(g), *g2 = bt__view_dense(gc, bt_shape2(R, N));
    bt_tensor *sg = bt__new(bt_shape1(8), BT_F32, dev);          /* [scale, amax, -, -] of g, then of dh */
    if (bt__fp8_any_current(st->s2, 1u << BT_FP8_G) || bt__fp8_any_current(st->s1, 1u << BT_FP8_G)) bt_zero_(sg);
    float *sgp = (float *)bt_data_ptr(sg);
    if (want_dh || want_w2) {                                    /* the second linear's backward */
        bt_tensor *qg = want_dh ? bt__new(bt_shape2(R, N), BT_F8E5M2, dev) : NULL, *gt = want_w2 ? bt__new(bt_shape2(N, R), BT_F8E5M2, dev) : NULL;
        bt__fp8_grad_cast(n, want_b2 ? 4 : -1, st->s2, g2, qg, gt, sgp, gin);
        if (want_w2) {                                           /* dw2 [N, hid] = (sg su) qg^T [N, R] (qu^T [hid, R])^T */
            bt_tensor *u_t = ut ? bt_retain(ut) : bt__mlp_fp8_remake_ut(h, scp + 8);
            bt__fp8_weight_grad(n, 3, g, gin, gt, sgp, u_t, scp + 8, N, hid, R);
            bt_release(u_t);
        }
        if (want_dh) {
            bt_tensor *du = bt__new(bt_shape2(R, hid), dt, dev);  /* du [R, hid] = (sg sw2) qg [R, N] (qw2^T [hid, N])^T */
            bt__fp8_gemm(dev, dt, du, qg, sgp, w2t, scp + 12, NULL, NULL, R, hid, N, st->s2->opts.fast_accum & BT_FP8_FAST_DX);
            bt_tensor *qd = want_x ? bt__new(bt_shape2(R, hid), BT_F8E5M2, dev) : NULL;
            bt_tensor *dt_ = want_w1 ? bt__new(bt_shape2(hid, R), BT_F8E5M2, dev) : NULL;
            if (bt__is_gpu(g)) {                                 /* dh = du gelu'(h) only inside the cast, b1's sums beside */
                bt_tensor *part = want_b1 ? bt__new(bt_shape2((R + 63) / 64, hid), BT_F32, dev) : NULL;
                bt__fp8_cast_act(st->s1, BT_FP8_G, BT_FP8_ACT_DGELU, du, h, qd, dt_, part, sgp + 4);
                if (part) {
                    bt__bias_grad_sums(2, bt__grad_sink(n, 2, dt), dt, dev, BT_F32, bt_data_ptr(part), part->shape[0], hid, gin);
                    bt_release(part);
                }
            } else {
                bt_tensor *dh = bt__unary_eval(BT_UOP_GELU, h, du);
                bt__fp8_cast(st->s1, BT_FP8_G, dh, qd, dt_, sgp + 4);
                if (want_b1) bt__bias_grad_reduce(n, 2, dh, gin);
                bt_release(dh);
            }
            bt_release(du);
            if (want_x) {                                        /* dx [R, K] = (sd sw1) qd [R, hid] (qw1^T [K, hid])^T */
                bt_tensor *gx = bt__new(n->in_shape[0], dt, dev);
                bt__fp8_gemm(dev, dt, gx, qd, sgp + 4, w1t, scp + 4, NULL, NULL, R, K, hid, st->s1->opts.fast_accum & BT_FP8_FAST_DX);
                gin[0] = bt__register(gx);
            }
            if (want_w1) bt__fp8_weight_grad(n, 1, g, gin, dt_, sgp + 4, xt, scp, hid, K, R);   /* dw1 [hid, K] = (sd sx) qd^T (qx^T)^T */
            bt_release(qd); bt_release(dt_);
        }
        bt_release(qg); bt_release(gt);
    } else if (want_b2) bt__bias_grad_reduce(n, 4, g2, gin);
    if (n->n_in > 5 && bt__wants(n, 5)) gin[5] = bt__register(bt_retain(g));
    bt_release(sg); bt_release(g2); bt_release(gc);
    bt__fp8_ln_back(n, 6, 5, gin);
}
/* with ln, x is the layernorm's input (bt__fp8_ln) */
static bt_tensor *bt__mlp_gelu_fp8(bt_tensor *x, bt_tensor *w1, bt_tensor *b1, bt_tensor *w2, bt_tensor *b2, bt_tensor *r,
                                   bt_fp8_state *s1, bt_fp8_state *s2, bt__fp8_ln *ln) {
    bt__linear_fp8_check(x, w1, b1, NULL, s1);
    int64_t K = w1->shape[1], hid = w1->shape[0];
    bt__need_float(w2, "mlp_gelu_fp8", "w2"); bt__same_device(x, w2, "mlp_gelu_fp8"); bt__same_dtype(x, w2, "mlp_gelu_fp8");
    if (w2->ndim != 2 || w2->shape[1] != hid || w2->shape[0] == 0)
        bt_error("mlp_gelu_fp8: w2 %s must be [out, %lld] (w1 %s is [%lld, in])", bt__s(w2), (long long)hid, bt__s(w1), (long long)hid);
    int64_t N = w2->shape[0], R = bt_numel(x) / K;
    if (b2) {
        bt__need_float(b2, "mlp_gelu_fp8", "b2"); bt__same_device(x, b2, "mlp_gelu_fp8"); bt__same_dtype(x, b2, "mlp_gelu_fp8");
        if (b2->ndim != 1 || b2->shape[0] != N) bt_error("mlp_gelu_fp8: b2 %s must be [%lld]", bt__s(b2), (long long)N);
    }
    bt_shape os = bt_shape_of(x); os.d[os.ndim - 1] = N;
    bt__fp8_check_residual("mlp_gelu_fp8", "mlp_gelu_fp8", x, r, N);
    bt__fp8_check_state("mlp_gelu_fp8", " of the second linear", s2, x);
    if (bt__is_gpu(x)) bt__linear_fp8_check_gpu(x, R, N, hid);
    bt_device dev = bt_device_of(x);
    int grad = bt__g.grad_enabled, want_x = grad && bt__needs_grad(x), want_w1 = grad && bt__needs_grad(w1);
    int want_b1 = grad && b1 && bt__needs_grad(b1), want_w2 = grad && bt__needs_grad(w2);
    int want_dh = want_x || want_w1 || want_b1, remake = want_w2 && (bt__g.recompute & BT_RECOMPUTE_GELU);
    bt_tensor *xc = bt__contig(x), *w1c = bt__contig(w1), *b1c = b1 ? bt__contig(b1) : NULL, *w2c = bt__contig(w2);
    bt_tensor *b2c = b2 ? bt__contig(b2) : NULL, *rc = r ? bt__contig(r) : NULL;
    bt_tensor *x2 = bt__view_dense(xc, bt_shape2(R, K));
    bt_tensor *sc = bt__new(bt_shape2(4, 4), BT_F32, dev);      /* x, w1, u, w2: [scale, amax, -, -]: 16-byte aligned rows */
    if (bt__fp8_any_current(s1, 1u << BT_FP8_X | 1u << BT_FP8_W) || bt__fp8_any_current(s2, 1u << BT_FP8_X | 1u << BT_FP8_W)) bt_zero_(sc);
    float *scp = (float *)bt_data_ptr(sc);
    bt_tensor *qx = bt__new(bt_shape2(R, K), BT_F8E4M3, dev);
    bt_tensor *xt = want_w1 ? bt__new(bt_shape2(K, R), BT_F8E4M3, dev) : NULL, *w1t = want_x ? bt__new(bt_shape2(K, hid), BT_F8E4M3, dev) : NULL;
    if (ln) bt__fp8_ln_cast(s1, ln, x2, qx, xt, scp);
    else bt__fp8_cast(s1, BT_FP8_X, x2, qx, xt, scp);
    bt_tensor *h = bt__new(bt_shape2(R, hid), x->dtype, dev);   /* h = (sx sw1) qx qw1^T + b1 */
    bt__fp8_product(s1, qx, w1c, w1t, scp, b1c, NULL, h, R, hid, K);
    bt_release(qx);
    bt_tensor *qu = bt__new(bt_shape2(R, hid), BT_F8E4M3, dev), *ut = want_w2 && !remake ? bt__new(bt_shape2(hid, R), BT_F8E4M3, dev) : NULL;
    if (bt__is_gpu(x)) bt__fp8_cast_act(s2, BT_FP8_X, BT_FP8_ACT_GELU, h, NULL, qu, ut, NULL, scp + 8);
    else {
        bt_tensor *u = bt__unary_eval(BT_UOP_GELU, h, NULL);
        bt__fp8_cast(s2, BT_FP8_X, u, qu, ut, scp + 8);
        bt_release(u);
    }
    bt_tensor *w2t = want_dh ? bt__new(bt_shape2(hid, N), BT_F8E4M3, dev) : NULL;
    bt_tensor *y = bt__new(os, x->dtype, dev);                  /* y = (su sw2) qu qw2^T + b2 (+ r) */
    bt__fp8_product(s2, qu, w2c, w2t, scp + 8, b2c, rc, y, R, N, hid);
    bt_release(qu);
    bt_tensor *in[8] = {x, w1, b1, w2, b2, r, ln ? ln->w : NULL, ln ? ln->b : NULL};
    bt_node *n = bt__record(ln ? "layernorm_mlp_gelu_fp8" : "mlp_gelu_fp8", bt__mlp_fp8_back, y, in, ln ? 8 : r ? 6 : 5);
    if (n) {
        bt__fp8_pair *pair = (bt__fp8_pair *)bt__xmalloc(sizeof *pair, "mlp_gelu_fp8's states");
        pair->s1 = s1; pair->s2 = s2;
        n->aux = pair; n->aux_free = free;
        n->i[1] = remake;
        bt__save(n, sc);
        bt_tensor *keep[5] = {want_dh || remake ? h : NULL, xt, w1t, ut, w2t};
        for (int j = 0; j < 5; j++)
            if (keep[j]) { bt__save(n, keep[j]); n->i[0] |= 1 << j; }
    }
    if (ln) bt__fp8_ln_keep(n, ln, xc);
    bt_release(h); bt_release(xt); bt_release(w1t); bt_release(ut); bt_release(w2t); bt_release(sc);
    bt_release(x2); bt_release(xc); bt_release(w1c); bt_release(b1c); bt_release(w2c); bt_release(b2c); bt_release(rc);
    return bt__register(y);
}
BTDEF bt_tensor *bt_mlp_gelu_fp8(bt_tensor *x, bt_tensor *w1, bt_tensor *b1, bt_tensor *w2, bt_tensor *b2, bt_tensor *r,
                                 bt_fp8_state *s1, bt_fp8_state *s2) {
    return bt__mlp_gelu_fp8(x, w1, b1, w2, b2, r, s1, s2, NULL);
}
BTDEF bt_tensor *bt_layernorm_mlp_gelu_fp8(bt_tensor *x, bt_tensor *lnw, bt_tensor *lnb, double eps, bt_tensor *w1, bt_tensor *b1,
                                           bt_tensor *w2, bt_tensor *b2, bt_tensor *r, bt_fp8_state *s1, bt_fp8_state *s2) {
    if (!bt__fp8_ln_fuses(s1, x, lnw, lnb, eps, 0)) return bt_mlp_gelu_fp8(bt_layernorm(x, lnw, lnb, eps), w1, b1, w2, b2, r, s1, s2);
    bt__fp8_ln ln = {lnw, lnb, eps, 0, NULL, NULL};
    return bt__mlp_gelu_fp8(x, w1, b1, w2, b2, r, s1, s2, &ln);
}

/* ---- a Llama's MLP in FP8 (bt_mlp_swiglu_fp8): the two linears of bt_linear_fp8 with SwiGLU between,
   SwiGLU and its gradient folded into the casts that read [gate | up] and y's gradient ----
   saved: [0] the scales [4, 4] (rows x, w13, y = swiglu(u), w2: [scale, amax, -, -]), then by
   n->i[0]'s bits: 1 u [R, 2F], 2 qx^T [K, R], 4 qw13^T [K, 2F], 8 qy^T [F, R], 16 qw2^T [F, N].
   aux: the two states (bt__fp8_pair). */
static void bt__mlp_swiglu_fp8_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt__fp8_pair *st = (bt__fp8_pair *)n->aux;
    int has = (int)n->i[0], k = 1;
    bt_tensor *sc = n->saved[0];
    bt_tensor *u = has & 1 ? n->saved[k++] : NULL, *xt = has & 2 ? n->saved[k++] : NULL, *w1t = has & 4 ? n->saved[k++] : NULL;
    bt_tensor *yt = has & 8 ? n->saved[k++] : NULL, *w2t = has & 16 ? n->saved[k++] : NULL;
    int64_t F2 = n->in_shape[1].d[0], F = F2 / 2, K = n->in_shape[1].d[1], N = n->in_shape[2].d[0], R = bt_numel(g) / N;
    bt_device dev = bt_device_of(g);
    bt_dtype dt = g->dtype;
    const float *scp = (const float *)bt_data_ptr(sc);           /* x, w13, y, w2: a row of 4 each */
    int want_x = bt__wants(n, 0), want_w1 = bt__wants(n, 1), want_w2 = bt__wants(n, 2), want_du = want_x || want_w1;
    if ((want_du && (!u || !w2t)) || (want_x && !w1t) || (want_w1 && !xt) || (want_w2 && !yt))
        bt_error("mlp_swiglu_fp8: backward: the forward kept no tensor for a gradient asked now");
    bt_tensor *gc = bt__contig(g), *g2 = bt__view_dense(gc, bt_shape2(R, N));
    bt_tensor *sg = bt__new(bt_shape1(8), BT_F32, dev);          /* [scale, amax, -, -] of g, then of du */
    if (bt__fp8_any_current(st->s2, 1u << BT_FP8_G) || bt__fp8_any_current(st->s1, 1u << BT_FP8_G)) bt_zero_(sg);
    float *sgp = (float *)bt_data_ptr(sg);
    bt_tensor *qg = want_du ? bt__new(bt_shape2(R, N), BT_F8E5M2, dev) : NULL, *gt = want_w2 ? bt__new(bt_shape2(N, R), BT_F8E5M2, dev) : NULL;
    bt__fp8_cast(st->s2, BT_FP8_G, g2, qg, gt, sgp);
    if (want_w2) bt__fp8_weight_grad(n, 2, g, gin, gt, sgp, yt, scp + 8, N, F, R);   /* dw2 [N, F] = (sg sy) qg^T [N, R] (qy^T [F, R])^T */
    if (want_du) {
        bt_tensor *dy = bt__new(bt_shape2(R, F), dt, dev);        /* dy [R, F] = (sg sw2) qg [R, N] (qw2^T [F, N])^T */
        bt__fp8_gemm(dev, dt, dy, qg, sgp, w2t, scp + 12, NULL, NULL, R, F, N, st->s2->opts.fast_accum & BT_FP8_FAST_DX);
        bt_tensor *qd = want_x ? bt__new(bt_shape2(R, F2), BT_F8E5M2, dev) : NULL;
        bt_tensor *dt_ = want_w1 ? bt__new(bt_shape2(F2, R), BT_F8E5M2, dev) : NULL;
        if (bt__is_gpu(g)) bt__fp8_cast_act(st->s1, BT_FP8_G, BT_FP8_ACT_DSWIGLU, dy, u, qd, dt_, NULL, sgp + 4);   /* du only inside the cast */
        else {
            bt_tensor *du = bt__swiglu_grad_eval(u, dy);
            bt__fp8_cast(st->s1, BT_FP8_G, du, qd, dt_, sgp + 4);
            bt_release(du);
        }
        bt_release(dy);
        if (want_x) {                                            /* dx [R, K] = (sd sw13) qd [R, 2F] (qw13^T [K, 2F])^T */
            bt_tensor *gx = bt__new(n->in_shape[0], dt, dev);
            bt__fp8_gemm(dev, dt, gx, qd, sgp + 4, w1t, scp + 4, NULL, NULL, R, K, F2, st->s1->opts.fast_accum & BT_FP8_FAST_DX);
            gin[0] = bt__register(gx);
        }
        if (want_w1) bt__fp8_weight_grad(n, 1, g, gin, dt_, sgp + 4, xt, scp, F2, K, R);   /* dw13 [2F, K] = (sd sx) qd^T (qx^T)^T */
        bt_release(qd); bt_release(dt_);
    }
    bt_release(qg); bt_release(gt);
    if (n->n_in > 3 && bt__wants(n, 3)) gin[3] = bt__register(bt_retain(g));
    bt_release(sg); bt_release(g2); bt_release(gc);
    bt__fp8_ln_back(n, 4, 3, gin);
}
/* with ln, x is the RMSNorm's input (bt__fp8_ln) */
static bt_tensor *bt__mlp_swiglu_fp8(bt_tensor *x, bt_tensor *w13, bt_tensor *w2, bt_tensor *r, bt_fp8_state *s1, bt_fp8_state *s2,
                                     bt__fp8_ln *ln) {
    bt__linear_fp8_check(x, w13, NULL, NULL, s1);
    int64_t K = w13->shape[1], F2 = w13->shape[0], F = F2 / 2;
    if (F2 % 2) bt_error("mlp_swiglu_fp8: w13 %s must have 2 F rows (gate's F, then up's)", bt__s(w13));
    bt__need_float(w2, "mlp_swiglu_fp8", "w2"); bt__same_device(x, w2, "mlp_swiglu_fp8"); bt__same_dtype(x, w2, "mlp_swiglu_fp8");
    if (w2->ndim != 2 || w2->shape[1] != F || w2->shape[0] == 0)
        bt_error("mlp_swiglu_fp8: w2 %s must be [out, %lld] (w13 %s is [2 x %lld, in])", bt__s(w2), (long long)F, bt__s(w13), (long long)F);
    int64_t N = w2->shape[0], R = bt_numel(x) / K;
    bt_shape os = bt_shape_of(x); os.d[os.ndim - 1] = N;
    bt__fp8_check_residual("mlp_swiglu_fp8", "mlp_swiglu_fp8", x, r, N);
    bt__fp8_check_state("mlp_swiglu_fp8", " of the second linear", s2, x);
    if (bt__is_gpu(x)) bt__linear_fp8_check_gpu(x, R, N, F);
    bt_device dev = bt_device_of(x);
    int grad = bt__g.grad_enabled, want_x = grad && bt__needs_grad(x), want_w1 = grad && bt__needs_grad(w13);
    int want_w2 = grad && bt__needs_grad(w2), want_du = want_x || want_w1;
    bt_tensor *xc = bt__contig(x), *w1c = bt__contig(w13), *w2c = bt__contig(w2), *rc = r ? bt__contig(r) : NULL;
    bt_tensor *x2 = bt__view_dense(xc, bt_shape2(R, K));
    bt_tensor *sc = bt__new(bt_shape2(4, 4), BT_F32, dev);      /* x, w13, y, w2: [scale, amax, -, -]: 16-byte aligned rows */
    if (bt__fp8_any_current(s1, 1u << BT_FP8_X | 1u << BT_FP8_W) || bt__fp8_any_current(s2, 1u << BT_FP8_X | 1u << BT_FP8_W)) bt_zero_(sc);
    float *scp = (float *)bt_data_ptr(sc);
    bt_tensor *qx = bt__new(bt_shape2(R, K), BT_F8E4M3, dev);
    bt_tensor *xt = want_w1 ? bt__new(bt_shape2(K, R), BT_F8E4M3, dev) : NULL, *w1t = want_x ? bt__new(bt_shape2(K, F2), BT_F8E4M3, dev) : NULL;
    if (ln) bt__fp8_ln_cast(s1, ln, x2, qx, xt, scp);
    else bt__fp8_cast(s1, BT_FP8_X, x2, qx, xt, scp);
    bt_tensor *u = bt__new(bt_shape2(R, F2), x->dtype, dev);     /* [gate | up] = (sx sw13) qx qw13^T */
    bt__fp8_product(s1, qx, w1c, w1t, scp, NULL, NULL, u, R, F2, K);
    bt_release(qx);
    bt_tensor *qy = bt__new(bt_shape2(R, F), BT_F8E4M3, dev), *yt = want_w2 ? bt__new(bt_shape2(F, R), BT_F8E4M3, dev) : NULL;
    if (bt__is_gpu(x)) bt__fp8_cast_act(s2, BT_FP8_X, BT_FP8_ACT_SWIGLU, u, NULL, qy, yt, NULL, scp + 8);
    else {
        bt_tensor *y = bt__swiglu_eval(u);
        bt__fp8_cast(s2, BT_FP8_X, y, qy, yt, scp + 8);
        bt_release(y);
    }
    bt_tensor *w2t = want_du ? bt__new(bt_shape2(F, N), BT_F8E4M3, dev) : NULL;
    bt_tensor *out = bt__new(os, x->dtype, dev);                 /* out = (sy sw2) qy qw2^T (+ r) */
    bt__fp8_product(s2, qy, w2c, w2t, scp + 8, NULL, rc, out, R, N, F);
    bt_release(qy);
    bt_tensor *in[5] = {x, w13, w2, r, ln ? ln->w : NULL};
    bt_node *n = bt__record(ln ? "rmsnorm_mlp_swiglu_fp8" : "mlp_swiglu_fp8", bt__mlp_swiglu_fp8_back, out, in, ln ? 5 : r ? 4 : 3);
    if (n) {
        bt__fp8_pair *pair = (bt__fp8_pair *)bt__xmalloc(sizeof *pair, "mlp_swiglu_fp8's states");
        pair->s1 = s1; pair->s2 = s2;
        n->aux = pair; n->aux_free = free;
        bt__save(n, sc);
        bt_tensor *keep[5] = {want_du ? u : NULL, xt, w1t, yt, w2t};
        for (int j = 0; j < 5; j++)
            if (keep[j]) { bt__save(n, keep[j]); n->i[0] |= 1 << j; }
    }
    if (ln) bt__fp8_ln_keep(n, ln, xc);
    bt_release(u); bt_release(xt); bt_release(w1t); bt_release(yt); bt_release(w2t); bt_release(sc);
    bt_release(x2); bt_release(xc); bt_release(w1c); bt_release(w2c); bt_release(rc);
    return bt__register(out);
}
BTDEF bt_tensor *bt_mlp_swiglu_fp8(bt_tensor *x, bt_tensor *w13, bt_tensor *w2, bt_tensor *r, bt_fp8_state *s1, bt_fp8_state *s2) {
    return bt__mlp_swiglu_fp8(x, w13, w2, r, s1, s2, NULL);
}
BTDEF bt_tensor *bt_rmsnorm_mlp_swiglu_fp8(bt_tensor *x, bt_tensor *nw, double eps, bt_tensor *w13, bt_tensor *w2, bt_tensor *r,
                                           bt_fp8_state *s1, bt_fp8_state *s2) {
    if (!bt__fp8_ln_fuses(s1, x, nw, NULL, eps, 1)) return bt_mlp_swiglu_fp8(bt_rmsnorm(x, nw, eps), w13, w2, r, s1, s2);
    bt__fp8_ln ln = {nw, NULL, eps, 1, NULL, NULL};
    return bt__mlp_swiglu_fp8(x, w13, w2, r, s1, s2, &ln);
}

/* ---- a model's parameters from gathered units (bt_units_*: bt_tensor.h states the contract) ---- */
BTDEF void bt_units_set(bt_unit_set *s, const bt_units *src, const int64_t *lo, int n, const char *who) {
    s->src = src;
    s->who = who ? who : "model";
    if (!src) return;
    if (n < 1) bt_error("%s: %d fsdp units", s->who, n);
    for (int u = 0; u < n; u++)
        if (lo[u + 1] <= lo[u]) bt_error("%s: fsdp unit %d is empty or reversed ([%lld, %lld))", s->who, u, (long long)lo[u], (long long)lo[u + 1]);
    if (s->n != n) {
        free(s->lo); free(s->w);
        s->lo = (int64_t *)calloc((size_t)n + 1, sizeof(int64_t));
        s->w = (bt_tensor **)calloc((size_t)n, sizeof(bt_tensor *));
        if (!s->lo || !s->w) bt_error("%s: out of host memory", s->who);
        s->n = n;
    }
    memcpy(s->lo, lo, sizeof(int64_t) * ((size_t)n + 1));
    memset(s->w, 0, sizeof(bt_tensor *) * (size_t)n);
}
BTDEF void bt_units_free(bt_unit_set *s) {
    free(s->lo); free(s->w);
    memset(s, 0, sizeof *s);
}
BTDEF void bt_units_begin(bt_unit_set *s, int u, bt_dtype dt) {
    if (s->src) s->w[u] = s->src->gather(s->src->ctx, u, dt);
}
BTDEF void bt_units_end(bt_unit_set *s, int u) {
    if (s->src) s->w[u] = NULL;
}
BTDEF bt_tensor *bt_units_param(const bt_unit_set *s, const bt_tensor *p, const bt_tensor *flat) {
    int64_t o = p->offset - flat->offset;
    int a = 0, b = s->n;   /* the unit u with lo[u] <= o < lo[u + 1]: bisection */
    if (o < s->lo[0] || o >= s->lo[s->n]) bt_error("%s: a parameter at element %lld is in no fsdp unit", s->who, (long long)o);
    while (b - a > 1) { int c = (a + b) / 2; if (s->lo[c] <= o) a = c; else b = c; }
    if (!s->w[a]) bt_error("%s: a parameter of unit %d used while that unit is not gathered (fsdp)", s->who, a);
    return bt_view(bt_narrow(s->w[a], 0, o - s->lo[a], bt_numel(p)), bt_shape_of(p));
}
BTDEF bt_tensor *bt_units_run(bt_tensor *(*fn)(void *ctx, bt_tensor **in), void *ctx, bt_tensor *x) {
    bt_scope_begin();
    bt_tensor *out = bt_retain(fn(ctx, &x));
    bt_scope_end();
    return bt__register(out);
}
