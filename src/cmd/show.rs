//! `ptelab show RUN`: one run from the results database, as tables in the
//! seeds' style, CSV (one row per cell) or the run document as JSON
//! (`"schema": "ptelab/run/v1"`, which `ptelab runs --import` reads back).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write;
use std::process::ExitCode;

use crate::cli::flags::ShowArgs;
use crate::record::cells::render_table_in;
use crate::record::{CellResult, Metric, ModelCellRecord};
use crate::report::mechanism;
use crate::store::{Store, StoredCell, StoredRun};
use crate::text::table::Table;

pub fn run(args: &ShowArgs) -> anyhow::Result<ExitCode> {
    let store = Store::open_existing(&args.out.db)?;
    let run = store.load_run(&args.run)?;
    let text = if args.out.json {
        let mut s = serde_json::to_string_pretty(&run_doc(&run))?;
        s.push('\n');
        s
    } else if args.csv {
        render_csv(&run)
    } else {
        render_text(&run)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The run document of `show --json` (`ptelab/run/v1`): the stored run,
/// with each measured cell's figures named by what they hold and their
/// unit beside them (`report::json`); `runs --import` reads it back.
#[derive(serde::Serialize)]
pub struct RunDoc<'a> {
    schema: &'a str,
    run: &'a crate::store::RunSummary,
    host: &'a serde_json::Value,
    cells: Vec<serde_json::Value>,
}

pub fn run_doc(run: &StoredRun) -> RunDoc<'_> {
    let metric = run.run.metric();
    RunDoc {
        schema: &run.schema,
        run: &run.run,
        host: &run.host,
        cells: run
            .cells
            .iter()
            .map(|c| match c {
                StoredCell::Kernel(k) => serde_json::json!({
                    "backend": "kernel",
                    "cell": crate::report::json::cell(k, metric),
                }),
                StoredCell::Model(_) => {
                    serde_json::to_value(c).expect("a model cell serializes to JSON")
                }
            })
            .collect(),
    }
}

fn host_field(run: &StoredRun, key: &str) -> Option<String> {
    match run.host.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Null => None,
        v => Some(v.to_string()),
    }
}

/// Heading, then one table per workload (measured cells) and per workload,
/// arch and strategy (model cells).
pub fn render_text(run: &StoredRun) -> String {
    let r = &run.run;
    let mut out = String::new();
    writeln!(out, "run {}: {}, {}", r.id, r.kind, r.status).unwrap();
    writeln!(out, "  command:  {}", r.command).unwrap();
    let finished = r
        .finished_at
        .as_deref()
        .map_or(String::new(), |f| format!(", finished {f}"));
    writeln!(out, "  started:  {}{finished}", r.started_at).unwrap();
    let cpu = host_field(run, "cpu_model").unwrap_or_else(|| "unknown CPU".into());
    let cores = host_field(run, "cores").map_or(String::new(), |c| format!(", {c} cores"));
    writeln!(
        out,
        "  kernel:   Linux {} {} ({cpu}{cores})",
        r.kernel_release, r.arch
    )
    .unwrap();
    if let Some(pv) = host_field(run, "paravirt") {
        writeln!(out, "  virt:     {pv}").unwrap();
    }
    if let Some(g) = &r.guest {
        writeln!(
            out,
            "  guest:    {} ({}), kernel {} sha256 {}",
            g.accel, g.qemu_version, g.kernel_source, g.kernel_sha256
        )
        .unwrap();
    }
    let metric = r.metric();
    if metric == Metric::Instructions {
        writeln!(
            out,
            "  metric:   guest instructions per call (QEMU TCG icount), not time"
        )
        .unwrap();
    }
    let rev = r
        .git_revision
        .as_deref()
        .map_or(String::new(), |g| format!(" ({g})"));
    writeln!(
        out,
        "  ptelab:   {}{rev}, machine {}",
        r.tool_version, r.machine_id
    )
    .unwrap();
    if !r.tags.is_empty() {
        writeln!(out, "  tags:     {}", r.tags.join(", ")).unwrap();
    }
    if run.cells.is_empty() {
        writeln!(out, "\nno cells stored").unwrap();
        return out;
    }

    let kernel: Vec<CellResult> = run.kernel_cells().cloned().collect();
    let mut workloads: Vec<&str> = Vec::new();
    for c in &kernel {
        if !workloads.contains(&c.workload.name()) {
            workloads.push(c.workload.name());
        }
    }
    for w in workloads {
        let cells: Vec<CellResult> = kernel
            .iter()
            .filter(|c| c.workload.name() == w)
            .cloned()
            .collect();
        let (lo, hi) = sample_range(&cells);
        let n = if lo == hi {
            lo.to_string()
        } else {
            format!("{lo} to {hi}")
        };
        let per_call = metric.per_call_words();
        writeln!(out, "\n{w}: median {per_call} of {n} samples per cell").unwrap();
        out.push_str(render_table_in(&cells, metric).trim_end());
        out.push('\n');
        mechanism(&mut out, &cells);
    }

    let model: Vec<&ModelCellRecord> = run.model_cells().collect();
    let mut groups: Vec<(&str, &str, &str)> = Vec::new();
    for m in &model {
        let k = (m.workload.name(), m.arch.as_str(), m.strategy.as_str());
        if !groups.contains(&k) {
            groups.push(k);
        }
    }
    for (w, arch, strategy) in groups {
        let cells: Vec<&&ModelCellRecord> = model
            .iter()
            .filter(|m| {
                (m.workload.name(), m.arch.as_str(), m.strategy.as_str()) == (w, arch, strategy)
            })
            .collect();
        let names: BTreeSet<&str> = cells
            .iter()
            .flat_map(|m| m.counters.keys().map(String::as_str))
            .collect();
        writeln!(
            out,
            "\nmodel: {w}, {arch}, strategy {strategy} (counts per call)"
        )
        .unwrap();
        let mut t = Table::new().right("size_kib").right("folio");
        for n in &names {
            t = t.right(*n);
        }
        for m in &cells {
            let mut row = vec![(m.size_bytes >> 10).to_string(), m.folio.to_string()];
            row.extend(
                names
                    .iter()
                    .map(|n| m.counters.get(*n).map_or("-".into(), |v| v.to_string())),
            );
            t.row(row);
        }
        out.push_str(&t.text(" | "));
    }
    out
}

/// Functions listed per profiled cell.
const TOP_FUNCTIONS: usize = 12;

/// The mechanism counters of the cells that have them (`vm --profile`).
fn mechanism(out: &mut String, cells: &[CellResult]) {
    let counted: Vec<&CellResult> = cells.iter().filter(|c| c.profile.is_some()).collect();
    let Some(first) = counted.first().and_then(|c| c.profile.as_ref()) else {
        return;
    };
    writeln!(
        out,
        "\nmechanism (ptelab's QEMU plugin, per call; names from {}):",
        first.symbols
    )
    .unwrap();
    for c in cells {
        let label = format!(
            "{} {}{}",
            crate::text::format::size(c.size_bytes),
            c.folio,
            c.phase.as_ref().map_or(String::new(), |p| format!(" {p}"))
        );
        match &c.profile {
            Some(p) => out.push_str(&mechanism::cell_text(&label, p, TOP_FUNCTIONS)),
            None => writeln!(out, "{label}: {}", mechanism::NOT_COUNTED).unwrap(),
        }
    }
}

fn sample_range(cells: &[CellResult]) -> (usize, usize) {
    let n = cells.iter().map(|c| c.ns_per_call.samples.len());
    (n.clone().min().unwrap_or(0), n.max().unwrap_or(0))
}

/// Quote a CSV field when it needs it (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

const CSV_HEADER: &str = "run,backend,workload,size_bytes,size_kib,folio,phase,regions,neighbor,arch,strategy,\
median_ns,ci_low_ns,ci_high_ns,min_ns,mean_ns,ns_per_page,samples,flushes_per_call,layout_matches,layout,counters";

/// One row per cell; empty fields where a backend has no such value. A run
/// measured in guest instructions names its columns `median_instr`,
/// `instr_per_page`, ..., so that no reader takes them for nanoseconds.
pub fn render_csv(run: &StoredRun) -> String {
    let mut out = match run.run.metric() {
        Metric::Time => CSV_HEADER.to_string(),
        Metric::Instructions => CSV_HEADER
            .replace("_ns,", "_instr,")
            .replace("ns_per_page", "instr_per_page"),
    };
    out.push('\n');
    let id = run.run.id.to_string();
    for c in &run.cells {
        let fields: Vec<String> = match c {
            StoredCell::Kernel(k) => {
                let ns = &k.ns_per_call;
                vec![
                    id.clone(),
                    "kernel".into(),
                    k.workload.name().into(),
                    k.size_bytes.to_string(),
                    (k.size_bytes >> 10).to_string(),
                    k.folio.to_string(),
                    k.phase.clone().unwrap_or_default(),
                    k.regions.to_string(),
                    k.neighbor.to_string(),
                    String::new(),
                    String::new(),
                    ns.median.to_string(),
                    ns.ci_low.to_string(),
                    ns.ci_high.to_string(),
                    ns.min.to_string(),
                    ns.mean.to_string(),
                    k.ns_per_page.to_string(),
                    ns.samples.len().to_string(),
                    k.tlb_flushes
                        .per_call
                        .map_or(String::new(), |f| f.to_string()),
                    k.layout.matches.to_string(),
                    k.layout.summary(),
                    String::new(),
                ]
            }
            StoredCell::Model(m) => {
                let mut row = vec![
                    id.clone(),
                    "model".into(),
                    m.workload.name().into(),
                    m.size_bytes.to_string(),
                    (m.size_bytes >> 10).to_string(),
                    m.folio.to_string(),
                    String::new(),
                    String::new(),
                    String::new(),
                    m.arch.clone(),
                    m.strategy.clone(),
                ];
                row.extend(std::iter::repeat_n(String::new(), 10));
                row.push(
                    m.counters
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(";"),
                );
                row
            }
        };
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        writeln!(out, "{}", line.join(",")).unwrap();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_when_needed() {
        assert_eq!(csv_field("100% 4K"), "100% 4K");
        assert_eq!(csv_field("94% 2M, 6% 4K"), "\"94% 2M, 6% 4K\"");
        assert_eq!(csv_field("a\"b"), "\"a\"\"b\"");
        assert_eq!(CSV_HEADER.split(',').count(), 22);
    }
}

#[cfg(test)]
mod guest_tests {
    use super::*;
    use crate::record::{Accel, Guest};
    use crate::store::{RunStatus, RunSummary, RUN_SCHEMA};
    use crate::workload::FolioSpec;

    #[test]
    fn a_tcg_guest_run_shows_instructions_and_its_provenance() {
        let g = Guest::new(
            Accel::Tcg,
            "QEMU emulator version 10.0.2",
            "debian:6.17.13",
            "ab12",
        );
        let run = StoredRun {
            schema: RUN_SCHEMA.into(),
            run: RunSummary {
                id: 7,
                kind: "bench".into(),
                command: "ptelab vm --kernel debian:6.17.13 -- bench mprotect-toggle".into(),
                started_at: "2026-05-01T00:00:00Z".into(),
                finished_at: None,
                status: RunStatus::Complete,
                kernel_release: "6.17.13+deb13-cloud-amd64".into(),
                arch: "x86_64".into(),
                machine_id: "m".into(),
                tool_version: "0.1.0".into(),
                git_revision: None,
                tags: vec![],
                cells: 1,
                guest: Some(g.clone()),
            },
            host: serde_json::json!({ "guest": g }),
            cells: vec![StoredCell::Kernel(crate::record::fixtures::fixture(
                4096,
                180_400.0,
                FolioSpec::Base,
            ))],
        };
        let text = render_text(&run);
        assert!(text.contains(
            "  guest:    tcg (QEMU emulator version 10.0.2), kernel debian:6.17.13 sha256 ab12\n"
        ));
        assert!(text.contains("  metric:   guest instructions per call"));
        assert!(text.contains("mprotect-toggle: median instructions per call of 10 samples"));
        assert!(
            text.contains("instr_per_call") && !text.contains("nsec"),
            "{text}"
        );
        let csv = render_csv(&run);
        let header = csv.lines().next().unwrap();
        assert!(
            header.contains(
                ",median_instr,ci_low_instr,ci_high_instr,min_instr,mean_instr,instr_per_page,"
            ),
            "{header}"
        );
        assert!(!header.contains("_ns"), "{header}");
    }
}
