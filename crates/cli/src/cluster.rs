//! Where guest runs execute: here (`--executor local`, the default) or as the
//! tasks of a Slurm job array (`--executor slurm`, docs/cluster.md), with the
//! options that pass through to `sbatch`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// `--executor`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Executor {
    /// Boot the guests on this machine, `--jobs` at a time.
    #[default]
    Local,
    /// One task of a Slurm job array per guest boot (`sbatch --array`); the
    /// answers come back here and are stored as a local run's.
    Slurm,
}

/// The executor and Slurm's options: shared by every command that fans
/// guest runs out.
#[derive(Clone, Debug, Default, Args)]
pub struct ClusterOpts {
    #[command(flatten)]
    pub exec: ExecutorOpts,
    /// Time limit of each task, in Slurm's format (`sbatch --time`: 30,
    /// 1:00:00, 1-0).
    #[arg(long = "time", value_name = "LIMIT", value_parser = slurm_time)]
    pub slurm_time: Option<String>,
}

/// The executor and Slurm's options less `--time`: what `calibrate
/// --guest` takes, whose `--time` is its host runs' (a task's limit goes
/// as `--sbatch=--time=LIMIT` there).
#[derive(Clone, Debug, Default, Args)]
pub struct ExecutorOpts {
    /// Where guest runs execute: local, or slurm (one job-array task per
    /// boot; the cache must be on a file system the nodes share,
    /// docs/cluster.md).
    #[arg(long, value_enum, default_value_t = Executor::Local)]
    pub executor: Executor,
    /// Slurm partition of the job array (`sbatch --partition`).
    #[arg(long, value_name = "NAME")]
    pub partition: Option<String>,
    /// One more argument for `sbatch` (repeatable): `--sbatch=--qos=long`.
    #[arg(long = "sbatch", value_name = "ARG", allow_hyphen_values = true)]
    pub sbatch: Vec<String>,
    /// A cache directory every node mounts at the same path: kernels are
    /// fetched into it, and the binaries, task files and logs put there
    /// (default: this user's cache, which the nodes must then mount).
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Submit only the tasks of this command's last job array that did not
    /// finish; the others' answers are read back from the batch directory.
    #[arg(long)]
    pub resume: bool,
}

impl ExecutorOpts {
    /// Whether guest runs go to Slurm.
    pub fn slurm(&self) -> bool {
        self.executor == Executor::Slurm
    }

    /// Refuse Slurm's options without `--executor slurm`.
    pub fn check(&self) -> anyhow::Result<()> {
        self.check_with(&[])
    }

    fn check_with(&self, more: &[(&str, bool)]) -> anyhow::Result<()> {
        if self.slurm() {
            return Ok(());
        }
        let given = [
            ("--partition", self.partition.is_some()),
            ("--sbatch", !self.sbatch.is_empty()),
            ("--cache", self.cache.is_some()),
            ("--resume", self.resume),
        ];
        if let Some((flag, _)) = more.iter().chain(&given).find(|(_, g)| *g) {
            crate::error::bail_usage!("{flag} goes with --executor slurm");
        }
        Ok(())
    }
}

impl ClusterOpts {
    /// Whether guest runs go to Slurm.
    pub fn slurm(&self) -> bool {
        self.exec.slurm()
    }

    /// Refuse Slurm's options without `--executor slurm`.
    pub fn check(&self) -> anyhow::Result<()> {
        self.exec
            .check_with(&[("--time", self.slurm_time.is_some())])
    }
}

/// `--time`: Slurm's time formats (minutes, M:S, H:M:S, D-H, D-H:M,
/// D-H:M:S), checked here so that a typo costs no submission.
pub fn slurm_time(text: &str) -> Result<String, String> {
    let t = text.trim();
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (Some(d), r),
        None => (None, t),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let numbers = |s: &&str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    let ok = days.is_none_or(|d| numbers(&d))
        && parts.len() <= 3
        && parts.iter().all(numbers)
        && !(days.is_none() && t == "0");
    if ok {
        Ok(t.to_string())
    } else {
        Err(
            "a Slurm time limit: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS, \
             DAYS-HOURS:MINUTES or DAYS-HOURS:MINUTES:SECONDS (e.g. 30, 1:00:00, 1-0)"
                .to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_times() {
        for ok in ["30", "1:00:00", "1-0", "2-12:30", "0:30"] {
            assert_eq!(slurm_time(ok).unwrap(), ok);
        }
        for bad in ["", "1h", "1:2:3:4", "-1", "a-1", "0"] {
            assert!(slurm_time(bad).is_err(), "{bad}");
        }
    }
}

/// `ptelab task run FILE`.
#[derive(Debug, clap::Args)]
pub struct TaskArgs {
    #[command(subcommand)]
    pub command: TaskCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum TaskCommand {
    /// Boot the job in FILE (a `ptelab/task/v1` document) and write its
    /// answer beside it.
    Run {
        #[arg(value_name = "FILE")]
        file: std::path::PathBuf,
    },
}
