"""NVIDIA GPUs through NVML (``pynvml`` from NVIDIA's ``nvidia-ml-py``).

NVML is the driver's own account of its devices, so an NVIDIA GPU that NVML enumerates is a
CUDA device (the ``gpu_cuda`` tier). No driver, no library or no GPU is the common case on
most nodes and must read as "no NVIDIA GPUs", never as an exception: ``snapshot_nvml`` returns
``{"error": "<NVMLError class name>"}`` when NVML cannot start, and tolerates every per-device
call failing on its own (old drivers lack some calls; data-centre GPUs answer NotSupported for
the encoder and MIG queries), recording the failure under ``errors`` instead of the field.

The snapshot is plain JSON (it *is* a recording's ``nvml.json``); ``parse_nvml`` turns one,
real or recorded or garbage, into GPU descriptions.
"""

from __future__ import annotations

from typing import Any

from probes._numbers import as_int

__all__ = ["snapshot_nvml", "parse_nvml"]

MiB = 1024 * 1024
_CODECS = ("h264", "hevc", "av1")
# NVML_BUS_TYPE_*: 1 PCI, 2 PCIe, 3 FPCI (on-chip, Tegra/Grace: integrated), 4 AGP.
_BUS = {1: "pcie", 2: "pcie", 3: "integrated", 4: "pcie"}


#: More devices than one machine holds (an NVSwitch box has 16): a count past it is garbage.
_MAX_DEVICES = 64
#: Longest name, UUID or PCI bus id kept from NVML (real ones are under 100 characters).
_MAX_TEXT = 256


def _text(value: Any) -> str:
    """A string NVML returned (bytes on old bindings); anything else is a failed call."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value[:_MAX_TEXT]


def _int(value: Any) -> int:
    """An integer NVML returned; anything else (garbage, out of int64) is a failed call."""
    number = as_int(value)
    if number is None or isinstance(value, float):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return number


def _error_name(value: Any) -> str:
    """An error class name as recorded (``NVMLError_NotSupported``), shown safely."""
    return value[:_MAX_TEXT] if isinstance(value, str) else f"<{type(value).__name__}>"


def snapshot_nvml(binding: Any = None) -> dict[str, Any]:
    """What NVML says about this machine's NVIDIA devices, as JSON-ready data. Never raises.

    ``binding`` stands in for the ``pynvml`` module (tests pass a fake one)."""
    if binding is None:
        try:
            import pynvml as binding
        except Exception as exc:  # noqa: BLE001 - the binding itself is missing or broken
            return {"error": type(exc).__name__}
    pynvml = binding
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - an NVMLError; a broken binding is still "no NVIDIA GPUs"
        return {"error": type(exc).__name__}
    try:
        return _snapshot_devices(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _snapshot_devices(pynvml: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"errors": {}}

    def call(target: dict[str, Any], key: str, fn, *args):
        # Any failure of one call costs that field only: a binding that answers garbage (the
        # wrong type, a number past int64) fails the call as surely as an NVMLError does.
        try:
            value = fn(*args)
        except Exception as exc:  # noqa: BLE001 - never raises (module docstring)
            target.setdefault("errors", {})[key] = type(exc).__name__
            return None
        target[key] = value
        return value

    call(out, "driver_version", lambda: _text(pynvml.nvmlSystemGetDriverVersion()))
    call(out, "cuda_driver_version", lambda: _int(pynvml.nvmlSystemGetCudaDriverVersion()))
    count = call(out, "device_count", lambda: _int(pynvml.nvmlDeviceGetCount())) or 0
    if not 0 <= count <= _MAX_DEVICES:
        out["errors"]["device_count"] = f"out of range ({count})"
        del out["device_count"]
        count = 0
    devices = []
    for i in range(count):
        dev: dict[str, Any] = {"index": i}
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        except Exception as exc:  # noqa: BLE001 - an NVMLError, or a broken binding
            dev["errors"] = {"handle": type(exc).__name__}
            devices.append(dev)
            continue
        call(dev, "name", lambda: _text(pynvml.nvmlDeviceGetName(handle)))
        call(dev, "uuid", lambda: _text(pynvml.nvmlDeviceGetUUID(handle)))
        call(dev, "memory_total", lambda: _int(pynvml.nvmlDeviceGetMemoryInfo(handle).total))
        call(dev, "pci_bus_id", lambda: _text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
        call(dev, "bus_type", lambda: _int(pynvml.nvmlDeviceGetBusType(handle)))
        call(dev, "compute_capability", lambda: [_int(x) for x in pynvml.nvmlDeviceGetCudaComputeCapability(handle)][:2])
        call(dev, "mig_mode", lambda: [_int(x) for x in pynvml.nvmlDeviceGetMigMode(handle)][:2])
        caps: dict[str, int] = {}
        for codec, const in (("h264", "NVML_ENCODER_QUERY_H264"), ("hevc", "NVML_ENCODER_QUERY_HEVC"), ("av1", "NVML_ENCODER_QUERY_AV1")):
            value = call(dev, f"encoder_capacity.{codec}", lambda c=const: _int(pynvml.nvmlDeviceGetEncoderCapacity(handle, getattr(pynvml, c))))
            dev.pop(f"encoder_capacity.{codec}", None)
            if value is not None:
                caps[codec] = value
        dev["encoder_capacity"] = caps
        devices.append(dev)
    out["devices"] = devices
    if not out["errors"]:
        del out["errors"]
    return out


def parse_nvml(data: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """GPU descriptions (dicts of ``fabric.GpuInfo`` fields plus ``pci_bus_id``) and notes from an
    NVML snapshot; anything malformed is skipped, never raised."""
    notes: list[str] = []
    if data is None:
        return [], notes
    if not isinstance(data, dict):
        return [], ["nvml.json is not an object; no NVIDIA GPUs read"]
    if data.get("error"):
        err = _error_name(data["error"])
        if err not in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded", "ModuleNotFoundError", "ImportError"):
            notes.append(f"NVML failed to start ({err}): no NVIDIA GPUs")
        return [], notes
    devices = data.get("devices")
    if not isinstance(devices, list):
        return [], notes
    gpus: list[dict[str, Any]] = []
    for pos, dev in enumerate(devices):
        if not isinstance(dev, dict):
            continue
        name = dev.get("name")
        if not isinstance(name, str) or not name.strip():
            if isinstance(dev.get("errors"), dict) and "handle" in dev["errors"]:
                notes.append(f"NVIDIA GPU {pos}: NVML could not open it ({_error_name(dev['errors']['handle'])})")
                continue
            name = "NVIDIA GPU"
        index = as_int(dev.get("index"))
        index = index if index is not None and index >= 0 else pos
        mem = as_int(dev.get("memory_total"))
        bus = _BUS.get(as_int(dev.get("bus_type")) or 0, "unknown")
        cc = dev.get("compute_capability")
        capability = None
        if isinstance(cc, (list, tuple)) and len(cc) == 2 and all(as_int(x) is not None for x in cc):
            capability = f"{as_int(cc[0])}.{as_int(cc[1])}"
        mig = dev.get("mig_mode")
        mig_mode = None
        if isinstance(mig, (list, tuple)) and mig and as_int(mig[0]) is not None:
            mig_mode = as_int(mig[0]) == 1
        raw_caps = dev.get("encoder_capacity")
        caps: dict[str, int] = {}
        for codec, raw in (raw_caps.items() if isinstance(raw_caps, dict) else ()):
            value = as_int(raw)
            if codec in _CODECS and value is not None and value >= 0:
                caps[codec] = value
        pci = dev.get("pci_bus_id")[:_MAX_TEXT] if isinstance(dev.get("pci_bus_id"), str) else None
        gpu = dict(
            index=index, vendor="nvidia", model=name.strip()[:_MAX_TEXT], vram_mib=(mem // MiB) if mem and mem > 0 else 0,
            discrete=bus != "integrated", bus=bus, compute_capability=capability, cuda=True, mig_mode=mig_mode,
            encoder_capacity=caps, encoders=tuple(sorted(c for c, v in caps.items() if v > 0)), driver="nvidia",
        )
        gpu["pci_bus_id"] = pci
        if not caps:
            notes.append(f"{gpu['model']}: NVML reports no encoder capacity (no NVENC, or the query is unsupported)")
        gpus.append(gpu)
    return gpus, notes
