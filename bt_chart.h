/* bt_chart.h - BluTrain-C loss curves, v0.1: training logs (log.jsonl) drawn as one SVG file.

   USAGE
     #define BT_CHART_IMPLEMENTATION   in *one* C/CUDA file before including this header, with
     bt_data.h's implementation in that file or another: it reads the logs with bt_data.h's JSON
     parser and writes the SVG through its atomic files. It includes bt_data.h and nothing else of
     ours; like bt_data.h it needs POSIX.1-2008 (getline): that file defines _POSIX_C_SOURCE
     200809L before its first #include. It compiles as C11 and as CUDA C++ (nvcc -x cu).

       const char *logs[] = {"runs/a/log.jsonl", "runs/b"};   // a directory means DIR/log.jsonl
       const char *labels[] = {"baseline", NULL};              // NULL: from the path ("b")
       char err[512];
       if (bt_chart_svg(logs, labels, 2, "runs/loss.svg", "lr sweep", err, sizeof err))
           fprintf(stderr, "%s\n", err);

     tools/bt_chart.c is its command line: bt_chart [-o OUT.svg] [--title T] [--log] LOG_OR_DIR[=LABEL] ...

   WHAT IT DRAWS
     A title, a legend (one colour per run: its label, its last train loss and its best validation
     loss with their steps; solid lines are train loss, dashed lines with dots validation loss) and
     four panels:
       loss vs step      the train loss of every logged step, the validation loss of each validation
       loss vs tokens    the same against "tokens" (tokens trained up to and with that step); only
                         when a log has the field (without it, loss vs step takes the first row)
       learning rate     "lr" against step
       tokens/s          "tok_per_s" against step
     Ticks are round values (1, 2, 2.5 or 5 x 10^k); steps, tokens and tokens/s from 10,000 on are
     written 10K, 1.5M, 2B; small learning rates 2e-4. opts.log_loss puts the loss axes in log scale
     (a loss <= 0 is then not drawn). A non-finite value (null in the log) leaves a gap in its line;
     a step whose train loss is not finite also gets a red tick at the foot of the loss panels.
     Every logged step is one point of each line (each validation one point of the validation
     line) up to BT_CHART_MAX_POINTS (10,000) points per line. A longer line is cut into
     BT_CHART_MAX_POINTS / 2 buckets of consecutive points, each drawn as its lowest and its highest
     value (a spike stays visible; a gap shorter than a bucket does not), and the panel's title says
     "min/max of k-step buckets". Drawing 100,000 steps takes about 0.1 s.

   THE LOG
     As train_gpt2 writes it (docs/options.md): one JSON object per line with "step" (an integer,
     required), "train_loss", "lr", "tok_per_s", and optional "val_loss" and "tokens": numbers or
     null; a missing one counts as null, other members are ignored. Empty lines are skipped, and so
     is a last line without its newline that is not JSON (a writer killed in the middle of a line,
     or one still writing). Any other line that is not a JSON object with an integer "step", or
     whose fields hold something other than a number or null, is an error naming the file and the
     line. Steps out of order are sorted; of two entries of one step the later one is drawn.

   THE FILE
     Written atomically through bt_data.h (a temporary beside it, renamed over it): a reader (a
     browser reloading it during a run) sees the previous chart or the new one, never a part of one.
     BT_OUTPUT_NOFOLLOW: a symbolic link at svg_path is refused, never written through. The path is
     checked before the logs are read. The SVG names its parts for programs (tests/chart_check.py):
     each panel is a <g class="panel" data-panel="loss_step|loss_tokens|lr|tok_per_s"> whose
     <rect class="plot"> is the plot area; each line a <g class="series" data-run="K"
     data-kind="train|val|lr|tok_per_s"> holding one <polyline> per stretch without a gap (and a
     <circle class="dot"> for a stretch of one point) and, for validation, one <circle class="mark">
     per point; the non-finite steps of run K are <path class="nonfinite" data-run="K">.

   ERRORS
     Library code never prints and never exits. bt_chart_svg returns 0, or -1 with a message in
     err[errlen] (bt_msgf: a long path keeps its head and tail) naming the file, and for a log the
     line.

   OPTIONS (define before the implementation)
     BT_MALLOC/BT_FREE (both or neither; else malloc/free), as for bt_data.h.
     BT_CHART_STATIC: make every function static to the including file.
     BT_CHART_MAX_POINTS: points drawn per line before min/max buckets (default 10000, at least 4).

   HISTORY
     0.1  first version: four panels, several runs, log-scale loss, the bt_chart tool.
*/
#ifndef BT_CHART_H
#define BT_CHART_H

#include "bt_data.h"
#include <stddef.h>

#ifdef BT_CHART_STATIC
#define BT_CHART_DEF static
#else
#define BT_CHART_DEF extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *title;   /* NULL or "": the runs' labels */
    int log_loss;        /* the loss panels' y axes in log scale */
    int width, height;   /* the SVG's size in px; 0: 1200 x 900 (at least 480 x 360) */
} bt_chart_opts;

/* One SVG of n >= 1 runs: logs[k] is a log.jsonl or a directory holding one; labels[k] names it in
   the legend (labels NULL, or labels[k] NULL or "": bt_chart_label of the path). title NULL: the
   labels. 0, or -1 with err set. */
BT_CHART_DEF int bt_chart_svg(const char *const *logs, const char *const *labels, int n,
                              const char *svg_path, const char *title, char *err, size_t errlen);
/* The same with options (opts NULL: the defaults). */
BT_CHART_DEF int bt_chart_svg_opts(const char *const *logs, const char *const *labels, int n,
                                   const char *svg_path, const bt_chart_opts *opts, char *err, size_t errlen);
/* The label of a log's path: DIR or DIR/log.jsonl -> DIR's last component; a/run7.jsonl -> run7. */
BT_CHART_DEF void bt_chart_label(const char *path, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* BT_CHART_H */

/* ================================================================================================
   IMPLEMENTATION
   ------------------------------------------------------------------------------------------------
   Contents
     1. Common: allocation, the text buffer, numbers whatever the locale, XML text
     2. Logs: log.jsonl into columns
     3. Axes: ranges, round ticks, their labels
     4. Series: a run's points in a panel, gaps, min/max buckets
     5. Drawing: the title, the legend, a panel
     6. bt_chart_svg: the layout, the file
   ================================================================================================ */
#ifdef BT_CHART_IMPLEMENTATION
#ifndef BT_CHART_IMPLEMENTATION_DONE
#define BT_CHART_IMPLEMENTATION_DONE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stdint.h>
#include <math.h>
#include <errno.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(_WIN32) && !defined(__cplusplus) && (!defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L) && !defined(_GNU_SOURCE)
#error "bt_chart.h needs POSIX.1-2008 (getline): #define _POSIX_C_SOURCE 200809L before the first #include"
#endif

#ifndef BT_CHART_MAX_POINTS
#define BT_CHART_MAX_POINTS 10000
#endif
#if BT_CHART_MAX_POINTS < 4
#error "BT_CHART_MAX_POINTS: at least 4"
#endif

/* ---- 1. Common ------------------------------------------------------------------------------ */

#if defined(BT_MALLOC) && defined(BT_FREE)
#define bt__cmalloc(sz) BT_MALLOC(sz)
#define bt__cfree(p) BT_FREE(p)
#elif !defined(BT_MALLOC) && !defined(BT_FREE)
#define bt__cmalloc(sz) malloc(sz)
#define bt__cfree(p) free(p)
#else
#error "bt_chart.h: define both BT_MALLOC and BT_FREE, or neither"
#endif

/* *p (elem-byte items, old of them) grown to cap items; 0, or -1 (p untouched) */
static int bt__cgrow(void **p, size_t elem, size_t old, size_t cap) {
    void *q = cap <= (size_t)-1 / elem ? bt__cmalloc(cap * elem) : NULL;
    if (!q) return -1;
    if (old) memcpy(q, *p, old * elem);
    bt__cfree(*p);
    *p = q;
    return 0;
}

/* The SVG text: appended to, failing once (oom) for good. */
typedef struct { char *p; size_t n, cap; int oom; } bt__cbuf;

static void bt__cb_put(bt__cbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 65536;
        while (c < b->n + n + 1) c *= 2;
        if (bt__cgrow((void **)&b->p, 1, b->n, c)) { b->oom = 1; return; }
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void bt__cb_s(bt__cbuf *b, const char *s) { bt__cb_put(b, s, strlen(s)); }
/* printf of integers and of our own ASCII strings: those read the same in every locale (numbers
   with a fraction go through bt__cfixed) */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void bt__cb_f(bt__cbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    int k;
    va_start(ap, fmt);
    k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k >= 0) bt__cb_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

static const double bt__cp10[10] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};

/* v with d (0..9) decimals and '.' as the point, whatever the locale (integer arithmetic) */
static void bt__cfixed(char *buf, size_t n, double v, int d) {
    double a;
    long long q, ip, fp;
    if (d < 0) d = 0;
    if (d > 9) d = 9;
    a = fabs(v) * bt__cp10[d];
    if (!(a < 9e18)) { snprintf(buf, n, "%s", v != v ? "nan" : v < 0 ? "-huge" : "huge"); return; }
    q = llround(a);
    ip = q / (long long)bt__cp10[d];
    fp = q % (long long)bt__cp10[d];
    if (d == 0) snprintf(buf, n, "%s%lld", v < 0 && q ? "-" : "", ip);
    else snprintf(buf, n, "%s%lld.%0*lld", v < 0 && q ? "-" : "", ip, d, fp);
}
/* the fewest decimals (0..9) that write v within tol */
static int bt__cdecimals(double v, double tol) {
    int d;
    for (d = 0; d < 9; d++) {
        double x = v * bt__cp10[d];
        if (fabs(x - (double)llround(x)) <= tol * bt__cp10[d]) return d;
    }
    return 9;
}
/* a pixel coordinate, 2 decimals (clamped: a point far outside is clipped anyway) */
static void bt__cb_num(bt__cbuf *b, double v) {
    char t[40];
    if (!(v > -1e6)) v = -1e6;
    if (v > 1e6) v = 1e6;
    bt__cfixed(t, sizeof t, v, 2);
    bt__cb_s(b, t);
}
static void bt__cb_xy(bt__cbuf *b, double x, double y) {
    bt__cb_num(b, x);
    bt__cb_put(b, ",", 1);
    bt__cb_num(b, y);
}

/* s as text for XML: valid UTF-8 with control characters and invalid bytes as '?', at most
   maxchars characters (a longer one keeps its head and tail around "..."); into out[n] */
static void bt__cclean(const char *s, char *out, size_t n, int maxchars) {
    size_t len = s ? strlen(s) : 0, i = 0, o = 0, bad;
    int chars = 0, k;
    char *t;
    if (!n) return;
    t = (char *)bt__cmalloc(len + 1);
    if (!t) { out[0] = 0; return; }
    while (i < len) {
        bad = i + bt_utf8_check(s + i, len - i);
        for (; i < bad; i++) t[o++] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
        if (i < len) { t[o++] = '?'; i++; }
    }
    t[o] = 0;
    for (i = 0; i < o; i++) chars += ((unsigned char)t[i] & 0xc0) != 0x80;
    if (maxchars > 8 && chars > maxchars) {
        /* head: the first (maxchars-3)/2 characters, tail: the last maxchars-3-head */
        int head = (maxchars - 3) / 2, tail = maxchars - 3 - head;
        size_t h = 0, tl = o;
        for (k = 0; k <= head && h < o; h++) k += ((unsigned char)t[h] & 0xc0) != 0x80;
        if (k > head) h--;
        for (k = 0; k < tail && tl > 0;) { tl--; k += ((unsigned char)t[tl] & 0xc0) != 0x80; }
        snprintf(out, n, "%.*s...%s", (int)h, t, t + tl);
    } else {
        snprintf(out, n, "%s", t);
    }
    /* snprintf may have cut a character in two: drop the broken tail */
    o = strlen(out);
    out[bt_utf8_check(out, o)] = 0;
    bt__cfree(t);
}
/* clean text (bt__cclean's) with & < > " escaped */
static void bt__cb_text(bt__cbuf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': bt__cb_s(b, "&amp;"); break;
        case '<': bt__cb_s(b, "&lt;"); break;
        case '>': bt__cb_s(b, "&gt;"); break;
        case '"': bt__cb_s(b, "&quot;"); break;
        default: bt__cb_put(b, s, 1);
        }
    }
}
/* a text's width in px at font size px: an estimate (0.6 em a character, about the widest of
   DejaVu Sans' digits and lower case), enough to keep labels apart */
static double bt__ctextw(const char *s, double px) {
    double w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
    return w * px * 0.6;
}

/* ---- 2. Logs -------------------------------------------------------------------------------- */

/* A run: its log's columns, one entry per step (sorted); NaN for null or absent. */
typedef struct {
    char path[4096];     /* the log file read */
    char label[160];     /* clean text (bt__cclean) */
    size_t n, cap;
    double *step, *train, *lr, *tps, *val, *tok;
    unsigned char *isval;   /* the entry had "val_loss" (null too: a validation without a number) */
    int any_val, any_tok;
} bt__crun;

static void bt__crun_free(bt__crun *r) {
    bt__cfree(r->step); bt__cfree(r->train); bt__cfree(r->lr); bt__cfree(r->tps);
    bt__cfree(r->val); bt__cfree(r->tok); bt__cfree(r->isval);
    memset(r, 0, sizeof *r);
}

static int bt__crun_push(bt__crun *r, double step, double train, double lr, double tps, double val, int isval, double tok) {
    if (r->n == r->cap) {
        size_t c = r->cap ? 2 * r->cap : 1024;
        if (bt__cgrow((void **)&r->step, sizeof(double), r->n, c) || bt__cgrow((void **)&r->train, sizeof(double), r->n, c) ||
            bt__cgrow((void **)&r->lr, sizeof(double), r->n, c) || bt__cgrow((void **)&r->tps, sizeof(double), r->n, c) ||
            bt__cgrow((void **)&r->val, sizeof(double), r->n, c) || bt__cgrow((void **)&r->tok, sizeof(double), r->n, c) ||
            bt__cgrow((void **)&r->isval, 1, r->n, c))
            return -1;   /* the arrays grown so far hold r->n entries still: freed by bt__crun_free */
        r->cap = c;
    }
    r->step[r->n] = step; r->train[r->n] = train; r->lr[r->n] = lr; r->tps[r->n] = tps;
    r->val[r->n] = val; r->isval[r->n] = (unsigned char)isval; r->tok[r->n] = tok;
    r->n++;
    return 0;
}

/* the member key of o as a number: NaN for null or absent; -1 for another type */
static int bt__cnum(const bt_json *o, const char *key, double *out) {
    const bt_json *v = bt_json_get(o, key);
    *out = NAN;
    if (!v || v->type == BT_JSON_NULL) return 0;
    if (v->type != BT_JSON_NUMBER) return -1;
    *out = v->num;
    return 0;
}
static const char *bt__cjson_type(const bt_json *v) {
    static const char *names[] = {"null", "false", "true", "a number", "a string", "an array", "an object"};
    return v && (int)v->type >= 0 && (int)v->type < 7 ? names[v->type] : "?";
}

typedef struct { double step; size_t i; } bt__cord;
static int bt__cord_cmp(const void *a, const void *b) {
    const bt__cord *x = (const bt__cord *)a, *y = (const bt__cord *)b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}
/* entries sorted by step, the later entry of a step kept */
static int bt__crun_sort(bt__crun *r) {
    size_t i, m = 0;
    bt__cord *o;
    double *cols[6];
    double *tmp;
    unsigned char *tv;
    int c;
    for (i = 1; i < r->n && r->step[i] > r->step[i - 1]; i++) {}
    if (i >= r->n) return 0;
    o = (bt__cord *)bt__cmalloc(r->n * sizeof *o);
    tmp = (double *)bt__cmalloc(r->n * sizeof *tmp);
    tv = (unsigned char *)bt__cmalloc(r->n);
    if (!o || !tmp || !tv) { bt__cfree(o); bt__cfree(tmp); bt__cfree(tv); return -1; }
    for (i = 0; i < r->n; i++) { o[i].step = r->step[i]; o[i].i = i; }
    qsort(o, r->n, sizeof *o, bt__cord_cmp);
    for (i = 0; i < r->n; i++)
        if (i + 1 == r->n || o[i + 1].step != o[i].step) o[m++] = o[i];
    cols[0] = r->step; cols[1] = r->train; cols[2] = r->lr; cols[3] = r->tps; cols[4] = r->val; cols[5] = r->tok;
    for (c = 0; c < 6; c++) {
        for (i = 0; i < m; i++) tmp[i] = cols[c][o[i].i];
        memcpy(cols[c], tmp, m * sizeof *tmp);
    }
    for (i = 0; i < m; i++) tv[i] = r->isval[o[i].i];
    memcpy(r->isval, tv, m);
    r->n = m;
    bt__cfree(o); bt__cfree(tmp); bt__cfree(tv);
    return 0;
}

/* whitespace only */
static int bt__cblank(const char *s, size_t n) {
    size_t i;
    for (i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

/* r's columns from path (a log.jsonl, or a directory holding one); 0, or -1 with err set */
static int bt__crun_read(bt__crun *r, const char *path, char *err, size_t errlen) {
    static const char *const keys[5] = {"train_loss", "lr", "tok_per_s", "val_loss", "tokens"};
    struct stat st;
    FILE *f;
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int fd, rc = -1;
    if (!path || !*path) { bt_msgf(err, errlen, "chart: a log's path is empty"); return -1; }
    {
        int dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode), n;
        n = dir ? snprintf(r->path, sizeof r->path, "%s%slog.jsonl", path, path[strlen(path) - 1] == '/' ? "" : "/")
                : snprintf(r->path, sizeof r->path, "%s", path);
        if (n < 0 || (size_t)n >= sizeof r->path) { bt_msgf(err, errlen, "chart: %s: the path is too long (%zu bytes at most)", path, sizeof r->path - 1); return -1; }
    }
    if ((fd = bt_input_open(r->path, NULL)) < 0) { bt_msgf(err, errlen, "chart: %s", bt_data_error()); return -1; }
    if (!(f = fdopen(fd, "rb"))) { bt_msgf(err, errlen, "chart: %s: %s", r->path, strerror(errno)); close(fd); return -1; }
    while ((len = getline(&line, &cap, f)) >= 0) {
        int nl = len > 0 && line[len - 1] == '\n', k;
        size_t m = (size_t)len - (size_t)nl;
        bt_json_doc *d;
        const bt_json *o, *sv;
        int64_t step;
        double v[5];
        lineno++;
        if (bt__cblank(line, m)) continue;
        if (!(d = bt_json_parse(line, m, 16))) {
            if (!nl) break;   /* a last line cut short: its writer was killed or is writing it */
            bt_msgf(err, errlen, "chart: %s:%zu: not a JSON line (%s)", r->path, lineno, bt_data_error());
            goto done;
        }
        o = bt_json_root(d);
        if (o->type != BT_JSON_OBJECT) {
            bt_msgf(err, errlen, "chart: %s:%zu: %s, not a JSON object", r->path, lineno, bt__cjson_type(o));
            bt_json_free(d); goto done;
        }
        if (!(sv = bt_json_get(o, "step")) || bt_json_i64(sv, &step)) {
            bt_msgf(err, errlen, "chart: %s:%zu: \"step\" is %s, expected an integer", r->path, lineno, sv ? bt__cjson_type(sv) : "missing");
            bt_json_free(d); goto done;
        }
        for (k = 0; k < 5; k++)
            if (bt__cnum(o, keys[k], &v[k])) {
                bt_msgf(err, errlen, "chart: %s:%zu: \"%s\" is %s, expected a number or null", r->path, lineno, keys[k], bt__cjson_type(bt_json_get(o, keys[k])));
                bt_json_free(d); goto done;
            }
        k = bt_json_get(o, "val_loss") != NULL;
        bt_json_free(d);
        if (bt__crun_push(r, (double)step, v[0], v[1], v[2], v[3], k, v[4])) { bt_msgf(err, errlen, "chart: %s: out of memory", r->path); goto done; }
    }
    if (ferror(f)) { bt_msgf(err, errlen, "chart: %s: read error after line %zu: %s", r->path, lineno, strerror(errno)); goto done; }
    if (!r->n) { bt_msgf(err, errlen, "chart: %s: no step logged", r->path); goto done; }
    if (bt__crun_sort(r)) { bt_msgf(err, errlen, "chart: %s: out of memory", r->path); goto done; }
    for (size_t i = 0; i < r->n; i++) {
        r->any_val |= r->isval[i];
        r->any_tok |= isfinite(r->tok[i]) != 0;
    }
    rc = 0;
done:
    free(line);   /* getline's: libc's malloc */
    fclose(f);
    return rc;
}

BT_CHART_DEF void bt_chart_label(const char *path, char *buf, size_t n) {
    char p[4096];
    size_t len;
    char *base, *dot;
    if (!n) return;
    snprintf(p, sizeof p, "%s", path && *path ? path : ".");
    len = strlen(p);
    while (len > 1 && p[len - 1] == '/') p[--len] = 0;
    base = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
    if (!strcmp(base, "log.jsonl")) {          /* DIR/log.jsonl: DIR's name */
        if (base == p) { snprintf(buf, n, "."); return; }
        len = (size_t)(base - p) - 1;
        while (len > 1 && p[len - 1] == '/') len--;
        p[len ? len : 1] = 0;
        base = strrchr(p, '/') && strrchr(p, '/')[1] ? strrchr(p, '/') + 1 : p;
    } else if ((dot = strrchr(base, '.')) && dot > base && !strcmp(dot, ".jsonl")) {
        *dot = 0;
    }
    snprintf(buf, n, "%s", base);
}

/* ---- 3. Axes -------------------------------------------------------------------------------- */

#define BT__CMAXTICKS 40
enum { BT__CFMT_PLAIN, BT__CFMT_SI };   /* how tick values read: 5.25, 2e-4 / 10K, 1.5M */

typedef struct {
    double lo, hi;              /* the range shown (log: both > 0) */
    int log;
    int nt;
    double t[BT__CMAXTICKS];
    char lab[BT__CMAXTICKS][24];
    double maxw;                /* the widest label, px */
} bt__caxis;

/* where v falls in the axis, 0 at lo, 1 at hi */
static double bt__cfrac(const bt__caxis *a, double v) {
    if (a->log) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}

/* a round step near raw: 1, 2, 2.5 or 5 x 10^k (no 2.5 below 10 on an integer axis) */
static double bt__cnice(double raw, int integer) {
    double m = pow(10, floor(log10(raw))), f = raw / m, s;
    s = (f < 1.5 ? 1 : f < 2.25 ? 2 : f < 3.5 ? 2.5 : f < 7.5 ? 5 : 10) * m;
    if (integer && s < 1) s = 1;
    if (integer && s < 10 && s != floor(s)) s = 2;
    return s;
}

/* The labels of a's ticks; step: the linear step, 0 for log ticks. PLAIN: the same decimals on
   every tick of a linear axis (2.5, 3.0, 3.5), exponents when the ticks are all below 0.01 or
   reach 1e6 (2e-4); SI (steps, tokens, tokens/s) once a tick reaches 10,000: each tick in its own
   unit, without trailing zeros (0, 250K, 1M, 1.25M). */
static void bt__caxis_label(bt__caxis *a, int fmt, double step, double fontpx) {
    double mx = 0;
    int i, d = 0, sci, si;
    for (i = 0; i < a->nt; i++) mx = fmax(mx, fabs(a->t[i]));
    si = fmt == BT__CFMT_SI && mx >= 1e4;
    sci = fmt == BT__CFMT_PLAIN && (mx >= 1e6 || (mx > 0 && mx < 1e-2));
    if (step > 0 && !sci && !si)
        for (i = 0; i < a->nt; i++) d = d > bt__cdecimals(a->t[i], step * 1e-3) ? d : bt__cdecimals(a->t[i], step * 1e-3);
    a->maxw = 0;
    for (i = 0; i < a->nt; i++) {
        double v = a->t[i], av = fabs(v), tol = (step > 0 ? step : av) * 1e-3;
        char *s = a->lab[i];
        size_t cap = sizeof a->lab[i];
        if (v == 0) {
            snprintf(s, cap, "0");
        } else if (sci) {
            int e = (int)floor(log10(av) + 1e-9), md;
            double m = v / pow(10, e);
            md = bt__cdecimals(m, tol / pow(10, e));
            bt__cfixed(s, cap, m, md > 3 ? 3 : md);
            snprintf(s + strlen(s), cap - strlen(s), "e%d", e);
        } else if (si) {
            double u = av >= 1e12 ? 1e12 : av >= 1e9 ? 1e9 : av >= 1e6 ? 1e6 : av >= 1e3 ? 1e3 : 1;
            int ud = bt__cdecimals(v / u, tol / u);
            bt__cfixed(s, cap, v / u, ud > 3 ? 3 : ud);
            snprintf(s + strlen(s), cap - strlen(s), "%s", u == 1e12 ? "T" : u == 1e9 ? "B" : u == 1e6 ? "M" : u == 1e3 ? "K" : "");
        } else {
            bt__cfixed(s, cap, v, step > 0 ? d : bt__cdecimals(v, av * 1e-6));
        }
        a->maxw = fmax(a->maxw, bt__ctextw(s, fontpx));
    }
}

/* do the labels fit along len px? (horizontal: side by side; vertical: a line each) */
static int bt__caxis_fits(const bt__caxis *a, double len, int horizontal, double fontpx) {
    int i;
    for (i = 1; i < a->nt; i++) {
        double gap = (bt__cfrac(a, a->t[i]) - bt__cfrac(a, a->t[i - 1])) * len;
        double need = horizontal ? (bt__ctextw(a->lab[i], fontpx) + bt__ctextw(a->lab[i - 1], fontpx)) / 2 + 10 : fontpx * 1.6;
        if (gap < need) return 0;
    }
    return 1;
}

/* linear ticks over [lo, hi] with about target of them; expand: the range grows to the outer ticks */
static void bt__caxis_linear(bt__caxis *a, double lo, double hi, int target, int integer, int expand, int fmt, double fontpx) {
    double step, t0;
    int i;
    a->log = 0;
    step = bt__cnice((hi - lo) / (target > 1 ? target : 1), integer);
    if (expand) {
        a->lo = floor(lo / step + 1e-9) * step;
        a->hi = ceil(hi / step - 1e-9) * step;
        if (a->hi <= a->lo) a->hi = a->lo + step;
    } else {
        a->lo = lo; a->hi = hi;
    }
    t0 = ceil(a->lo / step - 1e-9) * step;
    for (a->nt = 0, i = 0; a->nt < BT__CMAXTICKS; i++) {
        double t = t0 + i * step;
        if (t > a->hi + step * 1e-9) break;
        a->t[a->nt++] = fabs(t) < step * 1e-9 ? 0 : t;
    }
    bt__caxis_label(a, fmt, step, fontpx);
}

/* The axis of the data range [lo, hi] (lo > hi: no data) on len px, with as many round ticks as
   fit: about one per 50 px vertically, one per 90 px horizontally, fewer while labels overlap. */
static void bt__caxis_make(bt__caxis *a, double lo, double hi, int log_scale, int integer, int fmt, double len, int horizontal, double fontpx) {
    int target = (int)(len / (horizontal ? 90 : 50)), s;
    if (target < 2) target = 2;
    if (target > 12) target = 12;
    memset(a, 0, sizeof *a);
    if (log_scale) {
        /* decades, then 1-2-5, then 1..9 per decade: the densest that fits with 3 or more ticks;
           a range too narrow for 3 of those gets linear round ticks inside it */
        static const double sets[3][9] = {{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
        static const int set_n[3] = {1, 3, 9};
        double L0, L1, pad;
        if (!(lo > 0 && lo <= hi)) { lo = 1; hi = 10; }
        L0 = log10(lo); L1 = log10(hi);
        pad = L1 - L0 < 1e-9 ? 0.05 : (L1 - L0) * 0.04;
        L0 -= pad; L1 += pad;
        for (s = 2; s >= 0; s--) {
            int k, j;
            a->log = 1; a->lo = pow(10, L0); a->hi = pow(10, L1); a->nt = 0;
            if (((int)ceil(L1) - (int)floor(L0) + 1) * set_n[s] > BT__CMAXTICKS) continue;   /* too many decades for the set */
            for (k = (int)floor(L0); k <= (int)ceil(L1); k++)
                for (j = 0; j < set_n[s]; j++) {
                    double t = sets[s][j] * pow(10, k);
                    if (t >= a->lo * (1 - 1e-12) && t <= a->hi * (1 + 1e-12)) a->t[a->nt++] = t;
                }
            bt__caxis_label(a, fmt, 0, fontpx);
            if (s == 2) {
                /* 1..9 crowd towards a decade's top (log spacing): keep the decades first, then the
                   5s, the 2s and the rest, each one that clears the ticks kept (3 4 5 6 8 10) */
                static const int order[9] = {1, 5, 2, 3, 4, 6, 7, 8, 9};
                unsigned char keep[BT__CMAXTICKS] = {0};
                int o, kept = 0;
                for (o = 0; o < 9; o++)
                    for (j = 0; j < a->nt; j++) {
                        int q, ok = 1;
                        double mant = a->t[j] / pow(10, floor(log10(a->t[j]) + 1e-9));
                        if (fabs(mant - order[o]) > 1e-6) continue;
                        for (q = 0; q < a->nt && ok; q++)
                            if (keep[q]) {
                                double gap = fabs(bt__cfrac(a, a->t[j]) - bt__cfrac(a, a->t[q])) * len;
                                ok = gap >= (horizontal ? (bt__ctextw(a->lab[j], fontpx) + bt__ctextw(a->lab[q], fontpx)) / 2 + 10 : fontpx * 1.6);
                            }
                        keep[j] = (unsigned char)ok;
                    }
                for (j = 0; j < a->nt; j++)
                    if (keep[j]) {
                        a->t[kept] = a->t[j];
                        memmove(a->lab[kept], a->lab[j], sizeof a->lab[0]);
                        kept++;
                    }
                a->nt = kept;
            }
            if (a->nt >= 3 && a->nt <= target + 3 && bt__caxis_fits(a, len, horizontal, fontpx)) return;
        }
        for (; target >= 2; target--) {
            bt__caxis_linear(a, a->lo, a->hi, target, 0, 0, fmt, fontpx);
            a->log = 1;
            if (bt__caxis_fits(a, len, horizontal, fontpx)) return;
        }
        return;
    }
    if (!(lo <= hi)) { lo = 0; hi = 1; }
    if (hi - lo <= 1e-12 * fmax(fabs(lo), fabs(hi))) {
        double d = lo != 0 ? fabs(lo) * 0.1 : 1;
        if (integer && d < 1) d = 1;
        lo -= d; hi += d;
    }
    for (; target >= 2; target--) {
        bt__caxis_linear(a, lo, hi, target, integer, 1, fmt, fontpx);
        if (bt__caxis_fits(a, len, horizontal, fontpx)) return;
    }
}

/* ---- 4. Series ------------------------------------------------------------------------------ */

/* A line's points in data space; a NaN y is a gap. bucket > 1: min/max of bucket-point buckets. */
typedef struct { double *x, *y; size_t n; size_t bucket; } bt__cseries;

static void bt__cseries_free(bt__cseries *s) { bt__cfree(s->x); bt__cfree(s->y); memset(s, 0, sizeof *s); }

/* the points (xs[i], ys[i]) of the entries with take[i] (take NULL: all); a point with a
   non-finite coordinate, or y <= 0 on a log axis, is a gap. Past BT_CHART_MAX_POINTS, min/max
   buckets. 0, or -1 (out of memory). */
static int bt__cseries_make(bt__cseries *s, const double *xs, const double *ys, const unsigned char *take, size_t n, int log_y) {
    size_t i, m = 0, nb, b;
    memset(s, 0, sizeof *s);
    for (i = 0; i < n; i++) m += !take || take[i];
    if (!m) return 0;
    nb = m > BT_CHART_MAX_POINTS ? BT_CHART_MAX_POINTS / 2 : m;
    s->bucket = m > BT_CHART_MAX_POINTS ? (m + nb - 1) / nb : 1;
    s->x = (double *)bt__cmalloc(2 * nb * sizeof(double));
    s->y = (double *)bt__cmalloc(2 * nb * sizeof(double));
    if (!s->x || !s->y) { bt__cseries_free(s); return -1; }
    /* bucket b holds the taken entries [b*m/nb, (b+1)*m/nb) (one each when not bucketed) */
    for (i = 0, b = 0; b < nb; b++) {
        size_t end = (size_t)((double)(b + 1) * (double)m / (double)nb + 0.5), k = b ? (size_t)((double)b * (double)m / (double)nb + 0.5) : 0;
        size_t imin = (size_t)-1, imax = (size_t)-1, last = 0;
        double ymin = INFINITY, ymax = -INFINITY;
        if (b + 1 == nb) end = m;
        for (; k < end; i++) {
            double x, y;
            if (take && !take[i]) continue;
            k++;
            last = i;
            x = xs[i]; y = ys[i];
            if (!isfinite(x) || !isfinite(y) || (log_y && y <= 0)) continue;
            if (y < ymin) { ymin = y; imin = i; }
            if (y > ymax) { ymax = y; imax = i; }
        }
        if (imin == (size_t)-1) { s->x[s->n] = xs[last]; s->y[s->n++] = NAN; continue; }
        if (imax < imin) { size_t t = imin; imin = imax; imax = t; }
        s->x[s->n] = xs[imin]; s->y[s->n++] = ys[imin];
        if (imax != imin) { s->x[s->n] = xs[imax]; s->y[s->n++] = ys[imax]; }
    }
    return 0;
}

/* the data range of finite points (y > 0 on a log axis) into lo/hi */
static void bt__cseries_range(const bt__cseries *s, double *xlo, double *xhi, double *ylo, double *yhi) {
    size_t i;
    for (i = 0; i < s->n; i++) {
        if (!isfinite(s->y[i])) continue;
        *xlo = fmin(*xlo, s->x[i]); *xhi = fmax(*xhi, s->x[i]);
        *ylo = fmin(*ylo, s->y[i]); *yhi = fmax(*yhi, s->y[i]);
    }
}

/* ---- 5. Drawing ----------------------------------------------------------------------------- */

static const char *const bt__ccolors[10] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                            "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define BT__CFONT 12.0   /* tick labels 11 px, axis labels 12, panel titles 13, the title up to 20 */

typedef struct { double x, y, w, h; } bt__crect;

/* A panel: which column against which, its axes and where it lies. */
enum { BT__CP_LOSS_STEP, BT__CP_LOSS_TOK, BT__CP_LR, BT__CP_TPS };
typedef struct {
    int kind;
    bt__crect box, plot;
    bt__caxis ax, ay;
    bt__cseries *s;   /* [run][2]: train (or lr, tok/s) and val */
    size_t bucket;    /* the largest bucket of its lines */
} bt__cpanel;

static const char *bt__cpanel_id(int kind) {
    return kind == BT__CP_LOSS_STEP ? "loss_step" : kind == BT__CP_LOSS_TOK ? "loss_tokens" : kind == BT__CP_LR ? "lr" : "tok_per_s";
}

/* a line: one polyline per stretch without a gap; marks: a circle at every point (validation),
   else a dot for a stretch of one point (else it would not show) */
static void bt__cdraw_series(bt__cbuf *b, const bt__cpanel *p, const bt__cseries *s, int marks, const char *color) {
    size_t i, j;
    /* validation dots shrink as they crowd: 3 px up to 50 of them, 2 up to 150, then 1.2 */
    const char *r = !marks ? "2" : s->n <= 50 ? "3" : s->n <= 150 ? "2" : "1.2";
    for (i = 0; i < s->n;) {
        if (!isfinite(s->y[i])) { i++; continue; }
        for (j = i; j < s->n && isfinite(s->y[j]); j++) {}
        bt__cb_s(b, "<polyline points=\"");
        for (size_t k = i; k < j; k++) {
            if (k > i) bt__cb_put(b, " ", 1);
            bt__cb_xy(b, p->plot.x + bt__cfrac(&p->ax, s->x[k]) * p->plot.w, p->plot.y + (1 - bt__cfrac(&p->ay, s->y[k])) * p->plot.h);
        }
        bt__cb_s(b, "\"/>\n");
        if (marks || j == i + 1)
            for (size_t k = i; k < j; k++) {
                bt__cb_f(b, "<circle class=\"%s\" cx=\"", marks ? "mark" : "dot");
                bt__cb_num(b, p->plot.x + bt__cfrac(&p->ax, s->x[k]) * p->plot.w);
                bt__cb_s(b, "\" cy=\"");
                bt__cb_num(b, p->plot.y + (1 - bt__cfrac(&p->ay, s->y[k])) * p->plot.h);
                bt__cb_f(b, "\" r=\"%s\" fill=\"%s\" stroke=\"white\" stroke-width=\"0.8\" stroke-dasharray=\"none\"/>\n", r, color);
            }
        i = j;
    }
}

static void bt__cdraw_text(bt__cbuf *b, double x, double y, double px, const char *anchor, const char *extra, const char *text) {
    bt__cb_s(b, "<text x=\""); bt__cb_num(b, x);
    bt__cb_s(b, "\" y=\""); bt__cb_num(b, y);
    bt__cb_f(b, "\" font-size=\"%d\" text-anchor=\"%s\"%s>", (int)px, anchor, extra);
    bt__cb_text(b, text);
    bt__cb_s(b, "</text>\n");
}

static void bt__cdraw_panel(bt__cbuf *b, const bt__cpanel *p, const bt__crun *runs, int n, int log_loss) {
    static const char *const titles[4] = {"loss vs step", "loss vs tokens", "learning rate", "tokens/s"};
    static const char *const ylabels[4] = {"loss", "loss", "lr", "tokens/s"};
    const char *id = bt__cpanel_id(p->kind);
    char t[160];
    int i, r;
    double x0 = p->plot.x, y0 = p->plot.y, w = p->plot.w, h = p->plot.h;
    bt__cb_f(b, "<g class=\"panel\" data-panel=\"%s\">\n", id);
    bt__cb_f(b, "<defs><clipPath id=\"clip-%s\"><rect x=\"", id);
    bt__cb_num(b, x0 - 4); bt__cb_s(b, "\" y=\""); bt__cb_num(b, y0 - 4);
    bt__cb_s(b, "\" width=\""); bt__cb_num(b, w + 8); bt__cb_s(b, "\" height=\""); bt__cb_num(b, h + 8);
    bt__cb_s(b, "\"/></clipPath></defs>\n<rect class=\"plot\" x=\"");
    bt__cb_num(b, x0); bt__cb_s(b, "\" y=\""); bt__cb_num(b, y0);
    bt__cb_s(b, "\" width=\""); bt__cb_num(b, w); bt__cb_s(b, "\" height=\""); bt__cb_num(b, h);
    bt__cb_s(b, "\" fill=\"white\" stroke=\"#888\"/>\n");
    /* title: what, the scale, the buckets */
    snprintf(t, sizeof t, "%s%s", titles[p->kind], log_loss && p->kind <= BT__CP_LOSS_TOK ? " (log scale)" : "");
    if (p->bucket > 1) snprintf(t + strlen(t), sizeof t - strlen(t), ", min/max of %zu-step buckets", p->bucket);
    bt__cdraw_text(b, x0, y0 - 8, 13, "start", " font-weight=\"bold\"", t);
    /* grid, ticks and their labels */
    bt__cb_s(b, "<g class=\"grid\" stroke=\"#e4e4e4\" stroke-width=\"1\">\n");
    for (i = 0; i < p->ax.nt; i++) {
        double x = x0 + bt__cfrac(&p->ax, p->ax.t[i]) * w;
        bt__cb_s(b, "<path d=\"M"); bt__cb_xy(b, x, y0); bt__cb_s(b, "V"); bt__cb_num(b, y0 + h);
        bt__cb_s(b, "\"/><path stroke=\"#888\" d=\"M"); bt__cb_xy(b, x, y0 + h); bt__cb_s(b, "v4\"/>\n");
    }
    for (i = 0; i < p->ay.nt; i++) {
        double y = y0 + (1 - bt__cfrac(&p->ay, p->ay.t[i])) * h;
        bt__cb_s(b, "<path d=\"M"); bt__cb_xy(b, x0, y); bt__cb_s(b, "H"); bt__cb_num(b, x0 + w);
        bt__cb_s(b, "\"/><path stroke=\"#888\" d=\"M"); bt__cb_xy(b, x0 - 4, y); bt__cb_s(b, "h4\"/>\n");
    }
    bt__cb_s(b, "</g>\n<g class=\"ticks\" fill=\"#333\">\n");
    for (i = 0; i < p->ax.nt; i++) bt__cdraw_text(b, x0 + bt__cfrac(&p->ax, p->ax.t[i]) * w, y0 + h + 16, 11, "middle", "", p->ax.lab[i]);
    for (i = 0; i < p->ay.nt; i++) bt__cdraw_text(b, x0 - 7, y0 + (1 - bt__cfrac(&p->ay, p->ay.t[i])) * h + 4, 11, "end", "", p->ay.lab[i]);
    bt__cb_s(b, "</g>\n");
    bt__cdraw_text(b, x0 + w / 2, y0 + h + 33, BT__CFONT, "middle", " fill=\"#333\"", p->kind == BT__CP_LOSS_TOK ? "tokens" : "step");
    snprintf(t, sizeof t, " fill=\"#333\" transform=\"rotate(-90 %d %d)\"", (int)(p->box.x + 14), (int)(y0 + h / 2));
    bt__cdraw_text(b, p->box.x + 14, y0 + h / 2, BT__CFONT, "middle", t, ylabels[p->kind]);
    /* the lines: train of every run, then validation over them, then the non-finite steps */
    bt__cb_f(b, "<g clip-path=\"url(#clip-%s)\" fill=\"none\" stroke-linejoin=\"round\">\n", id);
    for (int pass = 0; pass < 2; pass++)
        for (r = 0; r < n; r++) {
            const bt__cseries *s = &p->s[2 * r + pass];
            const char *color = bt__ccolors[r % 10];
            const char *kind = pass ? "val" : p->kind == BT__CP_LR ? "lr" : p->kind == BT__CP_TPS ? "tok_per_s" : "train";
            if (pass && p->kind != BT__CP_LOSS_STEP && p->kind != BT__CP_LOSS_TOK) continue;
            if (!s->n && pass) continue;
            bt__cb_f(b, "<g class=\"series\" data-run=\"%d\" data-kind=\"%s\" stroke=\"%s\" stroke-width=\"%s\"%s>\n<title>",
                     r, kind, color, pass ? "1.6" : "1.3", pass ? " stroke-dasharray=\"6 3\"" : "");
            bt__cb_text(b, runs[r].label);
            bt__cb_f(b, ": %s</title>\n", pass ? "validation loss" : p->kind == BT__CP_LR ? "learning rate" : p->kind == BT__CP_TPS ? "tokens/s" : "train loss");
            bt__cdraw_series(b, p, s, pass, color);
            bt__cb_s(b, "</g>\n");
        }
    if (p->kind == BT__CP_LOSS_STEP || p->kind == BT__CP_LOSS_TOK)
        for (r = 0; r < n; r++) {
            const bt__crun *u = &runs[r];
            const double *xs = p->kind == BT__CP_LOSS_STEP ? u->step : u->tok;
            size_t k, shown = 0;
            for (k = 0; k < u->n && shown < BT_CHART_MAX_POINTS; k++) {
                if (isfinite(u->train[k]) || !isfinite(xs[k])) continue;
                if (!shown++) bt__cb_f(b, "<path class=\"nonfinite\" data-run=\"%d\" stroke=\"#d62728\" stroke-width=\"2\" d=\"", r);
                bt__cb_s(b, "M"); bt__cb_xy(b, x0 + bt__cfrac(&p->ax, xs[k]) * w, y0 + h); bt__cb_s(b, "v-10");
            }
            if (shown) { bt__cb_s(b, "\"><title>"); bt__cb_text(b, u->label); bt__cb_s(b, ": steps whose train loss is not finite</title></path>\n"); }
        }
    bt__cb_s(b, "</g>\n</g>\n");
}

/* a legend entry: a line sample (dashed + a dot for validation) and a text, from (x, y) */
static double bt__cdraw_key(bt__cbuf *b, double x, double y, const char *color, int val, const char *text) {
    bt__cb_s(b, "<path d=\"M"); bt__cb_xy(b, x, y - 4); bt__cb_f(b, "h24\" stroke=\"%s\" stroke-width=\"%s\"%s/>\n", color, val ? "1.6" : "2.5", val ? " stroke-dasharray=\"6 3\"" : "");
    if (val) { bt__cb_s(b, "<circle cx=\""); bt__cb_num(b, x + 12); bt__cb_s(b, "\" cy=\""); bt__cb_num(b, y - 4); bt__cb_f(b, "\" r=\"3\" fill=\"%s\"/>\n", color); }
    bt__cdraw_text(b, x + 30, y, BT__CFONT, "start", "", text);
    return 30 + bt__ctextw(text, BT__CFONT) + 22;
}

/* ---- 6. bt_chart_svg ------------------------------------------------------------------------ */

/* a run's legend text: its label, the last finite train loss, the best validation loss */
static void bt__clegend_text(const bt__crun *r, char *out, size_t n) {
    char a[40], c[40];
    size_t i, lt = (size_t)-1, bv = (size_t)-1;
    for (i = 0; i < r->n; i++) {
        if (isfinite(r->train[i])) lt = i;
        if (r->isval[i] && isfinite(r->val[i]) && (bv == (size_t)-1 || r->val[i] < r->val[bv])) bv = i;
    }
    snprintf(out, n, "%s", r->label);
    if (lt != (size_t)-1) {
        bt__cfixed(a, sizeof a, r->train[lt], 4);
        bt__cfixed(c, sizeof c, r->step[lt], 0);
        snprintf(out + strlen(out), n - strlen(out), ": train %s (step %s)", a, c);
    }
    if (bv != (size_t)-1) {
        bt__cfixed(a, sizeof a, r->val[bv], 4);
        bt__cfixed(c, sizeof c, r->step[bv], 0);
        snprintf(out + strlen(out), n - strlen(out), "%s best val %s (step %s)", lt != (size_t)-1 ? "," : ":", a, c);
    }
}

/* a panel's lines and axes, once its box is known */
static int bt__cpanel_make(bt__cpanel *p, int kind, bt__crect box, const bt__crun *runs, int n, int log_loss) {
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY, left;
    int r, logy = log_loss && kind <= BT__CP_LOSS_TOK;
    p->kind = kind;
    p->box = box;
    p->bucket = 1;
    p->s = (bt__cseries *)bt__cmalloc(2 * (size_t)n * sizeof(bt__cseries));
    if (!p->s) return -1;
    memset(p->s, 0, 2 * (size_t)n * sizeof(bt__cseries));
    for (r = 0; r < n; r++) {
        const bt__crun *u = &runs[r];
        const double *xs = kind == BT__CP_LOSS_TOK ? u->tok : u->step;
        const double *ys = kind == BT__CP_LR ? u->lr : kind == BT__CP_TPS ? u->tps : u->train;
        if (bt__cseries_make(&p->s[2 * r], xs, ys, NULL, u->n, logy)) return -1;
        if (kind <= BT__CP_LOSS_TOK && bt__cseries_make(&p->s[2 * r + 1], xs, u->val, u->isval, u->n, logy)) return -1;
        bt__cseries_range(&p->s[2 * r], &xlo, &xhi, &ylo, &yhi);
        bt__cseries_range(&p->s[2 * r + 1], &xlo, &xhi, &ylo, &yhi);
        p->bucket = p->s[2 * r].bucket > p->bucket ? p->s[2 * r].bucket : p->bucket;
        /* the x range covers the non-finite steps too: their ticks are drawn at the foot */
        for (size_t k = 0; k < u->n && kind <= BT__CP_LOSS_TOK; k++)
            if (isfinite(xs[k]) && !isfinite(u->train[k])) { xlo = fmin(xlo, xs[k]); xhi = fmax(xhi, xs[k]); }
    }
    /* y first: its labels' width sets the left margin, and with it the plot's width */
    p->plot.y = box.y + 26;
    p->plot.h = box.h - 26 - 42;
    bt__caxis_make(&p->ay, ylo, yhi, logy, 0, kind == BT__CP_TPS ? BT__CFMT_SI : BT__CFMT_PLAIN, p->plot.h, 0, 11);
    left = 22 + p->ay.maxw + 10;
    p->plot.x = box.x + left;
    p->plot.w = box.w - left - 14;
    bt__caxis_make(&p->ax, xlo, xhi, 0, 1, BT__CFMT_SI, p->plot.w, 1, 11);
    return 0;
}

static void bt__cpanel_free(bt__cpanel *p, int n) {
    int i;
    if (!p->s) return;
    for (i = 0; i < 2 * n; i++) bt__cseries_free(&p->s[i]);
    bt__cfree(p->s);
    p->s = NULL;
}

BT_CHART_DEF int bt_chart_svg_opts(const char *const *logs, const char *const *labels, int n,
                                   const char *svg_path, const bt_chart_opts *opts, char *err, size_t errlen) {
    bt_chart_opts o;
    bt__crun *runs = NULL;
    bt__cpanel panels[4];
    bt__cbuf b;
    bt_atomic_file *f;
    char title[512], text[600];
    int i, np = 0, rc = -1, any_tok = 0;
    double W, H, x, y, fs, top;
    memset(&b, 0, sizeof b);
    memset(panels, 0, sizeof panels);
    if (err && errlen) err[0] = 0;
    if (opts) o = *opts; else memset(&o, 0, sizeof o);
    W = o.width > 0 ? (o.width < 480 ? 480 : o.width) : 1200;
    H = o.height > 0 ? (o.height < 360 ? 360 : o.height) : 900;
    if (n < 1 || !logs) { bt_msgf(err, errlen, "chart: no log given"); return -1; }
    if (!svg_path || !*svg_path) { bt_msgf(err, errlen, "chart: the SVG's path is empty"); return -1; }
    if (bt_output_check_flags(svg_path, BT_OUTPUT_NOFOLLOW)) { bt_msgf(err, errlen, "chart: %s", bt_data_error()); return -1; }
    runs = (bt__crun *)bt__cmalloc((size_t)n * sizeof *runs);
    if (!runs) { bt_msgf(err, errlen, "chart: out of memory"); return -1; }
    memset(runs, 0, (size_t)n * sizeof *runs);
    for (i = 0; i < n; i++) {
        char lab[4096];
        if (bt__crun_read(&runs[i], logs[i], err, errlen)) goto done;
        if (labels && labels[i] && *labels[i]) snprintf(lab, sizeof lab, "%s", labels[i]);
        else bt_chart_label(logs[i], lab, sizeof lab);
        bt__cclean(lab, runs[i].label, sizeof runs[i].label, 48);
        any_tok |= runs[i].any_tok;
    }

    bt__cb_f(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                 "font-family=\"DejaVu Sans, Liberation Sans, Arial, Helvetica, sans-serif\">\n"
                 "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", (int)W, (int)H, (int)W, (int)H);
    /* the title: given, or the labels; smaller (down to 12 px) and then cut to fit */
    if (o.title && *o.title) {
        bt__cclean(o.title, title, sizeof title, 200);
    } else {
        snprintf(text, sizeof text, "%s", n == 1 ? "training loss: " : "training runs: ");
        for (i = 0; i < n && strlen(text) < 300; i++) snprintf(text + strlen(text), sizeof text - strlen(text), "%s%s", i ? ", " : "", runs[i].label);
        bt__cclean(text, title, sizeof title, 200);
    }
    fs = 20;
    while (fs > 12 && bt__ctextw(title, fs) > W - 40) fs--;
    if (bt__ctextw(title, fs) > W - 40) { snprintf(text, sizeof text, "%s", title); bt__cclean(text, title, sizeof title, (int)((W - 40) / (fs * 0.6))); }
    bt__cdraw_text(&b, W / 2, 30, fs, "middle", " font-weight=\"bold\" class=\"title\"", title);
    /* the legend: the runs, then the key, wrapped to the width */
    bt__cb_s(&b, "<g class=\"legend\" fill=\"#222\">\n");
    x = 20; y = 56;
    for (i = 0; i < n + 2; i++) {
        double w;
        if (i < n) bt__clegend_text(&runs[i], text, sizeof text);
        else snprintf(text, sizeof text, "%s", i == n ? "train loss" : "validation loss");
        w = 30 + bt__ctextw(text, BT__CFONT) + 22;
        if (i == n) w += 30 + bt__ctextw("validation loss", BT__CFONT) + 22;   /* the two keys stay together */
        if (x > 20 && x + w > W - 10) { x = 20; y += 19; }
        x += bt__cdraw_key(&b, x, y, i < n ? bt__ccolors[i % 10] : "#666", i == n + 1, text);
    }
    bt__cb_s(&b, "</g>\n");
    top = y + 14;
    /* the panels: loss vs step and loss vs tokens on the first row (one wide panel without
       tokens), learning rate and tokens/s on the second */
    {
        double gw = W - 20, gh = H - top - 8, half = gw / 2, row = gh / 2;
        bt__crect boxes[4];
        int kinds[4];
        if (row < 110) row = 110;
        if (any_tok) {
            boxes[0].x = 10; boxes[0].y = top; boxes[0].w = half; boxes[0].h = row; kinds[0] = BT__CP_LOSS_STEP;
            boxes[1].x = 10 + half; boxes[1].y = top; boxes[1].w = half; boxes[1].h = row; kinds[1] = BT__CP_LOSS_TOK;
            np = 2;
        } else {
            boxes[0].x = 10; boxes[0].y = top; boxes[0].w = gw; boxes[0].h = row; kinds[0] = BT__CP_LOSS_STEP;
            np = 1;
        }
        boxes[np].x = 10; boxes[np].y = top + row; boxes[np].w = half; boxes[np].h = row; kinds[np] = BT__CP_LR;
        boxes[np + 1].x = 10 + half; boxes[np + 1].y = top + row; boxes[np + 1].w = half; boxes[np + 1].h = row; kinds[np + 1] = BT__CP_TPS;
        np += 2;
        for (i = 0; i < np; i++) {
            if (bt__cpanel_make(&panels[i], kinds[i], boxes[i], runs, n, o.log_loss)) { bt_msgf(err, errlen, "chart: %s: out of memory", svg_path); goto done; }
            bt__cdraw_panel(&b, &panels[i], runs, n, o.log_loss);
        }
    }
    bt__cb_s(&b, "</svg>\n");
    if (b.oom) { bt_msgf(err, errlen, "chart: %s: out of memory", svg_path); goto done; }
    if (!(f = bt_atomic_open_flags(svg_path, BT_OUTPUT_NOFOLLOW))) { bt_msgf(err, errlen, "chart: %s", bt_data_error()); goto done; }
    if (bt_atomic_write(f, b.p, b.n)) { bt_msgf(err, errlen, "chart: %s", bt_data_error()); bt_atomic_abort(f); goto done; }
    if (bt_atomic_commit(f)) { bt_msgf(err, errlen, "chart: %s", bt_data_error()); goto done; }
    rc = 0;
done:
    for (i = 0; i < 4; i++) bt__cpanel_free(&panels[i], n);
    for (i = 0; i < n; i++) bt__crun_free(&runs[i]);
    bt__cfree(runs);
    bt__cfree(b.p);
    return rc;
}

BT_CHART_DEF int bt_chart_svg(const char *const *logs, const char *const *labels, int n,
                              const char *svg_path, const char *title, char *err, size_t errlen) {
    bt_chart_opts o;
    memset(&o, 0, sizeof o);
    o.title = title;
    return bt_chart_svg_opts(logs, labels, n, svg_path, &o, err, errlen);
}

#endif /* BT_CHART_IMPLEMENTATION_DONE */
#endif /* BT_CHART_IMPLEMENTATION */
