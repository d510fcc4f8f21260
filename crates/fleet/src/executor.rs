//! Where guest boots run: the one seam that `vm`, `reproduce`, `bisect` and
//! `calibrate --guest` boot through (docs/cluster.md, "Executors").
//!
//! The fleet makes every boot a [`GuestJob`], which is data: the kernel
//! image, the guest binary, the commands, QEMU's settings, the log. An
//! executor runs a list of them and answers each with its guests' outputs:
//! - [`Local`]: this machine's QEMU, `--jobs` at a time;
//! - [`crate::slurm::Slurm`]: each boot one task of a Slurm job array, the
//!   job written to a file that the hidden verb `ptelab task run FILE`
//!   boots on its node ([`crate::task`]);
//! - [`Fake`] (tests): a function answers.
//!
//! Whatever ran them, the answers come back to the fleet, which checks,
//! parses and stores them as it does a local run's: a cluster's figures
//! and records are a local run's. Adding an executor is one type that
//! implements [`Executor`] and one arm in [`Executing::executor`].

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::guest::boot::run::{run_boot, GuestJob, GuestOutput};

/// One boot and what progress calls it.
pub struct Boot {
    pub job: GuestJob,
    /// `debian:6.17.13 (x86-64 guest, tcg) for sweep`.
    pub what: String,
    /// The kernel and commands, for the line that says the boot is done.
    pub short: String,
}

/// The guests' outputs of one boot (one per command), or why there are none.
pub type Answer = anyhow::Result<Vec<GuestOutput>>;

/// A boot's answer and, where it may be handed over again (a cluster's
/// batch resumed with `--resume`), the file beside which its commands'
/// runs are marked stored ([`crate::task::mark_path`]), and which of them
/// were marked when it was handed over.
pub struct Answered {
    pub answer: Answer,
    pub marks: Option<std::path::PathBuf>,
    /// Per command: its run was stored by the run this one resumes.
    pub stored_before: Vec<bool>,
}

impl From<Answer> for Answered {
    fn from(answer: Answer) -> Answered {
        Answered {
            answer,
            marks: None,
            stored_before: Vec::new(),
        }
    }
}

/// Runs boots somewhere.
pub trait Executor: Send + Sync {
    /// Run every boot; one answer per boot, in order. `Err` for what stops
    /// them all (an interruption, a refused submission).
    fn boot(&self, boots: Vec<Boot>) -> anyhow::Result<Vec<Answered>>;
}

/// Which executor a command asked for (`--executor`), as data that settings
/// carry; [`Executing::executor`] makes it.
#[derive(Clone, Debug, Default)]
pub enum Executing {
    #[default]
    Local,
    Slurm(crate::slurm::Request),
}

impl Executing {
    /// The executor, booting `jobs` at a time here, keeping its files
    /// (a cluster's batches) under `cache`.
    pub fn executor(&self, cache: &Path, jobs: u32) -> Box<dyn Executor> {
        match self {
            Executing::Local => Box::new(Local { jobs }),
            Executing::Slurm(req) => Box::new(crate::slurm::Slurm::new(cache, req.clone())),
        }
    }

    /// Whether guests boot on other machines, which may have what this one
    /// lacks (KVM): what this machine probes is then no reason to refuse.
    pub fn remote(&self) -> bool {
        !matches!(self, Executing::Local)
    }
}

/// This machine's QEMU.
pub struct Local {
    /// Boots at once.
    pub jobs: u32,
}

impl Executor for Local {
    /// Each boot is announced, and each end with how many are done. An
    /// interruption stops the boots not yet started and is an error (no
    /// guest is left running: `run_boot` kills its own QEMU).
    fn boot(&self, boots: Vec<Boot>) -> anyhow::Result<Vec<Answered>> {
        let interrupted = crate::kernel::signals::interrupted();
        let answers: Vec<Mutex<Option<Answer>>> = boots.iter().map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let total = boots.len();
        std::thread::scope(|s| {
            for _ in 0..(self.jobs.max(1) as usize).min(total) {
                s.spawn(|| loop {
                    let b = next.fetch_add(1, Ordering::SeqCst);
                    let Some(boot) = boots.get(b) else { break };
                    if interrupted.load(Ordering::SeqCst) {
                        break;
                    }
                    // A pinned caller (reproduce's session) must not keep
                    // every guest on its one CPU.
                    let _ = crate::kernel::procfs::unpin_thread();
                    eprintln!(
                        "ptelab: booting {} -- log {}",
                        boot.what,
                        boot.job.log.display()
                    );
                    let outs = run_boot(&boot.job);
                    let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                    if total > 1 {
                        eprintln!(
                            "ptelab: guest {n}/{total} done ({}{})",
                            boot.short,
                            match &outs {
                                Ok(o) => format!(", {:.1} s", o[0].boot_to_exit.as_secs_f64()),
                                Err(_) => ", failed".into(),
                            }
                        );
                    }
                    *answers[b].lock().unwrap_or_else(|e| e.into_inner()) = Some(outs);
                });
            }
        });
        if interrupted.load(Ordering::SeqCst) {
            anyhow::bail!("interrupted: no guest is left running");
        }
        Ok(answers
            .into_iter()
            .map(|a| {
                a.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .expect("every boot ran")
                    .into()
            })
            .collect())
    }
}

/// Answers every boot with a function, booting nothing: for tests of what
/// the fleet and its callers make of answers.
pub struct Fake<F>(pub F);

impl<F> Executor for Fake<F>
where
    F: Fn(&GuestJob) -> Answer + Send + Sync,
{
    fn boot(&self, boots: Vec<Boot>) -> anyhow::Result<Vec<Answered>> {
        Ok(boots.iter().map(|b| (self.0)(&b.job).into()).collect())
    }
}
