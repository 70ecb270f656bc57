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
import struct
import sys
import tempfile
import time
import traceback

from triton_procs import Mark, children_of, kill_descendants, reap_descendants, reap_exited

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
    """The zygote's side: where children live, what they may read, and the clean-up after each.

    A child is forked and boxed ahead of its request (a spare), while the zygote waits for
    kilnd: it closes the protocol pipes, enters Landlock with a directory of its own and then
    blocks reading its one request from a pipe of its own. Client code runs only after that. A
    spare is forked only once everything of the previous compile is dead and its directory gone,
    so it sees nothing of it; it serves exactly one request.

    The zygote answers kilnd as soon as the child has sent its whole answer, then (in `finish`,
    before it reads the next request) kills the child and every process it left, deletes its
    directory and forks the next spare. It does not wait for the kernel to tear the killed
    processes down (6-10 ms for a child with Triton's and LLVM's pages mapped): a process with
    SIGKILL pending never runs its own code again and cannot fork, so once every descendant has
    been sent one, the next compile may start; the zombies are reaped at the next `finish`."""

    def __init__(self, root, read_paths, work, protocol_fds):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.abi = landlock_abi()
        self.work = work
        self.protocol_fds = list(protocol_fds)
        self.spare = None
        self.running = None
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

    def prepare(self):
        """Forks the next spare, unless there is one. Called only when no process of an earlier
        compile is left (after `finish`)."""
        if self.spare is not None:
            return
        directory = tempfile.mkdtemp(prefix="compile-", dir=self.root)
        request_r, request_w = os.pipe()
        answer_r, answer_w = os.pipe()
        zygote = os.getpid()
        mark = Mark()
        try:
            pid = os.fork()
        except BaseException:
            for fd in (request_r, request_w, answer_r, answer_w):
                os.close(fd)
            shutil.rmtree(directory, ignore_errors=True)
            raise
        if pid == 0:
            os.close(request_w)
            os.close(answer_r)
            self._child(zygote, directory, request_r, answer_w)
        os.close(request_r)
        os.close(answer_w)
        self.spare = _Spare(pid, directory, request_w, answer_r, mark)

    def run(self, request, cpu_seconds, wall_seconds):
        """Hands `request` to the spare and returns its answer, as soon as it is complete. The
        child may still be running: `finish` must follow before the next request is read."""
        if self.spare is not None and not self.spare.usable():
            self._discard_spare()
        self.prepare()
        spare, self.spare = self.spare, None
        self.running = spare
        request = dict(request, cpu_seconds=max(1, int(cpu_seconds)))
        deadline = time.monotonic() + wall_seconds
        try:
            _write_all(spare.request_w, frame(json.dumps(request, default=str).encode()))
        except BrokenPipeError:
            pass  # the spare is gone; its answer (or its exit) says why
        finally:
            os.close(spare.request_w)
            spare.request_w = None
        # The next spare is forked and boxed while this compile runs (on another core, if any).
        # It sees nothing of this compile: it is the zygote's copy, in a directory of its own.
        # Forked SPARE_DELAY into the compile (or at its answer, if sooner): measured on 2 cores
        # (kiln-bench (h), timestamps in the zygote and the children), a child took 1.6-2.0 ms
        # from the request's write to having read it when the spare was forked at once or as
        # soon as the child had read its request, and 0.27 ms with the delay. The spare, boxed
        # about 20 ms after its fork, is still ready long before a Triton compile ends.
        select.select([spare.answer_r], [], [], SPARE_DELAY)
        try:
            self.prepare()
        except BaseException:
            traceback.print_exc()  # finish() tries again
        return self._collect(spare, deadline, wall_seconds)

    def finish(self):
        """Ends the last compile: kills its child and every process that child started, reaps
        them and deletes its directory. Only the spare, which has run no client code, is left."""
        done, self.running = self.running, None
        killed = set()
        if done is not None:
            if not done.dead:
                try:
                    os.kill(done.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                killed.add(done.pid)
            os.close(done.answer_r)
        keep = self.spare.pid if self.spare is not None else None
        kill_descendants(keep, killed, done.mark if done is not None else None)
        if reap_exited(keep) and self.spare is not None:
            self.spare.dead = True
        if done is not None:
            shutil.rmtree(done.directory, ignore_errors=True)
        try:
            self.prepare()
        except BaseException:
            # run() tries again, and a failure there is that request's answer.
            traceback.print_exc()

    def wait_for_input(self, fd):
        """Returns once `fd` has input, reaping meanwhile the processes the last `finish` killed
        as the kernel finishes tearing them down (a check every 5 ms), so that an idle worker
        keeps no zombie. Costs one poll when input is there already."""
        keep = self.spare.pid if self.spare is not None else None
        while not select.select([fd], [], [], 0)[0]:
            if reap_exited(keep) and self.spare is not None:
                self.spare.dead = True
            if not [pid for pid in children_of(os.getpid()) if pid != keep]:
                return
            select.select([fd], [], [], 0.005)

    def _discard_spare(self):
        spare, self.spare = self.spare, None
        try:
            os.kill(spare.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for fd in (spare.request_w, spare.answer_r):
            os.close(fd)
        reap_descendants(None)
        shutil.rmtree(spare.directory, ignore_errors=True)

    def _child(self, zygote, directory, request_r, answer_w):
        """Never returns: the child ends with os._exit whatever the module does."""
        code = 0
        try:
            devnull = os.open("/dev/null", os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            for fd in self.protocol_fds:
                if fd != 0:
                    os.close(fd)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != zygote:
                os._exit(4)  # the zygote died between fork and prctl
            _set_name(b"kiln-spare")
            prefault()
            self._enter(directory)
            # Boxed: only now may the request, and with it client code, come in.
            request = json.loads(read_frame(request_r))
            os.close(request_r)
            _set_name(b"kiln-compile")
            limit_cpu_from_now(request["cpu_seconds"])
            response = self.work(request)
        except BaseException:
            response = {"ok": False, "log": traceback.format_exc(), "compile_micros": 0}
        try:
            _write_all(answer_w, encode_answer(response))
        except BaseException:
            code = 3
        os._exit(code)

    def _enter(self, directory):
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

    def _collect(self, spare, deadline, wall_seconds):
        """Reads the child's answer until it is complete, the child exits or its time is up. A
        complete answer is returned at once; otherwise the child and its processes are killed
        (they have nothing left to do) and its exit explained."""
        pidfd = os.pidfd_open(spare.pid)
        read_end = spare.answer_r
        os.set_blocking(read_end, False)
        buffer, timed_out, ended = bytearray(), False, False
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                ready, _, _ = select.select([read_end, pidfd], [], [], left)
                ended = not _drain(read_end, buffer)
                if _complete(buffer) or ended or pidfd in ready:
                    break
        finally:
            os.close(pidfd)
        if _complete(buffer) and not timed_out:
            return decode_answer(bytes(buffer))
        try:
            os.kill(spare.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(spare.pid, 0)
        spare.dead = True
        # Every other writer of the pipe is a descendant: kill them so the pipe reaches its end.
        if self.spare is not None and reap_descendants(self.spare.pid):
            self.spare.dead = True
        elif self.spare is None:
            reap_descendants()
        _drain(read_end, buffer)
        if timed_out:
            return failure(f"compile exceeded its {wall_seconds:.0f} s timeout; its processes were killed")
        if _complete(buffer):
            return decode_answer(bytes(buffer))
        return failure(f"the compile process sent no answer: {exit_reason(status)}")


class _Spare:
    def __init__(self, pid, directory, request_w, answer_r, mark):
        self.pid, self.directory, self.request_w, self.answer_r = pid, directory, request_w, answer_r
        self.mark = mark  # taken before the fork: every process of its compile is younger
        self.dead = False
        self.inode = os.stat(directory).st_ino

    def usable(self):
        """Alive, and its directory as the zygote made it: without Landlock, the compile that
        ran beside it could have written there (every process of that compile is dead now)."""
        if self.dead:
            return False
        try:
            if os.waitpid(self.pid, os.WNOHANG)[0] != 0:
                self.dead = True
                return False
            return os.stat(self.directory).st_ino == self.inode and not os.listdir(self.directory)
        except OSError:
            return False


MADV_POPULATE_READ = 22
MADV_POPULATE_WRITE = 23
PR_SET_NAME = 15


def _set_name(name):
    _libc.prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def prefault():
    """Maps, before the request comes, the pages a compile would otherwise fault in one by one:
    fork copies no page-table entries for the libraries' code (Triton's and LLVM's), and every
    page of the heap that the compile writes is copied on its first write. MADV_POPULATE_* does
    both in the kernel, in one call per mapping (Linux 5.14; elsewhere it fails and costs
    nothing). Whole mappings are populated: the libraries' code pages the zygote never ran are
    read into the page cache by the first spare (once per host), and every anonymous page of
    the zygote is copied (some tens of MB per spare)."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.readlines()
    except OSError:
        return
    madvise = _libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for line in lines:
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        perms, path = fields[1], fields[5] if len(fields) > 5 else ""
        if "x" in perms and path.startswith("/"):
            madvise(start, end - start, MADV_POPULATE_READ)
        elif perms == "rw-p" and path in ("", "[heap]"):
            madvise(start, end - start, MADV_POPULATE_WRITE)


def limit_cpu_from_now(seconds):
    """RLIMIT_CPU counts from the process's start: the spare's set-up is added to the budget."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime) + 1 + max(1, int(seconds))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))


#: How far into a compile the next spare is forked (see Box.run).
SPARE_DELAY = 0.004


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def encode_answer(response):
    """A compile's answer in the binary form kilnd reads: a u32 length, then a u32 length and
    the JSON of every field but the cubin, then the cubin's bytes (no base64)."""
    cubin = response.pop("cubin", b"")
    if not isinstance(cubin, (bytes, bytearray)):
        cubin = b""
    header = json.dumps(response, default=str).encode()
    return frame(struct.pack("<I", len(header)) + header + bytes(cubin))


def decode_answer(data):
    """The child's answer, cleaned (see clean_response), as a dict with the cubin as bytes."""
    try:
        (total,) = struct.unpack_from("<I", data)
        (header_len,) = struct.unpack_from("<I", data, 4)
        if header_len > total - 4:
            return failure("the compile process sent a malformed answer")
        response = clean_response(json.loads(data[8 : 8 + header_len]))
        response["cubin"] = data[8 + header_len : 4 + total]
        return response
    except (struct.error, ValueError, UnicodeDecodeError):
        return failure("the compile process sent a malformed answer")


def _complete(buffer):
    return len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack_from("<I", buffer)[0]


def read_frame(fd):
    header = _read_exactly(fd, 4)
    (length,) = struct.unpack("<I", header)
    return _read_exactly(fd, length)


def _read_exactly(fd, n):
    chunks, left = [], n
    while left:
        data = os.read(fd, min(left, 1 << 20))
        if not data:
            raise EOFError("the zygote closed the request pipe")
        chunks.append(data)
        left -= len(data)
    return b"".join(chunks)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _drain(fd, buffer):
    """Reads what the pipe holds into `buffer`; False once it has reached its end."""
    while True:
        try:
            data = os.read(fd, 1 << 20)
        except BlockingIOError:
            return True
        if not data:
            return False
        buffer += data


def failure(log):
    return {"ok": False, "log": log, "compile_micros": 0}


def clean_response(response):
    """The child's answer with only the fields kilnd and the worker read, each of its type: a
    malformed answer is that compile's failure, never a bad frame that would cost the zygote."""
    if not isinstance(response, dict):
        return failure("the compile process sent a malformed answer")
    text = lambda k: response.get(k) if isinstance(response.get(k), str) else ""
    micros = response.get("compile_micros")
    cleaned = {
        "ok": response.get("ok") is True,
        "ptx": text("ptx"),
        "metadata_json": text("metadata_json"),
        "log": text("log"),
        "compile_micros": micros if isinstance(micros, int) and 0 <= micros < 1 << 63 else 0,
    }
    if isinstance(response.get("source_blocks"), list):
        cleaned["source_blocks"] = response["source_blocks"]  # for the worker, which checks them
    return cleaned


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
