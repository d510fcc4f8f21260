//! `ptelab vm --executor slurm`: each kernel's guest run is one task of a
//! Slurm job array (`fleet::slurm`), running the same `ptelab vm --kernel K
//! … -- COMMAND` on its node against the shared database; this command
//! waits, then reads each task's run back from the database and prints what
//! a local `vm` prints (docs/cluster.md).
//!
//! Each task's run is tagged `slurm-BATCH-I` besides the kernel and any
//! `--tag`, which is how its run is found again. Commands that store
//! nothing (`doctor`, `model`, `crosscheck`, `exec`) print the task's own
//! output.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde_json::{json, Value};

use super::super::{print_json, print_text};
use crate::cli::guest::GuestCommand;
use crate::cli::vm::{AccelFlag, VmArgs};
use crate::error::bail_usage;
use crate::fleet::slurm::{self, Batch, Task, TaskState};
use crate::guest::source;
use crate::guest::source::cache::Cache;
use crate::guest::KernelSpec;
use crate::report::cells;
use crate::store::{RunId, Store};
use crate::workload::Arch;

pub fn run(
    args: &VmArgs,
    command: &GuestCommand,
    specs: Vec<KernelSpec>,
    arch: Option<Arch>,
) -> anyhow::Result<ExitCode> {
    let store = if command.measures {
        if args.out.no_store {
            bail_usage!(
                "--executor slurm reads each task's run back from the database: drop --no-store"
            );
        }
        if !args.out.db.is_shared() {
            bail_usage!(
                "--executor slurm needs a database every node reaches, for each task to store \
                 its run in: pass --db postgres://USER@HOST/DB (or set PTELAB_DB); {} is a file",
                args.out.db
            );
        }
        // Bad input (an unreachable server, another application's
        // database) is refused before anything is submitted.
        Some(Store::open(&args.out.db)?)
    } else {
        None
    };
    let cache = match &args.cluster.cache {
        Some(dir) => Cache {
            root: std::path::absolute(dir).with_context(|| format!("--cache {}", dir.display()))?,
        },
        None => Cache::from_env()?,
    };
    let mut env: Vec<(String, OsString)> = Vec::new();
    // The database's URL goes to the tasks in their environment, never on
    // a command line that `ps` or `squeue` would show.
    env.push(("PTELAB_DB".into(), args.out.db.as_arg().into()));
    let program = match &args.cluster.cache {
        Some(_) => stage_shared_cache(args, &cache, &specs, arch, &mut env)?,
        None => std::env::current_exe().context("finding this ptelab")?,
    };

    let lines: Vec<Vec<String>> = args.kernels.iter().map(|k| task_args(args, k)).collect();
    let key = slurm::batch_key(&format!("vm {}", args.out.db), &lines);
    let tags: Vec<String> = (0..lines.len())
        .map(|i| format!("slurm-{key}-{i}"))
        .collect();
    let tasks: Vec<Task> = lines
        .into_iter()
        .zip(&tags)
        .zip(&args.kernels)
        .map(|((mut line, tag), kernel)| {
            // The task's own tag, before the guest command.
            let at = line.iter().position(|a| a == "--").unwrap_or(line.len());
            line.splice(at..at, ["--tag".to_string(), tag.clone()]);
            Task {
                name: format!("{kernel} {}", command.name),
                program: program.clone(),
                args: line,
            }
        })
        .collect();
    let batch = Batch::new(&cache.root, key, tasks);
    // A task's run is the one stored after this submission.
    let before: Vec<Option<RunId>> = tags
        .iter()
        .map(|t| store.as_ref().and_then(|s| s.resolve(t).ok()))
        .collect();
    let found = |i: usize| -> Option<RunId> {
        let store = store.as_ref()?;
        let id = store.resolve(&tags[i]).ok()?;
        (Some(id) != before[i] || args.cluster.resume).then_some(id)
    };
    let opts = slurm::Options {
        partition: args.cluster.partition.clone(),
        time: args.cluster.slurm_time.clone(),
        sbatch: args.cluster.sbatch.clone(),
        resume: args.cluster.resume,
        env,
        poll: slurm::POLL,
    };
    let outcome = batch.run(&opts, &|i| found(i).is_some())?;

    let mut text = String::new();
    let mut docs = Vec::new();
    let mut failed = 0;
    for (i, state) in outcome.states.iter().enumerate() {
        let spec = &args.kernels[i];
        if *state != TaskState::Done {
            failed += 1;
            continue;
        }
        let Some(store) = &store else {
            // The task's own output, as a local vm prints it.
            let out = std::fs::read_to_string(batch.logs(i).0).unwrap_or_default();
            if args.out.json {
                let doc: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
                docs.extend(doc["guests"].as_array().cloned().unwrap_or_default());
            } else {
                text.push_str(&out);
            }
            continue;
        };
        let Some(id) = found(i) else {
            eprintln!(
                "ptelab: task {i} ({spec}) finished but stored no run tagged {}; its log: {}",
                tags[i],
                batch.logs(i).1.display()
            );
            failed += 1;
            continue;
        };
        let run = store.load(id)?;
        let metric = run.run.metric();
        let kernel_cells: Vec<_> = run.kernel_cells().cloned().collect();
        let arch = Arch::parse(&run.run.arch).map_or(run.run.arch.clone(), |a| a.name().into());
        let accel = run.run.guest.as_ref().map_or("?", |g| g.accel.name());
        if args.out.json {
            docs.push(json!({
                "kernel": spec,
                "arch": arch,
                "metric": metric.name(),
                "host": run.host,
                "run_id": id,
                "slurm": { "job": outcome.job, "task": i, "log": batch.logs(i).1 },
                "cells": crate::report::json::cells(&kernel_cells, metric),
            }));
        } else {
            text.push_str(&format!(
                "== {spec}: Linux {} ({arch} guest, {accel}, {})\n\n",
                run.run.kernel_release,
                metric.per_call_words()
            ));
            text.push_str(&cells::render_table_in(&kernel_cells, metric));
            text.push_str(&format!("stored as run {id} in {}\n\n", args.out.db));
        }
    }
    if args.out.json {
        print_json(&json!({ "schema": "ptelab/vm/v1", "guests": docs }))?;
    } else {
        print_text(&text)?;
    }
    if failed > 0 {
        eprintln!(
            "ptelab: {failed} of {} tasks failed (their logs are above); the same command with \
             --resume submits only those",
            outcome.states.len()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The `ptelab vm` command line of one kernel's task: this command's flags
/// as typed values, one kernel, one guest at a time, the local executor.
fn task_args(args: &VmArgs, kernel: &str) -> Vec<String> {
    let g = &args.guest;
    let mut a: Vec<String> = vec!["vm".into(), "--kernel".into(), kernel.into()];
    if let Some(arch) = &args.arch {
        a.extend(["--arch".into(), arch.clone()]);
    }
    let accel = match g.accel {
        AccelFlag::Auto => "auto",
        AccelFlag::Kvm => "kvm",
        AccelFlag::Tcg => "tcg",
    };
    a.extend(["--accel".into(), accel.into()]);
    a.extend(["--timeout".into(), format!("{}s", g.timeout.as_secs_f64())]);
    if let Some(m) = &g.mirror {
        a.extend(["--mirror".into(), m.clone()]);
    }
    if g.profile {
        a.push("--profile".into());
    }
    a.extend([
        "--memory".into(),
        crate::workload::size::format_size(args.memory),
    ]);
    for f in &args.files {
        a.extend(["--file".into(), absolute(f)]);
    }
    for p in &args.append {
        a.extend(["--append".into(), p.clone()]);
    }
    for t in &args.out.tags {
        a.extend(["--tag".into(), t.clone()]);
    }
    if args.out.json {
        a.push("--json".into());
    }
    a.push("--".into());
    a.extend(args.command.iter().cloned());
    a
}

fn absolute(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
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
