//! The comparison engine behind `ptelab compare`, `calibrate`, `report` and
//! `reproduce`: pair the measured cells of stored runs, choose the noise
//! threshold, plan the machine-drift correction, compare pairs of runs
//! (`ptelab_stats::compare`) or sets of runs (`ptelab_stats::replicated`),
//! and build the rows of a [`CompareView`]. The method is described in
//! docs/statistics.md.
//!
//! Pure apart from the bootstrap's CPU time: it reads stored runs and
//! calibrations and returns a view; the renderers live in `report::compare`.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_error as error;
use ptelab_record as record;
use ptelab_store as store;
use ptelab_text as text;
use ptelab_workload as workload;

pub mod bias;
mod drift;
#[cfg(test)]
mod exact;
pub mod functions;
mod noise;
mod pair;
mod paired;
mod replicated;
mod rows;
pub mod view;

pub use drift::Normalize;
pub use noise::{calibrated_noise, pooled, NoiseRule};
pub use pair::{incomparable, Measured};
pub use paired::{compare_runs, compare_runs_paired, Rules};
pub use replicated::compare_replicated;
pub use view::{CompareRow, CompareView, Drift, Method, RunRef, SideView, VerdictKind};

#[cfg(any(test, feature = "testing"))]
pub mod tests {
    // Helpers for other layers' tests (feature `testing`) beside this
    // layer's own tests, which alone use the rest.
    #![cfg_attr(not(test), allow(dead_code, unused_imports))]

    use ptelab_stats::compare::CompareOpts;

    use crate::record::{Accel, CellResult, Guest};
    use crate::store::{RunStatus, RunSummary, StoredCell, StoredRun, RUN_SCHEMA};
    use crate::workload::FolioSpec;

    /// A complete sweep run of machine `m`, kernel 6.18, holding `cells`.
    pub fn stored(id: i64, cells: Vec<CellResult>) -> StoredRun {
        StoredRun {
            schema: RUN_SCHEMA.into(),
            run: RunSummary {
                id,
                kind: "sweep".into(),
                command: "ptelab sweep".into(),
                started_at: "2026-05-01T00:00:00Z".into(),
                finished_at: None,
                status: RunStatus::Complete,
                kernel_release: "6.18".into(),
                arch: "x86_64".into(),
                machine_id: "m".into(),
                tool_version: "0.1.0".into(),
                git_revision: None,
                tags: vec![],
                cells: cells.len() as u64,
                guest: None,
            },
            host: serde_json::json!({}),
            cells: cells.into_iter().map(StoredCell::Kernel).collect(),
        }
    }

    pub(crate) fn cell(size_kib: u64, folio: FolioSpec, median: f64, n: usize) -> CellResult {
        let mut c = crate::store::tests::cell(size_kib, folio, median);
        // Deterministic spread of ±0.5% around the median.
        c.ns_per_call.samples = (0..n)
            .map(|i| median * (1.0 + ((i * 7) % 11) as f64 / 1000.0 - 0.005))
            .collect();
        c
    }

    /// [`stored`] as if run in a QEMU guest under `accel`.
    pub fn guest_run(id: i64, accel: Accel, cells: Vec<CellResult>) -> StoredRun {
        let mut r = stored(id, cells);
        let g = Guest::new(
            accel,
            "QEMU emulator version 10.0.2",
            "debian:6.17.13",
            "ab",
        );
        r.host = serde_json::json!({ "guest": g });
        r.run.guest = Some(g);
        r
    }

    /// A cell as a TCG guest measures it: 10 blocks (the runner's default)
    /// of 3 samples, every sample and probe exactly equal, as icount
    /// figures repeat.
    pub fn exact_cell(size_kib: u64, folio: FolioSpec, count: f64) -> CellResult {
        let mut c = crate::store::tests::cell(size_kib, folio, count);
        c.ns_per_call.samples = vec![count; 30];
        c.ns_per_call.ci_low = count;
        c.ns_per_call.ci_high = count;
        c.blocks = vec![3; 10];
        c.probe_ns = vec![298.0; 10];
        c.memory_probe_ns = vec![4.0; 10];
        c
    }

    pub fn opts() -> CompareOpts {
        CompareOpts {
            resamples: 500,
            ..CompareOpts::default()
        }
    }
}
