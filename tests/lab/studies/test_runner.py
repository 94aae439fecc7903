"""The runner's share of the CPUs among parallel runs (lab.studies.runner.child_env)."""

import json

import pytest

from lab.studies import runner as runner_module
from lab.studies.runner import Runner, Variant

# A stand-in train.py that records the OMP_NUM_THREADS it was started with.
THREADS_TRAIN = """
import json, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[2:] if a.startswith("--") and "=" in a)
folder = os.path.join("logs", args["experiment"], args["run_name"])
os.makedirs(folder, exist_ok=True)
record = {"seed": int(args["seed_everything"]), "tags": json.loads(args["run_record.tags"]),
          "status": "ok", "global_step": 1, "metrics": {"test": {"test/loss": 1.0}},
          "threads": os.environ.get("OMP_NUM_THREADS")}
with open(os.path.join(folder, "record.json"), "w") as f:
    f.write(json.dumps(record))
"""


@pytest.mark.parametrize(
    ("given", "parallel", "expected"),
    [(None, 3, "2"), (None, 8, "1"), ("5", 3, "5"), (None, 1, None)],
)
def test_parallel_runs_share_the_cpus(tmp_path, monkeypatch, given, parallel, expected):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner_module, "usable_cpus", lambda: 6)
    if given is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", given)
    script = tmp_path / "threads_train.py"
    script.write_text(THREADS_TRAIN)
    runner = Runner(experiment="e", train_script=script)
    results = runner.run_all([(Variant("v"), s) for s in range(parallel)], parallel=parallel)
    assert [r.status for r in results] == ["ok"] * parallel
    seen = {
        json.loads((tmp_path / r.log_dir / "record.json").read_text())["threads"] for r in results
    }
    # One run at a time inherits this process's environment (here: no OMP_NUM_THREADS).
    assert seen == {expected}
