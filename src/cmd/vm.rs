//! `ptelab vm --kernel SPEC… -- COMMAND…`: the same command, flags and
//! output as on the host, run in a QEMU guest of each kernel.
//!
//! Every kernel is resolved (and fetched) and the guest binaries built
//! before the first guest boots, so bad input costs no boot. `bench` and
//! `sweep` run in the guest with `--no-store --json`; their cells come back
//! through the guest's framed console answer (untrusted: size-limited,
//! checksummed, parsed against the record schema) and are stored here, one
//! run per kernel, with the guest's own host record plus where and how it
//! ran (`record::Guest`: accelerator, metric, QEMU, kernel source and hash).
//! Under TCG the guest runs with icount, so its figures are instructions.
//! Other commands (`doctor`, `model`, `crosscheck`) print the guest's output.

use std::process::ExitCode;

use anyhow::Context;
use serde_json::{json, Value};

use super::{print_json, print_text};
use crate::cli::guest_command::GuestCommand;
use crate::cli::vm::VmArgs;
use crate::fleet::{self, Fleet, Job, Measured};
use crate::guest::source::{self, Kernel};
use crate::record::cells;

pub fn run(args: &VmArgs) -> anyhow::Result<ExitCode> {
    let mut commands = args
        .commands()?
        .iter()
        .map(|words| GuestCommand::parse("vm", words, &args.files))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if commands.len() > 1 {
        if let Some(c) = commands.iter().find(|c| !c.measures) {
            crate::error::bail_usage!(
                "{} joins commands whose results are stored (bench, sweep); {} runs alone",
                crate::guest::THEN,
                c.program.as_ref().map_or(c.name.as_str(), |_| "exec")
            );
        }
    }
    // `vm --json` asks every guest command for its JSON document too.
    for command in &mut commands {
        if args.out.json
            && !command.measures
            && command.program.is_none()
            && !command.args.iter().any(|a| a == "--json")
        {
            command.args.push("--json".into());
        }
    }
    let arch_flag = args.guest_arch()?;
    let specs = args.kernel_specs()?;
    let config = args
        .guest
        .build_config(specs.iter().any(|s| s.source().builds()))?;
    for need in commands.iter().filter_map(|c| c.need) {
        fleet::check_fits(need, args.memory)?;
    }
    args.cluster.check()?;

    // Everything that can fail on bad input happens before the first boot.
    let cache = super::guest_cache(&args.cluster.exec)?;
    let opts = source::Options {
        arch: arch_flag,
        mirror: args.guest.mirror.clone(),
        interrupted: crate::kernel::signals::interrupted(),
        config,
        needs: commands
            .iter()
            .flat_map(|c| c.needs(args.guest.profile))
            .collect(),
    };
    let mut settings = super::fleet_settings(
        &args.guest,
        args.memory,
        1,
        args.files.clone(),
        args.append.clone(),
    );
    settings.executing = super::executing(&args.cluster);
    let kernels = fleet::builds::resolve(&cache, &specs, &opts, &settings.executing)?;
    if commands.iter().any(|c| c.disk.is_some()) {
        // No boot without the tool that formats the guest's disk.
        crate::guest::boot::disk::find_mkfs()?;
    }
    let fleet = Fleet::prepare(&cache, settings, &kernels)?;
    let store = if commands[0].measures && !args.out.no_store {
        Some(crate::store::Store::open(&args.out.db)?)
    } else {
        None
    };
    // Kernel by kernel, each kernel's commands in the order given.
    let runs: Vec<(&Kernel, &GuestCommand)> = kernels
        .iter()
        .flat_map(|k| commands.iter().map(move |c| (k, c)))
        .collect();
    let jobs: Vec<Job> = runs
        .iter()
        .map(|&(k, command)| Job {
            kernel: k,
            name: command.label(),
            args: command.args.clone(),
            program: command.program.clone(),
            disk: command.disk,
            setup: Default::default(),
        })
        .collect();
    // Several commands share their kernel's boot.
    let finished = match commands.len() {
        1 => fleet.run(&jobs)?,
        _ => fleet.run_per_kernel(&jobs)?,
    };

    let mut text = String::new();
    let mut docs = Vec::new();
    let mut crosschecks = Vec::new();
    let mut code = ExitCode::SUCCESS;
    // The first store error: later guests' figures are still printed (not
    // stored), then it decides the exit code.
    let mut store_error: Option<anyhow::Error> = None;
    // A guest that gave no answer (did not boot, timed out, its cluster
    // task failed): said here, the others still printed and stored; alone,
    // its error is vm's.
    let total = finished.len();
    let mut no_answer: Vec<anyhow::Error> = Vec::new();
    for (&(k, command), done) in runs.iter().zip(finished) {
        let out = match done.answer {
            Ok(out) => out,
            Err(e) => {
                eprintln!(
                    "ptelab: no answer from the guest of {}: {e:#}; console log: {}",
                    k.spec,
                    done.log.display()
                );
                no_answer.push(e);
                continue;
            }
        };
        let mut heading = format!(
            "== {}: Linux {} ({} guest, {}, {})",
            k.spec,
            out.kernel_release,
            k.arch.name(),
            out.accel.name(),
            out.accel.metric().per_call_words()
        );
        if commands.len() > 1 {
            heading.push_str(&format!(": {}", shown_command(command)));
        }
        if out.exit_code != 0 {
            eprintln!(
                "ptelab: the guest command exited {} on {}; console log: {}",
                out.exit_code,
                k.spec,
                done.log.display()
            );
            code = ExitCode::from(if out.exit_code == 2 { 2 } else { 1 });
            // crosscheck exits 1 for a mismatch, with its document.
            let document = command.name == "crosscheck" && out.exit_code == 1;
            if (!command.measures && !document) || out.stdout.is_empty() {
                text.push_str(&format!(
                    "{heading}\n{}\n",
                    String::from_utf8_lossy(&out.stdout)
                ));
                continue;
            }
        }
        if command.name == "crosscheck" {
            // A failing guest's log was named above; a document is all
            // a crosscheck prints on stdout.
            let mut doc: Value = serde_json::from_slice(&out.stdout)
                .with_context(|| format!("the {} guest's crosscheck answer is not JSON", k.spec))?;
            let all_match = count_windows(&mut doc, out.counts.as_ref())
                .with_context(|| format!("the {} guest's crosscheck rows", k.spec))?;
            if !all_match && code == ExitCode::SUCCESS {
                code = ExitCode::from(1);
            }
            let (rendered, summary) = crate::crosscheck::summary::render_document(&doc)?;
            crosschecks.push(summary);
            if args.out.json {
                docs.push(output_doc(k, &out, doc));
            } else {
                text.push_str(&format!("{heading}\n{rendered}\n"));
            }
            continue;
        }
        if !command.measures {
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            if args.out.json {
                let value = serde_json::from_str::<Value>(&stdout).unwrap_or(Value::String(stdout));
                docs.push(output_doc(k, &out, value));
            } else {
                text.push_str(&format!("{heading}\n{stdout}\n"));
            }
            continue;
        }
        let m = Measured::parse(&out.stdout, k, &out).with_context(|| {
            format!(
                "the {} guest's answer was refused; console log: {}",
                k.spec,
                done.log.display()
            )
        })?;
        // An answer a resumed batch handed to the run before was stored then.
        let run_id = match (&store, &store_error) {
            _ if done.before => None,
            (Some(store), None) => match m.store(store, &command.name, k, &args.out.tags) {
                Ok(id) => {
                    crate::fleet::Finished::mark_stored(&done.mark);
                    Some(id)
                }
                Err(e) => {
                    store_error = Some(e);
                    None
                }
            },
            _ => None,
        };
        if args.out.json {
            let mut doc = json!({
                "kernel": k.spec.to_string(),
                "kernel_source": k.source,
                "kernel_sha256": k.sha256,
                "arch": k.arch.name(),
                "metric": m.host.metric().name(),
                "host": m.host,
                "run_id": run_id,
                "log": done.log,
                "stored_before": done.before,
                "boot_to_exit_s": out.boot_to_exit.as_secs_f64(),
                "cells": crate::report::json::cells(&m.cells, m.host.metric()),
                "failed": m.failed,
            });
            if commands.len() > 1 {
                doc["command"] = Value::String(shown_command(command));
            }
            docs.push(doc);
        } else {
            text.push_str(&heading);
            text.push_str("\n\n");
            text.push_str(&cells::render_table_in(&m.cells, m.host.metric()));
            for f in &m.failed {
                text.push_str(&format!("not measured: {f}\n"));
            }
            match run_id {
                Some(id) => text.push_str(&format!(
                    "stored as run {id} in {}\n",
                    args.out.db.display()
                )),
                None if done.before && store.is_some() => {
                    text.push_str("stored by the run this --resume continues (answered then)\n")
                }
                None if store_error.is_some() => text.push_str(&format!(
                    "not stored: {} failed (the error follows)\n",
                    args.out.db.display()
                )),
                None => {}
            }
            text.push('\n');
        }
    }
    if !crosschecks.is_empty() {
        eprintln!(
            "ptelab: crosscheck in guests: {}",
            crate::crosscheck::summary::headline(&crosschecks)
        );
    }
    if args.out.json {
        let mut doc = json!({ "schema": "ptelab/vm/v1", "guests": docs });
        // Only when the store failed: the document is otherwise the one
        // every vm prints.
        if let Some(e) = &store_error {
            doc["store_error"] = Value::String(format!("{e:#}"));
        }
        print_json(&doc)?;
    } else {
        print_text(&text)?;
    }
    if no_answer.len() == total {
        return Err(no_answer.remove(0));
    }
    // The figures are out; now the store's error decides the exit code.
    match (store_error, no_answer.is_empty()) {
        (Some(e), _) => Err(e),
        (None, false) => {
            eprintln!(
                "ptelab: {} of {total} guests gave no answer (above)",
                no_answer.len()
            );
            Ok(ExitCode::FAILURE)
        }
        (None, true) => Ok(code),
    }
}

/// A measuring guest command as the user gave it (less what vm adds).
fn shown_command(c: &GuestCommand) -> String {
    c.args
        .iter()
        .filter(|w| *w != "--no-store" && *w != "--json")
        .cloned()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `vm --json`'s entry for a guest whose command printed `output`.
fn output_doc(k: &Kernel, out: &crate::guest::boot::run::GuestOutput, output: Value) -> Value {
    json!({
        "kernel": k.spec.to_string(),
        "kernel_release": out.kernel_release,
        "arch": k.arch.name(),
        "accel": out.accel.name(),
        "boot_to_exit_s": out.boot_to_exit.as_secs_f64(),
        "output": output,
    })
}

/// Fill a guest crosscheck's windowed flush rows with what the plugin
/// counted (arm64: TLB invalidations per call); whether every observable
/// row matches now.
fn count_windows(
    doc: &mut Value,
    counts: Option<&ptelab_counts::record::Output>,
) -> anyhow::Result<bool> {
    let Some(rows) = doc.get_mut("rows") else {
        return Ok(true);
    };
    let mut typed: Vec<crate::crosscheck::Row> = serde_json::from_value(rows.take())?;
    crate::crosscheck::resolve_windows(&mut typed, counts);
    let all_match = typed.iter().all(|r| r.matches || r.unobservable);
    *rows = serde_json::to_value(&typed)?;
    doc["all_match"] = Value::Bool(all_match);
    Ok(all_match)
}
