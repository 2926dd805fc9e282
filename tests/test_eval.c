/* test_eval.c - evaluation in train_gpt2 on the CPU: --eval-mc's per-ending losses against the same
   rows scored one at a time through another path (gpt2_loss, unpadded, batch 1) and against
   transformers' (a fixture made by tests/mc_torch.py), --eval-only's outputs and refusals, the
   multiple-choice score and ETA during training, and the log's token counts. The runs are this
   binary re-executed as train_gpt2 (tests/train_runs.h). */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/train_runs.h"

#define MC_SET "tests/fixtures/mc_wikitext.jsonl"
/* transformers' losses of MC_SET under the s2 preset initialised with seed 1337 (train_gpt2's default
   seed), exported by `train_gpt2 -e s2 -x 0 --export-hf DIR --device cpu` and scored by tests/mc_torch.py */
#define MC_REF "tests/fixtures/mc_wikitext_s2_hf.json"

static bt_tokenizer *load_tok(void) {
    bt_tokenizer *t = bt_tokenizer_load("data/encoder.json", "data/vocab.bpe");
    return t ? t : bt_tokenizer_load("../shared/data/gpt2-tokenizer/encoder.json", "../shared/data/gpt2-tokenizer/vocab.bpe");
}

/* the per-ending losses of trainer_eval_mc (batched, padded, logits + per-row losses) equal each row
   scored alone by gpt2_loss (the fused head, no padding): mean over the ending's targets x count */
static void test_mc_rows_vs_one_at_a_time(void) {
    bt_tokenizer *tok = load_tok();
    if (!tok) { BT_SKIP("no GPT-2 tokenizer files (data/ or ../shared/data)"); return; }
    trainer tr;
    memset(&tr, 0, sizeof tr);
    train_default_opts(&tr.o);
    tr.dt = BT_F32;
    gpt2_config cfg;
    gpt2_config_from_preset("s2", BT_GPT2_VOCAB, &cfg);
    gpt2_build(&tr.model, cfg, bt_cpu());
    gpt2_init(&tr.model, 7);
    BT_CHECK(bt_mc_load(&tr.mc, MC_SET, tok) == 0, "%s", bt_data_error());
    trainer_mc_result r;
    BT_CHECK(trainer_eval_mc(&tr, &r) == 0, "eval");
    const bt_mc_set *s = &tr.mc;
    double worst = 0;
    int64_t right = 0, right_mean = 0, rows = 0;
    int old = bt_set_grad_enabled(0);
    int64_t n_check = quick() ? 12 : s->n_items;   /* quick (ASan): the first items one at a time, the accuracy not checked */
    for (int64_t i = 0; i < n_check; i++) {
        double best = INFINITY, best_mean = INFINITY;
        int ps = -1, pm = -1;
        for (int k = 0; k < s->n_endings[i]; k++) {
            int64_t lc = s->ctx_len[i], le = s->end_len[i * s->max_endings + k], n = lc + le;
            int32_t *in = (int32_t *)malloc(sizeof(int32_t) * (size_t)n), *tg = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
            for (int64_t p = 0; p < lc; p++) in[p] = s->tokens[s->ctx_off[i] + p];
            for (int64_t p = 0; p < le; p++) in[lc + p] = s->tokens[s->end_off[i * s->max_endings + k] + p];
            for (int64_t p = 0; p + 1 < n; p++) tg[p] = p + 1 >= lc ? in[p + 1] : -1;
            bt_scope_begin();
            bt_tensor *idx = bt_from_data(in, bt_shape2(1, n - 1), BT_I32, bt_cpu()), *t = bt_from_data(tg, bt_shape2(1, n - 1), BT_I32, bt_cpu());
            double sum = bt_item(gpt2_loss(&tr.model, idx, t, BT_F32)) * (double)le;
            bt_scope_end();
            double got = r.loss[i * r.max_endings + k];
            worst = fmax(worst, fabs(got - sum) / sum);
            BT_CHECK(r.tokens[i * r.max_endings + k] == le, "item %lld ending %d: %d tokens scored, %lld in the ending", (long long)i, k,
                     r.tokens[i * r.max_endings + k], (long long)le);
            if (sum < best) { best = sum; ps = k; }
            if (sum / le < best_mean) { best_mean = sum / le; pm = k; }
            free(in); free(tg);
            rows++;
        }
        BT_CHECK(r.pred_sum[i] == ps && r.pred_mean[i] == pm, "item %lld: predictions %d %d, one at a time %d %d", (long long)i,
                 r.pred_sum[i], r.pred_mean[i], ps, pm);
        right += ps == s->label[i];
        right_mean += pm == s->label[i];
    }
    bt_set_grad_enabled(old);
    BT_CHECK(worst < 1e-5, "largest relative difference of an ending's loss: %.3g over %lld rows", worst, (long long)rows);
    BT_CHECK(rows >= (quick() ? 40 : 200) && s->n_items >= 50, "%lld rows of %lld items", (long long)rows, (long long)s->n_items);
    if (!quick()) BT_CHECK(r.acc == (double)right / s->n_items && r.acc_mean == (double)right_mean / s->n_items, "accuracies %g %g", r.acc, r.acc_mean);
    if (bt_test_verbose()) printf("  %lld rows, worst relative difference %.3g, acc %.4f / %.4f\n", (long long)rows, worst, r.acc, r.acc_mean);
    trainer_mc_free(&r);
    bt_mc_free(&tr.mc);
    gpt2_free(&tr.model);
    bt_tokenizer_free(tok);
}

/* the numbers of a JSON array member of a JSON text, into v[cap]; their count */
static int json_numbers(const bt_json *arr, double *v, int cap) {
    int n = 0;
    for (const bt_json *c = arr ? arr->child : NULL; c && n < cap; c = c->next) v[n++] = c->num;
    return n;
}

/* --eval-only of the s2 preset (seed 1337) against transformers' scores of the same weights */
static void test_eval_only_vs_transformers(void) {
    if (access(MC_REF, R_OK)) { BT_SKIP(MC_REF " missing (make it on a machine with transformers: tests/mc_torch.py)"); return; }
    if (!have_data()) { BT_SKIP("no data/ (make data)"); return; }
    char args[1024], out[8192];
    snprintf(args, sizeof args, "--eval-only -e s2 -v 0 --eval-mc " MC_SET " -o %s", tp("ev"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "64 items, accuracy"), "exit %d: %s", rc, out);
    size_t n1 = 0, n2 = 0;
    char *ours = bt_test_read_file(tp("ev/eval_mc.jsonl"), &n1), *ref = bt_test_read_file(MC_REF, &n2);
    BT_CHECK(ours && ref, "eval_mc.jsonl and the fixture");
    if (!ours || !ref) { free(ours); free(ref); return; }
    bt_json_doc *rd = bt_json_parse(ref, n2, 0);
    BT_CHECK(rd != NULL, "%s: %s", MC_REF, bt_data_error());
    const bt_json *items = rd ? bt_json_get(bt_json_root(rd), "items") : NULL, *it = items ? items->child : NULL;
    double worst = 0;
    int lines = 0, bad_pred = 0;
    for (char *line = strtok(ours, "\n"); line && it; line = strtok(NULL, "\n"), it = it->next, lines++) {
        bt_json_doc *d = bt_json_parse(line, strlen(line), 0);
        if (!d) { BT_CHECK(0, "line %d of eval_mc.jsonl: %s", lines + 1, bt_data_error()); break; }
        double a[16], b[16], ta[16], tb[16];
        int na = json_numbers(bt_json_get(bt_json_root(d), "loss"), a, 16), nb = json_numbers(bt_json_get(it, "loss"), b, 16);
        int ka = json_numbers(bt_json_get(bt_json_root(d), "tokens"), ta, 16), kb = json_numbers(bt_json_get(it, "tokens"), tb, 16);
        BT_CHECK(na == nb && na >= 2 && ka == kb, "item %d: %d and %d endings", lines, na, nb);
        for (int k = 0; k < na && k < nb; k++) {
            worst = fmax(worst, fabs(a[k] - b[k]) / fabs(b[k]));
            BT_CHECK(ta[k] == tb[k], "item %d ending %d: %g tokens here, %g in transformers' encoding", lines, k, ta[k], tb[k]);
        }
        int64_t p1, p2, q1, q2;
        bt_json_i64(bt_json_get(bt_json_root(d), "pred_sum"), &p1); bt_json_i64(bt_json_get(it, "pred_sum"), &p2);
        bt_json_i64(bt_json_get(bt_json_root(d), "pred_mean"), &q1); bt_json_i64(bt_json_get(it, "pred_mean"), &q2);
        bad_pred += p1 != p2 || q1 != q2;
        bt_json_free(d);
    }
    BT_CHECK(lines == 64 && !it, "%d items compared", lines);
    BT_CHECK(worst < 1e-4, "largest relative difference from transformers: %.3g", worst);
    BT_CHECK(bad_pred == 0, "%d items predicted differently from transformers", bad_pred);
    if (bt_test_verbose()) printf("  vs transformers: %d items, worst relative difference %.3g\n", lines, worst);
    bt_json_free(rd);
    free(ours); free(ref);
}

/* --eval-only: refusals, a bad set named by file and line, no log.jsonl touched; eval.json written */
static void test_eval_only_runs(void) {
    if (!have_data()) { BT_SKIP("no data/ (make data)"); return; }
    char args[1024], out[8192];
    train_opts o; char err[256];
    BT_CHECK(train_parse("--eval-only --save x.bin", &o, err, sizeof err) == -1 && strstr(err, "--eval-only trains nothing"), "%s", err);
    BT_CHECK(train_parse("--eval-only --ckpt-dir d --ckpt-every 5", &o, err, sizeof err) == -1 && strstr(err, "--eval-only"), "%s", err);
    BT_CHECK(train_parse("--eval-mc", &o, err, sizeof err) == -1 && strstr(err, "--eval-mc needs a value"), "%s", err);
    /* a set with a bad third line: the error names the file and the line, exit 1, nothing evaluated */
    FILE *f = fopen(tp("bad.jsonl"), "w");
    fprintf(f, "{\"ctx\": \"A\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n\n{\"ctx\": \"A\", \"endings\": [\"b\", \"c\"], \"label\": 2}\n");
    fclose(f);
    snprintf(args, sizeof args, "--eval-only -e s2 -v 0 --eval-mc %s", tp("bad.jsonl"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "bad.jsonl:3:") && strstr(out, "label") && !strstr(out, "accuracy"), "exit %d: %s", rc, out);
    snprintf(args, sizeof args, "--eval-only -e s2 -v 0 --eval-mc %s", tp("missing.jsonl"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "missing.jsonl"), "missing set: exit %d: %s", rc, out);
    /* -o DIR with a training log already there: eval.json is added, the log stays as it was */
    mkdir(tp("ev2"), 0755);
    f = fopen(tp("ev2/log.jsonl"), "w");
    fprintf(f, "{\"step\": 1, \"train_loss\": 5.0}\n");
    fclose(f);
    snprintf(args, sizeof args, "--eval-only -e s2 -t 32 -b 4 -m 3 -o %s", tp("ev2"));
    rc = train_run(args, out, sizeof out);
    char js[2048];
    slurp(tp("ev2/eval.json"), js, sizeof js);
    BT_CHECK(rc == 0 && strstr(out, "val loss") && strstr(out, "over 3 batches of 4 x 32"), "exit %d: %s", rc, out);
    BT_CHECK(strstr(js, "\"val_loss\"") && strstr(js, "\"val_tokens\": 384") && !strstr(js, "mc_acc"), "eval.json: %s", js);
    BT_CHECK(lines_of(tp("ev2/log.jsonl")) == 1, "the training log was changed");
    BT_CHECK(access(tp("ev2/eval_mc.jsonl"), F_OK) != 0, "no eval_mc.jsonl without --eval-mc");
}

/* a training run with --eval-mc and -o: each validation line shows the score and the ETA, the log
   has tokens, elapsed time and the multiple-choice accuracy at the validation steps */
static void test_train_with_mc_and_eta(void) {
    if (!have_data()) { BT_SKIP("no data/ (make data)"); return; }
    char args[1024], out[16384];
    const char *set = MC_SET;
    if (quick()) {   /* ASan: the set's first 8 items */
        char text[65536];
        slurp(MC_SET, text, sizeof text);
        char *e = text;
        for (int k = 0; k < 8 && e; k++) e = strchr(e + 1, '\n');
        if (e) e[1] = 0;
        FILE *f = fopen(tp("mc8.jsonl"), "w");
        fputs(text, f);
        fclose(f);
        set = tp("mc8.jsonl");
    }
    snprintf(args, sizeof args, "-e s2 -b 2 -t 32 -x 6 -v 3 -g 0 --quiet --eval-mc %s -o %s", set, tp("tr"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0, "exit %d: %s", rc, out);
    const char *v3 = strstr(out, "step    3/6");
    BT_CHECK(v3 && strstr(v3, "| mc 0.") && strstr(v3, ", eta 0:"), "step 3's line: %s", out);
    BT_CHECK(lines_of(tp("tr/log.jsonl")) == 6, "6 log lines");
    char log[16384];
    slurp(tp("tr/log.jsonl"), log, sizeof log);
    int mc_lines = 0;
    double last_elapsed = -1;
    int step = 0;
    for (char *l = strtok(log, "\n"); l; l = strtok(NULL, "\n")) {
        bt_json_doc *d = bt_json_parse(l, strlen(l), 0);
        if (!d) { BT_CHECK(0, "log line: %s", bt_data_error()); break; }
        const bt_json *r = bt_json_root(d);
        int64_t s = -1, t = -1;
        bt_json_i64(bt_json_get(r, "step"), &s); bt_json_i64(bt_json_get(r, "tokens"), &t);
        step++;
        BT_CHECK(s == step && t == s * 64, "step %lld: tokens %lld (expected %lld)", (long long)s, (long long)t, (long long)s * 64);
        const bt_json *e = bt_json_get(r, "elapsed_s"), *m = bt_json_get(r, "mc_acc");
        BT_CHECK(e && e->num >= last_elapsed, "elapsed_s grows");
        if (e) last_elapsed = e->num;
        if (m) { mc_lines++; BT_CHECK(m->num >= 0 && m->num <= 1 && bt_json_get(r, "val_loss"), "mc_acc %g at step %lld", m->num, (long long)s); }
        bt_json_free(d);
    }
    BT_CHECK(mc_lines == 2, "%d log lines with mc_acc (expected steps 3 and 6)", mc_lines);
    /* -o DIR's chart: XML, the four panels (the log has tokens), one point per step, one mark per validation */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 tests/chart_check.py %s panels=loss_step,loss_tokens,lr,tok_per_s loss_step/0/train=6 "
             "loss_step/0/val=2 loss_tokens/0/train=6 strict > %s 2>&1", tp("tr/loss.svg"), tp("chart.txt"));
    int crc = system(cmd);
    slurp(tp("chart.txt"), out, sizeof out);
    BT_CHECK(crc == 0 && strstr(out, "ok"), "tr/loss.svg: %s", out);
}

int main(int argc, char **argv) {
    if (train_runs_child(argc, argv)) return train_runs_child_main(argc, argv);
    train_runs_init("test_eval");
    BT_RUN(test_mc_rows_vs_one_at_a_time);
    BT_RUN(test_eval_only_vs_transformers);
    BT_RUN(test_eval_only_runs);
    BT_RUN(test_train_with_mc_and_eta);
    train_runs_done();
    return bt_test_summary("test_eval");
}
