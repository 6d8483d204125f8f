#!/bin/busybox sh
# Stage 1 (/init of the initramfs): loads the block drivers, mounts the root slot the boot loader
# chose (kbtp.slot= on the kernel command line; the partition named kbtp-root-<slot>) read-only and
# hands over to busybox init in it. Any failure reboots after a pause, so a slot that cannot boot
# exhausts its boot counter and the loader returns to the other slot.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

say() { echo "kbtp-boot[initramfs $(cut -d' ' -f1 /proc/uptime)s]: $*"; }
fail() {
  echo "KBTP-BOOT-FAILED: $*"
  echo "kbtp-boot: rebooting in 10 s"
  sleep 10
  reboot -f
}

slot=""
for arg in $(cat /proc/cmdline); do
  case "$arg" in kbtp.slot=*) slot="${arg#kbtp.slot=}" ;; esac
done
case "$slot" in a|b) ;; *) fail "no kbtp.slot=a|b on the kernel command line" ;; esac
say "slot $slot"

for module in $(cat /modules/order); do
  insmod "/modules/$module.ko" 2>/dev/null || say "insmod $module failed (no such hardware?)"
done

# Block devices probe asynchronously: wait for the slot's partition to appear.
device=""
tries=200
while [ -z "$device" ] && [ $tries -gt 0 ]; do
  for uevent in /sys/class/block/*/uevent; do
    if grep -qx "PARTNAME=kbtp-root-$slot" "$uevent" 2>/dev/null; then
      device="/dev/$(sed -n 's/^DEVNAME=//p' "$uevent")"
      break
    fi
  done
  [ -n "$device" ] || { sleep 0.05; tries=$((tries - 1)); }
done
[ -n "$device" ] || fail "no partition named kbtp-root-$slot"
mount -t squashfs -o ro "$device" /newroot || fail "cannot mount $device (kbtp-root-$slot) as squashfs"
[ -x /newroot/usr/sbin/init ] || fail "kbtp-root-$slot holds no /usr/sbin/init"
say "root $device mounted; starting init"
mount --move /dev /newroot/dev
umount /sys /proc
exec switch_root /newroot /usr/sbin/init
