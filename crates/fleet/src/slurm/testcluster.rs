//! A throwaway single-node Slurm cluster on localhost for tests: munged with
//! its own key and socket, slurmctld and slurmd on free ports, every file in
//! a temporary directory, 2 CPUs. Clients find it through `SLURM_CONF`
//! ([`TestSlurm::env`]). Dropping it stops the three daemons and removes
//! the directory, also when the test panics.
//!
//! slurmd runs jobs as their submitter, so it needs root: elsewhere, or where
//! Slurm and munge are not installed, the test skips saying why (on CI,
//! where `./setup` installs them and tests run as root, it fails instead).
//!
//! Shared by the unit tests of `fleet::slurm` and the integration tests
//! (`tests/` includes this file by path), so it uses nothing of ptelab.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A running cluster; stopped and removed on drop.
pub struct TestSlurm {
    dir: tempfile::TempDir,
    conf: PathBuf,
}

const DAEMONS: [(&str, &str); 3] = [
    ("slurmd", "slurmd.pid"),
    ("slurmctld", "slurmctld.pid"),
    ("munged", "munged.pid"),
];

impl TestSlurm {
    /// Start the cluster, or say why it cannot start here.
    pub fn start() -> Result<TestSlurm, String> {
        for tool in ["munged", "mungekey", "slurmctld", "slurmd"] {
            if sbin(tool).is_none() {
                return Err(format!(
                    "{tool} is not installed (./setup installs Debian's slurm-wlm and munge)"
                ));
            }
        }
        for tool in ["sbatch", "squeue", "scancel", "sinfo"] {
            if which(tool).is_none() {
                return Err(format!(
                    "{tool} is not installed (./setup installs slurm-wlm)"
                ));
            }
        }
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            return Err("slurmd runs jobs as their submitter, which needs root".into());
        }
        let dir = tempfile::Builder::new()
            .prefix("ptelab-slurm-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let d = dir.path();
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir(d.join(sub)).map_err(|e| e.to_string())?;
        }
        let cluster = TestSlurm {
            conf: d.join("slurm.conf"),
            dir,
        };
        let d = cluster.dir.path();
        let key = d.join("munge.key");
        run(Command::new(sbin("mungekey").unwrap())
            .args(["-c", "-k"])
            .arg(&key))?;
        let socket = d.join("munge.sock");
        run(Command::new(sbin("munged").unwrap())
            .arg("--force")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--log-file={}", d.join("log/munged.log").display()))
            .arg(format!("--pid-file={}", d.join("munged.pid").display()))
            .arg(format!("--seed-file={}", d.join("munged.seed").display())))?;
        let (ctld, slurmd) = (free_port()?, free_port()?);
        let p = |f: &str| d.join(f).display().to_string();
        let conf = format!(
            "ClusterName=ptelabtest\n\
             SlurmctldHost=localhost\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={socket}\n\
             CredType=cred/munge\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={state}\n\
             SlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={ctld_pid}\n\
             SlurmdPidFile={slurmd_pid}\n\
             SlurmctldLogFile={ctld_log}\n\
             SlurmdLogFile={slurmd_log}\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             MinJobAge=3600\n\
             SchedulerParameters=sched_interval=1\n\
             NodeName=localhost CPUs=2 State=UNKNOWN\n\
             PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            socket = socket.display(),
            state = p("state"),
            spool = p("spool"),
            ctld_pid = p("slurmctld.pid"),
            slurmd_pid = p("slurmd.pid"),
            ctld_log = p("log/slurmctld.log"),
            slurmd_log = p("log/slurmd.log"),
        );
        std::fs::write(&cluster.conf, conf).map_err(|e| e.to_string())?;
        run(Command::new(sbin("slurmctld").unwrap())
            .arg("-c")
            .env("SLURM_CONF", &cluster.conf))?;
        run(Command::new(sbin("slurmd").unwrap())
            .args(["-N", "localhost"])
            .env("SLURM_CONF", &cluster.conf))?;
        // Ready once the node is idle.
        let start = Instant::now();
        loop {
            let out = Command::new("sinfo")
                .args(["-h", "-o", "%T"])
                .env("SLURM_CONF", &cluster.conf)
                .output()
                .map_err(|e| e.to_string())?;
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if state == "idle" {
                return Ok(cluster);
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "the node did not come up ({state:?}): {}",
                    std::fs::read_to_string(d.join("log/slurmctld.log")).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Start the cluster, or skip the test (None) saying why: on CI, where
    /// `./setup` installs Slurm and tests run as root, failing instead.
    pub fn start_or_skip(test: &str) -> Option<TestSlurm> {
        match TestSlurm::start() {
            Ok(s) => Some(s),
            Err(why) if std::env::var_os("CI").is_some() => {
                panic!("{test}: no Slurm cluster on CI: {why}")
            }
            Err(why) => {
                eprintln!("skipping {test}: {why}");
                None
            }
        }
    }

    /// What a client of this cluster needs in its environment.
    pub fn env(&self) -> [(&'static str, &Path); 1] {
        [("SLURM_CONF", &self.conf)]
    }

    /// A client command (squeue, scancel, …) pointed at this cluster.
    pub fn command(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TestSlurm {
    fn drop(&mut self) {
        let mut pids = Vec::new();
        for (_, file) in DAEMONS {
            let pid = std::fs::read_to_string(self.dir.path().join(file))
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok());
            if let Some(pid) = pid {
                // SAFETY: kill has no memory preconditions.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                pids.push(pid);
            }
        }
        let start = Instant::now();
        while pids.iter().any(|p| alive(*p)) && start.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(100));
        }
        for p in pids.into_iter().filter(|p| alive(*p)) {
            // SAFETY: as above.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
    }
}

/// Whether `pid` runs (a zombie, which its parent has yet to reap, does not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn sbin(tool: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/local/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.exists())
        .or_else(|| which(tool))
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).find(|p| p.join(tool).exists()))
        .map(|p| p.join(tool))
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("find a free port: {e}"))
}
