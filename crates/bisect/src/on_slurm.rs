//! `bisect --executor slurm`: the guest runs of a bisect as Slurm tasks
//! (`fleet::slurm`), each the `ptelab vm --kernel K … -- bench …` that boots
//! the guest a local bisect would, its run stored in the shared database
//! with the bisect's tag; the runs are read back into the same measurements
//! a local bisect takes from its guests, so verdicts, state file and report
//! come out as they do locally (docs/cluster.md, docs/bisect.md).
//!
//! The endpoints are independent, so they go in one job array; every later
//! step depends on the verdict before it, so each is an array of its own
//! (one task, or one per replicate).

use anyhow::Context;
use std::collections::BTreeMap;

use super::classify::Quantity;
use super::state::Measurement;
use super::{pick_cell, Setup};
use crate::fleet::slurm::{self, Request, Stored, TaskState};
use crate::fleet::ProfileRequest;
use crate::guest::source::Kernel;
use crate::record::{Counter, Metric};
use crate::store::{Store, StoredRun};

/// One kernel to measure: its id in the bisect (version or commit) and
/// the kernel.
pub type Item<'k> = (&'k str, &'k Kernel);

/// The command line of the task measuring `kernel` once, as `req` asks
/// (its `--mirror`).
pub fn task_line(setup: &Setup, req: &Request, kernel: &Kernel, tag: &str) -> Vec<String> {
    let mut tags = vec![tag.to_string()];
    tags.extend(setup.tags.iter().cloned());
    req.vm_line(
        &slurm::VmTask {
            kernel: &kernel.spec.to_string(),
            arch: Some(kernel.arch),
            accel: setup.settings.accel.flag(),
            profile: setup.settings.profile == ProfileRequest::Required,
            tags: &tags,
            json: false,
        },
        &setup.settings,
        &[slurm::guest_command(&setup.args)],
    )
}

/// How many more figures each kernel needs after `have` (as `replicate`
/// decides locally: `--replicates`, else 1 under instructions and 3 under
/// time, known from the first figure).
fn wanted(replicates: Option<u32>, have: Option<&Measurement>) -> u32 {
    let done = have.map_or(0, |m| m.figures.len() as u32);
    let want = match (have, replicates) {
        (_, Some(n)) => n,
        (None, None) => 1,
        (Some(m), None) if m.quantity.metric == Metric::Instructions => 1,
        (Some(_), None) => 3,
    };
    want.saturating_sub(done)
}

/// Measure every item through Slurm: one job array per round (the first
/// round holds every item; a later one only the replicates the first
/// figures call for). Returns each item's measurement, or why it has none.
pub fn measure(
    setup: &Setup,
    req: &Request,
    store: &Store,
    items: &[Item],
    tag: &str,
) -> anyhow::Result<Vec<Result<Measurement, String>>> {
    let mut opts = req.options.clone();
    let program = if req.shared_cache {
        let mut arches: Vec<_> = items.iter().map(|(_, k)| k.arch).collect();
        arches.sort();
        arches.dedup();
        slurm::stage_binaries(&setup.cache.root, &arches, &mut opts.env)?
    } else {
        std::env::current_exe().context("finding this ptelab")?
    };
    let mut got: Vec<Option<Measurement>> = vec![None; items.len()];
    let mut why: BTreeMap<usize, String> = BTreeMap::new();
    for round in 0.. {
        // (item, copy) per task.
        let todo: Vec<usize> = (0..items.len())
            .filter(|i| !why.contains_key(i))
            .flat_map(|i| {
                std::iter::repeat_n(i, wanted(setup.replicates, got[i].as_ref()) as usize)
            })
            .collect();
        if todo.is_empty() {
            break;
        }
        let tasks = todo
            .iter()
            .map(|&i| {
                let (id, k) = items[i];
                let name = format!("{} {}", super::build::short(id), k.arch.name());
                (name, program.clone(), task_line(setup, req, k, tag))
            })
            .collect();
        let label = format!("bisect {tag} round {round} {}", req.db);
        let mut stored = Stored::new(&setup.cache.root, &label, Some(store), tasks, false);
        // `--resume` picks up an array this bisect submitted before; a step
        // it never reached is submitted afresh.
        let resume = opts.resume && stored.batch.submitted_before();
        stored.set_resume(resume);
        let outcome = stored.run(&slurm::Options {
            resume,
            ..opts.clone()
        })?;
        let mut all_read = true;
        for (t, &i) in todo.iter().enumerate() {
            let one = match (&outcome.states[t], stored.found(t)) {
                (TaskState::Done, Some(run)) => {
                    let loaded = store.load(run)?;
                    from_run(setup, &loaded, run)
                }
                (state, _) => {
                    all_read = false;
                    Err(stored.no_run(t, state))
                }
            };
            match one {
                Ok(m) => match &mut got[i] {
                    None => got[i] = Some(m),
                    Some(have) => {
                        have.figures.extend(m.figures);
                        have.run_ids.extend(m.run_ids);
                    }
                },
                Err(e) => {
                    why.insert(i, e);
                }
            }
        }
        stored.batch.close(all_read);
    }
    Ok(got
        .into_iter()
        .enumerate()
        .map(|(i, m)| match why.remove(&i) {
            Some(e) => Err(e),
            None => m.ok_or_else(|| "no figure".to_string()),
        })
        .collect())
}

/// A task's stored run as the measurement a local guest run gives: the
/// cell of the phase followed, its figure or counter.
pub fn from_run(setup: &Setup, run: &StoredRun, id: i64) -> Result<Measurement, String> {
    let cells: Vec<_> = run.kernel_cells().cloned().collect();
    let cell = pick_cell(&cells, setup.phase.as_deref())?;
    let metric = run.run.metric();
    let figure = match &setup.counter {
        None => cell.ns_per_call.median,
        Some(c) => counted(c, cell)?,
    };
    Ok(Measurement {
        figures: vec![figure],
        quantity: Quantity {
            metric,
            counter: setup.counter.clone(),
        },
        release: run.run.kernel_release.clone(),
        size_bytes: cell.size_bytes,
        run_ids: vec![id],
    })
}

/// `counter` of a stored profiled cell: a function needs the names the
/// task's guest kernel gave (without them the profile's functions are
/// addresses, and the count would read 0).
fn counted(counter: &Counter, cell: &crate::record::CellResult) -> Result<f64, String> {
    let Some(profile) = &cell.profile else {
        return Err(format!(
            "the task's guest counted nothing for {} (the counters need TCG and ptelab's QEMU plugin)",
            counter.name()
        ));
    };
    if counter.function().is_some()
        && (profile.functions.is_empty()
            || profile.functions.iter().all(|f| f.name.starts_with("0x")))
    {
        return Err(format!(
            "the task's guest kernel gave no symbols ({}), so {} cannot be counted",
            profile.symbols,
            counter.name()
        ));
    }
    Ok(counter.of(profile))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::boot::qemu::AccelRequest;
    use crate::record::fixtures::fixture;
    use crate::workload::FolioSpec;

    /// The task of a counter bisect's step: the kernel on its arch under
    /// TCG, profiled, stored with the bisect's tag and the user's, the
    /// bench as typed without what only a guest answering its host needs.
    #[test]
    fn a_step_task_is_the_vm_command_a_local_step_boots() {
        let cache = crate::guest::source::cache::Cache {
            root: "/shared/ptelab".into(),
        };
        let setup = Setup {
            cache: &cache,
            settings: crate::fleet::Settings {
                accel: AccelRequest::Tcg,
                memory: 1 << 30,
                timeout: std::time::Duration::from_secs(300),
                jobs: 1,
                files: vec![],
                append: vec![],
                profile: ProfileRequest::Required,
            },
            store: None,
            args: "bench prot-transition --size 4K --folio 4K --no-store --json"
                .split(' ')
                .map(String::from)
                .collect(),
            words: vec![],
            disk: None,
            tags: vec!["lab".into()],
            replicates: None,
            noise: 0.02,
            threshold: None,
            counter: Some(Counter::Tlbi),
            phase: Some("none-to-rw".into()),
            slurm: None,
            invocation: String::new(),
        };
        let kernel = Kernel {
            spec: crate::guest::KernelSpec::parse("debian:6.19.6").unwrap(),
            arch: crate::workload::Arch::Arm64,
            image: "/shared/ptelab/kernels/x/vmlinuz".into(),
            source: String::new(),
            sha256: "0".repeat(64),
            version: None,
            line: String::new(),
            json: serde_json::Value::Null,
        };
        // --mirror goes on: a task fetches what the cache does not hold.
        let req = Request {
            mirror: Some("http://mirror.lab/debian".into()),
            ..Request::default()
        };
        assert_eq!(
            task_line(&setup, &req, &kernel, "bisect:0123456789ab").join(" "),
            "vm --kernel debian:6.19.6 --arch arm64 --accel tcg --memory 1G --timeout 300s \
             --mirror http://mirror.lab/debian --profile --tag bisect:0123456789ab --tag lab -- \
             bench prot-transition --size 4K --folio 4K"
        );
        // The plain figure, under whatever accelerator was asked: no --profile.
        let plain = Setup {
            settings: crate::fleet::Settings {
                accel: AccelRequest::Auto,
                profile: ProfileRequest::Off,
                ..setup.settings.clone()
            },
            counter: None,
            tags: vec![],
            ..setup
        };
        let line = task_line(&plain, &Request::default(), &kernel, "bisect:x").join(" ");
        assert!(
            line.contains("--accel auto") && !line.contains("--profile"),
            "{line}"
        );
    }

    #[test]
    fn replicates_follow_the_local_rule() {
        let m = |metric, n| Measurement {
            figures: vec![1.0; n],
            quantity: Quantity::figure(metric),
            release: "r".into(),
            size_bytes: 4096,
            run_ids: vec![],
        };
        assert_eq!(wanted(None, None), 1);
        assert_eq!(wanted(None, Some(&m(Metric::Instructions, 1))), 0);
        assert_eq!(wanted(None, Some(&m(Metric::Time, 1))), 2);
        assert_eq!(wanted(Some(3), None), 3);
        assert_eq!(wanted(Some(3), Some(&m(Metric::Instructions, 1))), 2);
    }

    #[test]
    fn a_function_counter_without_symbols_is_no_figure() {
        let c = Counter::parse("calls:vm_normal_page").unwrap();
        let mut cell = fixture(400, 1.0, FolioSpec::Base);
        assert!(counted(&c, &cell).unwrap_err().contains("counted nothing"));
        let mut p = crate::record::Profile {
            symbols: "none".into(),
            ..Default::default()
        };
        p.functions.push(crate::record::FunctionCount {
            name: "0xffff0000".into(),
            entries: 3.0,
            ..Default::default()
        });
        cell.profile = Some(p.clone());
        assert!(counted(&c, &cell).unwrap_err().contains("no symbols"));
        p.functions[0].name = "vm_normal_page".into();
        cell.profile = Some(p);
        assert_eq!(counted(&c, &cell), Ok(3.0));
        assert_eq!(counted(&Counter::Tlbi, &cell), Ok(0.0));
    }
}
