"""Settings of job templates (``templates:``): the artifacts a warm node holds for each, by URI."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

from fabric.core.settings_file import clip
from fabric.core.settings_types import SettingsModel


ARTIFACT_SCHEMES = ("file", "http", "https")
"""The URI schemes a template artifact may use (``file:///abs/path``, ``http(s)://host/path``)."""


def _artifact_uri(v: str) -> str:
    scheme, sep, rest = v.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ARTIFACT_SCHEMES:
        raise ValueError(f"an artifact is a file://, http:// or https:// URI, got {clip(v, 120)!r}")
    host, _, path = rest.partition("/")
    if (scheme == "file") == bool(host) or path.rsplit("/", 1)[-1] in ("", ".", ".."):
        form = "file:///abs/dir/name" if scheme == "file" else f"{scheme}://host/dir/name"
        raise ValueError(f"an artifact URI is {form} (ending in a file name), got {clip(v, 120)!r}")
    return v


class TemplateSettings(SettingsModel):
    """A job template's artifacts: what warmth counts and spares fetch."""

    artifacts: tuple[Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_artifact_uri)], ...] = ()
    """Files by URI (``file://``, ``http://``, ``https://``) a node holds in its artifact cache when warm."""


def template_artifacts(settings: Any, template: str | None) -> tuple[str, ...]:
    """What warmth is counted against for ``template``: its artifacts, or ``(template,)`` when the
    settings list none for it (as the spare reconcile's ``warm_units``); ``()`` for no template."""
    if not template:
        return ()
    entry = settings.templates.get(template)
    return entry.artifacts if entry is not None and entry.artifacts else (template,)
