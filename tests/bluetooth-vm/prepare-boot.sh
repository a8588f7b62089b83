#!/usr/bin/env bash
# Usage: tests/bluetooth-vm/prepare-boot.sh CACHE_DIR KERNEL_VERSION
#
# Prints two lines: the kernel and the initramfs for QEMU, both cached in CACHE_DIR and rebuilt
# only when their inputs change.
#  - Kernel: /boot/vmlinuz-KERNEL_VERSION decompressed to a plain vmlinux ELF, which QEMU boots
#    through its PVH entry point: under TCG, decompressing Debian's xz bzImage costs ~6 s of every
#    boot. Falls back to the bzImage when the kernel has no CONFIG_PVH or cannot be unpacked.
#  - Initramfs: busybox-static + the virtio-pci, 9p and overlay modules; its /init mounts the
#    HOST's root file system read-only over virtio-9p (mount tag "hostroot"), puts a tmpfs overlay
#    on top and switch_roots into it, exec'ing the program named by the kernel argument
#    btvm.init=PATH (a path on the host). Cache key: this script, /bin/busybox, the module list.
set -euo pipefail

cache=${1:?usage: prepare-boot.sh CACHE_DIR KERNEL_VERSION}
kv=${2:?usage: prepare-boot.sh CACHE_DIR KERNEL_VERSION}
moddir=/lib/modules/$kv
busybox=/bin/busybox
# Modules the initramfs needs to reach the host root (a failure to load one is fatal).
root_modules=(virtio_pci 9pnet_virtio 9p overlay)
# Modules of the Bluetooth stack, loaded by the initramfs too because modprobe from the 9p root
# costs seconds under TCG. Order matters where the kernel finds a dependency by name at run time
# (request_module, which cannot work inside the initramfs) instead of through modules.dep: the
# crypto self-test of ecdh_generic (pulled in by bluetooth) needs the default RNG, i.e. drbg,
# which needs ctr(aes), hmac(sha512) and jitterentropy, which needs sha3. Then the core, the H:4
# UART driver, RFCOMM, BNEP (bluetoothd's network plugin asks for it) and the AF_ALG crypto
# (ecb(aes), cmac(aes)) that bluetoothd uses. The initramfs logs any module the kernel asks for
# ("kernel requested module"), and guest-init.sh modprobes what is missing and refuses to go on
# after a failed crypto self-test.
bt_modules=(ctr sha512_generic sha3_generic jitterentropy_rng drbg
            bluetooth hci_uart rfcomm bnep af_alg algif_hash algif_skcipher ecb cmac)

[[ -x $busybox ]] || { echo "prepare-boot: $busybox missing (Debian package busybox-static)" >&2; exit 2; }
[[ -r $moddir/modules.dep ]] || { echo "prepare-boot: $moddir/modules.dep missing" >&2; exit 2; }

# --- kernel
vmlinuz=/boot/vmlinuz-$kv
[[ -r $vmlinuz ]] || { echo "prepare-boot: $vmlinuz missing (Debian package linux-image-amd64)" >&2; exit 2; }
mkdir -p "$cache"
# Concurrent runs share the cache: one prepares at a time, the others then find the result.
exec {lock_fd}> "$cache/.prepare.lock"
flock "$lock_fd"
kernel=$vmlinuz
if grep -qx 'CONFIG_PVH=y' "/boot/config-$kv" 2>/dev/null; then
    kkey=$(stat -c '%s %Y' "$vmlinuz" | sha256sum | cut -c1-16)
    kernel=$cache/vmlinux-$kv-$kkey
    if [[ ! -s $kernel ]]; then
        rm -f "$cache"/vmlinux-"$kv"-*   # older unpacked kernels of this version
        unpacked=
        # magic (as grep -P bytes) and decompressor of the compressed payload inside the bzImage
        for format in '\xfd7zXZ\x00:xz' '\x28\xb5\x2f\xfd:zstd' '\x1f\x8b\x08:gzip'; do
            tool=${format##*:}
            command -v "$tool" > /dev/null || continue
            for offset in $(LC_ALL=C grep -obUaP "${format%:*}" "$vmlinuz" | cut -d: -f1); do
                tail -c "+$(( offset + 1 ))" "$vmlinuz" | "$tool" -dc 2> /dev/null > "$kernel.tmp" || true
                if [[ $(head -c 4 "$kernel.tmp" | od -An -c | tr -d ' ') == '177ELF' ]]; then
                    unpacked=1
                    break 2
                fi
            done
        done
        if [[ -n $unpacked ]]; then
            mv "$kernel.tmp" "$kernel"
        else
            rm -f "$kernel.tmp"
            echo "prepare-boot: cannot unpack $vmlinuz; booting the bzImage (slower)" >&2
            kernel=$vmlinuz
        fi
    fi
fi
echo "$kernel"

# --- initramfs
key=$( { cat "${BASH_SOURCE[0]}"; sha256sum "$busybox"; echo "$kv"; stat -c '%s %Y' "$moddir/modules.dep"; } \
       | sha256sum | cut -c1-16)
image=$cache/initramfs-$kv-$key.img
if [[ -s $image ]]; then
    echo "$image"
    exit 0
fi

stage=$(mktemp -d "$cache/.initramfs.XXXXXX")
trap 'rm -rf "$stage" "$stage.img"' EXIT
mkdir -p "$stage"/{bin,sbin,dev,proc,sys,lower,upper,newroot,modules}
cp "$busybox" "$stage/bin/busybox"
for applet in sh mount umount mkdir insmod switch_root cat poweroff sleep; do
    ln -s busybox "$stage/bin/$applet"
done

# modules.dep lines read "kernel/x/mod.ko: dep1.ko dep2.ko ..." with the complete set of
# dependencies; loading them in reverse order, then the module itself, satisfies every symbol.
declare -A have=()
add_module() {
    local line
    line=$(grep -m1 -E "(^|/)$1\.ko(\.[a-z]+)?:" "$moddir/modules.dep") \
        || { echo "prepare-boot: module $1 not found for $kv" >&2; exit 2; }
    local ko=${line%%:*} deps=() i
    read -r -a deps <<< "${line#*:}"
    for (( i = ${#deps[@]} - 1; i >= 0; i-- )); do load "${deps[i]}"; done
    load "$ko"
}
load() {
    [[ -n ${have[$1]:-} ]] && return 0
    have[$1]=1
    case $1 in
        *.ko) ;;
        *) echo "prepare-boot: compressed module $1 is not supported" >&2; exit 2 ;;
    esac
    cp "$moddir/$1" "$stage/modules/"
    basename "$1" >> "$stage/modules/$list"
}
list=root
for module in "${root_modules[@]}"; do add_module "$module"; done
list=bluetooth
for module in "${bt_modules[@]}"; do add_module "$module"; done

cat > "$stage/init" <<'INIT'
#!/bin/sh
# initramfs of the PeerVoice Bluetooth test VMs (tests/bluetooth-vm/mkinitramfs.sh)
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() { echo "btvm-initramfs: $*"; poweroff -f; sleep 5; }
while read -r ko; do insmod "/modules/$ko" || fail "insmod $ko failed"; done < /modules/root
while read -r ko; do insmod "/modules/$ko" || echo "btvm-initramfs: insmod $ko failed"; done < /modules/bluetooth
init=
for arg in $(cat /proc/cmdline); do
    case $arg in btvm.init=*) init=${arg#btvm.init=} ;; esac
done
[ -n "$init" ] || fail "no btvm.init= on the kernel command line"
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=524288,cache=loose hostroot /lower \
    || fail "cannot mount the host root (9p tag hostroot)"
mount -t tmpfs -o mode=0755 upper /upper || fail "tmpfs failed"
mkdir -p /upper/data /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay /newroot \
    || fail "overlay mount failed"
[ -e "/newroot$init" ] || fail "$init not found on the host root"
umount /proc /sys
umount /dev 2>/dev/null
exec switch_root /newroot "$init"
INIT
chmod 755 "$stage/init"
# The kernel's request_module() runs /sbin/modprobe; inside the initramfs there is none to load
# anything, so report the request (the module list above then misses it). Not reported: crypto
# instance names such as crypto-hmac(sha1), which the kernel asks for first and then builds from
# templates; a missing template module shows up as its own request (crypto-hmac).
cat > "$stage/sbin/modprobe" <<'MODPROBE'
#!/bin/sh
for name; do :; done
case $name in
    *"("*) ;;
    *) echo "btvm-initramfs: kernel requested module $name (add it to prepare-boot.sh)" > /dev/console ;;
esac
exit 1
MODPROBE
chmod 755 "$stage/sbin/modprobe"

(cd "$stage" && find . | LC_ALL=C sort | "$busybox" cpio -o -H newc 2>/dev/null) > "$stage.img"
# Replace older images of this kernel (different inputs) so the cache does not grow.
rm -f "$cache"/initramfs-"$kv"-*.img
mv "$stage.img" "$image"
echo "$image"
