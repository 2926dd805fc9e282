/* test_train_llama.c - train_gpt2.c training a llama.h model on the CPU (issue 36): the same loop,
   step, validation, checkpoints and outputs as GPT-2's. A Llama run on the Tiny Shakespeare shards
   whose validation loss falls; a run resumed from a middle checkpoint (without -e: the family and
   config come from the checkpoint's metadata) gives the uninterrupted run's losses and final state
   bit for bit; -e of the other family against that checkpoint is a clear error; the run's
   --export-hf directory read back by --init-from DIR --eval-only gives the run's final validation
   loss exactly; the flags a Llama does not take yet are refused, naming the flag; -e's preset names
   pick the family; llama_build_padded (ZeRO's equal shards) lays the same weights out; --recompute
   block and mlp, and --offload adamw, give the losses of the run without, bit for bit; ddp, zero1,
   zero2 on 2 CPU ranks against one process, resumed, and offloaded (bit for bit). Runs are this
   binary re-executed with --run-train ARGS (tests/train_runs.h), on the ls2 preset (2 layers, C 64,
   4 heads, 2 key/value heads). */
#define TRAIN_GPT2_NO_MAIN
#include "train_gpt2.c"
#include "tests/bt_test.h"
#include "tests/train_runs.h"

#define RUN "-b 1 -t 8 -v 0 -g 0 --quiet"

/* the number after key in the file's text (the last occurrence), NAN when absent */
static double last_number(const char *path, const char *key) {
    static char text[1 << 17];
    slurp(path, text, sizeof text);
    const char *p = NULL, *q = text;
    while ((q = strstr(q, key))) p = q++;
    return p ? atof(p + strlen(key)) : NAN;
}

/* -e's names pick the family: GPT-2's presets stay GPT-2's, Llama's are l125m .. ls2 */
static void test_presets(void) {
    trainer_config c;
    BT_CHECK(trainer_config_preset("s2", &c) == 0 && c.family == TRAINER_GPT2 && c.C == 64 && c.gpt2.L == 2, "s2 is GPT-2's");
    BT_CHECK(trainer_config_preset("d12", &c) == 0 && c.family == TRAINER_GPT2, "d12 is GPT-2's");
    BT_CHECK(trainer_config_preset("ls2", &c) == 0 && c.family == TRAINER_LLAMA && c.llama.Hkv == 2 && c.V == 50257, "ls2 is Llama's");
    BT_CHECK(trainer_config_preset("l125m", &c) == 0 && c.family == TRAINER_LLAMA && c.L == 12 && c.C == 768 && c.maxT == 1024, "l125m");
    BT_CHECK(trainer_config_preset("nope", &c) == -1, "no such preset");
    for (int i = 0; i < llama_npresets; i++)
        BT_CHECK(gpt2_config_from_preset(llama_presets[i].name, 50257, &c.gpt2) == -1, "%s is a preset of both families", llama_presets[i].name);
}

/* buffers padded to a multiple of pad_to: the same leaves at the same offsets, the same init, zero padding */
static void test_build_padded(void) {
    llama_config c;
    llama_config_from_preset("ls2", &c);
    llama a, b;
    llama_build(&a, c, bt_cpu());
    llama_build_padded(&b, c, bt_cpu(), 1000, BT_F32);
    llama_init(&a, 5); llama_init(&b, 5);
    BT_CHECK(a.flat_numel == a.num_params && b.num_params == a.num_params && b.flat_numel % 1000 == 0 && b.flat_numel >= b.num_params &&
             b.flat_numel - b.num_params < 1000, "flat_numel %lld of %lld parameters", (long long)b.flat_numel, (long long)b.num_params);
    const float *x = (const float *)bt_data_ptr(a.flat), *y = (const float *)bt_data_ptr(b.flat);
    int zero = 1;
    for (int64_t i = b.num_params; i < b.flat_numel; i++) zero &= y[i] == 0;
    BT_CHECK(!memcmp(x, y, sizeof(float) * (size_t)a.num_params) && zero, "padded weights differ from the unpadded build's");
    llama_free(&a); llama_free(&b);
}

/* a Llama trained by train_gpt2 on Tiny Shakespeare: its validation loss falls from ln(V) */
static void test_loss_falls(void) {
    if (!have_data()) { BT_SKIP("no data/tinyshakespeare_*.bin (make data)"); return; }
    char args[1000], out[65536], lp[600];
    snprintf(args, sizeof args, "-e ls2 -b 4 -t 32 -x %d -v 10 -m 4 -g 8 -l 3e-3 -o %s", quick() ? 20 : 30, tp("fall"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "model ls2 (Llama): L 2 H 4 (kv 2) C 64 F 192 maxT 128 V 50257") && strstr(out, "--- sample (greedy) ---"),
             "exit %d: %s", rc, out);
    snprintf(lp, sizeof lp, "%s/log.jsonl", tp("fall"));
    char text[65536];
    slurp(lp, text, sizeof text);
    const char *first = strstr(text, "\"val_loss\": ");
    double v0 = first ? atof(first + 12) : NAN, v1 = last_number(lp, "\"val_loss\": ");
    printf("info: Llama ls2 validation loss %.4f at step 10, %.4f at the end\n", v0, v1);
    BT_CHECK(v0 < 10.9 && v1 < v0 - 0.5, "the validation loss did not fall: %.4f -> %.4f", v0, v1);
}

/* N steps vs N/2 then --resume (no -e: the checkpoint says Llama and its config): the same log
   lines after the resume and the same final weights and AdamW state, bit for bit */
static void test_resume_bit_exact(void) {
    if (!have_data()) { BT_SKIP("no data (make data)"); return; }
    int N = 8;
    char args[2000], out[65536], why[256];
    snprintf(args, sizeof args, "-e ls2 " RUN " -x %d --ckpt-every 2 --ckpt-keep 0 --ckpt-dir %s -o %s", N, tp("ref"), tp("ref_log"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && !access(ckpt(tp("ref"), N), R_OK), "the reference run: exit %d: %s", rc, out);
    if (rc) return;
    bt_ckpt_file *f = bt_ckpt_open(ckpt(tp("ref"), N / 2), BT_CKPT_REQUIRE_CHECKSUMS);
    BT_CHECK(f != NULL, "%s", bt_ckpt_error());
    if (f) {
        const bt_ckpt_meta *m = bt_ckpt_file_meta(f);
        const char *fam = bt_ckpt_meta_get(m, "train.model");
        int64_t hkv = 0, F = 0;
        double theta = 0;
        BT_CHECK(fam && !strcmp(fam, "llama") && !bt_ckpt_meta_get_i64(m, "llama.Hkv", &hkv) && hkv == 2 && !bt_ckpt_meta_get_i64(m, "llama.F", &F) &&
                 F == 192 && !bt_ckpt_meta_get_f64(m, "llama.rope_theta", &theta) && theta == 500000 && !bt_ckpt_meta_get(m, "gpt2.C"),
                 "the checkpoint's model metadata: %s Hkv %lld F %lld theta %g", fam ? fam : "-", (long long)hkv, (long long)F, theta);
        const bt_ckpt_info *p = bt_ckpt_find(f, "params");
        llama_config c;
        llama_config_from_preset("ls2", &c);
        BT_CHECK(p && p->shape[0] == llama_num_params(&c), "params of %lld elements", p ? (long long)p->shape[0] : -1LL);
        bt_ckpt_close(f);
    }
    snprintf(args, sizeof args, RUN " -x %d --ckpt-every 2 --ckpt-keep 0 --resume %s --ckpt-dir %s -o %s", N, ckpt(tp("ref"), N / 2),
             tp("res"), tp("res_log"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "(Llama)") && strstr(out, "resumed from") && strstr(out, "after step 4"), "resume: exit %d: %s", rc, out);
    static char want[32768], got[32768];
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/log.jsonl", tp("ref_log")); snprintf(b, sizeof b, "%s/log.jsonl", tp("res_log"));
    log_losses(a, N / 2, want, sizeof want);
    log_losses(b, N / 2, got, sizeof got);
    BT_CHECK(want[0] && !strcmp(want, got), "the losses after the resume differ:\n%s\nvs the uninterrupted run's:\n%s", got, want);
    BT_CHECK(same_checkpoints(ckpt(tp("ref"), N), ckpt(tp("res"), N), NULL, why, sizeof why), "the final state: %s", why);
    /* -e of the other family (or another Llama) against the checkpoint */
    snprintf(args, sizeof args, "-e s2 " RUN " -x %d --resume %s", N, ckpt(tp("ref"), N / 2));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "holds a Llama model, -e s2 is GPT-2"), "-e s2 on a Llama checkpoint: exit %d: %s", rc, out);
    snprintf(args, sizeof args, "-e ls4 " RUN " -x %d --resume %s", N, ckpt(tp("ref"), N / 2));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 1 && strstr(out, "the checkpoint holds a model of L 2"), "-e ls4 on an ls2 checkpoint: exit %d: %s", rc, out);
}

/* --export-hf at the end, then --init-from DIR --eval-only: the run's final validation loss, exactly */
static void test_export_init_from_eval(void) {
    if (!have_data()) { BT_SKIP("no data (make data)"); return; }
    char args[2000], out[65536], lp[600], ep[600];
    snprintf(args, sizeof args, "-e ls2 -b 2 -t 16 -x 4 -v 4 -m 3 -g 0 --quiet -o %s --export-hf %s --eval-mc tests/fixtures/mc_wikitext.jsonl",
             tp("exp_log"), tp("hf"));
    int rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "(Hugging Face Llama)"), "export: exit %d: %s", rc, out);
    char cj[65536], cjp[600];
    snprintf(cjp, sizeof cjp, "%s/config.json", tp("hf"));
    slurp(cjp, cj, sizeof cj);
    BT_CHECK(strstr(cj, "\"model_type\": \"llama\"") && strstr(cj, "LlamaForCausalLM"), "config.json: %.300s", cj);
    snprintf(args, sizeof args, "--eval-only --init-from %s -b 2 -t 16 -m 3 -o %s --eval-mc tests/fixtures/mc_wikitext.jsonl", tp("hf"), tp("eval"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "(Llama)"), "eval-only: exit %d: %s", rc, out);
    snprintf(lp, sizeof lp, "%s/log.jsonl", tp("exp_log"));
    snprintf(ep, sizeof ep, "%s/eval.json", tp("eval"));
    double run = last_number(lp, "\"val_loss\": "), ev = last_number(ep, "\"val_loss\": ");
    char want[64];
    snprintf(want, sizeof want, "val loss %.6f", run);
    BT_CHECK(run == run && strstr(out, want), "the run ended at val %.6f; --init-from its export: %.9g (%s)", run, ev, out);
    BT_CHECK(fabs(run - ev) < 5e-7, "eval.json's val_loss %.9g vs the run's %.6f", ev, run);
    /* --eval-mc through a Llama: the run's last score and --eval-only's of its export agree */
    double mc_run = last_number(lp, "\"mc_acc_mean\": "), mc_ev = last_number(ep, "\"mc_acc_mean\": ");
    char mp[600];
    snprintf(mp, sizeof mp, "%s/eval_mc.jsonl", tp("eval"));
    BT_CHECK(mc_run >= 0 && mc_run <= 1 && fabs(mc_run - mc_ev) < 1e-6 && strstr(out, "64 items, accuracy") && lines_of(mp) == 64,
             "multiple choice: the run's mean-loss accuracy %g, --eval-only's %g, %d lines in eval_mc.jsonl", mc_run, mc_ev, lines_of(mp));
    /* and training on from the export: a new run (fresh AdamW) whose first loss is the model's */
    snprintf(args, sizeof args, "--init-from %s " RUN " -x 2", tp("hf"));
    rc = train_run(args, out, sizeof out);
    BT_CHECK(rc == 0 && strstr(out, "initialized from") && strstr(out, "(Hugging Face Llama)"), "train from the export: exit %d: %s", rc, out);
}

/* what a Llama does not take yet: each refused before training, naming the flag */
static void test_refusals(void) {
    static const struct { const char *args, *want; } cases[] = {
        {"-e ls2 " RUN " -x 1 --save %s", "--save: not for a Llama model yet"},
        {"-e ls2 " RUN " -x 1 --recompute gelu", "--recompute gelu: a Llama has no GELU"},
        {"-e ls2 " RUN " -x 1 --ddp-rows on", "--ddp-rows on: not for a Llama model yet"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[1000], out[65536];
        snprintf(args, sizeof args, cases[i].args, tp("model.bin"));
        int rc = train_run(args, out, sizeof out);
        BT_CHECK(rc == 2 && strstr(out, cases[i].want) && !strstr(out, "step "), "'%s': exit %d: %s", args, rc, out);
    }
    BT_CHECK(access(tp("model.bin"), F_OK) != 0, "--save wrote a file");
    /* --mlir: the flag needs an MLIR build; the check itself */
    train_opts o;
    char err[512];
    trainer_config c;
    train_default_opts(&o);
    o.mlir = 1;
    trainer_config_preset("ls2", &c);
    BT_CHECK(trainer_family_check(&o, &c, err, sizeof err) == -1 && strstr(err, "--mlir: not for a Llama"), "--mlir: %s", err);
    trainer_config_preset("s2", &c);
    BT_CHECK(trainer_family_check(&o, &c, err, sizeof err) == 0, "--mlir with GPT-2 is fine");
}

/* --recompute block and mlp (llama.h's regions), --offload adamw: the losses of test_resume_bit_exact's reference run, exactly */
static void test_recompute_run(void) {
    if (!have_data()) { BT_SKIP("no data (make data)"); return; }
    double ref[16], got[16];
    char lp[700];
    snprintf(lp, sizeof lp, "%s/log.jsonl", tp("ref_log"));
    int n = read_losses(tp("ref_log"), ref, 16);
    if (n <= 0) { BT_CHECK(0, "no reference log %s (test_resume_bit_exact runs first)", lp); return; }
    static const char *modes[3] = {"--recompute block", "--recompute mlp", "--offload adamw"};
    for (int k = 0; k < 3; k++) {
        char args[1000], out[65536], dir[64];
        snprintf(dir, sizeof dir, "rc_%d", k);
        snprintf(args, sizeof args, "-e ls2 " RUN " -x %d %s -o %s", n, modes[k], tp(dir));
        int rc = train_run(args, out, sizeof out), m = rc == 0 ? read_losses(tp(dir), got, 16) : -1, same = m == n;
        for (int i = 0; same && i < n; i++) same = got[i] == ref[i];
        BT_CHECK(rc == 0 && same && strstr(out, k < 2 ? modes[k] + 12 : "offload: AdamW's m and v"), "%s: exit %d, %d losses, not those of the run without (%d)",
                 modes[k], rc, m, n);
    }
}

/* --dp ddp, zero1, zero2 on two CPU ranks (collectives through the TCP store: bt_dist.h section 7)
   against one process on the same global batch (-d 128: four micro-batches in one process, two a
   rank): the losses within 1e-5 relative (fp32: the ranks' gradients averaged where one process
   sums four quarters, so only rounding differs), the checkpoint of step 2 (the 1-process layout:
   weights, AdamW's m and v) within 1e-5 relative; that checkpoint resumed by two ranks of the same
   mode (no -e: the checkpoint names the model) gives the uninterrupted run's last losses and its
   final checkpoint bit for bit */
#define DP_LOSS_TOL 1e-5
#define DP_RUN "-b 2 -t 16 -v 0 -g 0 -u 1 --seed 5 --device cpu -d 128 -x 4 --ckpt-every 2"
static void test_data_parallel_cpu(void) {
    if (!have_data()) { BT_SKIP("no data (make data)"); return; }
    static const char *const modes[3] = {"ddp", "zero1", "zero2"};
    char args[1600], tag[64], dir[64], c1[900], c2[900], c4[900], r4[900];   /* args: run_logged adds " -o DIR" within 2400 */
    double l1[8], l2[8], lr[8];
    int bitwise;
    snprintf(args, sizeof args, "-e ls2 " DP_RUN " --ckpt-dir %s/dp1.ck", bt_test_dir);
    if (run_logged(1, args, "dp1", l1, 8) != 4) return;
    ckpt_file("dp1.ck", 2, c1, sizeof c1);
    for (int k = 0; k < 3; k++) {
        snprintf(dir, sizeof dir, "dp_%s.ck", modes[k]);
        snprintf(tag, sizeof tag, "dp_%s", modes[k]);
        snprintf(args, sizeof args, "-e ls2 " DP_RUN " --dp %s --ckpt-dir %s/%s", modes[k], bt_test_dir, dir);
        if (run_logged(2, args, tag, l2, 8) != 4) continue;
        double worst = loss_diff(l2, l1, 4);
        BT_CHECK(worst < DP_LOSS_TOL, "--dp %s on 2 CPU ranks: losses differ from one process's by %.3g (step 1: %.7f vs %.7f)", modes[k], worst, l2[0], l1[0]);
        ckpt_file(dir, 2, c2, sizeof c2);
        ckpt_file(dir, 4, c4, sizeof c4);
        double e = ckpt_diff(c2, c1, &bitwise);
        BT_CHECK(e < DP_LOSS_TOL, "--dp %s: the checkpoint of step 2 differs from one process's by %.3g (relative)", modes[k], e);
        printf("info: Llama ls2 --dp %s on 2 CPU ranks vs 1 process: losses within %.2e, checkpoint within %.2e\n", modes[k], worst, e);
        snprintf(dir, sizeof dir, "dp_%s_r.ck", modes[k]);
        snprintf(tag, sizeof tag, "dp_%s_r", modes[k]);
        snprintf(args, sizeof args, DP_RUN " --dp %s --resume %s --ckpt-dir %s/%s", modes[k], c2, bt_test_dir, dir);
        if (run_logged(2, args, tag, lr, 8) != 2) continue;
        BT_CHECK(lr[0] == l2[2] && lr[1] == l2[3], "--dp %s resumed: losses %.7f %.7f, uninterrupted %.7f %.7f", modes[k], lr[0], lr[1], l2[2], l2[3]);
        ckpt_file(dir, 4, r4, sizeof r4);
        e = ckpt_diff(r4, c4, &bitwise);
        BT_CHECK(bitwise, "--dp %s resumed: the checkpoint of step 4 is not bitwise the uninterrupted run's (%.3g)", modes[k], e);
        /* --offload adamw (each rank's range of m and v in host memory): the same losses and checkpoint, bit for bit */
        snprintf(dir, sizeof dir, "dp_%s_off.ck", modes[k]);
        snprintf(tag, sizeof tag, "dp_%s_off", modes[k]);
        snprintf(args, sizeof args, "-e ls2 " DP_RUN " --dp %s --offload adamw --ckpt-dir %s/%s", modes[k], bt_test_dir, dir);
        int n_off = run_logged(2, args, tag, lr, 8);
        BT_CHECK(n_off == 4, "--dp %s --offload adamw: %d steps logged", modes[k], n_off);
        if (n_off != 4) continue;
        BT_CHECK(!memcmp(lr, l2, 4 * sizeof(double)), "--dp %s --offload adamw: losses %.9f .. %.9f, without it %.9f .. %.9f", modes[k], lr[0],
                 lr[3], l2[0], l2[3]);
        ckpt_file(dir, 4, r4, sizeof r4);
        e = ckpt_diff(r4, c4, &bitwise);
        BT_CHECK(bitwise, "--dp %s --offload adamw: the checkpoint of step 4 is not bitwise the run's without it (%.3g)", modes[k], e);
    }
}

int main(int argc, char **argv) {
    if (train_runs_child(argc, argv)) return train_runs_child_main(argc, argv);
    train_runs_init("test_train_llama");
    BT_RUN(test_presets);
    BT_RUN(test_build_padded);
    BT_RUN(test_refusals);
    BT_RUN(test_resume_bit_exact);
    BT_RUN(test_recompute_run);
    BT_RUN(test_export_init_from_eval);
    BT_RUN(test_loss_falls);
    BT_RUN(test_data_parallel_cpu);
    train_runs_done();
    return bt_test_summary("test_train_llama");
}
