#!/usr/bin/env bash
# deploy/ci/enable-bwrap.sh: make bubblewrap usable on a CI runner, or fail saying why.
#
# `charpin-remote verify` runs an agent's tests under bubblewrap and, on Linux, refuses a box
# where it cannot (--sandbox required): a green verify that ran the patch unconfined is no
# evidence. Ubuntu 23.10 and later (ubuntu-24.04 runners) stop unprivileged user namespaces
# with AppArmor (kernel.apparmor_restrict_unprivileged_userns=1), so bwrap fails with
# "setting up uid map: Permission denied" until a profile lets it make them. This script
# installs bubblewrap when it is missing, loads such a profile for /usr/bin/bwrap only (the
# restriction stays on for every other program), and checks that bwrap really starts.
# Copy to .github/workflows/enable-bwrap.sh beside verify-pr.yml (the reusable action runs its
# own copy). Edit nothing; it needs sudo, as GitHub's hosted runners give it.
set -euo pipefail

if ! command -v bwrap >/dev/null 2>&1; then
  sudo apt-get update -qq
  sudo apt-get install -y -qq bubblewrap >/dev/null
fi
bwrap_path="$(command -v bwrap)"

works() { bwrap --ro-bind / / --dev /dev --proc /proc --unshare-pid --unshare-net -- true 2>/dev/null; }

if ! works; then
  restrict=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
  if [ -r "$restrict" ] && [ "$(cat "$restrict")" = "1" ] && command -v apparmor_parser >/dev/null 2>&1; then
    profile=/etc/apparmor.d/charpin-bwrap
    sudo tee "$profile" >/dev/null <<PROFILE
abi <abi/4.0>,
include <tunables/global>

profile charpin-bwrap $bwrap_path flags=(unconfined) {
  userns,
  include if exists <local/charpin-bwrap>
}
PROFILE
    sudo apparmor_parser -r "$profile"
  fi
fi

if ! works; then
  echo "enable-bwrap: bubblewrap cannot create its namespaces on this runner ($(uname -sr)); verify would refuse the box (--sandbox required). Use a runner that allows unprivileged user namespaces." >&2
  exit 1
fi
echo "enable-bwrap: bubblewrap works ($bwrap_path)"
