#!/bin/busybox sh
# /init of the RDMA peer guest. Brings up eth0 on QEMU user networking (10.0.2.15, the host
# is 10.0.2.2) and loads siw on it as siw0; when QEMU gave it a second NIC (eth1, a layer-2 UDP
# tunnel whose other end is a host program), eth1 is 10.0.4.15/24 with Soft-RoCE on it as rxe0.
# Then it runs the peer script handed over on the kernel command line (kbtp.peer=<base64>) and always powers off. The last console line before power-off is
# "KBTP-PEER-EXIT=<status>"; a line "KBTP-GUEST-FAILED: <why>" means the guest never got to the peer.
/bin/busybox --install -s /usr/bin
export PATH=/usr/sbin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run

uptime_s() { cut -d' ' -f1 /proc/uptime; }
finish() {
  echo "KBTP-PEER-EXIT=$1"
  sync
  poweroff -f
  reboot -f # -no-reboot on the QEMU side turns this into an exit too
}
fail() { echo "KBTP-GUEST-FAILED: $*"; finish 125; }

# Functions the peer script may use.
# wait_tcp_listen PORT [TIMEOUT_S]: until a TCP socket listens on PORT (siw's listener is a kernel
# TCP socket, so this tells the host when rping -s can take a connection).
wait_tcp_listen() {
  hex=$(printf '%04X' "$1")
  tries=$(( ${2:-30} * 10 ))
  while [ "$tries" -gt 0 ]; do
    grep -q ":$hex [0-9A-F]*:0000 0A " /proc/net/tcp && return 0
    sleep 0.1
    tries=$((tries - 1))
  done
  return 1
}

# rxe_gid_index: the index of rxe0's RoCEv2 GID for eth1's IPv4 address (::ffff:10.0.4.15), which
# ibv_rc_pingpong -g and perftest -x want; found in sysfs rather than assumed, since the table's
# order depends on which addresses eth1 had when rxe0 was added.
rxe_gid_index() {
  port=/sys/class/infiniband/rxe0/ports/1
  for gid in "$port"/gids/*; do
    index=${gid##*/}
    if [ "$(cat "$gid")" = "0000:0000:0000:0000:0000:ffff:0a00:040f" ] \
      && [ "$(cat "$port/gid_attrs/types/$index" 2>/dev/null)" = "RoCE v2" ]; then
      echo "$index"
      return 0
    fi
  done
  return 1
}

echo "KBTP-GUEST: init at $(uptime_s)s"
for module in $(cat /modules/order); do
  insmod "/modules/$module.ko" || fail "insmod $module"
done
ip link set lo up
ip link set eth0 up || fail "no eth0"
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
[ -e /dev/infiniband/rdma_cm ] || fail "no /dev/infiniband/rdma_cm"
echo "KBTP-GUEST: siw0 up at $(uptime_s)s"
if [ -e /sys/class/net/eth1 ]; then
  # No IPv6 on the tunnel: no link-local GIDs, no neighbour discovery noise in the capture.
  echo 1 > /proc/sys/net/ipv6/conf/eth1/disable_ipv6
  ip link set eth1 up || fail "eth1 does not come up"
  ip addr add 10.0.4.15/24 dev eth1
  rdma link add rxe0 type rxe netdev eth1 || fail "rdma link add rxe0"
  rxe_gid_index > /dev/null || fail "rxe0 has no RoCEv2 GID for 10.0.4.15"
  echo "KBTP-GUEST: rxe0 up at $(uptime_s)s, GID index $(rxe_gid_index)"
fi

peer=""
for arg in $(cat /proc/cmdline); do
  case "$arg" in kbtp.peer=*) peer="${arg#kbtp.peer=}" ;; esac
done
[ -n "$peer" ] || fail "no kbtp.peer= on the kernel command line"
echo "$peer" | base64 -d > /tmp/peer.sh || fail "kbtp.peer is not base64"

echo "KBTP-GUEST: peer starts at $(uptime_s)s"
( . /tmp/peer.sh )
status=$?
echo "KBTP-GUEST: peer ended at $(uptime_s)s"
finish "$status"
