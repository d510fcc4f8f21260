//! Workloads are plain data: which mm operation is timed or modelled, on what
//! region, with which folio layout. Backends (the running kernel, the model)
//! run them; nothing here touches the machine.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_error as error;

pub mod arch;
pub mod folio;
pub mod size;

use serde::{Deserialize, Serialize};

pub use arch::Arch;
pub use folio::FolioSpec;

/// The catalogue of experiments, one per seed (docs/architecture.md, "Workloads").
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Seed 001: touch once, then mprotect alternating PROT_NONE and PROT_READ|PROT_WRITE.
    MprotectToggle,
    /// Seed 000: mprotect PROT_READ, then PROT_READ|PROT_WRITE, then re-touch every page.
    MprotectRoRw,
    /// Seed 002: map, fill, mremap MAYMOVE|FIXED to addr+len, munmap.
    MremapMove,
    /// Seed 003: NONE->RW and RW->NONE timed separately (TLB-flush elision).
    ProtTransition,
    /// Seed 004: large folios reclaimed, young bits cleared.
    Reclaim,
}

impl WorkloadKind {
    /// Every workload, in catalogue order.
    pub const ALL: [WorkloadKind; 5] = [
        WorkloadKind::MprotectRoRw,
        WorkloadKind::MprotectToggle,
        WorkloadKind::MremapMove,
        WorkloadKind::ProtTransition,
        WorkloadKind::Reclaim,
    ];

    /// The kebab-case name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::MprotectToggle => "mprotect-toggle",
            WorkloadKind::MprotectRoRw => "mprotect-ro-rw",
            WorkloadKind::MremapMove => "mremap-move",
            WorkloadKind::ProtTransition => "prot-transition",
            WorkloadKind::Reclaim => "reclaim",
        }
    }

    /// The seed document this workload reproduces.
    pub fn seed(self) -> &'static str {
        match self {
            WorkloadKind::MprotectRoRw => "000",
            WorkloadKind::MprotectToggle => "001",
            WorkloadKind::MremapMove => "002",
            WorkloadKind::ProtTransition => "003",
            WorkloadKind::Reclaim => "004",
        }
    }

    /// Default region size when `--size` is not given (the seed's own).
    pub fn default_size(self) -> u64 {
        match self {
            WorkloadKind::MprotectRoRw => 1 << 30,
            WorkloadKind::MprotectToggle => 400 << 10,
            WorkloadKind::MremapMove => 1 << 20,
            WorkloadKind::ProtTransition => 400 << 10,
            WorkloadKind::Reclaim => 64 << 20,
        }
    }

    /// The phases a bench of this workload measures, one cell each, when
    /// their names do not depend on the kernel: empty for a workload timed
    /// as one unnamed phase; None for reclaim, whose one phase is named
    /// after the reclaim method the guest kernel allows.
    pub fn phases(self) -> Option<&'static [&'static str]> {
        match self {
            WorkloadKind::MprotectRoRw | WorkloadKind::MprotectToggle => Some(&[]),
            WorkloadKind::MremapMove => Some(&MREMAP_PHASES),
            WorkloadKind::ProtTransition => Some(&PROT_TRANSITION_PHASES),
            WorkloadKind::Reclaim => None,
        }
    }

    /// The parts of one timed phase that the guest marks apart for ptelab's
    /// QEMU plugin, by marker phase: the toggle's PROT_READ|PROT_WRITE calls
    /// are marker phase 0 and its PROT_NONE calls marker phase 1, the
    /// directions prot-transition times apart. The cell's figure stays
    /// the mean of every call; its profile has one part per direction
    /// (`Profile::parts`), which is what lets a fit on the toggle price
    /// each direction (docs/model.md, "The cost model").
    pub fn marked_parts(self) -> &'static [&'static str] {
        match self {
            WorkloadKind::MprotectToggle => &PROT_TRANSITION_PHASES,
            _ => &[],
        }
    }
}

/// prot-transition's phases, in the order the runner reports them.
pub const PROT_TRANSITION_PHASES: [&str; 2] = ["none-to-rw", "rw-to-none"];

/// mremap-move's phases: the mremap call alone, and the whole iteration.
pub const MREMAP_PHASES: [&str; 2] = ["mremap", "iteration"];

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
