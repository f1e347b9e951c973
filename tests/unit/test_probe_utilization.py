"""``Sources.utilization()``: the load every heartbeat carries (``probes.utilization``), read through
fake psutil and NVML bindings. A live node reports its GPUs; a recorded node reports the CPU and
memory of the machine it runs on and no GPUs, whatever GPUs its recording holds."""

from __future__ import annotations

from types import SimpleNamespace

from fabric.core.records import GpuUtilization, Utilization
from probes import LiveSources, RecordedSources, RecordingSources
from probes.profiles import profile_path
from probes.utilization import nvml_utilization, read_utilization

MiB = 1024 * 1024


class FakePsutil:
    def __init__(self, cpu: float = 12.5, memory: float = 40.0) -> None:
        self.cpu, self.memory, self.cpu_calls = cpu, memory, 0

    def cpu_percent(self, interval=None):
        assert interval is None  # never blocks a heartbeat
        self.cpu_calls += 1
        return self.cpu

    def virtual_memory(self):
        return SimpleNamespace(percent=self.memory)


class FakeNvml:
    """Two GPUs; the second cannot report its encoder load (a GeForce without NVENC stats)."""

    class NVMLError(Exception):
        pass

    def __init__(self, *, init_error: Exception | None = None, fail_at: int | None = None) -> None:
        self.init_error, self.fail_at, self.shutdown = init_error, fail_at, False

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        if i == self.fail_at:
            raise self.NVMLError("GPU is lost")
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=30 + h, memory=5)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(1000 + h) * MiB, total=8192 * MiB)

    def nvmlDeviceGetEncoderUtilization(self, h):
        if h == 1:
            raise self.NVMLError("not supported")
        return (17, 167000)


def test_nvml_utilization_reads_every_gpu_and_an_absent_encoder_load_is_none():
    nvml = FakeNvml()
    gpus = nvml_utilization(nvml)
    assert gpus == (GpuUtilization(index=0, gpu_percent=30.0, memory_used_mib=1000, memory_total_mib=8192, encoder_percent=17.0),
                    GpuUtilization(index=1, gpu_percent=31.0, memory_used_mib=1001, memory_total_mib=8192, encoder_percent=None))
    assert nvml.shutdown


def test_no_nvml_or_a_failing_device_means_no_gpus():
    assert nvml_utilization(FakeNvml(init_error=FakeNvml.NVMLError("driver not loaded"))) == ()
    failing = FakeNvml(fail_at=1)
    assert nvml_utilization(failing) == () and failing.shutdown  # absent means absent: no half list
    assert nvml_utilization(object()) == ()  # a binding without the calls


def test_read_utilization_takes_cpu_and_memory_from_psutil():
    ps = FakePsutil(cpu=55.0, memory=71.5)
    assert read_utilization(False, psutil=ps, nvml=FakeNvml()) == Utilization(cpu_percent=55.0, memory_percent=71.5, gpus=())
    util = read_utilization(True, psutil=ps, nvml=FakeNvml())
    assert util.cpu_percent == 55.0 and [g.index for g in util.gpus] == [0, 1] and ps.cpu_calls == 2


def test_live_sources_report_their_gpus():
    util = LiveSources(psutil=FakePsutil(), nvml=FakeNvml()).utilization()
    assert util.cpu_percent == 12.5 and util.memory_percent == 40.0 and len(util.gpus) == 2


def test_recorded_sources_report_this_machine_cpu_and_memory_and_no_gpus():
    src = RecordedSources(profile_path("gpu-cuda-workstation"), psutil=FakePsutil(cpu=3.0, memory=9.0))
    assert src.nvml()  # the recording has a GPU ...
    assert src.utilization() == Utilization(cpu_percent=3.0, memory_percent=9.0, gpus=())  # ... which is not here to read


def test_a_recording_passes_utilization_through_and_never_writes_it(tmp_path):
    rec = RecordingSources(LiveSources(tmp_path, psutil=FakePsutil(), nvml=FakeNvml()))
    assert len(rec.utilization().gpus) == 2
    assert list(rec.write(tmp_path / "out").iterdir()) == []
