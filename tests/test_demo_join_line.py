"""What `swarmhub demo` says about joining from another machine (the end-to-end case, a peer on
another host joining with the printed line, is tests/multihost/test_demo_across_hosts.py)."""

from __future__ import annotations

from launch.demo import OPEN_UP, join_lines

COMMAND = "swarmhub-peer join http://127.0.0.1:8000 --token abc"


def test_on_loopback_it_says_so_and_how_to_open_it_up():
    lines = join_lines("127.0.0.1", "", COMMAND)
    assert lines[0].endswith(COMMAND)
    assert "loopback" in lines[1] and "other machines cannot join" in lines[1]
    assert "--host 0.0.0.0 --public-url http://" in lines[1] and OPEN_UP in lines[1]


def test_with_a_public_url_it_prints_the_command_for_other_machines():
    command = "swarmhub-peer join http://192.0.2.7:8000 --token abc"
    assert join_lines("0.0.0.0", "http://192.0.2.7:8000", command) == [
        f"join from another machine: {command}"
    ]


def test_on_every_interface_without_a_public_url_it_warns_about_the_host_name():
    lines = join_lines("0.0.0.0", "", "swarmhub-peer join http://box:8000 --token abc")
    assert lines[0] == "join from another machine: swarmhub-peer join http://box:8000 --token abc"
    assert "host name" in lines[1] and OPEN_UP in lines[1]


def test_a_fresh_machine_is_told_how_to_install_the_peer_first():
    install = 'pip install "swarmhub[peer] @ http://192.0.2.7:8000/downloads/swarmhub-0.1.0-py3-none-any.whl"'
    command = "swarmhub-peer join http://192.0.2.7:8000 --token abc"
    assert join_lines("0.0.0.0", "http://192.0.2.7:8000", command, install) == [
        f"install the peer on another machine: {install}",
        f"join from another machine: {command}",
    ]
