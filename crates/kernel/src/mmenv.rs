//! Memory-management features that act on a run's memory from outside the
//! run: DAMON schemes (which may page out or migrate it) and the multi-gen
//! LRU (which changes how reclaim ages folios).

use std::fs;
use std::path::{Path, PathBuf};

/// DAMON's sysfs interface.
const KDAMONDS: &str = "/sys/kernel/mm/damon/admin/kdamonds";
/// MGLRU's switch (a bit mask; 0 is off).
const LRU_GEN: &str = "/sys/kernel/mm/lru_gen/enabled";

/// A kdamond that is on, with the actions of its schemes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kdamond {
    /// Its sysfs directory name (`0`, `1`, ...).
    pub name: String,
    /// Scheme actions (`pageout`, `cold`, `migrate_hot`, ...).
    pub actions: Vec<String>,
}

/// The kdamonds that are on; `None` without DAMON sysfs, `Some(Err)` saying
/// why when their state cannot be read (DAMON sysfs is root-only).
pub fn running_kdamonds() -> Option<Result<Vec<Kdamond>, String>> {
    running_kdamonds_at(Path::new(KDAMONDS))
}

fn running_kdamonds_at(base: &Path) -> Option<Result<Vec<Kdamond>, String>> {
    if !base.exists() {
        return None;
    }
    let mut running = Vec::new();
    for kd in numbered_dirs(base) {
        let path = kd.join("state");
        let state = match fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) => return Some(Err(format!("{}: {e}", path.display()))),
        };
        if state.trim() != "on" {
            continue;
        }
        let mut actions = Vec::new();
        for ctx in numbered_dirs(&kd.join("contexts")) {
            for sch in numbered_dirs(&ctx.join("schemes")) {
                if let Ok(a) = fs::read_to_string(sch.join("action")) {
                    actions.push(a.trim().to_owned());
                }
            }
        }
        let name = kd
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        running.push(Kdamond { name, actions });
    }
    Some(Ok(running))
}

/// Subdirectories named by a number, in numeric order.
fn numbered_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<(u64, PathBuf)> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.parse().ok())
                        .map(|n: u64| (n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// MGLRU's `enabled` value (`0x0007`) and whether it is on; `None` when the
/// kernel is built without it (CONFIG_LRU_GEN off).
pub fn mglru() -> Option<(String, bool)> {
    let v = fs::read_to_string(LRU_GEN).ok()?.trim().to_owned();
    let on = u64::from_str_radix(v.trim_start_matches("0x"), 16).is_ok_and(|n| n != 0);
    Some((v, on))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kdamonds_of_a_fake_tree() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("kdamonds");
        assert_eq!(running_kdamonds_at(&base), None);
        let put = |rel: &str, text: &str| {
            let p = base.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        put("nr_kdamonds", "3\n");
        put("0/state", "on\n");
        put("0/contexts/0/schemes/0/action", "pageout\n");
        put("0/contexts/0/schemes/1/action", "cold\n");
        put("1/state", "off\n");
        put("10/state", "on\n");
        assert_eq!(
            running_kdamonds_at(&base).unwrap().unwrap(),
            [
                Kdamond {
                    name: "0".into(),
                    actions: vec!["pageout".into(), "cold".into()]
                },
                Kdamond {
                    name: "10".into(),
                    actions: vec![]
                }
            ]
        );
    }
}
