//! The view's parts built from stored runs and cells: run references, sides
//! and rows of a pairwise comparison, verdict words.

use ptelab_stats::compare::{Comparison, Verdict};

use super::pair::folio_label;
use super::view::{CompareRow, RunRef, SideView, VerdictKind};
use crate::record::CellResult;
use crate::store::StoredRun;

pub(super) fn hex(seed: u64) -> String {
    format!("{seed:#018x}")
}

pub(super) fn run_ref(name: &str, r: &StoredRun) -> RunRef {
    RunRef {
        name: name.to_string(),
        id: r.run.id,
        kind: r.run.kind.clone(),
        kernel_release: r.run.kernel_release.clone(),
        machine_id: r.run.machine_id.clone(),
        started_at: r.run.started_at.clone(),
        tags: r.run.tags.clone(),
        guest: r.run.guest.clone(),
        runs: Vec::new(),
    }
}

fn side(c: Option<&CellResult>) -> Option<SideView> {
    c.map(|c| SideView {
        median_ns: c.ns_per_call.median,
        samples: c.ns_per_call.samples.len(),
        layout: c.layout.summary(),
        runs: None,
    })
}

pub(super) fn row(a: Option<&CellResult>, b: Option<&CellResult>, r: &Comparison) -> CompareRow {
    let any = a.or(b).expect("a pair has at least one cell");
    let verdict = verdict_kind(&r.verdict);
    let reason = match &r.verdict {
        Verdict::NotComparable(why) => Some(why.to_string()),
        _ => None,
    };
    let est = r.estimate.as_ref();
    let slopes: &[f64] = est.map_or(&[], |e| &e.drift_slopes);
    CompareRow {
        workload: any.workload.name().to_string(),
        size_bytes: any.size_bytes,
        folio: folio_label(a, b),
        phase: any.phase.clone(),
        regions: any.regions,
        neighbor: any.neighbor,
        a: side(a),
        b: side(b),
        ratio: est.map(|e| e.ratio),
        ratio_raw: match (a, b, slopes.first()) {
            (Some(x), Some(y), Some(_)) => Some(y.ns_per_call.median / x.ns_per_call.median),
            _ => None,
        },
        // The covariates are [kernel speed, memory latency when recorded].
        drift_slope: slopes.first().copied(),
        memory_slope: slopes.get(1).copied(),
        ci_low: est.map(|e| e.ci_low),
        ci_high: est.map(|e| e.ci_high),
        p_value: est.map(|e| e.p_value),
        p_holm: r.p_adjusted,
        seed: est.map(|e| hex(e.seed)),
        verdict,
        reason,
        guest_bias: None,
        run_sd: None,
    }
}

pub(super) fn verdict_kind(v: &Verdict) -> VerdictKind {
    match v {
        Verdict::Regression => VerdictKind::Regression,
        Verdict::Improvement => VerdictKind::Improvement,
        Verdict::NoChange => VerdictKind::NoChange,
        Verdict::NotComparable(_) => VerdictKind::NotComparable,
    }
}

#[cfg(test)]
mod tests {
    use ptelab_stats::compare::DEFAULT_SEED;

    #[test]
    fn seeds_print_as_hex() {
        assert_eq!(super::hex(DEFAULT_SEED), "0x7074656c61620001");
    }
}
