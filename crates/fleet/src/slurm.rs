//! Guest boots as the tasks of a Slurm job array (`--executor slurm`,
//! docs/cluster.md): [`Slurm`] writes each boot's job to a task file
//! (`crate::task`) and submits one `sbatch --array` of a generated script
//! whose task I runs `ptelab task run task-I.json`; then it waits, with
//! progress per task from `squeue` (and `sacct` where Slurm keeps
//! accounting), reports each failed task with its log, and reads the
//! answers back for the fleet.
//!
//! - A batch is named by a hash of its tasks, so the same command finds
//!   its last job array again: its state file says which tasks finished,
//!   and `--resume` submits only the others.
//! - SIGINT/SIGTERM cancel the array (`scancel`) and wait until nothing of
//!   it is queued or running.
//! - This module knows nothing of results and starts no guest: a task
//!   boots its guest, the fleet stores what it answered.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::usage;
use crate::executor::{Answered, Boot, Executor};

/// How often the queue is asked about the tasks.
pub const POLL: Duration = Duration::from_secs(2);

/// How long to wait for a cancelled array to leave the queue.
const CANCEL_WAIT: Duration = Duration::from_secs(60);

/// Lines of a failed task's log shown in the report.
pub const LOG_TAIL: usize = 20;

/// Batch directories kept under `CACHE/slurm`: a batch read back in full
/// removes its own, so these are the ones whose logs or `--resume` may
/// still be wanted; the oldest go first.
const KEEP_BATCHES: usize = 20;

/// Staged copies of each binary kept under `CACHE/bin` (about 75 MB each):
/// the most recently used, so that a task still queued from a recent build
/// finds its own.
const KEEP_BINARIES: usize = 4;

/// One task of the array: a program and its arguments.
#[derive(Clone, Debug)]
pub struct Task {
    /// What progress lines call it (`debian:6.17.13 sweep`).
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// A document written as `task-I.json` in the batch's directory at
    /// submission (what `ptelab task run` reads).
    pub data: Option<String>,
}

/// How the array is submitted.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub partition: Option<String>,
    /// `sbatch --time`, in Slurm's format.
    pub time: Option<String>,
    /// Free arguments for `sbatch`.
    pub sbatch: Vec<String>,
    /// Submit only the tasks that did not finish last time.
    pub resume: bool,
    /// Environment given to `sbatch`, which passes it to every task
    /// (`--export=ALL`, Slurm's default).
    pub env: Vec<(String, OsString)>,
    pub poll: Duration,
}

/// Where a task stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskState {
    Pending,
    Running,
    Done,
    /// Slurm's state and reason (`FAILED NonZeroExitCode`).
    Failed(String),
}

impl TaskState {
    fn terminal(&self) -> bool {
        matches!(self, TaskState::Done | TaskState::Failed(_))
    }

    fn word(&self) -> &str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Done => "done",
            TaskState::Failed(_) => "failed",
        }
    }

    /// A Slurm job state (`squeue %T`, `sacct State`) and its reason.
    fn of_slurm(state: &str, reason: &str) -> TaskState {
        // sacct says "CANCELLED by 0".
        let state = state.split_whitespace().next().unwrap_or("");
        match state {
            "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED"
            | "RESV_DEL_HOLD" | "SUSPENDED" => TaskState::Pending,
            "RUNNING" | "COMPLETING" | "STAGE_OUT" | "SIGNALING" | "RESIZING" => TaskState::Running,
            "COMPLETED" => TaskState::Done,
            other => TaskState::Failed(match reason {
                "" | "None" => other.to_string(),
                r => format!("{other} {r}"),
            }),
        }
    }
}

/// What became of every task.
#[derive(Debug)]
pub struct Outcome {
    /// The job array's id (None: every task had finished before).
    pub job: Option<String>,
    pub states: Vec<TaskState>,
}

/// The state file of a batch (`state.json` in its directory).
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// Every job array submitted for the batch, oldest first.
    jobs: Vec<String>,
    /// Per task: finished with success in some job.
    done: Vec<bool>,
}

/// A set of tasks submitted together, and its directory (script, state,
/// one log per task).
pub struct Batch {
    pub dir: PathBuf,
    pub key: String,
    pub tasks: Vec<Task>,
}

/// The name of a batch: a hash of `label` and its tasks' command lines
/// (before anything that depends on the name is added to them).
pub fn batch_key(label: &str, command_lines: &[Vec<String>]) -> String {
    let mut h = Sha256::new();
    h.update(label.as_bytes());
    for line in command_lines {
        h.update(b"\n");
        for a in line {
            h.update(a.as_bytes());
            h.update(b"\0");
        }
    }
    h.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Batch {
    /// The batch `key` of `tasks`, kept under `root/slurm/KEY`.
    pub fn new(root: &Path, key: String, tasks: Vec<Task>) -> Batch {
        Batch {
            dir: Batch::dir_of(root, &key),
            key,
            tasks,
        }
    }

    /// The directory of batch `key` under `root`.
    pub fn dir_of(root: &Path, key: &str) -> PathBuf {
        root.join("slurm").join(key)
    }

    /// Where task `i`'s document goes ([`Task::data`]).
    pub fn data_file(dir: &Path, i: usize) -> PathBuf {
        dir.join(format!("task-{i}.json"))
    }

    /// Task `i`'s standard output and error.
    pub fn logs(&self, i: usize) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("task-{i}.out")),
            self.dir.join(format!("task-{i}.err")),
        )
    }

    /// Whether a job array of this batch was submitted before (what
    /// `--resume` needs).
    pub fn submitted_before(&self) -> bool {
        self.state_path().is_file()
    }

    fn state_path(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    fn load_state(&self) -> anyhow::Result<Option<State>> {
        match std::fs::read(self.state_path()) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).with_context(|| {
                format!(
                    "{} is not a ptelab batch state",
                    self.state_path().display()
                )
            })?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", self.state_path().display())),
        }
    }

    fn save_state(&self, state: &State) -> anyhow::Result<()> {
        let tmp = self.dir.join(format!(".state.json.{}", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec_pretty(state)?)
            .and_then(|_| std::fs::rename(&tmp, self.state_path()))
            .with_context(|| format!("writing {}", self.state_path().display()))
    }

    /// The script every task runs: a case on `SLURM_ARRAY_TASK_ID`.
    fn script(&self) -> String {
        let mut s = format!(
            "#!/bin/sh\n# ptelab batch {} ({} tasks; docs/cluster.md)\ncase \"$SLURM_ARRAY_TASK_ID\" in\n",
            self.key,
            self.tasks.len()
        );
        for (i, t) in self.tasks.iter().enumerate() {
            let line: Vec<String> = std::iter::once(t.program.display().to_string())
                .chain(t.args.iter().cloned())
                .map(|a| quote(&a))
                .collect();
            s.push_str(&format!("{i}) exec {} ;;\n", line.join(" ")));
        }
        s.push_str(
            "*) echo \"ptelab: this batch has no task $SLURM_ARRAY_TASK_ID\" >&2; exit 2 ;;\nesac\n",
        );
        s
    }

    /// Submit the tasks not yet done, wait for them with progress on
    /// stderr, and report every failed one with its log. `left(i)` says
    /// whether task `i` left its result behind: for a task that left the
    /// queue unseen where Slurm keeps no accounting, and, resumed, for one
    /// that finished after its submitter stopped watching.
    pub fn run(&self, opts: &Options, left: &dyn Fn(usize) -> bool) -> anyhow::Result<Outcome> {
        // Catch SIGINT/SIGTERM from before the submission on, so that no
        // signal kills this process with the array left queued.
        crate::kernel::signals::interrupted();
        let n = self.tasks.len();
        let mut state = match (opts.resume, self.load_state()?) {
            (true, Some(s)) if s.done.len() == n => s,
            (true, _) => {
                return Err(usage(format!(
                    "--resume: no earlier job array of these tasks in {}: run it without --resume",
                    self.dir.display()
                )))
            }
            (false, _) => State {
                jobs: Vec::new(),
                done: vec![false; n],
            },
        };
        let todo: Vec<usize> = (0..n)
            .filter(|&i| !(state.done[i] || opts.resume && left(i)))
            .collect();
        if todo.is_empty() {
            eprintln!("ptelab: every task of batch {} finished before", self.key);
            return Ok(Outcome {
                job: None,
                states: vec![TaskState::Done; n],
            });
        }
        if opts.resume {
            eprintln!(
                "ptelab: resuming batch {}: {} of {n} tasks to run again",
                self.key,
                todo.len()
            );
        }
        let job = self.submit(opts, &todo)?;
        state.jobs.push(job.clone());
        if let Err(e) = self.save_state(&state) {
            // Nothing may stay queued that no state file names.
            cancel(&job, opts);
            return Err(e);
        }
        let states = self.wait(&job, &todo, opts, left);
        let interrupted = crate::kernel::signals::interrupted().load(Ordering::SeqCst);
        let mut all = vec![TaskState::Done; n];
        for (&i, s) in todo.iter().zip(states) {
            state.done[i] = s == TaskState::Done;
            all[i] = s;
        }
        self.save_state(&state)?;
        if interrupted {
            anyhow::bail!(
                "interrupted: Slurm job {job} cancelled, nothing of it is left queued; `--resume` \
                 runs the tasks that did not finish (batch kept in {})",
                self.dir.display()
            );
        }
        for &i in &todo {
            if let TaskState::Failed(why) = &all[i] {
                self.report_failure(&job, i, why);
            }
        }
        Ok(Outcome {
            job: Some(job),
            states: all,
        })
    }

    /// Once the caller has read its tasks' results back: remove the
    /// batch's directory when every one was (no log or `--resume` needs
    /// it), else keep it and say where.
    pub fn close(&self, all_read: bool) {
        if !self.dir.exists() {
            return;
        }
        if all_read {
            if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                eprintln!(
                    "ptelab: cannot remove batch directory {}: {e}",
                    self.dir.display()
                );
            }
        } else {
            eprintln!(
                "ptelab: batch {} kept in {}: its tasks' logs, and what --resume needs",
                self.key,
                self.dir.display()
            );
        }
    }

    /// Submit, removing the batch's directory again when sbatch refuses a
    /// batch this submission created: a refusal leaves nothing behind (one
    /// submitted before keeps its logs and what `--resume` needs).
    fn submit(&self, opts: &Options, todo: &[usize]) -> anyhow::Result<String> {
        let fresh = !self.dir.exists();
        let job = self.submit_in_dir(opts, todo);
        if job.is_err() && fresh {
            let _ = std::fs::remove_dir_all(&self.dir);
            if let Some(parent) = self.dir.parent() {
                // Only when empty: other batches stay.
                let _ = std::fs::remove_dir(parent);
            }
        }
        job
    }

    fn submit_in_dir(&self, opts: &Options, todo: &[usize]) -> anyhow::Result<String> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        if let Some(parent) = self.dir.parent() {
            prune_batches(parent, KEEP_BATCHES, &self.dir);
        }
        let script = self.dir.join("job.sh");
        std::fs::write(&script, self.script())
            .and_then(|_| std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)))
            .with_context(|| format!("writing {}", script.display()))?;
        for &i in todo {
            let (out, err) = self.logs(i);
            let _ = std::fs::remove_file(out);
            let _ = std::fs::remove_file(err);
            if let Some(data) = &self.tasks[i].data {
                let file = Batch::data_file(&self.dir, i);
                let _ = std::fs::remove_file(crate::task::answer_path(&file));
                crate::task::remove_marks(&file);
                std::fs::write(&file, data)
                    .with_context(|| format!("writing {}", file.display()))?;
            }
        }
        let list: Vec<String> = todo.iter().map(usize::to_string).collect();
        let mut cmd = client("sbatch", opts);
        cmd.arg("--parsable")
            .arg(format!("--array={}", list.join(",")))
            .arg(format!("--job-name=ptelab-{}", self.key))
            .arg(format!(
                "--output={}",
                self.dir.join("task-%a.out").display()
            ))
            .arg(format!(
                "--error={}",
                self.dir.join("task-%a.err").display()
            ));
        if let Some(p) = &opts.partition {
            cmd.arg(format!("--partition={p}"));
        }
        if let Some(t) = &opts.time {
            cmd.arg(format!("--time={t}"));
        }
        cmd.args(&opts.sbatch).arg(&script);
        let out = cmd.output().map_err(|e| {
            usage(format!(
                "cannot run sbatch ({e}): --executor slurm needs Slurm's client commands \
                 (sbatch, squeue, scancel) on this machine and a cluster to submit to"
            ))
        })?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            return Err(usage(format!(
                "sbatch refused the job array ({}): {}{}",
                out.status,
                said.trim(),
                remedy(&said, opts).map_or_else(String::new, |r| format!("\n{r}"))
            )));
        }
        // `--parsable` prints `JOBID` or `JOBID;CLUSTER`.
        let text = String::from_utf8_lossy(&out.stdout);
        let job = text.trim().split(';').next().unwrap_or("").to_string();
        anyhow::ensure!(
            !job.is_empty() && job.chars().all(|c| c.is_ascii_digit()),
            "sbatch answered '{}', not a job id",
            text.trim()
        );
        eprintln!(
            "ptelab: submitted Slurm job {job}: {} tasks ({}), logs in {}",
            todo.len(),
            list.join(","),
            self.dir.display()
        );
        Ok(job)
    }

    /// Poll until every task in `todo` ended (or, interrupted, until the
    /// cancelled array left the queue); returns their states in order.
    fn wait(
        &self,
        job: &str,
        todo: &[usize],
        opts: &Options,
        stored: &dyn Fn(usize) -> bool,
    ) -> Vec<TaskState> {
        let interrupted = crate::kernel::signals::interrupted();
        let mut states: BTreeMap<usize, TaskState> =
            todo.iter().map(|&i| (i, TaskState::Pending)).collect();
        let mut missing_rounds: BTreeMap<usize, u32> = BTreeMap::new();
        let mut last_summary = String::new();
        loop {
            if interrupted.load(Ordering::SeqCst) {
                cancel(job, opts);
                return todo
                    .iter()
                    .map(|i| match &states[i] {
                        s if s.terminal() => s.clone(),
                        _ => TaskState::Failed("CANCELLED (interrupted)".into()),
                    })
                    .collect();
            }
            let seen = query(job, opts);
            for &i in todo {
                if states[&i].terminal() {
                    continue;
                }
                let new = match seen.get(&i) {
                    Some(s) => s.clone(),
                    None => {
                        // Not in the queue and no accounting: ended unseen
                        // (or not listed yet, right after submission).
                        let rounds = missing_rounds.entry(i).or_default();
                        *rounds += 1;
                        if *rounds < 3 {
                            continue;
                        }
                        if stored(i) {
                            TaskState::Done
                        } else {
                            TaskState::Failed(
                                "left the queue unseen, with nothing stored (Slurm keeps no \
                                 accounting here)"
                                    .into(),
                            )
                        }
                    }
                };
                if new != states[&i] {
                    let t = &self.tasks[i];
                    eprintln!(
                        "ptelab: job {job} task {i} ({}): {}",
                        t.name,
                        match &new {
                            TaskState::Failed(why) => format!("failed ({why})"),
                            s => s.word().to_string(),
                        }
                    );
                    states.insert(i, new);
                }
            }
            let count = |w: &str| states.values().filter(|s| s.word() == w).count();
            let summary = format!(
                "{} pending, {} running, {} done, {} failed",
                count("pending"),
                count("running"),
                count("done"),
                count("failed")
            );
            if summary != last_summary {
                eprintln!("ptelab: job {job}: {summary}");
                last_summary = summary;
            }
            if states.values().all(TaskState::terminal) {
                return todo.iter().map(|i| states[i].clone()).collect();
            }
            crate::kernel::signals::idle_until(Instant::now() + opts.poll);
        }
    }

    fn report_failure(&self, job: &str, i: usize, why: &str) {
        let (out, err) = self.logs(i);
        let mut msg = format!(
            "ptelab: job {job} task {i} ({}) failed: {why}\n  stdout: {}\n  stderr: {}\n",
            self.tasks[i].name,
            out.display(),
            err.display()
        );
        let text = std::fs::read_to_string(&err).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for l in &lines[lines.len().saturating_sub(LOG_TAIL)..] {
            msg.push_str(&format!("  | {l}\n"));
        }
        let _ = std::io::stderr().write_all(msg.as_bytes());
    }
}

/// Remove all but the `keep` most recently changed batch directories of
/// `dir` (a task writing its log, a state saved, changes a batch's
/// directory), never `current`.
fn prune_batches(dir: &Path, keep: usize, current: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut batches: Vec<(std::time::SystemTime, PathBuf)> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| e.path() != current)
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    batches.sort();
    // `current` is one of the kept.
    let old = batches.len().saturating_sub(keep.saturating_sub(1));
    for (_, p) in &batches[..old] {
        let _ = std::fs::remove_dir_all(p);
    }
}

/// What to do about a refusal sbatch explains only in Slurm's words (the
/// messages of an unconfigured client, a stopped controller, a stopped
/// munge); None for one it explains itself (a bad partition, a limit).
fn remedy(stderr: &str, opts: &Options) -> Option<String> {
    let conf = opts
        .env
        .iter()
        .find(|(k, _)| k == "SLURM_CONF")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("SLURM_CONF"))
        .map_or_else(
            || "/etc/slurm/slurm.conf".to_string(),
            |v| v.to_string_lossy().into_owned(),
        );
    let said = stderr.to_lowercase();
    if said.contains("configuration source")
        || said.contains("configuration file")
        || (said.contains("slurm.conf") && said.contains("no such file"))
    {
        Some(format!(
            "remedy: this machine has no Slurm configuration ({conf} is missing): copy the \
             cluster's slurm.conf there, or set SLURM_CONF to it, or run ptelab on a machine of \
             the cluster; `scontrol ping` then names the controller (docs/cluster.md)"
        ))
    } else if said.contains("munge") || said.contains("authentication") {
        Some(
            "remedy: Slurm could not authenticate this user: start munge (`systemctl start \
             munge`) with the cluster's /etc/munge/munge.key, then check with `munge -n | unmunge`"
                .to_string(),
        )
    } else if said.contains("unable to contact slurm controller")
        || said.contains("connect failure")
        || said.contains("connection refused")
    {
        Some(format!(
            "remedy: no Slurm controller answers: start it (`systemctl start slurmctld` on the \
             host SlurmctldHost names in {conf}; `slurmd` on the nodes), then check with \
             `scontrol ping` and `sinfo` (docs/cluster.md)"
        ))
    } else {
        None
    }
}

/// A Slurm client command, with the batch's environment (which may say
/// where the cluster is: `SLURM_CONF`).
fn client(tool: &str, opts: &Options) -> Command {
    let mut cmd = Command::new(tool);
    for (k, _) in std::env::vars_os().filter(|(k, _)| kept_from_tasks(k)) {
        cmd.env_remove(k);
    }
    cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// Whether the variable `name` stays out of Slurm's clients: sbatch hands
/// its environment to every task, and no task needs the database's URL or
/// libpq's settings (a password among them).
fn kept_from_tasks(name: &std::ffi::OsStr) -> bool {
    name == "PTELAB_DB" || name.to_str().is_some_and(|k| k.starts_with("PG"))
}

/// Every task of `job` that the queue (or accounting) knows, with its state.
fn query(job: &str, opts: &Options) -> BTreeMap<usize, TaskState> {
    let mut found = BTreeMap::new();
    // -r: one line per array task, pending ones too; --states=all: also
    // those that ended within MinJobAge.
    if let Ok(out) = client("squeue", opts)
        .args(["-h", "-r", "--states=all", "-o", "%K|%T|%r", "-j", job])
        .output()
    {
        if out.status.success() {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let f: Vec<&str> = line.split('|').collect();
                if let (Some(Ok(i)), Some(state)) = (f.first().map(|k| k.parse()), f.get(1)) {
                    found.insert(i, TaskState::of_slurm(state, f.get(2).unwrap_or(&"")));
                }
            }
        }
    }
    // Accounting, where Slurm keeps it, knows tasks that left the queue.
    if let Ok(out) = client("sacct", opts)
        .args(["-n", "-X", "-P", "-o", "JobID,State,ExitCode", "-j", job])
        .output()
    {
        if out.status.success() {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let f: Vec<&str> = line.split('|').collect();
                let task = f
                    .first()
                    .and_then(|id| id.split_once('_'))
                    .and_then(|(_, t)| t.parse().ok());
                if let (Some(i), Some(state)) = (task, f.get(1)) {
                    found
                        .entry(i)
                        .or_insert_with(|| TaskState::of_slurm(state, f.get(2).unwrap_or(&"")));
                }
            }
        }
    }
    found
}

/// `scancel` the array and wait until none of it is queued or running.
fn cancel(job: &str, opts: &Options) {
    eprintln!("ptelab: cancelling Slurm job {job} …");
    if let Err(e) = client("scancel", opts).arg(job).status() {
        eprintln!("ptelab: scancel {job}: {e}");
        return;
    }
    let start = Instant::now();
    while start.elapsed() < CANCEL_WAIT {
        let live = client("squeue", opts)
            .args([
                "-h",
                "-r",
                "-t",
                "PENDING,RUNNING,COMPLETING",
                "-o",
                "%i",
                "-j",
                job,
            ])
            .output()
            .map(|o| o.status.success() && !o.stdout.is_empty())
            .unwrap_or(false);
        if !live {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("ptelab: Slurm job {job} is still in the queue after scancel");
}

/// What `--executor slurm` and its options asked for, as every command
/// that boots guests takes it.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub options: Options,
}

/// Boots as the tasks of one Slurm job array per call
/// ([`crate::executor`]).
pub struct Slurm {
    /// The cache every node reads: kernels, binaries, batches, logs.
    cache: PathBuf,
    req: Request,
}

impl Slurm {
    pub fn new(cache: &Path, req: Request) -> Slurm {
        Slurm {
            cache: cache.to_path_buf(),
            req,
        }
    }
}

impl Executor for Slurm {
    fn boot(&self, mut boots: Vec<Boot>) -> anyhow::Result<Vec<Answered>> {
        // The binaries a task runs, by content: a rebuild here does not
        // change what a queued task boots.
        let program = stage_ptelab(&self.cache)?;
        let bin = self.cache.join("bin");
        for b in &mut boots {
            let name = format!("ptelab-guest-{}", b.job.arch.name());
            b.job.binary = copy_by_content(&b.job.binary, &bin, &name)?;
            if let Some(p) = &mut b.job.profile {
                p.library = copy_by_content(&p.library, &bin, "ptelab-plugin")?;
            }
            // An image of your own build and `--file`s may be anywhere
            // here: the nodes read copies in the cache.
            // (Not pruned: one command may stage any number of them.)
            if !b.job.kernel.starts_with(&self.cache) {
                b.job.kernel = copy_keeping_name(&b.job.kernel, &bin)?;
            }
            for f in &mut b.job.files {
                if !f.starts_with(&self.cache) {
                    *f = copy_keeping_name(f, &bin)?;
                }
            }
        }
        // Named by the jobs less what changes between two runs of one
        // command (the log's name is the time; the symbols are asked for
        // until a first answer cached them), so that the same command finds
        // its batch again.
        let mut docs = Vec::new();
        for b in &boots {
            let mut v = serde_json::to_value(&b.job)?;
            v["log"] = serde_json::Value::Null;
            if let Some(p) = v["profile"].as_object_mut() {
                p.remove("symbols");
            }
            docs.push(v.to_string());
        }
        let key = batch_key("boots", &[docs]);
        let dir = Batch::dir_of(&self.cache, &key);
        let files: Vec<PathBuf> = (0..boots.len())
            .map(|i| Batch::data_file(&dir, i))
            .collect();
        let tasks = boots
            .iter()
            .zip(&files)
            .map(|(b, file)| {
                Ok(Task {
                    name: b.short.clone(),
                    program: program.clone(),
                    args: vec!["task".into(), "run".into(), file.display().to_string()],
                    data: Some(crate::task::document(&b.job)?),
                })
            })
            .collect::<anyhow::Result<Vec<Task>>>()?;
        let batch = Batch::new(&self.cache, key, tasks);
        // One ptelab at a time runs a batch: two submitters of the same
        // boots on one cache would remove each other's answers.
        let _lock = lock_batch(&self.cache, &batch.key)?;
        let resume = self.req.options.resume && batch.submitted_before();
        if self.req.options.resume && !resume {
            eprintln!(
                "ptelab: --resume: no earlier job array of these boots in {}: submitting them all",
                batch.dir.display()
            );
        }
        let answered = |i: usize| matches!(crate::task::read_answer(&files[i]), Some(Ok(_)));
        let outcome = batch.run(
            &Options {
                resume,
                ..self.req.options.clone()
            },
            &answered,
        )?;
        let job = outcome.job.as_deref().unwrap_or("(an earlier one)");
        let answers: Vec<Answered> = outcome
            .states
            .iter()
            .zip(&files)
            .enumerate()
            .map(|(i, (state, file))| {
                let answer = match crate::task::read_answer(file) {
                    Some(answer) => answer,
                    None => Err(anyhow::anyhow!(
                        "its Slurm task (job {job}, task {i}) ended {} without an answer; log {}",
                        state.word(),
                        batch.logs(i).1.display()
                    )),
                };
                // Read before `close` removes a finished batch.
                let commands = answer.as_ref().map_or(0, Vec::len);
                Answered {
                    stored_before: (0..commands)
                        .map(|k| crate::task::mark_path(file, k).exists())
                        .collect(),
                    answer,
                    // Where the caller marks each command's run stored, so
                    // that a resumed batch does not have it stored twice.
                    marks: Some(file.clone()),
                }
            })
            .collect();
        batch.close(answers.iter().all(|a| a.answer.is_ok()));
        Ok(answers)
    }
}

/// A batch's lock (`cache/slurm/KEY.lock`), held until dropped; the file
/// is removed then, so that no lock outlives its run.
#[derive(Debug)]
pub struct BatchLock {
    path: PathBuf,
    _file: std::fs::File,
}

impl Drop for BatchLock {
    fn drop(&mut self) {
        // Removed while still held: whoever opens it after this makes a
        // new file, which `lock_batch` checks for.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Hold batch `key`'s lock under `cache/slurm`; refused while another
/// ptelab holds it.
fn lock_batch(cache: &Path, key: &str) -> anyhow::Result<BatchLock> {
    use std::os::unix::fs::MetadataExt;
    let dir = cache.join("slurm");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{key}.lock"));
    let busy = || {
        usage(format!(
            "another ptelab is running these boots as batch {key} ({}): wait for it, or give \
             this one another --cache",
            path.display()
        ))
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Err(busy()),
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
    // The holder before may have removed the file between our open and
    // lock: then the lock is on a file nobody else will find.
    let same = match (file.metadata(), std::fs::metadata(&path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    };
    if !same {
        return Err(busy());
    }
    Ok(BatchLock { path, _file: file })
}

/// Put this ptelab into `cache/bin` (by content), for tasks to run.
pub fn stage_ptelab(cache: &Path) -> anyhow::Result<PathBuf> {
    let bin = cache.join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
    let me = std::env::current_exe().context("finding this ptelab")?;
    copy_by_content(&me, &bin, "ptelab")
}

/// Copy `file` into `dir` as `NAME-SHA12` (once: the name says the
/// content), atomically; returns the copy. How a shared cache gets the
/// binaries its tasks run. Each build adds one, so all but the
/// [`KEEP_BINARIES`] most recently used copies of `NAME` are removed.
pub fn copy_by_content(file: &Path, dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let sha = crate::guest::source::sha256_file(file)?;
    let dest = dir.join(format!("{name}-{}", &sha[..12]));
    if dest.exists() {
        // Used now: the pruning keeps the most recently used.
        let _ = std::fs::File::options()
            .write(true)
            .open(&dest)
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
    } else {
        copy_whole(file, &dest)?;
    }
    prune_copies(dir, name, KEEP_BINARIES, &dest);
    Ok(dest)
}

/// Copy `file` to `dir/files-SHA12/NAME` (once), keeping its name: a
/// guest finds a `--file` as `/files/NAME`.
fn copy_keeping_name(file: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let sha = crate::guest::source::sha256_file(file)?;
    let name = file
        .file_name()
        .with_context(|| format!("{} names no file", file.display()))?;
    let sub = dir.join(format!("files-{}", &sha[..12]));
    std::fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
    let dest = sub.join(name);
    if !dest.exists() {
        copy_whole(file, &dest)?;
    }
    Ok(dest)
}

/// Copy `file` to `dest` whole or not at all (through a hidden file beside
/// it), so that a task never reads half a copy.
fn copy_whole(file: &Path, dest: &Path) -> anyhow::Result<()> {
    let name = dest
        .file_name()
        .map_or("copy".into(), |n| n.to_string_lossy());
    let tmp = dest.with_file_name(format!(".{name}.{}", std::process::id()));
    std::fs::copy(file, &tmp)
        .and_then(|_| std::fs::rename(&tmp, dest))
        .with_context(|| format!("copying {} to {}", file.display(), dest.display()))
}

/// Remove all but the `keep` most recently changed `NAME-SHA12` copies in
/// `dir`, never `current`.
fn prune_copies(dir: &Path, name: &str, keep: usize, current: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let ours = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(name)?.strip_prefix('-'))
            .is_some_and(|sha| sha.len() == 12 && sha.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let mut copies: Vec<(std::time::SystemTime, PathBuf)> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p != current && ours(p))
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    copies.sort();
    // `current` is one of the kept.
    let old = copies.len().saturating_sub(keep.saturating_sub(1));
    for (_, p) in &copies[..old] {
        let _ = std::fs::remove_file(p);
    }
}

/// Quote for the POSIX shell.
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
pub(crate) mod testcluster;
#[cfg(test)]
mod tests;
