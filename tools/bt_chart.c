/* bt_chart - training logs (log.jsonl) as one SVG chart (bt_chart.h): loss vs step and vs tokens,
   the learning rate, tokens/s; several runs side by side.

     bt_chart [options] LOG_OR_DIR[=LABEL] ...

   Each argument is a log.jsonl, or a directory holding one (train_gpt2 -o DIR writes DIR/log.jsonl).
   =LABEL names the run in the legend (default: the directory's name, or the file's without .jsonl);
   the text after the last '=' is the label unless the whole argument names a file or directory.

   Options
     -o OUT.svg       where the chart goes (default: loss.svg beside the first log)
     --title T        the chart's title (default: the runs' labels)
     --log            loss axes in log scale
     --size WxH       the SVG's size in px (default 1200x900)
   OUT is written atomically (a reader sees the old chart or the new one) and never through a
   symbolic link (one at OUT is an error). Exit status 0 on success (the path is printed), 1 on an
   error naming the file (and the log's line), 2 on a usage error (its reason and
   "(see bt_chart -h)"). */
#define _POSIX_C_SOURCE 200809L
#define BT_DATA_IMPLEMENTATION
#define BT_CHART_IMPLEMENTATION
#include "bt_chart.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: bt_chart [-o OUT.svg] [--title T] [--log] [--size WxH] LOG_OR_DIR[=LABEL] ...\n"
            "  LOG_OR_DIR  a log.jsonl, or a directory holding one (train_gpt2 -o DIR)\n"
            "  =LABEL      the run's name in the legend (default: the directory's name)\n"
            "  -o OUT.svg  default: loss.svg beside the first log\n"
            "  --title T   default: the runs' labels;  --log: loss axes in log scale;  --size WxH: default 1200x900\n");
}

/* a usage error: its reason and where to look, on stderr; returns the exit code, 2 */
static int usage_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "bt_chart: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see bt_chart -h)\n");
    return 2;
}

/* the value of option argv[*i], or NULL (a usage error printed) when it is missing, empty or
   looks like another option */
static const char *value_of(int argc, char **argv, int *i) {
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!v || !*v) { usage_error("%s needs a value%s", argv[*i], v ? ", got an empty one" : ""); return NULL; }
    if (v[0] == '-' && v[1] && !(v[1] >= '0' && v[1] <= '9')) { usage_error("%s needs a value, but the next argument is the option '%s'", argv[*i], v); return NULL; }
    ++*i;
    return v;
}

/* a size in px from 1 to 100000: decimal digits only; 0, or -1 */
static int parse_px(const char *s, size_t n, int *out) {
    long v = 0;
    size_t i;
    if (!n || n > 6) return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > 100000) return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    const char **logs = (const char **)calloc((size_t)argc, sizeof *logs), **labels = (const char **)calloc((size_t)argc, sizeof *labels);
    char **owned = (char **)calloc((size_t)argc, sizeof *owned);
    const char *out = NULL;
    char def_out[4096], err[1024];
    bt_chart_opts o;
    int n = 0, i, rc = 2;
    memset(&o, 0, sizeof o);
    if (!logs || !labels || !owned) { fprintf(stderr, "bt_chart: out of memory\n"); return 1; }
    if (argc == 1) { usage(stderr); goto done; }
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); rc = 0; goto done; }
        else if (!strcmp(a, "-o")) { if (!(v = value_of(argc, argv, &i))) goto done; out = v; }
        else if (!strcmp(a, "--title")) { if (!(v = value_of(argc, argv, &i))) goto done; o.title = v; }
        else if (!strcmp(a, "--log")) o.log_loss = 1;
        else if (!strcmp(a, "--size")) {
            const char *x;
            if (!(v = value_of(argc, argv, &i))) goto done;
            x = strchr(v, 'x');
            if (!x || parse_px(v, (size_t)(x - v), &o.width) || parse_px(x + 1, strlen(x + 1), &o.height)) {
                rc = usage_error("bad value '%s' for --size: WIDTHxHEIGHT in px, each from 1 to 100000 (at least 480x360 is drawn)", v);
                goto done;
            }
        }
        else if (a[0] == '-' && a[1]) { rc = usage_error("unknown option '%s'", a); goto done; }
        else {
            /* LOG=LABEL: the whole argument when it names something, else split at the last '=' */
            struct stat st;
            const char *eq = strrchr(a, '=');
            if (eq && eq > a && stat(a, &st) != 0) {
                if (!(owned[n] = (char *)malloc((size_t)(eq - a) + 1))) { fprintf(stderr, "bt_chart: out of memory\n"); rc = 1; goto done; }
                memcpy(owned[n], a, (size_t)(eq - a));
                owned[n][eq - a] = 0;
                logs[n] = owned[n];
                labels[n] = eq + 1;
            } else {
                logs[n] = a;
            }
            if (!*logs[n]) { rc = usage_error("an empty log path in '%s'", a); goto done; }
            n++;
        }
    }
    if (!n) { rc = usage_error("no log given"); goto done; }
    if (!out) {
        /* loss.svg beside the first log: in it when it is a directory, else in the file's directory */
        struct stat st;
        const char *p = logs[0], *slash;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(def_out, sizeof def_out, "%s%sloss.svg", p, p[strlen(p) - 1] == '/' ? "" : "/");
        else if ((slash = strrchr(p, '/'))) snprintf(def_out, sizeof def_out, "%.*s/loss.svg", (int)(slash - p), p);
        else snprintf(def_out, sizeof def_out, "loss.svg");
        out = def_out;
    }
    if (bt_chart_svg_opts(logs, labels, n, out, &o, err, sizeof err)) {
        fprintf(stderr, "bt_chart: %s\n", err);
        rc = 1;
        goto done;
    }
    printf("%s\n", out);
    rc = 0;
done:
    for (i = 0; i < argc; i++) free(owned[i]);
    free(owned); free(logs); free(labels);
    return rc;
}
