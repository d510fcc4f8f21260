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

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_analysis as analysis;
use ptelab_crosscheck as crosscheck;
use ptelab_error as error;
use ptelab_fleet as fleet;
use ptelab_guest as guest;
use ptelab_predict as predict;
use ptelab_record as record;
use ptelab_report as report;
use ptelab_store as store;
use ptelab_text as text;
use ptelab_workload as workload;

pub mod changes;
pub mod claims;
pub mod guests;
pub mod in_guests;
pub mod mechanism;
pub mod patch;
pub mod predicted;

use ptelab_model::workload::ModelOutcome;

use crate::record::CellResult;
use crate::workload::{Arch, FolioSpec, WorkloadKind};
use guests::{GuestCells, GuestEvidence, Role};

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
    /// 4K granule, contpte on.
    pub arch: Arch,
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
    /// Cells measured in QEMU guests of the kernels around its change.
    pub guest: Vec<GuestCells>,
    /// The kernel code its experiment runs through beside [`PTE_CODE`], as
    /// path prefixes of a tree (`mm/mprotect.c`,
    /// `arch/arm64/include/asm/tlbflush.h`): `patch --seeds auto` measures
    /// the seeds whose code a patch touches.
    pub code: &'static [&'static str],
}

impl Seed {
    /// Whether a change to `files` (paths in a kernel tree) touches the
    /// code this seed's experiment runs through.
    pub fn touched_by(&self, files: &[String]) -> bool {
        files.iter().any(|f| {
            self.code
                .iter()
                .chain(PTE_CODE.iter())
                .any(|c| f.starts_with(c))
        })
    }
}

/// Code every seed's page-table paths share: the PTE helpers, batching
/// (`folio_pte_batch` in mm/internal.h) and the arches' pgtable headers.
const PTE_CODE: [&str; 7] = [
    "include/linux/pgtable.h",
    "include/linux/mm.h",
    "mm/internal.h",
    "arch/x86/include/asm/pgtable",
    "arch/arm64/include/asm/pgtable",
    "arch/arm64/mm/contpte.c",
    "arch/x86/mm/pgtable.c",
];

/// (arch, workload, size, folio) of a model cell.
pub type ModelKey = (Arch, WorkloadKind, u64, FolioSpec);

/// Everything measured and modelled in one reproduce run.
#[derive(Default)]
pub struct Evidence {
    pub cells: Vec<CellResult>,
    /// Model outcomes per strategy, by cell.
    pub model: Vec<(ModelKey, Vec<ModelOutcome>)>,
    /// Kernel cells that could not run, with the reason.
    pub unavailable: Vec<(WorkloadKind, String)>,
    /// Cells measured in guests of other kernels (`--kernels`).
    pub guests: GuestEvidence,
    /// The cost model fitted on the guests' cells ([`predicted`]).
    pub predicted: predicted::Predicted,
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

    /// The model outcome of `strategy` for these parameters (a strategy's
    /// name or one of its aliases, on either side).
    pub fn model(
        &self,
        arch: Arch,
        w: WorkloadKind,
        size: u64,
        folio: FolioSpec,
        strategy: &str,
    ) -> Option<&ModelOutcome> {
        self.model
            .iter()
            .find(|((a, wk, s, f), _)| *a == arch && *wk == w && *s == size && *f == folio)
            .and_then(|(_, v)| {
                let want = strategy.parse::<ptelab_model::Strategy>().ok();
                v.iter().find(|o| {
                    o.strategy == strategy
                        || (want.is_some()
                            && o.strategy.parse::<ptelab_model::Strategy>().ok() == want)
                })
            })
    }
}

use crate::report::view::claims::{dedup_sentences, verdict_counts, verdict_table};
pub use crate::report::view::ClaimRow;

/// A claim as `reproduce` prints it: the claim, its published, measured,
/// modelled and predicted lines, and the verdict.
pub fn claim_text(r: &ClaimRow) -> String {
    let mut s = format!("  claim: {}\n", r.claim);
    for (label, v) in [
        ("published", &r.published),
        ("measured", &r.measured),
        ("model", &r.model),
        ("predicted", &r.predicted),
    ] {
        if let Some(v) = v {
            s.push_str(&format!("    {label:>9}: {}\n", dedup_sentences(v)));
        }
    }
    s.push_str(&format!(
        "    {:>9}: {}\n",
        "verdict",
        dedup_sentences(&r.verdict)
    ));
    s
}

/// The one note on guest bias for the whole run: which cells lack a
/// calibration (`calibrate --guest`) and the command for each; empty when
/// every compared guest cell has one.
pub fn bias_note(rows: &[ClaimRow]) -> String {
    let mut remedies: Vec<&str> = Vec::new();
    for r in rows.iter().flat_map(|r| &r.uncalibrated) {
        if !remedies.contains(&r.as_str()) {
            remedies.push(r);
        }
    }
    if remedies.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "guest bias not calibrated for {} cell{} (their changes were judged against the \
         metric's fixed noise, 1% of instructions; docs/guests.md); calibrate each with:\n",
        remedies.len(),
        if remedies.len() == 1 { "" } else { "s" }
    );
    for r in remedies {
        let r = r
            .strip_prefix("guest bias not calibrated for ")
            .unwrap_or(r);
        let r = r.replacen(": run ", ": ", 1);
        s.push_str(&format!("  {r}\n"));
    }
    s
}

/// The closing table of `reproduce`: one line per claim (seed, claim, arch,
/// verdict, measured vs published), then the claims per verdict word.
pub fn closing_text(rows: &[ClaimRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from("verdicts:\n");
    for line in verdict_table(rows).text(" | ").lines() {
        s.push_str(&format!("  {line}\n"));
    }
    s.push_str(&format!("{}\n", verdict_counts(rows)));
    s
}

/// The cost model's paragraph of `reproduce`'s text: what each arch's costs
/// were fitted on, or why not; empty without TCG guests.
pub fn cost_model_text(p: &predicted::Predicted) -> String {
    let lines = p.summary();
    if lines.is_empty() {
        return String::new();
    }
    let mut s = "cost model (docs/model.md, \"The cost model\"): guest instructions per call \
                 inside the calls as the QEMU plugin counted them = fixed + sum of model counter \
                 x cost, fitted per arch on this run's counted mprotect-toggle cells, each \
                 direction apart; \"extrapolated\" marks a cell that mixes counters the fit saw \
                 only in fixed proportions (their joint cost split evenly):\n"
        .to_string();
    for l in lines {
        s.push_str(&format!("  {l}\n"));
    }
    s
}

const K: u64 = 1 << 10;
const M: u64 = 1 << 20;

/// Region sizes of seed 001's sweep measured in guests: its published rows
/// up to 40000 KiB (quick) or 400000 KiB (a 1 GiB guest's limit).
pub fn toggle_guest_sizes(quick: bool) -> Vec<u64> {
    let n = if quick { 5 } else { 6 };
    (0..n).map(|i| 4 * K * 10u64.pow(i)).collect()
}

/// seed 000's region: the seed's 1G, or 64M with `--quick` (stated in
/// every row that uses it).
pub fn ro_rw_size(quick: bool) -> u64 {
    if quick {
        64 * M
    } else {
        1 << 30
    }
}

/// seed 004's page cache: scaled from the seed's 10G to fit a guest.
pub fn reclaim_size(quick: bool) -> u64 {
    if quick {
        64 * M
    } else {
        256 * M
    }
}

/// seed 004's page cache in a guest: `--quick` keeps it small, because
/// every call rewrites and rereads the whole file first, which under TCG on
/// x86-64 costs about two guest iterations per byte (docs/guests.md).
pub fn reclaim_guest_size(quick: bool) -> u64 {
    if quick {
        16 * M
    } else {
        256 * M
    }
}

/// The seed catalogue. `quick` shrinks sizes and grids to fit in minutes.
pub fn seeds(quick: bool) -> Vec<Seed> {
    let f4k = FolioSpec::Base;
    let f64k = FolioSpec::Mthp(64 * K);
    let ro_rw_size = ro_rw_size(quick);
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
                    what: "\"Mapping 1G of memory\", mprotect read-only then read-write 40 times; T1 = PTE-mapped PMD-THPs, T2 = 64K mTHPs, T3 = 4K pages",
                    figure: "\"Before the patchset: T1: 2.1 seconds T2: 2 seconds T3: 1 second / After the patchset: T1: 0.65 seconds T2: 0.7 seconds T3: 1.1 seconds\"",
                    on: "arm64, Apple M3 (cover letter)",
                },
                Published {
                    what: "same test",
                    figure: "\"Before the patchset: T1: 3.75 seconds T2: 3.7 seconds T3: 3.85 seconds / After the patchset: T1: 3.7 seconds T2: 3.7 seconds T3: 3.9 seconds\"",
                    on: "x86 (cover letter)",
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
                    Arch::ALL.map(|arch| ModelCells {
                        workload: WorkloadKind::MprotectRoRw,
                        arch,
                        strategies: "v6.16,v6.17",
                        size: ro_rw_size,
                        folio,
                    })
                })
                .collect(),
            guest: vec![GuestCells {
                roles: vec![Role::Before("mprotect-batching"), Role::After("mprotect-batching")],
                workload: WorkloadKind::MprotectRoRw,
                sizes: vec![ro_rw_size],
                folios: vec![FolioSpec::PmdPte, f64k, f4k],
            }],
            code: &["mm/mprotect.c", "include/asm-generic/tlb.h", "arch/arm64/include/asm/tlbflush.h", "arch/x86/include/asm/tlbflush.h", "arch/x86/mm/tlb.c"],
        },
        Seed {
            id: "001",
            title: "[REGRESSION] mm/mprotect: 2x+ slowdown for >=400KiB regions since PTE batching (Luke Yang)",
            published: vec![
                Published {
                    what: "\"Results (nsec per mprotect call)\", 4 / 40 / 400 / 4000 / 40000 / 400000 KiB",
                    figure: "v6.16: 1713 / 2071 / 3453 / 18804 / 172613 / 1699301",
                    on: "AMD EPYC Zen 3 (Milan)",
                },
                Published {
                    what: "same",
                    figure: "v6.17-rc1: 1775 / 2362 / 5993 / 44116 / 427731 / 4252714",
                    on: "AMD EPYC Zen 3 (Milan)",
                },
            ],
            kernel: vec![KernelCells { workload: WorkloadKind::MprotectToggle, sizes: toggle_sizes, folios: vec![f4k] }],
            model: Arch::ALL
                .map(|arch| ModelCells {
                    workload: WorkloadKind::MprotectToggle,
                    arch,
                    strategies: "v6.16,v6.17,v7.0,v7.1",
                    size: 4000 * K,
                    folio: f4k,
                })
                .to_vec(),
            guest: vec![GuestCells {
                roles: vec![
                    Role::Before("mprotect-batching"),
                    Role::After("mprotect-batching"),
                    Role::Before("small-folio-mprotect"),
                    Role::After("small-folio-mprotect"),
                    Role::Newest,
                ],
                workload: WorkloadKind::MprotectToggle,
                sizes: toggle_guest_sizes(quick),
                folios: vec![f4k],
            }],
            code: &["mm/mprotect.c", "mm/memory.c", "include/asm-generic/tlb.h", "arch/arm64/include/asm/tlbflush.h", "arch/x86/include/asm/tlbflush.h", "arch/x86/mm/tlb.c"],
        },
        Seed {
            id: "002",
            title: "mm: optimize mremap() by PTE batching (Dev Jain, v4)",
            published: vec![Published {
                what: "\"Mapping 1M of memory with 64K folios, memsetting it, remapping it to src + 1M, and munmapping it 10,000 times\"",
                figure: "\"the average execution time reduces from 1.9 to 1.2 seconds, giving a 37% performance optimization, on Apple M3 (arm64). No regression is observed for small folios.\"",
                on: "arm64 Apple M3 (cover letter)",
            }],
            kernel: vec![KernelCells { workload: WorkloadKind::MremapMove, sizes: vec![M], folios: vec![f4k, f64k] }],
            model: [f4k, f64k]
                .into_iter()
                .flat_map(|folio| {
                    Arch::ALL.map(|arch| ModelCells {
                        workload: WorkloadKind::MremapMove,
                        arch,
                        strategies: "v6.16,v6.17",
                        size: M,
                        folio,
                    })
                })
                .collect(),
            guest: vec![GuestCells {
                roles: vec![Role::Before("mremap-batching"), Role::After("mremap-batching")],
                workload: WorkloadKind::MremapMove,
                sizes: vec![M],
                folios: vec![f64k, f4k],
            }],
            code: &["mm/mremap.c", "mm/memory.c", "include/asm-generic/tlb.h", "arch/arm64/include/asm/tlbflush.h", "arch/x86/mm/tlb.c"],
        },
        Seed {
            id: "003",
            title: "arm64/mm: Elide TLB flush in certain pte protection transitions (Dev Jain, v2)",
            published: vec![Published {
                what: "\"measuring the average time taken for the none->rw transition\"",
                figure: "\"a reduction from 3.2 microseconds to 2.85 microseconds, giving a 12.3% improvement\"",
                on: "arm64, \"Based on 6.18-rc1\"",
            }],
            kernel: vec![KernelCells {
                workload: WorkloadKind::ProtTransition,
                sizes: vec![4 * K, 400 * K],
                folios: vec![f4k],
            }],
            model: Arch::ALL
                .map(|arch| ModelCells {
                    workload: WorkloadKind::ProtTransition,
                    arch,
                    strategies: "v6.17,v6.19",
                    size: 400 * K,
                    folio: f4k,
                })
                .to_vec(),
            guest: vec![GuestCells {
                roles: vec![Role::Before("arm64-pte-needs-flush"), Role::After("arm64-pte-needs-flush")],
                workload: WorkloadKind::ProtTransition,
                sizes: vec![4 * K, 400 * K],
                folios: vec![f4k],
            }],
            code: &["mm/mprotect.c", "include/asm-generic/tlb.h", "arch/arm64/include/asm/tlbflush.h", "arch/x86/include/asm/tlbflush.h", "arch/x86/mm/tlb.c"],
        },
        Seed {
            id: "004",
            title: "arm64: implement test_and_clear_young_ptes (Baolin Wang)",
            published: vec![Published {
                what: "\"Enable MGLRU, then allocate 10G clean file-backed folios by mmap() in a memory cgroup, and try to reclaim 8G file-backed folios via the memory.reclaim interface.\"",
                figure: "\"W/o patchset: real 0m0.470s ... W/ patchset: real 0m0.180s\"; \"60%+ performance improvement on my Arm64 32-core server (and about 15% improvement on my X86 machine)\"",
                on: "arm64 32-core server; an x86 machine (no x86 timings given)",
            }],
            kernel: vec![KernelCells {
                workload: WorkloadKind::Reclaim,
                sizes: vec![reclaim_size(quick)],
                folios: vec![f4k, f64k],
            }],
            model: Arch::ALL
                .map(|arch| ModelCells {
                    workload: WorkloadKind::Reclaim,
                    arch,
                    strategies: "v6.16,v7.1",
                    size: 64 * M,
                    folio: f64k,
                })
                .to_vec(),
            guest: vec![GuestCells {
                roles: vec![Role::Before("mglru-young-batching"), Role::After("mglru-young-batching")],
                workload: WorkloadKind::Reclaim,
                sizes: vec![reclaim_guest_size(quick)],
                folios: vec![f64k, f4k],
            }],
            code: &["mm/vmscan.c", "mm/rmap.c", "mm/swap", "mm/filemap.c", "mm/memcontrol.c", "include/linux/mmzone.h", "include/linux/swap.h", "arch/arm64/include/asm/tlbflush.h"],
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::view::claims::tests::sample_claims;

    /// The end of `reproduce`'s text: the one note on guest bias, then one
    /// line per claim and the counts.
    #[test]
    fn the_run_closes_with_its_verdicts() {
        let rows = sample_claims();
        let text = format!("{}\n{}", bias_note(&rows), closing_text(&rows));
        assert_eq!(text.matches("calibrate --guest").count(), 1, "{text}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn a_claim_says_a_repeated_sentence_once() {
        let rows = sample_claims();
        let text = claim_text(&rows[2]);
        assert_eq!(text.matches("no kernel offered").count(), 1, "{text}");
        assert!(text.contains("x86_64: 400 KiB, 4000 KiB, 40000 KiB: x86_64 guests"));
    }
}
