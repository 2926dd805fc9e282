/* gpt2_parity.h - compares gpt2.h's GPT-2 with a PyTorch reference state
   (tests/gpt2_ref.py writes it; tests/gpt2_formats.md gives the layout). Included by the
   CPU test (test_gpt2.c, the tiny fixture) and the GPU test (test_gpt2_gpu.cu, tiny and
   GPT-2 124M), after gpt2_io.h and bt_test.h. */
#ifndef GPT2_PARITY_H
#define GPT2_PARITY_H

#define GPT2_STATE_MAGIC 20240327

typedef struct {
    int B, T, V, Vp, nsteps, has_logits;
    int32_t *x, *y;
    float *logits, loss, *grads, *losses, hyper[8];   /* hyper: lr, beta1, beta2, eps, wd */
} gpt2_ref_state;

static void ref_state_free(gpt2_ref_state *s) { free(s->x); free(s->y); free(s->logits); free(s->grads); free(s->losses); memset(s, 0, sizeof *s); }

/* 0 ok; -1 with a message on a missing/short/inconsistent file */
static int ref_state_read(const char *path, int64_t num_params, gpt2_ref_state *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open", path); return -1; }
    int32_t h[256];
    int ok = fread(h, 4, 256, f) == 256 && h[0] == GPT2_STATE_MAGIC && h[1] == 1;
    if (ok) {
        s->B = h[2]; s->T = h[3]; s->V = h[4]; s->Vp = h[5]; s->nsteps = h[6]; s->has_logits = h[7];
        size_t bt = (size_t)s->B * s->T;
        s->x = (int32_t *)malloc(4 * bt); s->y = (int32_t *)malloc(4 * bt);
        s->logits = s->has_logits ? (float *)malloc(4 * bt * s->Vp) : NULL;
        s->grads = (float *)malloc(4 * (size_t)num_params); s->losses = (float *)malloc(4 * (size_t)(s->nsteps + 1));
        ok = fread(s->x, 4, bt, f) == bt && fread(s->y, 4, bt, f) == bt &&
             (!s->has_logits || fread(s->logits, 4, bt * s->Vp, f) == bt * s->Vp) &&
             fread(&s->loss, 4, 1, f) == 1 && fread(s->grads, 4, (size_t)num_params, f) == (size_t)num_params &&
             fread(s->losses, 4, (size_t)s->nsteps, f) == (size_t)s->nsteps && fread(s->hyper, 4, 8, f) == 8 && fgetc(f) == EOF;
    }
    fclose(f);
    if (!ok) { ref_state_free(s); snprintf(err, errlen, "%s: not a reference state for a model of %lld parameters", path, (long long)num_params); return -1; }
    return 0;
}

static double relerr_f(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { double d = (double)a[i] - b[i]; num += d * d; den += (double)b[i] * b[i]; }
    return num != num ? INFINITY : sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
}

typedef struct {
    double logits, loss, grads, step_loss;   /* relative-error bounds */
} parity_tol;

typedef struct { double logits, loss, grad_worst, step_loss_worst; const char *grad_worst_name; } parity_result;

/* Builds the model on dev from model_path, runs the reference batch in precision dt (fp32 /
   tf32 via bt_set_matmul_precision / bf16), checks logits, loss, each of the 16 parameter
   tensors' gradients and the losses of the AdamW steps. Every comparison is a BT_CHECK. */
static void gpt2_parity(const char *model_path, const char *state_path, bt_device dev, bt_dtype dt, parity_tol tol,
                        parity_result *res) {
    static const char *names[P_COUNT] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    char err[512];
    gpt2_config cfg;
    memset(res, 0, sizeof *res);
    if (gpt2_read_header(model_path, &cfg, err, sizeof err)) { BT_CHECK(0, "%s", err); return; }
    gpt2 m;
    gpt2_build(&m, cfg, dev);
    if (gpt2_load_weights(&m, model_path, err, sizeof err)) { BT_CHECK(0, "%s", err); gpt2_free(&m); return; }
    gpt2_ref_state s;
    if (ref_state_read(state_path, m.num_params, &s, err, sizeof err)) { BT_CHECK(0, "%s", err); gpt2_free(&m); return; }
    BT_CHECK(s.V == cfg.V && s.Vp == cfg.Vp, "state V %d/%d vs model %d/%d", s.V, s.Vp, cfg.V, cfg.Vp);
    int64_t BT = (int64_t)s.B * s.T;

    bt_scope_begin();
    bt_tensor *idx = bt_from_data(s.x, bt_shape2(s.B, s.T), BT_I32, dev);
    bt_tensor *tgt = bt_from_data(s.y, bt_shape2(s.B, s.T), BT_I32, dev);
    bt_tensor *logits = gpt2_logits(&m, idx, dt);
    bt_tensor *loss = bt_cross_entropy(logits, tgt, cfg.V, -1);
    if (s.has_logits) {
        float *got = (float *)malloc(4 * (size_t)BT * cfg.Vp);
        bt_to_host(logits, got, BT_F32);
        res->logits = relerr_f(got, s.logits, BT * cfg.Vp);
        BT_CHECK(res->logits < tol.logits, "logits rel err %.3e >= %.1e", res->logits, tol.logits);
        free(got);
    }
    double l = bt_item(loss);
    res->loss = fabs(l - s.loss) / fabs(s.loss);
    BT_CHECK(res->loss < tol.loss, "loss %.7f vs reference %.7f: rel err %.3e >= %.1e", l, s.loss, res->loss, tol.loss);
    bt_zero_(m.flat_grad);
    bt_backward(loss);
    bt_scope_end();

    float *gm = (float *)malloc(4 * (size_t)m.flat_numel), *g = (float *)malloc(4 * (size_t)m.num_params);
    bt_to_host(m.flat_grad, gm, BT_F32);
    gpt2_to_file_order(&m, gm, g);      /* the reference's gradients are in llm.c's file order */
    free(gm);
    int64_t sz[P_COUNT], off = 0;
    gpt2_param_sizes(&cfg, sz);
    res->grad_worst = 0; res->grad_worst_name = "";
    for (int i = 0; i < P_COUNT; i++) {
        double e = relerr_f(g + off, s.grads + off, sz[i]);
        if (e > res->grad_worst) { res->grad_worst = e; res->grad_worst_name = names[i]; }
        BT_CHECK(e < tol.grads, "grad %s rel err %.3e >= %.1e", names[i], e, tol.grads);
        off += sz[i];
    }
    free(g);

    /* AdamW on the same batch: loss[k] is the loss before update k, as in the reference */
    bt_adamw opt;
    bt_adamw_init(&opt, m.params, m.n_params, s.hyper[1], s.hyper[2], s.hyper[3], s.hyper[4], 0.f);
    for (int k = 0; k < s.nsteps; k++) {
        bt_zero_(m.flat_grad);
        bt_scope_begin();
        bt_tensor *idx2 = bt_from_data(s.x, bt_shape2(s.B, s.T), BT_I32, dev);
        bt_tensor *tgt2 = bt_from_data(s.y, bt_shape2(s.B, s.T), BT_I32, dev);
        bt_tensor *lk = gpt2_loss(&m, idx2, tgt2, dt);
        double v = bt_item(lk), e = fabs(v - s.losses[k]) / fabs(s.losses[k]);
        if (e > res->step_loss_worst) res->step_loss_worst = e;
        BT_CHECK(e < tol.step_loss, "step %d loss %.6f vs reference %.6f: rel err %.3e >= %.1e", k, v, s.losses[k], e, tol.step_loss);
        bt_backward(lk);
        bt_scope_end();
        bt_adamw_step(&opt, s.hyper[0]);
    }
    bt_adamw_free(&opt);
    ref_state_free(&s);
    gpt2_free(&m);
}
#endif
