"""The benchmark suite runs (tiny sizes) and prints every table; timings are not asserted here."""
import subprocess
import sys

from conftest import REPO


def test_benchmark_suite_smoke_run():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "--quick"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for heading in ("hand-written loop", "trainer, hooks=default", "python -m launcher (default task) to its first step",
                    "save, training held", "resume at 90%", "hydra/launcher=local", "Dispatch cost per job"):
        assert heading in proc.stdout


def _instructions_module(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import instructions

    return instructions


def test_instruction_counts_are_ratios_per_hash_seed_then_medians(monkeypatch):
    """Each seed's ratio is taken against the hand loop under the same seed; the median of those is reported."""
    instructions = _instructions_module(monkeypatch)
    per_step = {("hand", 0): 100, ("hand", 1): 200, ("hand", 2): 300,
                ("minimal", 0): 110, ("minimal", 1): 200, ("minimal", 2): 390}
    calls = []

    def fake(kind, contender, epochs, hash_seed):
        calls.append((kind, contender, epochs, hash_seed))
        return 5000 + epochs * instructions.STEPS_PER_EPOCH[kind] * per_step[contender, hash_seed]

    monkeypatch.setattr(instructions, "instructions", fake)
    monkeypatch.setattr(instructions, "CONTENDERS", [("mlp", "hand"), ("mlp", "minimal"), ("tiny", "hand")])
    results = instructions.measure(jobs=1, kinds=["mlp"], hash_seeds=[0, 1, 2])
    assert sorted(calls) == sorted((k, c, e, s) for k, c in [("mlp", "hand"), ("mlp", "minimal")] for e in (1, 3) for s in (0, 1, 2))
    assert results["mlp", "hand"] == (200, 1.0)
    count, ratio = results["mlp", "minimal"]
    assert count == 200 and abs(ratio - 1.1) < 1e-12  # the ratio of the medians would say 1.0
    assert "| trainer, hooks=minimal, a checkpoint every epoch | 200 | 1.100x | +0 |" in instructions.table(results)


def test_instruction_benchmark_contenders_run_and_a_wrong_loop_name_is_named(tmp_path):
    script = str(REPO / "benchmarks" / "instructions.py")
    for loop, contender in (("mlp", "hand+save"), ("mlp", "default"), ("tiny", "minimal")):
        proc = subprocess.run([sys.executable, script, "--one", loop, contender, "1"], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
    proc = subprocess.run([sys.executable, script, "--loops", "mlp,big"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--loops: 'mlp,big' is not a list of mlp and tiny" in proc.stderr


def test_instruction_counts_divide_by_the_steps_the_loops_really_take(monkeypatch):
    """STEPS_PER_EPOCH must match loop.py's data, or every per-step count is off by the same factor."""
    instructions = _instructions_module(monkeypatch)
    import loop
    from torch.utils.data import DataLoader

    from launcher.data import synthetic
    mlp_train = synthetic("train", size=10240, shape=[64], val_fraction=0.2)  # as loop.hand_written builds it
    assert len(DataLoader(mlp_train, batch_size=64)) == instructions.STEPS_PER_EPOCH["mlp"]
    assert "data.train.size=10240" in loop.OVERRIDES and "data.batch_size=64" in loop.OVERRIDES
    assert len(loop.Prebatched().batches) == instructions.STEPS_PER_EPOCH["tiny"]


def test_instruction_parts_run_in_the_order_the_table_names_them(tmp_path, monkeypatch):
    """The parent maps callgrind's profiles to parts by position: the child must run exactly PART_NAMES, in order."""
    instructions = _instructions_module(monkeypatch)
    script = str(REPO / "benchmarks" / "instructions.py")
    proc = subprocess.run([sys.executable, script, "--parts-child", "1"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == list(instructions.PART_NAMES)


def test_full_run_rewrites_only_the_results_section_of_docs_benchmarks(tmp_path, monkeypatch):
    """`python benchmarks/run.py` writes its tables into docs/benchmarks.md between the markers, and keeps the
    page's text around them."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import run

    page = tmp_path / "benchmarks.md"
    page.write_text((REPO / "docs" / "benchmarks.md").read_text())
    head, rest = page.read_text().split(run.START, 1)
    tail = rest.split(run.END, 1)[1]
    run.write_tables("| new | table |", page)
    assert page.read_text() == f"{head}{run.START}\n| new | table |\n{run.END}{tail}"
