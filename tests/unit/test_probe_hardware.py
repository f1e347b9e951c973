"""Storage classes (the real virtio sysfs listing), DRM render-node evidence for integrated vs
discrete, NVML snapshots (the real no-driver outcome and a fake binding whose calls fail one by
one), framebuffer and tailnet parsing."""

from pathlib import Path

import pytest

from fabric.core.capabilities import GpuVendor, StorageKind
from probes.drm import decide_integrated, read_render_nodes, same_pci_address
from probes.framebuffer import parse_framebuffer
from probes.nvml import parse_nvml, snapshot_nvml
from probes.sources import LiveSources
from probes.storage import base_device, parse_storage, storage_kind
from probes.tailnet import parse_tailscale

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "probe"  # verbatim tool outputs (SOURCES.md)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


MiB = 1024 * 1024


# -- storage -------------------------------------------------------------------------------------
def sysfs_from_block_listing(tmp_path, text):
    """Lay the fixture's `dev rotational=N ...` listing (and its resolved vda path) down as a sysfs tree."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].startswith("rotational="):
            p = tmp_path / "sys/block" / parts[0] / "queue/rotational"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(parts[1].split("=")[1] + "\n")
    real = tmp_path / "sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda"
    real.mkdir(parents=True)
    (real / "queue").mkdir()
    (real / "queue/rotational").write_text((tmp_path / "sys/block/vda/queue/rotational").read_text())
    import shutil
    shutil.rmtree(tmp_path / "sys/block/vda")
    (tmp_path / "sys/block/vda").symlink_to(real)
    return LiveSources(root=tmp_path)


def test_virtio_disk_is_virtual_although_it_reports_rotational(tmp_path):
    text = fixture("sysfs_block_cloud_vm_virtio.txt")
    assert "vda rotational=1" in text
    src = sysfs_from_block_listing(tmp_path, text)
    assert src.resolve_link("sys/block/vda") == "/sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda"
    assert src.read_file("sys/block/vda/queue/rotational").strip() == "1"
    [info] = parse_storage(({"device": "/dev/vda", "mountpoint": "/", "total": 270553174016},), src.read_file, src.resolve_link)
    assert info.kind is StorageKind.VIRTUAL and info.size_gib == 252.0


@pytest.mark.parametrize("dev,rot,path,kind", [
    ("nvme0n1", "0", None, StorageKind.NVME),
    ("sda", "0\n", "/sys/devices/pci0000:00/0000:00:17.0/ata1/host0/block/sda", StorageKind.SSD),
    ("sdb", "1\n", None, StorageKind.HDD),
    ("sdc", None, None, StorageKind.UNKNOWN),
    ("sdd", "garbage", None, StorageKind.UNKNOWN),
    ("vdb", "1", None, StorageKind.VIRTUAL),
    ("xvda", "1", None, StorageKind.VIRTUAL),
    ("sde", "1", "/sys/devices/pci0000:00/0000:00:04.0/virtio2/host0/target0:0:0/0:0:0:1/block/sde", StorageKind.VIRTUAL),
    ("mmcblk0", "0", None, StorageKind.SSD),
])
def test_storage_kind_rules(dev, rot, path, kind):
    assert storage_kind(dev, rot, path) is kind


@pytest.mark.parametrize("device,base", [
    ("/dev/nvme0n1p2", "nvme0n1"), ("/dev/nvme1n1", "nvme1n1"), ("/dev/sda1", "sda"), ("/dev/vda", "vda"),
    ("/dev/mmcblk0p2", "mmcblk0"), ("/dev/xvda1", "xvda"), ("overlay", None), ("/dev/mapper/root", None), ("tmpfs", None),
])
def test_base_device(device, base):
    assert base_device(device) == base


def test_loop_devices_and_duplicates_are_skipped(tmp_path):
    src = LiveSources(root=tmp_path)
    disks = ({"device": "/dev/loop0", "mountpoint": "/snap/x"}, {"device": "/dev/sda1", "mountpoint": "/home"},
             {"device": "/dev/sda2", "mountpoint": "/"}, {"device": "/dev/sda2", "mountpoint": "/var/lib/docker"})
    infos = parse_storage(disks, src.read_file, src.resolve_link)
    assert [(i.device, i.mount) for i in infos] == [("/dev/sda2", "/"), ("/dev/sda1", "/home")]


# -- DRM -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("vendor,device,vram,integrated,certain", [
    (GpuVendor.AMD, "0x163f", 1024 * MiB, True, True),       # Steam Deck Van Gogh: known APU
    (GpuVendor.AMD, "0x164e", 512 * MiB, True, True),        # Raphael iGPU
    (GpuVendor.AMD, "0x699f", 2048 * MiB, False, True),      # Radeon 550 with 2 GiB: discrete, not an APU
    (GpuVendor.AMD, "0x7480", 8192 * MiB, False, True),      # RX 7600
    (GpuVendor.AMD, "0x1234", 512 * MiB, True, True),        # unknown id, APU-sized carve-out
    (GpuVendor.AMD, "0x1234", None, True, False),            # no evidence: the lower tier, flagged uncertain
    (GpuVendor.INTEL, "0x9bc8", None, True, True),           # UHD 630
    (GpuVendor.INTEL, "0x56a0", None, False, True),          # Arc A770
    (GpuVendor.INTEL, "0xe20b", None, False, True),          # Arc B580
])
def test_integrated_or_discrete_from_sysfs_evidence(vendor, device, vram, integrated, certain):
    got, evidence, sure = decide_integrated(vendor, device, "amdgpu" if vendor is GpuVendor.AMD else "i915", vram)
    assert (got, sure) == (integrated, certain) and evidence


def test_render_nodes_read_from_a_fake_sysfs_tree(tmp_path):
    dev = tmp_path / "sys/devices/pci0000:00/0000:00:08.1/0000:04:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x1002\n")
    (dev / "device").write_text("0x163F\n")
    (dev / "mem_info_vram_total").write_text(f"{1024 * MiB}\n")
    (dev / "mem_info_gtt_total").write_text(f"{8192 * MiB}\n")
    drv = tmp_path / "sys/bus/pci/drivers/amdgpu"
    drv.mkdir(parents=True)
    (dev / "driver").symlink_to(drv)
    node_dir = tmp_path / "sys/class/drm/renderD128"
    node_dir.mkdir(parents=True)
    (node_dir / "device").symlink_to(dev)
    (tmp_path / "sys/class/drm/card0").mkdir()
    src = LiveSources(root=tmp_path)
    [node] = read_render_nodes(src.list_dir, src.read_file, src.resolve_link)
    assert (node.name, node.vendor, node.device_id, node.driver, node.pci_address) == ("renderD128", GpuVendor.AMD, "0x163f", "amdgpu", "0000:04:00.0")
    assert node.integrated and node.vram_bytes == 1024 * MiB and node.gtt_bytes == 8192 * MiB


def test_no_drm_at_all(tmp_path):
    src = LiveSources(root=tmp_path)
    assert read_render_nodes(src.list_dir, src.read_file, src.resolve_link) == []


def test_pci_addresses_match_across_domain_widths():
    assert same_pci_address("0000:01:00.0", "00000000:01:00.0")
    assert not same_pci_address("0000:01:00.0", "00000000:02:00.0")
    assert not same_pci_address(None, "00000000:01:00.0") and not same_pci_address("x", "y")


# -- NVML ------------------------------------------------------------------------------------------
def test_no_driver_fixture_means_no_gpus():
    error_class = fixture("pynvml_init_no_driver.txt").split()[0]
    assert error_class == "NVMLError_LibraryNotFound"
    gpus, notes = parse_nvml({"error": error_class})
    assert gpus == [] and notes == []  # the ordinary case: not worth a note


def test_live_nvml_snapshot_never_raises():
    snap = snapshot_nvml()
    assert isinstance(snap, dict) and ("error" in snap or "devices" in snap)
    gpus, _ = parse_nvml(snap)
    assert all(g["cuda"] for g in gpus)


class FakeNvml:
    """A pynvml stand-in: one RTX 4070 whose optional queries fail the way old drivers and GeForce do."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_FunctionNotFound(NVMLError):
        pass

    NVML_ENCODER_QUERY_H264, NVML_ENCODER_QUERY_HEVC = 0, 1  # no AV1 constant: an old binding

    def __init__(self, init_error=None):
        self.init_error = init_error
        self.shutdown = False

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self):
        return b"550.120"

    def nvmlSystemGetCudaDriverVersion(self):
        raise self.NVMLError_FunctionNotFound()

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return object()

    def nvmlDeviceGetName(self, h):
        return "NVIDIA GeForce RTX 4070"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-1"

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("M", (), {"total": 12282 * MiB})()

    def nvmlDeviceGetPciInfo(self, h):
        return type("P", (), {"busId": b"00000000:01:00.0"})()

    # nvmlDeviceGetBusType is missing (AttributeError: an old binding)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (8, 9)

    def nvmlDeviceGetMigMode(self, h):
        raise self.NVMLError_NotSupported()

    def nvmlDeviceGetEncoderCapacity(self, h, query):
        return 100 if query == 0 else 0


def test_fake_binding_with_failing_calls_is_tolerated():
    fake = FakeNvml()
    snap = snapshot_nvml(fake)
    assert fake.shutdown
    [dev] = snap["devices"]
    assert dev["name"] == "NVIDIA GeForce RTX 4070" and dev["pci_bus_id"] == "00000000:01:00.0"
    assert dev["errors"]["mig_mode"] == "NVMLError_NotSupported" and dev["errors"]["bus_type"] == "AttributeError"
    assert dev["encoder_capacity"] == {"h264": 100, "hevc": 0}
    assert snap["errors"]["cuda_driver_version"] == "NVMLError_FunctionNotFound"
    [gpu], notes = parse_nvml(snap)
    assert gpu["vram_mib"] == 12282 and gpu["compute_capability"] == "8.9" and gpu["cuda"] and gpu["discrete"]
    assert gpu["bus"] == "unknown" and gpu["mig_mode"] is None and gpu["encoders"] == ("h264",)


def test_init_failure_is_an_error_record_not_an_exception():
    fake = FakeNvml(init_error=FakeNvml.NVMLError_NotSupported())
    assert snapshot_nvml(fake) == {"error": "NVMLError_NotSupported"}
    gpus, notes = parse_nvml({"error": "NVMLError_NotSupported"})
    assert gpus == [] and "NVMLError_NotSupported" in notes[0]


@pytest.mark.parametrize("data", [[], "x", 3, {"devices": "no"}, {"devices": [None, 7, {"memory_total": "big", "compute_capability": ["a"]}]}])
def test_malformed_nvml_data(data):
    gpus, _ = parse_nvml(data)
    assert all(g["model"] for g in gpus)


# -- framebuffer, tailnet ------------------------------------------------------------------------------
def test_framebuffer(tmp_path):
    src = LiveSources(root=tmp_path)
    assert parse_framebuffer(src.list_dir, src.read_file) is None
    fb = tmp_path / "sys/class/graphics/fb0"
    fb.mkdir(parents=True)
    assert parse_framebuffer(src.list_dir, src.read_file).resolution is None
    (fb / "virtual_size").write_text("1920,1080\n")
    assert parse_framebuffer(src.list_dir, src.read_file).resolution == "1920x1080"
    (fb / "modes").write_text("U:3840x2160p-60\n")
    info = parse_framebuffer(src.list_dir, src.read_file)
    assert (info.device, info.resolution) == ("/dev/fb0", "3840x2160")


def test_tailscale_status():
    status = {"BackendState": "Running", "Self": {"DNSName": "qfox-1.tail-abc123.ts.net.", "TailscaleIPs": ["100.88.57.96"], "Online": True}}
    info = parse_tailscale(status)
    assert info.dns_name == "qfox-1.tail-abc123.ts.net" and info.ips == ("100.88.57.96",) and info.online
    assert parse_tailscale({**status, "BackendState": "NeedsLogin"}) is None
    for bad in (None, [], "x", {"Self": "x"}, {"Self": {"TailscaleIPs": "no", "DNSName": 5}}):
        result = parse_tailscale(bad)
        assert result is None or result.ips == ()


# -- garbage a machine can report: absent, never an exception (issue 12) --------------------------
class _Tree:
    def __init__(self, dirs, files=None, links=None):
        self.dirs, self.files, self.links = dirs, files or {}, links or {}

    def list_dir(self, path):
        return self.dirs.get(path, [])

    def read_file(self, path):
        return self.files.get(path.rsplit("/", 1)[-1])

    def resolve_link(self, path):
        return self.links.get(path.rsplit("/", 1)[-1])


def test_device_names_with_thousands_of_digits_are_not_devices():
    huge = "9" * 5000  # int() refused it: ValueError out of the sort key
    t = _Tree({"sys/class/drm": [f"renderD{huge}", "renderD129", "renderD128", "renderD१२"],
               "sys/class/graphics": [f"fb{huge}", "fb1"]},
              files={"vendor": "0x1002", "mem_info_vram_total": huge, "mem_info_gtt_total": str(2**64)})
    nodes = read_render_nodes(t.list_dir, t.read_file, t.resolve_link)
    assert [n.name for n in nodes] == ["renderD128", "renderD129"]
    assert all(n.vram_bytes is None and n.gtt_bytes is None for n in nodes)
    assert parse_framebuffer(t.list_dir, t.read_file).device == "/dev/fb1"


def test_storage_entries_of_the_wrong_shape_are_skipped_and_absurd_sizes_are_zero():
    t = _Tree({})
    disks = ({"device": "/dev/sda1", "mountpoint": "/", "total": 10**400}, {"device": 5}, "x",
             {"device": "/dev/sdb1", "mountpoint": 7, "total": 2 * 1024**3})
    out = parse_storage(disks, t.read_file, t.resolve_link)
    assert [(s.device, s.mount, s.size_gib) for s in out] == [("/dev/sda1", "/", 0.0), ("/dev/sdb1", "/", 2.0)]


def test_nvml_numbers_past_int64_are_absent():
    data = {"devices": [{"name": "GPU", "index": 10**5000, "memory_total": 10**400, "compute_capability": [10**5000, 1],
                         "mig_mode": [10**400], "encoder_capacity": {"h264": 10**400}}],
            "error": None}
    [gpu], _ = parse_nvml(data)
    assert gpu["index"] == 0 and gpu["vram_mib"] == 0 and gpu["compute_capability"] is None and gpu["encoder_capacity"] == {}
    gpus, notes = parse_nvml({"error": 10**5000})
    assert gpus == [] and "<int>" in notes[0]


class _GarbageNvml:
    """A binding that initialises and then answers garbage: a device count of a billion, a
    memory size that is a string, a name that is a number."""

    class NVMLError(Exception):
        pass

    NVML_ENCODER_QUERY_H264, NVML_ENCODER_QUERY_HEVC, NVML_ENCODER_QUERY_AV1 = 0, 1, 2

    def __init__(self, count):
        self.count = count

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return 550

    def nvmlSystemGetCudaDriverVersion(self):
        return "12040"

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return 4070

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("M", (), {"total": "12 GiB"})()

    def __getattr__(self, name):
        raise ValueError(name)  # every other call raises something NVML never would


@pytest.mark.parametrize("count", [10**9, "2", -1, 10**400])
def test_snapshot_of_a_binding_answering_garbage_never_raises_and_stays_json(count):
    import json

    snap = snapshot_nvml(_GarbageNvml(count))
    json.dumps(snap)
    assert len(snap.get("devices", [])) <= 64
    assert "driver_version" not in snap and snap["errors"]["driver_version"] == "TypeError"
    parse_nvml(snap)


def test_snapshot_of_garbage_device_fields_records_them_as_errors():
    snap = snapshot_nvml(_GarbageNvml(1))
    [dev] = snap["devices"]
    assert "name" not in dev and "memory_total" not in dev
    assert dev["errors"]["name"] == "TypeError" and dev["errors"]["bus_type"] == "ValueError"
