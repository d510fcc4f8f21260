//! `reproduce --kernels … --executor slurm`: the seeds' guest runs as the
//! tasks of one Slurm job array (`fleet::slurm`), each the `ptelab vm
//! --kernel K -- sweep …` that boots the guest a local reproduce would, its
//! run stored in the shared database; the runs are then read back from the
//! database into the same evidence a local reproduce gathers, so verdicts
//! and reports come out as they do locally (docs/cluster.md).
//!
//! Cells a guest could not measure are not stored, so they are missing from
//! the evidence here rather than named (a local reproduce names them).

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;

use super::guests::{GuestEvidence, GuestRun, PlannedRun};
use crate::fleet::slurm::{self, Stored, TaskState};
use crate::fleet::{Job, Settings};
use crate::guest::source::cache::Cache;
use crate::record::Accel;
use crate::store::Store;
use crate::workload::Arch;

pub use crate::fleet::slurm::Request as SlurmRequest;

/// One guest run to submit.
pub struct Planned<'a> {
    pub arch: Arch,
    pub accel: Accel,
    pub run: &'a PlannedRun,
    pub job: Job<'a>,
}

/// Run every planned guest as a task of one job array, and add what each
/// stored to `ev` (a task that failed becomes a note on its seeds).
pub fn measure(
    req: &SlurmRequest,
    cache: &Cache,
    planned: &[Planned],
    settings: &Settings,
    store: &Store,
    tags: &[String],
    ev: &mut GuestEvidence,
) -> anyhow::Result<()> {
    let mut opts = req.options.clone();
    let program = if req.shared_cache {
        stage(cache, planned, &mut opts.env)?
    } else {
        std::env::current_exe().context("finding this ptelab")?
    };
    let tasks: Vec<(String, PathBuf, Vec<String>)> = planned
        .iter()
        .map(|p| {
            let line = slurm::vm_line(
                &p.job.kernel.spec.to_string(),
                p.arch,
                p.accel.name(),
                settings,
                p.accel == Accel::Tcg && settings.profile != crate::fleet::ProfileRequest::Off,
                tags,
                &p.job.args,
            );
            let name = format!(
                "{} {} {}",
                p.job.kernel.spec,
                p.arch.name(),
                p.run.workload.name()
            );
            (name, program.clone(), line)
        })
        .collect();
    let stored = Stored::new(
        &cache.root,
        &format!("reproduce {}", req.db),
        store,
        tasks,
        opts.resume,
    );
    let batch = &stored.batch;
    let found = |i| stored.found(i);
    let outcome = stored.run(&opts)?;
    for (i, (p, state)) in planned.iter().zip(&outcome.states).enumerate() {
        let seeds = p.run.seeds.join(",");
        let guest = format!("{} guest {}", p.arch.name(), p.job.kernel.spec);
        let id = match (state, found(i)) {
            (TaskState::Done, Some(id)) => id,
            (state, _) => {
                let what = if *state == TaskState::Done {
                    "stored no run".to_string()
                } else {
                    format!("ended {state:?}")
                };
                let log = batch.logs(i).1.display().to_string();
                ev.notes
                    .push((seeds, format!("{guest}: its Slurm task {what}; log {log}")));
                continue;
            }
        };
        let stored = store.load(id)?;
        ev.runs.push(GuestRun {
            arch: p.arch,
            kernel: p.job.kernel.spec.to_string(),
            release: stored.run.kernel_release.clone(),
            metric: stored.run.metric(),
            workload: p.run.workload,
            cells: stored.kernel_cells().cloned().collect(),
            failed: Vec::new(),
            run_id: Some(id),
        });
    }
    Ok(())
}

/// `--cache DIR`: the kernels are in it already (resolved there); put the
/// guest binaries and this ptelab there too. Returns the ptelab tasks run.
fn stage(
    cache: &Cache,
    planned: &[Planned],
    env: &mut Vec<(String, OsString)>,
) -> anyhow::Result<PathBuf> {
    let mut arches: Vec<Arch> = planned.iter().map(|p| p.arch).collect();
    arches.sort();
    arches.dedup();
    slurm::stage_binaries(&cache.root, &arches, env)
}
