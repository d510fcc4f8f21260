//! `ptelab vm`, `reproduce` and `bisect` with `--executor slurm` against a
//! real single-node Slurm on localhost (`common::testcluster`), stopped and
//! removed after each test, also on failure.
//!
//! Each guest boot is one task of a job array: the hidden `ptelab task run
//! CACHE/slurm/KEY/task-I.json` boots it on its node and writes
//! `task-I.answer.json` beside it, which the submitting ptelab reads back
//! and stores as a local run's. Tasks touch no database, so SQLite serves;
//! one test stores into a real PostgreSQL (`common::testserver`) to show
//! that nothing of it reaches a task.
//!
//! The cheap tests boot no kernel: their images only look like one (QEMU
//! refuses them at once), or their tasks are held in the queue. The others
//! boot Debian's kernels under TCG (seconds each); the end-to-end ones boot
//! them through Slurm and locally and compare figures and verdicts (exact
//! under TCG). They skip, saying why, where the kernels are not cached.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::testcluster::TestSlurm;
use crate::common::testserver::{TestServer, PASSWORD};
use crate::common::{assert_success, cached_image, ptelab, ptelab_std, TempDb};

/// ptelab pointed at `slurm`, its cache (batches, staged binaries, logs)
/// under `cache`.
fn with_cluster(slurm: &TestSlurm, cache: &Path) -> assert_cmd::Command {
    let mut cmd = ptelab();
    for (k, v) in slurm.env() {
        cmd.env(k, v);
    }
    cmd.env("XDG_CACHE_HOME", cache);
    cmd
}

/// A file `name` in `dir` that passes for an x86 bzImage (the magic of its
/// boot header) and is none: it resolves as an image of one's own build,
/// and QEMU refuses to boot it at once, so that its task fails in seconds.
fn fake_image(dir: &Path, name: &str) -> String {
    let mut bytes = vec![0u8; 4096];
    bytes[0x202..0x206].copy_from_slice(b"HdrS");
    // Each its own sha256.
    bytes[0x1000 - name.len()..].copy_from_slice(name.as_bytes());
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

/// Each job array a submitting ptelab reported on `stderr`, in order:
/// "submitted Slurm job J: N tasks (LIST), logs in DIR" as (J, "N tasks
/// (LIST)", DIR).
fn submissions(stderr: &str) -> Vec<(String, String, PathBuf)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("ptelab: submitted Slurm job ")?;
            let (job, rest) = rest.split_once(": ")?;
            let (tasks, dir) = rest.split_once(", logs in ")?;
            Some((job.to_string(), tasks.to_string(), PathBuf::from(dir)))
        })
        .collect()
}

/// The one job array a submitting ptelab reported on `stderr`.
fn submission(stderr: &str) -> (String, String, PathBuf) {
    let mut s = submissions(stderr);
    assert_eq!(s.len(), 1, "one job array: {stderr}");
    s.remove(0)
}

/// Assert that every batch of a successful run was removed once read back.
fn assert_no_batch_left(stderr: &str) {
    let subs = submissions(stderr);
    assert!(!subs.is_empty(), "{stderr}");
    for (_, _, d) in subs {
        assert!(!d.exists(), "{} left behind\n{stderr}", d.display());
    }
    assert!(!stderr.contains(" kept in "), "{stderr}");
}

/// The names of the tasks of Slurm job `job`, by task, from the progress
/// lines on `stderr` ("ptelab: job J task I (NAME): …").
fn task_names(stderr: &str, job: &str) -> BTreeMap<usize, String> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&format!("ptelab: job {job} task "))?;
            let (i, rest) = rest.split_once(" (")?;
            let (name, _) = rest.split_once(')')?;
            Some((i.parse().ok()?, name.to_string()))
        })
        .collect()
}

/// A JSON file.
fn json_file(path: &Path) -> Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap()
}

/// The tags of every run in `db`, oldest run first.
fn run_tags(db: &str) -> Vec<Vec<String>> {
    let out = ptelab()
        .args(["runs", "--json", "--db", db])
        .output()
        .unwrap();
    assert_success(&out);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["tags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

/// Assert that no run of `db` carries a tag of a Slurm batch: tasks store
/// nothing, the submitting ptelab stores as a local run does.
fn assert_tagged_as_local_runs(tags: &[Vec<String>]) {
    assert!(
        tags.iter().flatten().all(|t| !t.starts_with("slurm-")),
        "{tags:?}"
    );
}

/// Run ptelab's `verb` with `args` against `slurm`, its job array held;
/// once the array was submitted, call `meanwhile`, then release it and
/// wait for the ptelab's end: its status and standard error.
fn held(
    slurm: &TestSlurm,
    verb: &str,
    args: &[&str],
    meanwhile: impl FnOnce(&std::path::Path),
) -> (std::process::ExitStatus, String) {
    let mut child = ptelab_std()
        .envs(slurm.env())
        .args([verb, "--sbatch=--hold"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let (job, dir) = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.wait();
            panic!("nothing submitted:\n{}", seen.join("\n"));
        };
        seen.push(line.clone());
        if let Some(rest) = line.strip_prefix("ptelab: submitted Slurm job ") {
            let dir = rest.rsplit_once(", logs in ").unwrap().1.to_string();
            break (rest.split(':').next().unwrap().to_string(), dir);
        }
    };
    meanwhile(std::path::Path::new(&dir));
    let out = slurm
        .command("scontrol")
        .args(["release", &job])
        .output()
        .unwrap();
    assert_success(&out);
    seen.extend(lines.map_while(Result::ok));
    (child.wait().unwrap(), seen.join("\n"))
}

#[test]
fn slurm_flags_need_slurm_and_kernels_are_refused_before_any_submission() {
    for flag in [
        &["--partition", "p"][..],
        &["--time", "30"],
        &["--resume"],
        &["--sbatch=--qos=x"],
        &["--cache", "/tmp"],
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
    // The submitting ptelab resolves the kernels, as a local vm does: an
    // image that is not a kernel is refused before anything is submitted
    // (a stand-in sbatch first on PATH says whether one was tried). An
    // SQLite --db is no reason to refuse.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let tried = dir.path().join("sbatch-ran");
    crate::common::script(
        &bin,
        "sbatch",
        &format!("touch '{}'\nexit 1\n", tried.display()),
    );
    let bad = dir.path().join("notakernel");
    std::fs::write(&bad, "garbage").unwrap();
    let db = TempDb::new();
    let out = ptelab()
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .args(["vm", "--executor", "slurm", "--kernel"])
        .arg(&bad)
        .args(["--db", db.path()])
        .args(["--", "bench", "mprotect-toggle", "--size", "64K"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not a kernel image"), "{err}");
    assert!(!tried.exists(), "sbatch was run: {err}");
    assert!(
        !dir.path().join("cache/ptelab/slurm").exists(),
        "a batch was written: {err}"
    );
}

/// Tasks whose guests fail are reported with their logs, their batch kept
/// with each task's job and answer, and nothing stored: here in a real
/// PostgreSQL, of which nothing reaches a task (the submitting ptelab
/// stores). `--resume` submits the failed tasks again; `--resume` of boots
/// never submitted submits them all, saying so.
#[test]
fn failed_tasks_are_reported_with_their_logs_and_resume_submits_them_again() {
    let Some(server) = TestServer::start_or_skip("failed_tasks_are_reported") else {
        return;
    };
    let Some(slurm) = TestSlurm::start_or_skip("failed_tasks_are_reported") else {
        return;
    };
    let pg = server.create_database("failed");
    let cache = tempfile::tempdir().unwrap();
    let root = cache.path().join("ptelab");
    let (a, b) = (
        fake_image(cache.path(), "a.img"),
        fake_image(cache.path(), "b.img"),
    );
    let vm = |resume: bool, kernels: &[&str]| -> (Option<i32>, String) {
        let mut cmd = with_cluster(&slurm, cache.path());
        cmd.args(["vm", "--executor", "slurm"]);
        if resume {
            cmd.arg("--resume");
        }
        for k in kernels {
            cmd.args(["--kernel", k]);
        }
        cmd.args(["--accel", "tcg", "--db", &pg]).args([
            "--",
            "bench",
            "mprotect-toggle",
            "--size",
            "64K",
        ]);
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = vm(false, &[&a, &b]);
    assert_eq!(code, Some(1), "{err}");
    let (job, tasks, dir) = submission(&err);
    assert_eq!(tasks, "2 tasks (0,1)", "{err}");
    for (i, k) in [&a, &b].into_iter().enumerate() {
        assert!(
            err.contains(&format!(
                "job {job} task {i} ({k} mprotect-toggle) failed: FAILED"
            )),
            "{err}"
        );
    }
    // The task's own error, from its log.
    assert!(
        err.contains("  | ptelab: error: the guest stopped without an answer"),
        "{err}"
    );
    // The failed batch stays, for its logs and --resume, and says where.
    let key = dir.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        dir.is_dir() && err.contains(&format!("batch {key} kept in {}", dir.display())),
        "{err}"
    );
    // The submitting vm fails with the error its task answered.
    assert!(
        err.lines()
            .any(|l| l.starts_with("ptelab: error: the guest stopped without an answer")),
        "{err}"
    );
    // Each task is its boot's job, the submitter's cache paths in it, and
    // its answer the error; the script runs the hidden verb on the job.
    let script = std::fs::read_to_string(dir.join("job.sh")).unwrap();
    for (i, k) in [&a, &b].into_iter().enumerate() {
        let file = dir.join(format!("task-{i}.json"));
        assert!(
            script.contains(&format!(" task run {}", file.display())),
            "{script}"
        );
        let task = json_file(&file);
        assert_eq!(task["schema"], "ptelab/task/v1", "{task}");
        // The image, outside the cache, is staged into it by content.
        let staged = task["boot"]["kernel"].as_str().unwrap();
        assert_eq!(
            std::fs::read(staged).unwrap(),
            std::fs::read(k).unwrap(),
            "{task}"
        );
        for (field, under) in [("kernel", "bin"), ("binary", "bin"), ("log", "logs")] {
            let p = task["boot"][field].as_str().unwrap();
            assert!(Path::new(p).starts_with(root.join(under)), "{task}");
        }
        let answer = json_file(&dir.join(format!("task-{i}.answer.json")));
        assert_eq!(answer["schema"], "ptelab/task-answer/v1", "{answer}");
        assert_eq!(answer["outputs"], json!([]), "{answer}");
        assert!(
            answer["error"]
                .as_str()
                .is_some_and(|e| e.contains("the guest stopped without an answer")),
            "{answer}"
        );
    }
    // No task is given a database or a tag: not on its command line, not
    // in any file of the batch; the password shows nowhere.
    assert!(
        !script.contains("--db") && !script.contains("--tag"),
        "{script}"
    );
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
        assert!(
            !text.contains(PASSWORD) && !text.contains("postgres://"),
            "{}: {text}",
            p.display()
        );
    }
    assert!(!err.contains(PASSWORD), "{err}");

    // --resume: the failed tasks, in the same batch, in a new job array.
    let (code, err) = vm(true, &[&a, &b]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("resuming batch {key}: 2 of 2 tasks to run again")),
        "{err}"
    );
    let (again, tasks, same) = submission(&err);
    assert_eq!((tasks.as_str(), &same), ("2 tasks (0,1)", &dir), "{err}");
    assert_ne!(again, job, "{err}");
    assert!(err.contains(&format!("batch {key} kept in")), "{err}");

    // --resume of boots never submitted: all of them, saying why.
    let c = fake_image(cache.path(), "c.img");
    let (code, err) = vm(true, &[&c]);
    assert_eq!(code, Some(1), "{err}");
    let (_, tasks, other) = submission(&err);
    assert_eq!(tasks, "1 tasks (0)", "{err}");
    assert!(
        err.contains(&format!(
            "--resume: no earlier job array of these boots in {}: submitting them all",
            other.display()
        )),
        "{err}"
    );
    assert_ne!(other, dir, "{err}");
    // Nothing was stored.
    assert_eq!(run_tags(&pg).len(), 0);
}

/// A task whose kernel is not on its node (here: removed while the array
/// was held) answers that the cache must be shared, and the submitting vm
/// exits with that usage error; the other task's guest answered. With the
/// image back, `--resume` submits only the failed task, reads the other's
/// answer from the batch, and stores both runs in SQLite, tagged as local
/// runs are.
#[test]
fn a_task_without_its_kernel_says_why_and_resume_submits_only_that_task() {
    let (Some(image), Some(_)) = (
        cached_image("6.16.12", "arm64"),
        cached_image("6.17.13", "arm64"),
    ) else {
        return;
    };
    let Some(slurm) = TestSlurm::start_or_skip("a_task_without_its_kernel") else {
        return;
    };
    let db = TempDb::new();
    // An image of one's own build: the nodes boot its copy in the cache.
    let own = db.dir().join("Image");
    std::fs::copy(&image, &own).unwrap();
    let own_s = own.display().to_string();
    let vm = [
        "vm",
        "--executor",
        "slurm",
        "--kernel",
        &own_s,
        "--kernel",
        "debian:6.17.13",
        "--arch",
        "arm64",
        "--accel",
        "tcg",
        "--json",
        "--db",
        db.path(),
    ];
    let bench = [
        "--",
        "bench",
        "mprotect-toggle",
        "--size",
        "64K",
        "--folio",
        "4K",
    ];
    // Held: nothing runs until the image's copy has left "the node".
    let mut staged = std::path::PathBuf::new();
    let (status, err) = held(&slurm, "vm", &[&vm[1..], &bench[..]].concat(), |dir| {
        let task = json_file(&dir.join("task-0.json"));
        staged = task["boot"]["kernel"].as_str().unwrap().into();
        std::fs::remove_file(&staged).unwrap()
    });
    // One guest of two answered: printed and stored, then exit 1.
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("1 of 2 guests gave no answer"), "{err}");
    // Staged by content, its name kept.
    assert_eq!(staged.file_name(), own.file_name());
    let parent = staged.parent().unwrap().file_name().unwrap();
    assert!(parent.to_str().unwrap().starts_with("files-"), "{staged:?}");
    let (job, _, dir) = submission(&err);
    assert!(
        err.contains(&format!(
            "{} is not on this machine: a task reads the submitting ptelab's cache, which \
             must be on a file system every node mounts at the same path (pass --cache DIR)",
            staged.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "job {job} task 0 ({own_s} mprotect-toggle) failed: FAILED"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "job {job} task 1 (debian:6.17.13 mprotect-toggle): done"
        )),
        "{err}"
    );
    let key = dir.file_name().unwrap().to_str().unwrap().to_string();
    assert!(err.contains(&format!("batch {key} kept in")), "{err}");
    let answer = json_file(&dir.join("task-1.answer.json"));
    assert_eq!(answer["outputs"].as_array().map(Vec::len), Some(1), "{err}");
    let answer = json_file(&dir.join("task-0.answer.json"));
    assert_eq!(answer["usage"], true, "{answer}");
    // The guest that answered was stored.
    assert_eq!(run_tags(db.path()), [vec!["debian:6.17.13".to_string()]]);

    // Submitted again, the image is staged again: only its task runs.
    let out = ptelab()
        .envs(slurm.env())
        .args(vm)
        .arg("--resume")
        .args(bench)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("resuming batch {key}: 1 of 2 tasks to run again")),
        "{err}"
    );
    let (_, tasks, same) = submission(&err);
    assert_eq!((tasks.as_str(), &same), ("1 tasks (0)", &dir), "{err}");
    assert_no_batch_left(&err);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let guests = doc["guests"].as_array().unwrap();
    assert_eq!(
        guests.iter().map(|g| &g["kernel"]).collect::<Vec<_>>(),
        [&Value::from(own_s.as_str()), &Value::from("debian:6.17.13")],
        "{doc}"
    );
    // The answer handed to the first run is not stored again.
    assert!(guests[0]["run_id"].is_number(), "{doc}");
    assert_eq!(guests[0]["stored_before"], false, "{doc}");
    assert!(guests[1]["run_id"].is_null(), "{doc}");
    assert_eq!(guests[1]["stored_before"], true, "{doc}");
    // Stored here with the tags of a local run: the Debian kernel's spec,
    // none for an image path; each once.
    let tags = run_tags(db.path());
    assert_eq!(tags, [vec!["debian:6.17.13".to_string()], vec![]]);
}

/// `--resume` of a profiled batch (`--profile`; `reproduce` and `bisect
/// --metric calls:…` count too) after one of its tasks failed: only that
/// task runs again. A profiled boot asks its guest for the kernel's
/// symbols only while they are not cached, and the first run caches those
/// of every guest that answered: what names the batch must not change
/// with that.
#[test]
fn resume_of_a_profiled_batch_submits_only_the_failed_task() {
    let (Some(i16), Some(i17)) = (
        cached_image("6.16.12", "arm64"),
        cached_image("6.17.13", "arm64"),
    ) else {
        return;
    };
    let Some(slurm) = TestSlurm::start_or_skip("resume_of_a_profiled_batch") else {
        return;
    };
    // Images of one's own build, and a cache of their own: no symbols of
    // theirs are cached yet.
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    std::fs::copy(&i16, &one).unwrap();
    std::fs::copy(&i17, &two).unwrap();
    let (one_s, two_s) = (one.display().to_string(), two.display().to_string());
    let cache = tmp.path().join("cache").display().to_string();
    let args = [
        "--executor",
        "slurm",
        "--cache",
        &cache,
        "--kernel",
        &one_s,
        "--kernel",
        &two_s,
        "--arch",
        "arm64",
        "--accel",
        "tcg",
        "--profile",
        "--no-store",
        "--",
        "bench",
        "mprotect-toggle",
        "--size",
        "64K",
        "--folio",
        "4K",
    ];
    // The first image's copy in the cache leaves "the node".
    let (status, err) = held(&slurm, "vm", &args, |dir| {
        let task = json_file(&dir.join("task-0.json"));
        std::fs::remove_file(task["boot"]["kernel"].as_str().unwrap()).unwrap()
    });
    assert_eq!(status.code(), Some(1), "{err}");
    let (_, _, dir) = submission(&err);
    let key = dir.file_name().unwrap().to_str().unwrap().to_string();
    let out = ptelab()
        .envs(slurm.env())
        .args(["vm", "--resume"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("resuming batch {key}: 1 of 2 tasks to run again")),
        "{err}"
    );
    assert_eq!(submission(&err).1, "1 tasks (0)", "{err}");
    assert_no_batch_left(&err);
}

#[test]
fn sigint_cancels_the_array_and_leaves_nothing_queued() {
    let Some(slurm) = TestSlurm::start_or_skip("sigint_cancels_the_array") else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let (a, b) = (
        fake_image(cache.path(), "a.img"),
        fake_image(cache.path(), "b.img"),
    );
    // Held tasks never start: no guest boots.
    let mut child = ptelab_std()
        .envs(slurm.env())
        .env("XDG_CACHE_HOME", cache.path())
        .args([
            "vm",
            "--executor",
            "slurm",
            "--sbatch=--hold",
            "--accel",
            "tcg",
        ])
        .args(["--kernel", &format!("{a},{b}"), "--no-store", "--"])
        .args(["bench", "mprotect-toggle", "--size", "64K"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let start = Instant::now();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.contains("2 pending") || start.elapsed() > Duration::from_secs(120) {
            break;
        }
    }
    let (job, _, dir) = submission(&seen.join("\n"));
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
    assert!(
        rest.contains(&format!("batch kept in {}", dir.display())),
        "{rest}"
    );
    // No task ran: no answer.
    for i in 0..2 {
        assert!(!dir.join(format!("task-{i}.answer.json")).exists());
    }
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

/// What an end-to-end test needs: Debian's `kernels` of `arch` cached, a
/// single-node Slurm, and two SQLite databases (the local run's, the one
/// through Slurm); None, having said why, when one is missing. Tests whose
/// point is the executor, not an arch, boot arm64 (docs/guests.md, "One
/// boot per kernel").
fn end_to_end(test: &str, arch: &str, kernels: &[&str]) -> Option<(TestSlurm, TempDb, TempDb)> {
    for k in kernels {
        cached_image(k.trim_start_matches("debian:"), arch)?;
    }
    let slurm = TestSlurm::start_or_skip(test)?;
    Some((slurm, TempDb::new(), TempDb::new()))
}

/// The root of the kernel cache (this user's ptelab cache), which holds
/// `image`.
fn cache_root_of(image: &str) -> PathBuf {
    Path::new(image)
        .ancestors()
        .find(|p| p.ends_with("kernels"))
        .and_then(|p| p.parent())
        .unwrap()
        .to_path_buf()
}

#[test]
fn guests_through_slurm_measure_what_local_guests_measure() {
    let Some((slurm, local, there_db)) = end_to_end("guests_through_slurm", "arm64", &KERNELS)
    else {
        return;
    };
    // Two commands in one boot of each kernel: a task answers for both,
    // and a run is stored for each.
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
        "vm", "--kernel", &kernels, "--arch", "arm64", "--accel", "tcg", "--json",
    ];
    let out = ptelab()
        .args(common)
        .args(["--jobs", "2", "--db", local.path()])
        .args(command)
        .timeout(Duration::from_secs(1200))
        .output()
        .unwrap();
    assert_success(&out);
    let here: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Through Slurm, from this user's cache (the one the kernels are in),
    // which every node of a one-node cluster mounts.
    let out = Command::new(assert_cmd::cargo::cargo_bin("ptelab"))
        .envs(slurm.env())
        .args(common)
        .args([
            "--executor",
            "slurm",
            "--time",
            "30",
            "--db",
            there_db.path(),
        ])
        .args(command)
        .output()
        .unwrap();
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
    // One job array, a task per kernel running both commands.
    let (job, tasks, _) = submission(&err);
    assert_eq!(tasks, "2 tasks (0,1)", "{err}");
    let mut names: Vec<String> = task_names(&err, &job).into_values().collect();
    names.sort();
    assert_eq!(
        names,
        KERNELS.map(|k| format!("{k} mprotect-toggle, prot-transition")),
        "{err}"
    );
    // Each guest's console log is in the cache, where its task wrote it.
    for g in there["guests"].as_array().unwrap() {
        assert!(g["run_id"].is_number(), "{there}");
        let log = Path::new(g["log"].as_str().unwrap());
        assert!(
            log.parent().is_some_and(|d| d.ends_with("logs"))
                && std::fs::metadata(log).is_ok_and(|m| m.len() > 0),
            "{}",
            log.display()
        );
    }
    // Read back in full: the batch's directory is gone.
    assert_no_batch_left(&err);
    // Stored here as the local runs are: the same tags, the same figures.
    let tags = run_tags(there_db.path());
    assert_eq!(run_tags(local.path()), tags);
    assert_tagged_as_local_runs(&tags);
    let (a, b) = (
        cells_by_kernel(local.path(), &KERNELS),
        cells_by_kernel(there_db.path(), &KERNELS),
    );
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        // TCG with icount: instruction counts repeat to a few parts in 10^5.
        assert!((x - y).abs() <= x * 1e-3, "local {x} vs slurm {y}");
    }
}

/// `calibrate --guest` boots through the same executor: its boots as one
/// job array give the bias a local calibration gives (exact under TCG),
/// and Slurm's options go with --guest only.
#[test]
fn calibrate_guest_through_slurm_gives_the_bias_of_a_local_run() {
    let refused = |args: &[&str], says: &str| {
        let out = ptelab().arg("calibrate").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{says}: {err}");
    };
    refused(&["--executor", "slurm"], "it goes with --guest");
    refused(
        &["--guest", "--kernel", "debian:6.16.12", "--partition", "p"],
        "--partition goes with --executor slurm",
    );
    let Some((slurm, local_db, slurm_db)) =
        end_to_end("calibrate_guest_through_slurm", "arm64", &KERNELS)
    else {
        return;
    };
    let calibrate = |db: &str, executor: &str| {
        ptelab()
            .envs(slurm.env())
            .args(["calibrate", "--guest", "--kernel", "debian:6.16.12"])
            .args(["--arch", "arm64", "--boots", "2", "--executor", executor])
            .args(["--db", db, "--", "bench", "mprotect-toggle"])
            .args(["--size", "40K", "--folio", "4K", "--time", "200ms"])
            .output()
            .unwrap()
    };
    let local = calibrate(local_db.path(), "local");
    assert_success(&local);
    let out = calibrate(slurm_db.path(), "slurm");
    assert_success(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let (_, tasks, _) = submission(&err);
    assert_eq!(tasks, "2 tasks (0,1)", "{err}");
    assert_no_batch_left(&err);
    // The bias table, less the run ids.
    let table = |o: &std::process::Output| -> Vec<String> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("mprotect-toggle") || l.starts_with("=="))
            .map(String::from)
            .collect()
    };
    assert!(!table(&local).is_empty());
    assert_eq!(table(&out), table(&local));
    assert_eq!(run_tags(slurm_db.path()), run_tags(local_db.path()));
}

#[test]
fn reproduce_on_slurm_needs_kernels_and_its_flags_need_slurm() {
    let db = TempDb::new();
    for (args, says) in [
        (
            &["reproduce", "001", "--executor", "slurm", "--db", db.path()][..],
            "give --kernels too",
        ),
        (
            &["reproduce", "001", "--resume"],
            "--resume goes with --executor slurm",
        ),
        (
            &[
                "reproduce",
                "001",
                "--kernels",
                "debian:6.17.13",
                "--cache",
                "/tmp",
            ],
            "--cache goes with --executor slurm",
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
    let Some((slurm, local, there_db)) =
        end_to_end("reproduce_through_slurm", "arm64", &SEED_001_KERNELS)
    else {
        return;
    };
    // arm64: the arch is not the point (docs/guests.md, "One boot per
    // kernel"). Where a kernel's symbols are not cached yet, the local run
    // asks for them and the Slurm run finds them; the job names that request
    // as a digit of one length (docs/guests.md, "Symbols"), so both boot
    // archives of the same length and give the same figures to the last
    // instruction (when the request made the job longer, 6.17.8's figures
    // here were 0.15% apart).
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
        "arm64",
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
    let (there, err) = run(&["--executor", "slurm", "--time", "30"], there_db.path());
    assert_no_batch_left(&err);
    let (job, tasks, _) = submission(&err);
    assert_eq!(tasks, "2 tasks (0,1)", "{err}");
    let names: Vec<String> = task_names(&err, &job).into_values().collect();
    for k in SEED_001_KERNELS {
        assert!(
            names
                .iter()
                .any(|n| n.starts_with(k) && n.ends_with(" mprotect-toggle")),
            "one task boots {k}: {names:?}\n{err}"
        );
    }
    // The guests' figures: instruction counts under TCG, the same boot's
    // bytes here and there.
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
            assert_eq!(x, y, "{k}: local against Slurm");
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
    // The guests' runs are stored as the local ones, tagged `reproduce`.
    let tags = run_tags(there_db.path());
    assert_eq!(run_tags(local.path()), tags);
    assert_tagged_as_local_runs(&tags);
    assert!(
        tags.iter().any(|t| t.iter().any(|t| t == "reproduce")),
        "{tags:?}"
    );
}

#[test]
fn bisect_on_slurm_flags_need_slurm_and_a_tree_a_shared_cache() {
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
            &["--partition", "p"][..],
            "--partition goes with --executor slurm",
        ),
        (&["--resume"], "--resume goes with --executor slurm"),
        (&["--cache", "/tmp"], "--cache goes with --executor slurm"),
    ] {
        ptelab()
            .args(bisect)
            .args(extra)
            .args(bench)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(says));
    }
    // A tree's commits are built on the nodes: into --cache, which they
    // mount.
    let tree = tempfile::tempdir().unwrap();
    let db = TempDb::new();
    ptelab()
        .args(["bisect", "--repo"])
        .arg(tree.path())
        .args(["--good", "a", "--bad", "b", "--executor", "slurm"])
        .args(["--db", db.path()])
        .args(bench)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("pass --cache DIR"));
}

/// The bisect's state file, removed when dropped, so that the next run
/// (local or through Slurm) measures again.
struct BisectState(PathBuf);

impl BisectState {
    fn of(root: &Path, doc: &Value) -> BisectState {
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
/// Slurm (each into SQLite): the endpoints go as one job array of two
/// tasks, and the report (first bad, figures, verdicts) is the local one.
/// Debian offers nothing between 6.16.12 and 6.17.8, so there is no step
/// after the endpoints. Run again with `--resume`, the bisect takes every
/// figure from its state file and submits nothing.
#[test]
fn a_bisect_through_slurm_finds_what_a_local_bisect_finds() {
    let Some((slurm, local, there_db)) =
        end_to_end("bisect_through_slurm", "arm64", &SEED_001_KERNELS)
    else {
        return;
    };
    let Some(image) = cached_image("6.17.8", "arm64") else {
        return;
    };
    // The kernel cache's root, shared with the tasks through --cache.
    let root = cache_root_of(&image);
    let common = [
        "bisect",
        "--good",
        "debian:6.16.12",
        "--bad",
        "debian:6.17.8",
        "--arch",
        "arm64",
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
    let (there, err) = run(&on_slurm, there_db.path());
    let _state = BisectState::of(&root, &there);
    // The endpoints: one round, one job array.
    let (_, tasks, _) = submission(&err);
    assert_eq!(tasks, "2 tasks (0,1)", "{err}");
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
    // Each step's run is stored by the submitting bisect, tagged with it,
    // as locally.
    let tag = format!("bisect:{}", b["id"].as_str().unwrap());
    let tags = run_tags(there_db.path());
    assert_eq!(tags, run_tags(local.path()));
    assert_tagged_as_local_runs(&tags);
    assert_eq!(
        tags.iter().filter(|t| t.contains(&tag)).count(),
        2,
        "{tags:?}"
    );

    // Again, with --resume: every figure from the state file, no submission.
    let mut resumed = on_slurm.to_vec();
    resumed.push("--resume");
    let (again, err) = run(&resumed, there_db.path());
    assert!(
        err.contains("resuming bisect") && !err.contains("submitted"),
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

/// A git-tree bisect through Slurm builds on the nodes and boots there:
/// the endpoints' builds as one job array of two tasks, then their guests
/// as another; each step's build as a job of one task, then its guest as
/// another, all in the shared cache. Commit 2 does not build: its task is
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
    let Some((slurm, local, db)) = end_to_end("tree_bisect_through_slurm", "arm64", &[]) else {
        return;
    };
    // arm64 guests: seed 001's folio lookup changed there too, in the
    // generic mprotect code.
    let (Some(good), Some(bad)) = (
        cached_image("6.16.12", "arm64"),
        cached_image("6.17.13", "arm64"),
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
    let run = |build_cmd: &str, extra: &[&str]| {
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
                "arm64",
                "--metric",
                "calls:vm_normal_page",
                "--json",
            ])
            .args(["--build-cmd", build_cmd, "--db", db.path()])
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
    let short = |i: usize| format!("build {} arm64", &t.ids[i][..12]);

    // A good endpoint that does not build: no guest boots.
    let out = run(&build(0), &on_slurm);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let (job, tasks, _) = submission(&err);
    assert_eq!(tasks, "2 tasks (0,1)", "{err}");
    let (job0, task) = job_of(&err, &short(0)).expect("good's build task");
    assert_eq!(job0, job, "{err}");
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
    let out = run(&build(2), &on_slurm);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let there: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!err.contains("resuming"), "{err}");
    // Five job arrays: the endpoints' two builds, their two guests; commit
    // 2's build (which fails: no guest); commit 1's build, its guest.
    let subs = submissions(&err);
    let arrays: Vec<(&str, Vec<String>)> = subs
        .iter()
        .map(|(job, tasks, _)| {
            (
                tasks.as_str(),
                task_names(&err, job)
                    .into_values()
                    .map(|n| match n.starts_with("build ") {
                        true => n,
                        false => "guest".into(),
                    })
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        arrays,
        [
            ("2 tasks (0,1)", vec![short(0), short(3)]),
            ("2 tasks (0,1)", vec!["guest".into(), "guest".into()]),
            ("1 tasks (0)", vec![short(2)]),
            ("1 tasks (0)", vec![short(1)]),
            ("1 tasks (0)", vec!["guest".into()]),
        ],
        "{err}"
    );
    let two = &subs[2].0;
    assert!(
        err.contains(&format!("job {two} task 0 ({}) failed: FAILED", short(2))),
        "{err}"
    );
    assert!(
        err.contains("  | error: commit 2 does not compile"),
        "{err}"
    );
    // The guests' batches were read back in full; the failed build's kept.
    for (i, (_, _, dir)) in subs.iter().enumerate() {
        assert_eq!(dir.exists(), i == 2, "{}\n{err}", dir.display());
    }
    assert_eq!(t.state(), before, "the tree is left as found");
    let b = &there["bisect"];
    assert_eq!(b["first_bad"][0]["id"], t.ids[1].as_str(), "{b}");
    assert_eq!(b["last_good"], t.ids[0].as_str(), "{b}");
    // 6.17.13 (bad) calls vm_normal_page for every PTE of both directions,
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
        why.contains("the build failed") && why.contains(&format!("log {cache}/builds/logs/")),
        "{why}"
    );
    // The three guests' runs are stored by the submitting bisect.
    let tag = format!("bisect:{}", b["id"].as_str().unwrap());
    let tags = run_tags(db.path());
    assert_tagged_as_local_runs(&tags);
    assert_eq!(
        tags.iter().filter(|t| t.contains(&tag)).count(),
        3,
        "{tags:?}"
    );
}
