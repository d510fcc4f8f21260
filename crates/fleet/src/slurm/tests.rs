//! The job-array engine on a real single-node Slurm (`testcluster`), with
//! tasks that are shell one-liners: no guest boots here.

use super::testcluster::TestSlurm;
use super::*;

fn sh(name: &str, script: &str) -> Task {
    Task {
        name: name.into(),
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        data: None,
    }
}

fn options(slurm: &TestSlurm, resume: bool) -> Options {
    Options {
        resume,
        env: slurm
            .env()
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_os_str().to_owned()))
            .collect(),
        poll: Duration::from_millis(300),
        ..Options::default()
    }
}

#[test]
fn states_of_slurm() {
    assert_eq!(
        TaskState::of_slurm("PENDING", "Priority"),
        TaskState::Pending
    );
    assert_eq!(
        TaskState::of_slurm("COMPLETING", "None"),
        TaskState::Running
    );
    assert_eq!(TaskState::of_slurm("COMPLETED", "None"), TaskState::Done);
    assert_eq!(
        TaskState::of_slurm("FAILED", "NonZeroExitCode"),
        TaskState::Failed("FAILED NonZeroExitCode".into())
    );
    assert_eq!(
        TaskState::of_slurm("CANCELLED by 0", "0:15"),
        TaskState::Failed("CANCELLED 0:15".into())
    );
    assert_eq!(
        TaskState::of_slurm("TIMEOUT", ""),
        TaskState::Failed("TIMEOUT".into())
    );
}

#[test]
fn scripts_quote_every_argument() {
    let b = Batch::new(
        Path::new("/c"),
        "k".into(),
        vec![sh("a", "echo 'it''s' $HOME"), sh("b", "true")],
    );
    let s = b.script();
    assert!(
        s.contains("0) exec /bin/sh -c 'echo '\\''it'\\'''\\''s'\\'' $HOME' ;;"),
        "{s}"
    );
    assert!(s.contains("1) exec /bin/sh -c true ;;"), "{s}");
    assert_eq!(quote("postgres://u@h:5/d"), "postgres://u@h:5/d");
    assert_eq!(quote(""), "''");
}

#[test]
fn batch_keys_follow_the_command_lines() {
    let a = batch_key("vm", &[vec!["x".into()], vec!["y".into()]]);
    assert_eq!(a.len(), 12);
    assert_eq!(a, batch_key("vm", &[vec!["x".into()], vec!["y".into()]]));
    assert_ne!(a, batch_key("vm", &[vec!["xy".into()]]));
    assert_ne!(a, batch_key("vm2", &[vec!["x".into()], vec!["y".into()]]));
}

#[test]
fn a_batch_read_back_is_removed_one_that_was_not_is_kept() {
    let root = tempfile::tempdir().unwrap();
    let batch = Batch::new(root.path(), "b".into(), vec![sh("x", "true")]);
    std::fs::create_dir_all(&batch.dir).unwrap();
    std::fs::write(batch.logs(0).1, "boom").unwrap();
    batch.close(false);
    assert!(batch.logs(0).1.is_file());
    batch.close(true);
    assert!(!batch.dir.exists());
    assert!(root.path().join("slurm").is_dir());
    // Nothing to remove: no error.
    batch.close(true);
}

#[test]
fn old_batches_are_pruned_newest_and_current_kept() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("slurm");
    let t0 = std::time::SystemTime::now() - Duration::from_secs(3600);
    for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("state.json"), "{}").unwrap();
        std::fs::File::open(&d)
            .unwrap()
            .set_modified(t0 + Duration::from_secs(60 * i as u64))
            .unwrap();
    }
    // "a", the oldest, is the batch being submitted.
    prune_batches(&dir, 3, &dir.join("a"));
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["a", "c", "d"]);
}

#[test]
fn staged_binaries_are_pruned_to_the_most_recently_used() {
    let root = tempfile::tempdir().unwrap();
    let bin = root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let t0 = std::time::SystemTime::now() - Duration::from_secs(3600);
    let names = [
        "ptelab-aaaaaaaaaaa1",
        "ptelab-aaaaaaaaaaa2",
        "ptelab-aaaaaaaaaaa3",
        "ptelab-aaaaaaaaaaa4",
        "ptelab-aaaaaaaaaaa5",
        "ptelab-guest-arm64-aaaaaaaaaaa0",
        "ptelab-notes",
    ];
    for (i, name) in names.iter().enumerate() {
        let p = bin.join(name);
        std::fs::write(&p, "old build").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t0 + Duration::from_secs(60 * i as u64))
            .unwrap();
    }
    // The oldest copy is this build's: used again, it becomes the newest.
    let src = root.path().join("ptelab");
    std::fs::write(&src, "this build").unwrap();
    let sha = crate::guest::source::sha256_file(&src).unwrap();
    let reused = bin.join(format!("ptelab-{}", &sha[..12]));
    std::fs::write(&reused, "this build").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&reused)
        .unwrap()
        .set_modified(t0 - Duration::from_secs(60))
        .unwrap();
    assert_eq!(copy_by_content(&src, &bin, "ptelab").unwrap(), reused);
    let mut left: Vec<String> = std::fs::read_dir(&bin)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut want = vec![
        "ptelab-aaaaaaaaaaa3".to_string(),
        "ptelab-aaaaaaaaaaa4".into(),
        "ptelab-aaaaaaaaaaa5".into(),
        "ptelab-guest-arm64-aaaaaaaaaaa0".into(),
        "ptelab-notes".into(),
        format!("ptelab-{}", &sha[..12]),
    ];
    want.sort();
    assert_eq!(
        left, want,
        "the 4 most recently used copies of ptelab, other names untouched"
    );
}

#[test]
fn an_array_runs_reports_its_failures_and_resumes_only_those() {
    let Some(slurm) = TestSlurm::start_or_skip("an_array_runs_and_resumes") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let marker = root.path().join("second-time");
    let tasks = vec![
        sh("zero", "echo zero"),
        // Fails the first time, succeeds when resumed.
        sh(
            "one",
            &format!(
                "test -e {m} && echo one && exit 0; touch {m}; echo boom >&2; exit 3",
                m = marker.display()
            ),
        ),
        sh("two", "sleep 1; echo two"),
    ];
    let batch = Batch::new(root.path(), "testbatch".into(), tasks.clone());
    let outcome = batch.run(&options(&slurm, false), &|_| false).unwrap();
    assert_eq!(
        outcome.states,
        [
            TaskState::Done,
            TaskState::Failed("FAILED NonZeroExitCode".into()),
            TaskState::Done
        ]
    );
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(batch.logs(0).0), "zero\n");
    assert_eq!(read(batch.logs(1).1), "boom\n");
    assert_eq!(read(batch.logs(2).0), "two\n");
    let first = outcome.job.unwrap();

    // --resume: only task 1 goes again; the others' logs stay as they were.
    let again = Batch::new(root.path(), "testbatch".into(), tasks.clone());
    let t0 = std::fs::metadata(again.logs(0).0)
        .unwrap()
        .modified()
        .unwrap();
    let outcome = again.run(&options(&slurm, true), &|_| false).unwrap();
    assert_eq!(
        outcome.states,
        [TaskState::Done, TaskState::Done, TaskState::Done]
    );
    assert_ne!(outcome.job.as_deref(), Some(first.as_str()));
    assert_eq!(read(again.logs(1).0), "one\n");
    assert_eq!(
        std::fs::metadata(again.logs(0).0)
            .unwrap()
            .modified()
            .unwrap(),
        t0
    );
    let out = slurm
        .command("squeue")
        .args(["-h", "-r", "--states=all", "-o", "%K", "-j"])
        .arg(outcome.job.as_ref().unwrap())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1",
        "only task 1 was submitted"
    );

    // Resumed again: nothing left to run, nothing submitted.
    let done = Batch::new(root.path(), "testbatch".into(), tasks);
    let outcome = done.run(&options(&slurm, true), &|_| false).unwrap();
    assert_eq!(outcome.job, None);

    // Nothing to resume in a batch never run.
    let other = Batch::new(root.path(), "never".into(), vec![sh("x", "true")]);
    let e = other.run(&options(&slurm, true), &|_| false).unwrap_err();
    assert!(crate::error::is_usage(&e), "{e:#}");
}

#[test]
fn a_refused_submission_is_bad_input() {
    let Some(slurm) = TestSlurm::start_or_skip("a_refused_submission_is_bad_input") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let batch = Batch::new(root.path(), "refused".into(), vec![sh("x", "true")]);
    let mut opts = options(&slurm, false);
    opts.partition = Some("nosuchpartition".into());
    let e = batch.run(&opts, &|_| false).unwrap_err();
    let msg = format!("{e:#}");
    assert!(crate::error::is_usage(&e), "{msg}");
    assert!(msg.contains("sbatch refused the job array"), "{msg}");
    assert!(msg.to_lowercase().contains("partition"), "{msg}");
}

/// A directory holding an `sbatch` that fails as Slurm's does on a machine
/// set up as `why` says, and Options that find it first on PATH.
fn fake_sbatch(dir: &Path, stderr: &str) -> Options {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = bin.join("sbatch");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ncat >&2 <<'EOF'\n{stderr}\nEOF\nexit 1\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut full = bin.into_os_string();
    full.push(":");
    full.push(path);
    Options {
        env: vec![
            ("PATH".into(), full),
            ("SLURM_CONF".into(), dir.join("slurm.conf").into_os_string()),
        ],
        ..Options::default()
    }
}

#[test]
fn a_refusal_leaves_no_batch_and_says_what_to_do() {
    // What sbatch says with no slurm.conf, with no controller, without munge.
    let cases = [
        (
            "sbatch: error: s_p_parse_file: unable to status file /etc/slurm/slurm.conf: No such file or directory, retrying in 1sec up to 60sec\nsbatch: fatal: Unable to process configuration file",
            "slurm.conf is missing",
        ),
        (
            "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\nsbatch: error: fetch_config: DNS SRV lookup failed\nsbatch: fatal: Could not establish a configuration source",
            "slurm.conf is missing",
        ),
        (
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            "systemctl start slurmctld",
        ),
        (
            "sbatch: error: Munge encode failed: Failed to access \"/run/munge/munge.socket.2\": No such file or directory (retrying ...)\nsbatch: error: Batch job submission failed: Protocol authentication error",
            "systemctl start munge",
        ),
    ];
    for (stderr, remedy) in cases {
        let root = tempfile::tempdir().unwrap();
        let opts = fake_sbatch(root.path(), stderr);
        let batch = Batch::new(root.path(), "refused".into(), vec![sh("x", "true")]);
        let e = batch.run(&opts, &|_| false).unwrap_err();
        let msg = format!("{e:#}");
        assert!(crate::error::is_usage(&e), "{msg}");
        assert!(msg.contains("sbatch refused the job array"), "{msg}");
        assert!(msg.contains(remedy), "missing {remedy:?} in {msg}");
        assert!(!root.path().join("slurm").exists(), "{msg}");
    }
    // A batch submitted before keeps its directory: its logs and state are
    // what --resume needs.
    let root = tempfile::tempdir().unwrap();
    let opts = fake_sbatch(root.path(), cases[2].0);
    let batch = Batch::new(root.path(), "kept".into(), vec![sh("x", "true")]);
    std::fs::create_dir_all(&batch.dir).unwrap();
    batch
        .save_state(&State {
            jobs: vec!["7".into()],
            done: vec![false],
        })
        .unwrap();
    let resume = Options {
        resume: true,
        ..opts
    };
    assert!(batch.run(&resume, &|_| false).is_err());
    assert!(batch.submitted_before());
}

/// No task gets the database's URL or libpq's settings from sbatch.
#[test]
fn secrets_stay_out_of_the_tasks_environment() {
    use std::ffi::OsStr;
    for k in ["PTELAB_DB", "PGPASSWORD", "PGPASSFILE", "PGSSLROOTCERT"] {
        assert!(kept_from_tasks(OsStr::new(k)), "{k}");
    }
    for k in ["SLURM_CONF", "PATH", "HOME", "PTELAB_CACHE"] {
        assert!(!kept_from_tasks(OsStr::new(k)), "{k}");
    }
}

/// A second ptelab running the same batch is refused while the first
/// holds it, and gets it once the first is done.
#[test]
fn one_ptelab_at_a_time_runs_a_batch() {
    let root = tempfile::tempdir().unwrap();
    let first = lock_batch(root.path(), "b").unwrap();
    let e = lock_batch(root.path(), "b").unwrap_err();
    assert!(crate::error::is_usage(&e), "{e:#}");
    assert!(format!("{e:#}").contains("another ptelab is running these boots"));
    assert!(lock_batch(root.path(), "other").is_ok());
    drop(first);
    let again = lock_batch(root.path(), "b").unwrap();
    drop(again);
    // No lock outlives its run.
    let left: Vec<_> = std::fs::read_dir(root.path().join("slurm"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
