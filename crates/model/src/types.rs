//! Small value types shared by the whole model: page frame numbers, page
//! protections, VMA flags and the base-page granule.
//!
//! Kernel counterparts: `unsigned long pfn`, `pgprot_t`
//! (arch/*/include/asm/pgtable_types.h), `vm_flags_t` and `PROT_*`
//! (include/linux/mm.h, include/uapi/asm-generic/mman-common.h).
//! Addresses in the model are *virtual page numbers* (`addr >> PAGE_SHIFT`),
//! so "one page" is always `1` whatever the granule.

use core::fmt;

use bitflags::bitflags;
use serde::{Deserialize, Serialize};

/// A page frame number (physical address `>> PAGE_SHIFT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pfn(pub u64);

/// A page protection value (`pgprot_t`): the non-PFN bits of a PTE, in the
/// layout of the architecture that produced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Pgprot(pub u64);

/// The protection a user asks `mprotect()` for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Prot {
    /// `PROT_NONE`.
    None,
    /// `PROT_READ`.
    Read,
    /// `PROT_READ | PROT_WRITE`.
    ReadWrite,
}

impl Prot {
    /// The `VM_READ`/`VM_WRITE` bits `mprotect_fixup()` derives from the request.
    pub fn vm_flags(self) -> VmFlags {
        match self {
            Prot::None => VmFlags::empty(),
            Prot::Read => VmFlags::READ,
            Prot::ReadWrite => VmFlags::READ | VmFlags::WRITE,
        }
    }

    /// The C spelling, for labels.
    pub fn c_name(self) -> &'static str {
        match self {
            Prot::None => "PROT_NONE",
            Prot::Read => "PROT_READ",
            Prot::ReadWrite => "PROT_READ|PROT_WRITE",
        }
    }
}

impl fmt::Display for Prot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.c_name())
    }
}

bitflags! {
    /// The `vm_flags` bits the modelled paths look at (include/linux/mm.h).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct VmFlags: u32 {
        /// `VM_READ`.
        const READ = 1 << 0;
        /// `VM_WRITE`.
        const WRITE = 1 << 1;
        /// `VM_EXEC`.
        const EXEC = 1 << 2;
        /// `VM_SHARED` (MAP_SHARED; shared anonymous memory is shmem).
        const SHARED = 1 << 3;
        /// `VM_SOFTDIRTY`: set on new VMAs; while set, soft-dirty tracking
        /// does not need write faults (`vma_soft_dirty_enabled()` is false).
        const SOFTDIRTY = 1 << 4;
        /// `VM_UFFD_WP`: registered with userfaultfd in write-protect mode.
        const UFFD_WP = 1 << 5;
    }
}

/// Base page size (arm64 "granule"; x86-64 is always 4K).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Granule {
    /// 4 KiB pages (`PAGE_SHIFT` 12).
    K4,
    /// 16 KiB pages (`PAGE_SHIFT` 14).
    K16,
    /// 64 KiB pages (`PAGE_SHIFT` 16).
    K64,
}

impl Granule {
    /// `PAGE_SHIFT`.
    pub fn page_shift(self) -> u32 {
        match self {
            Granule::K4 => 12,
            Granule::K16 => 14,
            Granule::K64 => 16,
        }
    }

    /// `PAGE_SIZE` in bytes.
    pub fn page_size(self) -> u64 {
        1 << self.page_shift()
    }

    /// `PTRS_PER_PTE`: entries in one PTE table (one page of 8-byte entries).
    pub fn ptrs_per_pte(self) -> u64 {
        1 << (self.page_shift() - 3)
    }

    /// The spelling accepted on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Granule::K4 => "4K",
            Granule::K16 => "16K",
            Granule::K64 => "64K",
        }
    }

    /// Parse `4K`, `16K` or `64K` (case-insensitive).
    pub fn parse(s: &str) -> Option<Granule> {
        match s.trim().to_ascii_uppercase().as_str() {
            "4K" => Some(Granule::K4),
            "16K" => Some(Granule::K16),
            "64K" => Some(Granule::K64),
            _ => None,
        }
    }
}
