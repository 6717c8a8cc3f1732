"""Host names → HostSpecs through ssh_config, and `[tool.charpin.hosts]` extras (no network).

Each resolution test runs with both readers: OpenSSH's `ssh -G` (what charpin uses where the
client is installed) and paramiko's parser (the fallback without it). OpenSSH expands `~` to the
passwd entry's home, paramiko to $HOME: `tilde` is the one the reader uses.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from charpin_coordinator.remote import openssh
from charpin_coordinator.remote.hosts import (
    HostExtras,
    HostSpec,
    decode_host_extras,
    parse_host_list,
    resolve_hosts,
)
from charpin_coordinator.remote.ssh import remote_command
from charpin_runner.errors import ConfigError, UsageError


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake HOME so ~ in ssh_config and the default ~/.ssh/config never touch the real one."""
    folder = tmp_path / "home"
    (folder / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(folder))
    return folder


@pytest.fixture(params=["openssh", "paramiko"])
def ssh(request: pytest.FixtureRequest) -> str | None:
    """The reader: the OpenSSH client for `ssh -G`, or None for paramiko's parser."""
    if request.param == "paramiko":
        return None
    client = openssh.find_ssh()
    if client is None:
        pytest.skip("no OpenSSH client here (apt-get install openssh-client)")
    return client


@pytest.fixture
def tilde(ssh: str | None, home: Path) -> Path:
    return openssh.home_dir() if ssh else home


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_ssh_config_fields_are_honoured(ssh: str | None, tilde: Path, tmp_path: Path) -> None:
    config = write(
        tmp_path / "ssh_config",
        "Host ci\n"
        "    HostName 10.1.2.3\n"
        "    Port 2222\n"
        "    User builder\n"
        "    IdentityFile ~/.ssh/ci_key\n"
        "    IdentityFile /keys/second\n"
        "    IdentitiesOnly yes\n"
        "    UserKnownHostsFile ~/.ssh/ci_known /etc/ci_known\n"
        "    GlobalKnownHostsFile /etc/ssh/fleet_known\n"
        "Host *\n"
        "    User fallback\n",
    )
    extras = {"ci": HostExtras(python="/opt/py/bin/python3", timeout=60.0)}
    # Configured identities are kept as written (OpenSSH skips only missing default ones).
    [spec] = resolve_hosts(["ci"], ssh_config=config, extras=extras, ssh=ssh)
    assert spec == HostSpec(
        name="ci",
        hostname="10.1.2.3",
        port=2222,
        user="builder",
        identity_files=(f"{tilde}/.ssh/ci_key", "/keys/second"),
        identities_only=True,
        user_known_hosts=(f"{tilde}/.ssh/ci_known", "/etc/ci_known"),
        global_known_hosts=("/etc/ssh/fleet_known",),
        extras=extras["ci"],
    )
    assert spec.endpoint == "[10.1.2.3]:2222"
    assert spec.known_hosts_files[0] == f"{tilde}/.ssh/ci_known"


def test_defaults_follow_openssh(ssh: str | None, tilde: Path, tmp_path: Path) -> None:
    config = write(tmp_path / "ssh_config", "Host plain\n    HostName plain.example\n")
    [spec] = resolve_hosts(["plain"], ssh_config=config, ssh=ssh)
    assert (spec.port, spec.identities_only) == (22, False)
    # ssh -G lists OpenSSH's default identities; only those that exist are kept.
    assert all(Path(p).is_file() for p in spec.identity_files)
    assert spec.endpoint == "plain.example"
    assert spec.known_hosts_files == (
        f"{tilde}/.ssh/known_hosts",
        f"{tilde}/.ssh/known_hosts2",
        "/etc/ssh/ssh_known_hosts",
        "/etc/ssh/ssh_known_hosts2",
    )


def test_user_ssh_config_is_used_without_flag(home: Path) -> None:
    # paramiko's reader only: ssh -G reads the passwd home's ~/.ssh/config, which tests leave be.
    write(home / ".ssh" / "config", "Host mine\n    HostName 192.0.2.7\n    Port 2200\n")
    [spec] = resolve_hosts(["mine"], ssh_config=None, ssh=None)
    assert (spec.hostname, spec.port) == ("192.0.2.7", 2200)


def test_builtin_boxes_are_never_looked_up(home: Path) -> None:
    specs = resolve_hosts(["local", "clean"], extras={"clean": HostExtras(timeout=5.0)})
    assert [(s.name, s.builtin) for s in specs] == [("local", True), ("clean", True)]
    assert specs[1].extras.timeout == 5.0


def test_unknown_name_lists_the_files_searched(home: Path) -> None:
    write(home / ".ssh" / "config", "Host *\n    User everyone\nHost other\n    Port 1\n")
    with pytest.raises(UsageError) as caught:
        resolve_hosts(["local", "ci"], ssh_config=None, ssh=None)
    assert str(caught.value) == (
        f"unknown host 'ci': no Host block matches it (OpenSSH is not installed: Include is "
        f"not read) in {home}/.ssh/config, /etc/ssh/ssh_config; add `Host ci` with a HostName "
        "there, or pass --ssh-config FILE"
    )


def test_unknown_name_under_openssh_says_what_unknown_means(
    ssh: str | None, tmp_path: Path
) -> None:
    config = write(
        tmp_path / "c",
        "Host *\n    User everyone\n    IdentityFile ~/.ssh/k_%h\nHost ci-bx\n    Port 1\n",
    )
    with pytest.raises(UsageError) as caught:
        resolve_hosts(["ci-box"], ssh_config=config, ssh=ssh)
    message = str(caught.value)
    assert message.startswith("unknown host 'ci-box': ")
    assert f" in {config}; did you mean ci-bx? Otherwise add `Host ci-box` with a" in message
    if ssh:
        assert "ssh -G finds no Host or Match block for it beyond those for every host" in message
    assert "\n" not in message


def test_wildcard_host_blocks_count_but_a_bare_star_does_not(
    ssh: str | None, tmp_path: Path
) -> None:
    config = write(tmp_path / "c", "Host ci-* !ci-skip\n    User ci\nHost *\n    Port 2\n")
    [spec] = resolve_hosts(["ci-7"], ssh_config=config, ssh=ssh)
    assert (spec.user, spec.port) == ("ci", 2)
    with pytest.raises(UsageError, match="unknown host 'web'"):
        resolve_hosts(["web"], ssh_config=config, ssh=ssh)
    if ssh:  # paramiko's reader does not apply the negation
        with pytest.raises(UsageError, match="unknown host 'ci-skip'"):
            resolve_hosts(["ci-skip"], ssh_config=config, ssh=ssh)


def test_missing_ssh_config_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--ssh-config .*nope: no such file"):
        resolve_hosts(["ci"], ssh_config=tmp_path / "nope")


@pytest.mark.parametrize(
    "alias",
    ["ci box", "q'uote", "$HOME", "a;touch pwned", "-oProxyCommand=touch pwned", "x`id`", "u@ci"],
)
def test_a_name_openssh_refuses_is_refused_by_both_readers(
    ssh: str | None, alias: str, tmp_path: Path
) -> None:
    # OpenSSH refuses these as host names (ssh -G: "hostname contains invalid characters");
    # charpin refuses them the same way with either reader, before anything runs.
    config = write(tmp_path / "c", f'Host "{alias}"\n    HostName 127.0.0.9\n')
    with pytest.raises(UsageError) as caught:
        resolve_hosts([alias], ssh_config=config, ssh=ssh)
    assert str(caught.value).startswith(f"box name {alias!r} is not a host name OpenSSH accepts")
    assert "rename its Host alias" in str(caught.value)
    assert not list(tmp_path.rglob("pwned"))


def test_odd_but_valid_alias_is_only_looked_up(ssh: str | None, tmp_path: Path) -> None:
    alias = "ci*box?q!x~%h+ü"
    config = write(tmp_path / "c", "Host ci*box?q!x~%h+ü\n    HostName 127.0.0.9\n")
    [spec] = resolve_hosts([alias], ssh_config=config, ssh=ssh)
    assert (spec.name, spec.hostname) == (alias, "127.0.0.9")


def test_include_and_match_are_read_as_openssh_reads_them(tmp_path: Path) -> None:
    ssh = openssh.find_ssh()
    if ssh is None:
        pytest.skip("no OpenSSH client here")
    extra = tmp_path / "conf.d"
    extra.mkdir()
    write(extra / "scratch.conf", "Host scratch\n    HostName 10.9.8.7\n    Port 2201\n")
    config = write(
        tmp_path / "c",
        f"Include {extra}/*.conf\n"
        "Match originalhost build-*\n    User builder\n    HostName %h.build.example\n"
        "Host *\n    IdentityFile ~/.ssh/id_%h\n",
    )
    [scratch, build] = resolve_hosts(["scratch", "build-3"], ssh_config=config, ssh=ssh)
    assert (scratch.hostname, scratch.port) == ("10.9.8.7", 2201)
    assert (build.user, build.hostname) == ("builder", "build-3.build.example")
    # paramiko's parser reads neither the Include nor `Match originalhost`:
    with pytest.raises(UsageError, match="unknown host 'scratch'"):
        resolve_hosts(["scratch"], ssh_config=config, ssh=None)


def test_identity_file_tokens_are_expanded(tmp_path: Path) -> None:
    ssh = openssh.find_ssh()
    if ssh is None:
        pytest.skip("no OpenSSH client here")
    config = write(
        tmp_path / "c",
        "Host tok\n    HostName 10.1.1.1\n    User deploy\n    Port 2022\n"
        f"    IdentityFile {tmp_path}/%h_%r_%p_%n_%%\n",
    )
    [spec] = resolve_hosts(["tok"], ssh_config=config, ssh=ssh)
    assert spec.identity_files == (f"{tmp_path}/10.1.1.1_deploy_2022_tok_%",)


def test_proxyjump_chain_resolves_each_hop_through_the_config(tmp_path: Path) -> None:
    config = write(
        tmp_path / "c",
        "Host target\n    HostName 10.0.0.5\n    ProxyJump ops@bastion:2022,inner\n"
        "Host bastion\n    HostName bastion.example\n    User nobody\n"
        "Host inner\n    HostName 10.0.0.2\n    User deploy\n",
    )
    [spec] = resolve_hosts(["target"], ssh_config=config)
    hops = [(h.name, h.hostname, h.port, h.user) for h in spec.proxy_jump]
    assert hops == [
        ("bastion", "bastion.example", 2022, "ops"),
        ("inner", "10.0.0.2", 22, "deploy"),
    ]


def test_proxyjump_loop_is_refused(tmp_path: Path) -> None:
    config = write(tmp_path / "c", "Host a\n    ProxyJump b\nHost b\n    ProxyJump a\n")
    with pytest.raises(ConfigError, match=r"ProxyJump loops or nests too deep \(a -> b -> a\)"):
        resolve_hosts(["a"], ssh_config=config)


def test_host_extras_decode_strictly() -> None:
    table = {"ci": {"python": "/usr/bin/python3.12", "setup": ["make deps"], "timeout": 90,
                    "env": ["LANG", "TZ"]}}  # fmt: skip
    assert decode_host_extras(table) == {
        "ci": HostExtras(python="/usr/bin/python3.12", setup=["make deps"], timeout=90.0,
                         env=["LANG", "TZ"])
    }  # fmt: skip
    assert decode_host_extras(None) == {}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"ci": {"timeout": "soon"}},
            "Expected `float | null`, got `str` - at `$.tool.charpin.hosts.ci.timeout`",
        ),
        ({"ci": {"pyhton": "x"}}, "unknown field `pyhton` - at `$.tool.charpin.hosts.ci`"),
        ({"ci": {"timeout": 0}}, "timeout must be a positive number of seconds"),
        ({"ci": {"env": ["GITHUB_TOKEN"]}}, "GITHUB_TOKEN looks like a secret"),
        ({"ci": {"env": ["SSH_AUTH_SOCK"]}}, "SSH_AUTH_SOCK looks like a secret"),
        ({"ci": {"env": ["AWS_SECRET_ACCESS_KEY"]}}, "AWS_SECRET_ACCESS_KEY looks like a secret"),
        ({"ci": {"env": ["DB_PASSWORD"]}}, "DB_PASSWORD looks like a secret"),
        ({"ci": {"env": ["A B"]}}, "'A B' is not an environment variable name"),
        ({"ci": []}, "Expected `object`, got `array` - at `$.tool.charpin.hosts.ci`"),
    ],
)
def test_host_extras_errors_name_the_path(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decode_host_extras(table)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_host_list_parsing() -> None:
    assert parse_host_list("ci, clean") == ["ci", "clean"]
    with pytest.raises(UsageError, match="names 'ci' twice"):
        parse_host_list("ci,ci")
    with pytest.raises(UsageError, match="empty name"):
        parse_host_list("ci,,b")


def test_remote_command_quotes_every_element() -> None:
    hostile = ["printf", "%s|", "a b;$x'", "$(id)", "`id`", "\\n"]
    line = remote_command(hostile)
    assert line.startswith("exec /bin/sh -c ")
    # What sshd does with it: hand it to the login shell, which must run exactly that argv.
    done = subprocess.run(["sh", "-c", line], capture_output=True, check=True)
    assert done.stdout == "|".join(hostile[2:]).encode() + b"|"
    # Its process group first, on stderr, for a kill through a second channel.
    assert done.stderr.startswith(b"charpin-pid ") and done.stderr.split()[1].isdigit()


def test_remote_command_with_a_deadline_runs_under_the_boxs_timeout() -> None:
    line = remote_command(["sh", "-c", "echo $PPID; cat /proc/$PPID/comm"], deadline=30)
    done = subprocess.run(["sh", "-c", line], capture_output=True, check=True)
    assert done.stdout.split(b"\n")[1] == b"timeout"
    # Without `timeout` on the box (not on PATH) the program still runs, unwatched.
    line = remote_command(["/bin/echo", "ran"], deadline=30)
    bare = {"PATH": "/none"}
    done = subprocess.run(["/bin/sh", "-c", line], capture_output=True, env=bare, check=False)
    assert done.returncode == 0 and done.stdout == b"ran\n", done


def test_a_hostname_that_is_not_one_is_refused(ssh: str | None, tmp_path: Path) -> None:
    config = write(tmp_path / "c", "Host odd\n    HostName ops@odd.example\n")
    with pytest.raises(ConfigError, match="is not a host name; set `HostName`"):
        resolve_hosts(["odd"], ssh_config=config, ssh=ssh)
