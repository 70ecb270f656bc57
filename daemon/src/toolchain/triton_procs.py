"""The Triton worker's process tree, from /proc: what a compile left behind, killed and reaped.

The zygote (see triton_box.py) is a child subreaper, so every process a compile started, through
any number of forks and `setsid`, is below it: a descendant while its parent lives, its child
once that parent is gone. These functions find them from one pass over /proc each (not every
kernel has the `children` file) and leave out the spare, which has run no client code.
"""

import os
import signal


def kill_descendants(keep=None, killed=()):
    """Sends SIGKILL to every descendant of this process but `keep` (the spare) and its own,
    until a scan of /proc finds none it has not sent one (`killed`: those sent one already).
    The kernel refuses a fork to a process with SIGKILL pending, and such a process never
    returns to its own code, so after that scan no process of the compile can run again, though
    the kernel may still be tearing them down. A child's children are found while it dies (their
    parent is still the dying child) as well as after (the zygote is their subreaper). A compile
    that left nothing costs one scan."""
    me, killed = os.getpid(), set(killed)
    while True:
        fresh = [pid for pid in descendants(me, keep) if pid not in killed]
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


def descendants(root, skip=None):
    """Every process below `root` in the process tree (zombies included), leaving out `skip` and
    the processes below it."""
    children = {}
    for pid, parent in _parents():
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


def _parents():
    """(pid, parent pid) of every process /proc shows. Runs between a compile's answer and the
    next request, once per process on the host: plain descriptors, no buffered file objects,
    and only the head of each line (state, then parent) is split."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            stat = os.read(fd, 1024)
        except OSError:
            continue
        finally:
            os.close(fd)
        fields = stat[stat.rfind(b")") + 2 :].split(None, 2)
        if len(fields) > 1:
            yield int(name), int(fields[1])
