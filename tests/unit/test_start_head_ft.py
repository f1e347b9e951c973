"""``fabric start-head``'s GCS fault tolerance and ``join --head-outage-tolerance``, without a cluster:
the env and argv they build, how flags are refused, the password kept out of argv and output, the
stale ``ray_current_cluster`` rule and the recovery line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from fabric.cli import main
from fabric.cli.head_ft import (
    FaultTolerance, clear_stale_current_cluster, earlier_workers, fault_tolerance, held_earlier_cluster, join_env, recovery_line,
    report_when_up, scrub, temp_dir,
)
from fabric.cli.head_ft import main as head_ft_main
from fabric.cli.ray_start_env import PASSWORD_ENV, with_password

PW = "pw-do-not-show-93f1"
HEAD = ["start-head", "--profile", "edge-relay", "--node-ip-address", "127.0.0.9", "--port", "6411"]


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def ns(**kw) -> argparse.Namespace:
    base = {"no_fault_tolerance": False, "redis_address": None, "redis_password_file": None}
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture
def pw_file(tmp_path: Path) -> Path:
    path = tmp_path / "redis.pw"
    path.write_text(f"{PW}\nignored second line\n")
    return path


def test_the_embedded_store_is_the_default_beside_the_registry(tmp_path):
    ft, why = fault_tolerance(ns(), "127.0.0.9:6411", {"XDG_DATA_HOME": str(tmp_path)})
    assert why is None and ft is not None and ft.mode == "embedded"
    assert ft.store_dir == tmp_path / "adaptive-fabric" / "clusters" / "127.0.0.9-6411" / "gcs"
    assert ft.env() == {"RAY_gcs_storage": "rocksdb", "RAY_gcs_storage_path": str(ft.store_dir)}
    assert ft.wrap(["/x/ray", "start", "--head"], "/py") == ["/x/ray", "start", "--head"]
    assert ft.describe() == f"GCS fault tolerance: embedded store {ft.store_dir} (new)"


def test_redis_puts_the_password_in_the_env_and_runs_the_shim(pw_file):
    ft, why = fault_tolerance(ns(redis_address="10.0.0.1:6380", redis_password_file=str(pw_file)), "h:1")
    assert why is None and ft is not None
    assert ft.env() == {"RAY_REDIS_ADDRESS": "10.0.0.1:6380", PASSWORD_ENV: PW}
    assert ft.shown_env()[PASSWORD_ENV] == "***"
    argv = ft.wrap(["/x/ray", "start", "--head", "--port=1"], "/py")
    assert argv == ["/py", "-m", "fabric.cli.ray_start_env", "start", "--head", "--port=1"]
    assert PW not in " ".join(argv) and PW not in repr(ft)
    assert ft.describe() == "GCS fault tolerance: redis 10.0.0.1:6380"


def test_the_shim_appends_the_password_in_process_only():
    assert with_password(["ray", "start", "--head"], PW) == ["ray", "start", "--head", f"--redis-password={PW}"]
    assert with_password(["ray", "start"], None) == ["ray", "start"]


def test_off_has_no_store():
    ft, why = fault_tolerance(ns(no_fault_tolerance=True), "h:1")
    assert why is None and ft is not None and ft.env() == {} and ft.describe() == "GCS fault tolerance: off"


@pytest.mark.parametrize("kw, message", [
    ({"no_fault_tolerance": True, "redis_address": "h:1"}, "--redis-address: cannot be combined with --no-fault-tolerance"),
    ({"no_fault_tolerance": True, "redis_password_file": "f"}, "--redis-password-file: cannot be combined with --no-fault-tolerance"),
    ({"redis_address": "no-port"}, "--redis-address: 'no-port' is not HOST:PORT"),
    ({"redis_address": "h:99999"}, "--redis-address: 'h:99999' is not HOST:PORT"),
    ({"redis_password_file": "f"}, "--redis-password-file: needs --redis-address"),
])
def test_bad_flags_are_refused_naming_the_flag(kw, message):
    assert fault_tolerance(ns(**kw), "h:1") == (None, message)


def test_a_missing_or_empty_password_file_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n\n")
    ft, why = fault_tolerance(ns(redis_address="h:1", redis_password_file=str(empty)), "h:1")
    assert ft is None and why == f"--redis-password-file: {empty} is empty (its first line is the password)"
    ft, why = fault_tolerance(ns(redis_address="h:1", redis_password_file=str(tmp_path / "nope")), "h:1")
    assert ft is None and why is not None and why.startswith("--redis-password-file: cannot read ")


def test_start_head_refusals_exit_2_naming_the_flag(capsys, tmp_path):
    code, out, err = run(capsys, *HEAD, "--no-fault-tolerance", "--redis-address", "h:1", "--dry-run")
    assert code == 2 and out == "" and "--redis-address: cannot be combined with --no-fault-tolerance" in err
    code, _, err = run(capsys, *HEAD, "--redis-address", "bad", "--dry-run")
    assert code == 2 and "--redis-address: 'bad' is not HOST:PORT" in err
    code, _, err = run(capsys, *HEAD, "--redis-address", "h:1", "--redis-password-file", str(tmp_path / "x"), "--dry-run")
    assert code == 2 and "--redis-password-file" in err


def test_dry_run_shows_the_store_and_masks_the_password(capsys, pw_file):
    code, out, err = run(capsys, *HEAD, "--dry-run")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("would run: "))
    assert line.startswith("would run: RAY_gcs_storage=rocksdb RAY_gcs_storage_path=") and "127.0.0.9-6411/gcs " in line
    assert "GCS fault tolerance: embedded store " in out and out.count("(new)") == 1
    code, out, err = run(capsys, *HEAD, "--redis-address", "127.0.0.1:7001", "--redis-password-file", str(pw_file), "--dry-run")
    assert code == 0, err
    assert PW not in out + err
    assert f"{PASSWORD_ENV}='***'" in out and f"{sys.executable} -m fabric.cli.ray_start_env start --head" in out
    assert "GCS fault tolerance: redis 127.0.0.1:7001" in out
    code, out, _ = run(capsys, *HEAD, "--no-fault-tolerance", "--dry-run")
    assert code == 0 and "GCS fault tolerance: off" in out and "RAY_gcs_storage" not in out


def test_join_sets_the_raylets_head_outage_window(capsys):
    code, out, _ = run(capsys, "join", "--address", "127.0.0.1:6379", "--profile", "edge-relay", "--dry-run")
    assert code == 0 and "would run: RAY_gcs_rpc_server_reconnect_timeout_s=600 " in out
    code, out, _ = run(capsys, "join", "--address", "127.0.0.1:6379", "--profile", "edge-relay", "--head-outage-tolerance", "90",
                       "--dry-run")
    assert code == 0 and "RAY_gcs_rpc_server_reconnect_timeout_s=90 " in out
    code, _, err = run(capsys, "join", "--address", "127.0.0.1:6379", "--profile", "edge-relay", "--head-outage-tolerance", "0",
                       "--dry-run")
    assert code == 2 and "--head-outage-tolerance: must be at least 1 second" in err
    assert join_env(argparse.Namespace(head_outage_tolerance=30)) == ({"RAY_gcs_rpc_server_reconnect_timeout_s": "30"}, None)


def test_the_temp_dir_comes_from_the_extra_ray_arguments():
    assert temp_dir(["--temp-dir=/t/h", "--num-cpus=1"]) == Path("/t/h")
    assert temp_dir(["--temp-dir", "/t/x"]) == Path("/t/x")
    assert temp_dir([]) == Path("/tmp/ray")


def test_a_stale_current_cluster_file_is_removed_only_when_nothing_answers(tmp_path):
    f = tmp_path / "ray_current_cluster"
    f.write_text("127.0.0.9:6411\n")
    assert not clear_stale_current_cluster(tmp_path, "127.0.0.9:6411", alive=lambda _: True) and f.exists()
    assert not clear_stale_current_cluster(tmp_path, "127.0.0.9:7000", alive=lambda _: False) and f.exists()
    assert clear_stale_current_cluster(tmp_path, "127.0.0.9:6411", alive=lambda _: False) and not f.exists()
    assert not clear_stale_current_cluster(tmp_path, "127.0.0.9:6411", alive=lambda _: False)  # no file: nothing to do


def test_an_earlier_cluster_in_the_embedded_store_is_its_session_file(tmp_path):
    ft = FaultTolerance("embedded", store_dir=tmp_path / "gcs")
    assert not held_earlier_cluster(ft)
    (tmp_path / "gcs").mkdir()
    (tmp_path / "gcs" / "session_name").write_text("session_x")
    assert held_earlier_cluster(ft) and not held_earlier_cluster(FaultTolerance("off"))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_recovery_waits_for_the_earlier_workers_to_be_alive(tmp_path):
    ft = FaultTolerance("embedded", store_dir=tmp_path / "gcs")
    tables = iter([[("old-head", False, True), ("new-head", True, True), ("w1", False, False), ("w2", True, False)],
                   [("new-head", True, True), ("w1", True, False), ("w2", True, False)]])
    clock = Clock()
    line = recovery_line(ft, lambda: next(tables), held=True, clock=clock, sleep=clock.sleep)
    assert line == f"recovered the cluster (embedded store {tmp_path / 'gcs'}): 2 of 2 worker nodes came back"
    assert earlier_workers([("h", True, True), ("w", False, False)]) == ["w"]


def test_recovery_gives_up_after_the_wait_and_counts_those_back():
    ft = FaultTolerance("redis", redis_address="r:1")
    clock = Clock()
    line = recovery_line(ft, lambda: [("h", True, True), ("w1", True, False), ("w2", False, False)], held=False, wait_s=5,
                         clock=clock, sleep=clock.sleep)
    assert line == "recovered the cluster (redis r:1): 1 of 2 worker nodes came back" and clock.now >= 5


def test_a_blocking_head_reports_its_recovery_once_its_gcs_answers(tmp_path):
    """``start-head --block`` becomes ``ray start``: a helper beside it prints the recovery line once
    the GCS answers and the earlier workers are back (Redis: known from the node table); a fresh
    start prints nothing more; a GCS that never answers is said so."""
    ft = FaultTolerance("embedded", store_dir=tmp_path / "gcs")
    tables = iter([None, None, [("new-head", True, True), ("w1", False, False)],
                   [("new-head", True, True), ("w1", True, False)]])
    clock = Clock()
    line = report_when_up(ft, "h:6379", None, True, table=lambda: next(tables), clock=clock, sleep=clock.sleep)
    assert line == f"recovered the cluster (embedded store {tmp_path / 'gcs'}): 1 of 1 worker nodes came back"
    redis = FaultTolerance("redis", redis_address="r:1")
    rows = [("old-head", False, True), ("new-head", True, True), ("w1", True, False)]
    assert report_when_up(redis, "h:6379", None, False, table=lambda: rows) == "recovered the cluster (redis r:1): 1 of 1 worker nodes came back"
    assert report_when_up(redis, "h:6379", None, False, table=lambda: [("head", True, True)]) is None  # fresh
    clock = Clock()
    line = report_when_up(ft, "h:6379", None, True, wait_s=3, table=lambda: None, clock=clock, sleep=clock.sleep)
    assert line is not None and "did not answer in 3 s" in line and clock.now >= 3
    assert head_ft_main(["report", "h:1", "nfs", "x", "1"]) == 2  # not a store
    assert head_ft_main(["report", "h:1", "redis", "r:1"]) == 2  # HELD missing


def test_a_fresh_store_says_new_and_off_says_off(tmp_path):
    ft = FaultTolerance("embedded", store_dir=tmp_path)
    assert recovery_line(ft, lambda: [("h", True, True)], held=False) == f"GCS fault tolerance: embedded store {tmp_path} (new)"
    assert recovery_line(FaultTolerance("redis", redis_address="r:1"), lambda: None, held=False) == "GCS fault tolerance: redis r:1"
    assert recovery_line(FaultTolerance("off"), lambda: None, held=True) == "GCS fault tolerance: off"


def test_ray_starts_messages_are_scrubbed_of_the_password():
    ft = FaultTolerance("redis", redis_address="r:1", password=PW)
    assert scrub(f"error: auth {PW} failed", ft) == "error: auth *** failed"
    assert scrub("x", None) == "x"
