//! `reproduce --kernels … --executor slurm`: the seeds' guest runs as the
//! tasks of one Slurm job array (`fleet::slurm`), one task per boot a local
//! reproduce makes: the `ptelab vm --kernel K -- sweep … --then sweep …`
//! that runs a kernel's workloads one after the other in one guest, each
//! run stored in the shared database; the runs are then read back from the
//! database into the same evidence a local reproduce gathers, so verdicts
//! and reports come out as they do locally (docs/cluster.md).
//!
//! Cells a guest could not measure are named in its stored run's guest
//! record, and so in the evidence, as a local reproduce names them.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;

use super::guests::{GuestEvidence, GuestRun, PlannedRun};
use crate::fleet::slurm::{self, Stored, TaskState};
use crate::fleet::{self, Job, Settings};
use crate::guest::source::cache::Cache;
use crate::record::Accel;
use crate::store::{RunId, Store, StoredRun};
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
    // One task per boot a local reproduce makes (a kernel's workloads one
    // after the other, joined by `--then`), started in the same order.
    let jobs: Vec<Job> = planned.iter().map(|p| p.job.clone()).collect();
    let boots = fleet::boots_per_kernel(&jobs);
    // An arch whose QEMU here cannot load the plugin is measured plain on
    // the nodes too (`Fleet::uncounted`).
    let uncounted: Vec<_> = ev.uncounted.iter().map(|(a, _)| *a).collect();
    let tasks: Vec<(String, PathBuf, Vec<String>)> = boots
        .iter()
        .map(|boot| {
            let p = &planned[boot[0]];
            let commands: Vec<Vec<String>> = boot
                .iter()
                .map(|&i| slurm::guest_command(&planned[i].job.args))
                .collect();
            let line = req.vm_line(
                &slurm::VmTask {
                    kernel: &p.job.kernel.spec.to_string(),
                    arch: Some(p.arch),
                    accel: p.accel.name(),
                    profile: p.accel == Accel::Tcg
                        && settings.profile != crate::fleet::ProfileRequest::Off
                        && !uncounted.contains(&p.arch),
                    tags,
                    json: false,
                },
                settings,
                &commands,
            );
            let workloads: Vec<&str> = boot
                .iter()
                .map(|&i| planned[i].run.workload.name())
                .collect();
            let name = format!(
                "{} {} {}",
                p.job.kernel.spec,
                p.arch.name(),
                workloads.join("+")
            );
            (name, program.clone(), line)
        })
        .collect();
    let stored = Stored::new(
        &cache.root,
        &format!("reproduce {}", req.db),
        Some(store),
        tasks,
        opts.resume,
    );
    let outcome = stored.run(&opts)?;
    // Runs and notes in the planned order, as a local reproduce has them.
    let mut runs: Vec<Option<GuestRun>> = planned.iter().map(|_| None).collect();
    let mut notes: Vec<Option<String>> = planned.iter().map(|_| None).collect();
    for (t, (boot, state)) in boots.iter().zip(&outcome.states).enumerate() {
        match (state, stored.found_runs(t)) {
            (TaskState::Done, Some(ids)) => {
                for (&i, id) in boot.iter().zip(ids) {
                    runs[i] = Some(guest_run(&planned[i], &store.load(id)?, id));
                }
            }
            (state, _) => {
                for &i in boot {
                    notes[i] = Some(stored.no_run(t, state));
                }
            }
        }
    }
    let all_read = notes.iter().all(Option::is_none);
    for ((p, run), note) in planned.iter().zip(runs).zip(notes) {
        if let Some(why) = note {
            let guest = format!("{} guest {}", p.arch.name(), p.job.kernel.spec);
            ev.notes
                .push((p.run.seeds.join(","), format!("{guest}: {why}")));
        }
        ev.runs.extend(run);
    }
    stored.batch.close(all_read);
    Ok(())
}

/// A task's stored run as the guest run a local reproduce gathers, with
/// the cells its guest could not measure (kept in the run's guest record).
fn guest_run(p: &Planned, stored: &StoredRun, id: RunId) -> GuestRun {
    GuestRun {
        arch: p.arch,
        kernel: p.job.kernel.spec.to_string(),
        release: stored.run.kernel_release.clone(),
        metric: stored.run.metric(),
        workload: p.run.workload,
        cells: stored.kernel_cells().cloned().collect(),
        failed: stored
            .run
            .guest
            .as_ref()
            .map_or_else(Vec::new, |g| g.not_measured.clone()),
        run_id: Some(id),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{FolioSpec, WorkloadKind};

    /// A cell the task's guest could not measure is stored with its run
    /// and comes back into the evidence, as a local reproduce has it.
    #[test]
    fn cells_a_task_could_not_measure_reach_the_evidence() {
        let d = tempfile::tempdir().unwrap();
        let (k, m) = crate::fleet::tests::fake_answer(
            d.path(),
            serde_json::json!([{"cell": "mprotect-toggle 400K 2M", "error": "no 2M folio"}]),
        );
        let store = Store::open(d.path().join("ptelab.db")).unwrap();
        let id = m.store(&store, "sweep", &k, &[]).unwrap();
        let run = PlannedRun {
            arch: k.arch,
            version: crate::guest::source::Version::parse("6.16.12").unwrap(),
            workload: WorkloadKind::MprotectToggle,
            sizes: vec![400 << 10],
            folios: vec![FolioSpec::Base],
            seeds: vec!["001"],
        };
        let p = Planned {
            arch: k.arch,
            accel: Accel::Tcg,
            run: &run,
            job: Job {
                kernel: &k,
                name: "mprotect-toggle".into(),
                args: vec![],
                program: None,
                disk: None,
                setup: Default::default(),
            },
        };
        let g = guest_run(&p, &store.load(id).unwrap(), id);
        assert_eq!(g.failed, ["mprotect-toggle 400K 2M: no 2M folio"]);
        assert_eq!((g.cells.len(), g.run_id), (1, Some(id)));
    }
}
