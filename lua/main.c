/* main.c: the `grace` command. Runs a script, -e chunks or stdin with the grace module preloaded, or an
 * interactive REPL (with readline line editing, history and completion when built with readline).
 * The command line, the `arg` table, error reports and the REPL follow the lua5.4 command, so Lua users
 * find nothing new; what grace adds is --device, the limits (--max-memory, --timeout, --sandbox), GRACE_INIT and
 * the banner naming the backend. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "lua/lgrace.h"

#ifdef GRACE_HAVE_READLINE
#include <readline/readline.h>
#include <readline/history.h>
#endif

#define PROGNAME "grace"
#define HISTORY_MAX 1000

/* NULL inside the REPL: there, errors are printed bare, as lua5.4 does. */
static const char *progname = PROGNAME;

/* The state a SIGINT interrupts (the hook is set on it from the signal handler). */
static lua_State *globalL;
/* Set by the SIGINT handler that is installed while the REPL waits for input. */
static volatile sig_atomic_t prompt_interrupted;

/* --max-memory, --timeout, --sandbox: in force from the first chunk after GRACE_INIT (limits_on); the deadline is
 * re-armed for each chunk. Under --sandbox chunks load as text only (load_mode "t"). */
static grace_lua_limits limits;
static int limits_on;
static const char *load_mode;

/* ---- messages ---- */

static void l_message(const char *pname, const char *msg) {
  fflush(stdout); /* keep the order of output and errors when both go to one terminal or file */
  if (pname) fprintf(stderr, "%s: ", pname);
  fprintf(stderr, "%s\n", msg ? msg : "(no error message)");
  fflush(stderr);
}

/* Prints the error on the top of the stack (if status is an error) and pops it. */
static int report(lua_State *L, int status) {
  if (status != LUA_OK) {
    int top = lua_gettop(L);
    const char *msg = lua_tostring(L, -1);
    if (msg == NULL) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, -1));
    l_message(progname, msg);
    lua_settop(L, top > 0 ? top - 1 : 0);
  }
  return status;
}

static void print_version(void) {
  printf("%s %s (%s)\n", PROGNAME, GRACE_VERSION, LUA_RELEASE);
  fflush(stdout);
}

static void print_usage(FILE *f) {
  fprintf(f,
          "usage: %s [options] [script [args]]\n"
          "Available options are:\n"
          "  -e stat          execute string 'stat'\n"
          "  -i               enter interactive mode after executing 'script'\n"
          "  -l mod           require library 'mod' into global 'mod'\n"
          "  -l g=mod         require library 'mod' into global 'g'\n"
          "  -v, --version    show version information\n"
          "  -h, --help       show this help\n"
          "  -E               ignore environment variables (GRACE_INIT, LUA_INIT*, GRACE_DEVICE, LUA_PATH*)\n"
          "  -W               turn warnings on\n"
          "  --device DEV     default device: cpu, cuda or auto (default: $GRACE_DEVICE, else auto)\n"
          "  --dump-ir        print the IR of every function grace.compile traces (as GRACE_LOG=ir)\n"
          "  --max-memory N   cap tensor memory and, apart, the Lua heap at N bytes each (suffix K, M or G)\n"
          "  --timeout S      stop each chunk (script, -e, REPL input) after S seconds of wall time\n"
          "  --sandbox        no files, processes, C modules or bytecode for the chunks (docs/lua_api.md)\n"
          "  --               stop handling options\n"
          "  -                stop handling options and execute stdin\n"
          "With no script, %s starts the REPL when stdin is a terminal, and runs stdin otherwise.\n"
          "GRACE_INIT, else LUA_INIT_5_4, else LUA_INIT (a chunk, or @file) runs before the options;\n"
          "the REPL history is kept in $GRACE_HISTORY (default ~/.grace_history; empty: no history file).\n",
          PROGNAME, PROGNAME);
  fflush(f);
}

/* ---- signals: Ctrl-C interrupts a running chunk with a Lua error ---- */

static void lstop(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

/* Runs in signal context: lua_sethook is documented as safe to call asynchronously. The handler is
 * installed with SA_RESETHAND, so a second Ctrl-C (say, inside a long C call) kills the process. */
static void on_sigint_run(int sig) {
  (void)sig;
  if (globalL) lua_sethook(globalL, lstop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

static void on_sigint_prompt(int sig) {
  (void)sig;
  prompt_interrupted = 1;
}

static void set_sigint(void (*handler)(int), int flags, struct sigaction *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, old);
}

/* ---- running chunks ---- */

/* Message handler: turns any error object into a string and appends a traceback. An object whose __tostring
 * gives a string is shown as that string alone, as lua5.4 does (it chose how it wants to be reported). */
static int msghandler(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      return 1;
    else
      msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* ---- progress of long work (grace_set_progress): one line on a terminal's stderr after a second of it ---- */
static struct {
  double start, last;   /* the current stretch of progress messages: its first and latest */
  int shown;            /* a line is on the screen (cleared when the chunk that caused it ends) */
} progress;

static void show_progress(void *ud, const char *what) {
  (void)ud;
  double now = grace_clock();
  if (now - progress.last > 0.5) progress.start = now;   /* a pause ends a stretch: quick work stays silent */
  progress.last = now;
  if (now - progress.start < 1.0) return;
  fprintf(stderr, "\r\033[K" PROGNAME ": %s", what);
  fflush(stderr);
  progress.shown = 1;
}

static void clear_progress(void) {
  if (!progress.shown) return;
  fputs("\r\033[K", stderr);
  fflush(stderr);
  progress.shown = 0;
}

/* Calls the function under the narg arguments on the stack with the message handler and Ctrl-C
 * interruption in place. */
static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  globalL = L;
  if (limits_on && grace_lua_set_limits(L, &limits) != LUA_OK) {   /* a fresh deadline for this chunk */
    lua_remove(L, base);
    return LUA_ERRRUN;   /* the message is on top, where report looks */
  }
  struct sigaction old;
  set_sigint(on_sigint_run, SA_RESETHAND, &old);
  int status = lua_pcall(L, narg, nres, base);
  clear_progress();
  sigaction(SIGINT, &old, NULL);
  lua_sethook(L, NULL, 0, 0); /* a Ctrl-C that came after the chunk ended must not hit the next one */
  lua_remove(L, base);
  return status;
}

static int dochunk(lua_State *L, int status) {
  if (status == LUA_OK) status = docall(L, 0, 0);
  return report(L, status);
}

static int dofile(lua_State *L, const char *name) {
  return dochunk(L, luaL_loadfilex(L, name, load_mode));
}

static int dostring(lua_State *L, const char *s, const char *name) {
  return dochunk(L, luaL_loadbufferx(L, s, strlen(s), name, load_mode));
}

/* -l mod or -l g=mod: global g (or mod) = require(mod). */
static int dolibrary(lua_State *L, const char *spec) {
  const char *eq = strchr(spec, '=');
  const char *modname = eq ? eq + 1 : spec;
  lua_getglobal(L, "require");
  lua_pushstring(L, modname);
  int status = docall(L, 1, 1);
  if (status == LUA_OK) {
    if (eq) lua_pushlstring(L, spec, (size_t)(eq - spec));
    else lua_pushstring(L, spec);
    lua_insert(L, -2);
    lua_setglobal(L, lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  return report(L, status);
}

/* Pushes arg[1..n] (the script's arguments) and returns n. */
static int pushargs(lua_State *L) {
  if (lua_getglobal(L, "arg") != LUA_TTABLE) luaL_error(L, "'arg' is not a table");
  int n = (int)luaL_len(L, -1);
  luaL_checkstack(L, n + 3, "too many arguments to script");
  for (int i = 1; i <= n; i++) lua_rawgeti(L, -i, i);
  lua_remove(L, -n - 1);
  return n;
}

static int handle_script(lua_State *L, char **argv) {
  const char *fname = argv[0];
  if (strcmp(fname, "-") == 0 && strcmp(argv[-1], "--") != 0) fname = NULL; /* stdin */
  int status = luaL_loadfilex(L, fname, load_mode);
  if (status == LUA_OK) {
    int n = pushargs(L);
    status = docall(L, n, LUA_MULTRET);
  }
  return report(L, status);
}

/* The init chunk: GRACE_INIT, else LUA_INIT_5_4, else LUA_INIT; only the first that is set runs, as lua5.4 runs
 * LUA_INIT_5_4 instead of LUA_INIT (the most specific wins, so a grace-only setup can shadow a Lua user's one).
 * "@file" runs the file, anything else is a chunk named after its variable, so errors read "LUA_INIT:1: ..."
 * as lua5.4's do. */
static int handle_init(lua_State *L) {
  static const char *const vars[] = {"GRACE_INIT", "LUA_INIT_" LUA_VERSION_MAJOR "_" LUA_VERSION_MINOR, "LUA_INIT"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *init = getenv(vars[i]);
    if (init == NULL) continue;
    if (init[0] == '@') return dofile(L, init + 1);
    char chunkname[32];
    snprintf(chunkname, sizeof chunkname, "=%s", vars[i]);
    return dostring(L, init, chunkname);
  }
  return LUA_OK;
}

/* ---- command line ---- */

enum { HAS_E = 1, HAS_I = 2, HAS_V = 4, NO_ENV = 8, HAS_HELP = 16, DUMP_IR = 32, SANDBOX = 64 };

typedef struct {
  int flags;
  int script;         /* index of the script in argv; argc when there is none */
  const char *device; /* --device */
  size_t max_memory;  /* --max-memory; 0: none */
  double timeout;     /* --timeout; 0: none */
} Options;

/* "4096", "512K", "64M", "2G" (powers of 1024). Returns 0 when s is none of these. */
static int parse_bytes(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long n = strtoull(s, &end, 10);
  if (end == s || errno || *s == '-') return 0;
  int shift = 0;
  switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
  }
  if (*end || n > (SIZE_MAX >> shift)) return 0;
  *out = (size_t)n << shift;
  return 1;
}

/* --name VALUE or --name=VALUE: the value, or NULL when a is not this option. *i moves past a separate value. */
static const char *long_value(int argc, char **argv, int *i, const char *name, int *missing) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return NULL;
  if (a[n] == '=') return a + n + 1;
  if (a[n] != '\0') return NULL;
  if (*i + 1 >= argc) { *missing = 1; return NULL; }
  return argv[++*i];
}

/* --max-memory and --timeout; returns 1 when a is one of them, 0 when not, -1 after printing what is wrong. */
static int collect_limit(int argc, char **argv, int *i, Options *o) {
  int missing = 0;
  const char *a = argv[*i], *v;
  if ((v = long_value(argc, argv, i, "--max-memory", &missing))) {
    if (parse_bytes(v, &o->max_memory)) return 1;
    fprintf(stderr, "%s: '--max-memory' needs a byte count (e.g. 4096, 512K, 64M, 2G), got '%s'\n", PROGNAME, v);
    return -1;
  }
  if (!missing && (v = long_value(argc, argv, i, "--timeout", &missing))) {
    char *end;
    o->timeout = strtod(v, &end);
    if (end != v && !*end && o->timeout > 0 && o->timeout < 1e9) return 1;
    fprintf(stderr, "%s: '--timeout' needs a number of seconds > 0, got '%s'\n", PROGNAME, v);
    return -1;
  }
  if (missing) fprintf(stderr, "%s: '%s' needs an argument\n", PROGNAME, a);
  return missing ? -1 : 0;
}

/* Scans the options (like lua5.4's: each is a separate word; -e and -l take the next word unless
 * it is attached). Returns 0, or -1 after printing what is wrong. */
static int collect_args(int argc, char **argv, Options *o) {
  int i, lim;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    o->script = i;
    if (a[0] != '-' || a[1] == '\0') return 0; /* a script, or "-" (stdin) */
    if (a[1] == '-') {
      if (a[2] == '\0') { o->script = i + 1; return 0; } /* "--" */
      if (strcmp(a, "--version") == 0) o->flags |= HAS_V;
      else if (strcmp(a, "--help") == 0) o->flags |= HAS_HELP;
      else if (strcmp(a, "--dump-ir") == 0) o->flags |= DUMP_IR;
      else if (strcmp(a, "--sandbox") == 0) o->flags |= SANDBOX;
      else if ((lim = collect_limit(argc, argv, &i, o)) != 0) {
        if (lim < 0) goto usage;
      } else if (strncmp(a, "--device=", 9) == 0) {
        o->device = a + 9;
        if (!*o->device) goto needs_device;
      } else if (strcmp(a, "--device") == 0) {
        if (i + 1 >= argc || argv[i + 1][0] == '-') goto needs_device;
        o->device = argv[++i];
      } else
        goto unknown;
      continue;
    }
    switch (a[1]) {
      case 'E': case 'W': case 'i': case 'v': case 'h':
        if (a[2] != '\0') goto unknown;
        if (a[1] == 'E') o->flags |= NO_ENV;
        else if (a[1] == 'i') o->flags |= HAS_I;
        else if (a[1] == 'v') o->flags |= HAS_V;
        else if (a[1] == 'h') o->flags |= HAS_HELP;
        break;
      case 'e': case 'l':
        if (a[1] == 'e') o->flags |= HAS_E; /* -l alone still starts the REPL, as in lua5.4 */
        if (a[2] == '\0') {
          if (i + 1 >= argc || argv[i + 1][0] == '-') {
            fprintf(stderr, "%s: '%s' needs an argument\n", PROGNAME, a);
            goto usage;
          }
          i++;
        }
        break;
      default:
        goto unknown;
    }
  }
  o->script = argc;
  return 0;
unknown:
  fprintf(stderr, "%s: unrecognized option '%s'\n", PROGNAME, argv[i]);
  goto usage;
needs_device:
  fprintf(stderr, "%s: '--device' needs an argument (cpu, cuda or auto)\n", PROGNAME);
usage:
  print_usage(stderr);
  return -1;
}

/* Runs -e, -l and -W in their order on the command line. Returns 0 on the first failure. */
static int runargs(lua_State *L, char **argv, int n) {
  for (int i = 1; i < n; i++) {
    const char *a = argv[i];
    if (a[0] != '-') continue;
    if (!strcmp(a, "--device") || !strcmp(a, "--max-memory") || !strcmp(a, "--timeout")) { i++; continue; }
    if (a[1] == 'e' || a[1] == 'l') {
      const char *extra = a[2] ? a + 2 : argv[++i];
      int status = a[1] == 'e' ? dostring(L, extra, "=(command line)") : dolibrary(L, extra);
      if (status != LUA_OK) return 0;
    } else if (a[1] == 'W' && a[2] == '\0')
      lua_warning(L, "@on", 0);
  }
  return 1;
}

/* arg[0] is the script, arg[1..] its arguments, arg[-k] the interpreter and the options before it.
 * With no script, arg[0] is the interpreter. */
static void createargtable(lua_State *L, char **argv, int argc, int script) {
  if (script == argc) script = 0;
  lua_createtable(L, argc - (script + 1) > 0 ? argc - (script + 1) : 0, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

static int require_grace(lua_State *L) {
  luaL_requiref(L, "grace", luaopen_grace, 1);
  return 0;
}

/* Opens the module (this creates the VM on the default device); an unusable device is reported here. */
static int open_grace(lua_State *L) {
  lua_pushcfunction(L, require_grace);
  int status = lua_pcall(L, 0, 0, 0);
  if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    size_t pl = strlen(PROGNAME);
    /* the module's own messages already start with "grace: " */
    if (msg && strncmp(msg, PROGNAME ": ", pl + 2) == 0) l_message(NULL, msg);
    else report(L, status);
  }
  return status;
}

/* ---- REPL input ---- */

static int interactive; /* stdin is a terminal: Ctrl-C at the prompt drops the input line */

#ifdef GRACE_HAVE_READLINE
static int use_readline; /* stdin is a terminal */
static char *history_path;
static char *rl_line;
static int rl_finished;
/* readline 8.2 with bracketed paste ends the line itself when it reads end of input; the REPL must
 * then not print another newline */
static int rl_eof_newline;

static void on_line(char *line) {
  rl_line = line;
  rl_finished = 1;
  rl_callback_handler_remove();
}

static int readline_ends_eof_line(void) {
#if defined(RL_READLINE_VERSION) && RL_READLINE_VERSION >= 0x0802
  const char *bp = rl_variable_value("enable-bracketed-paste");
  return rl_eof_found && bp && strcmp(bp, "on") == 0;
#else
  return 0;
#endif
}

/* readline through its callback interface, so that a Ctrl-C at the prompt can drop the line instead
 * of killing the process: select() returns on the signal, and the line state is thrown away. */
static int read_readline(const char *prompt, char **out) {
  rl_finished = 0;
  rl_line = NULL;
  rl_eof_newline = 0;
#if defined(RL_READLINE_VERSION) && RL_READLINE_VERSION >= 0x0802
  rl_eof_found = 0; /* the callback interface does not reset it for the next line */
#endif
  rl_callback_handler_install(prompt, on_line);
  while (!rl_finished) {
    fd_set in;
    FD_ZERO(&in);
    FD_SET(STDIN_FILENO, &in);
    if (select(STDIN_FILENO + 1, &in, NULL, NULL, NULL) < 0) {
      int err = errno;
      if (err == EINTR && !prompt_interrupted) continue;
      if (err == EINTR) { /* show "^C" after the dropped text, then start afresh on a new line */
        rl_point = rl_end;
        rl_redisplay();
        fputs("^C", rl_outstream ? rl_outstream : stdout);
        fflush(rl_outstream ? rl_outstream : stdout);
      }
      rl_free_line_state();
      rl_callback_sigcleanup();
      rl_callback_handler_remove();
      if (err == EINTR) {
        prompt_interrupted = 0;
        fputs("\n", stdout);
        fflush(stdout);
        return -2;
      }
      return 0;
    }
    rl_callback_read_char();
  }
  if (rl_line == NULL) rl_eof_newline = readline_ends_eof_line();
  *out = rl_line;
  return rl_line != NULL;
}

static int history_saved; /* this input is in the history already (as typed, for "= expr") */

/* Adds a non-empty line to the history and appends it to the history file at once, so that history
 * survives os.exit; failures to write are ignored (history is a convenience). */
static void saveline(const char *line) {
  if (!use_readline || history_saved || line[0] == '\0') return;
  history_saved = 1;
  add_history(line);
  if (history_path) append_history(1, history_path);
}

/* ---- completion of global names and fields, e.g. `grace.ma<TAB>` ---- */

static const char *const lua_keywords[] = {
  "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
  "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while", NULL};

static int is_identifier(const char *s) {
  if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) return 0;
  for (s++; *s; s++)
    if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')))
      return 0;
  return 1;
}

/* Replaces the value on the top with the next place its fields are looked up: the __index of its
 * metatable when that is a table, else nil. Raw access only: completing must run no user code. An
 * __index that is a C function with a table as first upvalue (how the tensor binding keeps its methods)
 * counts as that table, so that `x:resh<TAB>` completes a tensor method. */
static void push_index_table(lua_State *L) {
  if (!lua_getmetatable(L, -1)) { lua_pop(L, 1); lua_pushnil(L); return; }
  lua_pushliteral(L, "__index");
  lua_rawget(L, -2);
  lua_remove(L, -2);
  lua_remove(L, -2);
  if (lua_iscfunction(L, -1) && lua_getupvalue(L, -1, 1) != NULL) lua_remove(L, -2);
  if (!lua_istable(L, -1)) { lua_pop(L, 1); lua_pushnil(L); }
}

/* Replaces the value on the top with its field `key` (or nil), following __index tables. */
static void raw_field(lua_State *L, const char *key, size_t len) {
  for (int depth = 0; depth < 8 && !lua_isnil(L, -1); depth++) {
    if (lua_istable(L, -1)) {
      lua_pushlstring(L, key, len);
      lua_rawget(L, -2);
      if (!lua_isnil(L, -1)) { lua_remove(L, -2); return; }
      lua_pop(L, 1);
    }
    push_index_table(L);
  }
  lua_pop(L, 1);
  lua_pushnil(L);
}

static void add_match(lua_State *L, int list, int seen, const char *prefix, size_t plen, const char *name) {
  lua_pushlstring(L, prefix, plen);
  lua_pushstring(L, name);
  lua_concat(L, 2);
  lua_pushvalue(L, -1);
  if (lua_rawget(L, seen) != LUA_TNIL) { lua_pop(L, 2); return; }
  lua_pop(L, 1);
  lua_pushvalue(L, -1);
  lua_pushboolean(L, 1);
  lua_rawset(L, seen);
  lua_rawseti(L, list, (lua_Integer)lua_rawlen(L, list) + 1);
}

/* Completes the word given as light userdata: returns a list of full candidate words. */
static int collect_matches(lua_State *L) {
  const char *text = lua_touserdata(L, 1);
  lua_settop(L, 0);
  lua_newtable(L); /* 1: list */
  lua_newtable(L); /* 2: seen */
  const char *part = text, *p;
  for (p = text; *p; p++)
    if (*p == '.' || *p == ':') part = p + 1;
  size_t plen = (size_t)(part - text), partlen = strlen(part);
  lua_pushglobaltable(L);
  for (const char *s = text; s < part;) { /* walk the path before the last separator */
    const char *e = s;
    while (e < part - 1 && *e != '.' && *e != ':') e++;
    raw_field(L, s, (size_t)(e - s));
    s = e + 1;
  }
  for (int depth = 0; depth < 8 && !lua_isnil(L, -1); depth++) {
    if (lua_istable(L, -1)) {
      lua_pushnil(L);
      while (lua_next(L, -2)) {
        if (lua_type(L, -2) == LUA_TSTRING) {
          const char *k = lua_tostring(L, -2);
          if (strncmp(k, part, partlen) == 0 && is_identifier(k)) add_match(L, 1, 2, text, plen, k);
        }
        lua_pop(L, 1);
      }
    }
    push_index_table(L);
  }
  if (plen == 0)
    for (int i = 0; lua_keywords[i]; i++)
      if (strncmp(lua_keywords[i], part, partlen) == 0) add_match(L, 1, 2, "", 0, lua_keywords[i]);
  lua_settop(L, 1);
  return 1;
}

static char **cands;
static size_t ncand, icand;

static void free_cands(void) {
  while (icand < ncand) free(cands[icand++]);
  free(cands);
  cands = NULL;
  ncand = icand = 0;
}

static void gather_cands(const char *text) {
  lua_State *L = globalL;
  if (!L || !lua_checkstack(L, 4)) return;
  int top = lua_gettop(L);
  lua_pushcfunction(L, collect_matches);
  lua_pushlightuserdata(L, (void *)text);
  if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_istable(L, -1)) {
    size_t n = (size_t)lua_rawlen(L, -1);
    cands = n ? malloc(n * sizeof *cands) : NULL;
    for (size_t i = 0; cands && i < n; i++) {
      lua_rawgeti(L, -1, (lua_Integer)i + 1);
      char *s = strdup(lua_tostring(L, -1));
      lua_pop(L, 1);
      if (s) cands[ncand++] = s;
    }
  }
  lua_settop(L, top);
}

/* readline's generator: state 0 starts a new completion; ownership of each string passes to readline. */
static char *complete_next(const char *text, int state) {
  if (state == 0) {
    free_cands();
    gather_cands(text);
  }
  return icand < ncand ? cands[icand++] : NULL;
}

static char **attempt_completion(const char *text, int start, int end) {
  (void)start;
  (void)end;
  rl_attempted_completion_over = 1; /* never fall back to file names */
  rl_completion_append_character = '\0';
  return rl_completion_matches(text, complete_next);
}

static void history_open(void) {
  const char *env = getenv("GRACE_HISTORY");
  const char *home = getenv("HOME");
  history_path = NULL;
  if (env) {
    if (*env) history_path = strdup(env);
  } else if (home && *home) {
    size_t n = strlen(home) + sizeof "/.grace_history";
    history_path = malloc(n);
    if (history_path) snprintf(history_path, n, "%s/.grace_history", home);
  }
  if (!history_path) return;
  /* append_history needs the file to exist; write_history creates it (with the empty history), but
   * only when there is none, never over a file that failed to read */
  if (read_history(history_path) == ENOENT) write_history(history_path);
}

static void history_close(void) {
  if (history_path) history_truncate_file(history_path, HISTORY_MAX);
  free(history_path);
  history_path = NULL;
  free_cands();
}
#else
static void saveline(const char *line) { (void)line; }
#endif

/* Plain line input: stdin is not a terminal, or readline is not built in. */
static int read_plain(const char *prompt, char **out) {
  fputs(prompt, stdout);
  fflush(stdout);
  char *line = NULL;
  size_t cap = 0;
  if (getline(&line, &cap, stdin) < 0) {
    free(line);
    if (interactive && prompt_interrupted) { /* Ctrl-C: the terminal dropped the typed line */
      prompt_interrupted = 0;
      clearerr(stdin);
      fputs("\n", stdout);
      return -2;
    }
    return 0;
  }
  *out = line;
  return 1;
}

/* After end of input at a prompt: go to a new line, unless readline did. */
static void end_eof_line(void) {
#ifdef GRACE_HAVE_READLINE
  if (use_readline && rl_eof_newline) return;
#endif
  fputs("\n", stdout);
  fflush(stdout);
}

/* Reads a line into a malloc'd string: 1 a line, 0 end of input, -2 interrupted by Ctrl-C. */
static int read_input(const char *prompt, char **out) {
#ifdef GRACE_HAVE_READLINE
  if (use_readline) return read_readline(prompt, out);
#endif
  return read_plain(prompt, out);
}

/* _PROMPT and _PROMPT2 go through tostring, as in lua5.4 (a table with __tostring, a boolean: all shown).
 * Called under pcall: lua5.4 lets a failing __tostring end the session; here it is reported and the default
 * prompt is used, so a typo in a prompt object does not lose the REPL's state. */
static int prompt_tostring(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

/* Pushes the next input line (with "= expr" made "return expr" on a first line); returns like read_input. */
static int pushline(lua_State *L, int firstline) {
  const char *name = firstline ? "_PROMPT" : "_PROMPT2";
  const char *prompt = firstline ? "> " : ">> ";
  /* the prompt string is kept on the stack while reading, as the prompt points into it */
  if (lua_getglobal(L, name) != LUA_TNIL) {
    lua_pushcfunction(L, prompt_tostring);
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK) prompt = lua_tostring(L, -1);
    else {
      report(L, LUA_ERRRUN);
      lua_pushnil(L); /* in place of the prompt string, for the pop below */
    }
  }
  char *b = NULL;
  prompt_interrupted = 0;
  int r = read_input(prompt, &b);
  lua_pop(L, 1);
  if (r <= 0) return r;
  size_t l = strlen(b);
  if (l > 0 && b[l - 1] == '\n') b[--l] = '\0';
  if (firstline && b[0] == '=') {
    saveline(b); /* the history holds what was typed */
    lua_pushfstring(L, "return %s", b + 1);
  } else lua_pushlstring(L, b, l);
  free(b);
  return 1;
}

/* Tries the line as an expression ("return line;"): that is how `1+2` prints 3. */
static int addreturn(lua_State *L) {
  const char *line = lua_tostring(L, -1);
  const char *retline = lua_pushfstring(L, "return %s;", line);
  int status = luaL_loadbufferx(L, retline, strlen(retline), "=stdin", load_mode);
  if (status == LUA_OK) {
    lua_remove(L, -2);
    saveline(line);
  } else
    lua_pop(L, 2);
  return status;
}

/* A syntax error at <eof> means the chunk is unfinished: pops the message and says so. */
static int incomplete(lua_State *L, int status) {
  static const char mark[] = "<eof>";
  const size_t marklen = sizeof mark - 1;
  if (status == LUA_ERRSYNTAX) {
    size_t lmsg;
    const char *msg = lua_tolstring(L, -1, &lmsg);
    if (msg && lmsg >= marklen && strcmp(msg + lmsg - marklen, mark) == 0) {
      lua_pop(L, 1);
      return 1;
    }
  }
  return 0;
}

/* Reads continuation lines while the chunk (at index 1) is unfinished. End of input in the middle
 * reports the syntax error; Ctrl-C drops the whole chunk (-2). */
static int multiline(lua_State *L) {
  for (;;) {
    size_t len;
    const char *line = lua_tolstring(L, 1, &len);
    int status = luaL_loadbufferx(L, line, len, "=stdin", load_mode);
    if (!incomplete(L, status)) {
      saveline(line);
      return status;
    }
    int r = pushline(L, 0);
    if (r == -2) return -2;
    if (r == 0) {
      end_eof_line();
      saveline(line);
      return luaL_loadbufferx(L, line, len, "=stdin", load_mode); /* the "<eof>" error again, to report it */
    }
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
}

/* Reads and compiles one input (maybe several lines): the status, -1 at end of input, -2 on Ctrl-C. */
static int loadline(lua_State *L) {
  lua_settop(L, 0);
#ifdef GRACE_HAVE_READLINE
  history_saved = 0;
#endif
  int r = pushline(L, 1);
  if (r <= 0) return r == 0 ? -1 : -2;
  int status = addreturn(L);
  if (status != LUA_OK) status = multiline(L);
  if (status == -2) return -2;
  lua_remove(L, 1);
  return status;
}

/* Prints the values on the stack through the global print, as lua5.4 does. */
static void l_print(lua_State *L) {
  int n = lua_gettop(L);
  if (n > 0) {
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    lua_getglobal(L, "print");
    lua_insert(L, 1);
    if (lua_pcall(L, n, 0, 0) != LUA_OK)
      l_message(progname, lua_pushfstring(L, "error calling 'print' (%s)", lua_tostring(L, -1)));
  }
}

static int push_backend(lua_State *L) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "grace");
  lua_getfield(L, -1, "backend");
  lua_call(L, 0, 1);
  return 1;
}

static void print_banner(lua_State *L) {
  lua_pushcfunction(L, push_backend);
  const char *backend = "unknown";
  if (lua_pcall(L, 0, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING) backend = lua_tostring(L, -1);
  printf("%s %s on Lua %s.%s -- backend: %s\n", PROGNAME, GRACE_VERSION, LUA_VERSION_MAJOR,
         LUA_VERSION_MINOR, backend);
  fflush(stdout);
  lua_pop(L, 1);
}

static void doREPL(lua_State *L) {
  const char *oldprogname = progname;
  progname = NULL;
  globalL = L;
  interactive = isatty(STDIN_FILENO);
#ifdef GRACE_HAVE_READLINE
  use_readline = interactive;
  if (use_readline) {
    rl_readline_name = PROGNAME;
    rl_catch_signals = 0; /* the Ctrl-C at the prompt is ours (see read_readline) */
    rl_attempted_completion_function = attempt_completion;
    rl_completer_word_break_characters = " \t\n\"\\'`@$><=;|&{}()[]+-*/%^~#,";
    using_history();
    stifle_history(HISTORY_MAX);
    history_open();
  }
#endif
  struct sigaction old;
  if (interactive) set_sigint(on_sigint_prompt, 0, &old); /* no SA_RESTART: the read must return */
  print_banner(L);
  /* help() and help(grace.matmul) at the prompt: grace.help (stdlib/grace/help.lua) unless a script took the name */
  if (lua_getglobal(L, "help") == LUA_TNIL && lua_getglobal(L, "grace") == LUA_TTABLE) {
    lua_getfield(L, -1, "help");
    lua_setglobal(L, "help");
  }
  lua_settop(L, 0);
  int status;
  while ((status = loadline(L)) != -1) {
    if (status == -2) continue;
    if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
    if (status == LUA_OK) l_print(L);
    else report(L, status);
  }
  lua_settop(L, 0);
  end_eof_line();
  if (interactive) sigaction(SIGINT, &old, NULL);
#ifdef GRACE_HAVE_READLINE
  if (use_readline) history_close();
#endif
  progname = oldprogname;
}

/* ---- main ---- */

/* --max-memory, --timeout and --sandbox, after GRACE_INIT (the user's own setup) and before everything else. */
static int apply_limits(lua_State *L, const Options *o) {
  limits = (grace_lua_limits){.max_tensor_bytes = o->max_memory, .max_lua_bytes = o->max_memory,
                              .timeout = o->timeout};
  limits_on = o->max_memory || o->timeout > 0;
  int status = limits_on ? grace_lua_set_limits(L, &limits) : LUA_OK;
  lua_sethook(L, NULL, 0, 0);   /* armed again by each chunk */
  if (status == LUA_OK && (o->flags & SANDBOX)) {
    load_mode = "t";
    status = grace_lua_sandbox(L);
  }
  if (status != LUA_OK) report(L, status);
  return status;
}

/* Everything runs in protected mode, so that even an out-of-memory while setting up is a message. */
static int pmain(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  Options o = {0, 0, NULL, 0, 0};
  luaL_checkversion(L);
  if (collect_args(argc, argv, &o) != 0) return 0;
  if (o.flags & HAS_HELP) {
    print_usage(stdout);
    lua_pushboolean(L, 1);
    return 1;
  }
  if (o.flags & HAS_V) print_version();
  if (o.flags & NO_ENV) { /* package reads LUA_PATH/LUA_CPATH unless this is set */
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  /* the VM reads the default device from GRACE_DEVICE when the module opens */
  if (o.device) {
    if (setenv("GRACE_DEVICE", o.device, 1) != 0) {
      l_message(PROGNAME, "cannot set GRACE_DEVICE");
      return 0;
    }
  } else if (o.flags & NO_ENV)
    unsetenv("GRACE_DEVICE");
  if (o.flags & DUMP_IR) {
    /* GRACE_LOG is a comma-separated list of topics; add "ir" to what is there */
    const char *old = (o.flags & NO_ENV) ? NULL : getenv("GRACE_LOG");
    char buf[256];
    snprintf(buf, sizeof buf, "%s%sir", old && *old ? old : "", old && *old ? "," : "");
    setenv("GRACE_LOG", buf, 1);
  }
  luaL_openlibs(L);
  if (open_grace(L) != LUA_OK) return 0;
  if (isatty(STDERR_FILENO)) grace_set_progress(lgrace_vm(L), show_progress, NULL);   /* silent otherwise */
  createargtable(L, argv, argc, o.script);
  lua_gc(L, LUA_GCRESTART);
  /* incremental, not lua5.4's generational mode: a tensor temporary that survives one minor collection
   * (it is still referenced when the step runs) would wait for a major one, holding megabytes */
  lua_gc(L, LUA_GCINC, 0, 0, 0);
  if (!(o.flags & NO_ENV) && handle_init(L) != LUA_OK) return 0;
  if (apply_limits(L, &o) != LUA_OK) return 0;
  if (!runargs(L, argv, o.script)) return 0;
  if (o.script < argc && handle_script(L, argv + o.script) != LUA_OK) return 0;
  if (o.flags & HAS_I)
    doREPL(L);
  else if (o.script == argc && !(o.flags & (HAS_E | HAS_V))) {
    if (isatty(STDIN_FILENO)) doREPL(L);
    else if (dofile(L, NULL) != LUA_OK) return 0;
  }
  lua_pushboolean(L, 1);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    l_message(PROGNAME, "cannot create state: not enough memory");
    return EXIT_FAILURE;
  }
  lua_gc(L, LUA_GCSTOP); /* no collections while the libraries load */
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = lua_pcall(L, 2, 1, 0);
  int result = lua_toboolean(L, -1);
  report(L, status);
  lua_close(L);
  return (result && status == LUA_OK) ? EXIT_SUCCESS : EXIT_FAILURE;
}
