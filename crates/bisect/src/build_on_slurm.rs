//! `bisect --repo … --executor slurm`: a git-tree bisect's kernel builds as
//! Slurm tasks (`fleet::slurm`), each the hidden `ptelab kernel build` that
//! runs on its node the build a local step runs (`build::Builder`), into
//! the image cache, build directories and logs of the shared cache
//! (`--cache DIR`), where the guests' tasks then read the images.
//!
//! The endpoints' builds are independent: one job array. A step's build
//! depends on the verdict before it: a job of its own, one task, so that no
//! kernel builds on the submitting (login) node either way.

use std::path::PathBuf;

use super::build::{short, Builder};
use super::Setup;
use crate::fleet::slurm::{self, Batch, Request, Task, TaskState};

/// Build each `(commit, builder)`, the commit checked out in the builder's
/// tree (on a file system the nodes mount), as the tasks of one job array.
/// Returns each image, or why there is none (the build failed: its task
/// was reported with its log; or the task did not finish), as
/// `Builder::build` does locally.
pub fn build(
    setup: &Setup,
    req: &Request,
    builds: &[(&str, Builder)],
) -> anyhow::Result<Vec<Result<PathBuf, String>>> {
    let opts = req.options.clone();
    // Only ptelab itself: the builds need no guest binary.
    let program = slurm::stage_ptelab(&setup.cache.root)?;
    let tasks: Vec<Task> = builds
        .iter()
        .map(|(commit, b)| Task {
            name: format!("build {} {}", short(commit), b.arch.name()),
            program: program.clone(),
            args: b.task_args(commit),
            data: None,
        })
        .collect();
    let lines: Vec<Vec<String>> = tasks.iter().map(|t| t.args.clone()).collect();
    let batch = Batch::new(
        &setup.cache.root,
        slurm::batch_key("bisect build", &lines),
        tasks,
    );
    // `--resume` picks up an array of these builds submitted before; a
    // build never submitted goes afresh.
    let resume = opts.resume && batch.submitted_before();
    let built = |i: usize| {
        let (commit, b) = &builds[i];
        b.image(commit).is_ok_and(|p| p.is_file())
    };
    let outcome = batch.run(&slurm::Options { resume, ..opts }, &built)?;
    let job = outcome.job.as_deref().unwrap_or("(an earlier one)");
    let mut images = Vec::new();
    for (i, (commit, b)) in builds.iter().enumerate() {
        let image = b.image(commit)?;
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
            b.log(commit).display(),
            batch.logs(i).1.display()
        )));
    }
    batch.close(images.iter().all(Result::is_ok));
    Ok(images)
}
