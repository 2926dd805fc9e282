/* gpt2_io.h - GPT-2 model files: llm.c's fp32 layout, and Hugging Face's GPT2LMHeadModel
   (model.safetensors + config.json) read and written.

   USAGE
     #define GPT2_IO_IMPLEMENTATION in *one* C/CUDA file, then #include "gpt2_io.h". It needs
     gpt2.h (the model), bt_ckpt.h (safetensors and JSON) and bt_data.h (files written atomically).

     gpt2_config c;  gpt2 m;  char err[1024];
     if (gpt2_read_header("gpt2_124M.bin", &c, err, sizeof err)) { puts(err); ... }
     gpt2_build(&m, c, bt_cpu());
     gpt2_load_weights(&m, "gpt2_124M.bin", err, sizeof err);
     gpt2_hf_export(&m, "out_hf", err, sizeof err);   // transformers.GPT2LMHeadModel.from_pretrained("out_hf")

   Every reader checks what it reads (sizes, shapes, names, the config's bounds) before it
   allocates, and says what is wrong in err (the file, the field, what was expected); every
   writer writes through bt_atomic_file, so a failure never leaves a half-written file.
*/
#ifndef GPT2_IO_H
#define GPT2_IO_H
#include "gpt2.h"
#include "bt_ckpt.h"

/* llm.c's model file, version 3 (fp32): int32 header[256] = {20240326, 3, maxT, V, L, H, C, Vp,
   0...}, then the parameters in llm.c's order (gpt2.h, section 2). 0, or -1 with err. */
#define GPT2_MODEL_MAGIC 20240326
BTDEF int gpt2_read_header(const char *path, gpt2_config *cfg, char *err, size_t errlen);
BTDEF int gpt2_load_weights(gpt2 *m, const char *path, char *err, size_t errlen);
BTDEF int gpt2_save(gpt2 *m, const char *path, char *err, size_t errlen);

/* Hugging Face GPT-2: names PREFIX + wte.weight [V, C], wpe.weight [maxT, C], h.N.*, ln_f.*,
   PREFIX "transformer." ("" in older files), the head tied to wte (no lm_head.weight, or one equal
   to wte); its Conv1D weights are [in, out], ours [out, in]. */
/* the config of file f (read from path) from its tensors' shapes and config.json beside it (else
   the preset of that depth and width for n_head); prefix (16 bytes) receives the names' prefix */
BTDEF int gpt2_hf_config(bt_ckpt_file *f, const char *path, char *prefix, gpt2_config *c, char *err, size_t errlen);
/* every leaf of a whole model m (built with that config) from f: Conv1D weights transposed, wte's
   rows padded to Vp with zeros, any float dtype converted to f32 (an integer one refused) */
BTDEF int gpt2_hf_load(gpt2 *m, bt_ckpt_file *f, const char *path, const char *prefix, char *err, size_t errlen);
/* DIR/model.safetensors (f32, transformers' names, wte's real rows, no head) and DIR/config.json,
   never through a symbolic link at those names (refused) */
BTDEF int gpt2_hf_export(gpt2 *m, const char *dir, char *err, size_t errlen);
/* the Hugging Face name of leaf i of m (gpt2_build's order); 1 when the file holds its transpose */
BTDEF int gpt2_hf_name(const gpt2 *m, int i, const char *prefix, char *name, size_t n);
#endif /* GPT2_IO_H */

/* ============================================================================================== */
#ifdef GPT2_IO_IMPLEMENTATION
#ifndef GPT2_IO_IMPLEMENTATION_DONE
#define GPT2_IO_IMPLEMENTATION_DONE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- llm.c's model file ---- */
/* a model file opened for reading: a FIFO or directory is refused, never waited on */
static FILE *gpt2__open_model(const char *path, uint64_t *size, char *err, size_t errlen) {
    int fd = bt_input_open(path, size);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) { bt_msgf(err, errlen, "%s", fd < 0 ? bt_data_error() : strerror(errno)); if (fd >= 0) close(fd); }
    return f;
}
BTDEF int gpt2_read_header(const char *path, gpt2_config *cfg, char *err, size_t errlen) {
    uint64_t size;
    FILE *f = gpt2__open_model(path, &size, err, errlen);
    if (!f) return -1;
    int32_t h[256];
    size_t got = fread(h, sizeof(int32_t), 256, f);
    fclose(f);
    if (got != 256) { bt_msgf(err, errlen, "%s: too short for a model header (%zu of 1024 bytes)", path, got * 4); return -1; }
    if (h[0] != GPT2_MODEL_MAGIC) { bt_msgf(err, errlen, "%s: bad magic %d (expected %d, an llm.c/BluTrain model file)", path, h[0], GPT2_MODEL_MAGIC); return -1; }
    if (h[1] != 3) { bt_msgf(err, errlen, "%s: version %d (only 3, fp32, is read)", path, h[1]); return -1; }
    cfg->maxT = h[2]; cfg->V = h[3]; cfg->L = h[4]; cfg->H = h[5]; cfg->C = h[6]; cfg->Vp = h[7];
    if (gpt2_config_check(cfg, path, "header field ", err, errlen)) return -1;
    int64_t n = gpt2_num_params(cfg);
    if (size != 1024 + 4 * (uint64_t)n) {
        bt_msgf(err, errlen, "%s: the header's config (L %d, C %d, Vp %d, maxT %d) has %lld parameters (%llu bytes with the header), the file has %llu bytes",
                 path, cfg->L, cfg->C, cfg->Vp, cfg->maxT, (long long)n, (unsigned long long)(1024 + 4 * (uint64_t)n), (unsigned long long)size);
        return -1;
    }
    return 0;
}
BTDEF int gpt2_load_weights(gpt2 *m, const char *path, char *err, size_t errlen) {
    uint64_t size;
    FILE *f = gpt2__open_model(path, &size, err, errlen);
    if (!f) return -1;
    float *buf = (float *)malloc(sizeof(float) * (size_t)m->num_params), *mem = (float *)calloc((size_t)m->flat_numel, sizeof(float));
    if (!buf || !mem) { fclose(f); free(buf); free(mem); bt_msgf(err, errlen, "%s: out of host memory", path); return -1; }
    int ok = fseek(f, 1024, SEEK_SET) == 0 && fread(buf, sizeof(float), (size_t)m->num_params, f) == (size_t)m->num_params;
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (!ok || extra) {
        free(buf); free(mem);
        bt_msgf(err, errlen, "%s: expected exactly %lld parameters after the header", path, (long long)m->num_params);
        return -1;
    }
    gpt2_from_file_order(m, buf, mem);
    bt_tensor *host = bt_from_blob(mem, bt_shape1(m->flat_numel), BT_F32, bt_cpu());
    bt_copy_(m->flat, host);
    bt_release(host);
    free(buf); free(mem);
    return 0;
}
/* a symlink is written through; a device or FIFO is refused */
BTDEF int gpt2_save(gpt2 *m, const char *path, char *err, size_t errlen) {
    int32_t h[256] = {0};
    h[0] = GPT2_MODEL_MAGIC; h[1] = 3; h[2] = m->cfg.maxT; h[3] = m->cfg.V; h[4] = m->cfg.L;
    h[5] = m->cfg.H; h[6] = m->cfg.C; h[7] = m->cfg.Vp;
    float *buf = (float *)malloc(sizeof(float) * (size_t)m->num_params), *mem = (float *)malloc(sizeof(float) * (size_t)m->flat_numel);
    if (!buf || !mem) { free(buf); free(mem); bt_msgf(err, errlen, "%s: out of host memory", path); return -1; }
    bt_to_host(m->flat, mem, BT_F32);
    gpt2_to_file_order(m, mem, buf);
    free(mem);
    bt_atomic_file *f = bt_atomic_open(path);
    int ok = f && !bt_atomic_write(f, h, sizeof h) && !bt_atomic_write(f, buf, sizeof(float) * (size_t)m->num_params);
    free(buf);
    if (f && !ok) bt_atomic_abort(f);
    if (!ok || bt_atomic_commit(f)) { bt_msgf(err, errlen, "%s", bt_data_error()); return -1; }
    return 0;
}

/* ---- Hugging Face GPT-2 ---- */
static const struct { const char *name; int transpose; } gpt2__hf_layer[12] = {
    {"ln_1.weight", 0}, {"ln_1.bias", 0}, {"attn.c_attn.weight", 1}, {"attn.c_attn.bias", 0},
    {"attn.c_proj.weight", 1}, {"attn.c_proj.bias", 0}, {"ln_2.weight", 0}, {"ln_2.bias", 0},
    {"mlp.c_fc.weight", 1}, {"mlp.c_fc.bias", 0}, {"mlp.c_proj.weight", 1}, {"mlp.c_proj.bias", 0}};
BTDEF int gpt2_hf_name(const gpt2 *m, int i, const char *prefix, char *name, size_t n) {
    int L = m->cfg.L;
    if (i >= 2 && i < 2 + 12 * L) {
        snprintf(name, n, "%sh.%d.%s", prefix, (i - 2) / 12, gpt2__hf_layer[(i - 2) % 12].name);
        return gpt2__hf_layer[(i - 2) % 12].transpose;
    }
    snprintf(name, n, "%s%s", prefix, i == 0 ? "wte.weight" : i == 1 ? "wpe.weight" : i == 2 + 12 * L ? "ln_f.weight" : "ln_f.bias");
    return 0;
}
/* 1 when a GPT-2 file of L layers may hold `name`: ours, the attention's mask buffers of older
   transformers, a head */
static int gpt2__hf_known_name(const char *name, const char *prefix, int L) {
    size_t pl = strlen(prefix);
    int l, end = 0;
    if (!strcmp(name, "lm_head.weight")) return 1;
    if (strncmp(name, prefix, pl)) return 0;
    name += pl;
    if (!strcmp(name, "wte.weight") || !strcmp(name, "wpe.weight") || !strcmp(name, "ln_f.weight") || !strcmp(name, "ln_f.bias")) return 1;
    if (sscanf(name, "h.%d.%n", &l, &end) != 1 || end == 0 || l < 0 || l >= L) return 0;
    if (!strcmp(name + end, "attn.bias") || !strcmp(name + end, "attn.masked_bias")) return 1;
    for (int k = 0; k < 12; k++) if (!strcmp(name + end, gpt2__hf_layer[k].name)) return 1;
    return 0;
}
/* config.json beside the model file, parsed (*doc NULL when there is none; -1 on a bad one, or
   one that is there but cannot be read: a link to nowhere, a loop of links, no permission) */
static int gpt2__hf_config_json(const char *model_path, bt_json_doc **doc, char *err, size_t errlen) {
    char path[4096];
    const char *slash = strrchr(model_path, '/');
    int dl = slash ? (int)(slash - model_path) : 0;
    snprintf(path, sizeof path, "%.*s%sconfig.json", dl, model_path, slash ? "/" : "");
    *doc = NULL;
    uint64_t size = 0;
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        bt_msgf(err, errlen, "%s: cannot read it: %s", path, strerror(errno)); return -1;
    }
    int fd = bt_input_open(path, &size);
    if (fd < 0) { bt_msgf(err, errlen, "%s", bt_data_error()); return -1; }
    char *text = size <= (1u << 20) ? (char *)malloc((size_t)size + 1) : NULL;
    ssize_t got = text ? pread(fd, text, (size_t)size, 0) : -1;
    close(fd);
    if (got != (ssize_t)size) { free(text); bt_msgf(err, errlen, "%.500s: cannot read it (%llu bytes; at most 1 MiB)", path, (unsigned long long)size); return -1; }
    *doc = bt_json_parse(text, (size_t)size, 0);
    free(text);
    if (!*doc) { bt_msgf(err, errlen, "%s: %s", path, bt_data_error()); return -1; }
    return 0;
}
/* n_head from config.json (its other fields must agree with the tensors), else from the preset
   of the same depth and width */
static int gpt2__hf_heads(const char *src, gpt2_config *c, char *err, size_t errlen) {
    bt_json_doc *doc;
    if (gpt2__hf_config_json(src, &doc, err, errlen)) return -1;
    if (!doc) {
        for (int i = 0; i < gpt2_npresets; i++)
            if (gpt2_presets[i].L == c->L && gpt2_presets[i].C == c->C) { c->H = gpt2_presets[i].H; return 0; }
        bt_msgf(err, errlen, "%.500s: no config.json beside it to give the number of heads (n_head), and no preset has L %d and C %d", src, c->L, c->C);
        return -1;
    }
    const bt_json *root = bt_json_root(doc), *act = bt_json_get(root, "activation_function");
    static const char *const keys[5] = {"n_head", "n_layer", "n_embd", "n_positions", "vocab_size"};
    const int want[5] = {0, c->L, c->C, c->maxT, c->V};
    int r = 0;
    for (int i = 0; i < 5 && !r; i++) {
        const bt_json *v = bt_json_get(root, keys[i]);
        int64_t x = 0;
        if ((!v && i == 0) || (v && (bt_json_i64(v, &x) || x < 1 || x > INT32_MAX))) {
            bt_msgf(err, errlen, "config.json beside %.500s: \"%s\" is %s", src, keys[i], v ? "not a positive integer" : "missing");
            r = -1;
        } else if (v && i == 0) c->H = (int)x;
        else if (v && x != want[i]) {
            bt_msgf(err, errlen, "config.json beside %.500s says %s %lld, the tensors %d", src, keys[i], (long long)x, want[i]);
            r = -1;
        }
    }
    if (!r && act && (act->type != BT_JSON_STRING || (strcmp(act->str, "gelu_new") && strcmp(act->str, "gelu_pytorch_tanh")))) {
        bt_msgf(err, errlen, "config.json beside %.500s: activation_function \"%s\": our GELU is the tanh form (gelu_new)", src,
                 act->type == BT_JSON_STRING ? act->str : "?");
        r = -1;
    }
    bt_json_free(doc);
    return r;
}
BTDEF int gpt2_hf_config(bt_ckpt_file *f, const char *path, char *prefix, gpt2_config *c, char *err, size_t errlen) {
    char name[160];
    snprintf(prefix, 16, "%s", bt_ckpt_find(f, "transformer.wte.weight") ? "transformer." : "");
    snprintf(name, sizeof name, "%swte.weight", prefix);
    const bt_ckpt_info *wte = bt_ckpt_find(f, name), *wpe;
    snprintf(name, sizeof name, "%swpe.weight", prefix);
    wpe = bt_ckpt_find(f, name);
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1]) {
        bt_msgf(err, errlen, "%.500s: not a GPT-2 model in Hugging Face's layout (transformer.wte.weight [V, C] and "
                 "transformer.wpe.weight [maxT, C] expected), nor a train_gpt2 checkpoint", path);
        return -1;
    }
    int L = 0;
    for (; L < 4096; L++) {
        snprintf(name, sizeof name, "%sh.%d.ln_1.weight", prefix, L);
        if (!bt_ckpt_find(f, name)) break;
    }
    if (wte->shape[0] > INT32_MAX || wpe->shape[0] > INT32_MAX || wte->shape[1] > INT32_MAX) {
        bt_msgf(err, errlen, "%.500s: wte or wpe has more than 2^31 rows or columns", path); return -1;
    }
    *c = gpt2_config_make(L, 1, (int)wte->shape[1], (int)wpe->shape[0], (int)wte->shape[0]);
    if (L == 0) { bt_msgf(err, errlen, "%.500s: no layers (%sh.0.ln_1.weight)", path, prefix); return -1; }
    for (int i = 0; i < bt_ckpt_count(f); i++)
        if (!gpt2__hf_known_name(bt_ckpt_info_at(f, i)->name, prefix, L)) {
            bt_msgf(err, errlen, "%.500s: tensor '%s' is not part of a GPT-2 of %d layers", path, bt_ckpt_info_at(f, i)->name, L);
            return -1;
        }
    if (gpt2__hf_heads(path, c, err, errlen)) return -1;
    return gpt2_config_check(c, path, "", err, errlen);
}
/* a weight of the file in a float dtype (F32 F64 BF16 F16: converted); an integer one is not a
   weight. 0 also when it is absent (the load names that) */
static int gpt2__hf_float(bt_ckpt_file *f, const char *path, const char *name, char *err, size_t errlen) {
    const bt_ckpt_info *t = bt_ckpt_find(f, name);
    if (!t || t->dtype == BT_CKPT_F32 || t->dtype == BT_CKPT_F64 || t->dtype == BT_CKPT_BF16 || t->dtype == BT_CKPT_F16) return 0;
    bt_msgf(err, errlen, "%s: tensor '%s' is %s: a weight must be a float type (F32, F64, BF16 or F16)", path, name, bt_ckpt_dtype_name(t->dtype));
    return -1;
}
/* a head (lm_head.weight) in the file must be wte itself: ours is tied */
static int gpt2__hf_check_tied_head(gpt2 *m, bt_ckpt_file *f, const char *path, const char *prefix, char *err, size_t errlen) {
    const bt_ckpt_info *h = bt_ckpt_find(f, "lm_head.weight");
    int V = m->cfg.V, C = m->cfg.C, r = 0;
    if (!h) return 0;
    if (gpt2__hf_float(f, path, "lm_head.weight", err, errlen)) return -1;
    bt_scope_begin();
    bt_tensor *head = bt_empty(bt_shape2(V, C), BT_F32, bt_cpu()), *wte = bt_empty(bt_shape2(V, C), BT_F32, bt_cpu());
    bt_to_host(bt_narrow(m->wte, 0, 0, V), bt_data_ptr(wte), BT_F32);
    if (bt_ckpt_load(f, "lm_head.weight", head, BT_CKPT_CONVERT)) { bt_msgf(err, errlen, "%s", bt_ckpt_error()); r = -1; }
    else if (memcmp(bt_data_ptr(head), bt_data_ptr(wte), sizeof(float) * (size_t)V * C)) {
        bt_msgf(err, errlen, "%.500s: lm_head.weight differs from %swte.weight: our head is the embedding itself (tie_word_embeddings)", path, prefix);
        r = -1;
    }
    bt_scope_end();
    return r;
}
BTDEF int gpt2_hf_load(gpt2 *m, bt_ckpt_file *f, const char *path, const char *prefix, char *err, size_t errlen) {
    char name[160];
    int r = 0;
    for (int i = 0; i < m->n_params && !r; i++) {
        bt_tensor *p = m->params[i];
        int flags = BT_CKPT_CONVERT | (gpt2_hf_name(m, i, prefix, name, sizeof name) ? BT_CKPT_TRANSPOSE : 0) | (i == 0 ? BT_CKPT_PAD_ROWS : 0);
        if (gpt2__hf_float(f, path, name, err, errlen)) return -1;
        bt_scope_begin();   /* into a view of the flat buffer: the leaf itself is autograd's */
        bt_tensor *dst = bt_view(bt_narrow(m->flat, 0, p->offset - m->flat->offset, bt_numel(p)), bt_shape_of(p));
        if (bt_ckpt_load(f, name, dst, flags)) { bt_msgf(err, errlen, "%s", bt_ckpt_error()); r = -1; }
        bt_scope_end();
    }
    return r ? -1 : gpt2__hf_check_tied_head(m, f, path, prefix, err, errlen);
}
BTDEF int gpt2_hf_export(gpt2 *m, const char *dir, char *err, size_t errlen) {
    char path[4096], name[160];
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    int bad = !w;
    for (int i = 0; i < m->n_params && !bad; i++) {
        int tr = gpt2_hf_name(m, i, "transformer.", name, sizeof name);
        bad = bt_ckpt_writer_add_tensor(w, name, m->params[i], tr ? BT_CKPT_TRANSPOSE : 0, i == 0 ? m->cfg.V : 0) != 0;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!bad) bad = bt_ckpt_writer_save_flags(w, path, BT_OUTPUT_NOFOLLOW) != 0;
    bt_ckpt_writer_free(w);
    if (bad) { bt_msgf(err, errlen, "%s", bt_ckpt_error()); return -1; }
    const gpt2_config *c = &m->cfg;
    bt_json_writer j;
    bt_json_writer_init(&j, 2);
    bt_json_object(&j, NULL);
    bt_json_array(&j, "architectures"); bt_json_string(&j, NULL, "GPT2LMHeadModel"); bt_json_end(&j);
    bt_json_string(&j, "model_type", "gpt2");
    bt_json_int(&j, "vocab_size", c->V); bt_json_int(&j, "n_positions", c->maxT); bt_json_int(&j, "n_ctx", c->maxT);
    bt_json_int(&j, "n_embd", c->C); bt_json_int(&j, "n_layer", c->L); bt_json_int(&j, "n_head", c->H);
    bt_json_null(&j, "n_inner");                              /* 4 n_embd */
    bt_json_string(&j, "activation_function", "gelu_new");    /* the tanh form, as bt_gelu */
    bt_json_number(&j, "layer_norm_epsilon", 1e-5);
    bt_json_number(&j, "initializer_range", 0.02);
    bt_json_number(&j, "resid_pdrop", 0.0); bt_json_number(&j, "embd_pdrop", 0.0); bt_json_number(&j, "attn_pdrop", 0.0);
    bt_json_bool(&j, "scale_attn_weights", 1);
    bt_json_bool(&j, "tie_word_embeddings", 1);
    bt_json_bool(&j, "use_cache", 1);
    if (c->V > BT_EOT) { bt_json_int(&j, "bos_token_id", BT_EOT); bt_json_int(&j, "eos_token_id", BT_EOT); }
    bt_json_string(&j, "dtype", "float32");
    bt_json_end(&j);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int r = bt_json_save_flags(&j, path, BT_OUTPUT_NOFOLLOW);
    bt_json_writer_free(&j);
    if (r) { bt_msgf(err, errlen, "%s", bt_data_error()); return -1; }
    return 0;
}
#endif /* GPT2_IO_IMPLEMENTATION_DONE */
#endif /* GPT2_IO_IMPLEMENTATION */
