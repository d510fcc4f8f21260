//! `ptelab calibrate --guest`: the bias of a guest figure (docs/guests.md,
//! "The bias of a guest figure").
//!
//! A TCG guest's instruction counts repeat to the last digit, yet anything
//! that moves the guest's memory layout moves them (a kernel parameter that
//! has nothing to do with mm moved 6.17.8's 400K order-0 mprotect-toggle
//! cell by 0.66%, in every sample). No within-run statistic sees that, so a
//! verdict on guest figures needs it measured: the same cell booted K times
//! with setups the kernel path does not depend on (QEMU's `-seed`, a padding
//! kernel parameter, a padding environment variable of the measuring
//! process, each of another length per boot; setup randomization as in
//! Mytkowicz et al., ASPLOS 2009). The first boot is the setup every other
//! guest boots with. The bias of a cell is the largest change between two
//! boots' medians per call, max / min − 1 (`ptelab_stats::bias`); it is
//! stored per kernel, arch and cell, and
//! `compare` and `reproduce` take it as the guest noise threshold.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use crate::cli::flags::CalibrateArgs;
use crate::cli::guest_command::GuestCommand;
use crate::cli::vm::{guest_arch, kernel_specs, AccelFlag};
use crate::error::bail_usage;
use crate::fleet::{self, Fleet, Job, Measured, Setup};
use crate::guest::boot::qemu::AccelRequest;
use crate::guest::source::cache::now_rfc3339;
use crate::guest::source::{self, Kernel};
use crate::record::CellResult;
use crate::store::{BiasBoot, GuestBias, Location, Store};
use crate::text::table::Table;
use crate::workload::size::format_size;
use crate::workload::Arch;

/// The cell calibrated when no command is given: seed 001's smallest
/// regressed size, where setup moves figures the most (the example).
pub const DEFAULT_COMMAND: [&str; 6] = [
    "bench",
    "mprotect-toggle",
    "--size",
    "400K",
    "--folio",
    "4K",
];

/// The tag of every boot's run (beside `--tag`); not the kernel's own tag,
/// so that a padded boot never stands for the kernel in `compare SPEC`.
pub const TAG: &str = "calibrate-guest";

/// Boot `i` (from 0) of a calibration: boot 0 is the setup every guest
/// boots with; the others change the seed and pad the command line and the
/// environment by lengths that share no common step (47 and 389 bytes), so
/// that no two boots place the kernel's or the process's data alike.
pub fn setup(i: u32) -> Setup {
    if i == 0 {
        return Setup::default();
    }
    Setup {
        seed: Some(u64::from(i) + 1),
        cmdline_pad: i as usize * 47,
        env_pad: i as usize * 389,
    }
}

/// The cells' key: what a bias is stored for.
type CellKey = (String, u64, String, Option<String>);

fn key(c: &CellResult) -> CellKey {
    (
        c.workload.name().to_string(),
        c.size_bytes,
        c.folio.to_string(),
        c.phase.clone(),
    )
}

pub fn run(args: &CalibrateArgs) -> anyhow::Result<ExitCode> {
    if args.out.no_store {
        bail_usage!(
            "calibrate --guest stores its runs and the bias in the database: drop --no-store"
        );
    }
    let words: Vec<String> = if args.command.is_empty() {
        DEFAULT_COMMAND.iter().map(|s| s.to_string()).collect()
    } else {
        args.command.clone()
    };
    let command = GuestCommand::parse("calibrate", &words, &[])?;
    if !command.measures {
        bail_usage!(
            "calibrate --guest measures cells: the command after -- is bench or sweep, not {}",
            command.name
        );
    }
    if args.vm.accel == AccelFlag::Kvm {
        bail_usage!(
            "calibrate --guest measures the bias of instruction counts, which TCG guests give; \
             a KVM guest measures time: drop --accel kvm"
        );
    }
    let arch_flag = guest_arch(&args.arch)?;
    let specs = kernel_specs(&args.kernels)?;
    let config = args
        .vm
        .build_config(specs.iter().any(|s| s.source().builds()))?;
    if let Some(need) = command.need {
        fleet::check_fits(need, args.memory)?;
    }
    args.exec.check()?;
    if args.exec.resume {
        bail_usage!(
            "calibrate --guest takes its bias from one batch's boots: run it again without --resume"
        );
    }
    let cache = super::super::guest_cache(&args.exec)?;
    let opts = source::Options {
        arch: arch_flag,
        mirror: args.vm.mirror.clone(),
        interrupted: crate::kernel::signals::interrupted(),
        config,
        needs: command.needs(false),
    };
    let mut settings = super::super::fleet_settings(&args.vm, args.memory, 1, vec![], vec![]);
    settings.accel = AccelRequest::Tcg;
    settings.executing = super::super::executing_with(&args.exec, None);
    let kernels = fleet::builds::resolve(&cache, &specs, &opts, &settings.executing)?;
    if command.disk.is_some() {
        crate::guest::boot::disk::find_mkfs()?;
    }
    let fleet = Fleet::prepare(&cache, settings, &kernels)?;
    let store = Store::open(&args.out.db)?;
    let setups: Vec<Setup> = (0..args.boots).map(setup).collect();
    let jobs: Vec<Job> = kernels
        .iter()
        .flat_map(|k| {
            setups.iter().map(|s| Job {
                kernel: k,
                name: format!("calibrate-{}", command.name),
                args: command.args.clone(),
                program: None,
                disk: command.disk,
                setup: s.clone(),
            })
        })
        .collect();
    eprintln!(
        "ptelab: {} boots of each kernel, each with its own QEMU -seed and padding",
        args.boots
    );
    let finished = fleet.run(&jobs)?;
    let tags: Vec<String> = std::iter::once(TAG.to_string())
        .chain(args.out.tags.iter().cloned())
        .collect();
    let mut biases = Vec::new();
    let mut runs = Vec::new();
    // The first store error (a full disk, a server gone): nothing more is
    // stored after it, and the biases measured are printed before it
    // decides the exit code.
    let mut store_error: Option<anyhow::Error> = None;
    let mut done = finished.into_iter();
    for k in &kernels {
        let mut boots = Vec::new();
        for s in &setups {
            let f = done.next().expect("one answer per job");
            let out = f.answer?;
            if out.exit_code != 0 {
                anyhow::bail!(
                    "the {} guest command exited {}; console log: {}",
                    k.spec,
                    out.exit_code,
                    f.log.display()
                );
            }
            let m = Measured::parse(&out.stdout, k, &out).with_context(|| {
                format!(
                    "the {} guest's answer was refused; console log: {}",
                    k.spec,
                    f.log.display()
                )
            })?;
            if let Some(why) = m.failed.first() {
                anyhow::bail!("{}: not measured: {why}", k.spec);
            }
            let id = match &store_error {
                None => m
                    .store_tagged(&store, "calibrate", &tags)
                    .map_err(|e| store_error = Some(e))
                    .ok(),
                Some(_) => None,
            };
            runs.extend(id);
            boots.push((s.clone(), id, m));
        }
        for mut b in estimate(k, &words, &boots)? {
            if store_error.is_none() {
                match store.insert_guest_bias(&b) {
                    Ok(id) => b.id = Some(id),
                    Err(e) => store_error = Some(e),
                }
            }
            biases.push(b);
        }
    }
    if args.out.json {
        super::super::print_json(&json!({
            "schema": "ptelab/calibrate-guest/v1",
            "statistic": STATISTIC,
            "runs": runs,
            "biases": biases,
            "store_error": store_error.as_ref().map(|e| format!("{e:#}")),
        }))?;
    } else {
        super::super::print_text(&render(&biases, &args.out.db, store_error.is_none()))?;
    }
    match store_error {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// What the bias is, in words.
pub const STATISTIC: &str = "the largest change between two boots' medians per call (max / min \
                             - 1), which a change between two guest figures must exceed to have \
                             a direction; dev: the largest deviation of one boot from the median \
                             of the boots";

/// One bias per cell that every boot of kernel `k` measured.
fn estimate(
    k: &Kernel,
    words: &[String],
    boots: &[(Setup, Option<i64>, Measured)],
) -> anyhow::Result<Vec<GuestBias>> {
    let first = &boots.first().context("no boot")?.2;
    let guest = first
        .host
        .guest
        .clone()
        .context("a guest run records its guest")?;
    let mut figures: BTreeMap<CellKey, Vec<BiasBoot>> = BTreeMap::new();
    for (s, id, m) in boots {
        for c in &m.cells {
            figures.entry(key(c)).or_default().push(BiasBoot {
                seed: s.seed.unwrap_or(1),
                cmdline_pad: s.cmdline_pad,
                env_pad: s.env_pad,
                median: c.ns_per_call.median,
                run_id: *id,
            });
        }
    }
    let mut out = Vec::new();
    for c in &first.cells {
        let boots = figures.remove(&key(c)).unwrap_or_default();
        let medians: Vec<f64> = boots.iter().map(|b| b.median).collect();
        let spread = ptelab_stats::bias::spread(&medians).with_context(|| {
            format!(
                "the spread of {} {} {} over {} boots",
                c.workload.name(),
                format_size(c.size_bytes),
                c.folio,
                medians.len()
            )
        })?;
        out.push(GuestBias {
            id: None,
            kernel: k.spec.to_string(),
            release: first.host.kernel_release.clone(),
            arch: k.arch,
            workload: c.workload,
            size_bytes: c.size_bytes,
            folio: c.folio,
            phase: c.phase.clone(),
            measured_at: now_rfc3339(),
            command: words.join(" "),
            metric: guest.metric.name().to_string(),
            qemu_version: guest.qemu_version.clone(),
            spread,
            boots,
        });
    }
    Ok(out)
}

/// A cell's label: `mprotect-toggle 400K 4K none-to-rw`.
pub fn cell_label(b: &GuestBias) -> String {
    let mut s = format!(
        "{} {} {}",
        b.workload.name(),
        format_size(b.size_bytes),
        b.folio
    );
    if let Some(p) = &b.phase {
        s.push(' ');
        s.push_str(p);
    }
    s
}

fn pct(x: f64) -> String {
    format!("±{:.2}%", x * 100.0)
}

fn figure(v: f64) -> String {
    format!("{v:.1}")
}

/// The biases as text; `stored`: whether every one went into `db`.
fn render(biases: &[GuestBias], db: &Location, stored: bool) -> String {
    let mut out = String::new();
    let Some(first) = biases.first() else {
        return "no cell was measured on every boot: nothing stored\n".into();
    };
    let n = first.boots.len();
    let intro = format!(
        "Bias of a guest figure: {n} boots per kernel, each with its own QEMU -seed, a padding \
         kernel parameter ({}=…) and a padding environment variable of the measuring process \
         ({}=…) of another length; boot 1 is the setup every other guest boots with. Bias: \
         {STATISTIC}.",
        crate::guest::boot::qemu::PAD_PARAM,
        crate::guest::boot::qemu::PAD_ENV,
    );
    writeln!(out, "{}\n", wrap(&intro)).unwrap();
    let mut kernels: Vec<(&str, Arch)> = Vec::new();
    for b in biases {
        if !kernels.contains(&(b.kernel.as_str(), b.arch)) {
            kernels.push((b.kernel.as_str(), b.arch));
        }
    }
    for (spec, arch) in kernels {
        let of: Vec<&GuestBias> = biases
            .iter()
            .filter(|b| b.kernel == spec && b.arch == arch)
            .collect();
        writeln!(
            out,
            "== {spec}: Linux {} ({} guest, {} per call, {})",
            of[0].release,
            arch.name(),
            of[0].metric,
            of[0].qemu_version
        )
        .unwrap();
        let mut table = Table::new()
            .left("cell")
            .right("median")
            .right("min")
            .right("max")
            .right("dev")
            .right("bias");
        for b in &of {
            table.row([
                cell_label(b),
                figure(b.spread.median),
                figure(b.spread.min),
                figure(b.spread.max),
                pct(b.spread.max_deviation),
                pct(b.bias()),
            ]);
        }
        out.push_str(&table.text(" "));
        let mut boots = Table::new()
            .right("boot")
            .right("seed")
            .right("cmdline pad")
            .right("env pad");
        for b in &of {
            boots = boots.right(cell_label(b));
        }
        boots = boots.right("run");
        for i in 0..of[0].boots.len() {
            let s = &of[0].boots[i];
            let mut row = vec![
                (i + 1).to_string(),
                s.seed.to_string(),
                s.cmdline_pad.to_string(),
                s.env_pad.to_string(),
            ];
            row.extend(
                of.iter()
                    .map(|b| b.boots.get(i).map_or("-".into(), |x| figure(x.median))),
            );
            row.push(s.run_id.map_or("-".into(), |id| id.to_string()));
            boots.row(row);
        }
        out.push('\n');
        out.push_str(&boots.text(" "));
        out.push('\n');
    }
    let ids: Vec<String> = biases
        .iter()
        .filter_map(|b| b.id)
        .map(|i| i.to_string())
        .collect();
    let end = if stored {
        format!(
            "Stored in {} (guest bias {}; each boot's run is tagged {TAG}). compare of guest runs \
             and reproduce's guest verdicts now call a change of these cells on these kernels \
             that stays within the bias \"within guest bias\" (the nearest size calibrated \
             stands for another size, and says so).",
            db.display(),
            ids.join(", ")
        )
    } else {
        let kept = if ids.is_empty() {
            "none of these biases was stored".to_string()
        } else {
            format!(
                "only guest bias {} was stored, and compare and reproduce take only that",
                ids.join(", ")
            )
        };
        format!(
            "Not all stored: the results database {} failed (the error follows); {kept}.",
            db.display()
        )
    };
    writeln!(out, "{}", wrap(&end)).unwrap();
    out
}

fn wrap(text: &str) -> String {
    crate::report::markdown::wrap_sep("", &crate::report::markdown::words(text), "", 76)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_boot_is_the_ordinary_setup_and_the_others_differ() {
        assert_eq!(setup(0), Setup::default());
        let s: Vec<Setup> = (1..20).map(setup).collect();
        for (i, a) in s.iter().enumerate() {
            assert!(a.seed != Some(1) && a.cmdline_pad > 0 && a.env_pad > 0);
            for b in &s[i + 1..] {
                assert!(a.seed != b.seed && a.cmdline_pad != b.cmdline_pad);
            }
        }
        // The longest padding still fits the kernel's 2048-byte command line
        // beside ptelab's own parameters.
        assert!(setup(20).cmdline_param().unwrap().len() < 1100);
    }

    #[test]
    fn the_report_reads_well() {
        let mut a = crate::store::tests::guest_bias("6.17.8+deb13-cloud-amd64", 400, 0.0066);
        a.id = Some(1);
        let mut b = crate::store::tests::guest_bias("6.17.8+deb13-cloud-amd64", 4, 0.017);
        b.workload = crate::workload::WorkloadKind::ProtTransition;
        b.phase = Some("none-to-rw".into());
        b.id = Some(2);
        insta::assert_snapshot!(render(&[a, b], &Location::File("ptelab.db".into()), true));
    }
}
