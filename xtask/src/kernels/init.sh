#!/bin/busybox sh
# /init of the kernel-matrix guest: runs dnsloop on loopback, asks it a few DNS names, and
# reports between `dnsloop-kernels:` marker lines on the serial console, which the host parses.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t bpf bpf /sys/fs/bpf
mount -t tmpfs tmpfs /tmp
ip link set lo up
# Debian builds the clsact qdisc and the tc BPF classifier as modules (xz-compressed from
# 6.12 on); a node's modprobe loads them on demand, this guest has no modprobe.
for module in /modules/*; do
    case "$module" in *.xz) unxz "$module" && module="${module%.xz}" ;; esac
    insmod "$module"
done

say() { echo "dnsloop-kernels: $*"; }
section() { say "$1-begin"; cat "$2"; say "$1-end"; }

say "booted $(uname -r) ($(cat /proc/version))"
# SIGTERM ends the run; --duration only bounds it should the signal be lost.
/dnsloop trace -i lo --output json --packets --duration 300s >/tmp/stdout 2>/tmp/stderr &
pid=$!
ready=no
for _ in $(seq 1 1800); do
    grep -q "dnsloop: watching" /tmp/stderr && { ready=yes; break; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
say "ready $ready"
if [ "$ready" = yes ]; then
    bpftool net show >/tmp/attached 2>&1
    section attached /tmp/attached
    # TCX links show in bpftool's net view only from bpftool 7.3; dnsloop's descriptors say,
    # and how much the verifier checked of each program.
    grep -h -E "link_type|verified_insns" /proc/"$pid"/fdinfo/* >/tmp/descriptors 2>&1
    section descriptors /tmp/descriptors
    # Nothing listens on port 53: a query alone must be counted.
    for name in @QUERY_NAMES@; do
        timeout 2 nslookup -type=A "$name" 127.0.0.1 >/dev/null 2>&1
    done
    sleep 1
    kill -TERM "$pid"
fi
wait "$pid"
say "exit $?"
section stderr /tmp/stderr
section stdout /tmp/stdout
bpftool net show >/tmp/after 2>&1
section after-exit /tmp/after
say done
poweroff -f
