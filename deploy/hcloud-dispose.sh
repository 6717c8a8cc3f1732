#!/usr/bin/env bash
# hcloud-dispose.sh: delete a Hetzner Cloud server made by hcloud-provision.sh.
# Copy to the same folder as hcloud-provision.sh; charpin-remote runs it with CHARPIN_HOST_ID
# set to the server name provision printed. Edit KEYS if you changed it in hcloud-provision.sh.
# `hcloud server delete <server>...` checked against docs/reference/manual/hcloud_server_delete.md
# in github.com/hetznercloud/cli.

# A non-zero exit makes charpin-remote print DISPOSE FAILED with the server name to delete by
# hand; the client key is only removed once the server is gone.

set -euo pipefail

KEYS=${CHARPIN_HCLOUD_KEYS:-.charpin/hcloud}
id=${CHARPIN_HOST_ID:?CHARPIN_HOST_ID is not set; charpin-remote sets it to the server name}

case "$id" in
    charpin-*[!A-Za-z0-9-]*|"") echo "hcloud-dispose: refusing odd id '$id'" >&2; exit 2 ;;
    charpin-*) ;;
    *) echo "hcloud-dispose: '$id' was not made by hcloud-provision.sh; refusing" >&2; exit 2 ;;
esac

hcloud server delete "$id" >&2
rm -rf "${KEYS:?}/$id"
