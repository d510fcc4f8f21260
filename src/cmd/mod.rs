//! One module per subcommand: plan (validate flags against the machine), run,
//! render. Each returns the process exit code. No command uses another: what
//! two share is here (printing, running a grid of kernel cells, the report
//! file's format).

pub mod bench;
pub mod bisect;
pub mod calibrate;
pub mod compare;
pub mod crosscheck;
pub mod doctor;
pub mod kernel;
pub mod model;
pub mod report;
pub mod reproduce;
pub mod runs;
pub mod show;
pub mod sweep;
pub mod vm;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use crate::cli::flags::{MeasureOpts, StoreOpts};
use crate::cli::plan;
use crate::crosscheck::version::strategy_for_kernel;
use crate::error::bail_usage;
use crate::guest::source::{identity, KernelId, KernelSpec};
use crate::measure::session;
use crate::predict::Observed;
use crate::record::Metric;
use crate::report::cells;
use crate::report::html::render_html;
use crate::report::markdown::render_markdown;
use crate::report::view::ReportModel;
use crate::store::{Location, RunId, RunStatus, RunSummary, Store, StoredRun};
use crate::workload::{Arch, FolioSpec, WorkloadKind};

/// Print a JSON document on stdout (pretty, newline-terminated).
pub fn print_json(doc: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, doc)?;
    writeln!(out)?;
    Ok(())
}

/// Print text on stdout.
pub fn print_text(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// `--executor slurm`'s request (vm, reproduce, bisect). `reads` names what
/// is read back from the database (None: a command that stores nothing),
/// which must then be one every node reaches.
pub fn slurm_request(
    cluster: &crate::cli::cluster::ClusterOpts,
    out: &StoreOpts,
    guest: &crate::cli::vm::GuestOpts,
    reads: Option<&str>,
) -> anyhow::Result<crate::fleet::slurm::Request> {
    if let Some(what) = reads {
        if out.no_store || !out.db.is_shared() {
            bail_usage!(
                "--executor slurm reads {what} back from a database every node reaches: \
                 pass --db postgres://USER@HOST/DB (or set PTELAB_DB), and no --no-store"
            );
        }
    }
    Ok(crate::fleet::slurm::Request {
        options: crate::fleet::slurm::Options {
            partition: cluster.partition.clone(),
            time: cluster.slurm_time.clone(),
            sbatch: cluster.sbatch.clone(),
            resume: cluster.resume,
            // In the tasks' environment, never on their command line.
            env: vec![("PTELAB_DB".into(), out.db.as_arg().into())],
            poll: crate::fleet::slurm::POLL,
        },
        shared_cache: cluster.cache.is_some(),
        db: out.db.to_string(),
        mirror: guest.mirror.clone(),
    })
}

/// How the guests of `--accel` boot (vm, reproduce --kernels).
pub fn fleet_settings(
    opts: &crate::cli::vm::GuestOpts,
    memory: u64,
    default_jobs: u32,
    files: Vec<std::path::PathBuf>,
    append: Vec<String>,
) -> crate::fleet::Settings {
    use crate::cli::vm::AccelFlag;
    use crate::guest::boot::qemu::AccelRequest;
    crate::fleet::Settings {
        accel: match opts.accel {
            AccelFlag::Auto => AccelRequest::Auto,
            AccelFlag::Kvm => AccelRequest::Kvm,
            AccelFlag::Tcg => AccelRequest::Tcg,
        },
        memory,
        timeout: opts.timeout,
        jobs: opts.jobs.unwrap_or(default_jobs),
        files,
        append,
        profile: if opts.profile {
            crate::fleet::ProfileRequest::Required
        } else {
            crate::fleet::ProfileRequest::Off
        },
    }
}

/// The database a measuring command writes its run to, None with
/// `--no-store`. A guest build (no `store` feature) has none: it runs as with
/// `--no-store` unless asked to store (`--tag`, `--db`), and then its store
/// refuses to open (`store::absent`).
pub fn open_store(out: &StoreOpts) -> anyhow::Result<Option<Store>> {
    let asked = !out.tags.is_empty() || out.db != Location::File(DEFAULT_DB.into());
    if out.no_store || (cfg!(not(feature = "store")) && !asked) {
        return Ok(None);
    }
    Store::open(&out.db).map(Some)
}

/// `--db`'s default (cli::flags).
const DEFAULT_DB: &str = "ptelab.db";

/// Plan, run, store and print a grid of kernel cells (bench is a 1x1 grid).
pub fn run_kernel(
    kind: &str,
    workload: WorkloadKind,
    sizes: &[u64],
    folios: &[FolioSpec],
    measure: &MeasureOpts,
    out: &StoreOpts,
) -> anyhow::Result<ExitCode> {
    let tags = &out.tags;
    let plan = plan::kernel_plan(workload, sizes, folios, measure)?;
    let store = open_store(out)?;
    let mut outcome = session::run(
        &plan,
        kind,
        store.as_ref().map(|s| s as &dyn crate::record::CellSink),
    )?;
    if let (Some(store), Some(id), false, None) = (
        &store,
        outcome.run_id,
        tags.is_empty(),
        &outcome.store_error,
    ) {
        outcome.store_error = store.add_tags(id, tags).err();
    }
    if out.json {
        let env = json!({
            "kernel": outcome.host.kernel_release,
            "cpu": outcome.host.cpu_model,
            "thp_knobs": outcome.thp_knobs,
            "host": outcome.host,
            "run_id": outcome.run_id,
            "interrupted": outcome.interrupted,
            "store_error": outcome.store_error.as_ref().map(|e| format!("{e:#}")),
            "failed": outcome.failed.iter().map(|(c, e)| json!({"cell": c, "error": e})).collect::<Vec<_>>(),
            "skipped": plan.skipped,
        });
        let doc = if kind == "bench" && outcome.cells.len() == 1 {
            let mut doc = serde_json::to_value(&outcome.cells[0])?;
            merge(&mut doc, env);
            merge(&mut doc, json!({"schema": "ptelab/bench/v1"}));
            doc
        } else {
            let mut doc = json!({ "schema": format!("ptelab/{kind}/v1"), "workload": workload, "cells": outcome.cells });
            merge(&mut doc, env);
            doc
        };
        print_json(&doc)?;
    } else {
        let mut text = cells::heading(
            workload.name(),
            &outcome.host.kernel_release,
            &outcome.host.cpu_model,
            plan.pin,
        );
        text.push_str("\n\n");
        text.push_str(&cells::render_table(&outcome.cells));
        match (outcome.run_id, &outcome.store_error) {
            (Some(id), None) => {
                text.push_str(&format!("stored as run {id} in {}\n", out.db.display()))
            }
            (Some(id), Some(_)) => text.push_str(&format!(
                "not all stored: run {id} in {} holds the cells stored before the store failed\n",
                out.db.display()
            )),
            (None, _) => {}
        }
        print_text(&text)?;
    }
    for (cell, err) in &outcome.failed {
        eprintln!("ptelab: cell {cell} failed: {err}");
    }
    // The figures are out; now the store's error decides the exit code.
    if let Some(e) = outcome.store_error {
        return Err(e);
    }
    Ok(if outcome.interrupted {
        ExitCode::from(130)
    } else if !outcome.failed.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

/// Formats of `ptelab report` and `ptelab reproduce`, chosen by the output
/// file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Html,
    Markdown,
}

impl ReportFormat {
    /// The format for `path`, or a usage error naming the accepted extensions.
    pub fn from_path(path: &Path) -> anyhow::Result<ReportFormat> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("html" | "htm") => Ok(ReportFormat::Html),
            Some("md" | "markdown") => Ok(ReportFormat::Markdown),
            _ => bail_usage!(
                "cannot tell the report format of '{}': name the output file *.html (or .htm) \
                 for HTML, or *.md (or .markdown) for Markdown",
                path.display()
            ),
        }
    }

    /// Render `model` in this format.
    pub fn render(self, model: &ReportModel) -> anyhow::Result<Vec<u8>> {
        match self {
            ReportFormat::Html => render_html(model),
            ReportFormat::Markdown => render_markdown(model),
        }
    }
}

/// The stored TCG guest cells of `arch`, the newest of each (kernel,
/// workload, size, folio, phase), with their kernel's model strategy. A
/// kernel is its identity (`guest::source::identity`), however it was
/// spelt when it ran; each cell names it by its label.
pub fn stored_guest_cells(store: &Store, arch: Arch) -> anyhow::Result<Vec<Observed>> {
    type Key = (String, WorkloadKind, u64, FolioSpec, Option<String>);
    let mut newest: BTreeMap<Key, Observed> = BTreeMap::new();
    let mut runs = store.runs()?;
    runs.sort_by_key(|r| r.id);
    for summary in runs {
        let Some(guest) = &summary.guest else {
            continue;
        };
        if guest.metric != Metric::Instructions
            || summary.status != RunStatus::Complete
            || Arch::parse(&summary.arch) != Some(arch)
        {
            continue;
        }
        let Some(id) = identity::stored(guest, &summary.arch) else {
            continue;
        };
        let strategy = strategy_for_kernel(&summary.kernel_release, arch)
            .map_err(|e| anyhow::anyhow!("run {}: {e}", summary.id))?
            .strategy;
        let run = store.load(summary.id)?;
        for (c, obs) in Observed::from_guest_cells(&id.label, arch, strategy, run.kernel_cells()) {
            let key = (
                id.key.clone(),
                c.workload,
                c.size_bytes,
                c.folio,
                c.phase.clone(),
            );
            newest.insert(key, obs);
        }
    }
    Ok(newest.into_values().collect())
}

/// The labels of the stored kernels each of `specs` names on `arch`, among
/// those of `cells` ([`stored_guest_cells`]); an empty list for a spec that
/// names none. A spec that does not parse is a usage error.
pub fn kernels_named(
    specs: &[String],
    arch: Arch,
    cells: &[Observed],
    store: &Store,
) -> anyhow::Result<Vec<Vec<String>>> {
    let mut ids: Vec<KernelId> = Vec::new();
    for summary in store.runs()? {
        let id = summary
            .guest
            .as_ref()
            .and_then(|g| identity::stored(g, &summary.arch));
        if let Some(id) = id.filter(|id| id.arch == Some(arch)) {
            if cells.iter().any(|o| o.kernel == id.label) && !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    specs
        .iter()
        .map(|s| {
            let pattern = KernelSpec::parse(s)?.pattern(Some(arch))?;
            let mut labels: Vec<String> = pattern
                .pick(&ids)
                .into_iter()
                .map(|id| id.label.clone())
                .collect();
            labels.dedup();
            Ok(labels)
        })
        .collect()
}

/// The runs a name stands for, as `compare` takes them: ids, `latest`,
/// tags ([`Store::resolve_runs`]), and kernel specs (`debian:6.16.12`): the
/// guest runs of that kernel by identity, however it was spelt when they
/// ran; the newest, or every one with `every`. Comma-separated names add up.
pub fn resolve_runs(store: &Store, names: &str, every: bool) -> anyhow::Result<Vec<RunId>> {
    let mut ids: Vec<RunId> = Vec::new();
    let mut stored: Option<Vec<(RunId, KernelId)>> = None;
    for part in names.split(',').map(str::trim) {
        // A path could be a tag too: only a spec with a prefix is a kernel here.
        let spec = KernelSpec::parse(part)
            .ok()
            .filter(|s| s.source().prefix().is_some());
        let found = match spec {
            None => store.resolve_runs(part, every)?,
            Some(spec) => {
                let stored = match &mut stored {
                    Some(s) => s,
                    None => stored.insert(stored_kernels(store)?),
                };
                runs_of_kernel(store, &spec, stored, every)?
            }
        };
        for id in found {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    Ok(ids)
}

/// The one run `name` stands for ([`resolve_runs`]: an id, `latest`, a tag
/// or a kernel spec), loaded.
pub fn load_named(store: &Store, name: &str) -> anyhow::Result<StoredRun> {
    match resolve_runs(store, name, false)?[..] {
        [id] => store.load(id),
        _ => bail_usage!("'{name}' names several runs: name one"),
    }
}

/// Every stored guest run with its kernel's identity, oldest first.
fn stored_kernels(store: &Store) -> anyhow::Result<Vec<(RunId, KernelId)>> {
    let mut runs: Vec<(RunId, KernelId)> = store
        .runs()?
        .into_iter()
        // A padded calibration boot never stands for its kernel.
        .filter(|r| !r.tags.iter().any(|t| t == calibrate::guest::TAG))
        .filter_map(|r| {
            let id = identity::stored(r.guest.as_ref()?, &r.arch)?;
            Some((r.id, id))
        })
        .collect();
    runs.sort_by_key(|(id, _)| *id);
    Ok(runs)
}

/// The runs of the one kernel `spec` names; a usage error when it names
/// none, or kernels of several arches.
fn runs_of_kernel(
    store: &Store,
    spec: &KernelSpec,
    stored: &[(RunId, KernelId)],
    every: bool,
) -> anyhow::Result<Vec<RunId>> {
    let pattern = spec.pattern(None)?;
    let mut keys: Vec<&str> = pattern
        .pick(stored.iter().map(|(_, k)| k))
        .into_iter()
        .map(|k| k.key.as_str())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    match keys.len() {
        0 => {
            let mut have: Vec<&str> = stored.iter().map(|(_, k)| k.key.as_str()).collect();
            have.sort_unstable();
            have.dedup();
            bail_usage!(
                "no stored guest run of {spec} in {} (kernels with stored guest runs: {}); \
                 measure it with `ptelab vm --kernel {spec} -- ...`",
                store.location(),
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            )
        }
        1 => {}
        _ => bail_usage!(
            "{spec} names {} stored kernels: {}; name one of them",
            keys.len(),
            keys.join(", ")
        ),
    }
    let mut runs = stored
        .iter()
        .filter(|(_, k)| k.key == keys[0])
        .map(|(id, _)| *id);
    Ok(if every {
        runs.collect()
    } else {
        runs.next_back().into_iter().collect()
    })
}

/// The kernel of a stored run in a few words: the guest kernel's identity
/// (`debian:6.16.12-x86_64`), or the host's release.
pub fn kernel_label(r: &RunSummary) -> String {
    r.guest
        .as_ref()
        .and_then(|g| identity::stored(g, &r.arch))
        .map_or_else(|| r.kernel_release.clone(), |id| id.key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_db_is_the_flags_default() {
        use clap::Parser;
        let cli =
            crate::cli::flags::Cli::try_parse_from(["ptelab", "bench", "mprotect-toggle"]).unwrap();
        let crate::cli::flags::Command::Bench(args) = cli.command else {
            panic!("not bench")
        };
        assert_eq!(args.out.db, Location::File(DEFAULT_DB.into()));
    }

    #[test]
    fn format_follows_the_extension() {
        assert_eq!(
            ReportFormat::from_path(Path::new("r.html")).unwrap(),
            ReportFormat::Html
        );
        assert_eq!(
            ReportFormat::from_path(Path::new("R.HTM")).unwrap(),
            ReportFormat::Html
        );
        assert_eq!(
            ReportFormat::from_path(Path::new("/tmp/x.md")).unwrap(),
            ReportFormat::Markdown
        );
        for bad in ["r.pdf", "report", "-"] {
            let err = ReportFormat::from_path(Path::new(bad)).unwrap_err();
            assert!(crate::error::is_usage(&err), "{bad}");
            assert!(err.to_string().contains(".html"), "{err}");
        }
    }
}
