/* test_limits.c: grace_config.max_bytes and grace_set_memory_limit: the cap on tensor storages refuses a storage
 * that would pass it with GRACE_ENOMEM and a message naming the figures, and leaves the VM usable. */
#include <string.h>
#include "grace.h"
#include "tap.h"

static grace_status make(grace_vm *vm, int64_t n, grace_tensor **out) {
  *out = NULL;
  return grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 1, &n, out);
}

int main(void) {
  char err[256] = "";
  grace_vm *vm = grace_vm_new(&(grace_config){.device = "cpu", .max_bytes = 4096}, err, sizeof err);
  ok(vm != NULL, "VM with max_bytes: %s", err);
  if (!vm) return tap_done();
  is_int((long long)grace_memory_limit(vm), 4096, "grace_config.max_bytes is the limit");
  grace_tensor *a, *b, *c;
  is_int(make(vm, 512, &a), GRACE_OK, "2048 bytes fit under 4096");
  is_int(make(vm, 768, &b), GRACE_ENOMEM, "3072 more bytes do not");
  ok(b == NULL, "no tensor on refusal");
  is_str(grace_last_error(vm), "empty: memory limit of 4096 bytes reached (2048 in use, 3072 requested)",
         "the message names limit, use and request");
  is_int((long long)grace_tensor_bytes(vm), 2048, "a refused storage is not counted");
  is_int(make(vm, 256, &c), GRACE_OK, "a smaller tensor still fits after the error");
  /* views share their storage: they take no room */
  grace_tensor *v = NULL;
  grace_attrs at = {.nshape = 2, .shape = {16, 32}};
  is_int(grace_run(vm, GRACE_OP_VIEW, 1, &a, &at, 1, &v), GRACE_OK, "a view of a full VM is made");
  grace_tensor_release(v);
  grace_tensor_release(c);
  grace_tensor_release(a);
  is_int(make(vm, 1024, &a), GRACE_OK, "releasing tensors makes room for 4096 bytes");
  grace_tensor_release(a);
  /* an op's result counts like any storage: 2 x 2048 inputs leave no room for a 2048-byte sum */
  is_int(make(vm, 512, &a), GRACE_OK, "input 1");
  is_int(make(vm, 512, &b), GRACE_OK, "input 2");
  grace_tensor *in[2] = {a, b}, *sum = NULL;
  is_int(grace_run(vm, GRACE_OP_ADD, 2, in, NULL, 1, &sum), GRACE_ENOMEM, "an op's result is refused at the limit");
  ok(strstr(grace_last_error(vm), "memory limit of 4096 bytes") != NULL, "op message: %s", grace_last_error(vm));
  grace_set_memory_limit(vm, 0);
  is_int(grace_run(vm, GRACE_OP_ADD, 2, in, NULL, 1, &sum), GRACE_OK, "limit 0 lifts the cap");
  grace_tensor_release(sum);
  grace_set_memory_limit(vm, 1000);
  is_int(make(vm, 1, &c), GRACE_ENOMEM, "a limit below the use stops new storages");
  grace_set_memory_limit(vm, (size_t)-1);
  is_int(make(vm, 1, &c), GRACE_OK, "a limit of SIZE_MAX does not overflow");
  grace_tensor_release(c);
  grace_tensor_release(a);
  grace_tensor_release(b);
  is_int((long long)grace_tensor_bytes(vm), 0, "all storages released");
  grace_vm_free(vm);
  return tap_done();
}
