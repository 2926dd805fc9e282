/* llama_io.h - Hugging Face LlamaForCausalLM directories read into a llama (llama.h) and written
   from one: config.json and model.safetensors, or shards with model.safetensors.index.json. v0.1.

   USAGE
     #define LLAMA_IO_IMPLEMENTATION in *one* C/CUDA file (bt_all.h does it with BT_ALL_IMPLEMENTATION),
     then #include "llama_io.h". It needs llama.h, bt_ckpt.h (safetensors) and bt_data.h (JSON, files
     written atomically).

     llama m;  char err[1024];
     if (llama_hf_init_from(&m, "Llama-3.2-1B", bt_cuda_device(0), err, sizeof err)) { puts(err); ... }
     ...
     llama_hf_export(&m, "out_hf", err, sizeof err);   // LlamaForCausalLM.from_pretrained("out_hf")

   THE DIRECTORY (what save_pretrained writes)
     config.json    hidden_size C, intermediate_size F, num_hidden_layers L, num_attention_heads H,
                    num_key_value_heads Hkv (absent: H), vocab_size V, max_position_embeddings maxT,
                    rms_norm_eps (absent: 1e-6, LlamaConfig's default), rope_theta (absent: 10000),
                    rope_scaling (null, or {"rope_type" (or "type"): "llama3", factor, low_freq_factor,
                    high_freq_factor, original_max_position_embeddings}; "default" is none; any other
                    type is refused), tie_word_embeddings (absent: false), head_dim (absent or null,
                    else it must be C / H). transformers 5's "rope_parameters" object (rope_type,
                    rope_theta and the llama3 fields) is read when present. model_type must be "llama",
                    hidden_act "silu", attention_bias and mlp_bias false, when they are there.
     model.safetensors, or model-0000i-of-0000n.safetensors with model.safetensors.index.json whose
                    "weight_map" names each tensor's shard (a plain file name in the directory).
     Tensors (any of F32, F64, BF16, F16: converted to our fp32 buffer):
       model.embed_tokens.weight                 [V, C]            -> emb (rows V..Vp zero)
       model.layers.N.input_layernorm.weight     [C]               -> attn_norm
       model.layers.N.self_attn.q_proj.weight    [H D, C]          -> wqkv rows [0, H D)
       model.layers.N.self_attn.k_proj.weight    [Hkv D, C]        -> wqkv rows [H D, (H + Hkv) D)
       model.layers.N.self_attn.v_proj.weight    [Hkv D, C]        -> wqkv rows [(H + Hkv) D, (H + 2 Hkv) D)
       model.layers.N.self_attn.o_proj.weight    [C, H D]          -> wo
       model.layers.N.post_attention_layernorm.weight [C]          -> mlp_norm
       model.layers.N.mlp.gate_proj.weight       [F, C]            -> w13 rows [0, F)
       model.layers.N.mlp.up_proj.weight         [F, C]            -> w13 rows [F, 2F)
       model.layers.N.mlp.down_proj.weight       [C, F]            -> w2
       model.norm.weight                         [C]               -> norm
       lm_head.weight                            [V, C]            -> head (untied); when tied it may
                                                                      be absent, else equal the embedding
     model.layers.N.self_attn.rotary_emb.inv_freq (older files) is ignored; any other tensor (a bias,
     a layer past L) is an error. Every error names the file and the tensor or the config field.

   THE Q/K PERMUTATION
     Meta's original checkpoints (consolidated.*.pth) rotate interleaved pairs (2i, 2i + 1) of each
     head: they apply RoPE as a complex multiply. transformers' Llama rotates the halves (i, i + D/2)
     (rotate_half), and its convert_llama_weights_to_hf.py permutes the rows of wq and wk once so that
     the two give the same attention: within each head, HF row a D/2 + i (a = 0, 1; i < D/2) is Meta
     row 2i + a. Every checkpoint on the Hugging Face hub in the LlamaForCausalLM layout (model.*
     names) is already in that rotate_half layout. bt_rope is rotate_half too, so these files load
     with no permutation, and our exports need none. Only Meta's original layout needs
     llama_rows_from_meta (q with H heads, k with Hkv heads; v, o and the MLP are the same in both),
     and llama_rows_to_meta is its inverse. (The scores q.k are unchanged by the permutation: q and
     k are permuted alike and RoPE commutes with it.)

   Readers check what they read before they allocate; writers go through bt_atomic_file (a failure
   never leaves a half-written file) and refuse a symbolic link at the names they write.
*/
#ifndef LLAMA_IO_H
#define LLAMA_IO_H
#include "llama.h"
#include "bt_ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* DIR/config.json into c (Vp from V; checked with llama_config_check). path may be the directory or
   a .safetensors file in it. 0, or -1 with err. */
BTDEF int llama_hf_config(const char *path, llama_config *c, char *err, size_t errlen);
/* the safetensors of a directory: model.safetensors, or the shards that model.safetensors.index.json
   names (the index wins when both are there); a .safetensors path opens that file alone */
typedef struct llama_hf_files llama_hf_files;
BTDEF llama_hf_files *llama_hf_open(const char *path, char *err, size_t errlen);
BTDEF void llama_hf_close(llama_hf_files *f);   /* NULL is a no-op */
/* every parameter of m (built with the config of the same directory) from f: q/k/v stacked into
   wqkv, gate/up into w13; shapes checked against m's config first */
BTDEF int llama_hf_load(llama *m, llama_hf_files *f, char *err, size_t errlen);
/* config, build on dev, load: train_gpt2's --init-from for a Llama. On failure m is freed. */
BTDEF int llama_hf_init_from(llama *m, const char *path, bt_device dev, char *err, size_t errlen);
/* DIR/model.safetensors (f32, transformers' names, the real V rows, no lm_head when tied) and
   DIR/config.json (LlamaForCausalLM, torch_dtype float32) */
BTDEF int llama_hf_export(llama *m, const char *dir, char *err, size_t errlen);
BTDEF int llama_hf_write_config(const llama_config *c, const char *path, char *err, size_t errlen);
/* the HF tensors of m added to w, named prefix + transformers' name: views of the weights, or of
   their gradients (grads = 1) */
BTDEF int llama_hf_add_tensors(llama *m, bt_ckpt_writer *w, const char *prefix, int grads);
/* the number of HF tensors of a config, and the i-th's name and where it lives: leaf (the llama's
   parameter), rows [row0, row0 + rows) of it */
BTDEF int llama_hf_count(const llama_config *c);
BTDEF void llama_hf_tensor(llama *m, int i, char *name, size_t n, bt_tensor **leaf, int64_t *row0, int64_t *rows);
/* Meta's interleaved q/k rows <-> transformers' rotate_half rows, for one [heads D, cols] matrix
   (row-major f32; in and out must not overlap). See THE Q/K PERMUTATION. */
BTDEF void llama_rows_from_meta(const float *meta, float *hf, int heads, int D, int64_t cols);
BTDEF void llama_rows_to_meta(const float *hf, float *meta, int heads, int D, int64_t cols);

#ifdef __cplusplus
}
#endif
#endif /* LLAMA_IO_H */

/* ============================================================================================== */
#ifdef LLAMA_IO_IMPLEMENTATION
#ifndef LLAMA_IO_IMPLEMENTATION_DONE
#define LLAMA_IO_IMPLEMENTATION_DONE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- names ---- */
static const char *const llama__hf_layer_names[9] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight"};
BTDEF int llama_hf_count(const llama_config *c) { return 2 + 9 * c->L + (c->tie ? 0 : 1); }
BTDEF void llama_hf_tensor(llama *m, int i, char *name, size_t n, bt_tensor **leaf, int64_t *row0, int64_t *rows) {
    const llama_config *c = &m->cfg;
    int64_t D = c->C / c->H, qr = (int64_t)c->H * D, kr = (int64_t)c->Hkv * D;
    *row0 = 0;
    if (i == 0 || i >= 1 + 9 * c->L) {
        int emb = i == 0, norm = i == 1 + 9 * c->L;
        snprintf(name, n, "%s", emb ? "model.embed_tokens.weight" : norm ? "model.norm.weight" : "lm_head.weight");
        *leaf = emb ? m->emb : norm ? m->norm : m->head;
        *rows = norm ? c->C : c->V;
        return;
    }
    int l = (i - 1) / 9, k = (i - 1) % 9;
    llama_layer *y = &m->layers[l];
    snprintf(name, n, "model.layers.%d.%s", l, llama__hf_layer_names[k]);
    bt_tensor *const where[9] = {y->attn_norm, y->wqkv, y->wqkv, y->wqkv, y->wo, y->mlp_norm, y->w13, y->w13, y->w2};
    const int64_t r0[9] = {0, 0, qr, qr + kr, 0, 0, 0, c->F, 0}, nr[9] = {c->C, qr, kr, kr, c->C, c->C, c->F, c->F, c->C};
    *leaf = where[k]; *row0 = r0[k]; *rows = nr[k];
}
/* rows [row0, row0 + rows) of leaf as a view of flat (or flat_grad): outside autograd */
static bt_tensor *llama__hf_rows(llama *m, bt_tensor *leaf, int64_t row0, int64_t rows, int grads) {
    bt_tensor *buf = grads ? m->flat_grad : m->flat;
    bt_tensor *v = bt_view(bt_narrow(buf, 0, leaf->offset - m->flat->offset, bt_numel(leaf)), bt_shape_of(leaf));
    return bt_narrow(v, 0, row0, rows);
}
/* 1 when name is a tensor a Llama of L layers may hold that we ignore (rotary buffers of older files) */
static int llama__hf_ignored(const char *name, int L) {
    int l, end = 0;
    return sscanf(name, "model.layers.%d.%n", &l, &end) == 1 && end > 0 && l >= 0 && l < L &&
           !strcmp(name + end, "self_attn.rotary_emb.inv_freq");
}
/* the index of name among the HF tensors of c, or -1 */
static int llama__hf_index(const llama_config *c, const char *name) {
    int l, end = 0;
    if (!strcmp(name, "model.embed_tokens.weight")) return 0;
    if (!strcmp(name, "model.norm.weight")) return 1 + 9 * c->L;
    if (!strcmp(name, "lm_head.weight")) return 2 + 9 * c->L;   /* also when tied: checked by the load */
    if (sscanf(name, "model.layers.%d.%n", &l, &end) != 1 || end == 0 || l < 0 || l >= c->L) return -1;
    for (int k = 0; k < 9; k++) if (!strcmp(name + end, llama__hf_layer_names[k])) return 1 + 9 * l + k;
    return -1;
}

/* ---- Meta's interleaved rows ---- */
BTDEF void llama_rows_from_meta(const float *meta, float *hf, int heads, int D, int64_t cols) {
    for (int h = 0; h < heads; h++)
        for (int a = 0; a < 2; a++)
            for (int i = 0; i < D / 2; i++)
                memcpy(hf + ((int64_t)h * D + a * (D / 2) + i) * cols, meta + ((int64_t)h * D + 2 * i + a) * cols, sizeof(float) * (size_t)cols);
}
BTDEF void llama_rows_to_meta(const float *hf, float *meta, int heads, int D, int64_t cols) {
    for (int h = 0; h < heads; h++)
        for (int a = 0; a < 2; a++)
            for (int i = 0; i < D / 2; i++)
                memcpy(meta + ((int64_t)h * D + 2 * i + a) * cols, hf + ((int64_t)h * D + a * (D / 2) + i) * cols, sizeof(float) * (size_t)cols);
}

/* ---- JSON files ---- */
/* dir of path: path itself when it is a directory, else what precedes its last '/' */
static void llama__dir_of(const char *path, char *dir, size_t n) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) { snprintf(dir, n, "%s", path); return; }
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, n, "%.*s", (int)(slash - path), path);
    else snprintf(dir, n, ".");
}
/* a JSON file of at most maxb bytes, parsed: NULL with err */
static bt_json_doc *llama__read_json(const char *path, size_t maxb, char *err, size_t errlen) {
    uint64_t size = 0;
    int fd = bt_input_open(path, &size);
    if (fd < 0) { bt_msgf(err, errlen, "%s", bt_data_error()); return NULL; }
    char *text = size <= maxb ? (char *)malloc((size_t)size + 1) : NULL;
    ssize_t got = text ? pread(fd, text, (size_t)size, 0) : -1;
    close(fd);
    if (got != (ssize_t)size) {
        free(text);
        bt_msgf(err, errlen, "%s: cannot read it (%llu bytes; at most %zu)", path, (unsigned long long)size, maxb);
        return NULL;
    }
    bt_json_doc *doc = bt_json_parse(text, (size_t)size, 0);
    free(text);
    if (!doc) bt_msgf(err, errlen, "%s: %s", path, bt_data_error());
    return doc;
}
/* member key of obj as a positive int (absent: def, or an error when def < 0) */
static int llama__json_int(const bt_json *obj, const char *key, int def, int *out, const char *src, char *err, size_t errlen) {
    const bt_json *v = bt_json_get(obj, key);
    int64_t x = 0;
    if (!v || v->type == BT_JSON_NULL) {
        if (def >= 0) { *out = def; return 0; }
        bt_msgf(err, errlen, "%s: \"%s\" is missing", src, key);
        return -1;
    }
    if (bt_json_i64(v, &x) || x < 1 || x > INT32_MAX) { bt_msgf(err, errlen, "%s: \"%s\" is not a positive integer", src, key); return -1; }
    *out = (int)x;
    return 0;
}
static int llama__json_num(const bt_json *obj, const char *key, double def, double *out, const char *src, char *err, size_t errlen) {
    const bt_json *v = bt_json_get(obj, key);
    if (!v || v->type == BT_JSON_NULL) {
        if (def == def) { *out = def; return 0; }
        bt_msgf(err, errlen, "%s: \"%s\" is missing", src, key);
        return -1;
    }
    if (v->type != BT_JSON_NUMBER) { bt_msgf(err, errlen, "%s: \"%s\" is not a number", src, key); return -1; }
    *out = v->num;
    return 0;
}
/* false (0) or true (1) or absent (def); -1 when it is something else */
static int llama__json_bool(const bt_json *obj, const char *key, int def) {
    const bt_json *v = bt_json_get(obj, key);
    return !v ? def : v->type == BT_JSON_TRUE ? 1 : v->type == BT_JSON_FALSE ? 0 : -1;
}
/* rope_scaling (v4) or rope_parameters (v5): "default" or "llama3"; type_key the member naming it */
static int llama__rope_from_json(const bt_json *r, llama_config *c, const char *src, const char *what, char *err, size_t errlen) {
    const bt_json *t = bt_json_get(r, "rope_type");
    if (!t) t = bt_json_get(r, "type");
    if (r->type != BT_JSON_OBJECT || !t || t->type != BT_JSON_STRING) {
        bt_msgf(err, errlen, "%s: \"%s\" must be null or an object with a string \"rope_type\"", src, what);
        return -1;
    }
    if (bt_json_get(r, "rope_theta") && llama__json_num(r, "rope_theta", 0, &c->rope.theta, src, err, errlen)) return -1;
    if (!strcmp(t->str, "default")) return 0;
    if (strcmp(t->str, "llama3")) {
        bt_msgf(err, errlen, "%s: %s type \"%s\" is not supported (only \"llama3\" and \"default\")", src, what, t->str);
        return -1;
    }
    int orig = 0;
    double nan = NAN;
    if (llama__json_num(r, "factor", nan, &c->rope.factor, src, err, errlen) ||
        llama__json_num(r, "low_freq_factor", nan, &c->rope.low_freq_factor, src, err, errlen) ||
        llama__json_num(r, "high_freq_factor", nan, &c->rope.high_freq_factor, src, err, errlen) ||
        llama__json_int(r, "original_max_position_embeddings", -1, &orig, src, err, errlen)) return -1;
    c->rope.original_max_position_embeddings = orig;
    return 0;
}
BTDEF int llama_hf_config(const char *path, llama_config *c, char *err, size_t errlen) {
    char dir[4096], src[4200];
    llama__dir_of(path, dir, sizeof dir);
    snprintf(src, sizeof src, "%s/config.json", dir);
    bt_json_doc *doc = llama__read_json(src, 1u << 20, err, errlen);
    if (!doc) return -1;
    const bt_json *root = bt_json_root(doc);
    int r = -1;
    memset(c, 0, sizeof *c);
    if (root->type != BT_JSON_OBJECT) { bt_msgf(err, errlen, "%s: not a JSON object", src); goto done; }
    {
        const bt_json *mt = bt_json_get(root, "model_type"), *act = bt_json_get(root, "hidden_act");
        if (mt && (mt->type != BT_JSON_STRING || strcmp(mt->str, "llama"))) {
            bt_msgf(err, errlen, "%s: model_type \"%s\": a LlamaForCausalLM (\"llama\") is expected", src, mt->type == BT_JSON_STRING ? mt->str : "?");
            goto done;
        }
        if (act && (act->type != BT_JSON_STRING || strcmp(act->str, "silu"))) {
            bt_msgf(err, errlen, "%s: hidden_act \"%s\": our MLP is SwiGLU (\"silu\")", src, act->type == BT_JSON_STRING ? act->str : "?");
            goto done;
        }
        static const char *const nobias[2] = {"attention_bias", "mlp_bias"};
        for (int i = 0; i < 2; i++)
            if (llama__json_bool(root, nobias[i], 0) != 0) { bt_msgf(err, errlen, "%s: \"%s\" must be false (our Llama has no biases)", src, nobias[i]); goto done; }
        int tie = llama__json_bool(root, "tie_word_embeddings", 0);
        if (tie < 0) { bt_msgf(err, errlen, "%s: \"tie_word_embeddings\" is not a boolean", src); goto done; }
        if (llama__json_int(root, "hidden_size", -1, &c->C, src, err, errlen) ||
            llama__json_int(root, "intermediate_size", -1, &c->F, src, err, errlen) ||
            llama__json_int(root, "num_hidden_layers", -1, &c->L, src, err, errlen) ||
            llama__json_int(root, "num_attention_heads", -1, &c->H, src, err, errlen) ||
            llama__json_int(root, "num_key_value_heads", c->H, &c->Hkv, src, err, errlen) ||
            llama__json_int(root, "vocab_size", -1, &c->V, src, err, errlen) ||
            llama__json_int(root, "max_position_embeddings", -1, &c->maxT, src, err, errlen) ||
            llama__json_num(root, "rms_norm_eps", 1e-6, &c->eps, src, err, errlen) ||
            llama__json_num(root, "rope_theta", 10000.0, &c->rope.theta, src, err, errlen)) goto done;
        c->tie = tie;
        c->Vp = (int)(((int64_t)c->V + 127) / 128 * 128);
        int hd = 0;
        if (llama__json_int(root, "head_dim", 0, &hd, src, err, errlen)) goto done;
        if (hd && (int64_t)hd * c->H != c->C) {
            bt_msgf(err, errlen, "%s: head_dim %d is not hidden_size / num_attention_heads = %d / %d (a head dim apart from C / H is not supported)",
                    src, hd, c->C, c->H);
            goto done;
        }
        const bt_json *rs = bt_json_get(root, "rope_scaling"), *rp = bt_json_get(root, "rope_parameters");
        if (rs && rs->type != BT_JSON_NULL && llama__rope_from_json(rs, c, src, "rope_scaling", err, errlen)) goto done;
        if (rp && rp->type != BT_JSON_NULL && llama__rope_from_json(rp, c, src, "rope_parameters", err, errlen)) goto done;
        r = llama_config_check(c, src, err, errlen);
    }
done:
    bt_json_free(doc);
    return r;
}

/* ---- the safetensors files ---- */
struct llama_hf_files {
    int n;                      /* files */
    bt_ckpt_file **f;
    char **path;
    int n_map;                  /* weight_map entries (0 without an index) */
    char **map_name; int *map_file;
    char index[4200];           /* the index's path, "" without one */
};
BTDEF void llama_hf_close(llama_hf_files *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) { bt_ckpt_close(f->f[i]); free(f->path[i]); }
    for (int i = 0; i < f->n_map; i++) free(f->map_name[i]);
    free(f->f); free(f->path); free(f->map_name); free(f->map_file); free(f);
}
/* open dir/name as file number f->n */
static int llama__hf_add_file(llama_hf_files *f, const char *dir, const char *name, char *err, size_t errlen) {
    char path[8400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    bt_ckpt_file **nf = (bt_ckpt_file **)realloc(f->f, sizeof(*nf) * (size_t)(f->n + 1));
    if (nf) f->f = nf;
    char **np = nf ? (char **)realloc(f->path, sizeof(*np) * (size_t)(f->n + 1)) : NULL;
    if (np) f->path = np;
    if (!nf || !np || !(f->path[f->n] = strdup(path))) { bt_msgf(err, errlen, "%s: out of host memory", path); return -1; }
    if (!(f->f[f->n] = bt_ckpt_open(path, 0))) { free(f->path[f->n]); bt_msgf(err, errlen, "%s", bt_ckpt_error()); return -1; }
    f->n++;
    return 0;
}
/* model.safetensors.index.json: every weight_map value a plain file name in dir, each opened once */
static int llama__hf_read_index(llama_hf_files *f, const char *dir, char *err, size_t errlen) {
    bt_json_doc *doc = llama__read_json(f->index, 64u << 20, err, errlen);
    if (!doc) return -1;
    const bt_json *map = bt_json_get(bt_json_root(doc), "weight_map");
    int r = 0;
    if (!map || map->type != BT_JSON_OBJECT || map->n == 0) { bt_msgf(err, errlen, "%s: no \"weight_map\" object of tensor -> file", f->index); r = -1; }
    else {
        f->map_name = (char **)calloc(map->n, sizeof(char *));
        f->map_file = (int *)calloc(map->n, sizeof(int));
        if (!f->map_name || !f->map_file) { bt_msgf(err, errlen, "%s: out of host memory", f->index); r = -1; }
    }
    for (const bt_json *e = r ? NULL : map->child; e && !r; e = e->next) {
        if (e->type != BT_JSON_STRING || !e->len || strchr(e->str, '/') || !strcmp(e->str, ".") || !strcmp(e->str, "..")) {
            bt_msgf(err, errlen, "%s: weight_map[\"%s\"] must be a file name in the directory", f->index, e->key);
            r = -1; break;
        }
        int k = 0;
        while (k < f->n && strcmp(strrchr(f->path[k], '/') + 1, e->str)) k++;
        if (k == f->n) r = llama__hf_add_file(f, dir, e->str, err, errlen);
        if (!r && !(f->map_name[f->n_map] = strdup(e->key))) { bt_msgf(err, errlen, "%s: out of host memory", f->index); r = -1; }
        if (!r) f->map_file[f->n_map++] = k;
    }
    bt_json_free(doc);
    return r;
}
BTDEF llama_hf_files *llama_hf_open(const char *path, char *err, size_t errlen) {
    char dir[4096];
    struct stat st;
    llama_hf_files *f = (llama_hf_files *)calloc(1, sizeof *f);
    if (!f) { bt_msgf(err, errlen, "%s: out of host memory", path); return NULL; }
    int r;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {   /* one .safetensors file */
        const char *slash = strrchr(path, '/');
        llama__dir_of(path, dir, sizeof dir);
        r = llama__hf_add_file(f, dir, slash ? slash + 1 : path, err, errlen);
    } else {
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(f->index, sizeof f->index, "%s/model.safetensors.index.json", dir);
        if (access(f->index, F_OK) == 0) r = llama__hf_read_index(f, dir, err, errlen);
        else { f->index[0] = 0; r = llama__hf_add_file(f, dir, "model.safetensors", err, errlen); }
    }
    if (r) { llama_hf_close(f); return NULL; }
    return f;
}
/* the file that holds name (its info in *t), or -1 with err (absent: *t NULL and no error when
   optional) */
static int llama__hf_find(llama_hf_files *f, const char *name, const bt_ckpt_info **t, int optional, char *err, size_t errlen) {
    *t = NULL;
    if (f->n_map) {
        for (int i = 0; i < f->n_map; i++)
            if (!strcmp(f->map_name[i], name)) {
                int k = f->map_file[i];
                if ((*t = bt_ckpt_find(f->f[k], name))) return k;
                bt_msgf(err, errlen, "%s: tensor '%s' is not in %s, where %s puts it", f->path[k], name, f->path[k], f->index);
                return -1;
            }
        if (!optional) bt_msgf(err, errlen, "%s: no tensor '%s' in its weight_map", f->index, name);
        return -1;
    }
    if ((*t = bt_ckpt_find(f->f[0], name))) return 0;
    if (!optional) bt_msgf(err, errlen, "%s: no tensor '%s'", f->path[0], name);
    return -1;
}
static void llama__shape_str(int ndim, const int64_t *s, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && o < n; d++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)s[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}
/* every tensor of every file is one we know (or ignore): a bias or a layer past L is an error */
static int llama__hf_check_names(const llama_config *c, llama_hf_files *f, char *err, size_t errlen) {
    for (int k = 0; k < f->n; k++)
        for (int i = 0; i < bt_ckpt_count(f->f[k]); i++) {
            const char *name = bt_ckpt_info_at(f->f[k], i)->name;
            if (llama__hf_index(c, name) < 0 && !llama__hf_ignored(name, c->L)) {
                bt_msgf(err, errlen, "%s: tensor '%s' is not part of a Llama of %d layers without biases", f->path[k], name, c->L);
                return -1;
            }
        }
    return 0;
}
/* the tensor of HF index i into rows [row0, row0 + rows) of leaf: dtype and shape checked first */
static int llama__hf_load_one(llama *m, llama_hf_files *f, const char *name, bt_tensor *leaf, int64_t row0, int64_t rows,
                              int pad, char *err, size_t errlen) {
    const bt_ckpt_info *t;
    int k = llama__hf_find(f, name, &t, 0, err, errlen);
    if (k < 0) return -1;
    if (t->dtype != BT_CKPT_F32 && t->dtype != BT_CKPT_F64 && t->dtype != BT_CKPT_BF16 && t->dtype != BT_CKPT_F16) {
        bt_msgf(err, errlen, "%s: tensor '%s' is %s: a weight must be F32, F64, BF16 or F16", f->path[k], name, bt_ckpt_dtype_name(t->dtype));
        return -1;
    }
    const llama_config *c = &m->cfg;
    int64_t want[2] = {rows, leaf->ndim == 2 ? leaf->shape[1] : 0};
    if (t->ndim != leaf->ndim || t->shape[0] != want[0] || (leaf->ndim == 2 && t->shape[1] != want[1])) {
        char got[96], exp[96];
        llama__shape_str(t->ndim, t->shape, got, sizeof got);
        llama__shape_str(leaf->ndim, want, exp, sizeof exp);
        bt_msgf(err, errlen, "%s: tensor '%s' is %s, the config wants %s (hidden_size %d, intermediate_size %d, heads %d, "
                "key/value heads %d, vocab_size %d)", f->path[k], name, got, exp, c->C, c->F, c->H, c->Hkv, c->V);
        return -1;
    }
    int r = 0;
    bt_scope_begin();
    bt_tensor *dst = llama__hf_rows(m, leaf, row0, pad ? c->Vp : rows, 0);
    if (bt_ckpt_load(f->f[k], name, dst, BT_CKPT_CONVERT | (pad ? BT_CKPT_PAD_ROWS : 0))) { bt_msgf(err, errlen, "%s", bt_ckpt_error()); r = -1; }
    bt_scope_end();
    return r;
}
/* a head in the file of a tied model must be the embedding itself */
static int llama__hf_check_tied(llama *m, llama_hf_files *f, char *err, size_t errlen) {
    const bt_ckpt_info *t;
    int k = llama__hf_find(f, "lm_head.weight", &t, 1, err, errlen), r = 0;
    if (k < 0) return 0;
    int64_t V = m->cfg.V, C = m->cfg.C;
    if (t->ndim != 2 || t->shape[0] != V || t->shape[1] != C) {
        bt_msgf(err, errlen, "%s: lm_head.weight is not [%lld, %lld] (tie_word_embeddings is true)", f->path[k], (long long)V, (long long)C);
        return -1;
    }
    bt_scope_begin();
    bt_tensor *head = bt_empty(bt_shape2(V, C), BT_F32, bt_cpu()), *emb = bt_empty(bt_shape2(V, C), BT_F32, bt_cpu());
    bt_to_host(bt_narrow(m->emb, 0, 0, V), bt_data_ptr(emb), BT_F32);
    if (bt_ckpt_load(f->f[k], "lm_head.weight", head, BT_CKPT_CONVERT)) { bt_msgf(err, errlen, "%s", bt_ckpt_error()); r = -1; }
    else if (memcmp(bt_data_ptr(head), bt_data_ptr(emb), sizeof(float) * (size_t)(V * C))) {
        bt_msgf(err, errlen, "%s: lm_head.weight differs from model.embed_tokens.weight, but config.json says tie_word_embeddings", f->path[k]);
        r = -1;
    }
    bt_scope_end();
    return r;
}
BTDEF int llama_hf_load(llama *m, llama_hf_files *f, char *err, size_t errlen) {
    char name[160];
    int old = bt_set_grad_enabled(0), r = llama__hf_check_names(&m->cfg, f, err, errlen);
    int n = llama_hf_count(&m->cfg);
    for (int i = 0; i < n && !r; i++) {
        bt_tensor *leaf; int64_t row0, rows;
        llama_hf_tensor(m, i, name, sizeof name, &leaf, &row0, &rows);
        r = llama__hf_load_one(m, f, name, leaf, row0, rows, leaf == m->emb || leaf == m->head, err, errlen);
    }
    if (!r && m->cfg.tie) r = llama__hf_check_tied(m, f, err, errlen);
    bt_set_grad_enabled(old);
    return r;
}
BTDEF int llama_hf_init_from(llama *m, const char *path, bt_device dev, char *err, size_t errlen) {
    llama_config c;
    memset(m, 0, sizeof *m);
    if (llama_hf_config(path, &c, err, errlen)) return -1;
    llama_hf_files *f = llama_hf_open(path, err, errlen);
    if (!f) return -1;
    llama_build(m, c, dev);
    int r = llama_hf_load(m, f, err, errlen);
    llama_hf_close(f);
    if (r) llama_free(m);
    return r;
}

/* ---- export ---- */
BTDEF int llama_hf_add_tensors(llama *m, bt_ckpt_writer *w, const char *prefix, int grads) {
    char name[160], full[200];
    int n = llama_hf_count(&m->cfg), r = 0;
    for (int i = 0; i < n && !r; i++) {
        bt_tensor *leaf; int64_t row0, rows;
        llama_hf_tensor(m, i, name, sizeof name, &leaf, &row0, &rows);
        snprintf(full, sizeof full, "%s%s", prefix, name);
        bt_scope_begin();
        r = bt_ckpt_writer_add_tensor(w, full, llama__hf_rows(m, leaf, row0, rows, grads), 0, 0);
        bt_scope_end();
    }
    return r;
}
BTDEF int llama_hf_write_config(const llama_config *c, const char *path, char *err, size_t errlen) {
    bt_json_writer j;
    bt_json_writer_init(&j, 2);
    bt_json_object(&j, NULL);
    bt_json_array(&j, "architectures"); bt_json_string(&j, NULL, "LlamaForCausalLM"); bt_json_end(&j);
    bt_json_string(&j, "model_type", "llama");
    bt_json_int(&j, "hidden_size", c->C);
    bt_json_int(&j, "intermediate_size", c->F);
    bt_json_int(&j, "num_hidden_layers", c->L);
    bt_json_int(&j, "num_attention_heads", c->H);
    bt_json_int(&j, "num_key_value_heads", c->Hkv);
    bt_json_int(&j, "head_dim", c->C / c->H);
    bt_json_int(&j, "vocab_size", c->V);
    bt_json_int(&j, "max_position_embeddings", c->maxT);
    bt_json_number(&j, "rms_norm_eps", c->eps);
    bt_json_number(&j, "rope_theta", c->rope.theta);
    if (c->rope.factor > 0) {
        bt_json_object(&j, "rope_scaling");
        bt_json_string(&j, "rope_type", "llama3");
        bt_json_number(&j, "factor", c->rope.factor);
        bt_json_number(&j, "low_freq_factor", c->rope.low_freq_factor);
        bt_json_number(&j, "high_freq_factor", c->rope.high_freq_factor);
        bt_json_int(&j, "original_max_position_embeddings", c->rope.original_max_position_embeddings);
        bt_json_end(&j);
    } else bt_json_null(&j, "rope_scaling");
    bt_json_bool(&j, "tie_word_embeddings", c->tie);
    bt_json_string(&j, "hidden_act", "silu");
    bt_json_bool(&j, "attention_bias", 0);
    bt_json_bool(&j, "mlp_bias", 0);
    bt_json_number(&j, "attention_dropout", 0.0);
    bt_json_number(&j, "initializer_range", 0.02);
    bt_json_int(&j, "pretraining_tp", 1);
    bt_json_bool(&j, "use_cache", 1);
    bt_json_string(&j, "torch_dtype", "float32");
    bt_json_end(&j);
    int r = bt_json_save_flags(&j, path, BT_OUTPUT_NOFOLLOW);
    bt_json_writer_free(&j);
    if (r) { bt_msgf(err, errlen, "%s", bt_data_error()); return -1; }
    return 0;
}
BTDEF int llama_hf_export(llama *m, const char *dir, char *err, size_t errlen) {
    char path[4200];
    bt_ckpt_writer *w = bt_ckpt_writer_new();
    int bad = !w || llama_hf_add_tensors(m, w, "", 0) != 0;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!bad) bad = bt_ckpt_writer_save_flags(w, path, BT_OUTPUT_NOFOLLOW) != 0;
    bt_ckpt_writer_free(w);
    if (bad) { bt_msgf(err, errlen, "%s", bt_ckpt_error()); return -1; }
    snprintf(path, sizeof path, "%s/config.json", dir);
    return llama_hf_write_config(&m->cfg, path, err, errlen);
}
#endif /* LLAMA_IO_IMPLEMENTATION_DONE */
#endif /* LLAMA_IO_IMPLEMENTATION */
