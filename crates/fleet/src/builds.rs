//! Kernel builds as Slurm tasks (`slurm`): a git-tree bisect's steps and
//! the tree kernels of `vm --executor slurm`. Each is a file (a
//! [`BuildTask`]: the builder, the commit checked out in its tree and the
//! id its image is kept under) that the hidden `ptelab task run FILE`
//! builds on its node as a local build does (`guest::build::Builder`), into
//! the image cache, build directories and logs of the shared cache
//! (`--cache DIR`), where the guests' tasks then read the images.
//!
//! Independent builds (a bisect's endpoints, a base and its patch) go as
//! one job array; a bisect step's build depends on the verdict before it:
//! a job of its own, one task. No kernel builds on the submitting (login)
//! node either way.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};

use crate::executor::Executing;
use crate::guest::build::{label, Builder, Checkout};
use crate::guest::source::cache::Cache;
use crate::guest::source::{Kernel, KernelSpec, Options};
use crate::slurm::{self, Batch, Request, Task, TaskState};

/// The schema of a build task's file.
pub const BUILD_TASK_SCHEMA: &str = "ptelab/build-task/v1";

/// Lines of a failed build's log a task prints: the submitting ptelab
/// shows the last [`slurm::LOG_TAIL`] lines of a failed task's stderr,
/// which also hold ptelab's own lines around the log in the rest.
const BUILD_LOG_TAIL: usize = slurm::LOG_TAIL - 5;

/// One commit to build, checked out in the builder's tree.
#[derive(Debug, Serialize, Deserialize)]
pub struct BuildTask {
    pub schema: String,
    pub builder: Builder,
    /// The commit checked out there (full id).
    pub commit: String,
    /// What its image is kept under, when not the commit (a tree kernel
    /// with a series: `COMMIT+SERIES`, `commit` then the series' last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// Run `builds` (on a file system the nodes mount) as the tasks of one job
/// array, under the cache at `cache`. Returns each image, or why there is
/// none (the build failed: its task was reported with its log; or the
/// task did not finish), as `Builder::build` does locally.
pub fn build(
    cache: &Path,
    req: &Request,
    builds: &[Checkout],
) -> anyhow::Result<Vec<Result<PathBuf, String>>> {
    let opts = req.options.clone();
    // Only ptelab itself: the builds need no guest binary.
    let program = slurm::stage_ptelab(cache)?;
    let docs = builds
        .iter()
        .map(|b| {
            serde_json::to_string_pretty(&BuildTask {
                schema: BUILD_TASK_SCHEMA.into(),
                builder: b.builder.clone(),
                commit: b.head.clone(),
                id: (b.id != b.head).then(|| b.id.clone()),
            })
        })
        .collect::<Result<Vec<String>, _>>()?;
    let key = slurm::batch_key("kernel build", std::slice::from_ref(&docs));
    let dir = Batch::dir_of(cache, &key);
    let tasks: Vec<Task> = builds
        .iter()
        .zip(docs)
        .enumerate()
        .map(|(i, (b, doc))| Task {
            name: format!("build {} {}", label(&b.id), b.builder.arch.name()),
            program: program.clone(),
            args: vec![
                "task".into(),
                "run".into(),
                Batch::data_file(&dir, i).display().to_string(),
            ],
            data: Some(doc),
        })
        .collect();
    let batch = Batch::new(cache, key, tasks);
    // `--resume` picks up an array of these builds submitted before; a
    // build never submitted goes afresh.
    let resume = opts.resume && batch.submitted_before();
    let built = |i: usize| {
        let b = &builds[i];
        b.builder.image(&b.id).is_ok_and(|p| p.is_file())
    };
    let outcome = batch.run(&slurm::Options { resume, ..opts }, &built)?;
    let job = outcome.job.as_deref().unwrap_or("(an earlier one)");
    let mut images = Vec::new();
    for (i, b) in builds.iter().enumerate() {
        let image = b.builder.image(&b.id)?;
        let what = match &outcome.states[i] {
            TaskState::Done if image.is_file() => {
                images.push(Ok(image));
                continue;
            }
            TaskState::Failed(why) => why.clone(),
            TaskState::Done => "ended without writing an image".into(),
            other => format!("{other:?}"),
        };
        images.push(Err(format!(
            "the build failed (Slurm job {job} task {i}: {what}); log {}, the task's {}",
            b.builder.log(&b.id).display(),
            batch.logs(i).1.display()
        )));
    }
    batch.close(images.iter().all(Result::is_ok));
    Ok(images)
}

/// The kernels `specs` name, resolved; with `Executing::Slurm` the builds
/// they need first run on the nodes, as one job array, so that resolving
/// finds their images in the shared cache and builds nothing here.
pub fn resolve(
    cache: &Cache,
    specs: &[KernelSpec],
    opts: &Options,
    executing: &Executing,
) -> anyhow::Result<Vec<Kernel>> {
    if let Executing::Slurm(req) = executing {
        let (mut named, mut checkouts) = (Vec::new(), Vec::new());
        for spec in specs {
            if let Some(c) = spec.pending(cache, opts)? {
                eprintln!("ptelab: kernel {spec} builds on the cluster …");
                named.push(spec);
                checkouts.push(c);
            }
        }
        if !checkouts.is_empty() {
            let images = build(&cache.root, req, &checkouts)?;
            for (spec, image) in named.iter().zip(images) {
                if let Err(why) = image {
                    anyhow::bail!("{spec}: {why}");
                }
            }
        }
        // The trees' locks go with the checkouts: the images are built.
        drop(checkouts);
    }
    specs
        .iter()
        .map(|spec| {
            eprintln!("ptelab: kernel {spec} …");
            spec.resolve(cache, opts)
        })
        .collect()
}

/// `ptelab task run FILE` of a build task: build the commit as a local
/// build would. `Ok(false)` is a failed build, the tail of its log on
/// stderr. `interrupted` (SIGINT, SIGTERM) stops it.
pub fn run_task_file(file: &Path, interrupted: &AtomicBool) -> anyhow::Result<bool> {
    let task: BuildTask = crate::task::read_task(file, BUILD_TASK_SCHEMA)?;
    let id = task.id.unwrap_or_else(|| task.commit.clone());
    let (builder, commit) = (task.builder, task.commit);
    // The tree must hold the commit: the build reads whatever is checked out.
    let repo = crate::guest::build::git::Repo::open(&builder.repo, "the build's tree")?;
    let head = repo.git(&["rev-parse", "HEAD"])?;
    if head.trim() != commit {
        crate::error::bail_usage!(
            "{} has {} checked out, not {commit}: the submitting ptelab checks the commit out \
             before the task starts; was the tree changed meanwhile?",
            repo.dir.display(),
            head.trim(),
        );
    }
    builder.check()?;
    match builder.build(&id, interrupted)? {
        Ok(image) => {
            println!("{}", image.display());
            Ok(true)
        }
        Err(why) => {
            let log = std::fs::read_to_string(builder.log(&id)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            for l in &lines[lines.len().saturating_sub(BUILD_LOG_TAIL)..] {
                eprintln!("{l}");
            }
            eprintln!("ptelab: {}: {why}", label(&id));
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::build::{path_hash, Config};
    use crate::workload::Arch;

    /// A task's file gives back the same builder: the same image, log and
    /// build directory; another tree of the repository builds in a
    /// directory of its own, into the same image cache.
    #[test]
    fn a_build_task_reads_back_into_the_same_build() {
        // The config's content is part of what names the image.
        let d = tempfile::tempdir().unwrap();
        let config = d.path().join("my config");
        std::fs::write(&config, "CONFIG_TRANSPARENT_HUGEPAGE=y\n").unwrap();
        let b = Builder {
            repo: "/lab/linux".into(),
            arch: Arch::Arm64,
            config: Config::File(config),
            command: Some("cp \"$(cat KERNEL)\" \"$OUT\"".into()),
            root: "/shared/ptelab/builds".into(),
            compiler: "aarch64-linux-gnu-gcc (Debian 12.2.0-14) 12.2.0".into(),
            needs: [crate::guest::build::kconfig::Need::LargeFolios].into(),
        };
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let doc = serde_json::to_string(&BuildTask {
            schema: BUILD_TASK_SCHEMA.into(),
            builder: b.clone(),
            commit: commit.into(),
            id: None,
        })
        .unwrap();
        let back: BuildTask = serde_json::from_str(&doc).unwrap();
        assert_eq!(back.commit, commit);
        assert_eq!(format!("{:?}", back.builder), format!("{b:?}"));
        assert_eq!(
            back.builder.image(commit).unwrap(),
            b.image(commit).unwrap()
        );
        assert_eq!(back.builder.log(commit), b.log(commit));
        let side = b.in_tree(Path::new("/shared/ptelab/builds/trees/x-1"));
        assert_ne!(path_hash(&side.repo), path_hash(&b.repo));
        assert_eq!(side.image(commit).unwrap(), b.image(commit).unwrap());
    }
}
