"""The lifecycle helper (issue 13): a str enum, an allowed (from, to) set, TransitionError naming
what, from, to and why; node status keeps its table and messages."""

from enum import Enum

import pytest

from fabric.core.errors import TransitionError
from fabric.core.lifecycle import ALLOWED_TRANSITIONS, NODE_LIFECYCLE, Lifecycle, NodeStatus, check_transition


class Light(str, Enum):
    RED = "red"
    GREEN = "green"
    AMBER = "amber"
    BROKEN = "broken"


LIGHTS = Lifecycle(Light, [(Light.RED, Light.GREEN), (Light.GREEN, Light.AMBER), (Light.AMBER, Light.RED),
                           (Light.RED, Light.BROKEN), (Light.GREEN, Light.BROKEN), (Light.AMBER, Light.BROKEN)],
                   reasons={Light.AMBER: "amber only goes back to red"})


def test_allowed_moves_and_no_ops_pass():
    assert LIGHTS.check("light", Light.RED, Light.GREEN) is Light.GREEN
    assert LIGHTS.check("light", Light.GREEN, Light.GREEN) is Light.GREEN  # staying put is allowed
    assert LIGHTS.allows(Light.AMBER, Light.RED) and not LIGHTS.allows(Light.RED, Light.AMBER)
    assert LIGHTS.successors(Light.RED) == {Light.GREEN, Light.BROKEN}


def test_a_refused_move_names_what_from_to_and_why():
    with pytest.raises(TransitionError) as err:
        LIGHTS.check("light 3", Light.RED, Light.AMBER)
    e = err.value
    assert (e.what, e.from_state, e.to_state, e.why) == ("light 3", "red", "amber", "not an allowed transition")
    with pytest.raises(TransitionError, match="amber only goes back to red"):
        LIGHTS.check("light", Light.AMBER, Light.GREEN)
    with pytest.raises(TransitionError, match="broken is terminal"):
        LIGHTS.check("light", Light.BROKEN, Light.RED)
    with pytest.raises(TransitionError, match="because"):
        LIGHTS.check("light", Light.BROKEN, Light.RED, why="because")


def test_terminal_states_have_no_way_out():
    assert LIGHTS.terminal == {Light.BROKEN} and LIGHTS.is_terminal(Light.BROKEN)
    assert NODE_LIFECYCLE.terminal == {NodeStatus.DEAD}


def test_a_table_mixing_enums_is_refused():
    with pytest.raises(TypeError):
        Lifecycle(Light, [(Light.RED, NodeStatus.ACTIVE)])


def test_node_status_keeps_its_table_and_its_message():
    assert ALLOWED_TRANSITIONS[NodeStatus.ACTIVE] == {NodeStatus.DRAINING, NodeStatus.OFFLINE, NodeStatus.DEAD}
    assert ALLOWED_TRANSITIONS[NodeStatus.DEAD] == frozenset()
    assert check_transition("n", NodeStatus.OFFLINE, NodeStatus.DRAINING) is NodeStatus.DRAINING
    with pytest.raises(TransitionError) as err:
        check_transition("node n1", NodeStatus.DEAD, NodeStatus.ACTIVE)
    assert err.value.why == "dead is terminal: a rejoining node is a new record"
