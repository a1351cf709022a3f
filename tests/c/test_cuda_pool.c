/* test_cuda_pool.c: the graph-capture side of the caching allocator and the capture record (cuda/cuda_graph.c),
 * on the fake driver of tests/c/fake_cuda.h, so it runs without a GPU (it counts the driver's frees); the test
 * follows blocks through: cached blocks taken into the graphs' arena by a capture; a block released inside the
 * capture reused by it; arena blocks never handed to allocations outside captures while a graph lives; a later
 * capture sharing the free arena blocks (the arena does not grow); the arena kept while one graph lives and
 * emptied into the cache when the last goes (blocks a tensor still holds only when it lets them go); the
 * allocator's byte count back where it started. Also the argument table's slots
 * (the same word, the same slot; a full table fails the capture) and the words noted only while capturing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "cuda/cuda_graph.h"
#include "cuda/cuda_internal.h"
#include "tap.h"

#include "c/fake_cuda.h"

static CUdeviceptr alloc(cuda_ctx *c, size_t n) {
  CUdeviceptr p = 0;
  return cuda_malloc(c, n, &p) == GRACE_OK ? p : 0;
}

static void test_pool(grace_vm *vm) {
  cuda_ctx *c = install_fake(vm);
  cuda_mem_stats m0;
  cuda_memory_stats(c, &m0);

  /* a cached block: taken into the pool by the capture's first allocation of its size */
  CUdeviceptr cached = alloc(c, 1000);
  cuda_release(c, cached, 1000);
  cuda_capture *cap = NULL;
  ok(cuda_capture_open(c, 1, &cap) == GRACE_OK && cap, "a capture opens");
  ok(cuda_capture_open(c, 1, &(cuda_capture *){0}) != GRACE_OK, "a second capture cannot open while one is");
  CUdeviceptr table = alloc(c, 8 * 16);
  ok(cuda_capture_set_table(c, cap, table, 4) == GRACE_OK, "the argument table is set (4 slots)");
  CUdeviceptr a = alloc(c, 1000);
  ok(a == cached, "the capture takes a block of the cache");
  ok(cuda_capture_owns(cap, a + 100, NULL, NULL), "and owns it (an address inside the block)");
  ok(cuda_capture_indirect(c) == NULL, "no indirection before the stream capture begins");
  ok(cuda_capture_begin(c) == GRACE_OK && capturing, "stream capture begins");
  ok(cuda_capture_indirect(c) == cap, "indirection on while capturing");

  /* inside the capture: a released block is reused by the same capture */
  CUdeviceptr b = alloc(c, 5000);
  cuda_release(c, b, 5000);
  CUdeviceptr b2 = alloc(c, 5000);
  ok(b2 == b, "a block released inside the capture is reused by it");
  CUdeviceptr out = alloc(c, 3000);
  ok(out != b && out != a, "a live block is not handed out twice");

  /* slots: one per distinct word, the table's size bounds them */
  CUdeviceptr s1 = cuda_capture_slot(cap, 0x1111), s2 = cuda_capture_slot(cap, 0x2222);
  ok(s1 == table && s2 == table + 8, "slots are the table's words in order of first use");
  ok(cuda_capture_slot(cap, 0x1111) == s1, "the same word gets the same slot");
  cuda_capture_slot(cap, 0x3333);
  cuda_capture_slot(cap, 0x4444);
  int ns = 0;
  const uint64_t *sl = cuda_capture_slots(cap, &ns);
  ok(ns == 4 && sl[0] == 0x1111 && sl[3] == 0x4444, "the slots' words are recorded");

  /* words given directly are noted while capturing */
  cuda_capture_note(c, (uint64_t[]){out, 42}, 2);
  size_t nraw = 0;
  const uint64_t *raw = cuda_capture_raw(cap, &nraw);
  ok(nraw == 2 && raw[0] == out, "words passed directly are noted during the capture");

  CUgraph g = NULL;
  ok(cuda_capture_close(c, GRACE_OK, &g) == GRACE_OK && g == (CUgraph)&fake_obj, "the capture ends with a graph");
  ok(!c->cap && !capturing, "allocations no longer go to the pool");
  cuda_capture_note(c, (uint64_t[]){1}, 1);
  cuda_capture_raw(cap, &nraw);
  ok(nraw == 2, "nothing is noted after the capture");

  /* after the capture: the graph's blocks stay its own */
  cuda_release(c, a, 1000);
  cuda_release(c, b2, 5000);
  CUdeviceptr x = alloc(c, 1000), y = alloc(c, 5000);
  ok(x != a && y != b2, "blocks the graph owns are not handed out after the capture, even released");
  size_t pool_bytes = cuda_capture_bytes(cap);
  ok(pool_bytes >= 1000 + 5000 + 3000, "the pool's bytes count its blocks (%zu)", pool_bytes);

  /* a block the replays never touch is no longer counted as the graph's */
  cuda_capture_drop(c, cap, out);
  ok(cuda_capture_bytes(cap) < pool_bytes, "a dropped block is no longer counted as the graph's");
  ok(!cuda_capture_owns(cap, out, NULL, NULL), "nor owned by it");
  cuda_release(c, out, 3000);
  CUdeviceptr other = alloc(c, 3000);
  ok(other != out, "it stays graph memory (the arena's) while graphs live");
  cuda_release(c, other, 3000);
  size_t arena = cuda_graph_arena_bytes(c);

  /* a second capture shares the arena's free blocks: graph memory is the larger need, not the sum */
  cuda_capture *cap2 = NULL;
  cuda_capture_open(c, 0, &cap2);
  cuda_capture_begin(c);
  CUdeviceptr p1 = alloc(c, 1000), p2 = alloc(c, 5000), p3 = alloc(c, 3000);
  ok(p1 == a && p2 == b2 && p3 == out, "a later capture takes the free blocks of the first one's");
  is_int(cuda_graph_arena_bytes(c), arena, "and the arena does not grow");
  ok(cuda_capture_owns(cap2, p1, NULL, NULL) && cuda_capture_owns(cap, p1, NULL, NULL),
     "both graphs count the shared block as theirs");
  CUdeviceptr p4 = alloc(c, 1000);
  ok(p4 != p1, "a block taken and still held is not taken twice");
  cuda_release(c, p1, 1000); cuda_release(c, p2, 5000); cuda_release(c, p3, 3000); cuda_release(c, p4, 1000);
  CUgraph g2 = NULL;
  cuda_capture_close(c, GRACE_OK, &g2);

  /* one graph goes: the arena stays for the other */
  cuda_graph_destroy(c, g, NULL);
  cuda_capture_free(c, cap);
  ok(cuda_graph_arena_bytes(c) == arena + 1024, "the arena stays while a graph lives (%zu bytes)", cuda_graph_arena_bytes(c));
  CUdeviceptr other2 = alloc(c, 5000);
  ok(other2 != b2, "and its blocks stay out of the cache");
  cuda_release(c, other2, 5000);
  /* the last graph goes: the arena's blocks return to the cache (the table once its tensor lets it go) */
  cuda_graph_destroy(c, g2, NULL);
  cuda_capture_free(c, cap2);
  is_int(cuda_graph_arena_bytes(c), 0, "no graph left: the arena is empty");
  ok(alloc(c, 1000) == a && alloc(c, 5000) == b, "the arena's blocks return to the cache when no graph is left");
  cuda_release(c, a, 1000);
  cuda_release(c, b, 5000);
  cuda_release(c, table, 128);
  cuda_release(c, x, 1000);
  cuda_release(c, y, 5000);
  cuda_mem_stats m1;
  cuda_memory_stats(c, &m1);
  is_int(m1.allocated, m0.allocated, "every byte is back: the allocator's count is where it started");
}

static void test_failures(grace_vm *vm) {
  cuda_ctx *c = install_fake(vm);
  /* a full table fails the capture (the runner passes 0 and the close says why) */
  cuda_capture *cap = NULL;
  cuda_capture_open(c, 1, &cap);
  CUdeviceptr table = alloc(c, 16);
  cuda_capture_set_table(c, cap, table, 2);
  cuda_capture_begin(c);
  cuda_capture_slot(cap, 1);
  cuda_capture_slot(cap, 2);
  ok(cuda_capture_slot(cap, 3) == 0, "a full table gives no slot");
  CUgraph g = NULL;
  grace_status st = cuda_capture_close(c, GRACE_OK, &g);
  ok(st == GRACE_EUNSUPPORTED && !g, "and the capture fails (%s)", grace_last_error(vm));
  cuda_release(c, table, 16);
  cuda_capture_free(c, cap);

  /* the captured work failed: no graph, its status returned */
  cuda_capture_open(c, 0, &cap);
  cuda_capture_begin(c);
  st = cuda_capture_close(c, GRACE_EINDEX, &g);
  ok(st == GRACE_EINDEX && !g, "a failure inside the capture is returned, with no graph");
  cuda_capture_free(c, cap);

  /* the driver invalidated the capture (the work synchronized) */
  cuda_capture_open(c, 0, &cap);
  cuda_capture_begin(c);
  end_result = 901;
  st = cuda_capture_close(c, GRACE_OK, &g);
  end_result = 0;
  ok(st == GRACE_EUNSUPPORTED && !g && strstr(grace_last_error(vm), "synchronized"),
     "an invalidated capture says the work synchronized (%s)", grace_last_error(vm));
  cuda_capture_free(c, cap);
}

int main(void) {
  grace_config cfg = {0};
  cfg.device = "cpu";
  char err[256];
  grace_vm *vm = grace_vm_new(&cfg, err, sizeof err);
  if (!vm) { printf("not ok 1 - grace_vm_new: %s\n1..1\n", err); return 1; }
  test_pool(vm);
  grace_vm_free(vm);
  vm = grace_vm_new(&cfg, err, sizeof err);
  test_failures(vm);
  int frees_before = driver_frees;
  grace_vm_free(vm);
  ok(driver_frees > frees_before, "the VM's end gives the blocks back to the driver");
  return tap_done();
}
