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
use crate::fleet::slurm::{self, Batch, Task, TaskState};
use crate::fleet::{Job, Settings};
use crate::guest::source::cache::Cache;
use crate::record::Accel;
use crate::store::{RunId, Store};
use crate::workload::size::format_size;
use crate::workload::Arch;

/// What `--executor slurm` and its options asked for.
#[derive(Clone, Debug, Default)]
pub struct SlurmRequest {
    pub options: slurm::Options,
    /// `--cache DIR`: kernels, guest binaries and ptelab staged there.
    pub shared_cache: bool,
    /// How the database is shown (never with its password).
    pub db: String,
}

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
    let lines: Vec<Vec<String>> = planned
        .iter()
        .map(|p| task_args(p, settings, tags))
        .collect();
    let key = slurm::batch_key(&format!("reproduce {}", req.db), &lines);
    let task_tags: Vec<String> = (0..lines.len())
        .map(|i| format!("slurm-{key}-{i}"))
        .collect();
    let tasks: Vec<Task> = lines
        .into_iter()
        .zip(&task_tags)
        .zip(planned)
        .map(|((mut line, tag), p)| {
            let at = line.iter().position(|a| a == "--").unwrap_or(line.len());
            line.splice(at..at, ["--tag".to_string(), tag.clone()]);
            Task {
                name: format!(
                    "{} {} {}",
                    p.job.kernel.spec,
                    p.arch.name(),
                    p.run.workload.name()
                ),
                program: program.clone(),
                args: line,
            }
        })
        .collect();
    let before: Vec<Option<RunId>> = task_tags.iter().map(|t| store.resolve(t).ok()).collect();
    let found = |i: usize| -> Option<RunId> {
        let id = store.resolve(&task_tags[i]).ok()?;
        (Some(id) != before[i] || opts.resume).then_some(id)
    };
    let batch = Batch::new(&cache.root, key, tasks);
    let outcome = batch.run(&opts, &|i| found(i).is_some())?;
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

/// The `ptelab vm` command line of one guest run.
fn task_args(p: &Planned, settings: &Settings, tags: &[String]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "vm".into(),
        "--kernel".into(),
        p.job.kernel.spec.to_string(),
        "--arch".into(),
        p.arch.name().into(),
        "--accel".into(),
        p.accel.name().into(),
        "--memory".into(),
        format_size(settings.memory),
        "--timeout".into(),
        format!("{}s", settings.timeout.as_secs_f64()),
    ];
    if p.accel == Accel::Tcg && settings.profile != crate::fleet::ProfileRequest::Off {
        a.push("--profile".into());
    }
    for t in tags {
        a.extend(["--tag".into(), t.clone()]);
    }
    a.push("--".into());
    // The guest command as the fleet would give it, less what only a guest
    // answering its host needs: the task's vm stores the run itself.
    a.extend(
        p.job
            .args
            .iter()
            .filter(|w| *w != "--no-store" && *w != "--json")
            .cloned(),
    );
    a
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
