//! Store tests on a temporary database file.

// Helpers for other layers' tests (feature `testing`) beside this layer's
// own tests, which alone use the rest.
#![cfg_attr(not(test), allow(dead_code, unused_imports))]

use std::collections::BTreeMap;

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::*;
use crate::record::fixtures::fixture;
use crate::record::{NsPerCall, TlbFlushes};
use crate::workload::{FolioSpec, WorkloadKind};

pub fn host() -> Host {
    Host {
        kernel_release: "6.18.0-test".into(),
        kernel_version: "#1 SMP".into(),
        kernel_cmdline: "quiet".into(),
        arch: "x86_64".into(),
        page_size: 4096,
        cpu_model: "Test CPU".into(),
        cores: 2,
        mem_total_bytes: 1 << 34,
        mem_available_bytes: 1 << 33,
        is_root: true,
        paravirt: None,
        thp_knobs: BTreeMap::from([("enabled".into(), "madvise".into())]),
        machine_id: "0123456789abcdef0123456789abcdef".into(),
        tool_version: "0.1.0".into(),
        git_revision: Some("abc1234".into()),
        guest: None,
    }
}

/// The renderers' fixture cell with a phase, samples that differ, flushes
/// with a breakdown and a warning.
pub fn cell(size_kib: u64, folio: FolioSpec, median: f64) -> CellResult {
    CellResult {
        phase: Some("none-to-rw".into()),
        ns_per_call: NsPerCall {
            median,
            ci_low: median * 0.99,
            ci_high: median * 1.01,
            min: median * 0.97,
            mean: median * 1.001,
            samples: (0..12).map(|i| median + i as f64).collect(),
        },
        calls: 1200,
        tlb_flushes: TlbFlushes {
            per_call: Some(1.0),
            events: 64,
            calls: 64,
            breakdown: BTreeMap::from([("0/all".into(), 4), ("1/16".into(), 60)]),
            unavailable: None,
        },
        elapsed_s: 0.5,
        warnings: vec!["budget spent".into()],
        ..fixture(size_kib, median, folio)
    }
}

fn model_cell() -> ModelCellRecord {
    ModelCellRecord {
        workload: WorkloadKind::MprotectToggle,
        size_bytes: 64 << 10,
        folio: FolioSpec::Mthp(64 << 10),
        arch: "arm64".into(),
        strategy: "batched".into(),
        params: serde_json::json!({"contpte": true}),
        counters: BTreeMap::from([("ptep_get".into(), 16.0), ("tlbi".into(), 1.0)]),
    }
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    (dir, path)
}

#[test]
fn round_trips_cells_host_and_tags() {
    let (_d, path) = temp();
    let store = Store::open(&path).unwrap();
    let tags = vec!["v6.18".to_string(), "baseline".to_string()];
    let run = store
        .begin_run("sweep", "ptelab sweep mprotect-toggle", &host(), &tags)
        .unwrap();
    let a = cell(4, FolioSpec::Base, 1713.0);
    let b = cell(400, FolioSpec::Mthp(64 << 10), 3453.5);
    store.insert_cell(run, &a).unwrap();
    store.insert_cell(run, &b).unwrap();
    store.insert_model_cell(run, &model_cell()).unwrap();
    store.finish_run(run, RunStatus::Complete).unwrap();

    let loaded = store.load_run(&run.to_string()).unwrap();
    assert_eq!(loaded.schema, RUN_SCHEMA);
    assert_eq!(
        loaded.cells,
        vec![
            StoredCell::Kernel(a),
            StoredCell::Kernel(b),
            StoredCell::Model(model_cell())
        ]
    );
    assert_eq!(loaded.host().unwrap(), host());
    let s = &loaded.run;
    assert_eq!(s.status, RunStatus::Complete);
    assert!(s.finished_at.is_some());
    assert_eq!(s.tags, vec!["baseline".to_string(), "v6.18".to_string()]);
    assert_eq!((s.kernel_release.as_str(), s.cells), ("6.18.0-test", 3));
    assert_eq!(s.git_revision.as_deref(), Some("abc1234"));
    // The samples live in their own table, not in the JSON.
    let json: String = store
        .conn()
        .query_row("SELECT cell_json FROM cell LIMIT 1", [], |r| r.get(0))
        .unwrap();
    assert!(json.contains("\"samples\":[]"), "{json}");
    let n: i64 = store
        .conn()
        .query_row("SELECT COUNT(*) FROM sample", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 24);
}

#[test]
fn json_document_round_trips_through_import() {
    let (_d, path) = temp();
    let store = Store::open(&path).unwrap();
    let run = store
        .begin_run("bench", "ptelab bench", &host(), &["x".into()])
        .unwrap();
    store
        .insert_cell(run, &cell(40, FolioSpec::Base, 2071.0))
        .unwrap();
    store.finish_run(run, RunStatus::Complete).unwrap();
    let doc = store.load(run).unwrap();
    let text = serde_json::to_string(&doc).unwrap();
    let back: StoredRun = serde_json::from_str(&text).unwrap();
    let id = store.import_run(&back).unwrap();
    let again = store.load(id).unwrap();
    assert_eq!(again.cells, doc.cells);
    assert_eq!(again.run.started_at, doc.run.started_at);
    assert_eq!(again.run.tags, doc.run.tags);
    assert_eq!(
        store.resolve("x").unwrap(),
        id,
        "a tag names its newest run"
    );
}

#[test]
fn resolves_ids_latest_and_tags() {
    let (_d, path) = temp();
    let store = Store::open(&path).unwrap();
    let r1 = store
        .begin_run("bench", "1", &host(), &["base".into()])
        .unwrap();
    let r2 = store
        .begin_run("bench", "2", &host(), &["base".into(), "new".into()])
        .unwrap();
    let r3 = store.begin_run("bench", "3", &host(), &[]).unwrap();
    assert_eq!(store.resolve("latest").unwrap(), r3);
    assert_eq!(store.resolve("latest~1").unwrap(), r2);
    assert_eq!(store.resolve("latest~2").unwrap(), r1);
    assert_eq!(store.resolve(&r1.to_string()).unwrap(), r1);
    assert_eq!(store.resolve("base").unwrap(), r2);
    assert_eq!(store.resolve("new").unwrap(), r2);
    for bad in ["latest~3", "nope", "99", "latest~x"] {
        let err = store.resolve(bad).unwrap_err();
        assert!(crate::error::is_usage(&err), "{bad}: {err:#}");
        assert!(err.to_string().contains("latest~N"), "{err}");
    }
}

#[test]
fn each_cell_is_its_own_transaction() {
    // A second connection sees every finished cell of a run that never
    // finishes, as a reader would after the writer was SIGKILLed.
    let (_d, path) = temp();
    let writer = Store::open(&path).unwrap();
    let run = writer
        .begin_run("sweep", "ptelab sweep", &host(), &[])
        .unwrap();
    writer
        .insert_cell(run, &cell(4, FolioSpec::Base, 100.0))
        .unwrap();
    let reader = Store::open(&path).unwrap();
    assert_eq!(reader.load(run).unwrap().cells.len(), 1);
    writer
        .insert_cell(run, &cell(40, FolioSpec::Base, 200.0))
        .unwrap();
    assert_eq!(reader.load(run).unwrap().cells.len(), 2);
    // A failing cell insert (here: a size no SQLite integer holds) leaves nothing behind.
    let mut huge = cell(4, FolioSpec::Base, 1.0);
    huge.size_bytes = u64::MAX;
    let err = writer.insert_cell(run, &huge).unwrap_err();
    assert!(
        format!("{err:#}").contains(&path.display().to_string()),
        "{err:#}"
    );
    assert_eq!(reader.load(run).unwrap().cells.len(), 2);
    let n: i64 = reader
        .conn()
        .query_row("SELECT COUNT(*) FROM sample", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 24);
}

#[test]
fn reopen_after_an_unfinished_run() {
    let (_d, path) = temp();
    let run = {
        let store = Store::open(&path).unwrap();
        let run = store
            .begin_run("sweep", "ptelab sweep", &host(), &[])
            .unwrap();
        store
            .insert_cell(run, &cell(4, FolioSpec::Base, 100.0))
            .unwrap();
        // This process still owns the run.
        assert_eq!(store.runs().unwrap()[0].status, RunStatus::Running);
        run
    };
    let store = Store::open(&path).unwrap();
    // Pretend the owner died: a pid that does not exist.
    store
        .conn()
        .execute("UPDATE run SET pid = 999999999 WHERE id = ?1", [run])
        .unwrap();
    let runs = store.runs().unwrap();
    assert_eq!(runs[0].status, RunStatus::Interrupted);
    assert_eq!(runs[0].cells, 1);
    assert!(runs[0].finished_at.is_none());
    // The database stays writable: a new run goes in after it.
    let next = store.begin_run("sweep", "again", &host(), &[]).unwrap();
    assert!(next > run);
}

#[test]
fn concurrent_writers_both_succeed() {
    let (_d, path) = temp();
    Store::open(&path).unwrap();
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let store = Store::open(&path).unwrap();
                let run = store
                    .begin_run("sweep", &format!("writer {t}"), &host(), &[])
                    .unwrap();
                for i in 0..40 {
                    store
                        .insert_cell(run, &cell(4 * (i + 1), FolioSpec::Base, 100.0 + i as f64))
                        .unwrap();
                }
                store.finish_run(run, RunStatus::Complete).unwrap();
                run
            })
        })
        .collect();
    let runs: Vec<RunId> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let store = Store::open(&path).unwrap();
    for run in runs {
        let r = store.load(run).unwrap();
        assert_eq!(r.cells.len(), 40);
        assert_eq!(r.run.status, RunStatus::Complete);
    }
    let check: String = store
        .conn()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

#[test]
fn concurrent_first_opens_migrate_once() {
    let (_d, path) = temp();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || Store::open(&path).map(|_| ()).map_err(|e| format!("{e:#}")))
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let v: i64 = store
        .conn()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, MIGRATIONS.len() as i64);
    let mode: String = store
        .conn()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn refuses_a_newer_schema_and_names_the_path() {
    let (_d, path) = temp();
    {
        let store = Store::open(&path).unwrap();
        store
            .conn()
            .pragma_update(None, "user_version", 99)
            .unwrap();
    }
    let err = Store::open(&path).err().unwrap();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("schema version 99") && msg.contains(&path.display().to_string()),
        "{msg}"
    );
    assert!(crate::error::is_usage(&err), "{msg}");
}

/// `Store::open` refuses `path` as bad input naming it, and leaves the file
/// as it was.
fn refused(path: &Path, says: &str) {
    let before = std::fs::read(path).unwrap();
    let err = Store::open(path).err().unwrap();
    let msg = format!("{err:#}");
    assert!(crate::error::is_usage(&err), "{msg}");
    for part in [
        &path.display().to_string(),
        "is not a ptelab results database",
        says,
        "--db",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    assert_eq!(std::fs::read(path).unwrap(), before, "the file was changed");
}

#[test]
fn refuses_a_file_that_is_not_a_database() {
    let (_d, path) = temp();
    std::fs::write(&path, "garbage\n").unwrap();
    refused(&path, "SQLite cannot read it");
}

#[test]
fn refuses_another_applications_database() {
    let (_d, path) = temp();
    let other = Connection::open(&path).unwrap();
    other
        .execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);")
        .unwrap();
    drop(other);
    refused(&path, "another application's tables: notes");
    // Tables named like ours do not make it ours under another application id.
    let other = Connection::open(&path).unwrap();
    other
        .execute_batch("CREATE TABLE run (id); CREATE TABLE cell (id); PRAGMA application_id = 7;")
        .unwrap();
    drop(other);
    refused(&path, "application id 0x7");
}

#[test]
fn a_database_from_before_the_application_id_opens_and_is_stamped() {
    let (_d, path) = temp();
    let run = {
        let store = Store::open(&path).unwrap();
        let run = store.begin_run("bench", "old", &host(), &[]).unwrap();
        store
            .conn()
            .pragma_update(None, "application_id", 0)
            .unwrap();
        run
    };
    let store = Store::open(&path).unwrap();
    assert_eq!(store.load(run).unwrap().run.command, "old");
    let app: i64 = store
        .conn()
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(app, APPLICATION_ID);
}

#[test]
fn identity_reads_header_and_tables() {
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(identity(0, 0, &[]), Identity::Fresh);
    assert_eq!(
        identity(APPLICATION_ID, 2, &names(&["run"])),
        Identity::Ours
    );
    assert_eq!(
        identity(0, 2, &names(&["cell", "flush", "run"])),
        Identity::Ours
    );
    for (app, version, tables) in [
        (0, 0, names(&["run", "cell"])),
        (0, 3, names(&["notes"])),
        (0, 1, names(&[])),
        (42, 0, names(&[])),
    ] {
        assert!(
            matches!(identity(app, version, &tables), Identity::Foreign(_)),
            "{app} {version} {tables:?}"
        );
    }
    let many = names(&["a", "b", "c", "d", "e", "f"]);
    assert_eq!(
        identity(0, 0, &many),
        Identity::Foreign("it holds another application's tables: a, b, c, d, e, ...".into())
    );
}

#[test]
fn open_existing_refuses_a_missing_file() {
    let (_d, path) = temp();
    let err = Store::open_existing(&path).err().unwrap();
    assert!(crate::error::is_usage(&err));
    assert!(!path.exists());
}

#[test]
fn undefined_figures_read_back_as_undefined() {
    // One sample (an `--iters` run) has no interval; no sample, no median.
    let (_d, path) = temp();
    let store = Store::open(&path).unwrap();
    let run = store
        .begin_run("bench", "ptelab bench", &host(), &[])
        .unwrap();
    let mut one = cell(40, FolioSpec::Base, 1706.0);
    // As the runner's summary gives them.
    one.ns_per_call = NsPerCall {
        median: 1706.0,
        ci_low: f64::NAN,
        ci_high: f64::NAN,
        min: 1706.0,
        mean: 1706.0,
        samples: vec![1706.0],
    };
    let mut none = cell(80, FolioSpec::Base, 1.0);
    none.ns_per_call = NsPerCall {
        median: f64::NAN,
        ci_low: f64::NAN,
        ci_high: f64::NAN,
        min: f64::NAN,
        mean: f64::NAN,
        samples: vec![],
    };
    none.ns_per_page = f64::NAN;
    none.probe_ns = vec![120.0, f64::NAN];
    store.insert_cell(run, &one).unwrap();
    store.insert_cell(run, &none).unwrap();
    let loaded = store.load(run).unwrap();
    let back: Vec<&CellResult> = loaded.kernel_cells().collect();
    let ns = &back[0].ns_per_call;
    assert_eq!((ns.median, ns.samples.len()), (1706.0, 1));
    assert!(ns.ci_low.is_nan() && ns.ci_high.is_nan());
    let ns = &back[1].ns_per_call;
    assert!(ns.median.is_nan() && ns.min.is_nan() && ns.mean.is_nan() && ns.samples.is_empty());
    assert!(back[1].ns_per_page.is_nan() && back[1].probe_ns[1].is_nan());
    // In the run document (`show --json`) undefined is null, and reads back.
    let doc = serde_json::to_value(&loaded).unwrap();
    assert!(doc["cells"][0]["cell"]["ns_per_call"]["ci_low"].is_null());
    let again: StoredRun = serde_json::from_value(doc).unwrap();
    assert!(again
        .kernel_cells()
        .next()
        .unwrap()
        .ns_per_call
        .ci_high
        .is_nan());
}

#[test]
fn a_guest_run_keeps_its_provenance_and_a_bad_one_is_refused() {
    use crate::record::{Accel, Guest, Metric};
    let (_d, path) = temp();
    let store = Store::open(&path).unwrap();
    let guest = Guest::new(
        Accel::Tcg,
        "QEMU emulator version 10.0.2",
        "debian:6.17.13 linux-image-6.17.13+deb13-cloud-amd64 6.17.13-1",
        &"ab".repeat(32),
    );
    let h = Host {
        guest: Some(guest.clone()),
        ..host()
    };
    let run = store.begin_run("bench", "ptelab vm", &h, &[]).unwrap();
    store.finish_run(run, RunStatus::Complete).unwrap();
    let doc = store.load(run).unwrap();
    assert_eq!(doc.run.guest.as_ref(), Some(&guest));
    assert_eq!(doc.run.metric(), Metric::Instructions);
    assert_eq!(doc.host().unwrap(), h);
    assert_eq!(store.runs().unwrap()[0].place(), "tcg guest x86_64");

    // A document whose host says one thing and summary another, or whose
    // guest record has an unknown shape, is not imported half-read.
    let mut lying = doc.clone();
    lying.run.guest = None;
    let err = store.import_run(&lying).unwrap_err();
    assert!(err.to_string().contains("disagree"), "{err}");
    let mut bad = doc.clone();
    bad.host["guest"]["metric"] = "cycles".into();
    assert!(store.import_run(&bad).is_err());
    assert_eq!(store.runs().unwrap().len(), 1);
}

/// A guest bias as `calibrate --guest` stores it.
pub fn guest_bias(release: &str, size_kib: u64, spread: f64) -> super::GuestBias {
    use crate::workload::{Arch, WorkloadKind};
    // Their range (max / min - 1) is `spread`.
    let figures = [
        1000.0,
        1000.0 * (1.0 + spread),
        1000.0 * (1.0 + spread / 2.0),
    ];
    super::GuestBias {
        id: None,
        kernel: format!("debian:{}", release.split('+').next().unwrap_or(release)),
        release: release.into(),
        arch: Arch::X86_64,
        workload: WorkloadKind::MprotectToggle,
        size_bytes: size_kib << 10,
        folio: FolioSpec::Base,
        phase: None,
        measured_at: "2026-11-25T23:30:00Z".into(),
        command: format!("bench mprotect-toggle --size {size_kib}K --folio 4K"),
        metric: "instructions".into(),
        qemu_version: "QEMU emulator version 7.2.19".into(),
        spread: ptelab_stats::bias::spread(&figures).unwrap(),
        boots: (0..3)
            .map(|i| super::BiasBoot {
                seed: i + 1,
                cmdline_pad: i as usize * 47,
                env_pad: i as usize * 389,
                median: figures[i as usize],
                run_id: Some(i as i64 + 10),
            })
            .collect(),
    }
}

#[test]
fn guest_biases_round_trip() {
    let (_d, path) = temp();
    let store = Store::open(&path).unwrap();
    assert!(store.guest_biases().unwrap().is_empty());
    let mut a = guest_bias("6.17.8+deb13-cloud-amd64", 400, 0.0066);
    let mut b = guest_bias("6.17.8+deb13-cloud-amd64", 4, 0.017);
    b.phase = Some("none-to-rw".into());
    a.id = Some(store.insert_guest_bias(&a).unwrap());
    b.id = Some(store.insert_guest_bias(&b).unwrap());
    assert_eq!(store.guest_biases().unwrap(), vec![a, b]);
}

#[test]
fn a_database_of_schema_3_migrates_and_keeps_its_runs() {
    let (_d, path) = temp();
    {
        // Written as a ptelab of schema version 3 wrote it.
        let conn = rusqlite::Connection::open(&path).unwrap();
        for sql in &MIGRATIONS[..3] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        conn.execute(
            "INSERT INTO calibration (machine_id, kernel_release, measured_at, adjusted, raw, \
             calibration_json) VALUES ('m', '6.18', '2026-11-23', 0.05, 0.07, '{}')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    let v: i64 = store
        .conn()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, MIGRATIONS.len() as i64);
    let n: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM calibration", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    assert!(store.guest_biases().unwrap().is_empty());
    store
        .insert_guest_bias(&guest_bias("6.16.12+deb13-cloud-amd64", 40, 0.001))
        .unwrap();
    assert_eq!(store.guest_biases().unwrap().len(), 1);
}

#[test]
fn stored_command_lines_never_hold_a_password() {
    let (_d, path) = temp();
    let secret = "ptelab sweep x --db postgres://lab:s3cret@db.example/p?password=pw2";
    {
        // Written as a ptelab of schema version 4 wrote it: the password in
        // plain text.
        let conn = rusqlite::Connection::open(&path).unwrap();
        for sql in &MIGRATIONS[..4] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 4).unwrap();
        conn.execute(
            "INSERT INTO run (kind, command, started_at, status, host_json, kernel_release, \
             arch, machine_id, tool_version) VALUES ('sweep', ?1, '2026-11-23T00:00:00Z', \
             'complete', '{}', '6.18', 'x86_64', 'm', '0')",
            [secret],
        )
        .unwrap();
    }
    // Migration 5 masks the old run; a new run is stored masked.
    let store = Store::open(&path).unwrap();
    store.begin_run("bench", secret, &host(), &[]).unwrap();
    let runs = store.runs().unwrap();
    assert_eq!(runs.len(), 2);
    for r in &runs {
        assert_eq!(
            r.command,
            "ptelab sweep x --db postgres://lab:***@db.example/p?password=***"
        );
    }
    drop(store);
    let raw = std::fs::read(&path).unwrap();
    assert!(!raw.windows(6).any(|w| w == b"s3cret"), "left in the file");
}
