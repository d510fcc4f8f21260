//! `ptelab vm --executor slurm`: each kernel's guest run is one task of a
//! Slurm job array (`fleet::slurm`), running the same `ptelab vm --kernel K
//! … -- COMMAND` on its node against the shared database; this command
//! waits, checks that each measuring task stored its run, and prints what
//! the tasks printed: each is a local `vm` of one kernel, so the text and
//! the `--json` document are a local `vm`'s (docs/cluster.md).
//!
//! Each task's run is tagged `slurm-BATCH-I` besides the kernel and any
//! `--tag`, which is how its run is found again (its runs, one per command,
//! where commands are joined by `--then`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::{json, Value};

use super::super::{print_json, print_text};
use crate::cli::guest_command::GuestCommand;
use crate::cli::vm::VmArgs;
use crate::fleet::slurm::{self, Stored, TaskState};
use crate::guest::source;
use crate::guest::source::cache::Cache;
use crate::guest::KernelSpec;
use crate::store::Store;
use crate::workload::Arch;

pub fn run(
    args: &VmArgs,
    commands: &[GuestCommand],
    specs: Vec<KernelSpec>,
    arch: Option<Arch>,
) -> anyhow::Result<ExitCode> {
    let measures = commands[0].measures;
    let req = super::super::slurm_request(
        &args.cluster,
        &args.out,
        &args.guest,
        measures.then_some("each task's run"),
    )?;
    // Bad input (an unreachable server, another application's database) is
    // refused before anything is submitted.
    let store = match measures {
        true => Some(Store::open(&args.out.db)?),
        false => None,
    };
    let cache = match &args.cluster.cache {
        Some(dir) => Cache {
            root: std::path::absolute(dir).with_context(|| format!("--cache {}", dir.display()))?,
        },
        None => Cache::from_env()?,
    };
    let mut opts = req.options.clone();
    let program = match req.shared_cache {
        true => stage_shared_cache(args, &cache, &specs, arch, &mut opts.env)?,
        false => std::env::current_exe().context("finding this ptelab")?,
    };
    let settings = super::super::fleet_settings(
        &args.guest,
        args.memory,
        1,
        args.files.clone(),
        args.append.clone(),
    );
    let words = args.commands()?;
    let names: Vec<String> = commands.iter().map(GuestCommand::label).collect();
    let tasks = args
        .kernels
        .iter()
        .map(|kernel| {
            let task = slurm::VmTask {
                kernel,
                arch,
                accel: settings.accel.flag(),
                profile: args.guest.profile,
                tags: &args.out.tags,
                json: args.out.json,
            };
            let line = req.vm_line(&task, &settings, &words);
            (
                format!("{kernel} {}", names.join("+")),
                program.clone(),
                line,
            )
        })
        .collect();
    let stored = Stored::new(
        &cache.root,
        &format!("vm {}", req.db),
        store.as_ref(),
        tasks,
        opts.resume,
    );
    let outcome = stored.run(&opts)?;

    let mut text = String::new();
    let mut docs = Vec::new();
    let mut failed = 0;
    for (i, state) in outcome.states.iter().enumerate() {
        let ran = match state {
            TaskState::Done if measures && stored.found(i).is_none() => {
                Err(stored.no_run(i, state))
            }
            TaskState::Done => output(&stored, i),
            // Reported with its log as it failed.
            _ => {
                failed += 1;
                continue;
            }
        };
        match (ran, args.out.json) {
            (Ok(out), false) => text.push_str(&out),
            (Ok(out), true) => match serde_json::from_str::<Value>(&out) {
                Ok(doc) if doc["guests"].is_array() => {
                    docs.extend(doc["guests"].as_array().cloned().unwrap_or_default())
                }
                _ => {
                    eprintln!(
                        "ptelab: task {i} ({}) printed no vm document; its output: {}",
                        args.kernels[i],
                        stored.batch.logs(i).0.display()
                    );
                    failed += 1;
                }
            },
            (Err(why), _) => {
                eprintln!("ptelab: task {i} ({}): {why}", args.kernels[i]);
                failed += 1;
            }
        }
    }
    stored.batch.close(failed == 0);
    if args.out.json {
        print_json(&json!({ "schema": "ptelab/vm/v1", "guests": docs }))?;
    } else {
        print_text(&text)?;
    }
    if failed > 0 {
        eprintln!(
            "ptelab: {failed} of {} tasks failed{} (their logs are above); the same command \
             with --resume submits only those",
            outcome.states.len(),
            outcome
                .job
                .map_or(String::new(), |j| format!(" in Slurm job {j}"))
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// What task `i` printed: a local `vm` of its kernel.
fn output(stored: &Stored, i: usize) -> Result<String, String> {
    let path = stored.batch.logs(i).0;
    std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "its output {} cannot be read ({e}): the batch directory must be on a file system \
             the nodes share",
            path.display()
        )
    })
}

/// `--cache DIR`: fetch every kernel into the shared cache, and put this
/// ptelab and the guest binaries there, so that tasks only read it. Returns
/// the ptelab the tasks run; sets their environment.
fn stage_shared_cache(
    args: &VmArgs,
    cache: &Cache,
    specs: &[KernelSpec],
    arch: Option<Arch>,
    env: &mut Vec<(String, OsString)>,
) -> anyhow::Result<PathBuf> {
    let opts = source::Options {
        arch,
        mirror: args.guest.mirror.clone(),
        interrupted: crate::kernel::signals::interrupted(),
    };
    let mut arches = Vec::new();
    for spec in specs {
        eprintln!("ptelab: kernel {spec} into {} …", cache.root.display());
        let k = spec.resolve(cache, &opts)?;
        if !arches.contains(&k.arch) {
            arches.push(k.arch);
        }
    }
    slurm::stage_binaries(&cache.root, &arches, env)
}
