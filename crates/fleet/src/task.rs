//! A boot as a file another machine runs: what a cluster's task is. The
//! submitting ptelab writes `task-I.json` (a [`GuestJob`]); the hidden verb
//! `ptelab task run FILE` boots it on its node and writes the guests'
//! outputs beside it (`task-I.answer.json`), which the submitter reads
//! back and stores as a local run's. Nothing the task does needs the
//! database, and no command line is composed: the job is the data.
//!
//! Every path in a job (kernel image, guest binary, plugin, files, log,
//! disk directory) is under ptelab's cache (the Slurm executor copies in
//! what is not), which is why a cluster needs the cache on a file system
//! its nodes share (docs/cluster.md).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::guest::boot::run::{run_boot, GuestJob, GuestOutput};

/// The schema of a task file.
pub const TASK_SCHEMA: &str = "ptelab/task/v1";
/// The schema of a task's answer file.
pub const ANSWER_SCHEMA: &str = "ptelab/task-answer/v1";

/// A task file.
#[derive(Debug, Serialize, Deserialize)]
pub struct TaskFile {
    pub schema: String,
    pub boot: GuestJob,
}

/// What a task answers: the outputs of its boot's commands, or why the
/// boot gave none.
#[derive(Debug, Default, Deserialize)]
struct AnswerFile {
    schema: String,
    #[serde(default)]
    outputs: Vec<GuestOutput>,
    #[serde(default)]
    error: Option<String>,
    /// The error is the user's to fix (exit 2 locally).
    #[serde(default)]
    usage: bool,
}

/// An [`AnswerFile`] as written.
#[derive(Serialize)]
struct AnswerRef<'a> {
    schema: &'a str,
    outputs: &'a [GuestOutput],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    usage: bool,
}

/// The task file's document for `job`.
pub fn document(job: &GuestJob) -> anyhow::Result<String> {
    #[derive(Serialize)]
    struct Ref<'a> {
        schema: &'a str,
        boot: &'a GuestJob,
    }
    Ok(serde_json::to_string_pretty(&Ref {
        schema: TASK_SCHEMA,
        boot: job,
    })?)
}

/// The schema a task file names: which verb of `ptelab task run` reads it
/// (a boot's, here; a bisect's build, `builds`).
pub fn schema_of(file: &Path) -> anyhow::Result<String> {
    #[derive(Deserialize)]
    struct Head {
        schema: String,
    }
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let head: Head = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a ptelab task", file.display()))?;
    Ok(head.schema)
}

/// `task-I` of the task file `task-I.json`: what its answer and marks are
/// named after.
fn stem(task: &Path) -> &str {
    task.file_stem().and_then(|s| s.to_str()).unwrap_or("task")
}

/// Where the answer of the task in `task` goes.
pub fn answer_path(task: &Path) -> PathBuf {
    task.with_file_name(format!("{}.answer.json", stem(task)))
}

/// The task in `file`, a document of `schema` (a boot's, or a bisect's
/// build, `builds`).
pub fn read_task<T: serde::de::DeserializeOwned>(file: &Path, schema: &str) -> anyhow::Result<T> {
    let found = schema_of(file)?;
    anyhow::ensure!(
        found == schema,
        "{} has schema '{found}', not {schema}: written by another ptelab",
        file.display()
    );
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a {schema} task", file.display()))
}

/// The file that says the run of command `k` of the task in `task` was
/// stored (by the ptelab that read the answer): a resumed batch hands the
/// answer over again, and its run must not be stored twice.
pub fn mark_path(task: &Path, k: usize) -> PathBuf {
    task.with_file_name(format!("{}.stored-{k}", stem(task)))
}

/// Remove the stored marks of the task in `task` (it runs again).
pub fn remove_marks(task: &Path) {
    let prefix = format!("{}.stored-", stem(task));
    let Some(Ok(rd)) = task.parent().map(std::fs::read_dir) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix))
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The answer of the task in `task`: None when it wrote none (it did not
/// run, or did not finish).
pub fn read_answer(task: &Path) -> Option<anyhow::Result<Vec<GuestOutput>>> {
    let path = answer_path(task);
    let bytes = std::fs::read(&path).ok()?;
    let doc: AnswerFile = match serde_json::from_slice(&bytes) {
        Ok(d) => d,
        Err(e) => {
            return Some(Err(anyhow::anyhow!(
                "{} is not a task's answer: {e}",
                path.display()
            )))
        }
    };
    if doc.schema != ANSWER_SCHEMA {
        return Some(Err(anyhow::anyhow!(
            "{} has schema '{}', not {ANSWER_SCHEMA}: written by another ptelab",
            path.display(),
            doc.schema
        )));
    }
    Some(match (doc.error, doc.usage) {
        (Some(why), true) => Err(crate::error::usage(why)),
        (Some(why), false) => Err(anyhow::anyhow!("{why}")),
        (None, _) => Ok(doc.outputs),
    })
}

/// `ptelab task run FILE`: boot the job in `file` here and write its
/// answer beside it. An error is written into the answer too, so that the
/// submitter says why; it is also returned (the task fails).
pub fn run_file(file: &Path) -> anyhow::Result<()> {
    let answer = boot_file(file);
    let doc = match &answer {
        Ok(outputs) => AnswerRef {
            schema: ANSWER_SCHEMA,
            outputs,
            error: None,
            usage: false,
        },
        Err(e) => AnswerRef {
            schema: ANSWER_SCHEMA,
            outputs: &[],
            error: Some(format!("{e:#}")),
            usage: crate::error::is_usage(e),
        },
    };
    write_answer(file, &doc)?;
    answer.map(|outputs| {
        for o in &outputs {
            eprintln!(
                "ptelab: the guest command exited {} (Linux {}, {}, {:.1} s boot to exit)",
                o.exit_code,
                o.kernel_release,
                o.accel.name(),
                o.boot_to_exit.as_secs_f64()
            );
        }
    })
}

/// Write the answer of the task in `file`, whole or not at all.
fn write_answer(file: &Path, doc: &AnswerRef) -> anyhow::Result<()> {
    let path = answer_path(file);
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec(doc)?)
        .and_then(|_| std::fs::rename(&tmp, &path))
        .with_context(|| format!("writing {}", path.display()))
}

fn boot_file(file: &Path) -> anyhow::Result<Vec<GuestOutput>> {
    let task: TaskFile = read_task(file, TASK_SCHEMA)?;
    let mut job = task.boot;
    // SIGTERM (scancel) stops the guest, as SIGINT does a local one.
    job.interrupted = crate::kernel::signals::interrupted();
    let mut needed: Vec<&Path> = vec![&job.kernel, &job.binary];
    needed.extend(job.files.iter().map(PathBuf::as_path));
    needed.extend(job.profile.as_ref().map(|p| p.library.as_path()));
    for p in needed {
        if !p.is_file() {
            return Err(crate::error::usage(format!(
                "{} is not on this machine: a task reads the submitting ptelab's cache, which \
                 must be on a file system every node mounts at the same path (pass --cache DIR)",
                p.display()
            )));
        }
    }
    if let Some(dir) = job.log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    run_boot(&job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::boot::run::Profiling;
    use crate::record::Accel;
    use crate::workload::Arch;
    use std::time::Duration;

    fn job(dir: &Path) -> GuestJob {
        GuestJob {
            arch: Arch::Arm64,
            kernel: dir.join("vmlinuz"),
            binary: dir.join("ptelab-guest"),
            steps: vec![crate::guest::boot::initramfs::JobStep {
                args: vec!["bench".into(), "--windows".into()],
                ..Default::default()
            }],
            files: vec![],
            append: vec!["transparent_hugepage=never".into()],
            accel: Accel::Tcg,
            memory_mib: 1024,
            disk: None,
            timeout: Duration::from_secs(300),
            log: dir.join("logs/boot.log"),
            interrupted: crate::kernel::signals::interrupted(),
            profile: Some(Profiling {
                library: dir.join("plugin.so"),
                symbols: true,
            }),
            setup: crate::guest::boot::qemu::Setup {
                seed: Some(7),
                ..Default::default()
            },
        }
    }

    /// A job read back from its task file is the job written.
    #[test]
    fn a_task_file_round_trips() {
        let d = tempfile::tempdir().unwrap();
        let j = job(d.path());
        let doc = document(&j).unwrap();
        let back: TaskFile = serde_json::from_str(&doc).unwrap();
        assert_eq!(back.schema, TASK_SCHEMA);
        assert_eq!(format!("{:?}", back.boot), format!("{j:?}"));
    }

    /// A task whose files are not on its node fails with the remedy, and
    /// says so in its answer, as a usage error.
    #[test]
    fn a_task_missing_its_files_answers_why() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("task-0.json");
        std::fs::write(&file, document(&job(d.path())).unwrap()).unwrap();
        let e = run_file(&file).unwrap_err();
        assert!(format!("{e:#}").contains("--cache DIR"), "{e:#}");
        let answer = read_answer(&file).expect("an answer").unwrap_err();
        assert!(crate::error::is_usage(&answer));
        assert!(format!("{answer:#}").contains("vmlinuz is not on this machine"));
    }

    /// Outputs, counts included, come back as the node's boot gave them.
    #[test]
    fn an_answer_round_trips() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("task-3.json");
        assert_eq!(answer_path(&file), d.path().join("task-3.answer.json"));
        assert!(read_answer(&file).is_none());
        let counts = ptelab_counts::record::parse(
            "ptelab-plugin v1 target=aarch64\nW 0 1 500 20 0 0 0 0 0 0 0 2 0\nT ffff800080001000 3 30\nE\n",
        )
        .unwrap();
        let out = || GuestOutput {
            stdout: b"{\"schema\":\"ptelab/bench/v1\"}".to_vec(),
            exit_code: 0,
            accel: Accel::Tcg,
            qemu_version: "10.0.2".into(),
            kernel_release: "6.19.6-arm64".into(),
            boot_to_exit: Duration::from_millis(12_345),
            counts: Some(counts.clone()),
            symbols: Some(vec![1, 2, 3]),
            symbol_table: None,
        };
        let outputs = [out()];
        let doc = AnswerRef {
            schema: ANSWER_SCHEMA,
            outputs: &outputs,
            error: None,
            usage: false,
        };
        write_answer(&file, &doc).unwrap();
        let back = read_answer(&file).unwrap().unwrap();
        assert_eq!(format!("{back:?}"), format!("{:?}", vec![out()]));
    }
}
