#!/usr/bin/env bash
# Provisions a node before it is flashed or booted: replaces the config partition of a raw
# appliance disk image with one made from the given files. The root slots, the ESP and the data
# partition are left alone. Without a kbtp.json the node generates its own secrets at first boot.
#
# Usage: images/appliance/provision.sh DISK.img --config kbtp.json [--network network.conf] [--test-hooks]
#   --config FILE    the node's kbtp.json (tenants, management token; see docs/IMAGE.md)
#   --network FILE   static network settings (IFACE, ADDRESS=a.b.c.d/nn, GATEWAY, DNS); default DHCP
#   --test-hooks     TESTS ONLY: the node obeys "kbtp-test-hook ..." lines on its serial console
set -euo pipefail

die() { echo "provision: $*" >&2; exit 2; }
disk="" config="" network="" hooks=no
while [[ $# -gt 0 ]]; do
  case "$1" in
    --config) config="${2:?--config needs a file}"; shift 2 ;;
    --network) network="${2:?--network needs a file}"; shift 2 ;;
    --test-hooks) hooks=yes; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [[ -z "$disk" ]] || die "one disk image only"; disk="$1"; shift ;;
  esac
done
[[ -f "$disk" ]] || die "give the raw disk image (images/out/kbtp-appliance-<arch>.img or a copy)"
[[ -f "$config" ]] || die "--config: give the node's kbtp.json"
node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$config" 2>/dev/null || die "$config is not valid JSON"
[[ -z "$network" || -f "$network" ]] || die "--network: $network is not a file"

# The config partition's place, from the GPT (sfdisk reads a file as well as a device).
read -r start size < <(sfdisk -J "$disk" | node -e '
  const t = JSON.parse(require("fs").readFileSync(0, "utf8")).partitiontable;
  const p = t.partitions.find((q) => q.name === "kbtp-config");
  if (!p) process.exit(1);
  console.log(p.start, p.size);') || die "$disk has no kbtp-config partition"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/root"
install -m 0600 "$config" "$dir/root/kbtp.json"
[[ -n "$network" ]] && install -m 0600 "$network" "$dir/root/network.conf"
[[ $hooks == yes ]] && echo "enabled by provision.sh --test-hooks" > "$dir/root/test-hooks"
mke2fs -q -t ext4 -L kbtp-config -d "$dir/root" "$dir/config.img" "$((size / 2))k" >/dev/null
dd if="$dir/config.img" of="$disk" bs=512 seek="$start" conv=notrunc,sparse status=none
echo "provisioned $disk: kbtp.json$([[ -n "$network" ]] && echo ", network.conf")$([[ $hooks == yes ]] && echo ", TEST HOOKS")" >&2
