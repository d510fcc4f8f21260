//! ptelab-model: an executable model of Linux large-folio PTE batching.
//!
//! It mirrors the kernel paths of docs/kernel.md — mprotect's
//! `change_pte_range()` (mm/mprotect.c), mremap's `move_ptes()`
//! (mm/mremap.c), the generic page-table API (include/linux/pgtable.h), the
//! arm64 contpte layer (arch/arm64/mm/contpte.c) and the mmu_gather
//! (include/asm-generic/tlb.h) — for x86-64 and arm64 (4K/16K/64K granules,
//! contpte on or off, BBML2), under the behaviour of v6.16 (per PTE),
//! v6.17/v6.18 (batched), v6.19 (arm64 flush elision) and the 2026 small-folio
//! fast path. It counts every page-table primitive ([`Counters`]), logs every
//! TLB flush ([`FlushOp`]), and checks invariants at each syscall return (a
//! worst-case TLB model, arm64 contig-block consistency).
//!
//! Names are kernel names; the generic/arch split of pgtable.h is the default
//! methods of [`Arch`]. The model is pure: no I/O, no clock, no libc.
//! Deviations from docs/kernel.md are listed in docs/model.md.
//!
//! ```
//! use ptelab_model::{run_model, ArchConfig, ModelConfig, Strategy, Workload, Granule};
//! let cfg = ModelConfig::new(Workload::MprotectToggle, ArchConfig::arm64(Granule::K4),
//!                            Strategy::V6_17, 64 << 10, 64 << 10);
//! let out = run_model(&cfg).unwrap();
//! assert_eq!(out.calls.len(), 2);
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod arch;
pub mod check;
pub mod counters;
pub mod cx;
pub mod folio;
pub mod layout;
pub mod mm;
pub mod mprotect;
pub mod mremap;
pub mod pgtable;
pub mod rmap;
pub mod strategy;
pub mod testutil;
pub mod tlb;
pub mod types;
pub mod workload;

pub use arch::arm64::Arm64;
pub use arch::x86::X86;
pub use arch::Arch;
pub use counters::Counters;
pub use cx::Cx;
pub use rmap::{Lru, RmapImpl};
pub use strategy::{Faults, KFn, Kernel, MprotectImpl, Strategy};
pub use tlb::{FlushOp, FlushSource, MmuGather};
pub use types::{Granule, Pfn, Pgprot, Prot, VmFlags};
pub use workload::{run_model, ArchConfig, CallRecord, ModelConfig, ModelOutcome, Workload};

/// Errors a user can cause, and broken invariants.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// Region size not a positive multiple of the base page.
    #[error("size {size} is not a positive multiple of the {page_size}-byte base page")]
    Size {
        /// Bytes asked for.
        size: u64,
        /// Base page size.
        page_size: u64,
    },
    /// Folio size not a power-of-two multiple of the base page (or larger than a PTE table).
    #[error("folio size {folio} is not a power-of-two multiple of the {page_size}-byte base page fitting one PTE table")]
    Folio {
        /// Folio bytes.
        folio: u64,
        /// Base page size.
        page_size: u64,
    },
    /// Offset at or past the end of the first folio.
    #[error("offset {offset} is past the folio: accepted 0..{folio_pages} base pages")]
    Offset {
        /// Pages given.
        offset: u64,
        /// Pages per folio.
        folio_pages: u64,
    },
    /// `mprotect()` on an unmapped range (`-ENOMEM`).
    #[error("range [{start:#x}, {end:#x}) is not fully mapped (ENOMEM)")]
    Enomem {
        /// First page.
        start: u64,
        /// End page.
        end: u64,
    },
    /// Not modelled.
    #[error("{0} is not modelled")]
    Unsupported(String),
    /// A correctness invariant failed at a syscall return.
    #[error("invariant violated: {0}")]
    Invariant(String),
}
