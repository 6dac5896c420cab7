"""The local launcher's fork server: each sweep job forked from a process that has imported torch once."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import FAST, read_run, run_cli, run_dirs
from launcher.sweep import forkserver
TESTS = str(Path(__file__).resolve().parent)
pytestmark = pytest.mark.skipif(not forkserver.supported(), reason="the fork server runs on Linux only")


def _sweep(tmp_path: Path, fork_server: bool) -> list:
    tmp_path.mkdir()
    env = {"PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
    proc = run_cli(["-m", "hydra/launcher=local", f"hydra.launcher.fork_server={str(fork_server).lower()}",
                    "optimizer.lr=0.05,0.2", "trainer.max_epochs=2", "+hooks.probe._target_=proc_probe.ProcessProbe",
                    *FAST], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dirs(tmp_path / "outputs" / "multirun")


def test_forked_sweep_jobs_are_processes_of_their_own_and_train_bitwise_as_fresh_ones(tmp_path):
    forked, fresh = _sweep(tmp_path / "forked", True), _sweep(tmp_path / "fresh", False)
    roots = {"forked": str(tmp_path / "forked"), "fresh": str(tmp_path / "fresh")}
    assert [d.name for d in forked] == [d.name for d in fresh] == ["0", "1"]
    for a, b in zip(forked, fresh):
        probe_a, probe_b = (json.loads((d / "process.json").read_text()) for d in (a, b))
        assert "launcher.sweep.forkserver" in probe_a["parent"]  # forked by the sweep's server
        assert "run_controller" in probe_b["parent"]  # started by its submitit controller
        record = read_run(a)["submitit"]
        assert probe_a["stdin"] == "/dev/null"  # a fresh one has the sweep's
        for probe, root in ((probe_a, roots["forked"]), (probe_b, roots["fresh"])):
            assert probe["stdout"].endswith("_log.out") and probe["stderr"].endswith("_log.err")
            assert probe["cwd"] == root  # the sweep's working dir, where Hydra's jobs start
            assert probe["job_id"] == Path(probe["stdout"]).parent.name  # the controller's submitit variables
        assert probe_a["own_session"]
        assert f"probe stdout {probe_a['pid']}" in Path(record["stdout"]).read_text()
        assert f"probe stderr {probe_a['pid']}" in Path(record["stderr"]).read_text()
        weights_a = torch.load(a / "checkpoints" / "final.pt", map_location="cpu")
        weights_b = torch.load(b / "checkpoints" / "final.pt", map_location="cpu")
        flat_a, flat_b = _tensors(weights_a), _tensors(weights_b)
        assert flat_a.keys() == flat_b.keys() and flat_a
        for key in flat_a:
            assert torch.equal(flat_a[key], flat_b[key]), key
    assert read_run(forked[0])["pid"] != read_run(forked[1])["pid"]


def _tensors(obj, prefix="") -> dict:
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    if isinstance(obj, dict):
        return {k: v for key, value in obj.items() for k, v in _tensors(value, f"{prefix}.{key}").items()}
    return {}


def test_a_controller_started_before_submitit_made_its_job_folder_waits_for_it(tmp_path):
    """submitit's executor makes ``.submitit/<controller pid>/`` (moving the job's pickle there) only once the
    controller has started; ours starts fast enough to get there first, under load: it found no folder for its
    logs (FileNotFoundError) and the job was lost ("exited with status 1 without returning a result")."""
    folder = tmp_path / ".submitit" / "%j"
    folder.parent.mkdir()  # the executor's first folder: made before any job is submitted
    env = {**os.environ, "SUBMITIT_LOCAL_NTASKS": "1", "SUBMITIT_LOCAL_TIMEOUT_S": "120", "SUBMITIT_LOCAL_SIGNAL_DELAY_S": "1",
           "SUBMITIT_STDERR_TO_STDOUT": "", "SUBMITIT_LOCAL_WITH_SHELL": "", "SUBMITIT_EXECUTOR": "local",
           "SUBMITIT_LOCAL_COMMAND": f"{sys.executable} -c \"print('the task ran')\""}
    env.pop(forkserver.FD_ENV, None)
    controller = subprocess.Popen(forkserver.controller_command(sys.executable, str(folder)), env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1.0)  # the executor, slow this time
    job = tmp_path / ".submitit" / str(controller.pid)
    job.mkdir(parents=True)
    (job / f"{controller.pid}_submitted.pkl").write_bytes(b"")
    out, _ = controller.communicate(timeout=120)
    assert controller.returncode == 0, out[-3000:]
    assert "the task ran" in (job / f"{controller.pid}_0_log.out").read_text()


def test_a_fork_server_value_that_is_not_true_or_false_is_one_line(tmp_path):
    proc = run_cli(["-m", "hydra/launcher=local", "hydra.launcher.fork_server=maybe", "seed=0,1", *FAST], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("Config error: hydra.launcher.fork_server=maybe: use true") and "false" in proc.stderr
    assert not (tmp_path / "outputs").exists() or not run_dirs(tmp_path / "outputs")


def _servers_in(cwd: Path) -> list:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and "launcher.sweep.forkserver" in Path(f"/proc/{entry}/cmdline").read_text() \
                    and os.readlink(f"/proc/{entry}/cwd") == str(cwd):
                found.append(int(entry))
        except OSError:
            pass
    return found


def test_the_fork_server_ends_with_its_sweep(tmp_path):
    env = {"PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
    proc = run_cli(["-m", "hydra/launcher=local", "seed=0,1", "trainer.max_epochs=1", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                    "+hooks.probe._target_=proc_probe.ProcessProbe", *FAST], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job in ("0", "1"):  # forked by a server
        assert "launcher.sweep.forkserver" in json.loads((tmp_path / "sweep" / job / "process.json").read_text())["parent"]
    assert not (tmp_path / "sweep" / ".submitit" / "fork_server.log").exists()  # its imports said nothing
    deadline = time.monotonic() + 20
    while _servers_in(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _servers_in(tmp_path)


@pytest.fixture
def server(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.chdir(tmp_path)
    started = forkserver.ForkServer()
    yield started
    started.close()
    try:
        assert started.process.wait(timeout=30) == 0  # ends once closed and its connections are gone
    finally:
        started.process.kill()


def _task(connection, tmp_path: Path, *args: str, value: str = "x"):
    out, err = open(tmp_path / "out.txt", "w"), open(tmp_path / "err.txt", "w")
    with out, err:
        pid = connection.start("proc_probe", list(args), {**os.environ, "PROBE_VALUE": value}, out, err)
    return forkserver.ForkedTask(connection, pid)


def test_a_forked_task_gets_its_arguments_environment_and_exit_status(server, tmp_path):
    connection = forkserver._Connection(server.connect())
    task = _task(connection, tmp_path, "3", value="from the controller")
    assert task.wait(timeout=60) == 3
    printed = json.loads((tmp_path / "out.txt").read_text())
    assert printed == {"argv": ["3"], "cwd": str(tmp_path), "value": "from the controller", "own_session": True}
    killed = _task(connection, tmp_path, "0", "30")
    time.sleep(0.5)
    assert killed.poll() is None
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(timeout=30) == -signal.SIGKILL  # as subprocess.Popen reports it
    connection.sock.close()


def test_a_forked_task_ends_as_the_interpreter_would(server, tmp_path, monkeypatch):
    """A forked task skips tearing down the modules (0.2 s a job here), not what the interpreter's exit does
    before that: it waits for its threads, runs its atexit functions, flushes the files left open, and its
    exit status is the interpreter's for each way of ending."""
    connection = forkserver._Connection(server.connect())
    monkeypatch.setenv("PROBE_END", "leftovers")
    assert _task(connection, tmp_path, "0").wait(timeout=60) == 0
    assert (tmp_path / "unflushed.txt").read_text() == "written, never flushed nor closed"
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "thread.txt").read_text() == "finished"
    import gzip

    assert gzip.decompress((tmp_path / "left_open.gz").read_bytes()) == b"closed as the interpreter would"
    assert "printed by C" in (tmp_path / "out.txt").read_text()
    ends = {"raise": (1, "RuntimeError: probe failed"), "interrupt": (-signal.SIGINT, "KeyboardInterrupt"),
            "text": (1, "bye")}
    for end, (status, said) in ends.items():
        monkeypatch.setenv("PROBE_END", end)
        assert _task(connection, tmp_path, "0").wait(timeout=60) == status, end
        assert (tmp_path / "err.txt").read_text().rstrip().endswith(said), end
    connection.sock.close()


def test_a_command_the_server_cannot_fork_starts_as_a_fresh_process(server, tmp_path, monkeypatch):
    monkeypatch.setattr(forkserver, "_connection", None)
    monkeypatch.setenv(forkserver.FD_ENV, str(server.connect().detach()))
    with open(tmp_path / "out.txt", "w") as out:
        shell = forkserver.popen(["sh", "-c", "echo shell"], stdout=out, stderr=out)
        assert isinstance(shell, subprocess.Popen) and shell.wait(timeout=30) == 0
        forked = forkserver.popen([sys.executable, "-u", "-m", "proc_probe", "0"], stdout=out, stderr=out,
                                  encoding="utf-8", shell=False)
        assert isinstance(forked, forkserver.ForkedTask) and forked.wait(timeout=60) == 0
    forkserver._connection.sock.close()
    assert (tmp_path / "out.txt").read_text().startswith("shell\n")


def test_a_fork_server_that_is_gone_gives_no_connection_and_says_why():
    started = forkserver.ForkServer()
    started.process.kill()
    started.process.wait(timeout=30)
    assert started.connect() is None
    assert started.why_gone() == "it ended with exit status -9"


def test_a_task_whose_server_died_counts_as_ended_once_it_is_a_zombie():
    """Orphaned by a killed server, an ended task may stay unreaped (a container's PID 1 that does not reap):
    its controller must not wait for it for ever."""
    import socket

    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.close()  # the server is gone
    try:
        assert forkserver.ForkedTask(forkserver._Connection(mine), child.pid).poll() == 1
    finally:
        child.wait()
        mine.close()


def test_a_local_sweep_refused_after_its_fork_server_started_leaves_no_sweep_dir(tmp_path):
    proc = run_cli(["-m", "hydra/launcher=local", "optimizer=sgd,nosuch", f"hydra.sweep.dir={tmp_path / 'sweep'}", *FAST],
                   tmp_path)
    assert proc.returncode == 2 and "nosuch" in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "sweep").exists()
    assert not _servers_in(tmp_path)  # started as the command line was read; forked nothing, so ended with the sweep


def test_the_command_line_starts_the_fork_server_before_hydra_composes(monkeypatch):
    """``hydra/launcher=local`` on the command line starts the server as it is read, so its imports overlap
    Hydra's composing; anything else leaves it to the sweep's planning (or to nobody)."""
    from launcher.sweep import local
    for argv, starts in ((["-m", "hydra/launcher=local", "seed=0,1"], True),
                         (["-m", "hydra/launcher=local", "hydra.launcher.fork_server=false"], False),
                         (["-m", "seed=0,1"], False), (["-m", "hydra/launcher=slurm", "seed=0,1"], False)):
        monkeypatch.setattr(local, "_server", [])
        local.start_fork_server_early(argv)
        assert bool(local._server) == starts, argv
        if starts:
            server = local._server[0]
            local.stop_fork_server()  # a sweep that turns out not to fork: the server ends, its imports cut short
            assert server.process.wait(timeout=60) == 0


def test_what_the_fork_server_printed_is_kept_in_the_sweep_dir(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nprint('said at start-up')\nprint('warned at start-up', file=sys.stderr)\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    proc = run_cli(["-m", "hydra/launcher=local", "seed=0,1", "trainer.max_epochs=1", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                    *FAST], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (tmp_path / "sweep" / ".submitit" / "fork_server.log").read_text()  # stdout is a file there: buffered
    assert sorted(log.splitlines()) == ["said at start-up", "warned at start-up"]
    for job in ("0", "1"):  # nor did the server's buffered output reach a job's log
        assert "at start-up" not in "".join(p.read_text() for p in (tmp_path / "sweep" / job).glob("*.log"))


def test_every_module_the_fork_server_preloads_imports_in_a_fresh_interpreter():
    """The server skips a module that fails to import (each job then imports it again, and fails where the user
    looks): tensorboard.plugins.hparams.api, which needs TensorFlow on current tensorboard, cost every job its
    import and the server its time. Imported in the server's order, as it does."""
    script = ("import importlib, sys, traceback\n"
              "for name in sys.argv[1:]:\n"
              "    try:\n        importlib.import_module(name)\n"
              "    except Exception as err:\n        print(f'{name}: {type(err).__name__}: {err}')\n")
    proc = subprocess.run([sys.executable, "-c", script, *forkserver.PRELOAD], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr[-2000:]


def test_a_forked_task_is_stopped_when_its_server_is_killed(monkeypatch, tmp_path):
    """The server is the parent of the tasks it forks: killed, it left them running with no one to reap them. They get
    SIGTERM (a job's trainer checkpoints at its next step boundary and exits 75)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.chdir(tmp_path)
    started, task = forkserver.ForkServer(), None
    try:
        connection = forkserver._Connection(started.connect())
        task = _task(connection, tmp_path, "0", "600")
        assert forkserver._exists(task.pid)
        started.process.kill()
        started.process.wait(timeout=30)
        deadline = time.monotonic() + 60
        while forkserver._exists(task.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not forkserver._exists(task.pid)
        connection.sock.close()
    finally:
        started.process.kill()
        if task is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(task.pid, signal.SIGKILL)
