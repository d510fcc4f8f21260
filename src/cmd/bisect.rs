//! `ptelab bisect --good A --bad B [--repo DIR] -- bench …`: the first
//! kernel (Debian version, or commit of a tree) where a bench figure turns
//! from the good endpoint's to the bad one's (docs/bisect.md). Everything
//! that can be wrong with the input is checked before the first build or
//! boot; the engine is `crate::bisect`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use super::{print_json, print_text};
use crate::bisect::{report, tree, versions, Setup};
use crate::cli::bisect::{BisectArgs, MetricFlag};
use crate::cli::guest_command::GuestCommand;
use crate::error::bail_usage;
use crate::fleet;
use crate::guest::boot::qemu::{kvm_probe, AccelRequest};
use crate::guest::build::{self, Builder};
use crate::guest::KernelSpec;
use crate::record::{Counter, Metric};
use crate::workload::Arch;

/// The tree (`--repo`) and the endpoints: `--good tree:~/linux@v7.2 --bad
/// tree:~/linux@v7.3` is `--repo ~/linux --good v7.2 --bad v7.3`.
fn endpoints(args: &BisectArgs) -> anyhow::Result<(Option<PathBuf>, String, String)> {
    if args.repo.is_some() {
        return Ok((args.repo.clone(), args.good.clone(), args.bad.clone()));
    }
    let in_tree = |s: &str| match KernelSpec::parse(s) {
        Ok(spec) => spec.revision(),
        Err(_) => Ok(None),
    };
    match (in_tree(&args.good)?, in_tree(&args.bad)?) {
        (None, None) => Ok((None, args.good.clone(), args.bad.clone())),
        (Some((a, good)), Some((b, bad))) if a == b => Ok((Some(a), good, bad)),
        (Some(_), Some(_)) => {
            bail_usage!("--good and --bad name two trees: a bisect runs over the commits of one")
        }
        _ => bail_usage!(
            "--good and --bad are both tree kernels of one tree (tree:PATH@REV), or both \
             released kernels (debian:VERSION)"
        ),
    }
}

enum Target {
    Versions(KernelSpec, KernelSpec),
    Tree(Box<tree::Plan>),
}

pub fn run(args: &BisectArgs) -> anyhow::Result<ExitCode> {
    let command = GuestCommand::parse("bisect", &args.command, &[])?;
    if command.name != "bench" {
        bail_usage!(
            "bisect follows one figure: the command after -- is a bench of one cell \
             (e.g. bench mprotect-toggle --size 4M --folio 4K), not {}",
            command.name
        );
    }
    if let Some(w) = command.workload {
        crate::bisect::check_phase(w, args.phase.as_deref())?;
    }
    if let Some(need) = command.need {
        fleet::check_fits(need, args.memory)?;
    }
    let arch_flag = args.guest_arch()?;
    if let Some(md) = &args.markdown {
        if !md
            .parent()
            .is_none_or(|d| d.as_os_str().is_empty() || d.is_dir())
        {
            bail_usage!("--markdown {}: its directory does not exist", md.display());
        }
    }
    args.cluster.check()?;
    let (repo, good, bad) = endpoints(args)?;
    let executing = super::executing(&args.cluster);
    let slurm = match &executing {
        fleet::Executing::Slurm(req) => Some(req.clone()),
        fleet::Executing::Local => None,
    };
    if slurm.is_some() && repo.is_some() && args.cluster.exec.cache.is_none() {
        bail_usage!(
            "--executor slurm with --repo builds and boots every commit on the nodes: pass --cache \
             DIR on a file system every node mounts (the builds' images, build directories and \
             logs go there), with --repo on one they mount too"
        );
    }
    // With --cache, kernels, builds and state live in the shared cache.
    let cache = super::guest_cache(&args.cluster.exec)?;
    // Endpoints and tree are checked before the database is opened, so bad
    // input leaves nothing behind.
    let config = args.guest.build_config(repo.is_some())?;
    if repo.is_none() && args.build_cmd.is_some() {
        bail_usage!(
            "--build-cmd builds a tree's commits: give --repo DIR, or tree:PATH@REV endpoints"
        );
    }
    let (target, arch) = match &repo {
        None => {
            let good = KernelSpec::parse(&good)?;
            let bad = KernelSpec::parse(&bad)?;
            let arch = versions::check(&good, &bad, arch_flag)?.arch;
            (Target::Versions(good, bad), arch)
        }
        Some(repo) => {
            let arch = match arch_flag.or_else(Arch::host) {
                Some(a) => a,
                None => {
                    bail_usage!("this host is neither x86_64 nor arm64: pass --arch x86_64|arm64")
                }
            };
            let builder = Builder {
                repo: repo.clone(),
                arch,
                config: config.clone(),
                command: args.build_cmd.clone(),
                root: build::root(&cache.root),
                compiler: build::compiler(arch, args.build_cmd.as_deref()),
                // calls:F and insns:F name kernel functions.
                needs: command.needs(matches!(
                    &args.metric,
                    Some(MetricFlag::Counter(c)) if c.function().is_some()
                )),
            };
            let plan = tree::Plan::check(repo, &good, &bad, builder)?;
            (Target::Tree(Box::new(plan)), arch)
        }
    };
    if args.guest.jobs.is_some_and(|j| j > 1) {
        bail_usage!("bisect boots one guest at a time (each step depends on the last): --jobs cannot be more than 1");
    }
    let mut settings = super::fleet_settings(&args.guest, args.memory, 1, Vec::new(), Vec::new());
    settings.executing = executing;
    let counter = metric_settings(args.metric.as_ref(), arch, &mut settings)?;
    // Opened at the first run stored: the endpoints' kernels and builds may
    // still be refused, and bad input writes nothing.
    let store = (!args.out.no_store).then(|| crate::store::OnFirstUse::new(&args.out.db));
    let setup = Setup {
        cache: &cache,
        settings,
        store: store.as_ref(),
        args: command.args.clone(),
        words: args.command.clone(),
        disk: command.disk,
        tags: args.out.tags.clone(),
        replicates: args.replicates,
        noise: args.noise,
        threshold: args.threshold,
        counter,
        phase: args.phase.clone(),
        slurm,
        invocation: invocation(),
    };
    let report = match &target {
        Target::Versions(good, bad) => {
            versions::run(&setup, good, bad, arch_flag, args.guest.mirror.as_deref())?
        }
        Target::Tree(plan) => tree::run(&setup, plan)?,
    };
    if let Some(md) = &args.markdown {
        std::fs::write(md, report::markdown(&report))
            .with_context(|| format!("writing {}", md.display()))?;
        eprintln!("ptelab: wrote {}", md.display());
    }
    if args.out.json {
        print_json(&json!({ "schema": "ptelab/bisect/v1", "bisect": report }))?;
    } else {
        print_text(&report::text(&report))?;
    }
    Ok(if report.first_bad.len() == 1 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The accelerator and profiling `--metric` needs, checked against
/// `--accel` and the guests' arch; the counter followed, if one is.
fn metric_settings(
    metric: Option<&MetricFlag>,
    arch: Arch,
    settings: &mut fleet::Settings,
) -> anyhow::Result<Option<Counter>> {
    let accel = settings.accel;
    match metric {
        None => Ok(None),
        Some(MetricFlag::Figure(Metric::Instructions)) => {
            if accel == AccelRequest::Kvm {
                bail_usage!(
                    "--metric instructions counts guest instructions under TCG, and --accel kvm \
                     guests measure time: drop --accel kvm, or pass --metric time"
                );
            }
            settings.accel = AccelRequest::Tcg;
            Ok(None)
        }
        Some(MetricFlag::Figure(Metric::Time)) => {
            if accel == AccelRequest::Tcg {
                bail_usage!(
                    "--metric time is wall-clock time in KVM guests, and --accel tcg guests count \
                     instructions: drop --accel tcg, or pass --metric instructions"
                );
            }
            if let Err(why) = kvm_probe(arch) {
                bail_usage!(
                    "--metric time is wall-clock time in KVM guests, and KVM cannot run a {arch} \
                     guest here ({why}): pass --metric instructions (TCG guests) instead"
                );
            }
            settings.accel = AccelRequest::Kvm;
            Ok(None)
        }
        Some(MetricFlag::Counter(c)) => {
            if let Err(why) = c.check_arch(arch) {
                bail_usage!("--metric {why}");
            }
            if accel == AccelRequest::Kvm {
                bail_usage!(
                    "--metric {c} is counted by ptelab's QEMU plugin, which only TCG guests load \
                     (KVM guests run the kernel's instructions unseen): drop --accel kvm, or pass \
                     --accel tcg; a counter metric runs every guest under TCG"
                );
            }
            eprintln!("ptelab: --metric {c}: every guest runs under TCG with ptelab's QEMU plugin");
            settings.accel = AccelRequest::Tcg;
            settings.profile = fleet::ProfileRequest::Required;
            Ok(Some(c.clone()))
        }
    }
}

/// This command line, quoted where a word needs it and its secrets masked,
/// for the report's "how to reproduce" (kept in the bisect's state file).
fn invocation() -> String {
    std::iter::once("ptelab".to_string())
        .chain(std::env::args().skip(1).map(|a| {
            let a = crate::text::redact::redact(&a);
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.,:/=+@%".contains(c))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        }))
        .collect::<Vec<_>>()
        .join(" ")
}
