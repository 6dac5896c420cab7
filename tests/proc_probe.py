"""Test helpers for the fork server: a hook that records what its job's process looks like, and a tiny
module for the server to run as a task."""
import json
import os
import sys
import time
from pathlib import Path

from launcher.hooks import HookBase


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


class ProcessProbe(HookBase):
    """Writes ``process.json`` in the run dir before training: its parent's command line, session, standard
    streams, working directory and the submitit variables; prints a line to stdout and one to stderr."""

    def before_train(self):
        record = {"parent": _cmdline(os.getppid()), "own_session": os.getsid(0) == os.getpid(),
                  "stdin": os.readlink("/proc/self/fd/0"), "stdout": os.readlink("/proc/self/fd/1"),
                  "stderr": os.readlink("/proc/self/fd/2"), "cwd": os.getcwd(),
                  "job_id": os.environ.get("SUBMITIT_LOCAL_JOB_ID"), "pid": os.getpid()}
        (Path(self.trainer.work_dir) / "process.json").write_text(json.dumps(record))
        print(f"probe stdout {os.getpid()}")
        print(f"probe stderr {os.getpid()}", file=sys.stderr)


def task() -> None:
    """``python -m proc_probe <exit code> [seconds]``: prints its arguments, working dir and PROBE_VALUE, sleeps,
    exits with the code. ``PROBE_END`` picks another ending: ``leftovers`` (exits leaving a file unflushed, a
    gzip file open, C's stdout unflushed, an atexit function and a thread that is not a daemon, each writing a
    file in the working dir), ``raise``
    (an uncaught RuntimeError), ``interrupt`` (an uncaught KeyboardInterrupt), ``text`` (``sys.exit("bye")``)."""
    code, seconds = int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "value": os.environ.get("PROBE_VALUE"),
                      "own_session": os.getsid(0) == os.getpid()}))
    sys.stdout.flush()
    time.sleep(seconds)
    end = os.environ.get("PROBE_END")
    if end == "leftovers":
        import atexit
        import threading

        unflushed = open("unflushed.txt", "w")  # noqa: SIM115 -- left open on purpose
        unflushed.write("written, never flushed nor closed")
        atexit.register(lambda: Path("atexit.txt").write_text("ran"))
        threading.Thread(target=lambda: (time.sleep(0.5), Path("thread.txt").write_text("finished"))).start()
        import ctypes
        import gzip

        compressed = gzip.open("left_open.gz", "wb")  # its trailer is written as it is closed
        compressed.write(b"closed as the interpreter would")
        ctypes.CDLL(None).printf(b"printed by C\n")  # C's stdout buffer: a file here, flushed by exit()
        globals()["left_open"] = (unflushed, compressed)
    elif end == "raise":
        raise RuntimeError("probe failed")
    elif end == "interrupt":
        raise KeyboardInterrupt
    elif end == "text":
        sys.exit("bye")
    sys.exit(code)


if __name__ == "__main__":
    task()
