# The VM host's artifacts (`make vm`), under build/vm/, for `rpcscope testbed up --server vm`:
#   build/vm/root/              Debian's linux-image, its headers and linux-kbuild, unpacked
#                               (apt-get download + dpkg-deb -x: the host's kernel and dpkg are untouched)
#   build/vm/root/lib/modules/VER/updates/   lttng-modules built for that kernel, patched
#                               (testbed/vm/lttng-modules-hrtimer-was-armed.patch), depmod run
#   build/vm/initramfs.cpio.gz  busybox, virtio/9p/overlay modules and testbed/vm/initramfs-init
#   build/vm/vm.json            what was built, read by testbed/vmhost.py
# Each step leaves a stamp; a second `make vm` does nothing. Builds run under nice.
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
VM_ROOT := $(VM_DIR)/root
VM_HEADERS := $(CURDIR)/$(VM_ROOT)/usr/src/linux-headers-$(VM_KREL)
VM_LTTNG_SRC := $(VM_DIR)/lttng-modules-$(VM_LTTNG_UPSTREAM)
VM_MODDIR := $(VM_ROOT)/lib/modules/$(VM_KREL)
# The modules the initramfs loads (busybox modprobe, with what modules.dep says they need).
VM_INITRD_MODULES := virtio_pci 9pnet_virtio 9p overlay

.PHONY: vm vm-clean vm-pins-check
vm: $(VM_DIR)/vm.json

# The pins as a file that changes only when they do: a new pin downloads and builds anew.
$(VM_DIR)/pins.txt: vm-pins-check
	@mkdir -p $(@D); echo '$(VM_PKGS)' | cmp -s - $@ || echo '$(VM_PKGS)' > $@

$(VM_DIR)/debs/.done: $(VM_DIR)/pins.txt
	@command -v dpkg-deb >/dev/null || { echo "make vm: dpkg-deb is missing (a Debian host is needed)"; exit 1; }
	rm -rf $(@D) && mkdir -p $(@D)
	cd $(@D) && $(VM_NICE) apt-get download -q $(VM_PKGS) \
	    || { echo "make vm: apt-get download of $(VM_PKGS) failed; run apt-get update, or pin a kernel apt offers (make vm VM_ABI=... VM_KVERSION=..., see apt-cache policy linux-image-amd64)"; exit 1; }
	@touch $@

$(VM_ROOT)/.done: $(VM_DIR)/debs/.done
	rm -rf $(VM_ROOT) && mkdir -p $(VM_ROOT)
	set -e; for d in $(VM_DIR)/debs/*.deb; do $(VM_NICE) dpkg-deb -x "$$d" $(VM_ROOT); done
	@# The headers' Makefile includes the -common tree by its absolute /usr/src path.
	sed -i 's|^include /usr/src/|include $(CURDIR)/$(VM_ROOT)/usr/src/|' $(VM_HEADERS)/Makefile
	@touch $@

# lttng-modules outside DKMS: its source from lttng-modules-dkms, the project's patch, the unpacked
# headers; installed into the unpacked kernel's module tree (updates/), then depmod there.
$(VM_DIR)/lttng.done: $(VM_ROOT)/.done testbed/vm/lttng-modules-hrtimer-was-armed.patch
	rm -rf $(VM_LTTNG_SRC) $(VM_MODDIR)/updates
	cp -a $(VM_ROOT)/usr/src/lttng-modules-$(VM_LTTNG_UPSTREAM) $(VM_LTTNG_SRC)
	patch -d $(VM_LTTNG_SRC) -p1 --quiet < testbed/vm/lttng-modules-hrtimer-was-armed.patch
	$(VM_NICE) $(MAKE) -C $(VM_HEADERS) M=$(CURDIR)/$(VM_LTTNG_SRC) CONFIG_LTTNG=m -j$$(nproc) modules \
	    > $(VM_DIR)/lttng-build.log 2>&1 || { tail -n 20 $(VM_DIR)/lttng-build.log; echo "make vm: lttng-modules did not build; see $(VM_DIR)/lttng-build.log"; exit 1; }
	$(VM_NICE) $(MAKE) -C $(VM_HEADERS) M=$(CURDIR)/$(VM_LTTNG_SRC) CONFIG_LTTNG=m modules_install \
	    INSTALL_MOD_PATH=$(CURDIR)/$(VM_ROOT) INSTALL_MOD_DIR=updates DEPMOD=/bin/true >> $(VM_DIR)/lttng-build.log 2>&1
	depmod -b $(VM_ROOT) $(VM_KREL)
	@touch $@

$(VM_DIR)/initramfs.cpio.gz: $(VM_ROOT)/.done testbed/vm/initramfs-init testbed/vm/vm.mk
	@command -v busybox >/dev/null || { echo "make vm: busybox is missing; make bootstrap installs busybox-static"; exit 1; }
	rm -rf $(VM_DIR)/initramfs && mkdir -p $(VM_DIR)/initramfs/bin $(VM_DIR)/initramfs/lib/modules \
	    $(VM_DIR)/initramfs/proc $(VM_DIR)/initramfs/sys $(VM_DIR)/initramfs/dev
	cp $$(command -v busybox) $(VM_DIR)/initramfs/bin/busybox
	cp testbed/vm/initramfs-init $(VM_DIR)/initramfs/init && chmod 755 $(VM_DIR)/initramfs/init
	set -e; cd $(VM_MODDIR); want=$$(for m in $(VM_INITRD_MODULES); do grep -E "/$$m\.ko:" modules.dep; done \
	    | tr -d : | tr ' ' '\n' | sort -u); \
	    for f in $$want; do mkdir -p $(CURDIR)/$(VM_DIR)/initramfs/lib/modules/$(VM_KREL)/$$(dirname $$f); \
	        cp $$f $(CURDIR)/$(VM_DIR)/initramfs/lib/modules/$(VM_KREL)/$$f; done; \
	    cp modules.dep $(CURDIR)/$(VM_DIR)/initramfs/lib/modules/$(VM_KREL)/
	cd $(VM_DIR)/initramfs && find . | LC_ALL=C sort | busybox cpio -o -H newc 2>/dev/null | gzip -9 > ../initramfs.cpio.gz.new
	mv $@.new $@ && rm -rf $(VM_DIR)/initramfs

$(VM_DIR)/vm.json: $(VM_DIR)/lttng.done $(VM_DIR)/initramfs.cpio.gz
	printf '{"kernel": "%s", "kernel_release": "%s", "kernel_package": "%s", "lttng_modules": "%s", "vmlinuz": "%s", "initramfs": "%s", "modules": "%s"}\n' \
	    "$(VM_KVERSION)" "$(VM_KREL)" "linux-image-$(VM_KREL)" "$(VM_LTTNG_VERSION)" \
	    "$(CURDIR)/$(VM_ROOT)/boot/vmlinuz-$(VM_KREL)" "$(CURDIR)/$(VM_DIR)/initramfs.cpio.gz" \
	    "$(CURDIR)/$(VM_MODDIR)" > $@

vm-clean:
	rm -rf $(VM_DIR)
