"""The Triton worker's process tree, from /proc: what a compile left behind, killed and reaped.

The zygote (see triton_box.py) is a child subreaper, so every process a compile started, through
any number of forks and `setsid`, is below it: a descendant while its parent lives, its child
once that parent is gone. These functions find them from /proc (not every kernel has the
`children` file, and it may skip a child while a sibling exits) and leave out the spare, which
has run no client code.

A pass over all of /proc reads one file per process on the host: 1-2 ms between a compile's
answer and the next request with 65 processes, ten times that on a host with a thousand. A
compile's processes are all younger than its child, though, and the kernel hands out process
ids in increasing order until they wrap at `pid_max`: so `Mark`, taken before the child is
forked, lets a pass read only the ids handed out since, and falls back to the whole of /proc
when the ids may have wrapped (the last id is below the mark's, or as many processes were
created since as `pid_max` allows) or too many were handed out to be worth it.
"""

import functools
import os
import signal


def _read(path, size=1024):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def _last_pid():
    """The id the kernel handed out last in this process's PID namespace (/proc/loadavg)."""
    return int(_read("/proc/loadavg").split()[-1])


def _forks():
    """Processes and threads created on the host since boot (/proc/stat's `processes`)."""
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"processes "):
                return int(line.split()[1])
    raise OSError("/proc/stat has no processes line")


@functools.cache
def _pid_max():
    """The host's pid_max, read once (a sysctl that changes only by hand)."""
    return int(_read("/proc/sys/kernel/pid_max"))


class Mark:
    """A moment before a compile's child is forked: every process created after it has an id
    above `last`, unless the ids wrapped, which `since` detects."""

    #: Ids handed out since the mark above which a pass over all of /proc is cheaper.
    RANGE_LIMIT = 2048

    def __init__(self):
        try:
            self.last, self.forks, self.pid_max = _last_pid(), _forks(), _pid_max()
        except (OSError, ValueError, IndexError):
            self.last = None

    def since(self):
        """The ids handed out since the mark, or None when that cannot be told exactly."""
        if self.last is None:
            return None
        try:
            last, forks = _last_pid(), _forks()
        except (OSError, ValueError, IndexError):
            return None
        # Ids wrap to 300 (the kernel's RESERVED_PIDS) past pid_max: fewer creations than the
        # ids between 300 and pid_max cannot have wrapped all the way round past the mark.
        if last < self.last or forks - self.forks >= self.pid_max - 300 or last - self.last > self.RANGE_LIMIT:
            return None
        return range(self.last + 1, last + 1)


def kill_descendants(keep=None, killed=(), mark=None):
    """Sends SIGKILL to every descendant of this process but `keep` (the spare) and its own,
    until a scan of /proc finds none it has not sent one (`killed`: those sent one already).
    The kernel refuses a fork to a process with SIGKILL pending, and such a process never
    returns to its own code, so after that scan no process of the compile can run again, though
    the kernel may still be tearing them down. A child's children are found while it dies (their
    parent is still the dying child) as well as after (the zygote is their subreaper). A compile
    that left nothing costs one scan. With `mark` (taken before the compile's child was forked),
    a scan reads only the processes created since, when that is exact."""
    me, killed = os.getpid(), set(killed)
    while True:
        fresh = [pid for pid in descendants(me, keep, mark) if pid not in killed]
        if not fresh:
            return killed
        for pid in fresh:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            killed.add(pid)


def reap_descendants(keep=None):
    """Kills every descendant but `keep` and waits until each is reaped, so that no process of
    the compile is left at all (a pipe it held reaches its end). Returns whether `keep` was found
    dead (and reaped)."""
    kill_descendants(keep)
    me, keep_died = os.getpid(), reap_exited(keep)
    while others := [pid for pid in children_of(me) if pid != keep]:
        for pid in others:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        keep_died = reap_exited(keep) or keep_died
    return keep_died


def reap_exited(keep=None):
    """Reaps every child that has exited, without waiting for the others. Returns whether `keep`
    was among them."""
    keep_died = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return keep_died
        if pid == 0:
            return keep_died
        keep_died = keep_died or pid == keep


def descendants(root, skip=None, mark=None):
    """Every process below `root` in the process tree (zombies included), leaving out `skip` and
    the processes below it; with `mark`, only those created after it (see Mark)."""
    since = mark.since() if mark is not None else None
    children = {}
    for pid, parent in _parents(since):
        children.setdefault(parent, []).append(pid)
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child != skip:
                found.append(child)
                stack.append(child)
    return found


def children_of(parent):
    """Processes whose parent is `parent`."""
    return [pid for pid, ppid in _parents() if ppid == parent]


def _parents(pids=None):
    """(pid, parent pid) of every process /proc shows, or of those of `pids` that exist. Runs
    between a compile's answer and the next request: plain descriptors, no buffered file
    objects, and only the head of each line (state, then parent) is split."""
    if pids is None:
        pids = (int(name) for name in os.listdir("/proc") if name.isdigit())
    for pid in pids:
        try:
            stat = _read(f"/proc/{pid}/stat")
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split(None, 2)
        if len(fields) > 1:
            yield pid, int(fields[1])
