# grace: plain GNU Makefile. `make` builds build/grace, build/libgrace.a and build/libgrace.so;
# `make test` runs every test under prove (`make check`: a quick subset); `make asan` runs them with sanitizers; `make demo`.
# DEPS_PREFIX=/path builds against Debian packages unpacked there with `dpkg -x` (the GPU machine).

BUILD      ?= build
PREFIX     ?= /usr/local
CUDA_HOME  ?= /usr/local/cuda
DEPS_PREFIX ?=
CC         ?= cc
OPT        ?= -O2
SAN        ?=

# Dependencies: missing Debian packages are installed (as root) or named, once, before anything builds.
DEPS_STATUS := $(shell DEPS_PREFIX="$(DEPS_PREFIX)" sh tools/deps.sh >&2; echo $$?)
ifneq ($(DEPS_STATUS),0)
  $(error missing dependencies (see the line above))
endif

ifneq ($(DEPS_PREFIX),)
  DEP_INC := -I$(DEPS_PREFIX)/usr/include/lua5.4 -I$(DEPS_PREFIX)/usr/include -I$(DEPS_PREFIX)/usr/include/x86_64-linux-gnu
  DEP_LIB := -L$(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu -Wl,-rpath,$(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu
  READLINE_H := $(wildcard $(DEPS_PREFIX)/usr/include/readline/readline.h /usr/include/readline/readline.h)
else
  DEP_INC := -I/usr/include/lua5.4
  DEP_LIB :=
  READLINE_H := $(wildcard /usr/include/readline/readline.h)
endif

ifneq ($(NO_READLINE),)
  READLINE_H :=
endif
ifneq ($(READLINE_H),)
  RL_DEF := -DGRACE_HAVE_READLINE
  RL_LIB := -lreadline
endif

WARN    := -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter
# -fvisibility=hidden: libgrace.so exports only what include/grace.h declares (it marks those default).
# -MMD -MP: each object depends on the headers it includes (the .d files included at the end).
CFLAGS_ALL := $(WARN) $(OPT) -g -fPIC -fvisibility=hidden -MMD -MP -D_GNU_SOURCE -Iinclude -I. $(DEP_INC) $(RL_DEF) $(SAN) $(CFLAGS)
LDLIBS_ALL := $(DEP_LIB) -lmimalloc -ljansson -lz -lm -ldl -lpthread $(SAN) $(LDFLAGS)

CORE_SRC := $(wildcard base/*.c ir/*.c codegen/*.c cuda/*.c cpu/*.c gpu/*.c vm/*.c io/*.c)
LUA_SRC  := $(filter-out lua/main.c,$(wildcard lua/*.c))
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/cg_templates.o
LUA_OBJ  := $(LUA_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/stdlib_embed.o
STDLIB   := $(sort $(wildcard stdlib/grace/*.lua))
CTEST_SRC := $(wildcard tests/c/*.c)
CTEST_BIN := $(CTEST_SRC:tests/c/%.c=$(BUILD)/tests/%)

.PHONY: all examples test test-programs check asan fuzz fuzz-targets clean install demo bench-cpu
all: $(BUILD)/grace $(BUILD)/libgrace.a $(BUILD)/libgrace.so $(BUILD)/grace.so $(BUILD)/libgrace_lua.a

# Where Debian's lua5.4 looks for modules of PREFIX: /usr uses the multiarch C module folder, other prefixes
# (/usr/local, a private one) lib/lua/5.4; Lua sources go under share/lua/5.4 either way.
MULTIARCH   := $(shell $(CC) -print-multiarch 2>/dev/null)
LUA_CMODDIR ?= $(if $(and $(filter /usr,$(PREFIX)),$(MULTIARCH)),$(PREFIX)/lib/$(MULTIARCH)/lua/5.4,$(PREFIX)/lib/lua/5.4)
LUA_LMODDIR ?= $(PREFIX)/share/lua/5.4

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# Pointwise and reduction kernels are the CPU backend's hot loops: let the compiler vectorize them.
$(BUILD)/obj/cpu/cpu_%.o: cpu/cpu_%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -O3 -fno-math-errno -fno-trapping-math -c $< -o $@

$(BUILD)/libgrace.a: $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libgrace.so: $(CORE_OBJ)
	$(CC) -shared -o $@ $^ $(LDLIBS_ALL)

# The Lua standard library (stdlib/grace/*.lua) is embedded in the binary so `grace` needs no install.
$(BUILD)/bin2c: tools/bin2c.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 -o $@ $<

$(BUILD)/obj/stdlib_embed.c: $(BUILD)/bin2c $(STDLIB)
	@mkdir -p $(dir $@)
	$(BUILD)/bin2c $@ $(STDLIB)

$(BUILD)/obj/stdlib_embed.o: $(BUILD)/obj/stdlib_embed.c
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# The CUDA kernel templates (codegen/*.cuh) are embedded in libgrace as strings (codegen/cg_templates.h).
CG_CUH := $(sort $(wildcard codegen/*.cuh))
$(BUILD)/obj/cg_templates.c: $(BUILD)/bin2c $(CG_CUH)
	@mkdir -p $(dir $@)
	$(BUILD)/bin2c -s $@ $(CG_CUH)

$(BUILD)/obj/cg_templates.o: $(BUILD)/obj/cg_templates.c
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/grace: $(BUILD)/obj/lua/main.o $(LUA_OBJ) $(BUILD)/libgrace.a
	$(CC) -o $@ $^ $(DEP_LIB) -llua5.4 $(RL_LIB) $(LDLIBS_ALL)

# The Lua module for a stock Lua 5.4 (require "grace"): the binding, the embedded stdlib and libgrace in one
# object that exports only luaopen_grace; Lua's own functions come from the interpreter that loads it.
$(BUILD)/grace.so: $(LUA_OBJ) $(CORE_OBJ) tools/grace_lua.map
	$(CC) -shared -Wl,--version-script=tools/grace_lua.map -o $@ $(LUA_OBJ) $(CORE_OBJ) $(LDLIBS_ALL)

# The Lua layer for hosts that own a lua_State (include/grace_lua.h); link it before -lgrace -llua5.4.
$(BUILD)/libgrace_lua.a: $(LUA_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/%: tests/c/%.c tests/tap.h $(BUILD)/libgrace.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(BUILD)/libgrace.a $(LDLIBS_ALL)

# test_luac runs Lua code through the Lua layer's bytecode analysis: it links the Lua layer and Lua too
$(BUILD)/tests/test_luac: tests/c/test_luac.c tests/tap.h $(BUILD)/libgrace_lua.a $(BUILD)/libgrace.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(BUILD)/libgrace_lua.a $(BUILD)/libgrace.a $(DEP_LIB) -llua5.4 $(LDLIBS_ALL)

# A stand-in for cuBLASLt that test_node_update_fake loads (GRACE_CUBLASLT): no GPU needed.
$(BUILD)/tests/libfake_cublaslt.so: tests/fake/fake_cublaslt.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -fvisibility=default -shared -o $@ $<
$(BUILD)/tests/test_node_update_fake: $(BUILD)/tests/libfake_cublaslt.so

# The fuzz targets of tests/fuzz: under `make test` each replays its committed corpus (tests/fuzz/replay.c) in the
# normal build; `make fuzz` builds them for libFuzzer and runs them (below).
FUZZ_TARGETS := ir files ops fn lua
FUZZ_REPLAY := $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz_%)
$(BUILD)/tests/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h tests/fuzz/replay.c $(BUILD)/libgrace.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< tests/fuzz/replay.c $(BUILD)/libgrace.a $(LDLIBS_ALL)

# fuzz_lua drives the Lua module: it links the Lua layer and Lua too
$(BUILD)/tests/fuzz_lua: tests/fuzz/fuzz_lua.c tests/fuzz/fuzz.h tests/fuzz/replay.c $(BUILD)/libgrace_lua.a $(BUILD)/libgrace.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< tests/fuzz/replay.c $(BUILD)/libgrace_lua.a $(BUILD)/libgrace.a $(DEP_LIB) -llua5.4 $(LDLIBS_ALL)

# make examples: the C hosts of examples/embed (tests/cli/embed.sh runs them and host.py).
EXAMPLES := $(BUILD)/examples/c_only $(BUILD)/examples/game_loop
examples: $(EXAMPLES)

$(BUILD)/examples/c_only: examples/embed/c_only.c $(BUILD)/libgrace.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libgrace.a $(LDLIBS_ALL)

$(BUILD)/examples/game_loop: examples/embed/game_loop.c $(BUILD)/libgrace_lua.a $(BUILD)/libgrace.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libgrace_lua.a $(BUILD)/libgrace.a $(DEP_LIB) -llua5.4 $(LDLIBS_ALL)

TESTS = $(CTEST_BIN) $(FUZZ_REPLAY) $(sort $(wildcard tests/lua/test_*.lua tests/conformance/test_*.py) $(filter-out tests/cli/lib.sh,$(wildcard tests/cli/*.sh))) tools/layers.sh
# make check: every test file but the four that generate and check kernels over many random cases (about 2.5 of
# make test's 3 minutes on 2 cores, one at a time; measured in bench/RESULTS.md): under a minute on 2 cores.
CHECK_SLOW := test_cg_fused test_cg_matmul test_cg_ops test_fuse_random
CHECK_TESTS = $(filter-out $(CHECK_SLOW:%=$(BUILD)/tests/%),$(TESTS))

# Tests run in parallel, a file per core (JOBS=1: one at a time). Quiet unless V=1: prove prints the summary,
# tests/run.sh keeps each file's output and stderr in $(BUILD)/test-logs and prints a failing file's failures.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
ifeq ($(V),1)
  PROVE_QUIET := -v
  TEST_LOGS :=
else
  PROVE_QUIET := -Q
  TEST_LOGS := $(abspath $(BUILD))/test-logs
endif
# Tests that build C programs take the dependency flags of a DEPS_PREFIX build (empty otherwise).
PROVE = GRACE=$(abspath $(BUILD)/grace) GRACE_TEST_LOGS=$(TEST_LOGS) $(if $(DEPS_PREFIX),GRACE_DEP_CFLAGS="$(DEP_INC)" \
  GRACE_DEP_LIBS="$(DEP_LIB)") prove -j$(JOBS) $(PROVE_QUIET) \
  --exec "sh tests/run.sh $(abspath $(BUILD))" $(PROVE_FLAGS)

test-programs: all $(CTEST_BIN) $(FUZZ_REPLAY) $(EXAMPLES)   # what the tests run (a recipe, so make says nothing when all are built)
	@:

test:
	@$(MAKE) --no-print-directory -j$(JOBS) test-programs
	@rm -rf $(BUILD)/test-logs
	@echo "prove -j$(JOBS): $(words $(TESTS)) test files$(if $(TEST_LOGS), (their output in $(BUILD)/test-logs))"
	@$(PROVE) $(TESTS)

check:
	@$(MAKE) --no-print-directory -j$(JOBS) test-programs
	@rm -rf $(BUILD)/test-logs
	@echo "prove -j$(JOBS): $(words $(CHECK_TESTS)) test files$(if $(TEST_LOGS), (their output in $(BUILD)/test-logs))"
	@$(PROVE) $(CHECK_TESTS)

asan:   # GRACE_SANITIZED: tests that bound the process's resident size skip (the sanitizer holds freed memory)
	GRACE_SANITIZED=1 $(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -DGRACE_SYSTEM_MALLOC" test

# make fuzz: the fuzz targets built with clang's libFuzzer, AddressSanitizer and UBSan (no recovery) in
# build-fuzz, each run FUZZ_TIME seconds (default 60) under nice from its committed corpus; new inputs are kept in
# build-fuzz/corpus/NAME, a crashing input in build-fuzz/crash-NAME-*. FUZZ=name runs one target. A host allocation
# too large for ASan is a NULL that grace must handle (allocator_may_return_null), not a report. Needs Debian's
# clang (its libFuzzer runtime comes with it); not a dependency of the build or of make test.
FUZZ_CC   ?= clang
FUZZ_TIME ?= 60
FUZZ      ?= $(FUZZ_TARGETS)
FUZZ_SAN  := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
             -DGRACE_SYSTEM_MALLOC
fuzz:
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs $(FUZZ_CC) (apt-get install clang)"; exit 1; }
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=$(FUZZ_CC) OPT=-O1 CFLAGS=-Wno-unknown-warning-option \
	  SAN="$(FUZZ_SAN)" fuzz-targets
	@for t in $(FUZZ); do \
	  mkdir -p build-fuzz/corpus/$$t; echo "fuzz_$$t: $(FUZZ_TIME) s"; \
	  ASAN_OPTIONS=allocator_may_return_null=1 nice -n 19 build-fuzz/fuzz/fuzz_$$t -max_total_time=$(FUZZ_TIME) -timeout=30 -rss_limit_mb=2048 \
	    -print_final_stats=1 $$(test -f tests/fuzz/$$t.dict && echo -dict=tests/fuzz/$$t.dict) \
	    -artifact_prefix=build-fuzz/crash-$$t- build-fuzz/corpus/$$t tests/fuzz/corpus/$$t || exit 1; \
	done

fuzz-targets: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(BUILD)/libgrace.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -fsanitize=fuzzer -o $@ $< $(BUILD)/libgrace.a $(LDLIBS_ALL)

$(BUILD)/fuzz/fuzz_lua: tests/fuzz/fuzz_lua.c tests/fuzz/fuzz.h $(BUILD)/libgrace_lua.a $(BUILD)/libgrace.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -fsanitize=fuzzer -o $@ $< $(BUILD)/libgrace_lua.a $(BUILD)/libgrace.a $(DEP_LIB) -llua5.4 $(LDLIBS_ALL)

demo: $(BUILD)/grace
	$(BUILD)/grace examples/transformer_block.lua

bench-cpu: $(BUILD)/grace
	$(BUILD)/grace bench/cpu_ops.lua

GRACE_VERSION := $(shell sed -n 's/^\#define GRACE_VERSION "\(.*\)"/\1/p' include/grace.h)
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(BUILD)/grace $(DESTDIR)$(PREFIX)/bin/grace
	install -m 644 $(BUILD)/libgrace.a $(DESTDIR)$(PREFIX)/lib/libgrace.a
	install -m 755 $(BUILD)/libgrace.so $(DESTDIR)$(PREFIX)/lib/libgrace.so
	install -m 644 include/*.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libgrace_lua.a $(DESTDIR)$(PREFIX)/lib/libgrace_lua.a
	install -d $(DESTDIR)$(LUA_CMODDIR) $(DESTDIR)$(LUA_LMODDIR)/grace
	install -m 755 $(BUILD)/grace.so $(DESTDIR)$(LUA_CMODDIR)/grace.so
	install -m 644 $(STDLIB) $(DESTDIR)$(LUA_LMODDIR)/grace/
	for pc in grace grace-lua; do \
	  sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(GRACE_VERSION)|' tools/$$pc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/$$pc.pc; \
	done

clean:
	rm -rf build build-asan build-fuzz

-include $(CORE_OBJ:.o=.d) $(LUA_OBJ:.o=.d) $(BUILD)/obj/lua/main.d $(CTEST_BIN:=.d) $(FUZZ_REPLAY:=.d) $(EXAMPLES:=.d)
