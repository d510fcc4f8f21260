//! arm64 stage-1 page descriptor bits, as Linux uses them.
//!
//! Kernel counterpart: arch/arm64/include/asm/pgtable-hwdef.h and
//! arch/arm64/include/asm/pgtable-prot.h (2026 mm tree; same layout since
//! v6.10 replaced `PTE_PROT_NONE` by `PTE_PRESENT_INVALID`). 48-bit PAs
//! (no LPA2, no D128).

use bitflags::bitflags;

bitflags! {
    /// Bits of an arm64 level-3 page descriptor (Arm ARM D8.3).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct PteBits: u64 {
        /// Valid (`PTE_VALID`, bit 0).
        const VALID = 1 << 0;
        /// Descriptor type "page" (`PTE_TYPE_PAGE` = 0b11; this is bit 1).
        const TYPE_PAGE = 1 << 1;
        /// AttrIndx[0] (`PTE_ATTRINDX`, bits 2..4; MT_NORMAL = 0).
        const ATTRINDX0 = 1 << 2;
        /// AttrIndx[1].
        const ATTRINDX1 = 1 << 3;
        /// AttrIndx[2].
        const ATTRINDX2 = 1 << 4;
        /// AP[1]: EL0 access (`PTE_USER`, bit 6).
        const USER = 1 << 6;
        /// AP[2]: read-only (`PTE_RDONLY`, bit 7).
        const RDONLY = 1 << 7;
        /// SH[0] (`PTE_SHARED` = 3 << 8: inner shareable).
        const SH0 = 1 << 8;
        /// SH[1].
        const SH1 = 1 << 9;
        /// AF: access flag (`PTE_AF`, bit 10).
        const AF = 1 << 10;
        /// nG: not global (`PTE_NG`, bit 11); doubles as
        /// `PTE_PRESENT_INVALID` when VALID is clear.
        const NG = 1 << 11;
        /// GP: BTI guarded page (`PTE_GP`, bit 50).
        const GP = 1 << 50;
        /// DBM: dirty bit modifier (`PTE_DBM`, bit 51) = Linux `PTE_WRITE`.
        const DBM = 1 << 51;
        /// Contiguous hint (`PTE_CONT`, bit 52).
        const CONT = 1 << 52;
        /// PXN: privileged execute never (`PTE_PXN`, bit 53).
        const PXN = 1 << 53;
        /// UXN: user execute never (`PTE_UXN`, bit 54).
        const UXN = 1 << 54;
        /// Software dirty (`PTE_DIRTY`, bit 55).
        const DIRTY = 1 << 55;
        /// Software special (`PTE_SPECIAL`, bit 56).
        const SPECIAL = 1 << 56;
        /// Software bit 57 (formerly `PTE_DEVMAP`).
        const SW57 = 1 << 57;
        /// Software uffd-wp (`PTE_UFFD_WP`, bit 58).
        const UFFD_WP = 1 << 58;
        /// POIndex[0] (`PTE_PO_IDX_0`, bit 60).
        const PO_IDX0 = 1 << 60;
        /// POIndex[1] (bit 61).
        const PO_IDX1 = 1 << 61;
        /// POIndex[2] (bit 62).
        const PO_IDX2 = 1 << 62;
        /// Software bit 63.
        const SW63 = 1 << 63;
    }
}

/// `PTE_WRITE` is the DBM bit.
pub const PTE_WRITE: PteBits = PteBits::DBM;
/// `PTE_PRESENT_INVALID` (only meaningful when `PTE_VALID` is clear).
pub const PTE_PRESENT_INVALID: PteBits = PteBits::NG;
/// `PTE_SHARED`.
pub const PTE_SHARED: PteBits = PteBits::SH0.union(PteBits::SH1);
/// `PTE_ATTRINDX_MASK`.
pub const PTE_ATTRINDX_MASK: PteBits = PteBits::ATTRINDX0
    .union(PteBits::ATTRINDX1)
    .union(PteBits::ATTRINDX2);
/// `PTE_PO_IDX_MASK`.
pub const PTE_PO_IDX_MASK: PteBits = PteBits::PO_IDX0
    .union(PteBits::PO_IDX1)
    .union(PteBits::PO_IDX2);
/// `PTE_SWBITS_MASK`: bits 55..58 and 63, ignored by `pte_needs_flush()` (v6.19).
pub const PTE_SWBITS_MASK: u64 = (1 << 63) | (0xf << 55);
/// `PTE_ADDR_LOW` upper bound: output address bits below 48.
pub const PTE_ADDR_TOP: u32 = 48;

/// `_PAGE_DEFAULT` = `PTE_TYPE_PAGE | PTE_AF | PTE_SHARED | PTE_ATTRINDX(MT_NORMAL)`.
pub const PAGE_DEFAULT: PteBits = PteBits::VALID
    .union(PteBits::TYPE_PAGE)
    .union(PteBits::AF)
    .union(PTE_SHARED);
/// `PAGE_NONE`.
pub const PAGE_NONE: PteBits = PAGE_DEFAULT
    .difference(PteBits::VALID)
    .union(PTE_PRESENT_INVALID)
    .union(PteBits::RDONLY)
    .union(PteBits::NG)
    .union(PteBits::PXN)
    .union(PteBits::UXN);
/// `PAGE_READONLY` (also `PAGE_COPY`: private writable mappings start read-only).
pub const PAGE_READONLY: PteBits = PAGE_DEFAULT
    .union(PteBits::USER)
    .union(PteBits::RDONLY)
    .union(PteBits::NG)
    .union(PteBits::PXN)
    .union(PteBits::UXN);
/// `PAGE_SHARED`: writable but clean (`PTE_RDONLY | PTE_WRITE`).
pub const PAGE_SHARED: PteBits = PAGE_READONLY.union(PTE_WRITE);
