"""``probe_node``: read every source, assemble one ``NodeCapabilities``, never raise on absence.

The parsers each own one source; this module only wires them together and settles the cases
that need two sources at once: an NVIDIA render node is matched to its NVML device by PCI
address; a hardware encoder counts only when ffmpeg's one-frame test encode proved it (NVENC
via NVML's encoder capacity *and* the test; VA-API via vainfo's entrypoints *and* the test on
that GPU's render node). No test, a failed test or no ffmpeg at all proves nothing: the codec
is not in the GPU's ``encoders`` and its encode entrypoints leave ``vaapi_profiles``, so a GPU
with no proven VA-API encode is decode-only and gives no VA-API tier it could not serve
(listing an encoder is not having it). Anything missing, unreadable or malformed is
absent, with a note in ``limitations.notes`` where a person would want to know why, and every
explained tier the node does not serve gets its reason in ``unserved`` (``probes.unserved``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable, TypeVar

from fabric.core.capabilities import (
    FfmpegInfo,
    GpuInfo,
    GpuVendor,
    Limitations,
    ROLES,
    NodeCapabilities,
    derive_max_concurrent_tasks,
)
from fabric.core.settings import FabricSettings
from probes.drm import AMD_APU_IDS, RenderNode, read_render_nodes, same_pci_address
from probes.ffmpeg import TIMED_OUT, TestEncode, encoders_to_test, failure_reason, parse_encoders, parse_version
from probes.framebuffer import parse_framebuffer
from probes.nvml import parse_nvml
from probes.sources import LiveSources, Sources
from probes.storage import parse_storage
from probes.system import parse_system
from probes.tailnet import parse_tailscale
from probes.unserved import explain_unserved
from probes.vaapi import ENCODE_ENTRYPOINTS, VaInfo, codec_of_profile, model_from_driver, parse_vainfo

__all__ = ["probe_node", "apply_settings"]

T = TypeVar("T")
_VENDOR_NAMES = {GpuVendor.AMD: "AMD", GpuVendor.INTEL: "Intel", GpuVendor.NVIDIA: "NVIDIA", GpuVendor.ARM: "Arm"}
# codec -> ffmpeg VA-API encoder name
_VAAPI_ENCODER = {"h264": "h264_vaapi", "hevc": "hevc_vaapi", "av1": "av1_vaapi", "vp8": "vp8_vaapi",
                  "vp9": "vp9_vaapi", "jpeg": "mjpeg_vaapi", "mpeg2": "mpeg2_vaapi"}


def _guard(section: str, notes: list[str], fn: Callable[[], T], default: T) -> T:
    """Run one section; a bug in a parser costs that section, never the probe."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the probe must not take a node join down
        notes.append(f"internal: {section} probe failed: {type(exc).__name__}: {exc}")
        return default


def probe_node(
    sources: Sources | None = None,
    *,
    name: str | None = None,
    roles: Iterable[str] = (),
    max_concurrent_tasks: int | None = None,
) -> NodeCapabilities:
    """What this machine (or the recording ``sources`` stands for) is and can do.

    ``name`` overrides the node name (default: the hostname, else a profile's declared name);
    ``roles`` declare tiers the hardware cannot show (``relay`` caps the node at relay; default:
    a profile's declared roles); ``max_concurrent_tasks`` overrides the derived slot count.
    Raises only ``ValueError`` for an unknown role or a non-positive override.
    """
    m = max_concurrent_tasks
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or not 1 <= m < 1 << 31):
        shown = (m if m.bit_length() < 64 else f"<{m.bit_length()}-bit int>") if isinstance(m, int) else type(m).__name__
        raise ValueError(f"max_concurrent_tasks must be an integer from 1 to 2**31 - 1, got {shown}")
    roles = tuple(str(r).strip().lower() for r in roles if str(r).strip())
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ValueError(f"unknown role(s) {', '.join(unknown)}; valid roles: {', '.join(sorted(ROLES))}")
    src: Sources = sources if sources is not None else LiveSources()
    notes: list[str] = []
    declared = _guard("declared", notes, src.declared, {})

    facts = _guard("system", notes, lambda: parse_system(src.system(), src.read_file), None) or parse_system(None)
    notes += facts.notes
    storage = _guard("storage", notes, lambda: parse_storage(facts.disks, src.read_file, src.resolve_link), [])

    nvml_raw = _guard("nvml", notes, src.nvml, None)
    nvml_gpus, nvml_notes = _guard("nvml", notes, lambda: parse_nvml(nvml_raw), ([], []))
    notes += nvml_notes
    nodes = _guard("drm", notes, lambda: read_render_nodes(src.list_dir, src.read_file, src.resolve_link), [])
    vainfos: dict[str, VaInfo] = {
        n.name: _guard(f"vainfo {n.name}", notes, lambda n=n: parse_vainfo(src.vainfo(n.name)), VaInfo())
        for n in nodes if n.vendor is not None
    }

    # The VA-API encoders are tested on the first AMD/Intel device whose driver offers encode.
    vaapi_node = next((n for n in nodes if n.vendor not in (None, GpuVendor.NVIDIA) and vainfos[n.name].encodes), None)
    ffmpeg, tests = _guard("ffmpeg", notes, lambda: _probe_ffmpeg(src, vaapi_node, notes), (FfmpegInfo(), {}))
    gpus, vaapi_reasons = _guard(
        "gpus", notes, lambda: _assemble_gpus(nvml_gpus, nodes, vainfos, ffmpeg, tests, vaapi_node, notes), ([], {}))
    framebuffer = _guard("framebuffer", notes, lambda: parse_framebuffer(src.list_dir, src.read_file), None)
    tailnet = _guard("tailnet", notes, lambda: parse_tailscale(src.tailscale_status()), None)
    notes += list(getattr(src, "problems", []) or [])

    declared_roles = declared.get("roles") if isinstance(declared.get("roles"), list) else []
    all_roles = roles or tuple(r for r in (str(x).strip().lower() for x in declared_roles) if r in ROLES)
    declared_name = declared.get("name") if isinstance(declared.get("name"), str) else None
    node_name = (name or facts.hostname or declared_name or (tailnet.dns_name if tailnet else None) or "unknown").strip() or "unknown"

    caps = NodeCapabilities(
        name=node_name, arch=facts.arch, cpu_logical=facts.cpu_logical, cpu_physical=facts.cpu_physical,
        cpu_usable=facts.cpu_usable, memory_mib=facts.memory_mib, gpus=tuple(gpus), storage=tuple(storage),
        ffmpeg=ffmpeg, framebuffer=framebuffer, tailnet=tailnet, roles=all_roles, source=src.label,
    )
    slots = max_concurrent_tasks or derive_max_concurrent_tasks(caps.cpu_usable, caps.tiers)
    unserved = _guard("unserved", notes, lambda: explain_unserved(caps, cuda=_cuda_reason(nvml_raw, nodes), vaapi=vaapi_reasons), {})
    limitations = Limitations(max_concurrent_tasks=slots, notes=tuple(dict.fromkeys(notes)))
    return caps.model_copy(update={"limitations": limitations, "unserved": unserved})


def apply_settings(caps: NodeCapabilities, settings: FabricSettings) -> NodeCapabilities:
    """``caps`` with the per-node overrides of ``settings.nodes[caps.name]`` applied (today: a
    ``max_concurrent_tasks`` that replaces the derived slot count)."""
    override = settings.nodes.get(caps.name)
    if override is None or override.max_concurrent_tasks is None:
        return caps
    derived = caps.limitations.max_concurrent_tasks
    notes = (*caps.limitations.notes, f"max_concurrent_tasks {override.max_concurrent_tasks} from settings (derived: {derived})")
    return caps.model_copy(update={"limitations": Limitations(max_concurrent_tasks=override.max_concurrent_tasks, notes=notes)})


# -- ffmpeg ------------------------------------------------------------------------------------
def _probe_ffmpeg(src: Sources, vaapi_node: RenderNode | None, notes: list[str]) -> tuple[FfmpegInfo, dict[str, TestEncode]]:
    path = src.ffmpeg_path()
    text = src.ffmpeg_encoders() if path else None
    if not path or text is None:
        return FfmpegInfo(), {}
    listed = parse_encoders(text)
    to_test = encoders_to_test(listed)
    tests = src.ffmpeg_test_encodes(to_test, vaapi_node.path if vaapi_node else None) if to_test else {}
    working = tuple(e for e in to_test if e in tests and tests[e].ok)
    failed: dict[str, list[str]] = defaultdict(list)
    for enc in to_test:
        if enc in tests and not tests[enc].ok:
            failed[failure_reason(tests[enc])].append(enc)
    for reason, encs in failed.items():
        notes.append(f"{', '.join(encs)} listed but {'its' if len(encs) == 1 else 'their'} test encode failed: {reason}")
    untested = [e for e in to_test if e not in tests]
    if untested:
        notes.append(f"not proven (no test-encode result): {', '.join(untested)}")
    version = parse_version(src.ffmpeg_version())
    return FfmpegInfo(path=path, version=version, listed=tuple(listed), working=working), tests


# -- GPUs --------------------------------------------------------------------------------------
def _assemble_gpus(
    nvml_gpus: list[dict[str, Any]], nodes: list[RenderNode], vainfos: dict[str, VaInfo], ffmpeg: FfmpegInfo,
    tests: dict[str, TestEncode], vaapi_node: RenderNode | None, notes: list[str],
) -> tuple[list[GpuInfo], dict[str, str]]:
    """The GPUs, and for each AMD/Intel/Arm render node without a proven VA-API encode, why not."""
    gpus: list[GpuInfo] = []
    vaapi_reasons: dict[str, str] = {}
    matched: set[str] = set()
    for raw in nvml_gpus:
        fields = dict(raw)
        pci = fields.pop("pci_bus_id", None)
        node = next((n for n in nodes if n.vendor is GpuVendor.NVIDIA and same_pci_address(n.pci_address, pci)), None)
        if node is not None:
            matched.add(node.name)
            va = vainfos.get(node.name, VaInfo())
            # VA-API on NVIDIA is decode-only (NVDEC): no encode entrypoint survives.
            fields.update(render_node=node.path, decoders=tuple(va.decodes), vaapi_driver=va.driver,
                          vaapi_profiles=_proven_profiles(va, set()), pci_id=_pci_id(node))
        # NVML's encoder capacity says NVENC may be there; only a test encode says it is.
        capable = sorted(fields.get("encoders", ()))
        encoders = {c for c in capable if f"{c}_nvenc" in tests and tests[f"{c}_nvenc"].ok}
        if capable and not encoders:
            why = "no ffmpeg" if ffmpeg.path is None else "no test encode succeeded"
            notes.append(f"{fields.get('model', 'NVIDIA GPU')}: NVENC ({', '.join(capable)}) not proven by a test encode: {why}")
        fields["encoders"] = tuple(encoders)
        gpus.append(GpuInfo(**fields))
    for node in nodes:
        if node.name in matched:
            continue
        if node.vendor is None:
            notes.append(f"{node.name}: vendor {node.vendor_id or '?'} driver {node.driver or '?'} is not a GPU the fabric uses")
            continue
        va = vainfos.get(node.name, VaInfo())
        if node.vendor is GpuVendor.NVIDIA:
            proven: set[str] = set()
            notes.append(f"{node.name}: NVIDIA GPU without NVML (no driver or library): no CUDA; VA-API on NVIDIA is decode-only")
        else:
            proven, why = _prove_vaapi(node, va, ffmpeg, tests, vaapi_node)
            if why is not None:
                vaapi_reasons[node.path] = why
                if va.encodes:
                    notes.append(f"{node.name}: VA-API lists encode ({', '.join(sorted(va.encodes))}) but none is proven; "
                                 f"treated as decode-only ({why.removeprefix('VA-API encode not proven: ')})")
        gpus.append(_render_node_gpu(node, va, proven, len(gpus), notes))
    return gpus, vaapi_reasons


def _prove_vaapi(
    node: RenderNode, va: VaInfo, ffmpeg: FfmpegInfo, tests: dict[str, TestEncode], tested: RenderNode | None,
) -> tuple[set[str], str | None]:
    """The codecs whose VA-API encode a test encode on ``node`` proved, and, when there are
    none, why not (one line). ``tested`` is the render node the test encodes ran on."""
    if not va.ok:
        return set(), "no VA-API profiles (vainfo absent or failed)"
    if not va.encodes:
        return set(), "VA-API is decode-only here (vainfo lists no encode entrypoint)"
    proven: set[str] = set()
    unlisted: list[str] = []
    why: list[str] = []
    for codec in sorted(va.encodes):
        encoder = _VAAPI_ENCODER.get(codec)
        result = tests.get(encoder) if encoder else None
        if ffmpeg.path is None:
            why.append("no ffmpeg")
        elif encoder is None:
            why.append(f"ffmpeg has no VA-API encoder for {codec}")
        elif encoder not in ffmpeg.listed:
            unlisted.append(encoder)
        elif tested is not node:
            why.append(f"the test encodes ran on {tested.name if tested else 'no render node'} only")
        elif result is None:
            why.append(f"no test-encode result for {encoder}")
        elif result.ok:
            proven.add(codec)
        else:
            code = "timed out" if result.exit_code == TIMED_OUT else f"exit={result.exit_code}"
            why.append(f"test encode {encoder} failed ({code})")
    if proven:
        return proven, None
    if unlisted:
        why.insert(0, f"ffmpeg does not list {', '.join(unlisted)}")
    return proven, "VA-API encode not proven: " + "; ".join(dict.fromkeys(why))


def _cuda_reason(raw: Any, nodes: list[RenderNode]) -> str:
    """Why no NVIDIA GPU here is a CUDA device, from what NVML returned (``nvml.json``)."""
    if raw is None:
        why = "no NVML"
    elif not isinstance(raw, dict):
        why = "NVML's answer is unreadable"
    elif raw.get("error"):
        why = f"NVML: {raw['error']}"
    elif not isinstance(raw.get("devices"), list):
        why = "NVML's answer lists no devices"
    elif not raw["devices"]:
        why = "NVML found no device"
    else:
        why = "NVML could not read its devices"
    nvidia = [n.name for n in nodes if n.vendor is GpuVendor.NVIDIA]
    if nvidia:
        return f"NVIDIA GPU on {', '.join(nvidia)} but no CUDA ({why})"
    return f"no NVIDIA GPU ({why})"


def _proven_profiles(va: VaInfo, proven: set[str]) -> dict[str, tuple[str, ...]]:
    """vainfo's profiles, keeping an encode entrypoint only for a codec a test encode proved
    (listing is not having), so nothing derived from them claims an unproven encode."""
    return {p: tuple(e for e in eps if e not in ENCODE_ENTRYPOINTS or codec_of_profile(p) in proven)
            for p, eps in va.profiles.items()}


def _pci_id(node: RenderNode) -> str | None:
    return f"{node.vendor_id}:{node.device_id}" if node.vendor_id and node.device_id else None


def _render_node_gpu(node: RenderNode, va: VaInfo, proven: set[str], index: int, notes: list[str]) -> GpuInfo:
    """A render node's GPU; ``proven`` are the codecs whose hardware encode a test proved."""
    vendor = node.vendor
    assert vendor is not None
    vname = _VENDOR_NAMES[vendor]
    model = model_from_driver(va.driver)
    if model and not model.lower().startswith(vname.lower()):
        model = f"{vname} {model}"
    if not model:
        codename = AMD_APU_IDS.get(node.device_id or "") if vendor is GpuVendor.AMD else None
        model = f"{vname} {codename} iGPU" if codename else f"{vname} GPU {node.device_id or node.name}"
    profiles = _proven_profiles(va, proven)
    encoders = set(proven)
    if not node.certain:
        notes.append(f"{node.name}: {node.evidence}")
    decoders = set(va.decodes)
    if not va.ok and vendor is not GpuVendor.NVIDIA:
        notes.append(f"{node.name}: no VA-API profiles (vainfo absent or failed)")
    return GpuInfo(
        index=index, vendor=vendor, model=model, vram_mib=(node.vram_bytes or 0) // (1024 * 1024),
        discrete=not node.integrated, bus=("integrated" if node.integrated else "pcie") if node.certain else "unknown",
        encoders=tuple(encoders), decoders=tuple(decoders), vaapi_profiles=profiles, vaapi_driver=va.driver,
        render_node=node.path, driver=node.driver, pci_id=_pci_id(node), gtt_mib=(node.gtt_bytes or 0) // (1024 * 1024),
    )
