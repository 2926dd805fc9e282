/* test_llama_model.c - the Llama model of llama.h and its Hugging Face files (llama_io.h) on the CPU:
   configs and presets; the forward pass against a plain double-precision reference written here
   (embedding, RMSNorm, RoPE rotate_half with llama3 scaling, grouped-query attention, SwiGLU); the
   model's gradients against float64 central differences for parameters of every kind (the wiring,
   GQA, RoPE's positions); the KV cache against the full forward pass at every position; an export
   read back bit for bit; a hand-built Hugging Face directory (config.json, two shards and an index,
   a BF16 tensor) loading into the same weights; the import's errors; Meta's interleaved q/k layout.
   (tests/test_llama.c is examples/train_llama.c's test; parity with transformers itself is
   tests/llama_parity.py, on a machine with torch.) */
#define _POSIX_C_SOURCE 200809L
#include "llama_io.h"
#include "bt_optim.h"
#include "tests/bt_test.h"
#include "tests/bt_test_files.h"
#include <sys/stat.h>
#include <unistd.h>

static const char *tp(const char *name) { return bt_test_path(name); }

/* L 2, C 32, H 4, Hkv 2 (D 8, groups of 2), F 48, V 97 (Vp 128), maxT 16 */
static llama_config tiny_config(int tie, int scaled) {
    llama_config c = llama_config_make(2, 4, 2, 32, 48, 97, 16);
    c.tie = tie;
    c.rope.theta = 10000.0;
    if (scaled) { c.rope.factor = 8; c.rope.low_freq_factor = 1; c.rope.high_freq_factor = 4; c.rope.original_max_position_embeddings = 8; }
    return c;
}
/* init, then the norms' weights moved off 1 so that a norm read in the wrong place shows */
static void tiny_model(llama *m, llama_config c, uint64_t seed) {
    llama_build(m, c, bt_cpu());
    llama_init(m, seed);
    float *w = (float *)bt_data_ptr(m->flat);
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i]->ndim == 1) {
            float *p = w + (m->params[i]->offset - m->flat->offset);
            for (int64_t j = 0; j < bt_numel(m->params[i]); j++) p[j] = 1.0f + 0.3f * (float)(bt_philox_uniform(seed + 7, (uint64_t)(i * 1000 + j)) - 0.5);
        }
    m->flat->storage->version++;
}
static void random_ids(int32_t *ids, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(bt_philox_uniform(seed, (uint64_t)i) * V);
}

static void test_config(void) {
    char err[512];
    for (int i = 0; i < llama_npresets; i++) {
        llama_config c;
        BT_CHECK(llama_config_from_preset(llama_presets[i].name, &c) == 0, "%s", llama_presets[i].name);
        BT_CHECK(llama_config_check(&c, llama_presets[i].name, err, sizeof err) == 0, "%s", err);
        if (bt_test_verbose()) printf("info: preset %-12s %8.3fM parameters (%s)\n", llama_presets[i].name, llama_num_params(&c) / 1e6, llama_presets[i].what);
    }
    llama_config c;
    llama_config_from_preset("llama3-8b", &c);
    BT_CHECK(llama_num_params(&c) == 8030261248LL, "Llama 3 8B: %lld parameters", (long long)llama_num_params(&c));
    llama_config_from_preset("llama3.2-1b", &c);
    BT_CHECK(llama_num_params(&c) == 1235814400LL, "Llama 3.2 1B: %lld parameters", (long long)llama_num_params(&c));
    BT_CHECK(llama_config_from_preset("nope", &c) == -1, "unknown preset");
    struct { int H, Hkv, C; double factor; const char *want; } bad[] = {
        {4, 3, 32, 0, "do not divide H = 4"}, {4, 2, 36, 0, "even head dim"}, {4, 0, 32, 0, "Hkv = 0 is out of range"},
        {4, 2, 32, -1, "llama3 rope scaling needs"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = llama_config_make(2, bad[i].H, bad[i].Hkv, bad[i].C, 48, 97, 16);
        c.rope.factor = bad[i].factor;
        int r = llama_config_check(&c, "cfg", err, sizeof err);
        BT_CHECK(r == -1 && strstr(err, bad[i].want), "case %zu: '%s', expected '%s'", i, err, bad[i].want);
    }
}

/* ---- a reference forward pass in double, written from transformers' modeling_llama.py ---- */
static void ref_rmsnorm(const double *x, const float *w, double eps, int C, double *y) {
    double ss = 0;
    for (int j = 0; j < C; j++) ss += x[j] * x[j];
    double r = 1.0 / sqrt(ss / C + eps);
    for (int j = 0; j < C; j++) y[j] = x[j] * r * w[j];
}
static void ref_linear(const double *x, const float *w, int out, int in, double *y) {   /* w [out, in] */
    for (int o = 0; o < out; o++) { double s = 0; for (int i = 0; i < in; i++) s += (double)w[(size_t)o * in + i] * x[i]; y[o] = s; }
}
/* the logits [T, Vp] of one sequence */
static void ref_logits(llama *m, const int32_t *ids, int T, double *logits) {
    const llama_config *c = &m->cfg;
    int C = c->C, H = c->H, Hkv = c->Hkv, D = C / H, F = c->F, G = H / Hkv, W = (H + 2 * Hkv) * D;
    const float *fl = (const float *)bt_data_ptr(m->flat);
#define P(t) (fl + ((t)->offset - m->flat->offset))
    float inv[256];
    bt_rope_inv_freq(&c->rope, D, inv);
    double *x = (double *)calloc((size_t)T * C, sizeof(double)), *h = (double *)malloc(sizeof(double) * C);
    double *qkv = (double *)malloc(sizeof(double) * (size_t)T * W), *o = (double *)malloc(sizeof(double) * C);
    double *u = (double *)malloc(sizeof(double) * 2 * F), *s = (double *)malloc(sizeof(double) * T), *y = (double *)malloc(sizeof(double) * C);
    for (int t = 0; t < T; t++) for (int j = 0; j < C; j++) x[t * C + j] = P(m->emb)[(size_t)ids[t] * C + j];
    for (int l = 0; l < c->L; l++) {
        llama_layer *ly = &m->layers[l];
        for (int t = 0; t < T; t++) {
            ref_rmsnorm(x + t * C, P(ly->attn_norm), c->eps, C, h);
            ref_linear(h, P(ly->wqkv), W, C, qkv + (size_t)t * W);
            for (int hh = 0; hh < H + Hkv; hh++)   /* rotate_half on q's and k's heads */
                for (int i = 0; i < D / 2; i++) {
                    double a = (double)((float)t * inv[i]), *v = qkv + (size_t)t * W + hh * D;
                    double x1 = v[i], x2 = v[i + D / 2];
                    v[i] = x1 * cos(a) - x2 * sin(a); v[i + D / 2] = x2 * cos(a) + x1 * sin(a);
                }
        }
        for (int t = 0; t < T; t++) {
            for (int hh = 0; hh < H; hh++) {
                const double *q = qkv + (size_t)t * W + hh * D;
                int kvh = hh / G;   /* repeat_kv */
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + (size_t)j * W + (H + kvh) * D;
                    double d = 0; for (int e = 0; e < D; e++) d += q[e] * k[e];
                    s[j] = d / sqrt((double)D); if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= t; j++) { s[j] = exp(s[j] - mx); sum += s[j]; }
                for (int e = 0; e < D; e++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += s[j] / sum * qkv[(size_t)j * W + (H + Hkv + kvh) * D + e];
                    o[hh * D + e] = a;
                }
            }
            ref_linear(o, P(ly->wo), C, C, y);
            for (int j = 0; j < C; j++) x[t * C + j] += y[j];
        }
        for (int t = 0; t < T; t++) {
            ref_rmsnorm(x + t * C, P(ly->mlp_norm), c->eps, C, h);
            ref_linear(h, P(ly->w13), 2 * F, C, u);
            for (int f = 0; f < F; f++) u[f] = u[f] / (1 + exp(-u[f])) * u[F + f];
            double *down = (double *)malloc(sizeof(double) * C);
            ref_linear(u, P(ly->w2), C, F, down);
            for (int j = 0; j < C; j++) x[t * C + j] += down[j];
            free(down);
        }
    }
    double *lg = (double *)malloc(sizeof(double) * c->Vp);
    for (int t = 0; t < T; t++) {
        ref_rmsnorm(x + t * C, P(m->norm), c->eps, C, h);
        ref_linear(h, P(m->head), c->Vp, C, lg);
        memcpy(logits + (size_t)t * c->Vp, lg, sizeof(double) * c->Vp);
    }
#undef P
    free(x); free(h); free(qkv); free(o); free(u); free(s); free(y); free(lg);
}
static void test_forward_reference(void) {
    for (int variant = 0; variant < 2; variant++) {
        llama m;
        tiny_model(&m, tiny_config(variant, variant), 5 + variant);
        int B = 2, T = 9, Vp = m.cfg.Vp;
        int32_t ids[18];
        random_ids(ids, B * T, m.cfg.V, 3);
        double *ref = (double *)malloc(sizeof(double) * (size_t)B * T * Vp), *got = (double *)malloc(sizeof(double) * (size_t)B * T * Vp);
        for (int b = 0; b < B; b++) ref_logits(&m, ids + b * T, T, ref + (size_t)b * T * Vp);
        bt_scope_begin();
        bt_tensor *idx = bt_from_data(ids, bt_shape2(B, T), BT_I32, bt_cpu());
        bt_to_host(llama_logits(&m, idx, BT_F64), got, BT_F64);
        double e64 = bt_test_relerr(got, ref, (long)B * T * Vp);
        bt_to_host(llama_logits(&m, idx, BT_F32), got, BT_F64);
        double e32 = bt_test_relerr(got, ref, (long)B * T * Vp);
        bt_scope_end();
        printf("info: forward vs the double reference (%s): f64 %.2e, f32 %.2e\n", variant ? "tied, llama3 rope" : "untied", e64, e32);
        BT_CHECK(e64 < BT_TOL_F64_ULP * 100 && e32 < BT_TOL_F32, "logits differ from the reference: f64 %.3e, f32 %.3e", e64, e32);
        free(ref); free(got);
        llama_free(&m);
    }
}

/* ---- gradients against central differences ---- */
static double loss_f64(llama *m, bt_tensor *idx, bt_tensor *tgt) {
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    double l = bt_item(llama_loss(m, idx, tgt, BT_F64));
    bt_scope_end();
    bt_set_grad_enabled(old);
    return l;
}
static void test_gradients(void) {
    for (int variant = 0; variant < 2; variant++) {
        llama m;
        tiny_model(&m, tiny_config(variant, variant), 11 + variant);
        int B = 2, T = 9;
        int32_t ids[19 * 2], tg[18];
        random_ids(ids, B * T + 1, m.cfg.V, 21);
        for (int i = 0; i < B * T; i++) tg[i] = ids[i + 1];
        tg[4] = -1;   /* an ignored target */
        bt_scope_begin();
        bt_tensor *idx = bt_from_data(ids, bt_shape2(B, T), BT_I32, bt_cpu()), *tgt = bt_from_data(tg, bt_shape2(B, T), BT_I32, bt_cpu());
        bt_zero_(m.flat_grad);
        bt_tensor *loss = llama_loss(&m, idx, tgt, BT_F64);
        bt_backward(loss);
        const float *g = (const float *)bt_data_ptr(m.flat_grad);
        float *w = (float *)bt_data_ptr(m.flat);
        /* per HF tensor (q, k, v, gate, up apart), 3 entries of each of layer 1's and the others */
        char name[160];
        double worst = 0; const char *worst_name = "";
        static char worst_buf[320];
        int checked = 0;
        for (int i = 0; i < llama_hf_count(&m.cfg); i++) {
            bt_tensor *leaf; int64_t row0, rows;
            llama_hf_tensor(&m, i, name, sizeof name, &leaf, &row0, &rows);
            int64_t cols = leaf->ndim == 2 ? leaf->shape[1] : 1, base = leaf->offset - m.flat->offset + row0 * cols;
            if (strstr(name, "layers.0.")) continue;
            for (int s = 0; s < 3; s++) {
                int64_t r = (int64_t)(bt_philox_uniform(77 + i, (uint64_t)s) * rows), cidx = (int64_t)(bt_philox_uniform(99 + i, (uint64_t)s) * cols);
                if (leaf == m.emb || leaf == m.head) r = leaf == m.emb && s < 2 ? ids[s * 5] : tg[s + 1];   /* rows that matter */
                int64_t at = base + r * cols + cidx;
                float w0 = w[at];
                double h = 1e-4, lp, lm, dp, dm;
                w[at] = (float)(w0 + h); dp = (double)w[at] - w0; m.flat->storage->version++; lp = loss_f64(&m, idx, tgt);
                w[at] = (float)(w0 - h); dm = (double)w[at] - w0; m.flat->storage->version++; lm = loss_f64(&m, idx, tgt);
                w[at] = w0; m.flat->storage->version++;
                double fd = (lp - lm) / (dp - dm), err = fabs(g[at] - fd) / (fabs(fd) + 1e-4);
                if (err > worst) { worst = err; snprintf(worst_buf, sizeof worst_buf, "%s[%lld, %lld]: %.8e vs %.8e", name, (long long)r, (long long)cidx, g[at], fd); worst_name = worst_buf; }
                checked++;
            }
        }
        bt_scope_end();
        printf("info: gradients vs f64 central differences (%s): %d entries, worst relative error %.2e (%s)\n",
               variant ? "tied, llama3 rope" : "untied", checked, worst, worst_name);
        BT_CHECK(worst < 1e-4, "a gradient differs: %s (relative %.3e)", worst_name, worst);
        llama_free(&m);
    }
}

/* ---- KV cache ---- */
static double kv_worst_relerr(llama *m, const int32_t *ids, int T, int prefill, int cap) {
    int64_t Vp = m->cfg.Vp;
    float *full = (float *)malloc(sizeof(float) * (size_t)(T * Vp)), *row = (float *)malloc(sizeof(float) * (size_t)Vp);
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    bt_to_host(llama_logits(m, bt_from_data(ids, bt_shape2(1, T), BT_I32, bt_cpu()), BT_F32), full, BT_F32);
    bt_scope_end();
    bt_set_grad_enabled(old);
    llama_kv_cache *kv = llama_kv_cache_create(m, BT_F32, cap);
    double worst = 0;
    for (int pos = 0; pos < T;) {
        int n = pos == 0 ? prefill : (pos >= T / 2 && pos < T / 2 + 3 && pos + 3 <= T) ? 3 : 1;
        bt_scope_begin();
        bt_to_host(llama_forward_cached(m, kv, ids + pos, n), row, BT_F32);
        bt_scope_end();
        pos += n;
        double num = 0, den = 0;
        for (int64_t j = 0; j < Vp; j++) { double r = full[(pos - 1) * Vp + j], d = row[j] - r; num += d * d; den += r * r; }
        double e = num == num ? sqrt(num / (den > 0 ? den : 1)) : INFINITY;
        if (e > worst) worst = e;
    }
    llama_kv_cache_free(kv);
    free(full); free(row);
    return worst;
}
static void test_kv_cache(void) {
    for (volatile int variant = 0; variant < 2; variant++) {
        llama m;
        llama_config c = tiny_config(variant, variant);
        c.maxT = 32;
        tiny_model(&m, c, 31);
        int32_t ids[32];
        random_ids(ids, 32, c.V, 9);
        double e1 = kv_worst_relerr(&m, ids, 32, 1, 0), e5 = kv_worst_relerr(&m, ids, 20, 5, 20);
        printf("info: kv cache vs full forward, fp32 cpu (%s): worst relative error %.2e (1 prompt token, 32 positions), %.2e (5, 20)\n",
               variant ? "tied, llama3 rope" : "untied", e1, e5);
        BT_CHECK(e1 < 1e-5 && e5 < 1e-5, "kv cache logits differ: %.3e, %.3e", e1, e5);
        llama_kv_cache *kv = llama_kv_cache_create(&m, BT_F32, 8);
        bt_scope_begin();
        llama_forward_cached(&m, kv, ids, 8);
        BT_EXPECT_ERROR(llama_forward_cached(&m, kv, ids, 1), "do not fit the cache of 8");
        llama_kv_cache_reset(kv);
        BT_CHECK(llama_forward_cached(&m, kv, ids, 2) != NULL && kv->len == 2, "reset");
        bt_scope_end();
        llama_kv_cache_free(kv);
        int32_t out[40], out2[40];
        BT_CHECK(llama_generate(&m, ids, 3, 40, 5, 1.0, 3, BT_F32, out) == 0, "generate past the context of 32");
        llama_generate(&m, ids, 3, 40, 5, 1.0, 3, BT_F32, out2);
        int ok = !memcmp(out, out2, sizeof out);
        for (int i = 0; i < 40; i++) ok &= out[i] >= 0 && out[i] < c.V;
        BT_CHECK(ok, "generation: the same seed gives the same tokens, each in the vocabulary");
        /* greedy generation is the argmax of the full forward at each step */
        llama_generate(&m, ids, 3, 6, 1, 0.0, 0, BT_F32, out);
        int32_t seq[9];
        memcpy(seq, ids, 3 * sizeof(int32_t)); memcpy(seq + 3, out, 6 * sizeof(int32_t));
        float *lg = (float *)malloc(sizeof(float) * 9 * c.Vp);
        bt_scope_begin();
        bt_set_grad_enabled(0);
        bt_to_host(llama_logits(&m, bt_from_data(seq, bt_shape2(1, 9), BT_I32, bt_cpu()), BT_F32), lg, BT_F32);
        bt_set_grad_enabled(1);
        bt_scope_end();
        int greedy = 1;
        for (int t = 2; t < 8; t++) greedy &= llama_sample_next(lg + (size_t)t * c.Vp, c.V, 1, 0, 0) == seq[t + 1];
        BT_CHECK(greedy, "greedy generation follows the full forward's argmax");
        free(lg);
        llama_free(&m);
    }
    BT_CHECK(bt_alloc_stats(bt_cpu()).allocated == 0, "leaked %zu bytes", bt_alloc_stats(bt_cpu()).allocated);
}
static void test_sample_next(void) {
    float lg[6] = {0.5f, 3.0f, 1.0f, 3.0f, -2.0f, 2.0f};
    BT_CHECK(llama_sample_next(lg, 6, 1, 1.0, 0.9) == 1, "greedy: the first of the ties");
    int seen[6] = {0};
    for (int s = 0; s < 400; s++) seen[llama_sample_next(lg, 6, 3, 1.0, bt_philox_uniform(5, (uint64_t)s))]++;
    BT_CHECK(seen[1] && seen[3] && seen[5] && !seen[0] && !seen[2] && !seen[4], "top-3 draws only 1, 3, 5: %d %d %d %d %d %d",
             seen[0], seen[1], seen[2], seen[3], seen[4], seen[5]);
}

/* ---- files ---- */
static void test_export_roundtrip(void) {
    char err[1024];
    for (int variant = 0; variant < 2; variant++) {
        llama a, b;
        tiny_model(&a, tiny_config(variant, !variant), 41);
        const char *dir = tp(variant ? "export_tied" : "export_untied");
        mkdir(dir, 0755);
        BT_CHECK(llama_hf_export(&a, dir, err, sizeof err) == 0, "export: %s", err);
        BT_CHECK(llama_hf_init_from(&b, dir, bt_cpu(), err, sizeof err) == 0, "import: %s", err);
        if (!b.flat) continue;
        BT_CHECK(b.num_params == a.num_params && !memcmp(&a.cfg, &b.cfg, sizeof a.cfg), "the config differs after a round trip");
        BT_CHECK(!memcmp(bt_data_ptr(a.flat), bt_data_ptr(b.flat), 4 * (size_t)a.num_params), "weights differ after a round trip");
        char path[600];
        snprintf(path, sizeof path, "%s/config.json", dir);
        char *text = bt_test_read_file(path, NULL);
        BT_CHECK(text && strstr(text, "\"LlamaForCausalLM\"") && strstr(text, "\"num_key_value_heads\": 2") &&
                 strstr(text, variant ? "\"rope_scaling\": null" : "\"rope_type\": \"llama3\"") &&
                 strstr(text, variant ? "\"tie_word_embeddings\": true" : "\"tie_word_embeddings\": false"), "config.json: %s", text ? text : "(none)");
        free(text);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        bt_ckpt_file *f = bt_ckpt_open(path, 0);
        BT_CHECK(f && bt_ckpt_count(f) == llama_hf_count(&a.cfg) && !!bt_ckpt_find(f, "lm_head.weight") == !variant &&
                 bt_ckpt_find(f, "model.embed_tokens.weight")->shape[0] == 97, "the export's tensors");
        bt_ckpt_close(f);
        llama_free(&a); llama_free(&b);
    }
}

/* a Hugging Face directory written here as save_pretrained would: config.json in text, the tensors
   over two shards (every other one in each) with an index, q_proj of layer 1 in BF16, an old
   rotary buffer; extra: a JSON member appended to config.json's object (may be "") */
static void write_hf_dir(llama *m, const char *dir, const char *extra, int skip) {
    char path[600], name[160];
    const llama_config *c = &m->cfg;
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %d, \"intermediate_size\": %d,\n"
             " \"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"vocab_size\": %d,\n"
             " \"max_position_embeddings\": %d, \"rms_norm_eps\": %.17g, \"rope_theta\": %.17g, \"tie_word_embeddings\": %s,\n"
             " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
             " \"original_max_position_embeddings\": 8}, \"hidden_act\": \"silu\", \"torch_dtype\": \"bfloat16\"%s}\n",
             c->C, c->F, c->L, c->H, c->Hkv, c->V, c->maxT, c->eps, c->rope.theta, c->tie ? "true" : "false", extra);
    bt_test_write_file(path, cfg, strlen(cfg));
    bt_ckpt_writer *w[2] = {bt_ckpt_writer_new(), bt_ckpt_writer_new()};
    bt_json_writer j;
    bt_json_writer_init(&j, 2);
    bt_json_object(&j, NULL);
    bt_json_object(&j, "metadata"); bt_json_int(&j, "total_size", 4 * m->num_params); bt_json_end(&j);
    bt_json_object(&j, "weight_map");
    bt_scope_begin();
    for (int i = 0; i < llama_hf_count(c); i++) {
        bt_tensor *leaf; int64_t row0, rows;
        llama_hf_tensor(m, i, name, sizeof name, &leaf, &row0, &rows);
        if (i == skip) continue;
        bt_tensor *v = bt_narrow(bt_view(bt_narrow(m->flat, 0, leaf->offset - m->flat->offset, bt_numel(leaf)), bt_shape_of(leaf)), 0, row0, rows);
        if (!strcmp(name, "model.layers.1.self_attn.q_proj.weight")) v = bt_cast(v, BT_BF16);
        bt_ckpt_writer_add_tensor(w[i % 2], name, v, 0, 0);
        bt_json_string(&j, name, i % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors");
    }
    float inv[4] = {1, 2, 3, 4};
    int64_t four = 4;
    bt_ckpt_writer_add(w[1], "model.layers.0.self_attn.rotary_emb.inv_freq", BT_CKPT_F32, 1, &four, inv);
    bt_json_string(&j, "model.layers.0.self_attn.rotary_emb.inv_freq", "model-00002-of-00002.safetensors");
    bt_json_end(&j); bt_json_end(&j);
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/model-0000%d-of-00002.safetensors", dir, k + 1);
        BT_CHECK(bt_ckpt_writer_save(w[k], path) == 0, "%s", bt_ckpt_error());
        bt_ckpt_writer_free(w[k]);
    }
    bt_scope_end();
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    BT_CHECK(bt_json_save(&j, path) == 0, "%s", bt_data_error());
    bt_json_writer_free(&j);
}
static void test_hf_sharded_dir(void) {
    char err[1024];
    llama a, b;
    tiny_model(&a, tiny_config(0, 1), 51);
    const char *dir = tp("hf_sharded");
    write_hf_dir(&a, dir, "", -1);
    BT_CHECK(llama_hf_init_from(&b, dir, bt_cpu(), err, sizeof err) == 0, "import: %s", err);
    if (!b.flat) { llama_free(&a); return; }
    BT_CHECK(!memcmp(&a.cfg, &b.cfg, sizeof a.cfg), "config: L %d H %d Hkv %d C %d F %d V %d maxT %d tie %d eps %g theta %g factor %g",
             b.cfg.L, b.cfg.H, b.cfg.Hkv, b.cfg.C, b.cfg.F, b.cfg.V, b.cfg.maxT, b.cfg.tie, b.cfg.eps, b.cfg.rope.theta, b.cfg.rope.factor);
    /* every weight equal, but layer 1's q rows: those are the BF16 rounding of a's */
    const float *pa = (const float *)bt_data_ptr(a.flat), *pb = (const float *)bt_data_ptr(b.flat);
    int64_t q0 = a.layers[1].wqkv->offset - a.flat->offset, qn = (int64_t)a.cfg.C * a.cfg.C, diff = 0, bf_ok = 1;
    for (int64_t i = 0; i < a.num_params; i++) {
        if (i >= q0 && i < q0 + qn) {
            uint32_t u; memcpy(&u, &pa[i], 4);
            uint32_t r = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;   /* round to nearest even */
            float want; memcpy(&want, &r, 4);
            bf_ok &= pb[i] == want;
        } else diff += pa[i] != pb[i];
    }
    BT_CHECK(diff == 0 && bf_ok, "%lld weights differ; bf16 q_proj %s", (long long)diff, bf_ok ? "ok" : "wrong");
    llama_free(&a); llama_free(&b);
}

static void expect_import_error(const char *what, const char *dir, const char *want) {
    char err[1024] = "";
    llama m;
    int r = llama_hf_init_from(&m, dir, bt_cpu(), err, sizeof err);
    BT_CHECK(r == -1 && strstr(err, want), "%s: %d '%s', expected '%s'", what, r, err, want);
    if (bt_test_verbose()) printf("info: %s: %s\n", what, err);
    if (!r) llama_free(&m);
}
static void test_import_errors(void) {
    llama a;
    tiny_model(&a, tiny_config(0, 0), 61);
    char dir[600], path[700];
    /* 1: a tensor missing (index and file) */
    snprintf(dir, sizeof dir, "%s", tp("e_missing"));
    write_hf_dir(&a, dir, "", 1 + 9 + 7);   /* layer 1's up_proj */
    expect_import_error("missing tensor", dir, "no tensor 'model.layers.1.mlp.up_proj.weight' in its weight_map");
    /* 2: the config disagrees with the tensors: 4 key/value heads, the files hold 2 */
    snprintf(dir, sizeof dir, "%s", tp("e_heads"));
    write_hf_dir(&a, dir, "", -1);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = bt_test_read_file(path, NULL), *kv = strstr(text, "\"num_key_value_heads\": 2");
    if (kv) kv[23] = '4';
    bt_test_write_file(path, text, strlen(text));
    free(text);
    expect_import_error("kv heads", dir, "self_attn.k_proj.weight' is [16, 32], the config wants [32, 32]");
    /* 3: unsupported rope scaling, head_dim, a bias, a layer past L, a tied head that differs */
    struct { const char *name, *extra, *want; } cfgs[] = {
        {"e_yarn", "", "rope_scaling type \"yarn\" is not supported"},
        {"e_headdim", ", \"head_dim\": 16", "head_dim 16 is not hidden_size / num_attention_heads"},
        {"e_act", "", "hidden_act \"gelu\""},
        {"e_layers", "", "not part of a Llama of 1 layers"},
        {"e_tied", "", "lm_head.weight differs from model.embed_tokens.weight"},
        {"e_v5", ", \"rope_parameters\": {\"rope_type\": \"linear\", \"rope_theta\": 10000.0}", "rope_parameters type \"linear\""},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        snprintf(dir, sizeof dir, "%s", tp(cfgs[i].name));
        write_hf_dir(&a, dir, cfgs[i].extra, -1);
        snprintf(path, sizeof path, "%s/config.json", dir);
        text = bt_test_read_file(path, NULL);
        char *p;
        if (i == 0 && (p = strstr(text, "\"llama3\""))) memcpy(p, "\"yarn\"  ", 8);
        if (i == 2 && (p = strstr(text, "\"silu\""))) memcpy(p, "\"gelu\"", 6);
        if (i == 3 && (p = strstr(text, "\"num_hidden_layers\": 2"))) p[21] = '1';
        if (i == 4 && (p = strstr(text, "\"tie_word_embeddings\": false"))) memcpy(p, "\"tie_word_embeddings\": true ", 28);
        bt_test_write_file(path, text, strlen(text));
        free(text);
        expect_import_error(cfgs[i].name, dir, cfgs[i].want);
    }
    /* 4: an integer tensor, a shard name with a path, no config.json */
    snprintf(dir, sizeof dir, "%s", tp("e_int"));
    mkdir(dir, 0755);
    llama_hf_export(&a, dir, path, sizeof path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    {
        bt_ckpt_writer *w = bt_ckpt_writer_new();
        char name[160];
        bt_scope_begin();
        for (int i = 0; i < llama_hf_count(&a.cfg); i++) {
            bt_tensor *leaf; int64_t row0, rows;
            llama_hf_tensor(&a, i, name, sizeof name, &leaf, &row0, &rows);
            bt_tensor *v = bt_narrow(bt_view(bt_narrow(a.flat, 0, leaf->offset - a.flat->offset, bt_numel(leaf)), bt_shape_of(leaf)), 0, row0, rows);
            bt_ckpt_writer_add_tensor(w, name, i == 1 ? bt_cast(v, BT_I32) : v, 0, 0);
        }
        bt_ckpt_writer_save(w, path);
        bt_ckpt_writer_free(w);
        bt_scope_end();
    }
    expect_import_error("integer tensor", dir, "input_layernorm.weight' is I32: a weight must be F32, F64, BF16 or F16");
    snprintf(dir, sizeof dir, "%s", tp("e_index"));
    write_hf_dir(&a, dir, "", -1);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    const char *bad_index = "{\"weight_map\": {\"model.norm.weight\": \"../model-00001-of-00002.safetensors\"}}";
    bt_test_write_file(path, bad_index, strlen(bad_index));
    expect_import_error("index path", dir, "must be a file name in the directory");
    snprintf(dir, sizeof dir, "%s", tp("e_noconfig"));
    mkdir(dir, 0755);
    expect_import_error("no config.json", dir, "e_noconfig/config.json");
    llama_free(&a);
}

/* Meta's interleaved layout: rotating pairs (2i, 2i + 1) of W_meta x gives, permuted, what rotating
   halves (i, i + D/2) of llama_rows_from_meta(W_meta) x gives (bt_rope), and the inverse is exact */
static void test_meta_permutation(void) {
    int heads = 3, D = 8, C = 5, T = 4;
    float wm[24 * 5], wh[24 * 5], back[24 * 5];
    for (int i = 0; i < 24 * 5; i++) wm[i] = (float)(bt_philox_uniform(3, (uint64_t)i) - 0.5);
    llama_rows_from_meta(wm, wh, heads, D, C);
    llama_rows_to_meta(wh, back, heads, D, C);
    BT_CHECK(!memcmp(wm, back, sizeof wm), "to_meta(from_meta(w)) != w");
    float x[4 * 5];
    for (int i = 0; i < T * C; i++) x[i] = (float)(bt_philox_uniform(4, (uint64_t)i) - 0.5);
    bt_rope_opts o = {10000.0, 0, 0, 0, 0};
    float inv[4];
    bt_rope_inv_freq(&o, D, inv);
    double worst = 0;
    bt_scope_begin();
    bt_tensor *xh = bt_from_data(x, bt_shape2(T, C), BT_F32, bt_cpu());
    bt_tensor *qh = bt_rope(bt_view(bt_linear(xh, bt_from_data(wh, bt_shape2(24, C), BT_F32, bt_cpu()), NULL), bt_shape4(1, T, heads, D)), 10000.0, 0);
    const float *q = (const float *)bt_data_ptr(bt_contiguous(qh));
    for (int t = 0; t < T; t++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < D / 2; i++) {
                double a = (double)((float)t * inv[i]), m0 = 0, m1 = 0;   /* Meta: (x0 + i x1) e^{i a} */
                for (int k = 0; k < C; k++) { m0 += (double)wm[(h * D + 2 * i) * C + k] * x[t * C + k]; m1 += (double)wm[(h * D + 2 * i + 1) * C + k] * x[t * C + k]; }
                double r0 = m0 * cos(a) - m1 * sin(a), r1 = m1 * cos(a) + m0 * sin(a);
                double e0 = fabs(q[(t * heads + h) * D + i] - r0), e1 = fabs(q[(t * heads + h) * D + D / 2 + i] - r1);
                if (e0 > worst) worst = e0;
                if (e1 > worst) worst = e1;
            }
    bt_scope_end();
    BT_CHECK(worst < 1e-6, "Meta's interleaved rotation vs rotate_half on permuted rows: worst %.3e", worst);
}

/* a tiny Llama drives the loss on one short sequence to ~0 */
static void test_overfit(void) {
    llama m;
    llama_config c = llama_config_make(2, 4, 2, 32, 64, 64, 32);
    llama_build(&m, c, bt_cpu()); llama_init(&m, 3);
    int T = 16; int32_t x[17];
    random_ids(x, T + 1, 64, 42);
    bt_adamw opt; bt_adamw_init(&opt, m.params, m.n_params, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f);
    double first = 0, loss = 0;
    for (int step = 0; step < 150; step++) {
        bt_zero_(m.flat_grad);
        bt_scope_begin();
        bt_tensor *idx = bt_from_data(x, bt_shape2(1, T), BT_I32, bt_cpu()), *tgt = bt_from_data(x + 1, bt_shape2(1, T), BT_I32, bt_cpu());
        bt_tensor *l = llama_loss(&m, idx, tgt, BT_F32);
        loss = bt_item(l); if (step == 0) first = loss;
        bt_backward(l);
        bt_scope_end();
        bt_adamw_step(&opt, 1e-2f);
        if (loss < 0.05) break;
    }
    BT_CHECK(fabs(first - log(64.0)) < 0.3, "initial loss %.3f should be near ln(64) = %.3f", first, log(64.0));
    BT_CHECK(loss < 0.1, "overfit loss %.4f not below 0.1", loss);
    bt_adamw_free(&opt); llama_free(&m);
    BT_CHECK(bt_alloc_stats(bt_cpu()).allocated == 0, "leaked %zu bytes", bt_alloc_stats(bt_cpu()).allocated);
}

/* activation checkpointing per sublayer (llama.h's regions: bt_set_recompute's ATTN, MLP, BLOCK) and
   the RMSNorms' outputs remade (NORM): the same losses and every gradient the same bits as none over
   3 AdamW steps (GQA, llama3 RoPE) */
static void lrc_run(int flags, double *loss, float **grads) {
    llama m;
    llama_config c = llama_config_make(2, 4, 2, 32, 64, 64, 32);
    c.rope.factor = 8; c.rope.low_freq_factor = 1; c.rope.high_freq_factor = 4; c.rope.original_max_position_embeddings = 8;
    llama_build(&m, c, bt_cpu()); llama_init(&m, 5);
    bt_adamw opt; bt_adamw_init(&opt, m.params, m.n_params, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    int B = 3, T = 16; int32_t x[3 * 16 + 1];
    int old = bt_set_recompute(flags);
    for (int step = 0; step < 3; step++) {
        random_ids(x, B * T + 1, 64, 60 + step);
        bt_zero_(m.flat_grad);
        bt_scope_begin();
        bt_tensor *idx = bt_from_data(x, bt_shape2(B, T), BT_I32, bt_cpu()), *tgt = bt_from_data(x + 1, bt_shape2(B, T), BT_I32, bt_cpu());
        bt_tensor *l = llama_loss(&m, idx, tgt, BT_F32);
        bt_backward(l);
        loss[step] = bt_item(l);
        bt_scope_end();
        grads[step] = (float *)malloc(sizeof(float) * (size_t)m.flat_numel);
        bt_to_host(m.flat_grad, grads[step], BT_F32);
        bt_adamw_step(&opt, 1e-3f);
    }
    bt_set_recompute(old);
    bt_adamw_free(&opt); llama_free(&m);
}
static void test_recompute_modes(void) {
    static const struct { int flags; const char *name; } modes[] = {
        {BT_RECOMPUTE_ATTN, "attn"}, {BT_RECOMPUTE_MLP, "mlp"}, {BT_RECOMPUTE_BLOCK, "block"}, {BT_RECOMPUTE_ATTN | BT_RECOMPUTE_MLP, "attn+mlp"},
        {BT_RECOMPUTE_NORM, "norm"}, {BT_RECOMPUTE_NORM | BT_RECOMPUTE_MLP, "norm+mlp"}, {BT_RECOMPUTE_NORM | BT_RECOMPUTE_ATTN, "norm+attn"}};
    llama m;
    llama_build(&m, llama_config_make(2, 4, 2, 32, 64, 64, 32), bt_cpu());
    int64_t n = m.flat_numel;
    llama_free(&m);
    double l0[3], l1[3];
    float *g0[3], *g1[3];
    lrc_run(0, l0, g0);
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        lrc_run(modes[k].flags, l1, g1);
        int same = 1;
        for (int s = 0; s < 3; s++) same &= l0[s] == l1[s] && !memcmp(g0[s], g1[s], sizeof(float) * (size_t)n);
        BT_CHECK(same, "recompute %s: losses %.9g %.9g %.9g vs none's %.9g %.9g %.9g, or gradients differ", modes[k].name, l1[0], l1[1], l1[2],
                 l0[0], l0[1], l0[2]);
        for (int s = 0; s < 3; s++) free(g1[s]);
    }
    for (int s = 0; s < 3; s++) free(g0[s]);
}

/* NORM keeps neither RMSNorm's output (2 U a layer, U = B T C floats): the peak of a forward and
   backward at B 8, T 128, C 128, L 4 falls by at least (2 L - 1) U (one layer's remade output lives
   during its own backward) */
static void test_recompute_norm_memory(void) {
    llama m;
    llama_build(&m, llama_config_make(4, 4, 2, 128, 256, 64, 128), bt_cpu()); llama_init(&m, 5);
    enum { B = 8, T = 128 };
    int32_t *x = (int32_t *)malloc(sizeof(int32_t) * (B * T + 1));
    random_ids(x, B * T + 1, 64, 90);
    size_t peak[2]; double loss[2];
    for (int k = 0; k < 2; k++) {
        int old = bt_set_recompute(k ? BT_RECOMPUTE_NORM : 0);
        bt_zero_(m.flat_grad);
        bt_alloc_reset_peak(bt_cpu());
        bt_scope_begin();
        bt_tensor *idx = bt_from_data(x, bt_shape2(B, T), BT_I32, bt_cpu()), *tgt = bt_from_data(x + 1, bt_shape2(B, T), BT_I32, bt_cpu());
        bt_tensor *l = llama_loss(&m, idx, tgt, BT_F32);
        bt_backward(l);
        loss[k] = bt_item(l);
        bt_scope_end();
        peak[k] = bt_alloc_stats(bt_cpu()).peak_allocated;
        bt_set_recompute(old);
    }
    size_t U = (size_t)B * T * m.cfg.C * sizeof(float), want = (size_t)(2 * m.cfg.L - 1) * U;
    printf("recompute norm, L %d C %d B %d T %d: peak %.1f -> %.1f MiB (at least %.1f MiB less expected)\n", m.cfg.L, m.cfg.C, B, T,
           peak[0] / 1048576.0, peak[1] / 1048576.0, want / 1048576.0);
    BT_CHECK(loss[0] == loss[1], "loss %.9g with norm, %.9g without", loss[1], loss[0]);
    BT_CHECK(peak[0] >= peak[1] + want, "peak %zu B without, %zu B with norm: less than %zu B saved", peak[0], peak[1], want);
    free(x);
    llama_free(&m);
}

int main(void) {
    if (bt_test_dir_make("test_llama_model")) return 1;
    BT_RUN(test_config);
    BT_RUN(test_forward_reference);
    BT_RUN(test_gradients);
    BT_RUN(test_kv_cache);
    BT_RUN(test_sample_next);
    BT_RUN(test_export_roundtrip);
    BT_RUN(test_hf_sharded_dir);
    BT_RUN(test_import_errors);
    BT_RUN(test_meta_permutation);
    BT_RUN(test_overfit);
    BT_RUN(test_recompute_modes);
    BT_RUN(test_recompute_norm_memory);
    bt_test_dir_remove();
    return bt_test_summary("test_llama_model");
}
