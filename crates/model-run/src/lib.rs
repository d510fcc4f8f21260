//! The model backend, beside `measure` (the kernel backend): a validated
//! [`ModelPlan`] (catalogue workload, architecture, strategies, size, folio)
//! run on the executable model (`ptelab-model`), one [`ModelCellRecord`] of
//! per-call counters per strategy. `ptelab model` and `ptelab reproduce`
//! both run it.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_error as error;
use ptelab_record as record;
use ptelab_workload as workload;

use ptelab_model::{
    run_model, ArchConfig, Arm64, Granule, ModelConfig, ModelError, ModelOutcome, Strategy,
    Workload,
};
use serde_json::{json, Value};

use crate::error::bail_usage;
use crate::error::usage;
use crate::record::ModelCellRecord;
use crate::workload::{Arch, FolioSpec, WorkloadKind};

/// A validated `ptelab model` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelPlan {
    pub workload: WorkloadKind,
    pub arch: ArchConfig,
    pub strategies: Vec<Strategy>,
    pub size_bytes: u64,
    pub folio: FolioSpec,
    pub offset_pages: u64,
}

/// The model's name for a catalogue workload, or a usage error.
pub fn model_workload(w: WorkloadKind) -> Workload {
    match w {
        WorkloadKind::MprotectToggle => Workload::MprotectToggle,
        WorkloadKind::MprotectRoRw => Workload::MprotectRoRw,
        WorkloadKind::ProtTransition => Workload::ProtTransition,
        WorkloadKind::MremapMove => Workload::MremapMove,
        // Classic LRU: folio_referenced() per folio (the library also has
        // Workload::ReclaimMglru, not selectable here).
        WorkloadKind::Reclaim => Workload::Reclaim,
    }
}

/// The model's arch from `--arch`, `--granule`, `--no-contpte`, `--bbml2`.
pub fn arch_config(
    arch: Arch,
    granule: Granule,
    no_contpte: bool,
    bbml2: bool,
) -> anyhow::Result<ArchConfig> {
    match arch {
        Arch::X86_64 => {
            if granule != Granule::K4 {
                bail_usage!(
                    "granule '{}' is not available on x86_64: accepted granule is 4K",
                    granule.name()
                );
            }
            if no_contpte || bbml2 {
                bail_usage!("--no-contpte and --bbml2 apply to arm64 only: use --arch arm64");
            }
            Ok(ArchConfig::X86)
        }
        Arch::Arm64 => Ok(ArchConfig::Arm64(Arm64 {
            contpte: !no_contpte,
            bbml2,
            ..Arm64::new(granule)
        })),
    }
}

/// Parse `--strategy NAME|all`.
pub fn parse_strategies(text: &str) -> anyhow::Result<Vec<Strategy>> {
    if text.trim().eq_ignore_ascii_case("all") {
        return Ok(Strategy::ALL.to_vec());
    }
    let mut v = Vec::new();
    for name in text.split(',').filter(|s| !s.trim().is_empty()) {
        let s: Strategy = name
            .parse()
            .map_err(|e: ptelab_model::strategy::UnknownStrategy| usage(e.to_string()))?;
        if !v.contains(&s) {
            v.push(s);
        }
    }
    if v.is_empty() {
        bail_usage!("empty --strategy: accepted are {}", Strategy::accepted());
    }
    Ok(v)
}

/// Folio bytes of `spec` as PTE-mapped folios in `granule`, or a usage error.
pub fn folio_bytes(spec: FolioSpec, granule: Granule) -> anyhow::Result<u64> {
    if spec.pmd_mapped() {
        bail_usage!(
            "folio spec '2M' (PMD-mapped THP) is not modelled at the PTE level: accepted specs are {} except 2M \
             (use 2M-pte for PMD-sized folios mapped by PTEs)",
            FolioSpec::accepted()
        );
    }
    let bytes = spec.folio_bytes();
    if bytes < granule.page_size() {
        bail_usage!(
            "folio spec '{spec}' is smaller than the {} granule: accepted specs are those of at least {}",
            granule.name(),
            granule.name()
        );
    }
    Ok(bytes)
}

fn config(plan: &ModelPlan, strategy: Strategy) -> anyhow::Result<ModelConfig> {
    let granule = plan.arch.granule();
    let mut cfg = ModelConfig::new(
        model_workload(plan.workload),
        plan.arch,
        strategy,
        plan.size_bytes,
        folio_bytes(plan.folio, granule)?,
    );
    cfg.offset_pages = plan.offset_pages;
    Ok(cfg)
}

fn model_error(e: ModelError, plan: &ModelPlan) -> anyhow::Error {
    let g = plan.arch.granule();
    match e {
        ModelError::Size { size, .. } => usage(format!(
            "size {size} bytes is not a multiple of the {} base page: accepted sizes are positive multiples of {}",
            g.name(),
            g.name()
        )),
        ModelError::Folio { .. } => usage(format!(
            "folio spec '{}' does not fit the {} granule: accepted specs are {}",
            plan.folio,
            g.name(),
            FolioSpec::accepted()
        )),
        ModelError::Offset { offset, folio_pages } => usage(format!(
            "offset {offset} is past the {} folio: accepted offsets are 0..{} base pages",
            plan.folio,
            folio_pages.saturating_sub(1)
        )),
        ModelError::Unsupported(what) => usage(format!("{what} is not modelled")),
        other => anyhow::anyhow!("model: {other}"),
    }
}

/// Check that `plan` fits the model (size, folio, offset), as usage errors.
pub fn validate(plan: &ModelPlan) -> anyhow::Result<()> {
    let cfg = config(plan, plan.strategies[0])?;
    ptelab_model::workload::geometry(&cfg).map_err(|e| model_error(e, plan))?;
    Ok(())
}

/// Run every strategy of `plan` on the model.
pub fn model_outcomes(plan: &ModelPlan) -> anyhow::Result<Vec<ModelOutcome>> {
    let configs = plan
        .strategies
        .iter()
        .map(|&s| config(plan, s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Strategies are independent: run them on as many threads as there are
    // CPUs, not one each. Each run holds its page table and TLB model
    // (24 bytes a page), so seven strategies at once on two CPUs held seven
    // of them for no gain in time.
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(configs.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<(usize, Result<ModelOutcome, ModelError>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(cfg) = configs.get(i) else {
                            return done;
                        };
                        done.push((i, run_model(cfg)));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("model thread panicked"))
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results
        .into_iter()
        .map(|(_, r)| r.map_err(|e| model_error(e, plan)))
        .collect()
}

/// Everything besides workload/size/folio/arch/strategy that selects a cell.
pub fn params(plan: &ModelPlan, outcome: &ModelOutcome) -> Value {
    let (contpte, bbml2) = match plan.arch {
        ArchConfig::X86 => (false, false),
        ArchConfig::Arm64(a) => (a.contpte, a.bbml2),
    };
    json!({
        "granule": plan.arch.granule().name(),
        "offset_pages": plan.offset_pages,
        "contpte": contpte,
        "bbml2": bbml2,
        "kernel": outcome.kernel,
    })
}

/// The result records of `plan` (counters per mm call), one per strategy,
/// with the outcomes they came from.
pub fn model_cells(plan: &ModelPlan) -> anyhow::Result<Vec<(ModelOutcome, ModelCellRecord)>> {
    let outcomes = model_outcomes(plan)?;
    Ok(outcomes
        .into_iter()
        .map(|o| {
            let rec = ModelCellRecord {
                workload: plan.workload,
                size_bytes: plan.size_bytes,
                folio: plan.folio,
                arch: plan.arch.name().to_string(),
                strategy: o.strategy.clone(),
                params: params(plan, &o),
                counters: o.per_call(),
            };
            (o, rec)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(
        arch: Arch,
        granule: Granule,
        folio: &str,
        size: u64,
        offset: u64,
    ) -> anyhow::Result<ModelPlan> {
        let p = ModelPlan {
            workload: WorkloadKind::MprotectToggle,
            arch: arch_config(arch, granule, false, false)?,
            strategies: Strategy::ALL.to_vec(),
            size_bytes: size,
            folio: folio.parse()?,
            offset_pages: offset,
        };
        validate(&p)?;
        Ok(p)
    }

    #[test]
    fn bad_inputs_are_usage_errors() {
        for err in [
            plan_of(Arch::X86_64, Granule::K16, "4K", 4096, 0).unwrap_err(),
            plan_of(Arch::Arm64, Granule::K16, "4K", 16384, 0).unwrap_err(),
            plan_of(Arch::X86_64, Granule::K4, "64K", 65536, 16).unwrap_err(),
            plan_of(Arch::X86_64, Granule::K4, "4K", 5000, 0).unwrap_err(),
            plan_of(Arch::X86_64, Granule::K4, "2M", 2 << 20, 0).unwrap_err(),
            parse_strategies("v5.4").unwrap_err(),
        ] {
            assert!(crate::error::is_usage(&err), "{err}");
            assert!(!err.to_string().contains('\n'), "{err}");
        }
    }

    #[test]
    fn cells_carry_per_call_counters() {
        let p = plan_of(Arch::Arm64, Granule::K4, "64K", 64 << 10, 0).unwrap();
        let cells = model_cells(&p).unwrap();
        assert_eq!(cells.len(), ptelab_model::Strategy::ALL.len());
        let (_, rec) = &cells[0];
        assert_eq!(rec.strategy, "v6.16");
        assert!(rec.counters["pte_xchg"] > 0.0);
        assert_eq!(rec.params["granule"], "4K");
    }
}
