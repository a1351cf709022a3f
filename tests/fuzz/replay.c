/* replay.c: a main for the fuzz targets without libFuzzer, so `make test` runs every input of the committed corpus
 * (seeds and the inputs of crashes found and fixed) through a normal build, one TAP line per input. With no
 * arguments, a program named fuzz_NAME replays tests/fuzz/corpus/NAME (run from the repository root); arguments
 * are files or folders to replay instead. A failing check aborts, which fails the test file. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count;

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) { printf("not ok %d - cannot open %s\n", ++count, path); return 1; }
  size_t cap = 4096, n = 0;
  unsigned char *buf = malloc(cap);
  for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += r;
    if (n == cap) { unsigned char *nb = realloc(buf, cap *= 2); if (!nb) { free(buf); buf = NULL; } else buf = nb; }
  }
  fclose(f);
  if (!buf) { printf("not ok %d - out of memory reading %s\n", ++count, path); return 1; }
  /* an exact-size copy, as libFuzzer gives, so a sanitizer build sees reads past the end */
  unsigned char *exact = malloc(n ? n : 1);
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  printf("ok %d - %s (%zu bytes)\n", ++count, path, n);
  fflush(stdout);
  return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int replay(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) { printf("not ok %d - no such file %s\n", ++count, path); return 1; }
  if (!S_ISDIR(st.st_mode)) return replay_file(path);
  DIR *d = opendir(path);
  if (!d) { printf("not ok %d - cannot read %s\n", ++count, path); return 1; }
  char **names = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) names = realloc(names, sizeof *names * (cap = cap ? cap * 2 : 64));
    names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
    sprintf(names[n++], "%s/%s", path, e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof *names, cmp);   /* the same order every run */
  int bad = 0;
  for (size_t k = 0; k < n; k++) { bad |= replay_file(names[k]); free(names[k]); }
  free(names);
  return bad;
}

int main(int argc, char **argv) {
  int bad = 0;
  if (argc > 1) {
    for (int k = 1; k < argc; k++) bad |= replay(argv[k]);
  } else {
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    if (strncmp(base, "fuzz_", 5) != 0) { printf("1..0 # SKIP run as fuzz_NAME or give inputs\n"); return 0; }
    char dir[512];
    snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", base + 5);
    bad = replay(dir);
  }
  printf("1..%d\n", count);
  return bad;
}
