"""The box one Triton compile runs in.

A kernel's module is client code that runs at import, so no compile may leave anything behind
for the next one. The worker that kilnd starts is a zygote: it imports Triton once and never
runs client code itself. For each request it forks a child that enters the box (below),
compiles, writes its answer to a pipe and exits; the zygote then kills every process the child
left behind and deletes the child's directory. A patched `triton`, a crash or a stray process
therefore never reaches a later compile.

The box, inside the child, before the module runs:
- the zygote's protocol pipes are closed, so the child cannot write a frame kilnd would take
  for the answer to a later request;
- Landlock, where the kernel has it: writes only in the child's own directory, reads only of the
  Python installation, Triton and its ptxas and the system libraries; no TCP (ABI 4), and no
  signals or abstract Unix sockets outside the child (ABI 6). A Landlock domain also keeps the
  child from tracing any process outside it, the zygote and other compiles included;
- RLIMIT_CPU for this compile, and death with the zygote (PR_SET_PDEATHSIG).

kilnd itself puts the zygote in a new network namespace (when root) and under a seccomp filter
that refuses `socket` (always), before it executes Python; both pass to every child.
"""

import ctypes
import json
import os
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback

_libc = ctypes.CDLL(None, use_errno=True)

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

# Landlock's syscalls have these numbers on every architecture.
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_TRUNCATE = 1 << 14
FS_IOCTL_DEV = 1 << 15
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

# System paths a compile reads: the dynamic loader's cache and libraries (ptxas is a dynamic
# executable), the interpreter's standard library, and the devices Python and ptxas open.
SYSTEM_READ = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/etc/ld.so.cache"]
DEVICES = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _prctl(option, value):
    if _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def landlock_abi():
    """Landlock's ABI version, or 0 where the kernel lacks it or has it turned off."""
    abi = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION)
    return max(abi, 0)


def _handled_fs(abi):
    """Every filesystem right the kernel knows: a right left unhandled is a right allowed."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= 1 << 13  # REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def status():
    """What the box applies here, for the worker's hello (kilnd logs what is missing)."""
    seccomp = ""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Seccomp:"):
                    seccomp = line.split()[1]
    except OSError:
        pass
    try:
        netns = os.readlink("/proc/self/ns/net")
    except OSError:
        netns = ""
    return {"landlock_abi": landlock_abi(), "seccomp_filter": seccomp == "2", "netns": netns}


class Box:
    """The zygote's side: where children live, what they may read, and the clean-up after each."""

    def __init__(self, root, read_paths):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.abi = landlock_abi()
        seen, self.read_paths = set(), []
        for path in list(SYSTEM_READ) + list(read_paths):
            real = os.path.realpath(path)
            if real not in seen and os.path.exists(real):
                seen.add(real)
                self.read_paths.append(real)
        # Orphans of a child come to the zygote, not to init, so none can outlive its compile.
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        # No process of the same user may trace the zygote or open its /proc/PID/mem or fds
        # (where Landlock is missing, that would be every compile child): its protocol pipe
        # would let one compile answer for the next. Children inherit it until they exec.
        _prctl(PR_SET_DUMPABLE, 0)

    def run(self, work, request, protocol_fds, cpu_seconds, wall_seconds):
        """Runs work(request) in a fresh child inside the box; returns its response dict."""
        directory = tempfile.mkdtemp(prefix="compile-", dir=self.root)
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
            if pid == 0:
                self._child(work, request, protocol_fds, cpu_seconds, directory, read_end, write_end)
            os.close(write_end)
            return self._collect(pid, read_end, wall_seconds)
        finally:
            os.close(read_end)
            reap_descendants()
            shutil.rmtree(directory, ignore_errors=True)

    def _child(self, work, request, protocol_fds, cpu_seconds, directory, read_end, write_end):
        """Never returns: the child ends with os._exit whatever the module does."""
        code = 0
        try:
            os.close(read_end)
            devnull = os.open("/dev/null", os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            for fd in protocol_fds:
                if fd != 0:
                    os.close(fd)
            self._enter(directory, cpu_seconds)
            response = work(request)
        except BaseException:
            response = {"ok": False, "log": traceback.format_exc(), "compile_micros": 0}
        try:
            data = json.dumps(response, default=str).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view) :]
        except BaseException:
            code = 3
        os._exit(code)

    def _enter(self, directory, cpu_seconds):
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:
            os._exit(4)  # the zygote died between fork and prctl
        resource.setrlimit(resource.RLIMIT_CPU, (max(1, int(cpu_seconds)), max(1, int(cpu_seconds)) + 1))
        os.chdir(directory)
        for name in ("HOME", "TMPDIR", "TRITON_HOME"):
            os.environ[name] = directory
        os.environ["TRITON_CACHE_DIR"] = os.path.join(directory, "triton-cache")
        tempfile.tempdir = directory
        if self.abi > 0:
            self._landlock(directory)

    def _landlock(self, directory):
        abi = self.abi
        handled_fs = _handled_fs(abi)
        attr = _RulesetAttr(fs=handled_fs)
        size = 8
        if abi >= 4:
            attr.net = NET_BIND_TCP | NET_CONNECT_TCP
            size = 16
        if abi >= 6:
            attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            size = 24
        ruleset = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
        if ruleset < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
        try:
            for path in self.read_paths:
                self._allow(ruleset, path, READ, handled_fs)
            for path in DEVICES:
                self._allow(ruleset, path, FS_READ_FILE | FS_WRITE_FILE, handled_fs)
            self._allow(ruleset, directory, handled_fs, handled_fs)
            _prctl(PR_SET_NO_NEW_PRIVS, 1)
            if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
                raise OSError(ctypes.get_errno(), "landlock_restrict_self")
        finally:
            os.close(ruleset)

    @staticmethod
    def _allow(ruleset, path, rights, handled_fs):
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(path):
                rights &= FILE_RIGHTS
            beneath = _PathBeneath(allowed=rights & handled_fs, parent_fd=fd)
            if _libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(beneath), 0) != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
        finally:
            os.close(fd)

    @staticmethod
    def _collect(pid, read_end, wall_seconds):
        """Reads the child's answer until it exits or its time is up; then the child is killed
        (it has nothing left to do) and its exit explained if it sent no answer."""
        pidfd = os.pidfd_open(pid)
        os.set_blocking(read_end, False)
        chunks, deadline, timed_out = [], time.monotonic() + wall_seconds, False
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                ready, _, _ = select.select([read_end, pidfd], [], [], left)
                if read_end in ready and not _drain(read_end, chunks):
                    break
                if pidfd in ready:
                    break
        finally:
            os.close(pidfd)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
        # Every other writer of the pipe is a descendant: kill them so the pipe reaches its end.
        reap_descendants()
        _drain(read_end, chunks)
        if timed_out:
            return failure(f"compile exceeded its {wall_seconds:.0f} s timeout; its processes were killed")
        try:
            response = json.loads(b"".join(chunks))
        except ValueError:
            return failure(f"the compile process sent no answer: {exit_reason(status)}")
        return clean_response(response)


def _drain(fd, chunks):
    """Reads what the pipe holds; False once it has reached its end."""
    while True:
        try:
            data = os.read(fd, 1 << 20)
        except BlockingIOError:
            return True
        if not data:
            return False
        chunks.append(data)


def reap_descendants():
    """Kills and reaps every child of this process. The zygote is a child subreaper, so every
    process a compile started (through any number of forks and setsid) is its child once its
    parent is gone; with no child left, no descendant is left."""
    me = os.getpid()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            for child in children_of(me):
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.001)


def children_of(parent):
    """Processes whose parent is `parent`, from /proc (not every kernel has the children file)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == parent:
            found.append(int(name))
    return found


def failure(log):
    return {"ok": False, "log": log, "compile_micros": 0}


def clean_response(response):
    """The child's answer with only the fields kilnd reads, each of its type: a malformed answer
    is that compile's failure, never a bad frame that would cost the zygote."""
    if not isinstance(response, dict):
        return failure("the compile process sent a malformed answer")
    text = lambda k: response.get(k) if isinstance(response.get(k), str) else ""
    micros = response.get("compile_micros")
    return {
        "ok": response.get("ok") is True,
        "cubin": text("cubin"),
        "ptx": text("ptx"),
        "metadata_json": text("metadata_json"),
        "log": text("log"),
        "compile_micros": micros if isinstance(micros, int) and 0 <= micros < 1 << 63 else 0,
    }


def exit_reason(status):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        known = {
            signal.SIGXCPU: "it ran past its CPU-time limit (SIGXCPU)",
            signal.SIGKILL: "it was killed (SIGKILL; CPU-time or memory limit?)",
            signal.SIGSEGV: "it crashed (SIGSEGV)",
            signal.SIGABRT: "it aborted (SIGABRT; out of memory?)",
        }
        return known.get(sig, f"it was ended by signal {sig}")
    return f"it exited with status {os.waitstatus_to_exitcode(status)}"


if __name__ == "__main__":
    sys.exit("triton_box is imported by triton_worker.py")
