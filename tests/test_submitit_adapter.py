"""What launcher.sweep.submitit_adapter (and the fork server's controller) rely on of submitit and
hydra-submitit-launcher: each test fails when a release changes it. Fast, in-process."""
from __future__ import annotations

import inspect
import types

import pytest
import submitit
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher, LocalLauncher, SlurmLauncher
from omegaconf import OmegaConf
from submitit.core.core import Job
from submitit.local import local as submitit_local
from submitit.slurm.slurm import SlurmExecutor, SlurmInfoWatcher, SlurmJob

from launcher.sweep import submitit_adapter as adapter

LOCAL = {"timeout_min": 60, "cpus_per_task": 2, "gpus_per_node": 0, "tasks_per_node": 1, "mem_gb": 4, "nodes": 1,
         "name": "x", "stderr_to_stdout": False, "max_num_timeout": 2}
SLURM = {**LOCAL, "partition": "debug", "signal_delay_s": 90, "array_parallelism": 4, "setup": ["echo hi"]}


def _plugins_executor(cls, params, tmp_path, monkeypatch):
    """The executor the plugin's own launch builds for ``params`` (its map_array stopped before submitting)."""
    built = []
    monkeypatch.setattr(submitit.AutoExecutor, "map_array", lambda self, *a: built.append(self) or [])
    launcher = cls(submitit_folder=str(tmp_path / "%j"), **params)
    launcher.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    launcher.launch([["seed=0"]], 0)
    return launcher, built[0]


@pytest.mark.parametrize("cls, cluster_executor, params", [(LocalLauncher, adapter.SweepLocalExecutor, LOCAL),
                                                           (SlurmLauncher, adapter.SweepSlurmExecutor, SLURM)])
def test_the_executor_is_the_one_the_plugins_launch_builds_submitting_through_ours(cls, cluster_executor, params,
                                                                                   tmp_path, monkeypatch):
    launcher, theirs = _plugins_executor(cls, params, tmp_path, monkeypatch)
    ours = adapter.executor(launcher, cluster_executor, code="pass")
    assert type(ours) is type(theirs) and ours.parameters == theirs.parameters and ours.folder == theirs.folder
    assert type(ours._executor) is cluster_executor and ours._executor.parameters is ours.parameters
    assert ours._executor.max_num_timeout == theirs._executor.max_num_timeout == 2
    assert "self._executor._internal_process_submissions" in inspect.getsource(submitit.AutoExecutor)


def test_the_plugins_job_arguments_are_those_its_call_takes():
    names = list(inspect.signature(BaseSubmititLauncher.__call__).parameters)
    assert names == ["self", "sweep_overrides", "job_dir_key", "job_num", "job_id", "singleton_state"]
    assert len(adapter.job_params(None, [["a=1"]], 3)[0]) == len(names) - 1


@pytest.mark.parametrize("setup", [(), ("echo hi",)])
def test_a_local_controller_gets_the_command_and_environment_submitits_start_controller_gives(setup, tmp_path,
                                                                                              monkeypatch):
    started = []
    monkeypatch.setattr(submitit_local.subprocess, "Popen",
                        lambda args, **kw: started.append((args, kw)) or types.SimpleNamespace(pid=1))
    executor = submitit.LocalExecutor(tmp_path)
    executor.update_parameters(timeout_min=3, gpus_per_node=1, tasks_per_node=2, signal_delay_s=7, setup=list(setup))
    executor._submit_command("the command")
    (args, kwargs), = started
    ours, env = adapter.controller(executor.parameters, executor.folder, "the command")
    assert ours == args and kwargs["shell"] == bool(setup)
    assert {k: v for k, v in env.items() if k.startswith("SUBMITIT") or k == "CUDA_VISIBLE_DEVICES"} == \
        {k: v for k, v in kwargs["env"].items() if k.startswith("SUBMITIT") or k == "CUDA_VISIBLE_DEVICES"}
    assert list(inspect.signature(submitit_local.LocalJob).parameters) == ["folder", "job_id", "tasks", "process"]


def test_the_controllers_tasks_start_through_subprocess_popen_with_what_the_fork_server_handles():
    source = inspect.getsource(submitit_local.Controller.start_tasks)
    assert "subprocess.Popen(" in source and "shell=False" in source and "encoding=" in source


def test_the_slurm_command_and_result_wait_are_what_submitit_reads():
    assert isinstance(inspect.getattr_static(SlurmExecutor, "_submitit_command_str"), property)
    assert "self._submitit_command_str" in inspect.getsource(SlurmExecutor._internal_process_submissions)
    assert isinstance(Job._results_timeout_s, (int, float))
    assert "self._results_timeout_s" in inspect.getsource(Job._get_outcome_and_result)
    assert "_sub_jobs" in inspect.getsource(Job.results)


def test_the_watchers_states_are_set_and_its_refresh_replaced_only_while_the_sweep_waits():
    watcher = SlurmInfoWatcher(delay_s=1)
    for job in ("1", "2"):
        watcher.register_job(job)
    assert adapter.waiting_ids(watcher) == {"1", "2"} and adapter.state_of(watcher, "1") == "UNKNOWN"
    adapter.set_state(watcher, "1", "COMPLETED")
    adapter.set_state(watcher, "2", "RUNNING")
    adapter.mark_finished(watcher)
    assert adapter.waiting_ids(watcher) == {"2"} and watcher.is_done("1", mode="cache")
    calls = []
    shared = SlurmJob.watcher
    with adapter.slurm_states_from(lambda w, sacct: calls.append((w, sacct))):
        shared.update_if_long_enough("force")
    assert calls and calls[0][0] is shared and calls[0][1] == SlurmInfoWatcher.update.__get__(shared)
    assert "update" not in vars(shared)  # the class's own again
