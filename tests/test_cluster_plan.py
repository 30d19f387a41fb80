"""DAG parsing, stale set and ordering for ``python -m stages.cluster`` (no stage is run)."""
import subprocess
import sys

import pytest

from conftest import ROOT
from stages.cluster import dag
from stages.cluster.dag import build_plan, chains, parse_dot, parse_status, task_graph
from stages.cluster.execute import StageFailed, execute, raise_for
from stages.cluster.lockorder import serial_key_order
from stages.errors import PipelineError


@pytest.fixture(scope="module")
def repo_dag():
    return parse_dot(dag.run_dvc(ROOT, "dag", "--dot", dag.PIPELINE))


def test_dot_of_this_repo(repo_dag):
    nodes, edges = repo_dag
    assert "generate@mod-hard" in nodes and "train@mod-hard-p405k-0" in nodes and "events" in nodes
    assert ("generate@mod-hard", "train@mod-hard-p405k-0") in edges      # upstream -> downstream
    assert ("train@mod-hard-p405k-0", "extract@mod-hard-p405k-0") in edges
    assert ("extract@mod-hard-p405k-0", "measure@mod-hard-p405k-0") in edges
    assert ("measure@copy-easy-p405k-0", "events") in edges
    assert nodes.index("generate@copy-easy") < nodes.index("generate@copy-hard")  # dvc.yaml order


def test_everything_stale_orders_upstream_first(repo_dag):
    nodes, edges = repo_dag
    plan = build_plan(nodes, edges, set(nodes))
    assert sorted(plan.order) == sorted(nodes)
    pos = {s: i for i, s in enumerate(plan.order)}
    assert all(pos[u] < pos[d] for u, d in edges)
    assert plan.upstream["measure@mod-easy-p405k-0"] == ["code", "train@mod-easy-p405k-0", "extract@mod-easy-p405k-0"]
    assert plan.order[0] == "code"  # every stage depends on its code manifest


def _reach(start, edges, forward=True):
    seen, todo = set(start), list(start)
    while todo:
        n = todo.pop()
        for u, d in edges:
            a, b = (u, d) if forward else (d, u)
            if a == n and b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


def test_downstream_of_stale_is_stale(repo_dag):
    nodes, edges = repo_dag
    plan = build_plan(nodes, edges, {"generate@mod-hard"})
    assert set(plan.order) == _reach({"generate@mod-hard"}, edges)
    assert {"train@mod-hard-p405k-0", "extract@mod-hard-p405k-0", "measure@mod-hard-p405k-0", "events"} <= set(plan.order)
    assert plan.order[0] == "generate@mod-hard" and plan.order[-1] == "plot_pages"  # it reads events' plots/runs
    pos = {s: i for i, s in enumerate(plan.order)}
    assert all(pos[u] < pos[d] for u, d in edges if u in pos and d in pos)
    assert plan.upstream["train@mod-hard-p405k-0"] == ["generate@mod-hard"]
    assert "measure@copy-easy-p405k-0" not in plan.upstream["events"]  # only stale upstreams are waited on


def test_targets_limit_to_ancestors(repo_dag):
    nodes, edges = repo_dag
    plan = build_plan(nodes, edges, set(nodes), targets=["measure@copy-easy-p405k-0"])
    assert set(plan.order) == _reach({"measure@copy-easy-p405k-0"}, edges, forward=False)
    assert plan.order[:2] == ["code", "generate@copy-easy"] and plan.order[-1] == "measure@copy-easy-p405k-0"
    assert len(build_plan(nodes, edges, {"generate@mul-hard"}, targets=["events"])) == 0
    with pytest.raises(PipelineError, match="unknown stage 'nope'"):
        build_plan(nodes, edges, set(), targets=["nope"])


def test_chains_of_the_default_grid(repo_dag):
    nodes, edges = repo_dag
    plan = build_plan(nodes, edges, set(nodes), targets=["events"])
    tasks = task_graph(plan)
    assert sorted(s for g, _ in tasks for s in g) == sorted(plan.order)  # a partition
    assert tasks[-1][0] == ["events"] and len(tasks) < len(plan.order)
    assert tasks[0][0] == ["code"]  # it feeds every stage
    assert tasks[1][0] == ["generate@copy-easy"]  # it feeds three seeds' runs: no chain, so they run in parallel
    where = {s: i for i, (g, _) in enumerate(tasks) for s in g}
    for i, (group, after) in enumerate(tasks):  # every upstream stage is in an earlier task or earlier in the chain
        for k, s in enumerate(group):
            for u in plan.upstream[s]:
                assert (where[u] == i and group.index(u) < k) or where[u] in after
    assert [g for g, _ in task_graph(plan, chains_on=False)] == [[s] for s in plan.order]


def test_chains_never_delay_a_stage():
    # one dataset, two models: the dataset feeds both runs, so it stays alone and the runs stay parallel
    nodes = ["g", "t1", "t2", "x1", "x2", "m1", "m2", "ev"]
    edges = [("g", "t1"), ("g", "t2"), ("g", "x1"), ("g", "x2"), ("t1", "x1"), ("t2", "x2"), ("t1", "m1"),
             ("x1", "m1"), ("t2", "m2"), ("x2", "m2"), ("m1", "ev"), ("m2", "ev")]
    plan = build_plan(nodes, edges, set(nodes))
    assert chains(plan) == [["g"], ["t1", "x1", "m1"], ["t2", "x2", "m2"], ["ev"]]
    # a side branch off the middle of a chain would wait for the chain's end: not merged
    plan = build_plan(["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("a", "d")], {"a"})
    assert chains(plan) == [["a"], ["b", "c"], ["d"]]
    plan = build_plan(["a", "b", "c"], [("a", "b"), ("b", "c")], {"a"})
    assert chains(plan) == [["a", "b", "c"]]


def test_cycle_is_an_error():
    with pytest.raises(PipelineError, match="cycle"):
        build_plan(["a", "b"], [("a", "b"), ("b", "a")], {"a"})


def test_parse_status():
    assert parse_status("{}\n") == set()
    text = '{"train@a": [{"changed deps": {}}], "events": ["always changed"]}'
    assert parse_status("WARNING: something\n" + text) == {"train@a", "events"}
    assert parse_status(text, ignore_always_changed=True) == {"train@a"}
    with pytest.raises(PipelineError, match="dvc status"):
        parse_status("no json here")


def test_parse_dot_quoting_and_isolated_nodes():
    nodes, edges = parse_dot('strict digraph {\n"a";\n"sub/dvc.yaml:b";\n"a" -> "sub/dvc.yaml:b";\n"c";\n}\n')
    assert nodes == ["a", "sub/dvc.yaml:b", "c"] and edges == [("a", "sub/dvc.yaml:b")]


def test_new_lock_entries_take_plan_order():
    assert serial_key_order(["x", "c", "a", "b"], ["x"], ["a", "b", "c"]) == ["x", "a", "b", "c"]
    assert serial_key_order(["b", "a"], ["b", "a"], ["a", "b"]) == ["b", "a"]  # existing stay put


def test_dry_run_cli_prints_plan():
    proc = subprocess.run([sys.executable, "-m", "stages.cluster", "repro", "--dry-run", "--workers", "0"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "'--workers' must be a positive integer" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "stages.cluster", "repro", "--dry-run", "nope"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: unknown stage 'nope' (not in 'dvc dag'; try 'dvc stage list')")


def test_failure_names_stage_and_skips_downstream(monkeypatch, tmp_path):
    from distributed import Client, LocalCluster

    def fake(stages, root):
        if stages == ["a"]:
            raise StageFailed("a", "stage 'a' failed (exit 1) after 0.0s:\nboom")
        return {"stages": stages, "seconds": 0.0, "host": "h", "pid": 0}

    monkeypatch.setattr("stages.cluster.execute.repro_stages", fake)
    plan = build_plan(["a", "b", "c"], [("a", "b")], {"a", "b", "c"})
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        outcome = execute(plan, client, tmp_path, progress=lambda m: None, chains=False)
    assert [d["stages"] for d in outcome.done] == [["c"]]
    assert set(outcome.failed) == {"a"} and outcome.skipped == {"b": "a"}
    with pytest.raises(PipelineError, match=r"(?s)stage 'a' failed.*boom.*skipped 1 downstream stage\(s\): b"):
        raise_for(outcome)


def test_slurm_job_script(monkeypatch):
    pytest.importorskip("dask_jobqueue")
    from stages.cluster.backends import ClusterSpec, _slurm_cluster

    spec = ClusterSpec(slurm=True, queue="gpu", cores=4, memory="8GB", walltime="01:00:00",
                       job_extra=["--gres=gpu:1"])
    cluster = _slurm_cluster(spec)
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert "#SBATCH -p gpu" in script and "#SBATCH --gres=gpu:1" in script and "#SBATCH -t 01:00:00" in script


def test_slurm_without_jobqueue_is_a_clear_error(monkeypatch):
    from stages.cluster.backends import ClusterSpec, _slurm_cluster

    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)
    with pytest.raises(PipelineError, match=r"'--slurm' needs dask-jobqueue"):
        _slurm_cluster(ClusterSpec(slurm=True))
    with pytest.raises(PipelineError, match="choose one of --scheduler and --slurm"):
        ClusterSpec(slurm=True, scheduler="tcp://x:1").validate()


def test_external_scheduler_runs_the_plan(monkeypatch, tmp_path):
    from distributed import LocalCluster

    from stages.cluster.backends import ClusterSpec, open_client

    monkeypatch.setattr("stages.cluster.execute.repro_stages",
                        lambda stages, root: {"stages": stages, "seconds": 0.0, "host": "h", "pid": 0})
    plan = build_plan(["a", "b"], [("a", "b")], {"a"})
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        with open_client(ClusterSpec(scheduler=cluster.scheduler_address)) as client:
            outcome = execute(plan, client, tmp_path, progress=lambda m: None)
    assert outcome.ok and [d["stages"] for d in outcome.done] == [["a", "b"]]


def test_a_folder_outside_any_dvc_repository_is_one_line(tmp_path):
    (tmp_path / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text())
    out = subprocess.run([sys.executable, "-m", "stages.cluster", "repro", "--dry-run", "--root", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.strip() == (f"error: not a DVC repository: {tmp_path.resolve()} "
                                  "(run from a clone of the project, or `dvc init` first)"), out.stderr
