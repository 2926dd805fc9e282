/* gpt2_kv_check.h - gpt2.h's KV cache against the full forward pass: the logits that
   gpt2_forward_cached returns for each position (a prompt of `prefill` tokens, then one token at a
   time, with a chunk of 3 halfway) against gpt2_logits over the whole sequence. Included by
   test_gpt2.c and test_gpt2_gpu.cu after gpt2.h. */
#ifndef GPT2_KV_CHECK_H
#define GPT2_KV_CHECK_H

/* the worst relative L2 error of one position's logits over the T positions of ids */
static double kv_cache_worst_relerr(gpt2 *m, const int32_t *ids, int T, int prefill, bt_dtype dt) {
    int64_t Vp = m->cfg.Vp;
    float *full = (float *)malloc(sizeof(float) * (size_t)(T * Vp)), *row = (float *)malloc(sizeof(float) * (size_t)Vp);
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    bt_to_host(gpt2_logits(m, bt_from_data(ids, bt_shape2(1, T), BT_I32, m->device), dt), full, BT_F32);
    bt_scope_end();
    bt_set_grad_enabled(old);
    gpt2_kv_cache *kv = gpt2_kv_cache_create(m, dt);
    double worst = 0;
    for (int pos = 0; pos < T;) {
        int n = pos == 0 ? prefill : (pos >= T / 2 && pos < T / 2 + 3 && pos + 3 <= T) ? 3 : 1;
        bt_scope_begin();
        bt_to_host(gpt2_forward_cached(m, kv, ids + pos, n), row, BT_F32);
        bt_scope_end();
        pos += n;
        double num = 0, den = 0;
        for (int64_t j = 0; j < Vp; j++) { double r = full[(pos - 1) * Vp + j], d = row[j] - r; num += d * d; den += r * r; }
        double e = num == num ? sqrt(num / (den > 0 ? den : 1)) : INFINITY;
        if (e > worst) worst = e;
    }
    gpt2_kv_cache_free(kv, m->cfg.L);
    free(full); free(row);
    return worst;
}
#endif
