//! The bias of a guest figure (`ptelab calibrate --guest`): one cell's
//! figures over K boots that differ only in setup the kernel path does not
//! depend on, per kernel, arch and cell (docs/guests.md, "The bias of a
//! guest figure").

use ptelab_stats::bias::Spread;
use serde::{Deserialize, Serialize};

use crate::workload::{Arch, FolioSpec, WorkloadKind};

/// One cell's spread over boots of one kernel, as `calibrate --guest`
/// measured it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GuestBias {
    /// Row id, once stored.
    pub id: Option<i64>,
    /// The kernel spec booted (`debian:6.17.8`).
    pub kernel: String,
    /// The guest's `uname -r`: what guest runs are matched by, with `arch`.
    pub release: String,
    pub arch: Arch,
    pub workload: WorkloadKind,
    pub size_bytes: u64,
    pub folio: FolioSpec,
    pub phase: Option<String>,
    /// UTC, ISO 8601.
    pub measured_at: String,
    /// The guest command every boot ran (`bench mprotect-toggle --size 400K
    /// --folio 4K`).
    pub command: String,
    /// "instructions" under TCG.
    pub metric: String,
    pub qemu_version: String,
    /// The spread of the boots' per-call medians
    /// (`ptelab_stats::bias::spread`); its range is the bias.
    pub spread: Spread,
    /// Every boot, in order.
    pub boots: Vec<BiasBoot>,
}

/// One boot of a guest calibration: its setup and the cell's figure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BiasBoot {
    /// QEMU's `-seed`.
    pub seed: u64,
    /// Bytes of the padding kernel parameter (0: none).
    pub cmdline_pad: usize,
    /// Bytes of the padding environment variable of the guest's ptelab
    /// (0: none).
    pub env_pad: usize,
    /// The cell's median per call.
    pub median: f64,
    /// The boot's stored run.
    pub run_id: Option<i64>,
}

impl GuestBias {
    /// The bias as a fraction (0.0066 = ±0.66%): the largest change
    /// between two boots' figures, i.e. the largest change between two
    /// figures of this cell that setup alone produced.
    pub fn bias(&self) -> f64 {
        self.spread.range()
    }
}

#[cfg(feature = "store")]
mod sql {
    use anyhow::Context;

    use super::GuestBias;
    use crate::db::params;
    use crate::Store;

    impl Store {
        /// Store a guest bias; returns its id.
        pub fn insert_guest_bias(&self, b: &GuestBias) -> anyhow::Result<i64> {
            let json = serde_json::to_string(b).context("serialize guest bias")?;
            let op = || self.what("store guest bias");
            let tx = self.db.transaction().with_context(op)?;
            let id = tx
                .insert(
                    "INSERT INTO guest_bias (release, arch, workload, size_bytes, folio, phase, \
                     measured_at, spread, bias_json) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id",
                    params![
                        &b.release,
                        b.arch.name(),
                        b.workload.name(),
                        b.size_bytes as i64,
                        b.folio.to_string(),
                        b.phase.clone(),
                        &b.measured_at,
                        b.bias(),
                        json
                    ],
                )
                .with_context(op)?;
            tx.commit().with_context(op)?;
            Ok(id)
        }

        /// Every guest bias stored, oldest first, each with its id.
        pub fn guest_biases(&self) -> anyhow::Result<Vec<GuestBias>> {
            let op = || self.what("read guest biases");
            let rows = self
                .db
                .query(
                    "SELECT id, bias_json FROM guest_bias ORDER BY id",
                    params![],
                )
                .with_context(op)?;
            let mut out = Vec::new();
            for row in rows {
                let (id, json) = (row.int(0).with_context(op)?, row.text(1).with_context(op)?);
                let mut b: GuestBias = serde_json::from_str(&json).with_context(op)?;
                b.id = Some(id);
                out.push(b);
            }
            Ok(out)
        }
    }
}
