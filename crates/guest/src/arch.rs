//! What the guest layer knows of each arch, in one table: the QEMU that
//! boots it, the machine and the console, Debian's name for it, the Rust
//! target of the static guest binary, and how its kernel is built. The
//! rest of the layer reads these fields instead of matching on the arch.

use goblin::elf::header;

use crate::workload::Arch;

/// One arch's facts (see [`facts`]).
pub struct Facts {
    /// Debian's name for the architecture (packages, the archive).
    pub debian: &'static str,
    /// The QEMU system emulator, and the Debian package that ships it.
    pub qemu: &'static str,
    pub qemu_package: &'static str,
    /// QEMU's machine type under TCG and under KVM (arm64's GIC follows
    /// the host's).
    pub machine: &'static str,
    pub kvm_machine: &'static str,
    /// The CPU model of a TCG guest (x86-64's is narrowed to QEMU 7.2's
    /// `max`, `qemu::x86_reference_cpu`). pauth-impdef is QEMU's cheap
    /// pointer-authentication hash instead of QARMA: the same instructions
    /// executed, several times faster under TCG.
    pub tcg_cpu: &'static str,
    /// The serial console the guest kernel writes to.
    pub console: &'static str,
    /// The kernel modules one of which backs /dev/kvm for it (none: KVM
    /// is built in).
    pub kvm_modules: &'static [&'static str],
    /// The Rust target of the static guest binary, and the variable that
    /// names a ready one instead.
    pub musl_target: &'static str,
    pub binary_env: &'static str,
    /// ELF `e_machine` of its executables, and the name `file` gives it.
    pub elf_machine: u16,
    pub elf_name: &'static str,
    /// The kernel build's `ARCH=`, its image target, and where the build
    /// leaves the image (under the build directory).
    pub kernel_arch: &'static str,
    pub image_target: &'static str,
    pub image_path: &'static str,
    /// The cross compiler's prefix and its Debian package, for building
    /// this arch's kernel on the other one.
    pub cross_prefix: &'static str,
    pub cross_package: &'static str,
}

const X86_64: Facts = Facts {
    debian: "amd64",
    qemu: "qemu-system-x86_64",
    qemu_package: "qemu-system-x86",
    machine: "pc",
    kvm_machine: "pc",
    tcg_cpu: "max",
    console: "ttyS0",
    kvm_modules: &["kvm_intel", "kvm_amd"],
    musl_target: "x86_64-unknown-linux-musl",
    binary_env: "PTELAB_GUEST_BINARY_X86_64",
    elf_machine: header::EM_X86_64,
    elf_name: "x86-64",
    kernel_arch: "x86_64",
    image_target: "bzImage",
    image_path: "arch/x86/boot/bzImage",
    cross_prefix: "x86_64-linux-gnu-",
    cross_package: "gcc-x86-64-linux-gnu",
};

const ARM64: Facts = Facts {
    debian: "arm64",
    qemu: "qemu-system-aarch64",
    qemu_package: "qemu-system-arm",
    machine: "virt",
    kvm_machine: "virt,gic-version=max",
    tcg_cpu: "max,pauth-impdef=on",
    console: "ttyAMA0",
    kvm_modules: &[],
    musl_target: "aarch64-unknown-linux-musl",
    binary_env: "PTELAB_GUEST_BINARY_ARM64",
    elf_machine: header::EM_AARCH64,
    elf_name: "aarch64",
    kernel_arch: "arm64",
    image_target: "Image",
    image_path: "arch/arm64/boot/Image",
    cross_prefix: "aarch64-linux-gnu-",
    cross_package: "gcc-aarch64-linux-gnu",
};

/// `arch`'s facts.
pub fn facts(arch: Arch) -> &'static Facts {
    match arch {
        Arch::X86_64 => &X86_64,
        Arch::Arm64 => &ARM64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two rows never share a value that names an arch.
    #[test]
    fn each_arch_has_its_own_names() {
        let (x, a) = (facts(Arch::X86_64), facts(Arch::Arm64));
        for (f, g) in [
            (x.debian, a.debian),
            (x.qemu, a.qemu),
            (x.console, a.console),
            (x.musl_target, a.musl_target),
            (x.binary_env, a.binary_env),
            (x.kernel_arch, a.kernel_arch),
            (x.image_path, a.image_path),
            (x.cross_prefix, a.cross_prefix),
        ] {
            assert_ne!(f, g);
        }
        assert!(x.musl_target.starts_with("x86_64") && a.musl_target.starts_with("aarch64"));
        assert!(x.image_path.ends_with(x.image_target) && a.image_path.ends_with(a.image_target));
    }
}
