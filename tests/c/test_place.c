/* test_place.c: the placement analysis (ir/ir_place.c, grace_ir_place_report). No GPU is needed: the IR carries the
 * device of every value, so device programs are built from C (grace_ir_input with GRACE_CUDA) or written as IR text
 * with `cuda` types, and the report is compared with golden text written out here. Cases: the speech-transformer
 * pattern (a temperature held as a 0-d CPU tensor, att / temperature, softmax) is one device partition whose
 * temperature is a device-resident scalar, as an input, a dynamic scalar through host arithmetic and a captured 0-d
 * tensor; a CPU tensor with dims copied to the device keeps the partition from being a graph; an op with no device
 * kernel splits the partition only where device work depends on it; graph breaks; copies back to the host; host
 * work over a captured tensor; CPU-only and create-only programs; a short buffer. Round trips (ir_place_round_trips):
 * a device value copied to the host, ops there, the result copied back, moved onto the device (no copy left, the
 * program one device partition that can be a graph), or kept with the reason: a host value returned or read by other
 * host work, an op with no device kernel, a graph break in between, a host tensor argument in the host work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "ir/ir_place.h"
#include "tap.h"

static grace_vm *vm;

#define GRAPH_OK "a CUDA graph candidate (kept where it measures faster than eager launches)\n"
#define LIFTED " -> device-resident scalar (argument table word, rewritten per call): "
#define NO_COPY "; a capture reads it into the graph's argument table before each replay, so no copy stays in the partition"
#define COPY_IN " -> host-to-device copy inside the partition: the partition cannot be a CUDA graph; "
#define SYNC_COPY " with a synchronous copy, which ends a capture, so the partition runs eagerly (a copy staged in front " \
                  "of the partition would remove it)"
#define ON_HOST "has no device kernel: it runs on the host through two copies and a synchronize"

/* The report of ir compared with want; returns the partition count (-1: failed). */
static int check(grace_ir *ir, const char *want, const char *what) {
  char buf[8192];
  int np = -1;
  grace_status st = grace_ir_place_report(ir, buf, sizeof buf, &np);
  if (!ok(st == GRACE_OK, "%s: report", what)) { printf("# %s\n", grace_last_error(vm)); return -1; }
  is_str(buf, want, "%s: golden report", what);
  return np;
}

static int check_text(const char *src, const char *want, const char *what) {
  grace_ir *ir = NULL;
  if (!ok(grace_ir_parse(vm, src, &ir) == GRACE_OK, "%s: parses", what)) { printf("# %s\n", grace_last_error(vm)); return -1; }
  int np = check(ir, want, what);
  grace_ir_free(ir);
  return np;
}

/* The speech-transformer pattern built through the builder, as a tracer builds it: x on the device, the temperature
 * a 0-d CPU tensor input, att = x / temperature, softmax over the last dim. */
static void test_speech(void) {
  grace_ir *ir = grace_ir_new(vm, "speech");
  grace_value x, t, att, p;
  int64_t xs[] = {1, 8, 64, 64};
  grace_status st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 4, xs, &x);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 0, NULL, &t);
  if (st == GRACE_OK) st = grace_ir_set_location(ir, "speech.lua:12");
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_DIV, 2, (grace_value[]){x, t}, NULL, 1, &att);
  if (st == GRACE_OK) st = grace_ir_set_location(ir, "speech.lua:13");
  grace_attrs last = {.ndims = 1, .dims = {-1}};
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_SOFTMAX, 1, &att, &last, 1, &p);
  if (st == GRACE_OK) st = grace_ir_output(ir, p);
  if (!ok(st == GRACE_OK, "speech: builds")) { printf("# %s\n", grace_last_error(vm)); grace_ir_free(ir); return; }
  int np = check(ir,
      "%1 (input #1, f32[])" LIFTED "a 0-d host tensor read by div %2 on the device" NO_COPY "; at speech.lua:12\n"
      "one device partition; " GRAPH_OK, "speech");
  is_int(np, 1, "speech: one device partition");
  /* the analysis itself: both ops in partition 0, the temperature lifted, nothing splits */
  ir_placement pl;
  if (ok(ir_place(ir, &pl) == GRACE_OK, "speech: ir_place runs")) {
    ok(pl.npartitions == 1 && pl.partition[2] == 0 && pl.partition[3] == 0 && pl.partition[0] == -1 && pl.partition[1] == -1,
       "speech: div and softmax in partition 0, inputs in none");
    ok(pl.nd == 1 && pl.d[0].kind == IR_PLACE_SCALAR && pl.d[0].value == t && pl.d[0].at == 2 && pl.d[0].partition == 0,
       "speech: one decision, the temperature, at the div");
    ok(pl.on_device && pl.kernels == 2 && pl.nsplits == 0 && !pl.no_graph[0], "speech: on the device, 2 kernels, a graph candidate");
    ir_place_free(vm, &pl);
  }
  grace_ir_free(ir);

  /* the temperature as a captured 0-d CPU tensor */
  ir = grace_ir_new(vm, "speech_const");
  grace_tensor *temp = NULL;
  float two = 2.0f;
  st = grace_tensor_from_data(vm, GRACE_FLOAT32, 0, NULL, GRACE_FLOAT32, &two, &temp);
  if (st == GRACE_OK) st = grace_ir_input(ir, GRACE_FLOAT32, GRACE_CUDA, 4, xs, &x);
  if (st == GRACE_OK) st = grace_ir_const(ir, temp, &t);
  if (st == GRACE_OK) st = grace_ir_set_location(ir, "speech.lua:20");
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_DIV, 2, (grace_value[]){x, t}, NULL, 1, &att);
  if (st == GRACE_OK) st = grace_ir_op(ir, GRACE_OP_SOFTMAX, 1, &att, &last, 1, &p);
  if (st == GRACE_OK) st = grace_ir_output(ir, p);
  grace_tensor_release(temp);
  if (ok(st == GRACE_OK, "speech, captured temperature: builds"))
    is_int(check(ir,
        "%1 (captured #0, f32[])" LIFTED "a captured 0-d host tensor read by div %2 on the device" NO_COPY
        "; at speech.lua:20\n"
        "one device partition; " GRAPH_OK, "speech, captured temperature"), 1, "speech, captured temperature: one partition");
  else printf("# %s\n", grace_last_error(vm));
  grace_ir_free(ir);

  /* a number argument promoted to a dynamic scalar, scaled on the host before the device reads it */
  is_int(check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[1,8,64,64] cuda\n"
      "  %1 = scalar #0 wrapped : f64[]\n"
      "  %2 = literal 2 : i64[]\n"
      "  %3 = mul %1, %2 : f32[]  @\"a.lua:3\"\n"
      "  %4 = div %0, %3 : f32[1,8,64,64] cuda  @\"a.lua:4\"\n"
      "  %5 = softmax %4 {dims=[-1]} : f32[1,8,64,64] cuda  @\"a.lua:5\"\n"
      "  return %5\n"
      "}\n",
      "%1 (dynamic scalar #0, f64[])" LIFTED "a dynamic scalar read by div %4 on the device (through mul %3 on the host)"
      NO_COPY "; at a.lua:4\n"
      "one device partition; " GRAPH_OK, "dynamic temperature"), 1, "dynamic temperature: one device partition");
}

/* CPU tensors with dims reaching the device: a per-call input, a capture, a device op reading one directly. */
static void test_copies(void) {
  is_int(check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[4,64] cuda\n"
      "  %1 = input #1 : f32[64]\n"
      "  %2 = to %1 {device=cuda} : f32[64] cuda  @\"a.lua:7\"\n"
      "  %3 = add %0, %2 : f32[4,64] cuda  @\"a.lua:8\"\n"
      "  return %3\n"
      "}\n",
      "%1 (input #1, f32[64])" COPY_IN "to %2 copies it" SYNC_COPY "; at a.lua:7\n"
      "one device partition; runs eagerly, not as a CUDA graph: host-to-device copy of %1 (to %2)\n", "input copy"),
      1, "input copy: still one partition");
  check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[4,64] cuda\n"
      "  %1 = const #0 : f32[64]\n"
      "  %2 = to %1 {device=cuda} : f32[64] cuda  @\"a.lua:9\"\n"
      "  %3 = add %0, %2 : f32[4,64] cuda  @\"a.lua:10\"\n"
      "  return %3\n"
      "}\n",
      "%1 (captured #0, f32[64])" COPY_IN "to %2 copies it" SYNC_COPY "; at a.lua:9\n"
      "one device partition; runs eagerly, not as a CUDA graph: host-to-device copy of %1 (to %2)\n", "captured copy");
  /* IR built from C may let a device op read a host tensor directly (eager execution would ask for :to first) */
  check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[4,64] cuda\n"
      "  %1 = const #0 : f32[64]\n"
      "  %2 = mul %0, %1 : f32[4,64] cuda  @\"a.lua:11\"\n"
      "  return %2\n"
      "}\n",
      "%1 (captured #0, f32[64])" COPY_IN "read by mul %2 on the device, it must be copied there" SYNC_COPY "; at a.lua:11\n"
      "one device partition; runs eagerly, not as a CUDA graph: host-to-device copy of %1 (mul %2)\n", "direct read");
  /* a per-call host tensor only the host reads still keeps any capture from starting */
  check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[8] cuda\n"
      "  %1 = input #1 : f32[8]\n"
      "  %2 = exp %0 : f32[8] cuda  @\"h.lua:2\"\n"
      "  %3 = exp %1 : f32[8]  @\"h.lua:3\"\n"
      "  return %2, %3\n"
      "}\n",
      "%1 (input #1, f32[8]) -> host tensor input: the partition cannot be a CUDA graph; a graph takes device tensors and "
      "host numbers as inputs, so every call runs eagerly; at (unknown place)\n"
      "one device partition; runs eagerly, not as a CUDA graph: input %1 is a host tensor with dims\n", "host input");
  /* a number computed on the host from a captured tensor: fixed when a graph is captured */
  check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[4,64] cuda\n"
      "  %1 = const #0 : f32[64]\n"
      "  %2 = sum %1 : f32[]  @\"n.lua:2\"\n"
      "  %3 = div %0, %2 : f32[4,64] cuda  @\"n.lua:3\"\n"
      "  return %3\n"
      "}\n",
      "%2 (sum, f32[]) -> host-computed number, fixed in the argument table when captured: host work over a tensor with "
      "dims, read by div %3 on the device; a replay does not redo it (valid while the captured tensors it reads keep "
      "their versions); at n.lua:3\n"
      "one device partition; " GRAPH_OK, "host number");
}

/* Ops with no device kernel: a split only where device work is on both sides and depends on it. */
static void test_splits(void) {
  const char *src =
      "func @f {\n"
      "  %0 = input #0 : f32[8,8] cuda\n"
      "  %1 = input #1 : f32[8,8] cuda\n"
      "  %2 = exp %0 : f32[8,8] cuda  @\"m.lua:2\"\n"
      "  %3 = cast %2 {dtype=f64} : f64[8,8] cuda  @\"m.lua:3\"\n"
      "  %4 = matmul %3, %3 : f64[8,8] cuda  @\"m.lua:4\"\n"
      "  %5 = cast %4 {dtype=f32} : f32[8,8] cuda  @\"m.lua:5\"\n"
      "  %6 = add %5, %1 : f32[8,8] cuda  @\"m.lua:6\"\n"
      "  %7 = neg %1 : f32[8,8] cuda  @\"m.lua:7\"\n"
      "  return %6, %7\n"
      "}\n";
  is_int(check_text(src,
      "%4 (matmul, f64[8,8] cuda) -> no device kernel: the partition would split here; matmul of float64 " ON_HOST
      ", and device work after it depends on it; at m.lua:4\n"
      "2 device partitions (1 after host work); runs eagerly, not as a CUDA graph: matmul %4 runs on the host\n",
      "f64 matmul"), 2, "f64 matmul: two device partitions");
  grace_ir *ir = NULL;
  ir_placement pl;
  if (grace_ir_parse(vm, src, &ir) == GRACE_OK && ok(ir_place(ir, &pl) == GRACE_OK, "f64 matmul: ir_place runs")) {
    /* instructions: 0,1 inputs, 2 exp, 3 cast, 4 matmul, 5 cast, 6 add, 7 neg */
    ok(pl.partition[2] == 0 && pl.partition[3] == 0 && pl.partition[4] == 0 && pl.partition[5] == 1 && pl.partition[6] == 1,
       "f64 matmul: what feeds it is partition 0 (it ends it), what follows from it partition 1");
    is_int(pl.partition[7], 0, "f64 matmul: independent device work does not wait for the split");
    ok(pl.nd == 1 && pl.d[0].splits && pl.nsplits == 1, "f64 matmul: one splitting decision");
    ir_place_free(vm, &pl);
  }
  grace_ir_free(ir);
  /* nothing on the device after it: no split, but no graph either */
  check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[8,8] cuda\n"
      "  %1 = exp %0 : f32[8,8] cuda  @\"m.lua:2\"\n"
      "  %2 = cast %1 {dtype=f64} : f64[8,8] cuda  @\"m.lua:3\"\n"
      "  %3 = matmul %2, %2 : f64[8,8] cuda  @\"m.lua:4\"\n"
      "  return %3\n"
      "}\n",
      "%3 (matmul, f64[8,8] cuda) -> no device kernel: the program cannot be a CUDA graph; matmul of float64 " ON_HOST
      "; at m.lua:4\n"
      "one device partition; runs eagerly, not as a CUDA graph: matmul %3 runs on the host\n", "f64 matmul at the end");
  /* rows longer than the device sort takes: sorted on the host, first thing in the program, so nothing splits */
  check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[2,10000] cuda\n"
      "  %1, %2 = sort %0 : f32[2,10000] cuda, i64[2,10000] cuda  @\"s.lua:2\"\n"
      "  %3 = exp %1 : f32[2,10000] cuda  @\"s.lua:3\"\n"
      "  return %3\n"
      "}\n",
      "%1 (sort, f32[2,10000] cuda) -> no device kernel: the program cannot be a CUDA graph; sort over rows of 10000 "
      "(more than 8192) " ON_HOST "; at s.lua:2\n"
      "one device partition; runs eagerly, not as a CUDA graph: sort %1 runs on the host\n", "long sort");
  /* a copy to the host, host work, and back: the copy back in is inside the second partition */
  is_int(check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[8] cuda\n"
      "  %1 = exp %0 : f32[8] cuda  @\"d.lua:2\"\n"
      "  %2 = to %1 : f32[8]  @\"d.lua:3\"\n"
      "  %3, %4 = sort %2 : f32[8], i64[8]  @\"d.lua:4\"\n"
      "  %5 = to %3 {device=cuda} : f32[8] cuda  @\"d.lua:5\"\n"
      "  %6 = add %5, %0 : f32[8] cuda  @\"d.lua:6\"\n"
      "  return %6\n"
      "}\n",
      "%2 (to, f32[8]) -> device-to-host copy: the partition would split here; to %2 copies a device value to the host "
      "synchronously, which ends a capture, and device work after it depends on it; at d.lua:3\n"
      "%3 (sort, f32[8])" COPY_IN "to %5 copies it" SYNC_COPY "; at d.lua:5\n"
      "2 device partitions (1 after host work); runs eagerly, not as a CUDA graph: to %2 copies to the host\n",
      "round trip"), 2, "round trip: two device partitions");
}

/* Graph breaks, programs with no device partition, eligibility, and the buffer contract. */
static void test_other(void) {
  is_int(check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[8] cuda\n"
      "  %1 = exp %0 : f32[8] cuda  @\"b.lua:2\"\n"
      "  break  @\"b.lua:3\"\n"
      "  %2 = neg %1 : f32[8] cuda  @\"b.lua:4\"\n"
      "  return %2\n"
      "}\n",
      "2 device partitions (1 at graph breaks); each " GRAPH_OK, "break"), 2, "break: two device partitions");
  is_int(check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[8]\n"
      "  %1 = input #1 : f32[]\n"
      "  %2 = div %0, %1 : f32[8]  @\"c.lua:2\"\n"
      "  return %2\n"
      "}\n",
      "no device partition: every value is on the CPU\n", "cpu"), 0, "cpu: no device partition");
  check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[]\n"
      "  %1 = full {shape=[4], device=cuda} : f32[4] cuda  @\"z.lua:1\"\n"
      "  %2 = mul %1, %0 : f32[4] cuda  @\"z.lua:2\"\n"
      "  return %2\n"
      "}\n",
      "no device partition: its 2 device ops run one at a time as eager programs (no CUDA input or captured tensor hands "
      "the program to the device executor)\n", "created on the device");
  check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[8] cuda\n"
      "  %1 = exp %0 : f32[8] cuda  @\"w.lua:2\"\n"
      "  write %0, %1\n"
      "  return %1\n"
      "}\n",
      "one device partition; a CUDA graph candidate (kept where it measures faster than eager launches)\n",
      "writes into its arguments (they happen inside the graph)");
  check_text(
      "func @f {\n"
      "  %0 = input #0 : f32[8] cuda\n"
      "  %1 = randn {shape=[8], device=cuda} : f32[8] cuda  @\"r.lua:2\"\n"
      "  %2 = add %0, %1 : f32[8] cuda  @\"r.lua:3\"\n"
      "  return %2\n"
      "}\n",
      "one device partition; a CUDA graph candidate (kept where it measures faster than eager launches)\n",
      "random numbers (the generator's offset is a per-call word of the graph)");
  /* a short buffer: GRACE_EARG and what fits, terminated; NULL counts only */
  grace_ir *ir = NULL;
  if (grace_ir_parse(vm,
                     "func @f {\n  %0 = input #0 : f32[8] cuda\n  %1 = input #1 : f32[]\n"
                     "  %2 = mul %0, %1 : f32[8] cuda\n  return %2\n}\n", &ir) == GRACE_OK) {
    char small[16];
    int np = -1;
    ok(grace_ir_place_report(ir, small, sizeof small, &np) == GRACE_EARG && strlen(small) == sizeof small - 1,
       "short buffer: GRACE_EARG and a truncated, terminated report");
    np = -1;
    ok(grace_ir_place_report(ir, NULL, 0, &np) == GRACE_OK && np == 1, "NULL buffer: counts the partitions");
  }
  grace_ir_free(ir);
  ok(grace_ir_place_report(NULL, NULL, 0, NULL) == GRACE_EARG, "no IR: GRACE_EARG");
}

/* Round trip of program src: the decisions (rewrite: moved) compared with want; after dce, whether any `to` is left
 * and the placement summary. */
static void check_trip(const char *src, int rewrite, int want_moved, const char *want, const char *what) {
  grace_ir *ir = NULL, *opt = NULL;
  if (!ok(grace_ir_parse(vm, src, &ir) == GRACE_OK, "%s: parses", what)) { printf("# %s\n", grace_last_error(vm)); return; }
  char text[2048] = "";
  int moved = ir_place_round_trips(ir, rewrite, text, sizeof text);
  is_int(moved, want_moved, "%s: round trips that can move", what);
  is_str(text, want, "%s: the decision and its reason", what);
  if (rewrite && moved && ok(grace_ir_pass(ir, "dce", &opt) == GRACE_OK && grace_ir_verify(opt) == GRACE_OK,
                             "%s: the rewritten program verifies", what)) {
    const char *t = grace_ir_text(opt);
    if (!ok(t && !strstr(t, " = to ") && !strstr(t, "f32[8]\n") && !strstr(t, "f32[8]  @"), "%s: no copy and no host value left", what))
      printf("# %s\n", t ? t : "");
    check(opt, "one device partition; " GRAPH_OK, what);
  }
  grace_ir_free(opt);
  grace_ir_free(ir);
}

#define TRIP(n) "round trip %" #n " (2 host ops between a copy to the host and one back) -> "
static void test_round_trips(void) {
  const char *base =
      "func @f {\n"
      "  %0 = input #0 : f32[8] cuda\n"
      "  %1 = exp %0 : f32[8] cuda  @\"t.lua:1\"\n"
      "  %2 = to %1 : f32[8]  @\"t.lua:2\"\n"
      "  %3 = literal 2 : f64[]\n"
      "  %4 = mul %2, %3 : f32[8]  @\"t.lua:3\"\n"
      "  %5 = neg %4 : f32[8]  @\"t.lua:3\"\n"
      "  %6 = to %5 {device=cuda} : f32[8] cuda  @\"t.lua:4\"\n"
      "  %7 = add %6, %1 : f32[8] cuda  @\"t.lua:5\"\n"
      "  return %7\n"
      "}\n";
  check_trip(base, 1, 1, TRIP(6) "moved to the device: the ops run on the device value, no copy to the host and back, "
             "no synchronize, so the program can stay a CUDA graph; at t.lua:4\n", "round trip");
  is_int(check_text(base, "%2 (to, f32[8]) -> device-to-host copy: the partition would split here; to %2 copies a device "
                    "value to the host synchronously, which ends a capture, and device work after it depends on it; at "
                    "t.lua:2\n%5 (neg, f32[8])" COPY_IN "to %6 copies it" SYNC_COPY "; at t.lua:4\n"
                    "2 device partitions (1 after host work); runs eagerly, not as a CUDA graph: to %2 copies to the host\n",
                    "round trip, not rewritten"), 2, "round trip, not rewritten: two partitions and no graph");
  check_trip("func @f {\n  %0 = input #0 : f32[8] cuda\n  %1 = to %0 : f32[8]  @\"t.lua:2\"\n"
             "  %2 = neg %1 : f32[8]  @\"t.lua:3\"\n  %3 = exp %2 : f32[8]  @\"t.lua:3\"\n"
             "  %4 = to %3 {device=cuda} : f32[8] cuda  @\"t.lua:4\"\n  return %4, %2\n}\n", 1, 0,
             TRIP(4) "stays on the host: its host value %2 is returned to Lua; at t.lua:4\n", "returned");
  check_trip("func @f {\n  %0 = input #0 : f32[8] cuda\n  %1 = to %0 : f32[8]  @\"t.lua:2\"\n"
             "  %2 = neg %1 : f32[8]  @\"t.lua:3\"\n  %3 = exp %2 : f32[8]  @\"t.lua:3\"\n"
             "  %4 = to %3 {device=cuda} : f32[8] cuda  @\"t.lua:4\"\n  %5 = sum %2 : f32[]\n  return %4, %5\n}\n", 1, 0,
             TRIP(4) "stays on the host: its host value %2 is also read by sum %5 on the host; at t.lua:4\n",
             "read by other host work");
  check_trip("func @f {\n  %0 = input #0 : f32[8] cuda\n  %1 = to %0 : f32[8]  @\"t.lua:2\"\n"
             "  %2 = neg %1 : f32[8]  @\"t.lua:3\"\n  break  @\"t.lua:3\"\n  %3 = exp %2 : f32[8]  @\"t.lua:4\"\n"
             "  %4 = to %3 {device=cuda} : f32[8] cuda  @\"t.lua:5\"\n  return %4\n}\n", 0, 0,
             TRIP(4) "stays on the host: the host reads a value in between (a graph break at t.lua:3: item(), print), so "
             "the host copy is needed; at t.lua:5\n", "a break in between");
  check_trip("func @f {\n  %0 = input #0 : f32[8] cuda\n  %1 = exp %0 : f32[8] cuda  @\"s.lua:1\"\n"
             "  %2 = to %1 : f32[8]  @\"s.lua:2\"\n  %3 = sum %2 : f32[]  @\"s.lua:2\"\n"
             "  %4 = div %1, %3 : f32[8] cuda  @\"s.lua:3\"\n  return %4\n}\n", 1, 1,
             "host work %3 (1 host op on a device value copied to the host, read by div %4 on the device) -> moved to the "
             "device: the ops run on the device value, no copy to the host and back, no synchronize, so the program can "
             "stay a CUDA graph; at s.lua:3\n", "a host number computed from a device value");
  check_trip("func @f {\n  %0 = input #0 : i64[4, 4] cuda\n  %1 = to %0 : i64[4, 4]  @\"t.lua:2\"\n"
             "  %2 = matmul %1, %1 : i64[4, 4]  @\"t.lua:3\"\n"
             "  %3 = to %2 {device=cuda} : i64[4, 4] cuda  @\"t.lua:4\"\n  return %3\n}\n", 1, 0,
             "round trip %3 (1 host op between a copy to the host and one back) -> stays on the host: matmul %2 matmul of "
             "int64 has no device kernel: it runs on the host through two copies and a synchronize; at t.lua:4\n",
             "no device kernel");
  check_trip("func @f {\n  %0 = input #0 : f32[8] cuda\n  %1 = input #1 : f32[8]\n  %2 = to %0 : f32[8]  @\"t.lua:2\"\n"
             "  %3 = add %2, %1 : f32[8]  @\"t.lua:3\"\n"
             "  %4 = to %3 {device=cuda} : f32[8] cuda  @\"t.lua:4\"\n  return %4\n}\n", 1, 0,
             "round trip %4 (1 host op between a copy to the host and one back) -> stays on the host: it reads %1, a host "
             "tensor the function is given, not a device value; at t.lua:4\n", "a host tensor argument");
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  test_speech();
  test_copies();
  test_splits();
  test_other();
  test_round_trips();
  grace_vm_free(vm);
  return tap_done();
}
