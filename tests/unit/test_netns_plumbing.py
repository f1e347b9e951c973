"""The namespace fleet's pure parts (no root, no namespaces): the /28 allocator, the names it
gives what it creates, the one-way drop rules and the run records."""

from __future__ import annotations

import ipaddress
import os
import subprocess

import pytest

from fabric.testing.netns_net import (
    FLEET_RANGE, Names, NetnsError, RunRecord, networks_in_use, one_way_iptables, one_way_rules, pick_subnet, pid_alive, process_start, subnets,
)

ROUTES = """default via 192.0.2.1 dev eth0
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
"""
ADDRS = """1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536
    inet 127.0.0.1/8 scope host lo
2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500
    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0
"""


def net(text: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(text)


def test_the_range_is_sixteen_28s_of_test_net_2():
    subs = subnets()
    assert len(subs) == 16 and all(s.prefixlen == 28 and s.subnet_of(FLEET_RANGE) for s in subs)
    assert subs[0] == net("198.51.100.0/28") and subs[-1] == net("198.51.100.240/28")


def test_networks_in_use_reads_routes_and_addresses_but_not_the_default_route():
    found = networks_in_use(ROUTES + "198.51.100.16/28 dev afb123456 proto kernel scope link\n", ADDRS)
    assert net("198.51.100.16/28") in found and net("192.0.2.0/24") in found and net("127.0.0.0/8") in found
    assert net("192.0.2.2/32") in found
    assert not any(n == net("0.0.0.0/0") for n in found)
    assert networks_in_use("unreachable 198.51.100.64/28\nnonsense words\n", "") == [net("198.51.100.64/28")]


def test_pick_takes_the_first_free_28():
    assert pick_subnet(networks_in_use(ROUTES, ADDRS), []) == (0, net("198.51.100.0/28"))


def test_pick_skips_a_28_with_a_route_and_one_another_run_recorded():
    in_use = networks_in_use(ROUTES + "198.51.100.0/28 dev afbaaaaaa scope link\n", ADDRS)
    assert pick_subnet(in_use, [1]) == (2, net("198.51.100.32/28"))


def test_pick_refuses_any_28_that_an_address_or_wider_route_overlaps():
    # an address inside the third /28, the fourth recorded, and a /27 covering the fifth and sixth
    in_use = [net("198.51.100.35/32"), net("198.51.100.64/27")]
    index, chosen = pick_subnet(in_use, [0, 1, 3])
    assert (index, chosen) == (6, net("198.51.100.96/28"))
    assert not any(chosen.overlaps(n) for n in in_use)


def test_pick_never_leaves_the_range_and_says_why_when_nothing_is_free():
    with pytest.raises(NetnsError, match="no free /28 in 198.51.100.0/24"):
        pick_subnet([net("198.51.100.0/24")], [])
    with pytest.raises(NetnsError, match="another run"):
        pick_subnet([], range(16))
    for taken in range(16):
        index, chosen = pick_subnet([], [i for i in range(16) if i != taken])
        assert index == taken and chosen.subnet_of(FLEET_RANGE)


def test_names_fit_linux_link_names_and_carry_the_run_id():
    names = Names("0a1b2c")
    links = [names.bridge, names.veth_root(13), names.veth_peer(13)]
    assert all(len(n) <= 15 and "0a1b2c" in n for n in links) and len(set(links)) == 3
    assert names.namespace("head") == "af-0a1b2c-head"
    assert names.nft_table(2) == "afnet0a1b2cx02" and names.nft_table(2) != names.nft_table(3)


@pytest.mark.parametrize("bad", ["", "ABCDEF", "12345", "1234567", "zzzzzz"])
def test_a_run_id_is_six_lowercase_hex_digits(bad):
    with pytest.raises(ValueError, match="six lowercase hex"):
        Names(bad)


@pytest.mark.parametrize("host", ["", "a b", "../x", "x;y"])
def test_a_host_name_that_is_no_plain_word_is_refused(host):
    with pytest.raises(ValueError, match="letters, digits"):
        Names("abcdef").namespace(host)


def test_one_way_rules_drop_ipv4_from_or_to_the_host_link_only():
    out = one_way_rules("afnetabcdefx01", "afvabcdefx01", "out")
    assert out.startswith("table bridge afnetabcdefx01 {")
    assert 'iifname "afvabcdefx01" drop' in out and "oifname" not in out
    assert "hook forward" in out and "hook input" in out and "hook output" not in out
    assert "ether type ip " in out  # ARP passes
    inward = one_way_rules("afnetabcdefx01", "afvabcdefx01", "in")
    assert 'oifname "afvabcdefx01" drop' in inward and "iifname" not in inward
    assert "hook forward" in inward and "hook output" in inward and "hook input" not in inward
    with pytest.raises(ValueError, match="one of in, out"):
        one_way_rules("t", "l", "both")


def test_a_run_record_round_trips_and_a_broken_one_reads_as_none(tmp_path):
    path = tmp_path / "3.json"
    rec = RunRecord(pid=1, run_id="abcdef", index=3, subnet="198.51.100.48/28", folder="/tmp/afn-abcdef",
                    namespaces=["af-abcdef-head"], links=["afbabcdef"], pgids=[42])
    path.write_text(__import__("json").dumps(rec.__dict__))
    assert RunRecord.load(path) == rec
    path.write_text("{half")
    assert RunRecord.load(path) is None
    path.write_text('{"pid": 1}')
    assert RunRecord.load(path) is None


def test_pid_alive_tells_a_living_process_from_a_reaped_one():
    assert pid_alive(os.getpid())
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not pid_alive(proc.pid)


def test_a_record_owner_is_alive_only_with_its_pid_and_its_start_time():
    mine = process_start(os.getpid())
    assert mine is not None
    rec = RunRecord(pid=os.getpid(), run_id="abcdef", index=0, subnet="198.51.100.0/28", folder="", started=mine)
    assert rec.owner_alive()
    assert not RunRecord(pid=os.getpid(), run_id="abcdef", index=0, subnet="", folder="", started="1").owner_alive()
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert process_start(proc.pid) is None
    assert not RunRecord(pid=proc.pid, run_id="abcdef", index=0, subnet="", folder="").owner_alive()


def test_one_way_iptables_drops_from_or_to_the_host_address_in_a_chain_of_its_own():
    out = one_way_iptables("afnetabcdefx01", "198.51.100.3", "out")
    assert out[0] == ["iptables", "-w", "-N", "afnetabcdefx01"]
    assert out[1] == ["iptables", "-w", "-A", "afnetabcdefx01", "-s", "198.51.100.3", "-j", "DROP"]
    assert [c[3] for c in out[2:]] == ["FORWARD", "INPUT"] and all(c[-1] == "afnetabcdefx01" for c in out[2:])
    inward = one_way_iptables("afnetabcdefx01", "198.51.100.3", "in")
    assert inward[1][4:6] == ["-d", "198.51.100.3"] and [c[3] for c in inward[2:]] == ["FORWARD", "OUTPUT"]
    with pytest.raises(ValueError, match="one of in, out"):
        one_way_iptables("c", "198.51.100.3", "sideways")
