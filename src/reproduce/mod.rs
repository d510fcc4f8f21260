//! `ptelab reproduce`: every seed experiment, measured here and modelled for
//! x86-64 and arm64, printed beside the seed's own published figure, with a
//! verdict per claim.
//!
//! The catalogue is data ([`seeds`]): for each seed, its published figures
//! (quoted with their machine and kernel, always labelled "published"), the
//! kernel cells and model cells that test it, and a function that turns the
//! evidence into claim rows. A claim's verdict names what decided it:
//! `measured` (a number from this run on this kernel), `model` (the model's
//! counts), or `not measurable here` with the reason.

pub mod claims;

use ptelab_model::workload::ModelOutcome;

use crate::record::CellResult;
use crate::workload::{FolioSpec, WorkloadKind};

/// A figure quoted from a seed document.
#[derive(Clone, Debug)]
pub struct Published {
    /// What was measured, in the seed's words.
    pub what: &'static str,
    /// The figure(s).
    pub figure: &'static str,
    /// Machine and kernel it was measured on.
    pub on: &'static str,
}

/// Kernel cells a seed needs: one workload over sizes x folios.
#[derive(Clone, Debug)]
pub struct KernelCells {
    pub workload: WorkloadKind,
    pub sizes: Vec<u64>,
    pub folios: Vec<FolioSpec>,
}

/// A model cell: one workload on one arch under some strategies.
#[derive(Clone, Debug)]
pub struct ModelCells {
    pub workload: WorkloadKind,
    /// "x86_64" or "arm64" (4K granule, contpte on).
    pub arch: &'static str,
    pub strategies: &'static str,
    pub size: u64,
    pub folio: FolioSpec,
}

/// One seed experiment.
pub struct Seed {
    pub id: &'static str,
    pub title: &'static str,
    pub published: Vec<Published>,
    pub kernel: Vec<KernelCells>,
    pub model: Vec<ModelCells>,
}

/// (arch, workload, size, folio) of a model cell.
pub type ModelKey = (String, WorkloadKind, u64, FolioSpec);

/// Everything measured and modelled in one reproduce run.
#[derive(Default)]
pub struct Evidence {
    pub cells: Vec<CellResult>,
    /// Model outcomes per strategy, by cell.
    pub model: Vec<(ModelKey, Vec<ModelOutcome>)>,
    /// Kernel cells that could not run, with the reason.
    pub unavailable: Vec<(WorkloadKind, String)>,
}

impl Evidence {
    /// The measured cell for these parameters, if it ran.
    pub fn cell(
        &self,
        w: WorkloadKind,
        size: u64,
        folio: FolioSpec,
        phase: Option<&str>,
    ) -> Option<&CellResult> {
        self.cells.iter().find(|c| {
            c.workload == w
                && c.size_bytes == size
                && c.folio == folio
                && c.phase.as_deref() == phase
        })
    }

    /// The model outcome of `strategy` for these parameters.
    pub fn model(
        &self,
        arch: &str,
        w: WorkloadKind,
        size: u64,
        folio: FolioSpec,
        strategy: &str,
    ) -> Option<&ModelOutcome> {
        self.model
            .iter()
            .find(|((a, wk, s, f), _)| a == arch && *wk == w && *s == size && *f == folio)
            .and_then(|(_, v)| v.iter().find(|o| o.strategy == strategy))
    }

    /// Why a workload has no kernel cells, when it has none.
    pub fn why_unavailable(&self, w: WorkloadKind) -> Option<&str> {
        self.unavailable
            .iter()
            .find(|(wk, _)| *wk == w)
            .map(|(_, why)| why.as_str())
    }
}

pub use crate::report::view::ClaimRow;

const K: u64 = 1 << 10;
const M: u64 = 1 << 20;

/// The seed catalogue. `quick` shrinks sizes and grids to fit in minutes.
pub fn seeds(quick: bool) -> Vec<Seed> {
    let f4k = FolioSpec::Base;
    let f64k = FolioSpec::Mthp(64 * K);
    let ro_rw_size = if quick { 64 * M } else { 1 << 30 };
    let toggle_sizes: Vec<u64> = if quick {
        vec![4 * K, 40 * K, 400 * K, 4000 * K, 40000 * K]
    } else {
        vec![
            4 * K,
            40 * K,
            400 * K,
            4000 * K,
            40000 * K,
            400000 * K,
            4000000 * K,
        ]
    };
    vec![
        Seed {
            id: "000",
            title: "mm: optimize mprotect() by PTE batching (Dev Jain, v5)",
            published: vec![
                Published {
                    what: "1G, mprotect RO then RW 40 times, T1 = PTE-mapped 2M THP, T2 = 64K mTHP, T3 = 4K",
                    figure: "before: T1 2.1 s, T2 2 s, T3 1 s; after: T1 0.65 s, T2 0.7 s, T3 1.1 s",
                    on: "arm64 Apple M3",
                },
                Published {
                    what: "same test",
                    figure: "before: T1 3.75 s, T2 3.7 s, T3 3.85 s; after: T1 3.7 s, T2 3.7 s, T3 3.9 s",
                    on: "x86",
                },
            ],
            kernel: vec![KernelCells {
                workload: WorkloadKind::MprotectRoRw,
                sizes: vec![ro_rw_size],
                folios: vec![f4k, f64k, FolioSpec::PmdPte],
            }],
            model: [f4k, f64k, FolioSpec::PmdPte]
                .into_iter()
                .flat_map(|folio| {
                    ["x86_64", "arm64"].map(|arch| ModelCells {
                        workload: WorkloadKind::MprotectRoRw,
                        arch,
                        strategies: "per-pte,batched",
                        size: ro_rw_size,
                        folio,
                    })
                })
                .collect(),
        },
        Seed {
            id: "001",
            title: "[REGRESSION] mm/mprotect: 2x+ slowdown for >=400KiB regions since PTE batching (Luke Yang)",
            published: vec![
                Published {
                    what: "mprot_tw4m_regsize, nsec per mprotect call, 4 / 40 / 400 / 4000 / 40000 KiB",
                    figure: "v6.16: 1713 / 2071 / 3453 / 18804 / 172613",
                    on: "AMD EPYC Zen 3 (Milan)",
                },
                Published {
                    what: "same",
                    figure: "v6.17-rc1: 1775 / 2362 / 5993 / 44116 / 427731",
                    on: "AMD EPYC Zen 3 (Milan)",
                },
            ],
            kernel: vec![KernelCells { workload: WorkloadKind::MprotectToggle, sizes: toggle_sizes, folios: vec![f4k] }],
            model: vec![ModelCells {
                workload: WorkloadKind::MprotectToggle,
                arch: "x86_64",
                strategies: "per-pte,batched,smallfast",
                size: 4000 * K,
                folio: f4k,
            }],
        },
        Seed {
            id: "002",
            title: "mm: optimize mremap() by PTE batching (Dev Jain, v4)",
            published: vec![Published {
                what: "1M of 64K folios: mmap, memset, mremap to addr+1M, munmap; 10,000 times",
                figure: "1.9 s -> 1.2 s (37%); no regression for small folios",
                on: "arm64 Apple M3",
            }],
            kernel: vec![KernelCells { workload: WorkloadKind::MremapMove, sizes: vec![M], folios: vec![f4k, f64k] }],
            model: [f4k, f64k]
                .into_iter()
                .flat_map(|folio| {
                    ["x86_64", "arm64"].map(|arch| ModelCells {
                        workload: WorkloadKind::MremapMove,
                        arch,
                        strategies: "per-pte,batched",
                        size: M,
                        folio,
                    })
                })
                .collect(),
        },
        Seed {
            id: "003",
            title: "arm64/mm: Elide TLB flush in certain pte protection transitions (Dev Jain, v2)",
            published: vec![Published {
                what: "none->rw mprotect transition, average time",
                figure: "3.2 us -> 2.85 us (12.3%)",
                on: "arm64, based on 6.18-rc1",
            }],
            kernel: vec![KernelCells {
                workload: WorkloadKind::ProtTransition,
                sizes: vec![4 * K, 400 * K],
                folios: vec![f4k],
            }],
            model: ["x86_64", "arm64"]
                .map(|arch| ModelCells {
                    workload: WorkloadKind::ProtTransition,
                    arch,
                    strategies: "batched,batched-v6.19",
                    size: 400 * K,
                    folio: f4k,
                })
                .to_vec(),
        },
        Seed {
            id: "004",
            title: "arm64: implement test_and_clear_young_ptes (Baolin Wang)",
            published: vec![Published {
                what: "MGLRU on, 10G clean file folios in a memcg, memory.reclaim of 8G",
                figure: "real 0.470 s -> 0.180 s (60%+ on arm64; about 15% on x86)",
                on: "arm64 32-core server; an x86 machine",
            }],
            kernel: vec![KernelCells {
                workload: WorkloadKind::Reclaim,
                sizes: vec![if quick { 64 * M } else { 256 * M }],
                folios: vec![f4k, f64k],
            }],
            model: ["x86_64", "arm64"]
                .map(|arch| ModelCells {
                    workload: WorkloadKind::Reclaim,
                    arch,
                    strategies: "per-pte,smallfast",
                    size: 64 * M,
                    folio: f64k,
                })
                .to_vec(),
        },
    ]
}
