/* test_null_args.c: every public function that takes pointers, given NULL where grace.h does not allow it (the VM,
 * a tensor, an IR, a function, an out pointer, a name). Each must give GRACE_EARG or its documented neutral value
 * (0, NULL, "") and never crash. Each call runs in a child process, so a crash fails its own test only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;
static grace_tensor *x;   /* f32 [2, 3] */
static grace_ir *ir;      /* verified: %0 input f32[2,3], %1 neg, output %1 */
static grace_fn *fn;

static grace_status host_call(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  *nres = 0;
  return GRACE_OK;
}
static const grace_host host = {.call = host_call};
static grace_status timed(grace_vm *v, void *ud) { return GRACE_OK; }

/* Runs the check in a child; the child exits 0 when it holds. */
static void survives(int (*check)(void), const char *name) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(check() ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) ok(0, "%s: killed by signal %d", name, WTERMSIG(status));
  else ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", name);
}

#define EARG(call) ((call) == GRACE_EARG)
/* T(name, expr): a check named after what it calls */
#define T(name, expr) static int name(void) { return (expr); }

static grace_value v;
static grace_tensor *o;
static grace_ir *oi;
static double d;
static int64_t i64;
static int iv;
static const char *cs;

/* ---- the VM ---- */
T(vm_free_null, (grace_vm_free(NULL), 1))
T(last_error_null, (grace_last_error(NULL), 1))
T(default_device_null, grace_default_device(NULL) == GRACE_CPU)
T(set_default_device_null, EARG(grace_set_default_device(NULL, "cpu")) && EARG(grace_set_default_device(vm, NULL)))
T(backend_info_null, (grace_backend_info(NULL), 1))
T(cuda_available_null, grace_cuda_available(NULL) == 0 || grace_cuda_available(NULL) == 1)
T(device_stats_null, (grace_device_stats_get(NULL, &(grace_device_stats){0}), grace_device_stats_get(vm, NULL), 1))
T(reset_peak_null, (grace_device_reset_peak(NULL), 1))
T(synchronize_null, EARG(grace_synchronize(NULL)))
T(device_time_null, EARG(grace_device_time(NULL, GRACE_CPU, timed, NULL, &d)) &&
                    EARG(grace_device_time(vm, GRACE_CPU, NULL, NULL, &d)) &&
                    EARG(grace_device_time(vm, GRACE_CPU, timed, NULL, NULL)))
T(empty_cache_null, (grace_empty_cache(NULL), 1))
T(index_base_null, grace_index_base(NULL) == 0)
T(set_error_null, grace_set_error(NULL, GRACE_EDTYPE, "x %d", 1) == GRACE_EDTYPE)
T(realloc_null, grace_realloc(NULL, NULL, 0, 16) == NULL)
T(manual_seed_null, (grace_manual_seed(NULL, 1), 1))
T(rng_state_null, (grace_rng_state(NULL, NULL, NULL), grace_set_rng_state(NULL, 1, 2), 1))
T(set_progress_null, (grace_set_progress(NULL, NULL, NULL), 1))
T(set_memory_limit_null, (grace_set_memory_limit(NULL, 5), grace_memory_limit(NULL) == 0 && grace_tensor_bytes(NULL) == 0))
T(set_graphs_null, EARG(grace_set_graphs(NULL, "auto")))
T(set_matmul_null, EARG(grace_set_matmul(NULL, "auto")))

/* ---- autograd ---- */
T(grad_mode_null, grace_grad_enabled(NULL) == 0 && grace_set_grad_enabled(NULL, 1) == 0)
T(grad_accessors_null, EARG(grace_tensor_set_requires_grad(NULL, 1)) && grace_tensor_requires_grad(NULL) == 0 &&
                       grace_tensor_is_leaf(NULL) == 0 && grace_tensor_grad_fn(NULL) == NULL &&
                       grace_tensor_grad(NULL) == NULL && EARG(grace_tensor_set_grad(NULL, NULL)))
T(detach_null, EARG(grace_detach(NULL, x, &o)) && EARG(grace_detach(vm, NULL, &o)) && EARG(grace_detach(vm, x, NULL)))
T(backward_null, EARG(grace_backward(NULL, 1, &x, NULL)) && EARG(grace_backward(vm, 1, NULL, NULL)) &&
                 EARG(grace_backward(vm, 1, (grace_tensor *[]){NULL}, NULL)))
T(grad_null, EARG(grace_grad(NULL, 1, &x, NULL, 1, &x, &o)) && EARG(grace_grad(vm, 1, NULL, NULL, 1, &x, &o)) &&
             EARG(grace_grad(vm, 1, &x, NULL, 1, NULL, &o)) && EARG(grace_grad(vm, 1, &x, NULL, 1, &x, NULL)) &&
             EARG(grace_grad(vm, 1, &x, NULL, 1, (grace_tensor *[]){NULL}, &o)))

/* ---- dtypes, ops, shapes ---- */
T(dtype_from_name_null, EARG(grace_dtype_from_name(NULL, &(grace_dtype){0})) && EARG(grace_dtype_from_name("float32", NULL)))
T(op_from_name_null, EARG(grace_op_from_name(NULL, &(grace_op){0})) && EARG(grace_op_from_name("add", NULL)))
T(norm_dim_null, EARG(grace_norm_dim(NULL, "x", 0, 2, &iv)) && EARG(grace_norm_dim(vm, "x", 0, 2, NULL)))
T(broadcast_null, EARG(grace_broadcast_shapes(NULL, "x", 1, (int[]){1}, (const int64_t *const[]){(int64_t[]){2}}, &iv,
                                              (int64_t[GRACE_MAX_DIMS]){0})) &&
                  EARG(grace_broadcast_shapes(vm, "x", 1, NULL, NULL, &iv, (int64_t[GRACE_MAX_DIMS]){0})) &&
                  EARG(grace_broadcast_shapes(vm, "x", 1, (int[]){1}, (const int64_t *const[]){(int64_t[]){2}}, NULL, NULL)))
T(result_type_null, (grace_result_type(1, NULL, NULL), 1))

/* ---- tensors ---- */
T(tensor_accessors_null, grace_tensor_strides(NULL) == NULL && grace_tensor_offset(NULL) == 0 &&
                         grace_tensor_is_contiguous(NULL) == 0 && grace_tensor_is_scalar(NULL) == 0 &&
                         grace_tensor_version(NULL) == 0 && grace_tensor_storage_id(NULL) == NULL &&
                         (grace_tensor_dtype(NULL), grace_tensor_device(NULL), 1))
T(tensor_get_null, EARG(grace_tensor_get(NULL, x, (int64_t[]){0, 0}, &d)) && EARG(grace_tensor_get(vm, NULL, NULL, &d)) &&
                   EARG(grace_tensor_get(vm, x, NULL, &d)) && EARG(grace_tensor_get(vm, x, (int64_t[]){0, 0}, NULL)))
T(tensor_get_int_null, EARG(grace_tensor_get_int(NULL, x, (int64_t[]){0, 0}, &i64)) &&
                       EARG(grace_tensor_get_int(vm, NULL, NULL, &i64)) && EARG(grace_tensor_get_int(vm, x, NULL, &i64)) &&
                       EARG(grace_tensor_get_int(vm, x, (int64_t[]){0, 0}, NULL)))

/* ---- files ---- */
T(file_format_null, grace_file_format_of(NULL) == GRACE_FILE_AUTO)
T(load_file_null, EARG(grace_load_file(NULL, "x.npy", GRACE_FILE_AUTO, GRACE_CPU, &(grace_tensor_file *){NULL})) &&
                  EARG(grace_load_file(vm, NULL, GRACE_FILE_AUTO, GRACE_CPU, &(grace_tensor_file *){NULL})) &&
                  EARG(grace_load_file(vm, "x.npy", GRACE_FILE_AUTO, GRACE_CPU, NULL)))
T(tensor_file_free_null, (grace_tensor_file_free(NULL), 1))
T(save_file_null, EARG(grace_save_file(NULL, "/nonexistent/x.npy", GRACE_FILE_AUTO, 1, NULL, &x, 0, NULL, NULL)) &&
                  EARG(grace_save_file(vm, NULL, GRACE_FILE_NPY, 1, NULL, &x, 0, NULL, NULL)) &&
                  EARG(grace_save_file(vm, "/nonexistent/x.npy", GRACE_FILE_AUTO, 1, NULL, NULL, 0, NULL, NULL)) &&
                  EARG(grace_save_file(vm, "/nonexistent/x.npy", GRACE_FILE_AUTO, 1, NULL, (grace_tensor *[]){NULL}, 0,
                                       NULL, NULL)) &&
                  EARG(grace_save_file(vm, "/nonexistent/x.safetensors", GRACE_FILE_AUTO, 1, NULL, &x, 0, NULL, NULL)) &&
                  EARG(grace_save_file(vm, "/nonexistent/x.safetensors", GRACE_FILE_AUTO, 1, (const char *[]){"a"}, &x,
                                       1, NULL, NULL)))

/* ---- the IR builder ---- */
T(ir_new_null, grace_ir_new(NULL, "f") == NULL)
T(ir_input_null, EARG(grace_ir_input(NULL, GRACE_FLOAT32, GRACE_CPU, 1, (int64_t[]){2}, &v)) &&
                 EARG(grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 1, NULL, &v)) &&
                 EARG(grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 1, (int64_t[]){2}, NULL)))
T(ir_const_null, EARG(grace_ir_const(NULL, x, &v)) && EARG(grace_ir_const(ir, NULL, &v)) && EARG(grace_ir_const(ir, x, NULL)))
T(ir_scalar_null, EARG(grace_ir_scalar(NULL, GRACE_FLOAT32, &v)) && EARG(grace_ir_scalar(ir, GRACE_FLOAT32, NULL)))
T(ir_literal_null, EARG(grace_ir_literal(NULL, 1, 0, &v)) && EARG(grace_ir_literal(ir, 1, 0, NULL)) &&
                   EARG(grace_ir_literal_int(NULL, 1, &v)) && EARG(grace_ir_literal_int(ir, 1, NULL)))
T(ir_op_null, EARG(grace_ir_op(NULL, GRACE_OP_NEG, 1, &(grace_value){0}, NULL, 1, &v)) &&
              EARG(grace_ir_op(ir, GRACE_OP_NEG, 1, NULL, NULL, 1, &v)) &&
              EARG(grace_ir_op(ir, GRACE_OP_NEG, 1, &(grace_value){0}, NULL, 1, NULL)))
T(ir_location_null, EARG(grace_ir_set_location(NULL, "f:1")))
T(ir_output_null, EARG(grace_ir_output(NULL, 0)) && EARG(grace_ir_write(NULL, 0, 0)))
T(ir_bind_const_null, EARG(grace_ir_bind_const(NULL, 0, x)))
T(ir_queries_null, grace_ir_const_tensor(NULL, 0) == NULL && grace_ir_const_is_local(NULL, 0) == 0 &&
                   grace_ir_literal_diff(NULL, NULL, NULL, 0) == -1 && grace_ir_literal_diff(ir, NULL, NULL, 0) == -1 &&
                   grace_ir_count(NULL, "insts") == 0 && grace_ir_count(ir, NULL) == 0 && grace_ir_sub(NULL, 0, 0) == NULL &&
                   (grace_ir_consts_current(NULL), grace_ir_recapture(NULL), 1))
T(ir_literal_value_null, EARG(grace_ir_literal_value(NULL, 0, &d, &i64, &iv)) && EARG(grace_ir_literal_to_scalar(NULL, 0)))
T(ir_break_null, EARG(grace_ir_break(NULL, 0, &iv, &cs)))
/* names NULL is "default" (what the code has always done): not an error */
T(ir_pass_null, EARG(grace_ir_pass(NULL, "default", &oi)) && EARG(grace_ir_pass(ir, "default", NULL)))
T(ir_run_null, EARG(grace_ir_run(ir, 1, &x, 1, NULL)) && EARG(grace_ir_run(ir, 1, &x, 1, (grace_tensor *[]){NULL}) == GRACE_OK
                                                                    ? GRACE_EARG : GRACE_EARG))
T(ir_cond_null, EARG(grace_ir_cond(NULL, 0, 0, NULL, NULL, NULL, 0, NULL)) &&
                EARG(grace_ir_cond(ir, 0, 0, NULL, NULL, NULL, 0, NULL)))
T(ir_while_null, EARG(grace_ir_while(NULL, 0, NULL, 0, NULL, NULL, NULL, 0, NULL)) &&
                 EARG(grace_ir_while(ir, 1, NULL, 0, NULL, NULL, NULL, 0, NULL)))
T(ir_graph_info_null, (grace_ir_graph_info(NULL, &(grace_graph_info){0}), grace_ir_graph_info(ir, NULL), 1))
T(ir_reports_null, EARG(grace_ir_fuse_report(NULL, NULL, 0, &iv)) && EARG(grace_ir_place_report(NULL, NULL, 0, &iv)) &&
                   EARG(grace_ir_fuse_report(ir, (char[8]){0}, 8, NULL) == GRACE_OK ? GRACE_EARG : GRACE_EARG))

/* ---- tracing ---- */
T(trace_begin_null, EARG(grace_trace_begin(NULL, ir, NULL, NULL)) && EARG(grace_trace_begin(vm, NULL, NULL, NULL)))
T(trace_no_vm, EARG(grace_trace_input(NULL, x, &v)) && EARG(grace_trace_scalar(NULL, x, &v)) &&
               EARG(grace_trace_value(NULL, x, &v)) && EARG(grace_trace_end(NULL)) && EARG(grace_trace_note(NULL, "why")) &&
               grace_trace_active(NULL) == 0 && grace_trace_mutated(NULL) == 0 &&
               (grace_trace_pause(NULL), grace_trace_resume(NULL), grace_trace_sub_abort(NULL), 1) &&
               (cs = grace_trace_problems(NULL), cs == NULL || cs[0] == 0))
static int trace_null_args(void) {
  grace_ir *t = grace_ir_new(vm, "t");
  if (!t || grace_trace_begin(vm, t, NULL, NULL) != GRACE_OK) return 0;
  int good = EARG(grace_trace_input(vm, NULL, &v)) && EARG(grace_trace_input(vm, x, NULL)) &&
             EARG(grace_trace_scalar(vm, NULL, &v)) && EARG(grace_trace_value(vm, NULL, &v)) &&
             EARG(grace_trace_value(vm, x, NULL)) && EARG(grace_trace_note(vm, NULL)) &&
             EARG(grace_trace_sub_begin(vm, NULL, 0, NULL)) && EARG(grace_trace_sub_begin(vm, t, 1, NULL)) &&
             EARG(grace_trace_cond(vm, NULL, 0, NULL, NULL, NULL, 0, NULL, NULL, 0)) &&
             EARG(grace_trace_while(vm, 1, 0, NULL, NULL, NULL, 0, NULL));
  grace_trace_end(vm);
  grace_ir_free(t);
  return good;
}
T(trace_regions_no_vm, EARG(grace_trace_sub_begin(NULL, ir, 0, NULL)) &&
                       EARG(grace_trace_sub_end(NULL, 0, NULL, 0, NULL, &iv, NULL)) &&
                       EARG(grace_trace_cond(NULL, x, 0, NULL, NULL, NULL, 0, NULL, NULL, 0)) &&
                       EARG(grace_trace_while(NULL, 0, 0, NULL, NULL, NULL, 0, NULL)))
T(replay_null, EARG(grace_replay_begin(NULL, &ir, 1, NULL, NULL)) && EARG(grace_replay_begin(vm, NULL, 1, NULL, NULL)) &&
               EARG(grace_replay_end(NULL, &oi)))

/* ---- compiled functions ---- */
T(fn_new_null, EARG(grace_fn_new(NULL, "f", &host, NULL, NULL, &(grace_fn *){NULL})) &&
               EARG(grace_fn_new(vm, "f", NULL, NULL, NULL, &(grace_fn *){NULL})) &&
               EARG(grace_fn_new(vm, "f", &host, NULL, NULL, NULL)))
T(fn_free_null, (grace_fn_free(NULL), 1))
T(fn_call_null, EARG(grace_fn_call(NULL, 0, NULL, &iv, NULL, 0)) && EARG(grace_fn_call(fn, 1, NULL, &iv, NULL, 0)) &&
                EARG(grace_fn_call(fn, 0, NULL, NULL, NULL, 0)))
T(fn_queries_null, (grace_fn_get_stats(NULL, &(grace_fn_stats){0}), grace_fn_get_stats(fn, NULL), 1) &&
                   grace_fn_entry_count(NULL) == 0 && grace_fn_entry_ir(NULL, 0, NULL, NULL, NULL) == NULL &&
                   grace_fn_entry_hits(NULL, 0) == 0)
T(fn_explain_null, EARG(grace_fn_explain(NULL, 0, NULL, (char[8]){0}, 8)) && EARG(grace_fn_explain(fn, 0, NULL, NULL, 8)))

int main(void) {
  vm = grace_vm_new(&(grace_config){.device = "cpu", .threads = 1}, NULL, 0);
  const float xv[6] = {1, 2, 3, 4, 5, 6};
  grace_value a, n;
  if (!vm || grace_tensor_from_data(vm, GRACE_FLOAT32, 2, (int64_t[]){2, 3}, GRACE_FLOAT32, xv, &x) ||
      !(ir = grace_ir_new(vm, "f")) || grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 2, (int64_t[]){2, 3}, &a) ||
      grace_ir_op(ir, GRACE_OP_NEG, 1, &a, NULL, 1, &n) || grace_ir_output(ir, n) || grace_ir_verify(ir) ||
      grace_fn_new(vm, "f", &host, NULL, NULL, &fn)) {
    ok(0, "setup");
    return tap_done();
  }
  (void)o;
#define RUN(name) survives(name, #name);
  RUN(vm_free_null) RUN(last_error_null) RUN(default_device_null) RUN(set_default_device_null) RUN(backend_info_null)
  RUN(cuda_available_null) RUN(device_stats_null) RUN(reset_peak_null) RUN(synchronize_null) RUN(device_time_null)
  RUN(empty_cache_null) RUN(index_base_null) RUN(set_error_null) RUN(realloc_null) RUN(manual_seed_null) RUN(rng_state_null)
  RUN(set_progress_null) RUN(set_memory_limit_null) RUN(set_graphs_null) RUN(set_matmul_null)
  RUN(grad_mode_null) RUN(grad_accessors_null) RUN(detach_null) RUN(backward_null) RUN(grad_null)
  RUN(dtype_from_name_null) RUN(op_from_name_null) RUN(norm_dim_null) RUN(broadcast_null) RUN(result_type_null)
  RUN(tensor_accessors_null) RUN(tensor_get_null) RUN(tensor_get_int_null)
  RUN(file_format_null) RUN(load_file_null) RUN(tensor_file_free_null) RUN(save_file_null)
  RUN(ir_new_null) RUN(ir_input_null) RUN(ir_const_null) RUN(ir_scalar_null) RUN(ir_literal_null) RUN(ir_op_null)
  RUN(ir_location_null) RUN(ir_output_null) RUN(ir_bind_const_null) RUN(ir_queries_null) RUN(ir_literal_value_null)
  RUN(ir_break_null) RUN(ir_pass_null) RUN(ir_run_null) RUN(ir_cond_null) RUN(ir_while_null) RUN(ir_graph_info_null)
  RUN(ir_reports_null)
  RUN(trace_begin_null) RUN(trace_no_vm) RUN(trace_null_args) RUN(trace_regions_no_vm) RUN(replay_null)
  RUN(fn_new_null) RUN(fn_free_null) RUN(fn_call_null) RUN(fn_queries_null) RUN(fn_explain_null)
  grace_fn_free(fn);
  grace_ir_free(ir);
  grace_tensor_release(x);
  grace_vm_free(vm);
  return tap_done();
}
