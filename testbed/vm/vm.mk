# The VM host's artifacts (`make vm`), for `rpcscope testbed up --server vm`. They are built once per
# machine into a store keyed by what they are built from, VM_STORE (below), which every checkout on
# the machine shares:
#   STORE/root/                 Debian's linux-image, its headers and linux-kbuild, unpacked
#                               (apt-get download + dpkg-deb -x: the host's kernel and dpkg are untouched)
#   STORE/root/lib/modules/VER/updates/   lttng-modules built for that kernel, patched
#                               (testbed/vm/lttng-modules-hrtimer-was-armed.patch), depmod run
#   STORE/initramfs.cpio.gz     busybox, virtio/9p/overlay modules and testbed/vm/initramfs-init
#   build/vm/vm.json            this checkout's pointer to the store's files, read by testbed/vmhost.py
# Each step leaves a stamp in the store; a second `make vm`, or `make vm` in another checkout of the
# same files, only writes vm.json. Builds run under nice.
# The kernel is pinned: VM_ABI is the package's ABI name, VM_KVERSION its Debian version
# (both from the same linux source upload, as is linux-kbuild).

VM_DIR := build/vm
VM_ABI ?= 6.1.0-50
VM_KVERSION ?= 6.1.176-1
VM_LTTNG_VERSION ?= 2.13.9-1+deb12u1
VM_KREL := $(VM_ABI)-amd64
VM_LTTNG_UPSTREAM := $(firstword $(subst -, ,$(VM_LTTNG_VERSION)))
VM_NICE := nice -n 19
VM_PKGS := linux-image-$(VM_KREL)=$(VM_KVERSION) linux-headers-$(VM_KREL)=$(VM_KVERSION) \
    linux-headers-$(VM_ABI)-common=$(VM_KVERSION) linux-kbuild-6.1=$(VM_KVERSION) \
    lttng-modules-dkms=$(VM_LTTNG_VERSION)
# The store: VM_CACHE (/var/cache/rpcscope/vm where this user may write /var/cache; VM_CACHE= keeps
# the build in this checkout's build/vm/store) holds one directory per key, the kernel release and a
# hash of the pins and of every file the build reads (this file, the patch, initramfs-init): a change
# to any of them builds a new store, an unchanged checkout reuses the one there. Store steps depend
# only on each other, never on the checkout's files' times: the key already says they are the same.
VM_CACHE ?= $(shell test -w /var/cache && echo /var/cache/rpcscope/vm)
VM_INPUTS := testbed/vm/vm.mk testbed/vm/lttng-modules-hrtimer-was-armed.patch testbed/vm/initramfs-init
VM_KEY := $(shell { echo '$(VM_PKGS)'; cat $(VM_INPUTS); } | sha256sum | cut -c1-16)
VM_STORE := $(if $(VM_CACHE),$(VM_CACHE)/$(VM_KREL)-$(VM_KEY),$(CURDIR)/$(VM_DIR)/store)
VM_ROOT := $(VM_STORE)/root
VM_HEADERS := $(VM_ROOT)/usr/src/linux-headers-$(VM_KREL)
VM_LTTNG_SRC := $(VM_STORE)/lttng-modules-$(VM_LTTNG_UPSTREAM)
VM_MODDIR := $(VM_ROOT)/lib/modules/$(VM_KREL)
VM_INITRAMFS := $(VM_STORE)/initramfs.cpio.gz
# The modules the initramfs loads (busybox modprobe, with what modules.dep says they need).
VM_INITRD_MODULES := virtio_pci 9pnet_virtio 9p overlay

.PHONY: vm vm-store vm-clean
# One make at a time builds a store (checkouts share it): the store's steps run under its lock.
vm:
	@mkdir -p $(dir $(VM_STORE)) $(VM_DIR)
	flock $(VM_STORE).lock $(MAKE) --no-print-directory vm-store
	@printf '{"kernel": "%s", "kernel_release": "%s", "kernel_package": "%s", "lttng_modules": "%s", "vmlinuz": "%s", "initramfs": "%s", "modules": "%s", "store": "%s"}\n' \
	    "$(VM_KVERSION)" "$(VM_KREL)" "linux-image-$(VM_KREL)" "$(VM_LTTNG_VERSION)" \
	    "$(VM_ROOT)/boot/vmlinuz-$(VM_KREL)" "$(VM_INITRAMFS)" "$(VM_MODDIR)" "$(VM_STORE)" > $(VM_DIR)/vm.json.new
	@cmp -s $(VM_DIR)/vm.json.new $(VM_DIR)/vm.json && rm -f $(VM_DIR)/vm.json.new \
	    || { mv $(VM_DIR)/vm.json.new $(VM_DIR)/vm.json; echo "make vm: $(VM_DIR)/vm.json points to $(VM_STORE)"; }

vm-store: $(VM_STORE)/lttng.done $(VM_INITRAMFS)

$(VM_STORE)/debs/.done:
	@command -v dpkg-deb >/dev/null || { echo "make vm: dpkg-deb is missing (a Debian host is needed)"; exit 1; }
	rm -rf $(@D) && mkdir -p $(@D)
	cd $(@D) && $(VM_NICE) apt-get download -q $(VM_PKGS) \
	    || { echo "make vm: apt-get download of $(VM_PKGS) failed; run apt-get update, or pin a kernel apt offers (make vm VM_ABI=... VM_KVERSION=..., see apt-cache policy linux-image-amd64)"; exit 1; }
	@touch $@

$(VM_ROOT)/.done: $(VM_STORE)/debs/.done
	rm -rf $(VM_ROOT) && mkdir -p $(VM_ROOT)
	set -e; for d in $(VM_STORE)/debs/*.deb; do $(VM_NICE) dpkg-deb -x "$$d" $(VM_ROOT); done
	@# The headers' Makefile includes the -common tree by its absolute /usr/src path.
	sed -i 's|^include /usr/src/|include $(VM_ROOT)/usr/src/|' $(VM_HEADERS)/Makefile
	@touch $@

# lttng-modules outside DKMS: its source from lttng-modules-dkms, the project's patch, the unpacked
# headers; installed into the unpacked kernel's module tree (updates/), then depmod there.
$(VM_STORE)/lttng.done: $(VM_ROOT)/.done
	rm -rf $(VM_LTTNG_SRC) $(VM_MODDIR)/updates
	cp -a $(VM_ROOT)/usr/src/lttng-modules-$(VM_LTTNG_UPSTREAM) $(VM_LTTNG_SRC)
	patch -d $(VM_LTTNG_SRC) -p1 --quiet < testbed/vm/lttng-modules-hrtimer-was-armed.patch
	$(VM_NICE) $(MAKE) -C $(VM_HEADERS) M=$(VM_LTTNG_SRC) CONFIG_LTTNG=m -j$$(nproc) modules \
	    > $(VM_STORE)/lttng-build.log 2>&1 || { tail -n 20 $(VM_STORE)/lttng-build.log; echo "make vm: lttng-modules did not build; see $(VM_STORE)/lttng-build.log"; exit 1; }
	$(VM_NICE) $(MAKE) -C $(VM_HEADERS) M=$(VM_LTTNG_SRC) CONFIG_LTTNG=m modules_install \
	    INSTALL_MOD_PATH=$(VM_ROOT) INSTALL_MOD_DIR=updates DEPMOD=/bin/true >> $(VM_STORE)/lttng-build.log 2>&1
	depmod -b $(VM_ROOT) $(VM_KREL)
	@touch $@

# After lttng-modules: its depmod rewrites the modules.dep this step reads.
$(VM_INITRAMFS): $(VM_STORE)/lttng.done
	@command -v busybox >/dev/null || { echo "make vm: busybox is missing; make bootstrap installs busybox-static"; exit 1; }
	rm -rf $(VM_STORE)/initramfs && mkdir -p $(VM_STORE)/initramfs/bin $(VM_STORE)/initramfs/lib/modules \
	    $(VM_STORE)/initramfs/proc $(VM_STORE)/initramfs/sys $(VM_STORE)/initramfs/dev
	cp $$(command -v busybox) $(VM_STORE)/initramfs/bin/busybox
	cp testbed/vm/initramfs-init $(VM_STORE)/initramfs/init && chmod 755 $(VM_STORE)/initramfs/init
	set -e; cd $(VM_MODDIR); want=$$(for m in $(VM_INITRD_MODULES); do grep -E "/$$m\.ko:" modules.dep; done \
	    | tr -d : | tr ' ' '\n' | sort -u); \
	    for f in $$want; do mkdir -p $(VM_STORE)/initramfs/lib/modules/$(VM_KREL)/$$(dirname $$f); \
	        cp $$f $(VM_STORE)/initramfs/lib/modules/$(VM_KREL)/$$f; done; \
	    cp modules.dep $(VM_STORE)/initramfs/lib/modules/$(VM_KREL)/
	cd $(VM_STORE)/initramfs && find . | LC_ALL=C sort | busybox cpio -o -H newc 2>/dev/null | gzip -9 > $@.new
	mv $@.new $@ && rm -rf $(VM_STORE)/initramfs

# This checkout's pointer, and the store of its current key (other checkouts of the same files use it
# too: their make vm builds it again).
vm-clean:
	rm -rf $(VM_DIR) $(VM_STORE) $(VM_STORE).lock
