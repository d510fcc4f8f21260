//! `ptelab vm --executor slurm` against a real single-node Slurm and a real
//! PostgreSQL on localhost (`common::testcluster`, `common::testserver`),
//! both stopped and removed after each test, also on failure.
//!
//! The cheap tests boot no guest: their tasks fail before booting, or are
//! held in the queue. The end-to-end ones boot Debian's kernels under TCG,
//! through Slurm and locally, and compare figures and verdicts (exact under
//! TCG); they skip, saying why, where the kernels are not cached.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::testcluster::TestSlurm;
use crate::common::testserver::TestServer;
use crate::common::{assert_success, ptelab, ptelab_std, TempDb};

/// ptelab pointed at `slurm`, with its batches under `cache`.
fn with_cluster(slurm: &TestSlurm, cache: &std::path::Path) -> assert_cmd::Command {
    let mut cmd = ptelab();
    for (k, v) in slurm.env() {
        cmd.env(k, v);
    }
    cmd.env("XDG_CACHE_HOME", cache);
    cmd
}

#[test]
fn slurm_needs_a_shared_database_and_its_flags_need_slurm() {
    let db = TempDb::new();
    ptelab()
        .args([
            "vm",
            "--executor",
            "slurm",
            "--kernel",
            "debian:6.17.13",
            "--db",
            db.path(),
        ])
        .args(["--", "bench", "mprotect-toggle", "--size", "64K"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "--executor slurm reads each task's run back from a database every node reaches",
        ));
    for flag in [
        &["--partition", "p"][..],
        &["--time", "30"],
        &["--resume"],
        &["--sbatch=--qos=x"],
    ] {
        ptelab()
            .args(["vm", "--kernel", "debian:6.17.13"])
            .args(flag)
            .args(["--", "doctor"])
            .assert()
            .code(2)
            .stderr(predicates::str::contains("goes with --executor slurm"));
    }
    ptelab()
        .args([
            "vm",
            "--executor",
            "slurm",
            "--time",
            "1h",
            "--kernel",
            "debian:6.17.13",
        ])
        .args(["--", "doctor"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("a Slurm time limit"));
}

#[test]
fn failed_tasks_are_reported_with_their_logs_and_resume_submits_only_those() {
    let Some(server) = TestServer::start_or_skip("failed_tasks_are_reported") else {
        return;
    };
    let Some(slurm) = TestSlurm::start_or_skip("failed_tasks_are_reported") else {
        return;
    };
    let pg = server.create_database("failed");
    let cache = tempfile::tempdir().unwrap();
    // Images that are not kernels: each task fails as it resolves its
    // kernel, before any boot.
    let bad = cache.path().join("notakernel");
    std::fs::write(&bad, "garbage").unwrap();
    let bad = bad.display().to_string();
    let args = [
        "vm",
        "--executor",
        "slurm",
        "--kernel",
        &bad,
        "--kernel",
        &bad,
        "--arch",
        "x86_64",
        "--db",
        &pg,
        "--",
        "bench",
        "mprotect-toggle",
        "--size",
        "64K",
    ];
    let out = with_cluster(&slurm, cache.path())
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("submitted Slurm job"), "{err}");
    for i in 0..2 {
        assert!(
            err.contains(&format!("task {i} ({bad} mprotect-toggle) failed: FAILED")),
            "{err}"
        );
    }
    // The task's own error, from its log.
    assert!(err.contains("  | ptelab: error: "), "{err}");
    assert!(err.contains("2 of 2 tasks failed in Slurm job"), "{err}");
    assert!(err.contains("--resume submits only those"), "{err}");
    // The failed batch stays, for its logs and --resume, and says where.
    let kept = batch_dirs(&err);
    assert!(
        kept.len() == 1 && kept[0].is_dir() && err.contains(" kept in "),
        "{err}"
    );
    // The password never shows, and no task's command line holds it.
    assert!(!err.contains(crate::common::testserver::PASSWORD), "{err}");
    let script = std::fs::read_dir(cache.path().join("ptelab/slurm"))
        .unwrap()
        .map(|e| e.unwrap().path().join("job.sh"))
        .next()
        .unwrap();
    let script = std::fs::read_to_string(script).unwrap();
    assert!(
        script.contains("--tag slurm-") && !script.contains("postgres://"),
        "{script}"
    );

    let out = with_cluster(&slurm, cache.path())
        .args(&args[..3])
        .arg("--resume")
        .args(&args[3..])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("2 of 2 tasks to run again"), "{err}");
    // Nothing was stored.
    let runs: Value = serde_json::from_slice(
        &ptelab()
            .args(["runs", "--json", "--db", &pg])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(0), "{runs}");
}

#[test]
fn sigint_cancels_the_array_and_leaves_nothing_queued() {
    let Some(slurm) = TestSlurm::start_or_skip("sigint_cancels_the_array") else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    // Held tasks never start: no guest boots.
    let mut child = ptelab_std()
        .envs(slurm.env())
        .env("XDG_CACHE_HOME", cache.path())
        .args(["vm", "--executor", "slurm", "--sbatch=--hold"])
        .args(["--kernel", "debian:6.16.12,debian:6.17.13", "--", "doctor"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut job = None;
    let start = Instant::now();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("ptelab: submitted Slurm job ") {
            job = rest.split(':').next().map(str::to_string);
        }
        if line.contains("2 pending") || start.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    let job = job.expect("the array was submitted");
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(!status.success());
    let rest = rest.join("\n");
    assert!(
        rest.contains(&format!("cancelling Slurm job {job}")),
        "{rest}"
    );
    assert!(rest.contains("nothing of it is left queued"), "{rest}");
    let out = slurm
        .command("squeue")
        .args(["-h", "-r", "-t", "PENDING,RUNNING", "-o", "%i", "-j", &job])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "",
        "left queued"
    );
}

/// The batch directories a submitting ptelab named on `stderr` ("logs in
/// DIR").
fn batch_dirs(stderr: &str) -> Vec<std::path::PathBuf> {
    stderr
        .lines()
        .filter_map(|l| l.split_once(", logs in ").map(|(_, d)| d.into()))
        .collect()
}

/// Assert that every batch of a successful run was removed once read back.
fn assert_no_batch_left(stderr: &str) {
    let dirs = batch_dirs(stderr);
    assert!(!dirs.is_empty(), "{stderr}");
    for d in dirs {
        assert!(!d.exists(), "{} left behind\n{stderr}", d.display());
    }
}

/// A `vm --json` document less what differs from run to run: run ids, log
/// paths, boot times, and the figures (compared on their own, within
/// TCG's repeatability).
fn vm_shape(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !["run_id", "log", "boot_to_exit_s"].contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), vm_shape(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(vm_shape).collect()),
        Value::Number(_) => Value::from(0),
        other => other.clone(),
    }
}

/// The runs of `db` as `show --json` documents, by kernel tag.
fn cells_by_kernel(db: &str, kernels: &[&str]) -> Vec<Vec<f64>> {
    kernels
        .iter()
        .map(|k| {
            let out = ptelab()
                .args(["show", k, "--json", "--db", db])
                .output()
                .unwrap();
            assert_success(&out);
            let run: Value = serde_json::from_slice(&out.stdout).unwrap();
            run["cells"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["cell"]["per_call"]["median"].as_f64().unwrap())
                .collect()
        })
        .collect()
}

/// The kernels the end-to-end tests boot.
const KERNELS: [&str; 2] = ["debian:6.16.12", "debian:6.17.13"];

/// Seed 001's pair, as the reproduce test boots it: the release before its
/// change and the first Debian build after it.
const SEED_001_KERNELS: [&str; 2] = ["debian:6.16.12", "debian:6.17.8"];

/// What an end-to-end test needs: the kernels cached, a PostgreSQL server
/// (kept alive by the first field) with database `db`, a single-node Slurm
/// and a local database to compare with; None, having said why, when one is
/// missing.
fn end_to_end(test: &str, db: &str) -> Option<(TestServer, TestSlurm, String, TempDb)> {
    for k in KERNELS.iter().chain(&SEED_001_KERNELS) {
        crate::common::cached_x86_image(k.trim_start_matches("debian:"))?;
    }
    let server = TestServer::start_or_skip(test)?;
    let slurm = TestSlurm::start_or_skip(test)?;
    let pg = server.create_database(db);
    Some((server, slurm, pg, TempDb::new()))
}

#[test]
fn guests_through_slurm_measure_what_local_guests_measure() {
    let Some((_server, slurm, pg, local)) = end_to_end("guests_through_slurm", "guests") else {
        return;
    };
    // Two commands in one boot of each kernel: a task stores a run for each.
    let command = [
        "--",
        "sweep",
        "mprotect-toggle",
        "--sizes",
        "400K",
        "--folios",
        "4K,64K",
        "--then",
        "bench",
        "prot-transition",
        "--size",
        "4K",
        "--blocks",
        "1",
    ];
    let kernels = KERNELS.join(",");
    let common = [
        "vm", "--kernel", &kernels, "--arch", "x86_64", "--accel", "tcg",
    ];
    let out = ptelab()
        .args(common)
        .args(["--jobs", "2", "--json", "--db", local.path()])
        .args(command)
        .timeout(Duration::from_secs(1200))
        .output()
        .unwrap();
    assert_success(&out);
    let here: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The shared cache is the one the kernels are in.
    let list: Value = serde_json::from_slice(
        &ptelab()
            .args(["kernel", "list", "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let image = list[0]["image"].as_str().unwrap().to_string();
    let root = std::path::Path::new(&image)
        .ancestors()
        .find(|p| p.ends_with("kernels"))
        .and_then(|p| p.parent())
        .unwrap()
        .to_path_buf();
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("ptelab"));
    cmd.envs(slurm.env())
        .args(common)
        .args(["--executor", "slurm", "--time", "30", "--json", "--cache"])
        .arg(&root)
        .args(["--db", &pg])
        .args(command);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let there: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The document of a local vm: every field, every string the same.
    assert_eq!(
        vm_shape(&here),
        vm_shape(&there),
        "local {here}\nslurm {there}"
    );
    assert_eq!(there["guests"].as_array().map(Vec::len), Some(4), "{there}");
    for g in there["guests"].as_array().unwrap() {
        assert!(g["run_id"].is_number(), "{there}");
    }
    assert!(err.contains("mprotect-toggle+prot-transition"), "{err}");
    // Read back in full: the batch's directory is gone.
    assert_no_batch_left(&err);
    let (a, b) = (
        cells_by_kernel(local.path(), &KERNELS),
        cells_by_kernel(&pg, &KERNELS),
    );
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        // TCG with icount: instruction counts repeat to a few parts in 10^5.
        assert!((x - y).abs() <= x * 1e-3, "local {x} vs slurm {y}");
    }
}

#[test]
fn reproduce_on_slurm_needs_kernels_and_a_shared_database() {
    let db = TempDb::new();
    for (args, says) in [
        (
            &[
                "reproduce",
                "001",
                "--executor",
                "slurm",
                "--db",
                "postgres://u@127.0.0.1:1/x",
            ][..],
            "give --kernels too",
        ),
        (
            &[
                "reproduce",
                "001",
                "--executor",
                "slurm",
                "--kernels",
                "debian:6.17.13",
                "--db",
                db.path(),
            ],
            "a database every node reaches",
        ),
        (
            &["reproduce", "001", "--resume"],
            "goes with --executor slurm",
        ),
    ] {
        ptelab()
            .args(args)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(says));
    }
}

/// Every number of `v` (depth first).
fn numbers(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Number(n) => out.extend(n.as_f64()),
        Value::Array(a) => a.iter().for_each(|x| numbers(x, out)),
        Value::Object(o) => o.values().for_each(|x| numbers(x, out)),
        _ => {}
    }
}

#[test]
fn reproduce_through_slurm_gives_the_verdicts_and_figures_of_a_local_run() {
    let Some((_server, slurm, pg, local)) = end_to_end("reproduce_through_slurm", "reproduce")
    else {
        return;
    };
    let kernels = SEED_001_KERNELS.join(",");
    // One task per kernel, as a local run boots each kernel once (a task
    // of several workloads is the vm test's above).
    let common = [
        "reproduce",
        "001",
        "--quick",
        "--kernels",
        &kernels,
        "--arch",
        "x86_64",
        "--accel",
        "tcg",
        "--json",
    ];
    let run = |extra: &[&str], db: &str| -> (Value, String) {
        let report = local.dir().join(format!("r{}.html", extra.len()));
        let out = Command::new(assert_cmd::cargo::cargo_bin("ptelab"))
            .envs(slurm.env())
            .current_dir(local.dir())
            .args(common)
            .args(extra)
            .args(["--db", db, "-o"])
            .arg(&report)
            .output()
            .unwrap();
        assert_success(&out);
        (
            serde_json::from_slice(&out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (here, _) = run(&["--jobs", "2"], local.path());
    let (there, err) = run(&["--executor", "slurm", "--time", "30"], &pg);
    assert_no_batch_left(&err);
    assert!(
        err.contains("submitted Slurm job") && err.contains(": 2 tasks"),
        "{err}"
    );
    for k in SEED_001_KERNELS {
        assert!(
            err.contains(&format!("({k}-x86_64 x86_64 mprotect-toggle)")),
            "one task boots {k}: {err}"
        );
    }
    // The guests' figures: instruction counts under TCG, repeatable to a few
    // parts in 10^5.
    let guests = |doc: &Value| -> Vec<(String, Vec<f64>)> {
        let mut g: Vec<(String, Vec<f64>)> = doc["guests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let mut n = Vec::new();
                for c in r["cells"].as_array().unwrap() {
                    numbers(&c["per_call"]["median"], &mut n);
                }
                (format!("{} {}", r["kernel"], r["workload"]), n)
            })
            .collect();
        g.sort_by(|a, b| a.0.cmp(&b.0));
        g
    };
    let (a, b) = (guests(&here), guests(&there));
    assert_eq!(
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        b.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    assert!(!a.is_empty(), "{here}");
    for ((k, x), (_, y)) in a.iter().zip(&b) {
        assert_eq!(x.len(), y.len(), "{k}");
        for (x, y) in x.iter().zip(y) {
            assert!((x - y).abs() <= x * 1e-3, "{k}: local {x} vs slurm {y}");
        }
    }
    // The claims decided by guest instruction counts get the same verdict.
    let verdicts = |doc: &Value| -> Vec<(String, String)> {
        doc["claims"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["measured"].as_str().is_some_and(|m| m.contains("instr")))
            .map(|c| (c["claim"].to_string(), c["verdict"].to_string()))
            .collect()
    };
    assert_eq!(verdicts(&here), verdicts(&there));
    assert!(
        there["guest_notes"].as_array().unwrap().is_empty(),
        "{there}"
    );
}

#[test]
fn bisect_on_slurm_needs_a_shared_database_and_its_flags_need_slurm() {
    let db = TempDb::new();
    let bisect = [
        "bisect",
        "--good",
        "debian:6.16.12",
        "--bad",
        "debian:6.17.8",
        "--arch",
        "x86_64",
    ];
    let bench = ["--", "bench", "mprotect-toggle", "--size", "400K"];
    for (extra, says) in [
        (
            &["--executor", "slurm", "--db", db.path()][..],
            "reads each step's run back from a database every node reaches",
        ),
        (&["--executor", "slurm", "--no-store"], "and no --no-store"),
        (
            &["--partition", "p"],
            "--partition goes with --executor slurm",
        ),
        (&["--resume"], "--resume goes with --executor slurm"),
    ] {
        ptelab()
            .args(bisect)
            .args(extra)
            .args(bench)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(says));
    }
    // A tree's images are built here: the nodes read them from --cache.
    let tree = tempfile::tempdir().unwrap();
    ptelab()
        .args(["bisect", "--repo"])
        .arg(tree.path())
        .args(["--good", "a", "--bad", "b", "--executor", "slurm"])
        .args(["--db", "postgres://lab@localhost/x"])
        .args(bench)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("pass --cache DIR"));
}

/// The bisect's state file, removed when dropped, so that the next run
/// (local or through Slurm) measures again.
struct BisectState(std::path::PathBuf);

impl BisectState {
    fn of(root: &std::path::Path, doc: &Value) -> BisectState {
        let id = doc["bisect"]["id"].as_str().unwrap();
        BisectState(root.join("bisect/state").join(format!("{id}.json")))
    }
}

impl Drop for BisectState {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Seed 001's folio lookup bisected by its mechanism, locally and through
/// Slurm and PostgreSQL: the endpoints go as one job array of two tasks,
/// and the report (first bad, figures, verdicts) is the local one. Debian
/// offers nothing between 6.16.12 and 6.17.8, so there is no step after
/// the endpoints. Run again with `--resume`, the bisect takes every figure
/// from its state file and submits nothing.
#[test]
fn a_bisect_through_slurm_finds_what_a_local_bisect_finds() {
    let Some((_server, slurm, pg, local)) = end_to_end("bisect_through_slurm", "bisect") else {
        return;
    };
    let Some(image) = crate::common::cached_x86_image("6.17.8") else {
        return;
    };
    // The kernel cache's root, shared with the tasks through --cache.
    let root = std::path::Path::new(&image)
        .ancestors()
        .find(|p| p.ends_with("kernels"))
        .and_then(|p| p.parent())
        .unwrap()
        .to_path_buf();
    let common = [
        "bisect",
        "--good",
        "debian:6.16.12",
        "--bad",
        "debian:6.17.8",
        "--arch",
        "x86_64",
        "--metric",
        "calls:vm_normal_page",
        "--json",
    ];
    let bench = [
        "--",
        "bench",
        "mprotect-toggle",
        "--size",
        "400K",
        "--folio",
        "4K",
    ];
    let run = |extra: &[&str], db: &str| -> (Value, String) {
        let out = Command::new(assert_cmd::cargo::cargo_bin("ptelab"))
            .envs(slurm.env())
            .current_dir(local.dir())
            .args(common)
            .args(extra)
            .args(["--db", db])
            .args(bench)
            .output()
            .unwrap();
        assert_success(&out);
        (
            serde_json::from_slice(&out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (here, _) = run(&[], local.path());
    // The state file of the local run would make the Slurm one resume.
    drop(BisectState::of(&root, &here));
    let cache = root.display().to_string();
    let on_slurm = ["--executor", "slurm", "--time", "30", "--cache", &cache];
    let (there, err) = run(&on_slurm, &pg);
    let _state = BisectState::of(&root, &there);
    assert!(
        err.contains("submitted Slurm job") && err.contains(": 2 tasks (0,1)"),
        "{err}"
    );
    assert!(!err.contains("resuming"), "{err}");
    assert_no_batch_left(&err);
    let (a, b) = (&here["bisect"], &there["bisect"]);
    assert_eq!(b["first_bad"][0]["id"], "6.17.8", "{b}");
    for key in ["id", "first_bad", "last_good", "classifier"] {
        assert_eq!(a[key], b[key], "{key}: local {a} vs slurm {b}");
    }
    let steps = |s: &Value| -> Vec<(Value, Value, Value, Value)> {
        s["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let m = &s["measurement"];
                (
                    s["id"].clone(),
                    s["verdict"].clone(),
                    m["figures"].clone(),
                    m["release"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(steps(a), steps(b));
    // 100 order-0 PTEs per call: a lookup on every other call, then on each.
    assert_eq!(
        (
            b["classifier"]["good"].as_f64(),
            b["classifier"]["bad"].as_f64()
        ),
        (Some(50.0), Some(100.0))
    );
    // Each step's run is in the shared database, tagged with the bisect.
    let tag = format!("bisect:{}", b["id"].as_str().unwrap());
    let runs = ptelab()
        .args(["runs", "--json", "--db", &pg])
        .output()
        .unwrap();
    assert_success(&runs);
    let doc: Value = serde_json::from_slice(&runs.stdout).unwrap();
    fn tagged(v: &Value, tag: &str) -> usize {
        match v {
            Value::Object(o) => {
                let here = o
                    .get("tags")
                    .and_then(Value::as_array)
                    .is_some_and(|t| t.iter().any(|t| t == tag));
                usize::from(here) + o.values().map(|v| tagged(v, tag)).sum::<usize>()
            }
            Value::Array(a) => a.iter().map(|v| tagged(v, tag)).sum(),
            _ => 0,
        }
    }
    assert_eq!(tagged(&doc, &tag), 2, "{doc}");

    // Again, with --resume: every figure from the state file, no submission.
    let mut resumed = on_slurm.to_vec();
    resumed.push("--resume");
    let (again, err) = run(&resumed, &pg);
    assert!(
        err.contains("resuming") && !err.contains("submitted"),
        "{err}"
    );
    assert_eq!(again["bisect"]["first_bad"], b["first_bad"]);
}

/// The Slurm job (and task) that `stderr` reports `task` in: from
/// "ptelab: job J task I (TASK): …".
fn job_of(stderr: &str, task: &str) -> Option<(String, String)> {
    stderr.lines().find_map(|l| {
        let rest = l.strip_prefix("ptelab: job ")?;
        let (job, rest) = rest.split_once(" task ")?;
        let (i, rest) = rest.split_once(' ')?;
        rest.starts_with(&format!("({task})"))
            .then(|| (job.to_string(), i.to_string()))
    })
}

/// A git-tree bisect through Slurm builds on the nodes: the endpoints'
/// builds as one job array of two tasks, each step's build as a job of one
/// task, into the shared cache. Commit 2 does not build: its task is
/// reported with its log and the step is skipped, as locally, and the
/// report is the known answer: commit 1 first bad, the verdicts, and the
/// exact counter figures of the two kernels. (That a Slurm bisect's report
/// is a local one's, figure for figure, is the test above; a local run
/// here would boot three more guests.)
/// A good endpoint that does not build is bad input, with its task's log.
/// The tree's builds copy cached Debian images (`--build-cmd`): no kernel
/// is compiled.
#[test]
fn a_tree_bisect_through_slurm_builds_on_the_nodes_and_finds_the_known_answer() {
    use crate::bisect_cli::Tree;
    let Some((_server, slurm, pg, local)) = end_to_end("tree_bisect_through_slurm", "tree") else {
        return;
    };
    let (Some(good), Some(bad)) = (
        crate::common::cached_x86_image("6.16.12"),
        crate::common::cached_x86_image("6.17.8"),
    ) else {
        return;
    };
    // Commit 1 changes the kernel; commit 2 does not build. `git bisect`
    // tests 2 first (skipped), then 1.
    let t = Tree::new(3, |i| if i >= 1 { bad.clone() } else { good.clone() });
    let before = t.state();
    let build = |fails: usize| {
        format!(
            "if [ \"$(cat n)\" = {fails} ]; then echo \"error: commit {fails} does not compile\" >&2; \
             exit 1; fi; cp \"$(cat KERNEL)\" \"$OUT\""
        )
    };
    let bench = [
        "--",
        "bench",
        "mprotect-toggle",
        "--size",
        "400K",
        "--folio",
        "4K",
    ];
    let shared = tempfile::tempdir().unwrap();
    let cache = shared.path().display().to_string();
    let run = |build_cmd: &str, extra: &[&str], db: &str| {
        let home = local.dir().join("xdg");
        Command::new(assert_cmd::cargo::cargo_bin("ptelab"))
            .envs(slurm.env())
            .env("XDG_CACHE_HOME", &home)
            .args([
                "bisect",
                "--repo",
                t.path(),
                "--good",
                &t.ids[0],
                "--bad",
                &t.ids[3],
            ])
            .args([
                "--arch",
                "x86_64",
                "--metric",
                "calls:vm_normal_page",
                "--json",
            ])
            .args(["--build-cmd", build_cmd, "--db", db])
            .args(extra)
            .args(bench)
            .output()
            .unwrap()
    };
    // One guest at a time on the test cluster's 2 CPUs (the machine is
    // shared); the endpoints still go as one array.
    let on_slurm = [
        "--executor",
        "slurm",
        "--time",
        "30",
        "--cache",
        &cache,
        "--sbatch=--cpus-per-task=2",
    ];
    let short = |i: usize| format!("build {} x86_64", &t.ids[i][..12]);

    // A good endpoint that does not build: no guest boots.
    let out = run(&build(0), &on_slurm, &pg);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(": 2 tasks (0,1)"), "{err}");
    let (job, task) = job_of(&err, &short(0)).expect("good's build task");
    assert_eq!(
        job_of(&err, &short(3)),
        Some((job.clone(), "1".into())),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "job {job} task {task} ({}) failed: FAILED",
            short(0)
        )),
        "{err}"
    );
    assert!(
        err.contains("  | error: commit 0 does not compile"),
        "{err}"
    );
    assert!(
        err.contains(&format!("--good {} (", t.ids[0]))
            && err.contains("gave no kernel to measure"),
        "{err}"
    );
    assert!(
        !err.contains("booting") && !err.contains("vm --kernel"),
        "{err}"
    );
    assert_eq!(t.state(), before, "the tree is left as found");

    // Through Slurm.
    let out = run(&build(2), &on_slurm, &pg);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let there: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!err.contains("resuming"), "{err}");
    // The endpoints: one array of two build tasks, then one of two guests.
    let (ends, _) = job_of(&err, &short(0)).expect("good's build task");
    assert_eq!(
        job_of(&err, &short(3)),
        Some((ends.clone(), "1".into())),
        "{err}"
    );
    assert!(
        err.contains(&format!("submitted Slurm job {ends}: 2 tasks (0,1)")),
        "{err}"
    );
    // Each step: a build of its own; commit 2's fails with its log.
    let (two, _) = job_of(&err, &short(2)).expect("commit 2's build task");
    let (one, _) = job_of(&err, &short(1)).expect("commit 1's build task");
    for job in [&two, &one] {
        assert!(
            err.contains(&format!("submitted Slurm job {job}: 1 tasks (0)")),
            "{err}"
        );
    }
    assert!(
        err.contains(&format!("job {two} task 0 ({}) failed: FAILED", short(2))),
        "{err}"
    );
    assert!(
        err.contains("  | error: commit 2 does not compile"),
        "{err}"
    );
    assert_eq!(t.state(), before, "the tree is left as found");
    let b = &there["bisect"];
    assert_eq!(b["first_bad"][0]["id"], t.ids[1].as_str(), "{b}");
    assert_eq!(b["last_good"], t.ids[0].as_str(), "{b}");
    // 6.17.8 (bad) calls vm_normal_page for every PTE of both directions,
    // 6.16.12 (good) in one direction only.
    assert_eq!(
        (&b["classifier"]["good"], &b["classifier"]["bad"]),
        (&Value::from(50.0), &Value::from(100.0)),
        "{b}"
    );
    let steps = |s: &Value| -> Vec<(Value, Value, Value)> {
        s["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["id"].clone(),
                    s["verdict"]["verdict"].clone(),
                    s["measurement"]["figures"].clone(),
                )
            })
            .collect()
    };
    let ids: Vec<&str> = [0, 3, 2, 1].iter().map(|&i| t.ids[i].as_str()).collect();
    let verdicts: Vec<(Value, Value)> = steps(b).into_iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(
        verdicts,
        ids.iter()
            .zip(["good", "bad", "skip", "bad"])
            .map(|(id, v)| (Value::from(*id), Value::from(v)))
            .collect::<Vec<_>>()
    );
    // The skip names the build's log, in the shared cache.
    let why = b["steps"][2]["verdict"]["why"].as_str().unwrap();
    assert!(
        why.contains("the build failed") && why.contains(&format!("log {cache}/bisect/logs/")),
        "{why}"
    );
}
