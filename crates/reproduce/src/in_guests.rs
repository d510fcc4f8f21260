//! Running the seeds' guest cells: which kernels (`guests::plan`, from
//! Debian's offers or the kernels given), fetching them, booting the guests
//! through the fleet, and storing what comes back. A guest that fails or an
//! arch that cannot run guests here becomes a note on the claims it leaves
//! unmeasured, never a silent gap or an abort of the whole reproduce.

use super::guests::{plan, GuestCells, GuestEvidence, GuestRun, PlannedRun};
use super::Seed;
use crate::fleet::{self, Fleet, Job, Measured, Settings};
use crate::guest::source::cache::Cache;
use crate::guest::source::{self, Kernel, KernelChoice, Version};
use crate::record::Accel;
use crate::store::Store;
use crate::workload::size::format_size;
use crate::workload::Arch;
use crate::workload::WorkloadKind;

/// What `--kernels` and `--arch` asked for (typed by the CLI).
pub struct Request {
    pub choice: KernelChoice,
    pub arches: Vec<Arch>,
    pub mirror: Option<String>,
    pub quick: bool,
    /// `--cache DIR`: the kernel cache to use (one the nodes share).
    pub cache: Option<std::path::PathBuf>,
}

/// The guest flags of a run: a short budget under TCG, whose instruction
/// counts repeat to within 0.01% (docs/guests.md), the host's under KVM.
fn budget(accel: Accel, quick: bool) -> Vec<String> {
    let (time, blocks) = match (accel, quick) {
        (Accel::Tcg, true) => ("100ms", 1),
        (Accel::Tcg, false) => ("1s", 1),
        (Accel::Kvm, true) => ("1s", 3),
        (Accel::Kvm, false) => ("3s", 10),
    };
    vec![
        "--time".into(),
        time.into(),
        "--blocks".into(),
        blocks.to_string(),
    ]
}

/// A guest's `sweep` of `cells` with a seed's budget.
pub fn sweep_args(cells: &GuestCells, accel: Accel, quick: bool) -> Vec<String> {
    let join = |v: Vec<String>| v.join(",");
    let mut args = vec![
        "sweep".to_string(),
        cells.workload.name().to_string(),
        "--sizes".into(),
        join(cells.sizes.iter().map(|s| format_size(*s)).collect()),
        "--folios".into(),
        join(cells.folios.iter().map(|f| f.to_string()).collect()),
    ];
    args.extend(budget(accel, quick));
    args.extend(["--no-store".to_string(), "--json".to_string()]);
    args
}

/// The guest boot of a seed's `cells` on `kernel`.
pub fn sweep_job<'a>(kernel: &'a Kernel, cells: &GuestCells, accel: Accel, quick: bool) -> Job<'a> {
    Job {
        kernel,
        name: cells.workload.name().to_string(),
        args: sweep_args(cells, accel, quick),
        program: None,
        disk: (cells.workload == WorkloadKind::Reclaim)
            .then(|| cells.sizes.iter().copied().max().unwrap_or(0)),
        setup: Default::default(),
    }
}

/// The guest boot of a planned run.
fn job_of<'a>(r: &PlannedRun, kernels: &'a [Kernel], accel: Accel, quick: bool) -> Job<'a> {
    let kernel = kernels
        .iter()
        .find(|k| k.arch == r.arch && k.version == Some(r.version))
        .expect("every planned kernel was resolved");
    sweep_job(kernel, &r.cells(), accel, quick)
}

/// The kernels of the default line (Debian: cloud) offered for `arch`: a
/// list fetched within a day will do (no network then; `kernel list
/// --available` fetches it again).
fn offered(cache: &Cache, arch: Arch, opts: &source::Options) -> anyhow::Result<Vec<Version>> {
    let o = source::listing().offered(cache, arch, opts, true)?;
    Ok(o.line(&o.default_line).to_vec())
}

/// Measure `seeds` in guests as `req` asks; store each guest run when a
/// store is given (tagged with `tags` and the kernel). A store that fails
/// once every guest has answered leaves its error in `store_error`, and the
/// runs after it unstored, so that what the guests measured is still judged.
pub fn measure(
    seeds: &[&Seed],
    req: &Request,
    mut settings: Settings,
    store: Option<&Store>,
    tags: &[String],
    store_error: &mut Option<anyhow::Error>,
) -> anyhow::Result<GuestEvidence> {
    let mut ev = GuestEvidence {
        asked: req.arches.clone(),
        ..GuestEvidence::default()
    };
    let cache = match &req.cache {
        Some(root) => Cache { root: root.clone() },
        None => Cache::from_env()?,
    };
    let interrupted = fleet::interrupted();
    let opts = |arch| source::Options {
        arch: Some(arch),
        mirror: req.mirror.clone(),
        interrupted,
        config: crate::guest::build::Config::Ptelab,
        needs: Default::default(),
    };
    let mut planned: Vec<PlannedRun> = Vec::new();
    for &arch in &req.arches {
        if let Err(e) = crate::guest::boot::qemu::find_emulator(arch) {
            ev.missing.push((arch, format!("{e:#}")));
            continue;
        }
        let offers = match &req.choice {
            KernelChoice::Auto => match offered(&cache, arch, &opts(arch)) {
                Ok(v) => v,
                Err(e) => {
                    ev.missing
                        .push((arch, format!("no list of Debian kernels: {e:#}")));
                    continue;
                }
            },
            KernelChoice::Given(_) => Vec::new(),
        };
        let p = plan(seeds, arch, &req.choice, &offers);
        ev.notes
            .extend(p.notes.into_iter().map(|(s, why)| (s.to_string(), why)));
        planned.extend(p.runs);
    }
    // Seed 004's guests need a disk, formatted here: without mkfs.ext4
    // they are left out with the remedy, the rest run.
    if planned.iter().any(|r| r.workload == WorkloadKind::Reclaim) {
        if let Err(e) = crate::guest::boot::disk::find_mkfs() {
            planned.retain(|r| r.workload != WorkloadKind::Reclaim);
            ev.notes.push(("004".into(), format!("{e:#}")));
        }
    }
    if planned.is_empty() {
        return Ok(ev);
    }

    // Every kernel, fetched before the first boot.
    let mut kernels: Vec<Kernel> = Vec::new();
    for run in &planned {
        if kernels
            .iter()
            .any(|k| k.arch == run.arch && k.version == Some(run.version))
        {
            continue;
        }
        let spec = source::listing().default_at(run.version, Some(run.arch));
        eprintln!("ptelab: kernel {spec} ({}) …", run.arch.name());
        kernels.push(spec.resolve(&cache, &opts(run.arch))?);
    }
    let need = planned
        .iter()
        .flat_map(|r| r.sizes.iter().copied())
        .max()
        .unwrap_or(0);
    settings.memory = settings.memory.max(fleet::memory_for(need));
    // Both arches' guest binaries in one cargo invocation when both can be
    // built; when one cannot, each arch's own preparation below says why.
    let arches: Vec<Arch> = req
        .arches
        .iter()
        .copied()
        .filter(|a| kernels.iter().any(|k| k.arch == *a))
        .collect();
    if arches.len() > 1 {
        let _ = crate::guest::boot::binary::guest_binaries(&arches);
    }
    let mut usable = Vec::new();
    for arch in req.arches.iter().copied() {
        let ks: Vec<Kernel> = kernels.iter().filter(|k| k.arch == arch).cloned().collect();
        if ks.is_empty() {
            continue;
        }
        // One arch that cannot run guests (no musl target, no KVM asked
        // for) leaves the other one running.
        match Fleet::prepare(&cache, settings.clone(), &ks) {
            Ok(f) => {
                if let Some(why) = f.uncounted(arch) {
                    ev.uncounted.push((arch, why.to_string()));
                }
                usable.push((arch, f))
            }
            Err(e) => ev.missing.push((arch, format!("{e:#}"))),
        }
    }
    // One queue for both arches, and one boot per kernel: a kernel's
    // workloads run one after the other in the same guest.
    let Some(fleet) = usable.into_iter().map(|(_, f)| f).reduce(Fleet::join) else {
        return Ok(ev);
    };
    let runs: Vec<&PlannedRun> = planned
        .iter()
        .filter(|r| fleet.accel(r.arch).is_some())
        .collect();
    let jobs: Vec<Job> = runs
        .iter()
        .map(|r| {
            job_of(
                r,
                &kernels,
                fleet.accel(r.arch).expect("prepared"),
                req.quick,
            )
        })
        .collect();
    let finished = fleet.run_per_kernel(&jobs)?;
    for ((run, job), done) in runs.iter().zip(&jobs).zip(finished) {
        let arch = run.arch;
        let seeds = run.seeds.join(",");
        let out = match done.answer {
            Ok(out) => out,
            Err(e) => {
                ev.notes.push((
                    seeds,
                    format!("{} guest {}: {e:#}", arch.name(), job.kernel.spec),
                ));
                continue;
            }
        };
        let m = match Measured::parse(&out.stdout, job.kernel, &out) {
            Ok(m) => m,
            Err(e) => {
                ev.notes.push((
                    seeds,
                    format!(
                        "{} guest {} exited {}: {e:#}; console log: {}",
                        arch.name(),
                        job.kernel.spec,
                        out.exit_code,
                        done.log.display()
                    ),
                ));
                continue;
            }
        };
        // An answer a resumed batch handed to the run before was stored then.
        let run_id = match (store, &store_error) {
            _ if done.before => None,
            (Some(s), None) => m
                .store(s, "reproduce", job.kernel, tags)
                .map_err(|e| *store_error = Some(e))
                .inspect(|_| fleet::Finished::mark_stored(&done.mark))
                .ok(),
            _ => None,
        };
        ev.runs.push(GuestRun {
            arch,
            kernel: job.kernel.spec.to_string(),
            release: out.kernel_release.clone(),
            metric: m.host.metric(),
            workload: run.workload,
            cells: m.cells,
            failed: m.failed,
            run_id,
        });
    }
    Ok(ev)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::FolioSpec;

    #[test]
    fn a_tcg_guest_gets_a_short_deterministic_budget() {
        let run = PlannedRun {
            arch: Arch::X86_64,
            version: Version::parse("6.17.8").unwrap(),
            workload: WorkloadKind::MprotectToggle,
            sizes: vec![4 << 10, 400 << 10],
            folios: vec![FolioSpec::Base, FolioSpec::Mthp(64 << 10)],
            seeds: vec!["001"],
        };
        assert_eq!(
            sweep_args(&run.cells(), Accel::Tcg, true).join(" "),
            "sweep mprotect-toggle --sizes 4K,400K --folios 4K,64K --time 100ms --blocks 1 --no-store --json"
        );
        assert!(sweep_args(&run.cells(), Accel::Kvm, false)
            .join(" ")
            .contains("--time 3s --blocks 10"));
    }
}
