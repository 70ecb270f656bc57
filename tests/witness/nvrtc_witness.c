/* A witness outside kiln's code: a stand-in libnvrtc.so.13 that forwards every call kiln makes
 * to the real NVRTC and appends one line to $KILN_WITNESS_FILE per nvrtcCompileProgram. The
 * single-flight test counts those lines instead of trusting kiln's own counters.
 * Built by the tests: cc -shared -fPIC -Wl,-soname,libnvrtc.so.13 -o libnvrtc.so.13 this.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *real(void) {
  static void *handle;
  if (!handle) {
    const char *path = getenv("KILN_WITNESS_REAL_NVRTC");
    handle = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!handle) {
      fprintf(stderr, "nvrtc witness: cannot load KILN_WITNESS_REAL_NVRTC: %s\n", dlerror());
      abort();
    }
  }
  return handle;
}

#define FORWARD(ret, name, params, args)                \
  ret name params {                                      \
    static ret(*fn) params;                              \
    if (!fn) *(void **)(&fn) = dlsym(real(), #name);     \
    return fn args;                                      \
  }

typedef int res;
typedef void *prog;

FORWARD(const char *, nvrtcGetErrorString, (res r), (r))
FORWARD(res, nvrtcVersion, (int *a, int *b), (a, b))
FORWARD(res, nvrtcGetNumSupportedArchs, (int *n), (n))
FORWARD(res, nvrtcGetSupportedArchs, (int *a), (a))
FORWARD(res, nvrtcCreateProgram, (prog *p, const char *s, const char *n, int h, const char *const *c, const char *const *i), (p, s, n, h, c, i))
FORWARD(res, nvrtcAddNameExpression, (prog p, const char *e), (p, e))
FORWARD(res, nvrtcGetProgramLogSize, (prog p, size_t *n), (p, n))
FORWARD(res, nvrtcGetProgramLog, (prog p, char *l), (p, l))
FORWARD(res, nvrtcGetLoweredName, (prog p, const char *e, const char **l), (p, e, l))
FORWARD(res, nvrtcGetCUBINSize, (prog p, size_t *n), (p, n))
FORWARD(res, nvrtcGetCUBIN, (prog p, char *c), (p, c))
FORWARD(res, nvrtcGetPTXSize, (prog p, size_t *n), (p, n))
FORWARD(res, nvrtcGetPTX, (prog p, char *c), (p, c))
FORWARD(res, nvrtcDestroyProgram, (prog *p), (p))

res nvrtcCompileProgram(prog p, int n, const char *const *opts) {
  static res (*fn)(prog, int, const char *const *);
  if (!fn) *(void **)(&fn) = dlsym(real(), "nvrtcCompileProgram");
  const char *file = getenv("KILN_WITNESS_FILE");
  if (file) {
    int fd = open(file, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) {
      char line[64];
      int len = snprintf(line, sizeof line, "compile %d\n", (int)getpid());
      if (write(fd, line, len) != len) abort();
      close(fd);
    }
  }
  return fn(p, n, opts);
}
