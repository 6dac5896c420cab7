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
