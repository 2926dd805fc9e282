/* test_chart.c - bt_chart.h and the bt_chart tool: synthetic logs (nulls, a half-written last
   line, validation every k steps, two runs, one step, out of order, 100,000 steps) drawn through
   the API and the tool, each SVG checked by tests/chart_check.py (python3's xml.etree: it parses;
   each line has one point per logged step, inside the plot area, x monotone); the checker shown to
   fail on doctored SVGs; round ticks and their labels; bad inputs and outputs. Run from the
   repository's root (make test). White-box: it compiles the implementations itself. */
#define _POSIX_C_SOURCE 200809L
#define BT_DATA_IMPLEMENTATION
#define BT_CHART_IMPLEMENTATION
#include "bt_chart.h"
#include "tests/bt_test.h"
#include "tests/bt_test_files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int have_python;   /* python3 with xml.etree: else the SVG checks are skipped */

/* tests/chart_check.py on svg with the expectations; its exit code (0: all holds). Its output is
   printed when it is not the one wanted. */
static int check_svg(const char *svg, const char *expect, int want) {
    char cmd[4096], out[600];
    FILE *p;
    int rc;
    snprintf(cmd, sizeof cmd, "python3 tests/chart_check.py '%s' %s 2>&1", svg, expect);
    if (!(p = popen(cmd, "r"))) return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    rc = pclose(p);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (rc != want) fprintf(stderr, "    chart_check.py %s %s -> %d:\n%s", svg, expect, rc, out);
    return rc;
}

/* a shell command's exit code, its stderr in bt_test_dir/stderr.txt */
static int run_cmd(const char *cmd) {
    char full[4096];
    snprintf(full, sizeof full, "%s >/dev/null 2>'%s'", cmd, bt_test_path("stderr.txt"));
    int rc = system(full);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* A synthetic log.jsonl the way train_gpt2 writes it: steps 1..steps, validation every val_every
   steps and at the last (val_null: that step's validation is null), train loss null at the nulls,
   "tokens" when tokens, a half-written last line when half. The counts of what must be drawn. */
typedef struct {
    int steps, val_every, tokens, half, val_null;
    int nulls[4], nnull;
    double tps;
} logspec;
typedef struct { int train, val, nonfinite; } logcount;

static logcount write_log(const char *path, logspec s) {
    logcount c = {0, 0, 0};
    FILE *f = fopen(path, "w");
    int i, k;
    if (!f) { perror(path); exit(1); }
    for (i = 1; i <= s.steps; i++) {
        int isnull = 0, isval = s.val_every && (i % s.val_every == 0 || i == s.steps);
        double loss = 3 + 8 * exp(-i / 40.0) + 0.1 * sin(i * 0.7);
        for (k = 0; k < s.nnull; k++) isnull |= s.nulls[k] == i;
        fprintf(f, "{\"step\": %d, \"train_loss\": ", i);
        if (isnull) fprintf(f, "null"); else fprintf(f, "%.6f", loss);
        fprintf(f, ", \"lr\": %.6e, \"grad_norm\": 1.0, \"ms\": 200.000, \"host_ms\": 1.000, \"tok_per_s\": %.1f, \"mem_mib\": 112.0",
                6e-4 * (i < 30 ? i / 30.0 : 1.0), s.tps + 50 * sin(i * 0.3));
        if (s.tokens) fprintf(f, ", \"tokens\": %d", 512 * i);
        if (isval && i == s.val_null) fprintf(f, ", \"val_loss\": null");
        else if (isval) fprintf(f, ", \"val_loss\": %.6f", loss + 0.3);
        fprintf(f, "}\n");
        c.train += !isnull;
        c.nonfinite += isnull;
        c.val += isval && i != s.val_null;
    }
    if (s.half) fprintf(f, "{\"step\": %d, \"train_loss\": 2.5, \"lr\": 6.0", s.steps + 1);
    if (fclose(f)) { perror(path); exit(1); }
    return c;
}

/* temporaries ("*.tmp.*") left in bt_test_dir */
static int count_temps(void) {
    DIR *d = opendir(bt_test_dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

/* ---- two runs, through the API and through the tool ---- */

static logspec spec_a(void) {
    logspec s = {300, 25, 1, 1, 200, {100, 101, 150, 0}, 3, 2500};
    return s;
}
static logspec spec_b(void) {
    logspec s = {250, 20, 0, 0, 0, {0, 0, 0, 0}, 0, 480000};
    return s;
}

static void test_two_runs(void) {
    char expect[1024], err[1024];
    const char *logs[2], *labels[2] = {NULL, "b <&> \xff"};
    logcount a, b;
    mkdir(bt_test_path("run_a"), 0755);
    a = write_log(bt_test_path("run_a/log.jsonl"), spec_a());
    b = write_log(bt_test_path("b.jsonl"), spec_b());
    logs[0] = bt_test_path("run_a");   /* a directory: its log.jsonl */
    logs[1] = bt_test_path("b.jsonl");
    BT_CHECK(a.train == 297 && a.val == 11 && b.train == 250 && b.val == 13, "the synthetic logs: %d %d %d %d", a.train, a.val, b.train, b.val);
    BT_CHECK(bt_chart_svg(logs, labels, 2, bt_test_path("two.svg"), "two runs & a title", err, sizeof err) == 0, "%s", err);
    BT_CHECK(count_temps() == 0, "a temporary was left");
    if (!have_python) { BT_SKIP("no python3 with xml.etree: the SVG is not checked"); return; }
    /* run b has no "tokens": no line of it in loss vs tokens */
    snprintf(expect, sizeof expect,
             "strict panels=loss_step,loss_tokens,lr,tok_per_s 'text=two runs & a title' "
             "loss_step/0/train=%d loss_step/0/val=%d loss_step/1/train=%d loss_step/1/val=%d "
             "loss_tokens/0/train=%d loss_tokens/0/val=%d loss_tokens/1/train=0 loss_tokens/1/val=0 "
             "lr/0/lr=300 lr/1/lr=250 tok_per_s/0/tok_per_s=300 tok_per_s/1/tok_per_s=250 "
             "loss_step/nonfinite/0=%d loss_tokens/nonfinite/0=%d loss_step/nonfinite/1=0",
             a.train, a.val, b.train, b.val, a.train, a.val, a.nonfinite, a.nonfinite);
    BT_CHECK(check_svg(bt_test_path("two.svg"), expect, 0) == 0, "the API's chart");
    /* the legend names both runs (b's label escaped, its invalid byte replaced) */
    BT_CHECK(bt_test_file_has(bt_test_path("two.svg"), ">run_a: train ") && bt_test_file_has(bt_test_path("two.svg"), ">b &lt;&amp;&gt; ?: train "),
             "the legend's labels");
    /* SI ticks on the tokens axis (up to 153,600 tokens) and the tokens/s axis (480K) */
    BT_CHECK(bt_test_file_has(bt_test_path("two.svg"), "K</text>"), "no K tick label");
}

static void test_tool(void) {
    char cmd[4096], expect[512];
    logcount a, b;
    if (access("./bt_chart", X_OK)) { BT_SKIP("./bt_chart is not built (make tools)"); return; }
    mkdir(bt_test_path("tool_a"), 0755);
    a = write_log(bt_test_path("tool_a/log.jsonl"), spec_a());
    b = write_log(bt_test_path("tool_b.jsonl"), spec_b());
    snprintf(cmd, sizeof cmd, "./bt_chart -o '%s' --title 'from the tool' '%s' '%s=second run'", bt_test_path("tool.svg"),
             bt_test_path("tool_a"), bt_test_path("tool_b.jsonl"));
    BT_CHECK(run_cmd(cmd) == 0, "%s", cmd);
    if (have_python) {
        snprintf(expect, sizeof expect, "strict 'text=from the tool' loss_step/0/train=%d loss_step/0/val=%d loss_step/1/train=%d loss_step/1/val=%d",
                 a.train, a.val, b.train, b.val);
        BT_CHECK(check_svg(bt_test_path("tool.svg"), expect, 0) == 0, "the tool's chart");
    }
    BT_CHECK(bt_test_file_has(bt_test_path("tool.svg"), ">second run: train "), "the label after '='");
    /* the default output: loss.svg beside the first log */
    snprintf(cmd, sizeof cmd, "./bt_chart '%s'", bt_test_path("tool_a"));
    BT_CHECK(run_cmd(cmd) == 0 && access(bt_test_path("tool_a/loss.svg"), R_OK) == 0, "%s: no tool_a/loss.svg", cmd);
    snprintf(cmd, sizeof cmd, "./bt_chart --log '%s'", bt_test_path("tool_b.jsonl"));
    BT_CHECK(run_cmd(cmd) == 0 && bt_test_file_has(bt_test_path("loss.svg"), "(log scale)"), "%s: no log-scale loss.svg beside the file", cmd);
    /* usage errors: 2 and the pointer to -h; errors: 1 naming the file */
    BT_CHECK(run_cmd("./bt_chart") == 2, "no argument");
    BT_CHECK(run_cmd("./bt_chart --bogus x") == 2 && bt_test_file_has(bt_test_path("stderr.txt"), "(see bt_chart -h)"), "unknown option");
    BT_CHECK(run_cmd("./bt_chart -o") == 2 && bt_test_file_has(bt_test_path("stderr.txt"), "-o needs a value"), "-o without a value");
    BT_CHECK(run_cmd("./bt_chart --size 12 x") == 2 && bt_test_file_has(bt_test_path("stderr.txt"), "--size"), "a bad --size");
    BT_CHECK(run_cmd("./bt_chart -o x.svg") == 2 && bt_test_file_has(bt_test_path("stderr.txt"), "no log given"), "no log");
    snprintf(cmd, sizeof cmd, "./bt_chart -o '%s' '%s'", bt_test_path("x.svg"), bt_test_path("missing.jsonl"));
    BT_CHECK(run_cmd(cmd) == 1 && bt_test_file_has(bt_test_path("stderr.txt"), bt_test_path("missing.jsonl")), "a missing log");
    BT_CHECK(run_cmd("./bt_chart -h") == 0, "-h");
}

/* ---- logs at the edges ---- */

static void test_edge_logs(void) {
    char err[1024];
    const char *one[1];
    logspec s1 = {1, 0, 0, 0, 0, {0}, 0, 1000};
    logspec s2 = {40, 0, 1, 1, 0, {1, 2, 3, 40}, 4, 1000};
    /* one step, no validation, no tokens: loss vs step alone on the first row */
    write_log(bt_test_path("one.jsonl"), s1);
    one[0] = bt_test_path("one.jsonl");
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("one.svg"), NULL, err, sizeof err) == 0, "%s", err);
    BT_CHECK(bt_test_file_has(bt_test_path("one.svg"), "<circle class=\"dot\""), "a lone point gets a dot");
    if (have_python) BT_CHECK(check_svg(bt_test_path("one.svg"), "strict panels=loss_step,lr,tok_per_s loss_step/0/train=1 loss_step/0/val=0 'text=training loss: one'", 0) == 0, "one step");
    /* nulls at the ends, log scale */
    write_log(bt_test_path("nulls.jsonl"), s2);
    one[0] = bt_test_path("nulls.jsonl");
    bt_chart_opts o;
    memset(&o, 0, sizeof o);
    o.log_loss = 1;
    BT_CHECK(bt_chart_svg_opts(one, NULL, 1, bt_test_path("nulls.svg"), &o, err, sizeof err) == 0, "%s", err);
    if (have_python) BT_CHECK(check_svg(bt_test_path("nulls.svg"), "strict loss_step/0/train=36 loss_tokens/0/train=36 loss_step/nonfinite/0=4", 0) == 0, "nulls, log scale");
    /* out of order, a step twice (the later entry counts), blank lines */
    bt_test_write_text(bt_test_path("order.jsonl"),
                       "{\"step\": 3, \"train_loss\": 3.0}\n\n{\"step\": 1, \"train_loss\": 1.0}\n"
                       "{\"step\": 2, \"train_loss\": 9.0}\n  \n{\"step\": 2, \"train_loss\": 2.0, \"val_loss\": 2.5}\n");
    one[0] = bt_test_path("order.jsonl");
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("order.svg"), NULL, err, sizeof err) == 0, "%s", err);
    BT_CHECK(bt_test_file_has(bt_test_path("order.svg"), "best val 2.5000 (step 2)") && !bt_test_file_has(bt_test_path("order.svg"), ">9<"),
             "the later entry of step 2 is drawn");
    if (have_python) BT_CHECK(check_svg(bt_test_path("order.svg"), "strict loss_step/0/train=3 loss_step/0/val=1 lr/0/lr=0", 0) == 0, "sorted steps");
}

/* 100,000 steps: min/max buckets of 20 steps; exactly BT_CHART_MAX_POINTS steps: one point each */
static void test_long_log(void) {
    char err[1024], expect[256];
    const char *one[1];
    logspec big = {100000, 1000, 1, 0, 0, {0}, 0, 600000}, edge = {BT_CHART_MAX_POINTS, 0, 0, 0, 0, {0}, 0, 1000};
    logspec over = {BT_CHART_MAX_POINTS + 1, 0, 0, 0, 0, {0}, 0, 1000};
    double t0;
    write_log(bt_test_path("big.jsonl"), big);
    one[0] = bt_test_path("big.jsonl");
    t0 = bt_test_now_ms();
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("big.svg"), NULL, err, sizeof err) == 0, "%s", err);
    if (bt_test_verbose()) fprintf(stderr, "    100,000 steps: %.0f ms\n", bt_test_now_ms() - t0);
    BT_CHECK(bt_test_file_has(bt_test_path("big.svg"), "min/max of 20-step buckets"), "the buckets are not said");
    if (have_python) {
        snprintf(expect, sizeof expect, "'loss_step/0/train<=%d' loss_step/0/val=100 'lr/0/lr<=%d'", BT_CHART_MAX_POINTS, BT_CHART_MAX_POINTS);
        BT_CHECK(check_svg(bt_test_path("big.svg"), expect, 0) == 0, "100,000 steps");
        /* a bucket's lowest and highest points are two steps here: exactly 2 points a bucket */
        snprintf(expect, sizeof expect, "loss_step/0/train=%d", BT_CHART_MAX_POINTS);
        BT_CHECK(check_svg(bt_test_path("big.svg"), expect, 0) == 0, "100,000 steps: two points a bucket");
    }
    write_log(bt_test_path("edge.jsonl"), edge);
    one[0] = bt_test_path("edge.jsonl");
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("edge.svg"), NULL, err, sizeof err) == 0, "%s", err);
    BT_CHECK(!bt_test_file_has(bt_test_path("edge.svg"), "buckets"), "%d steps are drawn one by one", BT_CHART_MAX_POINTS);
    write_log(bt_test_path("over.jsonl"), over);
    one[0] = bt_test_path("over.jsonl");
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("over.svg"), NULL, err, sizeof err) == 0, "%s", err);
    BT_CHECK(bt_test_file_has(bt_test_path("over.svg"), "min/max of 3-step buckets"), "%d steps are bucketed", BT_CHART_MAX_POINTS + 1);
    if (have_python) {
        snprintf(expect, sizeof expect, "strict loss_step/0/train=%d", BT_CHART_MAX_POINTS);
        BT_CHECK(check_svg(bt_test_path("edge.svg"), expect, 0) == 0, "%d steps", BT_CHART_MAX_POINTS);
    }
}

/* ---- the checker fails on what it must catch ---- */

/* svg with the first occurrence of from replaced by to, into out */
static int doctor(const char *svg, const char *out, const char *from, const char *to) {
    char *s = bt_test_read_file(svg, NULL), *p;
    if (!s || !(p = strstr(s, from))) { free(s); return -1; }
    FILE *f = fopen(out, "w");
    if (!f) { free(s); return -1; }
    fwrite(s, 1, (size_t)(p - s), f);
    fputs(to, f);
    fputs(p + strlen(from), f);
    fclose(f);
    free(s);
    return 0;
}

static void test_checker_fails(void) {
    char err[1024], *s, *p, *q, from[64], to[160];
    const char *one[1];
    logspec sp = {30, 10, 0, 0, 0, {0}, 0, 1000};
    if (!have_python) { BT_SKIP("no python3 with xml.etree"); return; }
    write_log(bt_test_path("small.jsonl"), sp);
    one[0] = bt_test_path("small.jsonl");
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("small.svg"), NULL, err, sizeof err) == 0, "%s", err);
    BT_CHECK(check_svg(bt_test_path("small.svg"), "strict loss_step/0/train=30 loss_step/0/val=3", 0) == 0, "the original");
    /* a wrong count */
    BT_CHECK(check_svg(bt_test_path("small.svg"), "loss_step/0/train=29", 1) == 1, "a wrong count passed");
    BT_CHECK(check_svg(bt_test_path("small.svg"), "loss_step/0/val=4", 1) == 1, "a wrong validation count passed");
    BT_CHECK(check_svg(bt_test_path("small.svg"), "panels=loss_step,lr", 1) == 1, "wrong panels passed");
    /* the train line's first point: dropped, moved out of the plot, moved behind the second */
    s = bt_test_read_file(bt_test_path("small.svg"), NULL);
    p = s ? strstr(s, "data-kind=\"train\"") : NULL;
    p = p ? strstr(p, "<polyline points=\"") : NULL;
    if (!p) { BT_CHECK(0, "no train polyline"); free(s); return; }
    p += strlen("<polyline points=\"");
    q = strchr(p, ' ');
    snprintf(from, sizeof from, "%.*s", (int)(q - p + 1), p);
    BT_CHECK(doctor(bt_test_path("small.svg"), bt_test_path("d1.svg"), from, "") == 0 &&
             check_svg(bt_test_path("d1.svg"), "loss_step/0/train=30", 1) == 1, "a dropped point passed");
    BT_CHECK(doctor(bt_test_path("small.svg"), bt_test_path("d2.svg"), from, "-5,10 ") == 0 && check_svg(bt_test_path("d2.svg"), "", 1) == 1,
             "a point outside the plot passed");
    snprintf(to, sizeof to, "%s%s", from, from);   /* the same x twice: not strictly increasing */
    BT_CHECK(doctor(bt_test_path("small.svg"), bt_test_path("d3.svg"), from, to) == 0 && check_svg(bt_test_path("d3.svg"), "strict", 1) == 1,
             "a repeated x passed");
    /* a point far right before the rest: x goes back after it */
    BT_CHECK(doctor(bt_test_path("small.svg"), bt_test_path("d4.svg"), from, "1000,200 ") == 0 && check_svg(bt_test_path("d4.svg"), "", 1) == 1,
             "x going back passed");
    BT_CHECK(doctor(bt_test_path("small.svg"), bt_test_path("d5.svg"), "<circle class=\"mark\"", "<circle class=\"gone\"") == 0 &&
             check_svg(bt_test_path("d5.svg"), "", 1) == 1, "a missing validation mark passed");
    BT_CHECK(doctor(bt_test_path("small.svg"), bt_test_path("d6.svg"), "</svg>", "") == 0 && check_svg(bt_test_path("d6.svg"), "", 1) == 1,
             "a cut file passed");
    BT_CHECK(check_svg(bt_test_path("small.svg"), "'text=no such title'", 1) == 1, "a missing text passed");
    free(s);
}

/* ---- round ticks and their labels (white-box: bt__caxis_make) ---- */

/* every tick a multiple of one step of 1, 2, 2.5 or 5 x 10^k, the data inside [lo, hi] */
static int round_ticks(const bt__caxis *a, double lo, double hi) {
    double step, m, f;
    int i;
    if (a->nt < 2 || a->lo > lo || a->hi < hi) return 0;
    step = a->t[1] - a->t[0];
    m = pow(10, floor(log10(step) + 1e-9));
    f = step / m;
    if (!(fabs(f - 1) < 1e-9 || fabs(f - 2) < 1e-9 || fabs(f - 2.5) < 1e-9 || fabs(f - 5) < 1e-9)) return 0;
    for (i = 0; i < a->nt; i++)
        if (fabs(a->t[i] / step - floor(a->t[i] / step + 0.5)) > 1e-6) return 0;
    return 1;
}
static int has_label(const bt__caxis *a, const char *s) {
    for (int i = 0; i < a->nt; i++)
        if (!strcmp(a->lab[i], s)) return 1;
    return 0;
}

static void test_ticks(void) {
    bt__caxis a;
    bt__caxis_make(&a, 1, 153600, 0, 1, BT__CFMT_SI, 530, 1, 11);
    BT_CHECK(round_ticks(&a, 1, 153600) && has_label(&a, "0") && has_label(&a, "50K"), "tokens: %d ticks, %s .. %s", a.nt, a.lab[1], a.lab[a.nt - 1]);
    bt__caxis_make(&a, 0, 1.5e6, 0, 1, BT__CFMT_SI, 530, 1, 11);
    BT_CHECK(round_ticks(&a, 0, 1.5e6) && has_label(&a, "1.5M") && has_label(&a, "250K") && has_label(&a, "1M"), "1.5M: %s %s %s", a.lab[0], a.lab[1], a.lab[a.nt - 1]);
    bt__caxis_make(&a, 1e8, 2e9, 0, 1, BT__CFMT_SI, 530, 1, 11);
    BT_CHECK(round_ticks(&a, 1e8, 2e9) && has_label(&a, "2B"), "2B: %s %s %s", a.lab[0], a.lab[1], a.lab[a.nt - 1]);
    bt__caxis_make(&a, 1, 300, 0, 1, BT__CFMT_SI, 530, 1, 11);
    BT_CHECK(round_ticks(&a, 1, 300) && has_label(&a, "300") && !has_label(&a, "0.3K"), "steps: %s %s", a.lab[1], a.lab[a.nt - 1]);
    bt__caxis_make(&a, 1, 1, 0, 1, BT__CFMT_SI, 530, 1, 11);
    BT_CHECK(round_ticks(&a, 1, 1) && a.t[1] - a.t[0] >= 1, "one step: %d ticks from %g, step %g", a.nt, a.t[0], a.t[1] - a.t[0]);
    bt__caxis_make(&a, 6.67e-5, 6e-4, 0, 0, BT__CFMT_PLAIN, 330, 0, 11);
    BT_CHECK(round_ticks(&a, 6.67e-5, 6e-4) && has_label(&a, "2e-4") && has_label(&a, "0"), "lr: %s %s %s", a.lab[0], a.lab[1], a.lab[2]);
    bt__caxis_make(&a, 4.93, 10.84, 0, 0, BT__CFMT_PLAIN, 330, 0, 11);
    BT_CHECK(round_ticks(&a, 4.93, 10.84) && has_label(&a, "5") && has_label(&a, "10"), "loss: %s .. %s", a.lab[0], a.lab[a.nt - 1]);
    bt__caxis_make(&a, 3.21, 3.26, 0, 0, BT__CFMT_PLAIN, 330, 0, 11);
    BT_CHECK(round_ticks(&a, 3.21, 3.26) && has_label(&a, "3.22"), "a narrow loss range: %s %s", a.lab[0], a.lab[1]);
    bt__caxis_make(&a, 2100, 2650, 0, 0, BT__CFMT_SI, 330, 0, 11);
    BT_CHECK(round_ticks(&a, 2100, 2650) && has_label(&a, "2500"), "tok/s: %s %s", a.lab[0], a.lab[1]);
    for (int horizontal = 0; horizontal < 2; horizontal++) {
        bt__caxis_make(&a, 0, 123456789, 0, 1, BT__CFMT_SI, 200, horizontal, 11);
        BT_CHECK(bt__caxis_fits(&a, 200, horizontal, 11) && a.nt >= 2, "labels overlap on 200 px: %d ticks", a.nt);
    }
    /* log scale: 1..9 per decade over a narrow range, decades over a wide one, all inside */
    bt__caxis_make(&a, 3.1, 10.9, 1, 0, BT__CFMT_PLAIN, 330, 0, 11);
    BT_CHECK(a.log && has_label(&a, "5") && has_label(&a, "10") && a.lo <= 3.1 && a.hi >= 10.9, "log loss: %d ticks %s .. %s", a.nt, a.lab[0], a.lab[a.nt - 1]);
    bt__caxis_make(&a, 1e-3, 1e3, 1, 0, BT__CFMT_PLAIN, 330, 0, 11);
    BT_CHECK(a.log && has_label(&a, "1") && has_label(&a, "1000") && has_label(&a, "0.001"), "log decades: %d ticks %s .. %s", a.nt, a.lab[0], a.lab[a.nt - 1]);
    bt__caxis_make(&a, 3.21, 3.26, 1, 0, BT__CFMT_PLAIN, 330, 0, 11);
    BT_CHECK(a.log && a.nt >= 2 && a.lo <= 3.21 && a.hi >= 3.26, "a narrow log range: %d ticks", a.nt);
    char b[32];
    bt__cfixed(b, sizeof b, -0.004, 2);
    BT_CHECK(!strcmp(b, "0.00"), "-0.004 -> %s (no minus zero)", b);
    bt__cfixed(b, sizeof b, -12.345, 1);
    BT_CHECK(!strcmp(b, "-12.3"), "-12.345 -> %s", b);
}

/* ---- bad inputs and outputs: -1 and a message naming the file (and the line) ---- */

static void test_errors(void) {
    char err[1024], want[1200], *before, *after;
    const char *one[1], *two[2];
    char okp[512], midp[512];   /* bt_test_path's buffers rotate: these paths are kept */
    logspec ok = {20, 5, 0, 0, 0, {0}, 0, 1000};
    snprintf(okp, sizeof okp, "%s", bt_test_path("ok.jsonl"));
    snprintf(midp, sizeof midp, "%s", bt_test_path("mid.jsonl"));
    write_log(okp, ok);
    one[0] = bt_test_path("missing.jsonl");
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("e.svg"), NULL, err, sizeof err) == -1 && strstr(err, bt_test_path("missing.jsonl")),
             "missing: %s", err);
    /* a line in the middle that is not JSON: file:line */
    bt_test_write_text(bt_test_path("mid.jsonl"), "{\"step\": 1, \"train_loss\": 5.0}\n{\"step\": 2, \"train_loss\": 4.0}\n{\"step\": 3, \"train_lo\n{\"step\": 4, \"train_loss\": 3.0}\n");
    one[0] = midp;
    snprintf(want, sizeof want, "%s:3:", midp);
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("e.svg"), NULL, err, sizeof err) == -1 && strstr(err, want) && strstr(err, "not a JSON line"), "mid: %s", err);
    /* a cut line at the end that has its newline is an error too (only an unfinished last line is skipped) */
    bt_test_write_text(bt_test_path("cutnl.jsonl"), "{\"step\": 1, \"train_loss\": 5.0}\n{\"step\": 2, \"tr\n");
    one[0] = bt_test_path("cutnl.jsonl");
    snprintf(want, sizeof want, "%s:2:", bt_test_path("cutnl.jsonl"));
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("e.svg"), NULL, err, sizeof err) == -1 && strstr(err, want), "cut with newline: %s", err);
    /* wrong types, no step, not an object */
    bt_test_write_text(bt_test_path("types.jsonl"), "{\"step\": 1, \"train_loss\": 5.0}\n{\"step\": 2, \"train_loss\": \"4.0\"}\n");
    one[0] = bt_test_path("types.jsonl");
    snprintf(want, sizeof want, "%s:2: \"train_loss\" is a string", bt_test_path("types.jsonl"));
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("e.svg"), NULL, err, sizeof err) == -1 && strstr(err, want), "a string: %s", err);
    bt_test_write_text(bt_test_path("nostep.jsonl"), "{\"step\": 1.5, \"train_loss\": 5.0}\n");
    one[0] = bt_test_path("nostep.jsonl");
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("e.svg"), NULL, err, sizeof err) == -1 && strstr(err, ":1: \"step\""), "a fractional step: %s", err);
    bt_test_write_text(bt_test_path("arr.jsonl"), "[1, 2]\n");
    one[0] = bt_test_path("arr.jsonl");
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("e.svg"), NULL, err, sizeof err) == -1 && strstr(err, "an array, not a JSON object"), "an array: %s", err);
    bt_test_write_text(bt_test_path("empty.jsonl"), "{\"step\": 1, \"tr");
    one[0] = bt_test_path("empty.jsonl");
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("e.svg"), NULL, err, sizeof err) == -1 && strstr(err, "no step logged"), "only a cut line: %s", err);
    BT_CHECK(access(bt_test_path("e.svg"), F_OK) != 0, "a failed chart left a file");
    /* the second log's error names the second log */
    two[0] = okp; two[1] = midp;
    BT_CHECK(bt_chart_svg(two, NULL, 2, bt_test_path("e.svg"), NULL, err, sizeof err) == -1 && strstr(err, "mid.jsonl:3:"), "the second log: %s", err);
    /* outputs: a missing directory, a directory, a symbolic link (refused, its target untouched) */
    one[0] = okp;
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("no/such/x.svg"), NULL, err, sizeof err) == -1 && strstr(err, bt_test_path("no/such")), "no dir: %s", err);
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_dir, NULL, err, sizeof err) == -1 && strstr(err, bt_test_dir) && strstr(err, "directory"), "a directory: %s", err);
    bt_test_write_text(bt_test_path("target.txt"), "keep me");
    BT_CHECK(symlink(bt_test_path("target.txt"), bt_test_path("link.svg")) == 0, "symlink");
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("link.svg"), NULL, err, sizeof err) == -1 && strstr(err, bt_test_path("link.svg")) && strstr(err, "symbolic link"),
             "a link: %s", err);
    BT_CHECK(bt_test_file_has(bt_test_path("target.txt"), "keep me"), "the link's target was written");
    BT_CHECK(bt_chart_svg(one, NULL, 1, "", NULL, err, sizeof err) == -1 && strstr(err, "empty"), "an empty path: %s", err);
    BT_CHECK(bt_chart_svg(one, NULL, 0, bt_test_path("e.svg"), NULL, err, sizeof err) == -1 && strstr(err, "no log"), "no log: %s", err);
    /* a failed chart leaves the previous one whole */
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("keep.svg"), NULL, err, sizeof err) == 0, "%s", err);
    before = bt_test_read_file(bt_test_path("keep.svg"), NULL);
    one[0] = midp;
    BT_CHECK(bt_chart_svg(one, NULL, 1, bt_test_path("keep.svg"), NULL, err, sizeof err) == -1, "mid.jsonl drew");
    after = bt_test_read_file(bt_test_path("keep.svg"), NULL);
    BT_CHECK(before && after && !strcmp(before, after), "the previous chart changed");
    BT_CHECK(count_temps() == 0, "a temporary was left");
    free(before); free(after);
}

int main(void) {
    if (bt_test_dir_make("test_chart")) return 1;
    have_python = system("python3 -c 'import xml.etree.ElementTree' >/dev/null 2>&1") == 0;
    BT_RUN(test_two_runs);
    BT_RUN(test_tool);
    BT_RUN(test_edge_logs);
    BT_RUN(test_long_log);
    BT_RUN(test_checker_fails);
    BT_RUN(test_ticks);
    BT_RUN(test_errors);
    bt_test_dir_remove();
    return bt_test_summary("test_chart");
}
