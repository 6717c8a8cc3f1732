#!/usr/bin/env bash
# hcloud-provision.sh: a fresh Hetzner Cloud server as a disposable charpin-remote box.
# Copy to your repository (for example ci/hcloud-provision.sh, next to hcloud-dispose.sh) and
# name both in this machine's pyproject.toml. Edit TYPE, IMAGE and LOCATION below (or set
# CHARPIN_HCLOUD_TYPE, _IMAGE, _LOCATION). Needs the hcloud CLI with HCLOUD_TOKEN in the
# environment, ssh, ssh-keygen and python3 on this machine.
#
#     [tool.charpin.hosts.hetzner]
#     provision = ["bash ci/hcloud-provision.sh"]
#     dispose = ["bash ci/hcloud-dispose.sh"]
#     timeout = 1800
#
# Every hcloud flag used here was checked against the hcloud CLI reference in
# github.com/hetznercloud/cli, docs/reference/manual/: hcloud_ssh-key_create.md,
# hcloud_ssh-key_delete.md, hcloud_server_create.md (--name --type --image --location --ssh-key
# --user-data-from-file --label), hcloud_server_ip.md and hcloud_server_delete.md; cloud-init's
# `ssh_keys` (ed25519_private/ed25519_public), `ssh_deletekeys` and `ssh_genkeytypes` against
# its cc_ssh module documentation (doc/module-docs/cc_ssh in github.com/canonical/cloud-init).

# How the host key is known without trusting the network: it is generated here and handed to the
# server in its cloud-init user-data (`ssh_keys:`), so the key printed for charpin-remote is the
# one this script made, never one read back over SSH (no ssh-keyscan, no trust on first use).
# The private host key travels to Hetzner in the user-data and stays readable from the server's
# metadata service: fine for a server that lives for one run, not for a long-lived one.
# Output: the JSON line charpin-remote reads, and nothing else on stdout (hcloud talks to stderr).
# If anything fails after the server was created, the server is deleted here (no id is printed,
# so charpin-remote has nothing to dispose).

set -euo pipefail

TYPE=${CHARPIN_HCLOUD_TYPE:-cx22}
IMAGE=${CHARPIN_HCLOUD_IMAGE:-debian-12}
LOCATION=${CHARPIN_HCLOUD_LOCATION:-fsn1}
KEYS=${CHARPIN_HCLOUD_KEYS:-.charpin/hcloud}   # client keys, until dispose removes them
WAIT_SECONDS=${CHARPIN_HCLOUD_WAIT:-300}

name="charpin-$(date -u +%Y%m%d%H%M%S)-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
work=$(mktemp -d)
keys="$KEYS/$name"
created=""

cleanup() {
    status=$?
    # The project-wide SSH key was only needed while the server was created.
    hcloud ssh-key delete "$name" >/dev/null 2>&1 || true
    if [ "$status" -ne 0 ]; then
        if [ -n "$created" ] && ! hcloud server delete "$name" >&2; then
            echo "hcloud-provision: could not delete server $name; delete it by hand" >&2
        fi
        rm -rf "$keys"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$keys"
chmod 700 "$keys"
ssh-keygen -q -t ed25519 -N '' -C "$name-host" -f "$work/host_key"
ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$keys/client_key"
host_pub=$(cut -d' ' -f1,2 "$work/host_key.pub")

{
    echo '#cloud-config'
    echo 'ssh_deletekeys: true'
    echo 'ssh_genkeytypes: []'
    echo 'ssh_keys:'
    echo '  ed25519_private: |'
    sed 's/^/    /' "$work/host_key"
    echo "  ed25519_public: $host_pub"
    echo 'packages: [git, python3-venv, python3-pip]'
} > "$work/user-data.yaml"

hcloud ssh-key create --name "$name" --public-key-from-file "$keys/client_key.pub" >&2
created=1   # set before the call: an interrupted create may still have made the server
hcloud server create --name "$name" --type "$TYPE" --image "$IMAGE" --location "$LOCATION" \
    --ssh-key "$name" --user-data-from-file "$work/user-data.yaml" \
    --label charpin=disposable >&2
ip=$(hcloud server ip "$name")

# Wait for SSH with the pinned key only, then for cloud-init (the packages) to finish.
printf '%s %s\n' "$ip" "$host_pub" > "$work/known_hosts"
ssh_opts=(-o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes
          -o "UserKnownHostsFile=$work/known_hosts" -o GlobalKnownHostsFile=/dev/null
          -o ConnectTimeout=5 -i "$keys/client_key")
deadline=$((SECONDS + WAIT_SECONDS))
until ssh "${ssh_opts[@]}" "root@$ip" true 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        echo "hcloud-provision: $name ($ip) did not answer SSH with its key in ${WAIT_SECONDS}s" >&2
        exit 1
    fi
    sleep 3
done
# cloud-init exits 2 for recoverable errors (a package mirror hiccup); 1 is a real failure.
rc=0
ssh "${ssh_opts[@]}" "root@$ip" cloud-init status --wait >/dev/null || rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
    echo "hcloud-provision: cloud-init failed on $name (exit $rc)" >&2
    exit 1
fi

python3 -c 'import json, sys
host, key, identity, name = sys.argv[1:]
print(json.dumps({"host": host, "port": 22, "user": "root", "host_key": key,
                  "identity_file": identity, "id": name}))' \
    "$ip" "$host_pub" "$(cd "$keys" && pwd)/client_key" "$name"
