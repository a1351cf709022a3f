/* kernel_trace.c: a CUPTI injection library that writes the start and duration of every kernel a process runs (graph
 * replays included) to a CSV file, for the boundary column of `bench/device.sh profile` on machines without Nsight
 * Systems. The CUDA driver loads it when CUDA_INJECTION64_PATH names it and calls InitializeInjection at cuInit; the
 * records go to $GRACE_KERNEL_TRACE as "Start (ns)","Duration (ns)","Name" (the columns of Nsight Systems'
 * cuda_gpu_trace that bench/profile_summary.py --gaps reads). Concurrent-kernel records do not serialise kernels;
 * CUPTI's own cost per kernel is in the figures. A bench tool (built and linked against the toolkit's CUPTI by
 * device.sh), not part of grace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cupti.h>

static FILE *out;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *size = (size_t)8 << 20;
  *buffer = aligned_alloc(8, *size);
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  (void)ctx;
  (void)stream;
  (void)size;
  CUpti_Activity *rec = NULL;
  while (out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
    fprintf(out, "%llu,%llu,\"", (unsigned long long)k->start, (unsigned long long)(k->end - k->start));
    for (const char *c = k->name ? k->name : "?"; *c; c++) {   /* CSV: quotes doubled */
      if (*c == '"') fputc('"', out);
      fputc(*c, out);
    }
    fputs("\"\n", out);
  }
  free(buffer);
}

static void finish(void) {
  cuptiActivityFlushAll(1);
  if (out) fclose(out);
  out = NULL;
}

int InitializeInjection(void) {
  const char *path = getenv("GRACE_KERNEL_TRACE");
  if (!path || !(out = fopen(path, "w"))) return 0;
  fputs("\"Start (ns)\",\"Duration (ns)\",\"Name\"\n", out);
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    fclose(out);
    out = NULL;
    return 0;
  }
  atexit(finish);
  return 1;
}
