"""Inventory and target resolution: --host NAME|ADDRESS|local, --hosts, --tag, --sglang-root.

The 10.x addresses here are data only: resolution never connects, and nothing in this file opens a socket.
"""

from __future__ import annotations

import pytest

from sglops.core.errors import ConfigError, HostNotFound
from sglops.core.hosts import load_inventory, resolve_targets

INVENTORY = """\
defaults:
  user: root
  python: /usr/bin/python3
hosts:
  - name: glm5-box
    address: 10.1.230.174
    identity_file: ~/.ssh/id_ed25519
    sglang_root: /root/sglang
    tags: [sm120, glm5]
  - name: h200
    address: 10.1.230.175
    port: 2222
    gateway: glm5-box
    tags: [sm90]
"""


@pytest.fixture
def inv(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text(INVENTORY)
    return load_inventory(path)


def test_names_addresses_tags_and_overrides(inv):
    (box,) = resolve_targets(host="glm5-box", inventory=inv)
    assert (box.address, box.user, box.sglang_root, box.tags) == (
        "10.1.230.174",
        "root",
        "/root/sglang",
        ("sm120", "glm5"),
    )
    (h200,) = resolve_targets(tag="sm90", inventory=inv)
    assert h200.gateway == "glm5-box" and h200.port == 2222
    both = resolve_targets(hosts="glm5-box,h200", sglang_root="/opt/sgl", inventory=inv)
    assert [h.sglang_root for h in both] == ["/opt/sgl", "/opt/sgl"]


def test_an_address_not_in_the_inventory_works(inv):
    (adhoc,) = resolve_targets(host="10.1.230.174", inventory=inv)
    # ~/.ssh/config fills the rest
    assert adhoc.address == "10.1.230.174" and adhoc.port is None
    (full,) = resolve_targets(host="ubuntu@10.9.8.7:2200", inventory=inv)
    assert (full.user, full.address, full.port) == ("ubuntu", "10.9.8.7", 2200)


def test_local_runs_without_ssh(inv):
    (local,) = resolve_targets(host="local", inventory=inv)
    assert local.is_local


def test_unknown_name_lists_the_inventory(inv):
    with pytest.raises(HostNotFound, match="glm5-box, h200"):
        resolve_targets(host="glm6-box", inventory=inv)
    with pytest.raises(HostNotFound, match="tags in .*: glm5, sm120, sm90"):
        resolve_targets(tag="sm100", inventory=inv)


def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "hosts.yaml"
    bad.write_text("hosts:\n  - name: a\n    address: [unclosed\n")
    with pytest.raises(ConfigError, match=r"hosts.yaml:\d+: malformed YAML"):
        load_inventory(bad)


def test_unknown_field_names_file_and_line(tmp_path):
    bad = tmp_path / "hosts.yaml"
    bad.write_text("hosts:\n  - name: a\n    adress: 1.2.3.4\n")
    with pytest.raises(ConfigError, match=r"hosts.yaml:2: unknown field 'adress'"):
        load_inventory(bad)
