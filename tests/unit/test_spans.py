"""How many calls ran at once, from the spans they report (``fabric.testing.spans``)."""

from fabric.testing.spans import max_overlap, overlap_by_node


def test_max_overlap_counts_calls_open_at_once():
    assert max_overlap([(0, 2), (1, 3), (2.5, 4)]) == 2
    assert max_overlap([]) == 0
    assert overlap_by_node([("a", 0, 1), ("a", 0.5, 2), ("b", 0, 1)]) == {"a": 2, "b": 1}
