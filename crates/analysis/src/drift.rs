//! Machine drift: whether to correct a pair of runs by the probes every
//! block records, and each cell's covariates when it does
//! (docs/statistics.md, "Machine drift").

use super::view::Drift;
use crate::record::{run_median, CellResult, Metric};
use crate::store::StoredRun;

/// When to divide machine drift out (`compare --normalize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalize {
    /// When both runs ran the same kernel release on the same machine (on
    /// different kernels the probe's own syscall path may have changed).
    Auto,
    /// Always, when both runs recorded the probe.
    Probe,
    /// Never: compare raw times.
    None,
}

/// Whether to correct for machine drift between `a` and `b`, and why.
pub(super) fn drift_plan(a: &StoredRun, b: &StoredRun, mode: Normalize, metric: Metric) -> Drift {
    let probe_a = run_median(a.kernel_cells(), |c| &c.probe_ns);
    let probe_b = run_median(b.kernel_cells(), |c| &c.probe_ns);
    let (corrected, why) = match (probe_a, probe_b, mode) {
        // Under icount the probes count instructions too: machine speed
        // moves neither them nor the cells, so there is nothing to divide
        // out, and a probe that differs means the kernel's getppid path
        // differs, which is not drift.
        _ if metric == Metric::Instructions => (
            false,
            "the runs count guest instructions (TCG icount), which machine speed does not \
             change: there is no drift to correct"
                .to_string(),
        ),
        (_, _, Normalize::None) => (false, "--normalize none".to_string()),
        (None, _, _) | (_, None, _) => {
            let old = if probe_a.is_none() { a } else { b };
            (
                false,
                format!(
                    "run {} was measured before ptelab recorded the probe",
                    old.run.id
                ),
            )
        }
        (_, _, Normalize::Probe) => (true, "--normalize probe".to_string()),
        (_, _, Normalize::Auto) if a.run.kernel_release != b.run.kernel_release => (
            false,
            "the runs ran different kernels, whose syscall paths may differ; \
             --normalize probe corrects it"
                .to_string(),
        ),
        (_, _, Normalize::Auto) if a.run.machine_id != b.run.machine_id => (
            false,
            "the runs ran on different machines; --normalize probe corrects it".to_string(),
        ),
        (_, _, Normalize::Auto) => (
            true,
            "same kernel, same machine; --normalize none turns it off".to_string(),
        ),
    };
    Drift {
        probe_a_ns: probe_a,
        probe_b_ns: probe_b,
        memory_a_ns: run_median(a.kernel_cells(), |c| &c.memory_probe_ns),
        memory_b_ns: run_median(b.kernel_cells(), |c| &c.memory_probe_ns),
        corrected,
        why,
    }
}

/// One side's drift covariates, each one value per block.
pub(super) type Covariates<'a> = Vec<&'a [f64]>;

/// A cell's drift covariates: kernel speed, and memory latency if `memory`.
pub(super) fn probe_covariates(c: &CellResult, memory: bool) -> Covariates<'_> {
    let mut v: Vec<&[f64]> = vec![&c.probe_ns];
    if memory {
        v.push(&c.memory_probe_ns);
    }
    v
}
