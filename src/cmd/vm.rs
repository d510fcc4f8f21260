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

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::Context;
use clap::Parser;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{print_json, print_text};
use crate::bail_usage;
use crate::cli::flags::{Cli, Command};
use crate::cli::plan::MEM_SHARE;
use crate::cli::vm::{AccelFlag, VmArgs};
use crate::guest::binary::guest_binary;
use crate::guest::cache::Cache;
use crate::guest::fetch::{self, Resolved};
use crate::guest::qemu::{choose_accel, AccelRequest};
use crate::guest::run::{run_guest, GuestJob, GuestOutput};
use crate::guest::{Arch, KernelSpec};
use crate::record::{Accel, CellResult, CellSink, Guest, Host};
use crate::report::cells;

/// Memory a guest keeps for its kernel, the initramfs and ptelab itself;
/// the rest is MemAvailable in the guest (docs/guests.md gives the figure).
const GUEST_RESERVE: u64 = 192 << 20;

/// Guest commands and whether their results come back to be stored.
const COMMANDS: [(&str, bool); 5] = [
    ("bench", true),
    ("sweep", true),
    ("crosscheck", false),
    ("doctor", false),
    ("model", false),
];

/// Flags that belong to `vm` itself, not to the guest command.
const HOST_FLAGS: [&str; 4] = ["--db", "--tag", "--json", "--no-store"];

/// The guest command, checked on the host.
struct GuestCommand {
    name: String,
    /// `exec NAME`: the `--file` to run instead of ptelab.
    program: Option<String>,
    /// Arguments after `ptelab` in the guest.
    args: Vec<String>,
    /// bench and sweep: cells come back and are stored here.
    measures: bool,
    /// Bytes the largest cell maps (bench, sweep).
    need: Option<u64>,
    /// Bytes of files the command writes at once, when it needs a disk
    /// (the reclaim workload: its file, or its swapfile).
    disk: Option<u64>,
}

impl GuestCommand {
    fn parse(words: &[String], files: &[PathBuf]) -> anyhow::Result<GuestCommand> {
        let name = words.first().cloned().unwrap_or_default();
        if name == "exec" {
            let names: Vec<&str> = files
                .iter()
                .filter_map(|f| f.file_name().and_then(|n| n.to_str()))
                .collect();
            let Some(program) = words.get(1).filter(|p| names.contains(&p.as_str())) else {
                bail_usage!(
                    "exec runs a program given with --file: accepted names are {}",
                    if names.is_empty() {
                        "none (no --file given)".to_string()
                    } else {
                        names.join(", ")
                    }
                );
            };
            return Ok(GuestCommand {
                name,
                program: Some(program.clone()),
                args: words[2..].to_vec(),
                measures: false,
                need: None,
                disk: None,
            });
        }
        let Some(&(_, measures)) = COMMANDS.iter().find(|(c, _)| *c == name) else {
            let names: Vec<&str> = COMMANDS.iter().map(|(c, _)| *c).collect();
            bail_usage!(
                "'{name}' cannot run in a guest: accepted commands after -- are {}, and exec NAME for a --file",
                names.join(", ")
            );
        };
        for w in &words[1..] {
            if let Some(f) = HOST_FLAGS
                .iter()
                .find(|f| w == *f || w.starts_with(&format!("{f}=")))
            {
                bail_usage!(
                    "{f} belongs to vm, not to the guest command: `ptelab vm {f} … --kernel SPEC -- {name} …` \
                     (results are stored on this host)"
                );
            }
        }
        // The guest parses the same flags; parse them here first so that a
        // typo costs no boot.
        let cli =
            Cli::try_parse_from(std::iter::once("ptelab".to_string()).chain(words.iter().cloned()))
                .map_err(|e| {
                    crate::error::usage(format!(
                        "in the guest command: {}",
                        first_line(&e.to_string())
                    ))
                })?;
        let need = match &cli.command {
            Command::Bench(b) => {
                Some(b.size.unwrap_or_else(|| b.workload.default_size()) * b.measure.regions as u64)
            }
            Command::Sweep(s) => {
                Some(s.sizes.iter().copied().max().unwrap_or(0) * s.measure.regions as u64)
            }
            _ => None,
        };
        let disk = cli.command.guest_disk_bytes();
        let mut args = words.to_vec();
        if measures {
            args.extend(["--no-store".to_string(), "--json".to_string()]);
        }
        Ok(GuestCommand {
            name,
            program: None,
            args,
            measures,
            need,
            disk,
        })
    }
}

fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim_start_matches("error: ")
}

/// One kernel, resolved.
struct Kernel {
    spec: KernelSpec,
    arch: Arch,
    image: PathBuf,
    /// `debian:6.17.13 linux-image-… 6.17.13-1`, or the image's path.
    source: String,
    sha256: String,
}

fn resolve(cache: &Cache, spec: KernelSpec, opts: &fetch::Options) -> anyhow::Result<Kernel> {
    Ok(match fetch::resolve(cache, &spec, opts)? {
        Resolved::Debian { entry, .. } => {
            let m = &entry.manifest;
            Kernel {
                arch: m.arch,
                image: entry.image(),
                source: format!("{spec} {} {}", m.package.name, m.package.version),
                sha256: m.sha256.clone(),
                spec,
            }
        }
        Resolved::Image(img) => Kernel {
            arch: img.arch,
            source: img.image.display().to_string(),
            image: img.image,
            sha256: img.sha256,
            spec,
        },
    })
}

/// What a measuring command prints with `--json` (bench: one cell with
/// the host beside it; sweep: `cells`).
#[derive(Deserialize)]
struct MeasuredDoc {
    schema: String,
    host: Host,
    #[serde(default)]
    cells: Option<Vec<CellResult>>,
    #[serde(default)]
    interrupted: bool,
    #[serde(default)]
    failed: Vec<Value>,
}

/// The cells and host a measuring guest command answered, checked, and
/// its failed cells as `CELL: ERROR` (a layout the guest cannot give, say).
fn measured(stdout: &[u8]) -> anyhow::Result<(Host, Vec<CellResult>, bool, Vec<String>)> {
    let value: Value = serde_json::from_slice(stdout).context("the answer is not JSON")?;
    let doc: MeasuredDoc = serde_json::from_value(value.clone())
        .context("the answer is not a ptelab result document")?;
    let cells = match (doc.schema.as_str(), doc.cells) {
        ("ptelab/bench/v1", None) => vec![serde_json::from_value::<CellResult>(value)
            .context("the answer's cell does not fit the record schema")?],
        ("ptelab/sweep/v1" | "ptelab/bench/v1", Some(cells)) => cells,
        (other, _) => anyhow::bail!("the answer has schema '{other}', not a bench or sweep result"),
    };
    let failed = doc
        .failed
        .iter()
        .map(|f| {
            let text = |k: &str| f[k].as_str().unwrap_or("?").trim().to_string();
            format!("{}: {}", text("cell"), text("error"))
        })
        .collect();
    Ok((doc.host, cells, doc.interrupted, failed))
}

pub fn run(args: &VmArgs) -> anyhow::Result<ExitCode> {
    let mut command = GuestCommand::parse(&args.command, &args.files)?;
    // `vm --json` asks every guest command for its JSON document too.
    if args.out.json && !command.measures && command.program.is_none() {
        command.args.push("--json".into());
    }
    let arch_flag = args.arch.as_deref().map(Arch::parse_flag).transpose()?;
    let specs = args
        .kernels
        .iter()
        .map(|s| KernelSpec::parse(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(need) = command.need {
        let usable = (args.memory.saturating_sub(GUEST_RESERVE) as f64 * MEM_SHARE) as u64;
        if need > usable {
            let want =
                ((need as f64 / MEM_SHARE) as u64 + GUEST_RESERVE).next_multiple_of(256 << 20);
            bail_usage!(
                "the largest cell maps {} but a guest of --memory {} leaves it about {}: pass --memory {} or more",
                crate::text::format::bytes(need as f64),
                crate::text::format::bytes(args.memory as f64),
                crate::text::format::bytes(usable as f64),
                crate::workload::size::format_size(want)
            );
        }
    }
    let request = match args.accel {
        AccelFlag::Auto => AccelRequest::Auto,
        AccelFlag::Kvm => AccelRequest::Kvm,
        AccelFlag::Tcg => AccelRequest::Tcg,
    };
    let interrupted = crate::kernel::signals::interrupted();

    // Everything that can fail on bad input happens before the first boot.
    let cache = Cache::from_env()?;
    let opts = fetch::Options {
        arch: arch_flag,
        mirror: args.mirror.clone(),
        interrupted,
    };
    let mut kernels = Vec::new();
    for spec in specs {
        eprintln!("ptelab: kernel {spec} …");
        kernels.push(resolve(&cache, spec, &opts)?);
    }
    let mut per_arch: BTreeMap<Arch, (PathBuf, Accel, String)> = BTreeMap::new();
    for k in &kernels {
        if let std::collections::btree_map::Entry::Vacant(e) = per_arch.entry(k.arch) {
            let (accel, why) = choose_accel(request, k.arch)?;
            e.insert((guest_binary(k.arch)?, accel, why));
        }
    }
    for (arch, (_, _, why)) in &per_arch {
        eprintln!("ptelab: {} guests: {why}", arch.name());
    }
    let store = if command.measures && !args.out.no_store {
        Some(crate::store::Store::open(&args.out.db)?)
    } else {
        None
    };
    if command.disk.is_some() {
        // No boot without the tool that formats the guest's disk.
        crate::guest::disk::find_mkfs()?;
    }
    let logs = cache.root.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    prune_logs(&logs, KEEP_LOGS);

    // Boot the guests, --jobs at a time, each answer kept in kernel order.
    let answers: Vec<Mutex<Option<anyhow::Result<GuestOutput>>>> =
        kernels.iter().map(|_| Mutex::new(None)).collect();
    let jobs: Vec<GuestJob> = kernels
        .iter()
        .map(|k| {
            let (binary, accel, _) = &per_arch[&k.arch];
            GuestJob {
                arch: k.arch,
                kernel: k.image.clone(),
                binary: binary.clone(),
                args: command.args.clone(),
                files: args.files.clone(),
                append: args.append.clone(),
                program: command.program.clone(),
                accel: *accel,
                memory_mib: args.memory >> 20,
                disk: command.disk.map(|bytes| {
                    crate::guest::disk::DiskSpec::for_data(bytes, cache.root.join("disks"))
                }),
                // Seed 004, the reclaim workload's, is about MGLRU reclaim.
                mglru: command.disk.is_some(),
                timeout: args.timeout,
                log: logs.join(format!(
                    "{}-{}-{}.log",
                    crate::guest::cache::now_rfc3339().replace(':', ""),
                    k.sha256.get(..12).unwrap_or("image"),
                    command.name
                )),
                interrupted,
            }
        })
        .collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..(args.jobs as usize).min(jobs.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(job) = jobs.get(i) else { break };
                if interrupted.load(Ordering::SeqCst) {
                    break;
                }
                eprintln!(
                    "ptelab: booting {} ({} guest, {}) -- log {}",
                    kernels[i].spec,
                    job.arch.name(),
                    job.accel.name(),
                    job.log.display()
                );
                let answer = run_guest(job);
                *answers[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(answer);
            });
        }
    });
    if interrupted.load(Ordering::SeqCst) {
        anyhow::bail!("interrupted: no guest is left running");
    }

    let mut text = String::new();
    let mut docs = Vec::new();
    let mut code = ExitCode::SUCCESS;
    for ((k, job), answer) in kernels.iter().zip(&jobs).zip(answers) {
        let answer = answer
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .expect("every guest ran");
        let out = answer?;
        let heading = format!(
            "== {}: Linux {} ({} guest, {}, {})",
            k.spec,
            out.kernel_release,
            k.arch.name(),
            out.accel.name(),
            out.accel.metric().per_call_words()
        );
        if out.exit_code != 0 {
            eprintln!(
                "ptelab: the guest command exited {} on {}; console log: {}",
                out.exit_code,
                k.spec,
                job.log.display()
            );
            code = ExitCode::from(if out.exit_code == 2 { 2 } else { 1 });
            if !command.measures || out.stdout.is_empty() {
                text.push_str(&format!(
                    "{heading}\n{}\n",
                    String::from_utf8_lossy(&out.stdout)
                ));
                continue;
            }
        }
        if !command.measures {
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            if args.out.json {
                docs.push(json!({
                    "kernel": k.spec.to_string(),
                    "kernel_release": out.kernel_release,
                    "arch": k.arch.name(),
                    "accel": out.accel.name(),
                    "output": serde_json::from_str::<Value>(&stdout).unwrap_or(Value::String(stdout)),
                }));
            } else {
                text.push_str(&format!("{heading}\n{stdout}\n"));
            }
            continue;
        }
        let (mut host, cells, guest_interrupted, failed) =
            measured(&out.stdout).with_context(|| {
                format!(
                    "the {} guest's answer was refused; console log: {}",
                    k.spec,
                    job.log.display()
                )
            })?;
        host.guest = Some(Guest::new(
            out.accel,
            &out.qemu_version,
            &k.source,
            &k.sha256,
        ));
        let run_id = match &store {
            Some(store) => {
                let id = store.begin(&command.name, &crate::kernel::host::invocation(), &host)?;
                for c in &cells {
                    store.cell(id, c)?;
                }
                store.finish(
                    id,
                    guest_interrupted,
                    cells.is_empty() && !failed.is_empty(),
                )?;
                let mut tags = args.out.tags.clone();
                if let KernelSpec::Debian { .. } = k.spec {
                    tags.push(k.spec.to_string());
                }
                store.add_tags(id, &tags)?;
                Some(id)
            }
            None => None,
        };
        if args.out.json {
            docs.push(json!({
                "kernel": k.spec.to_string(),
                "kernel_source": k.source,
                "kernel_sha256": k.sha256,
                "arch": k.arch.name(),
                "metric": host.metric().name(),
                "host": host,
                "run_id": run_id,
                "log": job.log,
                "boot_to_exit_s": out.boot_to_exit.as_secs_f64(),
                "cells": cells,
                "failed": failed,
            }));
        } else {
            text.push_str(&heading);
            text.push_str("\n\n");
            text.push_str(&cells::render_table_in(&cells, host.metric()));
            // What the guest could not measure, with its reason (e.g. a
            // folio layout this kernel does not give), in place of a figure.
            for f in &failed {
                text.push_str(&format!("not measured in this guest: cell {f}\n"));
            }
            if let Some(id) = run_id {
                text.push_str(&format!(
                    "stored as run {id} in {}\n",
                    args.out.db.display()
                ));
            }
            text.push('\n');
        }
    }
    if args.out.json {
        print_json(&json!({ "schema": "ptelab/vm/v1", "guests": docs }))?;
    } else {
        print_text(&text)?;
    }
    Ok(code)
}

/// Console logs kept: the newest ones, so the cache does not grow without end.
const KEEP_LOGS: usize = 200;

/// Remove all but the `keep` newest `*.log` files of `dir` (names start with
/// their UTC start time, so the name order is the age order).
fn prune_logs(dir: &std::path::Path, keep: usize) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut logs: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let old = logs.len().saturating_sub(keep);
    for p in &logs[..old] {
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_logs_are_pruned_newest_kept() {
        let dir = tempfile::tempdir().unwrap();
        for t in [
            "2026-11-23T100000Z-a",
            "2026-11-23T110000Z-b",
            "2026-11-23T120000Z-c",
        ] {
            std::fs::write(dir.path().join(format!("{t}.log")), "x").unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        prune_logs(dir.path(), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "2026-11-23T110000Z-b.log",
                "2026-11-23T120000Z-c.log",
                "notes.txt"
            ]
        );
    }

    impl GuestCommand {
        fn parse_words(words: &[String]) -> anyhow::Result<GuestCommand> {
            GuestCommand::parse(words, &[PathBuf::from("/tmp/mprot")])
        }
    }

    #[test]
    fn the_guest_command_is_checked_on_the_host() {
        let words = |w: &str| w.split_whitespace().map(String::from).collect::<Vec<_>>();
        let c =
            GuestCommand::parse_words(&words("sweep mprotect-toggle --sizes 4K,40M --regions 2"))
                .unwrap();
        assert!(c.measures);
        assert_eq!(c.need, Some(80 << 20));
        assert_eq!(c.disk, None, "only the reclaim workload gets a disk");
        let r = GuestCommand::parse_words(&words("bench reclaim --size 64M --folio 64K")).unwrap();
        assert_eq!(r.disk, Some(64 << 20));
        let r = GuestCommand::parse_words(&words("sweep reclaim --sizes 4M,32M --swapfile 48M"))
            .unwrap();
        assert_eq!(r.disk, Some(48 << 20));
        assert_eq!(c.args[c.args.len() - 2..], ["--no-store", "--json"]);
        let d = GuestCommand::parse_words(&words("doctor")).unwrap();
        assert!(!d.measures && d.need.is_none() && d.args == ["doctor"]);
        for bad in [
            "calibrate",
            "bench mprotect-toggle --tag=x",
            "bench nonsense",
        ] {
            let e = GuestCommand::parse_words(&words(bad)).err().unwrap();
            assert!(crate::error::is_usage(&e), "{bad}: {e:#}");
        }
    }

    #[test]
    fn a_guest_answer_is_checked_against_the_record_schema() {
        assert!(measured(b"not json").is_err());
        assert!(measured(br#"{"schema":"ptelab/doctor/v1","host":{}}"#).is_err());
        let cell = crate::record::fixtures::fixture(400, 1000.0, crate::workload::FolioSpec::Base);
        let host = crate::kernel::host::capture().unwrap();
        let doc = json!({"schema": "ptelab/sweep/v1", "host": host, "cells": [cell], "failed": []});
        let (h, cells, interrupted, failed) = measured(doc.to_string().as_bytes()).unwrap();
        assert_eq!(
            (h, cells.len(), interrupted, failed.len()),
            (host.clone(), 1, false, 0)
        );
        let doc = json!({"schema": "ptelab/bench/v1", "host": host, "cells": [], "failed": [
            {"cell": "reclaim 64M 64K", "error": "the page cache of this ext4 file did not get 64K folios"}
        ]});
        let (_, cells, _, failed) = measured(doc.to_string().as_bytes()).unwrap();
        assert!(cells.is_empty());
        assert_eq!(
            failed,
            ["reclaim 64M 64K: the page cache of this ext4 file did not get 64K folios"]
        );
        let mut bench = serde_json::to_value(&cell).unwrap();
        let obj = bench.as_object_mut().unwrap();
        obj.insert("schema".into(), json!("ptelab/bench/v1"));
        obj.insert("host".into(), serde_json::to_value(&host).unwrap());
        assert_eq!(
            measured(bench.to_string().as_bytes()).unwrap().1,
            vec![cell]
        );
    }
}
