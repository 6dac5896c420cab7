"""A local sweep's jobs forked from a process that has already imported torch.

A fresh job pays 2.5-3 CPU-seconds of imports (torch, ``torch._dynamo``) before its first step, so
``hydra/launcher=local`` starts one fork server per sweep that imports :data:`PRELOAD` once, and each job's
submitit controller asks it to fork the job's task: a process of its own as a fresh one would be (session,
stdio, environment, exit status, signals), but with the modules in :data:`PRELOAD` already imported. Linux only;
the server refuses to fork if its imports loaded the CUDA driver, and any failure falls back to a fresh process.

Three sides: the sweep (:class:`ForkServer`) starts the server and hands each job's controller a connection;
the server (:func:`serve`) forks a task per request, reaps them and reports each exit status; the controller
(:func:`popen`, a ``subprocess.Popen`` stand-in) gets a :class:`ForkedTask` or, failing that, a real ``Popen``.
Messages are JSON, one per ``SOCK_SEQPACKET`` packet, with file descriptors (``SCM_RIGHTS``). Torch-free."""
from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

FD_ENV = "LAUNCHER_FORK_SERVER_FD"  # in a controller's environment: its connection to the sweep's fork server
SWEEP_PID_ENV = "LAUNCHER_SWEEP_PID"  # in a controller's environment: the sweep that started it, which it dies with
RESEND_S = 2.0  # a controller whose sweep died asks its job to stop this often until it has (as the sweep would)
PRELOAD = (  # what a job of the default task imports, the slow ones first
    "numpy", "torch", "torch._dynamo", "torch.utils.tensorboard", "torch.utils.serialization",
    "hydra", "omegaconf", "submitit", "submitit.core.submission", "hydra_plugins.hydra_submitit_launcher.submitit_launcher",
    *(f"hydra._internal.core_plugins.{name}" for name in ("basic_launcher", "basic_sweeper", "file_config_source",
                                                          "importlib_resources_config_source", "structured_config_source")),
    "hydra._internal.logging_config", "launcher", "launcher.runs.build", "launcher.engine.trainer", "launcher.data", "launcher.models",
    "launcher.sweep.plugins", "launcher.sweep.local", "launcher.runs.rundir", "launcher.engine.signals", "launcher.sweep.summary", "launcher.sweep.callback",
    *(f"launcher.hooks.{name}" for name in ("checkpoint", "evaluator", "lr_scheduler", "timer", "writers", "progress", "optim")),
)
REFUSED_CUDA = 3  # the server's exit status when its imports loaded the CUDA driver
REFUSED_THREAD = 4  # ... when they started a Python thread (forking a process with threads can deadlock its child)
CONNECT_TIMEOUT_S = 120.0  # a controller waits this long for the server to fork its task, then starts it afresh
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM))
_PACKET = 1 << 20  # the largest message: a request carries the controller's whole environment
_Popen = subprocess.Popen  # the real one: :func:`popen` stands in for it while a controller starts its tasks


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(socket, "send_fds")


def _send(sock: socket.socket, message: Dict[str, Any], fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


def signalled_when_parent_dies(parent: int, signum: int = signal.SIGTERM) -> bool:
    """Have Linux send this process ``signum`` when ``parent`` ends (PR_SET_PDEATHSIG); whether ``parent`` is still its
    parent once that is set (False: it had ended, and no signal will come)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signum))  # PR_SET_PDEATHSIG
    return os.getppid() == parent


# -- the sweep's side --------------------------------------------------------------------------------

class ForkServer:
    """Started by the sweep (:class:`launcher.sweep.local.CappedLocalLauncher`); :meth:`connect` for each job. The server
    exits once the sweep has closed it and the last controller connected to it has gone."""

    def __init__(self, log: Optional[str] = None) -> None:
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        self.log = log  # where :meth:`save_log` keeps what the server printed (known once the sweep dir is)
        # not the sweep's stdout and stderr, which it would hold open while a job runs; copied by save_log
        self._output = tempfile.TemporaryFile()
        self._saved = 0  # bytes of it copied into the log
        self.connected = False  # whether a controller has been given a connection to it
        try:
            self.process = subprocess.Popen([sys.executable, "-m", "launcher.sweep.forkserver", str(theirs.fileno())],
                                            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=self._output,
                                            stderr=self._output, start_new_session=True)
        except BaseException:
            self._output.close()
            raise
        finally:
            theirs.close()
        self.pid = self.process.pid

    def save_log(self) -> Optional[str]:
        """Append what the server printed since the last call to :attr:`log`; the path, or None where it printed nothing."""
        try:
            printed = os.pread(self._output.fileno(), 1 << 24, self._saved)
            if printed and self.log:
                os.makedirs(os.path.dirname(self.log) or ".", exist_ok=True)
                with open(self.log, "ab") as out:
                    out.write(printed)
                self._saved += len(printed)
        except (OSError, ValueError):
            return None
        return self.log if self._saved else None

    def connect(self) -> Optional[socket.socket]:
        """A new connection to the server, for one controller to inherit; None once the server is gone."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self._lock:
                _send(self._control, {"connect": True}, [theirs.fileno()])
        except OSError:
            mine.close()
            return None
        finally:
            theirs.close()
        self.connected = True
        return mine

    def why_gone(self) -> str:
        """Why the server no longer forks jobs, for the sweep's log."""
        code = self.process.poll()
        if code == REFUSED_CUDA:
            reason = "importing torch loaded the CUDA driver, which a forked job could not use"
        elif code == REFUSED_THREAD:
            reason = "an import started a thread, which a forked job would not have"
        else:
            reason = f"it ended with exit status {code}" if code is not None else "it does not answer"
        saved = self.save_log()
        return f"{reason}; its log: {saved}" if saved else reason

    def close(self) -> None:
        """No more connections: the server ends when its running jobs have."""
        with self._lock:
            self._control.close()
        with contextlib.suppress(OSError):
            self.process.poll()  # reaped if it has ended already


# -- the server --------------------------------------------------------------------------------------

def cuda_driver_loaded() -> bool:
    """Whether this process has loaded the CUDA driver or opened a GPU device, which a forked child could not use."""
    try:
        with open("/proc/self/maps") as maps:
            if any(re.search(r"/libcuda\.so", line) for line in maps):
                return True
        devices = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return False
    return any(d.startswith(("/dev/nvidia", "/dev/kfd")) for d in devices)


def preload(modules: Sequence[str] = PRELOAD, stop: Any = lambda: False) -> bool:
    """Import what every job imports, unless ``stop()`` says to give up first (False then); a failing import is the jobs'."""
    import importlib

    for name in modules:
        if stop():
            return False
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            pass
    return True


class _Job:
    """A forked child's request: leaves the server's loop and becomes the task (:meth:`run`)."""

    def __init__(self, request: Dict[str, Any], fds: List[int], added_env: Optional[Dict[str, str]] = None,
                 server: int = 0) -> None:
        self.request, self.fds, self.added_env, self.server = request, fds, added_env or {}, server

    def run(self) -> None:
        """Set up as ``python -u -m <module> <args>`` started by the controller would be, then run it."""
        import runpy

        os.setsid()  # a session of its own: no terminal's or group's signal reaches it but through its controller
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # SIGTERM if the server ends before this task (killed): it stops at its next step boundary, with a checkpoint
        server_gone = not signalled_when_parent_dies(self.server)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        stdin = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((stdin, 0), (self.fds[0], 1), (self.fds[1], 2)):
            os.dup2(fd, target)
        for fd in {stdin, *self.fds} - {0, 1, 2}:
            os.close(fd)
        encoding = self.request.get("encoding") or "utf-8"
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=encoding)
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=encoding,
                                                       write_through=True)  # -u: unbuffered
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=encoding,
                                                       errors="backslashreplace", write_through=True)
        os.chdir(self.request["cwd"])
        os.environ.clear()
        os.environ.update({**self.added_env, **self.request["env"]})
        with contextlib.suppress(Exception):  # what ps -o comm, top and pgrep show; its command line is the server's
            import ctypes

            ctypes.CDLL(None).prctl(15, b"launcher-job", 0, 0, 0)  # PR_SET_NAME
        # What a fresh process would draw afresh (Python's random module reseeds itself after a fork)
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        if "multiprocessing" in sys.modules:
            sys.modules["multiprocessing"].current_process().authkey = os.urandom(32)
        module, args = self.request["module"], self.request["args"]
        if sys.path and self.request.get("path0") is not None:
            sys.path[0] = self.request["path0"]
        sys.argv = [module, *args]  # runpy puts the module's file first, as -m does
        if server_gone:
            raise SystemExit("launcher: the sweep's fork server ended before this job started")
        runpy.run_module(module, run_name="__main__", alter_sys=True)


def end_as_the_interpreter_would(run: Any) -> None:
    """Call ``run`` (a forked job), then end the process as the interpreter would (threads joined, ``atexit``, open
    files closed, streams flushed, its exit status) but without tearing down every module, which in a forked child
    copies the pages of every object the server imported (0.2 s of a short job)."""
    import atexit

    code, interrupted = 0, False
    try:
        run()
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            with contextlib.suppress(Exception):
                print(stop.code, file=sys.stderr)
            code = 1
    except BaseException as err:  # noqa: B036 -- reported as the interpreter reports it
        sys.excepthook(type(err), err, err.__traceback__)
        code, interrupted = 1, isinstance(err, KeyboardInterrupt)
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter's exit calls first
    atexit._run_exitfuncs()
    _close_open_files()
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 -- as the interpreter: a lost stdout is exit status 120
        code = code or 120
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    with contextlib.suppress(Exception):  # what C code printf()ed to a file or pipe, which exit() flushes
        import ctypes

        ctypes.CDLL(None).fflush(None)
    if interrupted:  # as the interpreter does: the parent sees death by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


# Where a file object keeps the file it wraps (TextIOWrapper, buffered files; gzip; bz2 and lzma)
_WRAPPED = ("buffer", "raw", "fileobj", "_fp")


def _close_open_files() -> None:
    """Close the file objects this process left open, each wrapper before the file it wraps; the standard streams stay."""
    keep = set()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        while stream is not None and id(stream) not in keep:
            keep.add(id(stream))
            stream = next((getattr(stream, n) for n in _WRAPPED if getattr(stream, n, None) is not None), None)
    # type(), not isinstance(): a weak proxy among the objects would answer for (or fail on) its referent
    remaining = [o for o in gc.get_objects() if issubclass(type(o), io.IOBase) and id(o) not in keep]
    while remaining:
        still_open = [o for o in remaining if not _closed(o)]
        inner = {id(getattr(o, n, None)) for o in still_open for n in _WRAPPED}
        outer = [o for o in still_open if id(o) not in inner] or still_open  # (a cycle: all at once)
        for obj in outer:
            with contextlib.suppress(Exception):
                obj.close()
        closing = {id(o) for o in outer}
        remaining = [o for o in still_open if id(o) not in closing]


def _closed(obj: Any) -> bool:
    try:
        return bool(obj.closed)
    except Exception:  # noqa: BLE001 -- a file object broken in some way: left as it is
        return True


def _hung_up(sock: socket.socket) -> bool:
    """Whether the other end of ``sock`` has closed it (messages it sent before may still wait there)."""
    import select

    poller = select.poll()
    poller.register(sock, select.POLLHUP)
    return any(event & select.POLLHUP for _, event in poller.poll(0))


def _fork() -> int:
    # OpenBLAS's thread (stopped around a fork by pthread_atfork) makes Python 3.12+ warn at every fork
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*multi-threaded, use of fork\(\) may lead to deadlocks", category=DeprecationWarning)
        return os.fork()


def serve(control: socket.socket, added_env: Optional[Dict[str, str]] = None) -> Optional[_Job]:
    """The server's loop, until the sweep has closed ``control`` and every connection has gone. Returns in a forked
    child only: its job. ``added_env``: the variables importing :data:`PRELOAD` set, which a job's imports would."""
    server = os.getpid()  # its forked tasks' parent, which they die with
    selector = selectors.DefaultSelector()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd is written
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    clients: List[socket.socket] = []
    running: Dict[int, Optional[socket.socket]] = {}  # pid -> the connection that asked for it (None: gone)
    ended: Dict[int, socket.socket] = {}  # told its controller how it ended; reaped once the controller has seen it
    open_control = True

    def close_all() -> None:
        selector.close()
        for sock in [control, *clients]:
            sock.close()
        os.close(wake_r)
        os.close(wake_w)

    def check_children() -> None:
        # an ended task stays a zombie until its controller has read how it ended (reap): its pid is nobody else's
        for pid in list(running):
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                running.pop(pid)
                continue
            if info is None:
                continue
            client = running.pop(pid)
            code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            try:
                if client is None:
                    raise OSError("its controller has ended")
                _send(client, {"exit": pid, "code": code})
                ended[pid] = client
            except OSError:
                os.waitpid(pid, 0)

    def reap(pid: int) -> None:
        if ended.pop(pid, None) is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    while open_control or clients or running or ended:
        for key, _ in selector.select():
            source = key.fileobj
            if source is control:
                message, fds, _, _ = socket.recv_fds(control, _PACKET, 4)
                if not message:  # the sweep closed it, or ended
                    selector.unregister(control)
                    open_control = False
                    continue
                for fd in fds:
                    client = socket.socket(fileno=fd)
                    clients.append(client)
                    selector.register(client, selectors.EVENT_READ)
            elif source == wake_r:
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_r, 512):
                        pass
            else:
                client = source
                try:
                    message, fds, _, _ = socket.recv_fds(client, _PACKET, 4)
                except OSError:
                    message, fds = b"", []
                if not message:  # its controller has ended
                    selector.unregister(client)
                    clients.remove(client)
                    client.close()
                    for pid in [p for p, c in ended.items() if c is client]:
                        reap(pid)
                    running.update({p: None for p, c in running.items() if c is client})
                    continue
                try:
                    request = json.loads(message)
                except ValueError:
                    request = {}
                if "reap" in request:
                    if ended.get(request["reap"]) is client:
                        reap(request["reap"])
                    continue
                if request.get("executable") != sys.executable or len(fds) != 2:
                    with contextlib.suppress(OSError):
                        _send(client, {"error": f"this server runs {sys.executable}, not {request.get('executable')}"})
                    for fd in fds:
                        os.close(fd)
                    continue
                if _hung_up(client):  # its controller gave up waiting (and starts the task itself) or ended
                    for fd in fds:
                        os.close(fd)
                    continue
                try:
                    pid = _fork()
                except OSError as err:
                    pid = -1
                    with contextlib.suppress(OSError):
                        _send(client, {"error": f"fork failed: {err}"})
                if pid == 0:
                    close_all()
                    return _Job(request, fds, added_env, server)
                for fd in fds:
                    os.close(fd)
                if pid > 0:
                    running[pid] = client
                    try:
                        _send(client, {"started": pid})
                    except OSError:  # nobody to watch it, and its controller may start it afresh: not twice
                        os.kill(pid, signal.SIGKILL)
        check_children()
    close_all()
    return None


def main(control_fd: int) -> None:
    # blocked, not ignored: the sweep stops jobs through their controllers, and a forked child keeps one sent early
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    control = socket.socket(fileno=control_fd)
    before = dict(os.environ)
    if not preload(stop=lambda: _hung_up(control)):  # the sweep has ended (a config error, say): give up
        return
    added_env = {k: v for k, v in os.environ.items() if before.get(k) != v}  # TORCHINDUCTOR_CACHE_DIR, say
    for stream in (sys.stdout, sys.stderr):  # what the imports printed: into the log now, and into no job's
        stream.flush()
    if cuda_driver_loaded():  # a forked child cannot use the parent's CUDA: every job starts fresh
        sys.exit(REFUSED_CUDA)
    if threading.active_count() > 1:
        sys.exit(REFUSED_THREAD)
    # out of the collector's sight, what was imported stays shared between the jobs' pages (0.75 s -> 0.15 s a job)
    gc.collect()
    gc.freeze()
    job = serve(control, added_env)
    if job is not None:
        end_as_the_interpreter_would(job.run)


# -- the controller's side ---------------------------------------------------------------------------

class _Connection:
    """A controller's connection to the server: requests go out, the tasks' exit statuses come back."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.codes, self.closed = sock, {}, False  # codes: pid -> exit code, as Popen's returncode

    def _take(self, message: bytes) -> Optional[Dict[str, Any]]:
        if not message:
            self.closed = True
            return None
        reply = json.loads(message)
        if "exit" in reply:
            self.codes[reply["exit"]] = reply["code"]
        return reply

    def start(self, module: str, args: Sequence[str], env: Dict[str, str], stdout: Any, stderr: Any) -> int:
        """The forked task's pid; OSError if the server cannot fork it."""
        request = {"executable": sys.executable, "module": module, "args": list(args), "env": env, "cwd": os.getcwd(),
                   "path0": os.getcwd(), "encoding": getattr(stdout, "encoding", None)}
        _send(self.sock, request, [stdout.fileno(), stderr.fileno()])
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))  # 0 would make it non-blocking
            try:
                message = self.sock.recv(_PACKET)
            except socket.timeout:
                self.sock.close()  # the server sees it hung up and does not fork the task later
                self.closed = True
                raise OSError(f"the fork server did not answer in {CONNECT_TIMEOUT_S:.0f} s") from None
            finally:
                if self.sock.fileno() >= 0:
                    self.sock.settimeout(None)
            reply = self._take(message)
            if reply is None:
                raise OSError("the fork server has ended")
            if "error" in reply:
                raise OSError(reply["error"])
            if "started" in reply:
                return int(reply["started"])

    def pump(self) -> None:
        """Take in the exit statuses that have arrived, without waiting."""
        try:
            while not self.closed:
                self._take(self.sock.recv(_PACKET, socket.MSG_DONTWAIT))
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.closed = True


class ForkedTask:
    """What submitit's controller needs of a ``subprocess.Popen``, for a task the server forked."""

    def __init__(self, connection: _Connection, pid: int) -> None:
        self._connection, self.pid, self.returncode = connection, pid, None
        self.args: List[str] = []

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self._connection.pump()
            self.returncode = self._connection.codes.pop(self.pid, None)  # a later task may get the same pid
            if self.returncode is not None:
                with contextlib.suppress(OSError):  # seen: the server may reap it now
                    _send(self._connection.sock, {"reap": self.pid})
            elif self._connection.closed and not _exists(self.pid):
                self.returncode = 1  # the server died first: how the task ended is not known
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.02)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        # not poll(): in a signal handler the connection may be in use; an ended task stays a zombie until polled
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _exists(pid: int) -> bool:
    """Whether ``pid`` runs: not if it has ended, also if nobody has reaped it (a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


_connection: Optional[_Connection] = None  # this controller's, made from FD_ENV on first use


def _module_command(command: Any) -> Optional[Tuple[str, List[str]]]:
    """``(module, args)`` of ``[sys.executable, (-u), -m, module, args...]``; None for any other command."""
    if not isinstance(command, (list, tuple)) or len(command) < 3 or command[0] != sys.executable:
        return None
    rest = list(command[1:])
    if rest[0] == "-u":
        rest = rest[1:]
    if len(rest) < 2 or rest[0] != "-m":
        return None
    return rest[1], rest[2:]


def popen(command: Any, *, env: Optional[Dict[str, str]] = None, stdout: Any = None, stderr: Any = None,
          **kwargs: Any) -> Any:
    """``subprocess.Popen(command, ...)``, forked by the sweep's server where it can be, else started fresh.

    Forked: ``python [-u] -m module args`` with this interpreter, stdout and stderr files, nothing else
    asked of ``Popen`` but ``shell=False`` and an ``encoding``.
    """
    global _connection
    module = _module_command(command)
    fd = os.environ.get(FD_ENV)
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != FD_ENV}
    extra = {k: v for k, v in kwargs.items() if not (k == "shell" and not v) and k != "encoding"}
    if module is not None and fd and not extra and hasattr(stdout, "fileno") and hasattr(stderr, "fileno"):
        try:
            if _connection is None:
                _connection = _Connection(socket.socket(fileno=int(fd)))
            pid = _connection.start(module[0], module[1], env, stdout, stderr)
            task = ForkedTask(_connection, pid)
            task.args = list(command)
            return task
        except (OSError, ValueError) as err:
            with contextlib.suppress(Exception):
                stderr.write(f"launcher: the sweep's fork server did not fork this job ({err}); started afresh\n")
                stderr.flush()
    return _Popen(command, env=env, stdout=stdout, stderr=stderr, **kwargs)


PICKLE_WAIT_S = 60.0  # how long a controller waits for its job's folder and pickle (see run_controller)


def run_controller(folder: str) -> None:
    """submitit's local job controller (``python -m submitit.local._local``), exiting with its job's status (128 + n for
    signal n; submitit's exits 0), its tasks forked by the sweep's server where it can (:func:`popen`). It stops its
    job, as the sweep would, when the sweep's process (:data:`SWEEP_PID_ENV`) dies."""
    from pathlib import Path

    from submitit.local.local import Controller

    class ReportingController(Controller):  # type: ignore[misc]
        exit_codes: Sequence[Optional[int]] = ()
        stopped_by: Optional[int] = None  # a stop signal that came while no task was running yet
        sweep: Optional[int] = None  # the sweep's pid: it started this controller, which stops its job when it dies
        resending = False

        def _forward_signal(self, signum: int, *args: Any) -> None:
            if not self.tasks and signum in _STOP_SIGNALS:
                self.stopped_by = signum
            super()._forward_signal(signum, *args)
            if signum == signal.SIGTERM and self.sweep is not None and os.getppid() != self.sweep and not self.resending:
                # the sweep died (killed): no one else will ask again. A job still starting up passes SIGTERM by
                # (submitit's handler) until its trainer holds it: asked every RESEND_S until it ends, as the sweep does
                self.resending = True
                signal.signal(signal.SIGALRM, lambda *_: Controller._forward_signal(self, signal.SIGTERM))
                signal.setitimer(signal.ITIMER_REAL, RESEND_S, RESEND_S)

        def start_tasks(self) -> None:
            # submitit's executor makes the job's folder (.submitit/<this pid>), moving the job's pickle there, once
            # this process has started: one started as fast as ours can get there first, and found no folder for
            # its logs (FileNotFoundError, the job lost). Wait for the pickle (the task would wait for it too,
            # in 1 s sleeps), at most PICKLE_WAIT_S
            from submitit.core.utils import JobPaths

            pickle = JobPaths(self.folder, self.pid).submitted_pickle
            deadline = time.monotonic() + PICKLE_WAIT_S
            while not pickle.exists() and time.monotonic() < deadline and self.stopped_by is None:
                time.sleep(0.005)
            super().start_tasks()
            if self.stopped_by is not None:  # came while the task was being started (waiting for the server)
                self._forward_signal(self.stopped_by)

        def wait(self, freq: int = 100) -> Sequence[Optional[int]]:
            # submitit's looks 24 times a second: the next job of a sweep started up to 42 ms late
            self.exit_codes = super().wait(freq)
            return self.exit_codes

    sweep = os.environ.pop(SWEEP_PID_ENV, "")  # not passed on to the job
    controller = ReportingController(Path(folder))  # its SIGTERM handler: passed on to the job
    if sweep.isdigit():  # a local sweep's job does not outlive the sweep: it is stopped as the sweep stops it
        controller.sweep = int(sweep)
        if not signalled_when_parent_dies(controller.sweep):
            controller._forward_signal(signal.SIGTERM)
    subprocess.Popen = popen  # type: ignore[misc]  # this process is the controller: its tasks start through popen
    controller.run()
    code = next((c for c in controller.exit_codes if c), 0)
    sys.exit(128 - code if code < 0 else code)


# Loads this file alone, not the launcher package (whose Hydra and OmegaConf imports a controller does not
# need: 0.25 s -> 0.11 s to start one here), and runs the controller.
_BOOT = ("import importlib.util, sys\n"
         "spec = importlib.util.spec_from_file_location('launcher_forkserver', sys.argv[1])\n"
         "module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)\n"
         "spec.loader.exec_module(module)\n"
         "module.run_controller(sys.argv[2])\n")


def controller_command(python: str, folder: str) -> List[str]:
    """The command that runs :func:`run_controller` for the job in ``folder``."""
    return [python, "-c", _BOOT, os.path.abspath(__file__), folder]


if __name__ == "__main__":
    main(int(sys.argv[1]))
