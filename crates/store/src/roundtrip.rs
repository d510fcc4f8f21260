//! Property test of the store's round trip: any run the store takes, written
//! the way a measurement writes it (one transaction per cell) or imported
//! from a run document, reads back equal, and its document (`show --json`)
//! parses back equal. The generators are shared with the renderers'
//! round-trip test (`crate::roundtrip`).

// Helpers for other layers' tests (feature `testing`) beside this layer's
// own tests, which alone use the rest.
#![cfg_attr(not(test), allow(dead_code, unused_imports))]

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;

use super::tests::host;
use super::{RunId, RunStatus, Store, StoredCell, StoredRun, RUN_SCHEMA};
use crate::record::{
    Accel, CellResult, FunctionCount, Guest, Host, Layout, Metric, ModelCellRecord, NsPerCall,
    Profile, ProfilePart, TlbFlushes,
};
use crate::workload::folio::MTHP_SIZES;
use crate::workload::{FolioSpec, WorkloadKind};

/// Cases per property: the issue asks for at least 500.
pub const CASES: u32 = 512;

/// Phases the workloads time (`measure::*::phases`) and the reclaim labels'
/// shape, plus free text (a renderer must take any stored phase).
const PHASES: &[&str] = &[
    "none-to-rw",
    "rw-to-none",
    "mremap",
    "iteration",
    "madv-pageout tmpfs",
    "memcg-v2-reclaim anon ext4 swpout-whole",
];

/// Text as users and kernels write it, with what tables, CSV, Markdown and
/// HTML must escape: any character but NUL, which no string ptelab stores
/// can hold (argv, uname and ELF symbol names are C strings) and which
/// PostgreSQL's text refuses.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 ./-]{0,16}",
        "[ -~]{0,24}",
        Just("<img src=x onerror=alert(1)> | a,b \"q\" `c` *d*".to_string()),
        "[^\\x00\\n]{0,8}",
    ]
}

/// A finite, non-negative figure over many magnitudes, with every mantissa
/// bit in use (the JSON text must carry it exactly).
fn figure() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0..1e7f64,
        1 => prop::num::f64::POSITIVE | prop::num::f64::NORMAL,
        1 => Just(0.0),
    ]
}

/// A figure that may be undefined (NaN), as one sample leaves an interval.
fn maybe_figure() -> impl Strategy<Value = f64> {
    prop_oneof![3 => figure(), 1 => Just(f64::NAN)]
}

fn folio() -> impl Strategy<Value = FolioSpec> {
    select(FolioSpec::all())
}

fn layout() -> impl Strategy<Value = Layout> {
    let sizes: Vec<u64> = std::iter::once(4096)
        .chain(MTHP_SIZES)
        .chain([2 << 20])
        .collect();
    (
        btree_map(select(sizes), 0..1u64 << 20, 0..4),
        (0..1u64 << 30, 0..1u64 << 30),
        0..1u64 << 40,
        0..1000u64,
        prop::option::of(text()),
    )
        .prop_map(
            |(histogram, (pages_present, pages_total), pmd, misaligned, mismatch)| Layout {
                histogram,
                pages_present,
                pages_total,
                pmd_mapped_bytes: pmd,
                misaligned_folios: misaligned,
                // A mismatched layout says why; a matching one does not.
                matches: mismatch.is_none(),
                mismatch,
            },
        )
}

/// No sample, one, a few, or many; the summary figures as the runner gives
/// them or undefined.
fn ns_per_call() -> impl Strategy<Value = NsPerCall> {
    let samples = prop_oneof![
        Just(Vec::new()),
        vec(0.5..1e6f64, 1),
        vec(0.5..1e6f64, 2..6),
        vec(0.5..1e6f64, 6..80),
    ];
    (samples, [maybe_figure(), maybe_figure(), maybe_figure()]).prop_map(
        |(samples, [lo, hi, mean])| {
            let mut sorted = samples.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
            let one = samples.len() < 2;
            NsPerCall {
                median,
                // One sample or none: no interval.
                ci_low: if one { f64::NAN } else { lo },
                ci_high: if one { f64::NAN } else { hi },
                min: sorted.first().copied().unwrap_or(f64::NAN),
                mean: if samples.is_empty() { f64::NAN } else { mean },
                samples,
            }
        },
    )
}

/// Counted (some flushes or none), or unavailable with its reason.
fn tlb_flushes() -> impl Strategy<Value = TlbFlushes> {
    let breakdown = btree_map("[0-4]/(all|[0-9]{1,3})", 0..1u64 << 40, 0..4);
    prop_oneof![
        (0..1u64 << 40, 1..1u64 << 40, breakdown).prop_map(|(events, calls, breakdown)| {
            TlbFlushes {
                per_call: Some(events as f64 / calls as f64),
                events,
                calls,
                breakdown,
                unavailable: None,
            }
        }),
        (1..1u64 << 20).prop_map(|calls| TlbFlushes {
            per_call: Some(0.0),
            calls,
            ..TlbFlushes::default()
        }),
        text().prop_map(|why| TlbFlushes {
            unavailable: Some(why),
            ..TlbFlushes::default()
        }),
    ]
}

/// A guest cell's mechanism counters (or none, as every host cell).
fn profile() -> impl Strategy<Value = Option<Profile>> {
    let tlb_kind = select(
        ptelab_counts::Tlb::ALL
            .map(|k| k.name().to_string())
            .to_vec(),
    );
    let function = || {
        (text(), figure(), figure()).prop_map(|(name, entries, instructions)| FunctionCount {
            name,
            entries,
            instructions,
        })
    };
    prop::option::of(
        (
            (0..1u64 << 20, figure(), figure(), figure()),
            btree_map(tlb_kind.clone(), figure(), 0..4),
            vec(function(), 0..6),
            text(),
            vec(
                (
                    text(),
                    figure(),
                    figure(),
                    btree_map(tlb_kind, figure(), 0..3),
                    vec(function(), 0..3),
                )
                    .prop_map(|(phase, kernel, user, tlb, functions)| {
                        ProfilePart {
                            phase,
                            kernel_instructions: kernel,
                            user_instructions: user,
                            tlb,
                            functions,
                        }
                    }),
                0..3,
            ),
        )
            .prop_map(
                |((windows, kernel, user, dev), tlb, mut functions, symbols, parts)| {
                    // A cell's functions have distinct names.
                    let mut seen = std::collections::HashSet::new();
                    functions.retain(|f| seen.insert(f.name.clone()));
                    Profile {
                        windows,
                        kernel_instructions: kernel,
                        user_instructions: user,
                        tlb,
                        functions,
                        symbols,
                        max_window_deviation: dev,
                        parts,
                    }
                },
            ),
    )
}

/// Any measured cell: every workload, folio and phase.
pub(crate) fn kernel_cell() -> impl Strategy<Value = CellResult> {
    (
        (
            select(WorkloadKind::ALL.to_vec()),
            prop_oneof![Just(4096u64), 1..1u64 << 40],
            folio(),
            1..5u32,
            any::<bool>(),
            prop_oneof![
                2 => Just(None),
                2 => select(PHASES).prop_map(|p| Some(p.to_string())),
                1 => text().prop_map(Some),
            ],
        ),
        (
            layout(),
            prop::option::of(layout()),
            any::<bool>(),
            (0..8u64, 0..8u64),
        ),
        (
            ns_per_call(),
            vec(1..40u64, 0..4),
            vec(maybe_figure(), 0..4),
            vec(maybe_figure(), 0..4),
            maybe_figure(),
        ),
        (
            (0..1u64 << 40, 0..1u64 << 30),
            prop::option::of(0..256usize),
            tlb_flushes(),
            figure(),
            vec(text(), 0..3),
        ),
        profile(),
    )
        .prop_map(
            |(
                (workload, size_bytes, folio, regions, neighbor, phase),
                (layout, layout_after, verified, (vmas_before, vmas_after)),
                (ns_per_call, blocks, probe_ns, memory_probe_ns, ns_per_page),
                ((calls, calls_per_sample), pinned_cpu, tlb_flushes, elapsed_s, warnings),
                profile,
            )| CellResult {
                workload,
                size_bytes,
                folio,
                regions,
                neighbor,
                phase,
                layout,
                layout_after,
                verified,
                vmas_before,
                vmas_after,
                ns_per_call,
                blocks,
                probe_ns,
                memory_probe_ns,
                ns_per_page,
                calls,
                calls_per_sample,
                pinned_cpu,
                tlb_flushes,
                elapsed_s,
                warnings,
                windows: Vec::new(),
                profile,
            },
        )
}

/// A JSON value as a model cell's parameters hold them.
fn param() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        figure().prop_map(serde_json::Value::from),
        text().prop_map(serde_json::Value::from),
    ]
}

/// Any model cell.
pub(crate) fn model_cell() -> impl Strategy<Value = ModelCellRecord> {
    (
        select(WorkloadKind::ALL.to_vec()),
        1..1u64 << 40,
        folio(),
        prop_oneof![
            Just("x86_64".to_string()),
            Just("arm64".to_string()),
            text()
        ],
        prop_oneof![Just("batched".to_string()), text()],
        btree_map("[a-z_]{1,10}", param(), 0..4),
        btree_map("[a-z_]{1,12}", figure(), 0..6),
    )
        .prop_map(
            |(workload, size_bytes, folio, arch, strategy, params, counters)| ModelCellRecord {
                workload,
                size_bytes,
                folio,
                arch,
                strategy,
                params: serde_json::Value::Object(params.into_iter().collect()),
                counters,
            },
        )
}

/// How a run reaches the database.
#[derive(Clone, Copy, Debug)]
pub enum Path {
    /// As a measurement writes it: begin, one transaction per cell, finish
    /// with `status` (`Running`: never finished, the process still alive).
    Session(RunStatus),
    /// `runs --import` of a run document (JSON text) with this status.
    Import(RunStatus),
}

/// A run to write: what it is and its cells, in order.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub kind: String,
    pub command: String,
    pub tags: Vec<String>,
    pub path: Path,
    pub cells: Vec<StoredCell>,
    /// Where the run ran: None on the host, or a QEMU guest.
    pub guest: Option<Guest>,
}

impl RunSpec {
    /// The host record the run is written with.
    pub fn host(&self) -> Host {
        Host {
            guest: self.guest.clone(),
            ..host()
        }
    }
}

/// Where a run ran: mostly the host, else a TCG guest (instructions) or a
/// KVM one (time), with sources as users give them.
fn guest() -> impl Strategy<Value = Option<Guest>> {
    prop_oneof![
        3 => Just(None),
        2 => (select(vec![Accel::Tcg, Accel::Kvm]), text(), text(), "[0-9a-f]{64}")
            .prop_map(|(accel, qemu, source, sha)| Some(Guest::new(accel, &qemu, &source, &sha))),
    ]
}

fn status() -> impl Strategy<Value = RunStatus> {
    select(vec![
        RunStatus::Complete,
        RunStatus::Interrupted,
        RunStatus::Failed,
        RunStatus::Running,
    ])
}

/// Any run: measured cells, model cells, both or none.
pub fn run_spec() -> impl Strategy<Value = RunSpec> {
    let cell = prop_oneof![
        3 => kernel_cell().prop_map(StoredCell::Kernel),
        1 => model_cell().prop_map(StoredCell::Model),
    ];
    (
        select(vec!["bench", "sweep", "model", "crosscheck", "reproduce"]),
        text(),
        vec("[a-z][a-z0-9.-]{0,8}", 0..3),
        prop_oneof![
            status().prop_map(Path::Session),
            status().prop_map(Path::Import)
        ],
        vec(cell, 0..7),
        guest(),
    )
        .prop_map(|(kind, command, tags, path, cells, guest)| RunSpec {
            kind: kind.into(),
            command,
            tags,
            path,
            cells,
            guest,
        })
}

/// Write `spec` to `store`; returns the run's id.
pub fn write(store: &Store, spec: &RunSpec) -> anyhow::Result<RunId> {
    match spec.path {
        Path::Session(status) => {
            let run = store.begin_run(&spec.kind, &spec.command, &spec.host(), &spec.tags)?;
            for c in &spec.cells {
                match c {
                    StoredCell::Kernel(k) => store.insert_cell(run, k)?,
                    StoredCell::Model(m) => store.insert_model_cell(run, m)?,
                };
            }
            if status != RunStatus::Running {
                store.finish_run(run, status)?;
            }
            Ok(run)
        }
        Path::Import(status) => {
            let doc = StoredRun {
                schema: RUN_SCHEMA.into(),
                run: super::RunSummary {
                    id: 77,
                    kind: spec.kind.clone(),
                    command: spec.command.clone(),
                    started_at: "2026-05-01T10:00:00Z".into(),
                    finished_at: (status != RunStatus::Running)
                        .then(|| "2026-05-01T10:05:00Z".into()),
                    status,
                    kernel_release: String::new(),
                    arch: String::new(),
                    machine_id: String::new(),
                    tool_version: String::new(),
                    git_revision: None,
                    tags: spec.tags.clone(),
                    cells: spec.cells.len() as u64,
                    guest: spec.guest.clone(),
                },
                host: serde_json::to_value(spec.host())?,
                cells: spec.cells.clone(),
            };
            // As `runs --import` reads it: from the JSON text.
            let doc: StoredRun = serde_json::from_str(&serde_json::to_string(&doc)?)?;
            store.import_run(&doc)
        }
    }
}

/// Equal to the bit, NaN equal to NaN (`Debug` prints the shortest text that
/// reads back as the same `f64`).
pub(crate) fn same<T: std::fmt::Debug>(a: &T, b: &T) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// Check that `got` is `spec` read back.
pub fn check(spec: &RunSpec, got: &StoredRun) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.cells.len(), spec.cells.len());
    for (i, (want, got)) in spec.cells.iter().zip(&got.cells).enumerate() {
        prop_assert!(same(want, got), "cell {}:\n {:?}\n {:?}", i, want, got);
    }
    let r = &got.run;
    prop_assert_eq!(&r.kind, &spec.kind);
    prop_assert_eq!(&r.command, &spec.command);
    let mut tags = spec.tags.clone();
    tags.sort();
    tags.dedup();
    prop_assert_eq!(&r.tags, &tags);
    prop_assert_eq!(r.cells, spec.cells.len() as u64);
    let (written, effective) = match spec.path {
        // This process still owns a run it never finished.
        Path::Session(s) => (s, s),
        // An imported run left running has no owner any more.
        Path::Import(RunStatus::Running) => (RunStatus::Running, RunStatus::Interrupted),
        Path::Import(s) => (s, s),
    };
    prop_assert_eq!(r.status, effective);
    prop_assert_eq!(r.finished_at.is_some(), written != RunStatus::Running);
    prop_assert_eq!(got.host().ok(), Some(spec.host()));
    prop_assert_eq!(&r.guest, &spec.guest);
    prop_assert_eq!(r.metric(), spec.host().metric());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn every_run_reads_back_equal(spec in run_spec()) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("t.db")).unwrap();
        let id = write(&store, &spec).unwrap();
        let got = store.load(id).unwrap();
        check(&spec, &got)?;
        // The run document (`show --json`) reads back as the same run.
        let text = serde_json::to_string_pretty(&got).unwrap();
        let doc: StoredRun = serde_json::from_str(&text).unwrap();
        prop_assert!(same(&doc, &got), "document:\n{}", text);
    }
}

#[test]
fn the_generators_reach_every_edge() {
    // The property above is only as good as what it is fed: a fixed
    // sample of 512 runs holds every edge case the issue names.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let specs: Vec<RunSpec> = (0..CASES)
        .map(|_| run_spec().new_tree(&mut runner).unwrap().current())
        .collect();
    let kernel: Vec<&CellResult> = specs
        .iter()
        .flat_map(|s| &s.cells)
        .filter_map(StoredCell::kernel)
        .collect();
    let n = |f: &dyn Fn(&CellResult) -> bool| kernel.iter().filter(|c| f(c)).count();
    let edges: BTreeMap<&str, usize> = BTreeMap::from([
        ("no samples", n(&|c| c.ns_per_call.samples.is_empty())),
        ("one sample", n(&|c| c.ns_per_call.samples.len() == 1)),
        ("undefined CI", n(&|c| c.ns_per_call.ci_low.is_nan())),
        ("zero flushes", n(&|c| c.tlb_flushes.per_call == Some(0.0))),
        (
            "flushes unavailable",
            n(&|c| c.tlb_flushes.per_call.is_none()),
        ),
        ("mismatched layout", n(&|c| !c.layout.matches)),
        (
            "instruction runs",
            specs
                .iter()
                .filter(|s| s.host().metric() == Metric::Instructions)
                .count(),
        ),
        (
            "kvm guest runs",
            specs
                .iter()
                .filter(|s| s.guest.as_ref().is_some_and(|g| g.accel == Accel::Kvm))
                .count(),
        ),
        (
            "model cells",
            specs
                .iter()
                .flat_map(|s| &s.cells)
                .filter(|c| c.model().is_some())
                .count(),
        ),
        (
            "interrupted runs",
            specs
                .iter()
                .filter(|s| {
                    matches!(
                        s.path,
                        Path::Session(RunStatus::Interrupted) | Path::Import(RunStatus::Running)
                    )
                })
                .count(),
        ),
    ]);
    for (edge, count) in &edges {
        assert!(*count > 0, "no {edge} in {CASES} runs: {edges:?}");
    }
    for w in WorkloadKind::ALL {
        assert!(kernel.iter().any(|c| c.workload == w), "{w}");
    }
    for f in FolioSpec::all() {
        assert!(kernel.iter().any(|c| c.folio == f), "{f}");
    }
    for p in PHASES {
        assert!(kernel.iter().any(|c| c.phase.as_deref() == Some(p)), "{p}");
    }
}
