//! What the host's commands share: Slurm and guest settings from the flags,
//! runs named on the command line, stored guest cells by kernel, and the
//! report file's format.

use std::collections::BTreeMap;
use std::path::Path;

use crate::crosscheck::version::strategy_for_kernel;
use crate::error::bail_usage;
use crate::guest::source::{identity, KernelId, KernelSpec};
use crate::predict::Observed;
use crate::record::Metric;
use crate::report::html::render_html;
use crate::report::markdown::render_markdown;
use crate::report::view::ReportModel;
use crate::store::{RunId, RunStatus, RunSummary, Store, StoredRun};
use crate::workload::{Arch, FolioSpec, WorkloadKind};

/// Where guests boot (`--executor` and Slurm's options: vm, reproduce,
/// bisect, calibrate --guest).
pub fn executing(cluster: &crate::cli::cluster::ClusterOpts) -> crate::fleet::Executing {
    executing_with(&cluster.exec, cluster.slurm_time.clone())
}

/// Where guests boot, each Slurm task limited to `time` (Slurm's format).
pub fn executing_with(
    exec: &crate::cli::cluster::ExecutorOpts,
    time: Option<String>,
) -> crate::fleet::Executing {
    match exec.slurm() {
        false => crate::fleet::Executing::Local,
        true => crate::fleet::Executing::Slurm(crate::fleet::slurm::Request {
            options: crate::fleet::slurm::Options {
                partition: exec.partition.clone(),
                time,
                sbatch: exec.sbatch.clone(),
                resume: exec.resume,
                env: Vec::new(),
                poll: crate::fleet::slurm::POLL,
            },
        }),
    }
}

/// The cache guests boot from: `--cache DIR` (one every node mounts), or
/// this user's.
pub fn guest_cache(
    exec: &crate::cli::cluster::ExecutorOpts,
) -> anyhow::Result<crate::guest::source::cache::Cache> {
    use anyhow::Context;
    match &exec.cache {
        Some(dir) => Ok(crate::guest::source::cache::Cache {
            root: std::path::absolute(dir).with_context(|| format!("--cache {}", dir.display()))?,
        }),
        None => crate::guest::source::cache::Cache::from_env(),
    }
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
        executing: crate::fleet::Executing::Local,
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
        .filter(|r| !r.tags.iter().any(|t| t == super::calibrate::guest::TAG))
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
