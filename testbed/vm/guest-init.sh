#!/bin/sh
# PID 1 of an rpcscope VM host (started by the initramfs, testbed/vm/initramfs-init): the host's /
# is this guest's read-only lower layer under a tmpfs overlay. Mounts the kernel's filesystems, gives
# the guest its testbed address and hostname, starts sshd with the configuration and keys that
# `rpcscope testbed up` wrote for it (rpcs_dir= on the kernel command line, in the host's /run,
# copied before the guest's own /run hides it), then stays as busybox init, which reaps orphans.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
arg() { sed -n "s/.*\<$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
say() { echo "rpcscope guest: $*" >/dev/console; }
fail() { say "$*"; sleep 2; echo o >/proc/sysrq-trigger; }

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=000 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
dir=$(arg rpcs_dir)
[ -f "$dir/sshd_config" ] || fail "no sshd configuration in $dir"
cp -a "$dir" /.rpcs-host || fail "copying $dir failed"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
# /tmp and /var/tmp stay the overlay's, so that a checkout under the host's /tmp is there for deploy.
mkdir -p "$dir" /run/sshd /run/lock /run/lttng
cp -a /.rpcs-host/. "$dir/" && rm -rf /.rpcs-host
# The state directory's parent holds the authorized keys (sshd_config's AuthorizedKeysFile).
cp -a "$dir/authorized_keys" "$(dirname "$(dirname "$dir")")/authorized_keys"
rm -f "$dir/sshd.pid" "$dir/sshd.log"
mkdir -p "$dir/tmp" && chmod 700 "$dir/tmp"

hostname "$(arg rpcs_host)"
ip link set lo up
modprobe virtio_net || fail "modprobe virtio_net failed"
ifname=$(arg rpcs_ifname)
for _ in 1 2 3 4 5 6 7 8 9 10; do ip link show "$ifname" >/dev/null 2>&1 && break; sleep 0.2; done
ip link set dev "$ifname" mtu "$(arg rpcs_mtu)"
ip addr add "$(arg rpcs_addr)" dev "$ifname" || fail "no interface $ifname"
ip link set dev "$ifname" up
sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1

/usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log" || fail "sshd did not start: $(tail -n 3 "$dir/sshd.log")"
say "up: $(hostname) $(arg rpcs_addr) on $ifname, sshd running, kernel $(uname -r)"
# busybox init idles, reaping every orphan; the host stops the guest by ending QEMU.
printf '::ctrlaltdel:/bin/busybox poweroff -f\n' > /etc/inittab
exec /bin/busybox init
