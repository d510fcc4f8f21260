//! A temporary memory cgroup for the reclaim workload: found, created,
//! entered by the measuring thread, and removed again on drop (also on error
//! and panic; SIGINT is turned into an error by the runner's polling).
//!
//! cgroup v2 with the memory controller: `memory.reclaim` (the seed's method).
//! The whole process moves (v2 domain cgroups take processes, not threads).
//! cgroup v1 memory controller: no `memory.reclaim`; reclaim is driven by
//! lowering `memory.limit_in_bytes` below the usage. Only the calling thread
//! moves (v1 `tasks`); page-cache folios are charged to the memcg of the task
//! that allocates them, so the thread's file I/O lands in the child.
//!
//! Settings of the child (`memory.swappiness` for anonymous reclaim) are
//! written with [`ChildCgroup::write`]; they go with the directory.
//!
//! The child is `<mount>/ptelab-<pid>`. On drop the thread (or process) is
//! moved back to the cgroup it came from, then the directory is removed.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::procfs::{self, Mount};

/// Which memory-cgroup interface a machine offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Memcg {
    /// cgroup v2 mount whose root lists `memory` in `cgroup.controllers`.
    V2(PathBuf),
    /// cgroup v1 hierarchy with the memory controller.
    V1(PathBuf),
}

impl Memcg {
    /// The mount point.
    pub fn root(&self) -> &Path {
        match self {
            Memcg::V2(p) | Memcg::V1(p) => p,
        }
    }
}

/// Find the memory controller: v2 first (it has `memory.reclaim`), then v1.
pub fn detect() -> Option<Memcg> {
    detect_in(&procfs::mounts(), |p| fs::read_to_string(p).ok())
}

/// [`detect`] over a mount table, reading files through `read`.
pub fn detect_in(mounts: &[Mount], read: impl Fn(&Path) -> Option<String>) -> Option<Memcg> {
    let mut v1 = None;
    for m in mounts {
        match m.fstype.as_str() {
            "cgroup2" => {
                let ctl = read(&m.point.join("cgroup.controllers")).unwrap_or_default();
                if ctl.split_whitespace().any(|c| c == "memory") {
                    return Some(Memcg::V2(m.point.clone()));
                }
            }
            "cgroup" if m.has_option("memory") && v1.is_none() => {
                v1 = Some(Memcg::V1(m.point.clone()));
            }
            _ => {}
        }
    }
    v1
}

impl Memcg {
    /// Whether the v2 interface file `memory.reclaim` (Linux 5.19+) exists.
    /// The root cgroup has none, so a child directory is looked at too.
    pub fn has_reclaim(&self) -> bool {
        let root = self.root();
        root.join("memory.reclaim").exists()
            || fs::read_dir(root).is_ok_and(|rd| {
                rd.flatten()
                    .any(|e| e.path().join("memory.reclaim").exists())
            })
    }
}

/// The path of the calling thread's cgroup for `memcg`, relative to its mount
/// (from /proc/thread-self/cgroup).
fn own_cgroup(memcg: &Memcg, table: &str) -> Option<String> {
    for line in table.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(_id), Some(ctl), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let hit = match memcg {
            Memcg::V2(_) => ctl.is_empty(),
            Memcg::V1(_) => ctl.split(',').any(|c| c == "memory"),
        };
        if hit {
            return Some(path.to_string());
        }
    }
    None
}

/// Name prefix of every cgroup ptelab creates.
pub const PREFIX: &str = "ptelab-";

/// Thread id of the caller.
fn gettid() -> i64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(text.as_bytes())
}

/// A child memory cgroup the calling thread has entered; left and removed on
/// drop.
pub struct ChildCgroup {
    memcg: Memcg,
    dir: PathBuf,
    /// Where the thread (v1) or process (v2) came from.
    home: PathBuf,
    /// What was moved: a tid (v1, into `tasks`) or the pid (v2, `cgroup.procs`).
    member: i64,
    entered: bool,
    /// v2: `memory` was added to the root's subtree_control by us.
    enabled_subtree: bool,
}

impl ChildCgroup {
    /// Create `<mount>/ptelab-<pid>` and move the calling thread (v1) or the
    /// process (v2) into it.
    pub fn enter(memcg: &Memcg) -> anyhow::Result<ChildCgroup> {
        let table = fs::read_to_string("/proc/thread-self/cgroup")
            .context("reading /proc/thread-self/cgroup")?;
        let rel = own_cgroup(memcg, &table)
            .with_context(|| format!("this thread is in no cgroup of {:?}", memcg.root()))?;
        let home = memcg.root().join(rel.trim_start_matches('/'));
        let dir = memcg.root().join(format!("{PREFIX}{}", std::process::id()));
        let mut enabled_subtree = false;
        if let Memcg::V2(root) = memcg {
            let sub = root.join("cgroup.subtree_control");
            let cur = fs::read_to_string(&sub).unwrap_or_default();
            if !cur.split_whitespace().any(|c| c == "memory") {
                write_file(&sub, "+memory")
                    .with_context(|| format!("enabling memory in {}", sub.display()))?;
                enabled_subtree = true;
            }
        }
        if let Err(e) = fs::create_dir(&dir) {
            if enabled_subtree {
                let _ = write_file(&memcg.root().join("cgroup.subtree_control"), "-memory");
            }
            return Err(e).with_context(|| format!("creating cgroup {}", dir.display()));
        }
        let (member, file) = match memcg {
            Memcg::V1(_) => (gettid(), "tasks"),
            Memcg::V2(_) => (i64::from(std::process::id()), "cgroup.procs"),
        };
        let mut cg = ChildCgroup {
            memcg: memcg.clone(),
            dir,
            home,
            member,
            entered: false,
            enabled_subtree,
        };
        write_file(&cg.dir.join(file), &member.to_string())
            .with_context(|| format!("moving {member} into {}", cg.dir.display()))?;
        cg.entered = true;
        Ok(cg)
    }

    /// Charged bytes (`memory.current` or `memory.usage_in_bytes`).
    pub fn usage(&self) -> anyhow::Result<u64> {
        let f = match self.memcg {
            Memcg::V2(_) => "memory.current",
            Memcg::V1(_) => "memory.usage_in_bytes",
        };
        let p = self.dir.join(f);
        let t = fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        t.trim()
            .parse()
            .with_context(|| format!("parsing {}: {t:?}", p.display()))
    }

    /// An open control file of the child, for a write timed by the caller.
    pub fn control(&self, name: &str) -> anyhow::Result<fs::File> {
        let p = self.dir.join(name);
        fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&p)
            .with_context(|| format!("opening {}", p.display()))
    }

    /// Write `value` to the child's control file `name` (untimed settings
    /// such as `memory.swappiness`).
    pub fn write(&self, name: &str, value: &str) -> anyhow::Result<()> {
        let p = self.dir.join(name);
        write_file(&p, value).with_context(|| format!("writing {value} to {}", p.display()))
    }

    /// Leave (move back home) and remove the child. Idempotent.
    pub fn remove(&mut self) -> anyhow::Result<()> {
        if self.entered {
            let file = match self.memcg {
                Memcg::V1(_) => "tasks",
                Memcg::V2(_) => "cgroup.procs",
            };
            write_file(&self.home.join(file), &self.member.to_string()).with_context(|| {
                format!("moving {} back to {}", self.member, self.home.display())
            })?;
            self.entered = false;
        }
        if self.dir.exists() {
            // rmdir can fail briefly while the last charges drain (v1: EBUSY).
            let mut last = None;
            for _ in 0..50 {
                match fs::remove_dir(&self.dir) {
                    Ok(()) => {
                        last = None;
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        last = None;
                        break;
                    }
                    Err(e) => last = Some(e),
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if let Some(e) = last {
                return Err(e).with_context(|| format!("removing {}", self.dir.display()));
            }
        }
        if self.enabled_subtree {
            let _ = write_file(&self.memcg.root().join("cgroup.subtree_control"), "-memory");
            self.enabled_subtree = false;
        }
        Ok(())
    }
}

impl Drop for ChildCgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("ptelab: warning: cgroup cleanup: {e:#}");
        }
    }
}

/// `ptelab-*` cgroups under `memcg`'s mount (left by a killed run).
pub fn leftovers(memcg: &Memcg) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(memcg.root()) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(PREFIX))
        .map(|e| e.path())
        .collect()
}

/// Remove `ptelab-<pid>` cgroups whose process is gone and that hold no tasks.
pub fn remove_stale(memcg: &Memcg) {
    for dir in leftovers(memcg) {
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if procfs::pid_alive(pid) {
            continue;
        }
        let _ = fs::remove_dir(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounts_here() -> Vec<Mount> {
        procfs::parse_mountinfo(
            "30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
             31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
             32 30 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
             33 30 0:29 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
        )
        .unwrap()
    }

    #[test]
    fn v1_when_v2_lacks_memory() {
        let m = detect_in(&mounts_here(), |_| Some(String::new()));
        assert_eq!(m, Some(Memcg::V1("/sys/fs/cgroup/memory".into())));
    }

    #[test]
    fn v2_when_it_has_memory() {
        let m = detect_in(&mounts_here(), |p| {
            (p == Path::new("/sys/fs/cgroup/unified/cgroup.controllers"))
                .then(|| "cpu io memory pids\n".to_string())
        });
        assert_eq!(m, Some(Memcg::V2("/sys/fs/cgroup/unified".into())));
    }

    #[test]
    fn none_without_memory_controller() {
        let mounts =
            procfs::parse_mountinfo("31 30 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")
                .unwrap();
        assert_eq!(detect_in(&mounts, |_| None), None);
    }

    #[test]
    fn own_cgroup_by_version() {
        let table = "4:memory:/process_api/abc\n1:cpu:/\n0::/user.slice\n";
        assert_eq!(
            own_cgroup(&Memcg::V1("/m".into()), table).as_deref(),
            Some("/process_api/abc")
        );
        assert_eq!(
            own_cgroup(&Memcg::V2("/u".into()), table).as_deref(),
            Some("/user.slice")
        );
    }
}
