"""Checks daemon/src/runtime/toolchain/triton_procs.py's scans in this process, standing in for the
Triton worker's zygote: a child subreaper that forks a "compile" which leaves an escapee behind
(double fork and setsid, the compile itself exited). Run by tests/tests/triton_box.rs; prints one
JSON line.

- The scan from a Mark taken before the fork reads only the ids handed out since, and kills
  the escapee.
- A Mark whose ids may have wrapped (the last id now below the mark's) falls back to a pass over
  all of /proc, and kills the escapee just as well.
"""

import ctypes
import json
import os
import signal
import sys
import time

sys.path.insert(0, sys.argv[1])
import triton_procs  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def compile_leaving_an_escapee():
    """Forks a compile that double-forks an escapee (sleeping, in a session of its own), reports
    its pid, and exits; returns the escapee's pid once the compile is gone."""
    r, w = os.pipe()
    compile_pid = os.fork()
    if compile_pid == 0:
        if os.fork() == 0:
            os.setsid()
            escapee = os.fork()
            if escapee == 0:
                time.sleep(60)
                os._exit(0)
            os.write(w, str(escapee).encode())
            os._exit(0)
        os._exit(0)
    os.close(w)
    escapee = int(os.read(r, 32))
    os.close(r)
    os.waitpid(compile_pid, 0)
    return escapee


def killed(pid):
    """Gone, a zombie, or with SIGKILL pending (SigPnd/ShdPnd bit 9)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
    except FileNotFoundError:
        return True
    pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
    return status["State"].strip().startswith(("Z", "X")) or bool(pending & (1 << (signal.SIGKILL - 1)))


report = {}
mark = triton_procs.Mark()
escapee = compile_leaving_an_escapee()
since = mark.since()
report["range_scan"] = since is not None and escapee in since
report["range_len"] = len(since) if since is not None else None
triton_procs.kill_descendants(None, (), mark)
report["range_killed"] = killed(escapee)

wrapped = triton_procs.Mark()
escapee = compile_leaving_an_escapee()
wrapped.last = escapee + 1  # as if the ids had wrapped since the mark
report["wrap_falls_back"] = wrapped.since() is None
triton_procs.kill_descendants(None, (), wrapped)
report["wrap_killed"] = killed(escapee)
triton_procs.reap_descendants()
print(json.dumps(report))
