//! A kernel git tree, driven by the git command: what a tree build and
//! bisect ask of it (a commit's id and subject, a work tree of its own).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use crate::error::bail_usage;

/// A git work tree.
#[derive(Clone, Debug)]
pub struct Repo {
    pub dir: PathBuf,
}

impl Repo {
    /// The work tree at `path`, or a usage error when it is none (`named`:
    /// how the user named it, `--repo DIR` or `tree:DIR`).
    pub fn open(path: &Path, named: &str) -> anyhow::Result<Repo> {
        if !path.is_dir() {
            bail_usage!(
                "{named}: {} is not a directory: name the root of a Linux kernel git tree",
                path.display()
            );
        }
        let out = Command::new("git")
            .arg("-C")
            .arg(path)
            .args(["rev-parse", "--show-toplevel"])
            .env("LC_ALL", "C")
            .output()
            .context("running git (is it installed?)")?;
        if !out.status.success() {
            bail_usage!(
                "{named}: {} is not a git work tree: name the root of a Linux kernel git tree",
                path.display()
            );
        }
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Ok(Repo { dir })
    }

    /// Run git in the tree; its stdout, or an error with its stderr.
    pub fn git(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.git_output(args)?;
        if !out.status.success() {
            anyhow::bail!(
                "git {} failed in {}: {}",
                args.join(" "),
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn git_output(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        Command::new("git")
            .arg("-C")
            .arg(&self.dir)
            .args(args)
            .env("LC_ALL", "C")
            .output()
            .context("running git")
    }

    /// Refuse a tree that is not a kernel tree, has uncommitted changes to
    /// tracked files, or is already bisecting: nothing is touched then.
    pub fn check_usable(&self) -> anyhow::Result<()> {
        self.check_kernel()?;
        let start = self.git(&["rev-parse", "--git-path", "BISECT_START"])?;
        if self.dir.join(start.trim()).exists() {
            bail_usage!(
                "a git bisect is already in progress in {}: finish it or run `git bisect reset` there first",
                self.dir.display()
            );
        }
        let dirty = self.changes()?;
        if !dirty.is_empty() {
            bail_usage!(
                "the work tree {} has uncommitted changes ({}): commit or stash them first, \
                 since bisect checks out other commits",
                self.dir.display(),
                dirty.lines().next().unwrap_or("").trim()
            );
        }
        Ok(())
    }

    /// Refuse a tree that is not a Linux kernel tree.
    pub fn check_kernel(&self) -> anyhow::Result<()> {
        let makefile = std::fs::read_to_string(self.dir.join("Makefile")).unwrap_or_default();
        let kernel = makefile.lines().any(|l| l.starts_with("VERSION ="))
            && makefile.lines().any(|l| l.starts_with("PATCHLEVEL ="))
            && self.dir.join("Kconfig").is_file()
            && self.dir.join("arch").is_dir();
        if !kernel {
            bail_usage!(
                "{} is not a Linux kernel tree (no top-level Makefile with VERSION and PATCHLEVEL, \
                 Kconfig and arch/): name the root of a kernel git tree",
                self.dir.display()
            );
        }
        Ok(())
    }

    /// Uncommitted changes to tracked files (`git status` lines), if any.
    pub fn changes(&self) -> anyhow::Result<String> {
        Ok(self
            .git(&["status", "--porcelain", "--untracked-files=no"])?
            .trim()
            .to_string())
    }

    /// The full id of a commit named by `rev`, or a usage error.
    pub fn commit(&self, flag: &str, rev: &str) -> anyhow::Result<String> {
        match self.git(&[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ]) {
            Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_string()),
            _ => bail_usage!(
                "{flag} {rev} names no commit in {}: pass a tag, branch or commit id",
                self.dir.display()
            ),
        }
    }

    /// Good must be an older commit than bad: an ancestor, not the same.
    pub fn check_order(&self, good: &str, bad: &str, names: (&str, &str)) -> anyhow::Result<()> {
        if good == bad {
            bail_usage!(
                "--good {} and --bad {} are the same commit: nothing to bisect",
                names.0,
                names.1
            );
        }
        let ok = self
            .git_output(&["merge-base", "--is-ancestor", good, bad])?
            .status
            .success();
        if !ok {
            bail_usage!(
                "--good {} is not an ancestor of --bad {}: the endpoints are in the wrong order \
                 (or on unrelated branches); pass the older, good commit as --good",
                names.0,
                names.1
            );
        }
        Ok(())
    }

    pub fn subject(&self, commit: &str) -> anyhow::Result<String> {
        Ok(self
            .git(&["log", "-1", "--format=%s", commit])?
            .trim()
            .to_string())
    }

    /// A work tree of this repository at `dir` (made there, or reused),
    /// with `commit` checked out, detached: where a commit builds while the
    /// tree itself holds another. `git checkout` rewrites only the files
    /// that differ, so a build directory kept for it builds incrementally.
    pub fn worktree(&self, dir: &Path, commit: &str) -> anyhow::Result<Repo> {
        if dir.join(".git").exists() {
            let tree = Repo {
                dir: dir.to_path_buf(),
            };
            // Ours, under the cache: what a build left in it is not the user's.
            if tree
                .git(&["checkout", "-q", "--force", "--detach", commit])
                .is_ok()
            {
                return Ok(tree);
            }
            std::fs::remove_dir_all(dir)
                .with_context(|| format!("removing the stale work tree {}", dir.display()))?;
        }
        // A registered work tree whose directory is gone would refuse `add`.
        self.git(&["worktree", "prune"])?;
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        self.git(&["worktree", "add", "-q", "--detach", utf8(dir)?, commit])?;
        Ok(Repo {
            dir: dir.to_path_buf(),
        })
    }

    /// A repository of ptelab's own at `dir` that borrows this one's objects
    /// (`git clone --shared`: nothing is written to this tree or its .git),
    /// made there or reused, with `commit` checked out, detached and forced
    /// (what a build left in it is not the user's). `git checkout` rewrites
    /// only the files that differ, so a build directory kept for it builds
    /// incrementally.
    pub fn borrowed(&self, dir: &Path, commit: &str) -> anyhow::Result<Repo> {
        if !dir.join(".git").exists() {
            let _ = std::fs::remove_dir_all(dir);
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            let (from, to) = (utf8(&self.dir)?, utf8(dir)?);
            let staging = format!("{to}.partial-{}", std::process::id());
            let _ = std::fs::remove_dir_all(&staging);
            let out = Command::new("git")
                .args(["clone", "-q", "--shared", "--no-checkout", from, &staging])
                .env("LC_ALL", "C")
                .output()
                .context("running git clone")?;
            if !out.status.success() {
                let _ = std::fs::remove_dir_all(&staging);
                anyhow::bail!(
                    "git clone --shared {from} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            std::fs::rename(&staging, dir).with_context(|| format!("moving the clone to {to}"))?;
        }
        let tree = Repo {
            dir: dir.to_path_buf(),
        };
        tree.git(&["checkout", "-q", "--force", "--detach", commit])?;
        Ok(tree)
    }

    /// HEAD as found: the branch checked out, else the detached commit.
    #[cfg(any(test, feature = "testing"))]
    pub fn head(&self) -> anyhow::Result<String> {
        let out = self.git_output(&["symbolic-ref", "-q", "HEAD"])?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).trim().to_string());
        }
        Ok(self.git(&["rev-parse", "HEAD"])?.trim().to_string())
    }

    /// Number of commits `git bisect` considers between the endpoints
    /// (bad's ancestors that are not good's, bad included).
    pub fn candidates(&self, good: &str, bad: &str) -> anyhow::Result<usize> {
        Ok(self
            .git(&["rev-list", "--count", &format!("{good}..{bad}")])?
            .trim()
            .parse()
            .unwrap_or(0))
    }
}

fn utf8(path: &Path) -> anyhow::Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not a UTF-8 path", path.display()))
}

/// A kernel-looking git tree for tests, with `n + 1` commits.
#[cfg(any(test, feature = "testing"))]
pub mod fixture {
    use super::*;

    /// Run `cmd` with `sh -c` in `dir` as a committer named `t`; its stdout.
    pub fn sh(dir: &Path, cmd: &str) -> String {
        let out = Command::new("sh")
            .args(["-c", cmd])
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A kernel-looking git tree with `n + 1` commits (0 ..= n), each
    /// writing its number to `f`; returns the tree and the commit ids.
    pub fn tree(n: usize) -> (tempfile::TempDir, Repo, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let sh = |cmd: &str| sh(dir.path(), cmd);
        sh("git init -q -b main . && printf 'VERSION = 6\\nPATCHLEVEL = 16\\n' > Makefile && touch Kconfig && mkdir arch && touch arch/.keep");
        for i in 0..=n {
            sh(&format!(
                "echo {i} > f && git add -A && git commit -qm 'change {i}'"
            ));
        }
        let repo = Repo::open(dir.path(), "--repo").unwrap();
        let ids = repo
            .git(&["rev-list", "--reverse", "HEAD"])
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        (dir, repo, ids)
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::tree;
    use super::*;

    #[test]
    fn a_side_work_tree_holds_its_commit_and_leaves_the_tree_alone() {
        let (_d, repo, ids) = tree(3);
        let before = repo.head().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join("trees/t-1");
        let side = repo.worktree(&dir, &ids[1]).unwrap();
        let at = |r: &Repo| r.git(&["rev-parse", "HEAD"]).unwrap().trim().to_string();
        assert_eq!(at(&side), ids[1]);
        assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), "1\n");
        // Reused for another commit, also with a build's leftovers in it.
        std::fs::write(dir.join("f"), "scribbled").unwrap();
        let side = repo.worktree(&dir, &ids[3]).unwrap();
        assert_eq!(at(&side), ids[3]);
        assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), "3\n");
        // Removed behind git's back: made again.
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(at(&repo.worktree(&dir, &ids[2]).unwrap()), ids[2]);
        assert_eq!(repo.head().unwrap(), before);
        repo.check_usable().unwrap();
    }

    #[test]
    fn bad_trees_and_endpoints_are_refused() {
        let (d, repo, ids) = tree(2);
        assert!(repo.check_order(&ids[0], &ids[2], ("a", "b")).is_ok());
        for (g, b) in [(&ids[2], &ids[0]), (&ids[1], &ids[1])] {
            assert!(crate::error::is_usage(
                &repo.check_order(g, b, ("a", "b")).unwrap_err()
            ));
        }
        assert!(crate::error::is_usage(
            &repo.commit("--good", "v9.9").unwrap_err()
        ));
        std::fs::write(d.path().join("f"), "dirty").unwrap();
        let e = repo.check_usable().unwrap_err();
        assert!(e.to_string().contains("uncommitted changes"), "{e}");
        std::fs::remove_file(d.path().join("Kconfig")).unwrap();
        let e = repo.check_usable().unwrap_err();
        assert!(e.to_string().contains("not a Linux kernel tree"), "{e}");
        let plain = tempfile::tempdir().unwrap();
        assert!(crate::error::is_usage(
            &Repo::open(plain.path(), "--repo").unwrap_err()
        ));
    }
}
