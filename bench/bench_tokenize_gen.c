/* bench_tokenize_gen.c - writes N bytes of text to stdout for bt_tokenize's streaming measurement:
   a seed text (WikiText-2 train by default) over and over, each copy headed "= copy K =" so no two
   copies are the same document text. Usage: bench_tokenize_gen BYTES SEED.txt | bt_tokenize ... /dev/stdin */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    unsigned long long want, done = 0, k = 0;
    char *seed, head[64];
    long n;
    FILE *f;
    if (argc != 3) { fprintf(stderr, "usage: bench_tokenize_gen BYTES SEED.txt\n"); return 2; }
    want = strtoull(argv[1], NULL, 10);
    if (!(f = fopen(argv[2], "rb")) || fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) ||
        !(seed = (char *)malloc((size_t)n)) || fread(seed, 1, (size_t)n, f) != (size_t)n) { perror(argv[2]); return 1; }
    fclose(f);
    while (done < want) {
        int h = snprintf(head, sizeof head, " = copy %llu = \n", k++);
        unsigned long long take = (unsigned long long)n < want - done ? (unsigned long long)n : want - done;
        if (fwrite(head, 1, (size_t)h, stdout) != (size_t)h || fwrite(seed, 1, (size_t)take, stdout) != take) return 1;
        done += (unsigned long long)h + take;
    }
    return fflush(stdout) != 0;
}
