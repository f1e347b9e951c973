"""System facts: the real psutil fixture, and CPU/memory limits from affinity and cgroup v1/v2
files laid out in a fake tree (read through LiveSources re-rooted at tmp_path)."""

import json
from pathlib import Path

import pytest

from probes.sources import LiveSources
from probes.system import cgroup_cpu_quota, cgroup_files, cgroup_memory_limit, parse_system, read_psutil

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "probe"  # verbatim tool outputs (SOURCES.md)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


MiB = 1024 * 1024


def tree(tmp_path, files: dict[str, str]) -> LiveSources:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return LiveSources(root=tmp_path)


def test_psutil_fixture_in_its_own_shape():
    facts = parse_system(json.loads(fixture("psutil_cloud_vm_no_gpu.json")))
    assert (facts.arch, facts.cpu_logical, facts.cpu_physical, facts.cpu_usable) == ("x86_64", 2, 2, 2.0)
    assert facts.memory_mib == 25276510208 // MiB == 24105
    assert facts.disks == ({"device": "/dev/vda", "mountpoint": "/", "fstype": "ext4", "total": 270553174016},)
    assert facts.hostname is None


def test_live_psutil_reading_has_the_recorded_keys():
    data = read_psutil()
    assert {"machine", "hostname", "cpu_logical", "cpu_physical", "mem_total", "disks"} <= set(data)
    facts = parse_system(data)
    assert facts.cpu_logical >= 1 and facts.memory_mib > 0


def test_affinity_caps_usable_cpus():
    facts = parse_system({"cpu_logical": 16, "cpu_affinity": 4, "mem_total": 8 << 30})
    assert facts.cpu_usable == 4.0 and facts.cpu_logical == 16
    assert any("affinity" in n for n in facts.notes)


def test_cgroup_v2_quota_and_memory_tightest_level_wins(tmp_path):
    src = tree(tmp_path, {
        "proc/self/cgroup": "0::/kubepods/pod1/ctr\n",
        "sys/fs/cgroup/cpu.max": "max 100000\n",
        "sys/fs/cgroup/kubepods/cpu.max": "400000 100000\n",
        "sys/fs/cgroup/kubepods/pod1/ctr/cpu.max": "150000 100000\n",
        "sys/fs/cgroup/kubepods/memory.max": f"{4096 * MiB}\n",
        "sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n",
    })
    assert cgroup_cpu_quota(src.read_file) == 1.5
    assert cgroup_memory_limit(src.read_file) == 4096 * MiB
    facts = parse_system({"cpu_logical": 8, "mem_total": 32 << 30}, src.read_file)
    assert facts.cpu_usable == 1.5 and facts.memory_mib == 4096
    assert "sys/fs/cgroup/kubepods/pod1/ctr/cpu.max" in cgroup_files(src.read_file)


def test_cgroup_v1_quota_and_memory(tmp_path):
    src = tree(tmp_path, {
        "proc/self/cgroup": "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n",
        "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "200000\n",
        "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": f"{2048 * MiB}\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
    })
    assert cgroup_cpu_quota(src.read_file) == 2.0
    assert cgroup_memory_limit(src.read_file) == 2048 * MiB


def test_unlimited_and_garbage_cgroups_mean_no_limit(tmp_path):
    src = tree(tmp_path, {
        "proc/self/cgroup": "garbage line\n4:memory:/x\n1:cpu:/\n0::/\n",
        "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
        "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
        "sys/fs/cgroup/memory/x/memory.limit_in_bytes": "not a number\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
        "sys/fs/cgroup/cpu.max": "max\n",
        "sys/fs/cgroup/memory.max": "max\n",
    })
    assert cgroup_cpu_quota(src.read_file) is None
    assert cgroup_memory_limit(src.read_file) is None
    assert parse_system({"cpu_logical": 4, "mem_total": 8 << 30}, src.read_file).cpu_usable == 4.0


def test_no_proc_no_cgroup(tmp_path):
    src = LiveSources(root=tmp_path)
    assert cgroup_cpu_quota(src.read_file) is None and cgroup_memory_limit(src.read_file) is None
    assert cgroup_files(src.read_file) == []


def test_a_tiny_quota_still_gives_a_positive_cpu_count(tmp_path):
    src = tree(tmp_path, {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpu.max": "10000 100000\n"})
    assert parse_system({"cpu_logical": 2}, src.read_file).cpu_usable == 0.1


@pytest.mark.parametrize("data", [None, [], "text", 42, {"cpu_logical": "many", "mem_total": -5, "machine": 7, "disks": "x"},
                                  {"cpu_logical": 0, "mem": {"total": "1"}, "parts": [None, {"device": 3}]}])
def test_garbage_system_json_is_a_minimal_machine(data):
    facts = parse_system(data)
    assert facts.cpu_logical == 1 and facts.cpu_usable == 1.0 and facts.memory_mib == 0 and facts.disks == ()


# -- garbage a machine can report: absent, never an exception or a stall (issue 12) ---------------
@pytest.mark.parametrize("data", [
    {"cpu_logical": 10**400},                     # float(10**400) overflowed
    {"cpu_logical": 8, "cpu_affinity": 10**400, "mem_total": -(10**400)},
    {"cpu_logical": "9" * 5000, "mem_total": "9" * 4000},
    {"disks": [{"device": "/dev/sda1", "mountpoint": "/", "total": 10**400}]},
    {"parts": [{"device": "/dev/sda1", "mountpoint": "/"}], "usage_root": {"total": 10**400}},
])
def test_numbers_no_machine_has_are_absent(data):
    facts = parse_system(data)
    assert facts.cpu_logical >= 1 and facts.cpu_usable > 0 and facts.memory_mib >= 0
    assert all(d["total"] is None for d in facts.disks)


@pytest.mark.parametrize("text", ["9" * 5000, "-" + "9" * 5000, str(2**64), "1_000", "0x10"])
def test_cgroup_files_holding_non_numbers_mean_no_limit(tmp_path, text):
    src = tree(tmp_path, {"proc/self/cgroup": "0::/app\n", "sys/fs/cgroup/app/cpu.max": f"{text} 100000\n",
                          "sys/fs/cgroup/app/memory.max": f"{text}\n"})
    assert cgroup_cpu_quota(src.read_file) is None and cgroup_memory_limit(src.read_file) is None


def test_an_absurdly_deep_cgroup_path_is_ignored_not_walked():
    import time

    path = "/" + "/".join(["a"] * 5_000)  # the old walk read 30,000 files for it (200,000 levels: gigabytes)
    reads: list[str] = []

    def read_file(rel):
        reads.append(rel)
        return f"0::{path}\n" if rel == "proc/self/cgroup" else None

    start = time.perf_counter()
    assert cgroup_cpu_quota(read_file) is None and cgroup_memory_limit(read_file) is None and cgroup_files(read_file) == []
    assert time.perf_counter() - start < 1.0 and len(reads) == 3  # only /proc/self/cgroup, once per call
