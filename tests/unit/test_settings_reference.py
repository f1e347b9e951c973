"""The example settings file and docs/settings.md are what ``scripts/settings_reference.py`` writes
now: a field added without a docstring, or a default changed, fails here until it is run again."""

import re
import runpy
from pathlib import Path

import yaml

from fabric.core.settings import FabricSettings
from fabric.core.settings_check import check_settings_file

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "fabric" / "data" / "fabric.yaml"
COPY = ROOT / "examples" / "fabric.yaml"
SCRIPT = runpy.run_path(str(ROOT / "scripts" / "settings_reference.py"))


def test_the_example_and_its_copy_are_the_same_bytes():
    assert SHIPPED.read_bytes() == COPY.read_bytes()


def test_the_example_loads_as_the_defaults_and_is_valid():
    assert FabricSettings.from_yaml(SHIPPED) == FabricSettings()
    assert check_settings_file(SHIPPED) == []


def test_the_example_shows_every_top_level_field_as_a_key():
    data = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    assert set(FabricSettings.model_fields) <= set(data)


def test_the_example_names_every_field_of_every_section():
    text = SHIPPED.read_text(encoding="utf-8")
    for path, model in SCRIPT["sections"]():
        for name in model.model_fields:
            assert re.search(rf"^[ #]*(- )?{name}:", text, re.MULTILINE), f"{path or 'top level'}.{name} is not in the example"


def test_the_example_and_the_reference_are_up_to_date():
    assert SHIPPED.read_text(encoding="utf-8") == SCRIPT["render_example"](), "run scripts/settings_reference.py"
    assert (ROOT / "docs" / "settings.md").read_text(encoding="utf-8") == SCRIPT["render_reference"](), \
        "run scripts/settings_reference.py"


def test_every_field_has_a_docstring():
    for path, model in SCRIPT["sections"]():
        for name, info in model.model_fields.items():
            assert (info.description or "").strip(), f"{path or 'top level'}.{name} has no docstring"


def _commented_blocks(text: str) -> dict[str, object]:
    """Each commented-out example block (``# routes:`` and the lines under it), uncommented and read."""
    lines = text.splitlines()
    out = {}
    for i, line in enumerate(lines):
        m = re.match(r"^( *)# ([a-z_]+):$", line)
        if not m:
            continue
        pad = len(m.group(1))
        block = [line[pad + 2:]]
        for later in lines[i + 1:]:  # the block's lines sit deeper than its `# key:` line
            if later[:pad].strip() or later[pad:pad + 3] != "#  ":
                break
            block.append(later[pad + 2:])
        out.update(yaml.safe_load("\n".join(block)))
    return out


def test_the_commented_out_examples_are_valid_entries():
    """Uncommented, each example block (a pool tier's shape and command block, a hot spare, a template,
    a route, a node override) is a valid entry where it stands."""
    blocks = _commented_blocks(SHIPPED.read_text(encoding="utf-8"))
    assert set(blocks) == {"candidate_shapes", "command", "hot_spares", "templates", "routes", "nodes"}
    shapes = blocks.pop("candidate_shapes")
    tier = {"name": "burst", "provider": "local", "scale_out": "elastic", "candidate_shapes": shapes}
    command = {"name": "scripts", "provider": "command", "scale_out": "elastic", "candidate_shapes": shapes,
               "command": blocks.pop("command")}
    assert FabricSettings.load({"pools": [{"name": "default", "tiers": [command]}]}).pools[0].tiers[0].command is not None
    settings = FabricSettings.load({"pools": [{"name": "default", "tiers": [tier]}], **blocks})
    assert settings.pools[0].tiers[0].candidate_shapes[0].name == shapes[0]["name"]
    assert list(settings.routes) == list(blocks["routes"])


def test_the_generated_text_cites_no_design_documents():
    """The models' docstrings cite design notes by number; the reference and the example leave those out."""
    for text in (SCRIPT["render_reference"](), SCRIPT["render_example"]()):
        assert not re.search(r"\bseed\b|\bissue \d+", text, re.IGNORECASE)
