//! The user's kernel tree, driven with `git bisect` so that it shows the
//! standard bisect state while ptelab works, and is put back as found
//! (`git bisect reset`, to the original branch) on every exit it sees:
//! success, error, and SIGINT (the children die of it; ptelab unwinds).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use crate::error::bail_usage;

/// A git work tree.
#[derive(Clone, Debug)]
pub struct Repo {
    pub dir: PathBuf,
}

/// Where `git bisect good|bad|skip` left the search.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// Test this commit (checked out).
    Test(String),
    /// The first bad commit.
    Found(String),
    /// Only skipped commits are left: the first bad is one of these.
    OnlySkipped(Vec<String>),
}

impl Repo {
    /// The work tree at `path`, or a usage error when it is none.
    pub fn open(path: &Path) -> anyhow::Result<Repo> {
        if !path.is_dir() {
            bail_usage!(
                "--repo {} is not a directory: pass the root of a Linux kernel git tree",
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
                "--repo {} is not a git work tree: pass the root of a Linux kernel git tree",
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

    fn git_output(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
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
        let makefile = std::fs::read_to_string(self.dir.join("Makefile")).unwrap_or_default();
        let kernel = makefile.lines().any(|l| l.starts_with("VERSION ="))
            && makefile.lines().any(|l| l.starts_with("PATCHLEVEL ="))
            && self.dir.join("Kconfig").is_file()
            && self.dir.join("arch").is_dir();
        if !kernel {
            bail_usage!(
                "{} is not a Linux kernel tree (no top-level Makefile with VERSION and PATCHLEVEL, \
                 Kconfig and arch/): pass --repo the root of a kernel git tree",
                self.dir.display()
            );
        }
        let start = self.git(&["rev-parse", "--git-path", "BISECT_START"])?;
        if self.dir.join(start.trim()).exists() {
            bail_usage!(
                "a git bisect is already in progress in {}: finish it or run `git bisect reset` there first",
                self.dir.display()
            );
        }
        let dirty = self.git(&["status", "--porcelain", "--untracked-files=no"])?;
        if !dirty.trim().is_empty() {
            bail_usage!(
                "the work tree {} has uncommitted changes ({}): commit or stash them first, \
                 since bisect checks out other commits",
                self.dir.display(),
                dirty.lines().next().unwrap_or("").trim()
            );
        }
        Ok(())
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
        let path = dir
            .to_str()
            .with_context(|| format!("{} is not a UTF-8 path", dir.display()))?;
        self.git(&["worktree", "add", "-q", "--detach", path, commit])?;
        Ok(Repo {
            dir: dir.to_path_buf(),
        })
    }

    /// HEAD as found: the branch checked out, else the detached commit.
    #[cfg(test)]
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

/// A `git bisect` in progress; `git bisect reset` when dropped.
pub struct Bisecting<'a> {
    repo: &'a Repo,
}

impl<'a> Bisecting<'a> {
    pub fn start(repo: &'a Repo) -> anyhow::Result<Bisecting<'a>> {
        repo.git(&["bisect", "start"])?;
        Ok(Bisecting { repo })
    }

    /// Check out a commit to build it (the endpoints), during the bisect.
    pub fn checkout(&self, commit: &str) -> anyhow::Result<()> {
        self.repo.git(&["checkout", "-q", "--detach", commit])?;
        Ok(())
    }

    /// Mark `commit` (`good`, `bad` or `skip`) and say what comes next.
    pub fn mark(&self, term: &str, commit: &str) -> anyhow::Result<Next> {
        let out = self.repo.git_output(&["bisect", term, commit])?;
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("is the first bad commit") {
            let bad = self.repo.git(&["rev-parse", "refs/bisect/bad"])?;
            return Ok(Next::Found(bad.trim().to_string()));
        }
        if text.contains("only 'skip'ped commits left") {
            let ids = text
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .filter(|w| w.len() == 40 && w.bytes().all(|b| b.is_ascii_hexdigit()))
                .map(String::from)
                .collect();
            return Ok(Next::OnlySkipped(ids));
        }
        if !out.status.success() {
            anyhow::bail!(
                "git bisect {term} {commit} failed in {}: {}",
                self.repo.dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if term != "skip" && text.contains("waiting for") {
            // The other endpoint is not marked yet.
            return Ok(Next::Test(String::new()));
        }
        Ok(Next::Test(
            self.repo.git(&["rev-parse", "HEAD"])?.trim().to_string(),
        ))
    }
}

impl Drop for Bisecting<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.repo.git(&["bisect", "reset"]) {
            eprintln!(
                "ptelab: warning: `git bisect reset` failed ({e:#}); run it in {}",
                self.repo.dir.display()
            );
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A kernel-looking git tree with `n + 1` commits (0 ..= n), each
    /// writing its number to `f`; returns the tree and the commit ids.
    pub fn tree(n: usize) -> (tempfile::TempDir, Repo, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let sh = |cmd: &str| {
            let ok = Command::new("sh")
                .args(["-c", cmd])
                .current_dir(dir.path())
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@t")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@t")
                .status()
                .unwrap()
                .success();
            assert!(ok, "{cmd}");
        };
        sh("git init -q -b main . && printf 'VERSION = 6\\nPATCHLEVEL = 16\\n' > Makefile && touch Kconfig && mkdir arch && touch arch/.keep");
        for i in 0..=n {
            sh(&format!(
                "echo {i} > f && git add -A && git commit -qm 'change {i}'"
            ));
        }
        let repo = Repo::open(dir.path()).unwrap();
        let ids = repo
            .git(&["rev-list", "--reverse", "HEAD"])
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        (dir, repo, ids)
    }

    #[test]
    fn git_bisect_finds_the_commit_and_the_tree_is_put_back() {
        let (_d, repo, ids) = tree(8);
        repo.check_usable().unwrap();
        let before = repo.head().unwrap();
        assert_eq!(repo.candidates(&ids[0], &ids[8]).unwrap(), 8);
        let first_bad = 5;
        let mut steps = 0;
        {
            let b = Bisecting::start(&repo).unwrap();
            b.checkout(&ids[0]).unwrap();
            assert!(matches!(b.mark("bad", &ids[8]).unwrap(), Next::Test(s) if s.is_empty()));
            let mut next = b.mark("good", &ids[0]).unwrap();
            let found = loop {
                match next {
                    Next::Test(c) => {
                        steps += 1;
                        let i = ids.iter().position(|x| *x == c).unwrap();
                        next = b
                            .mark(if i >= first_bad { "bad" } else { "good" }, &c)
                            .unwrap();
                    }
                    Next::Found(c) => break c,
                    Next::OnlySkipped(_) => panic!("no skips"),
                }
            };
            assert_eq!(found, ids[first_bad]);
            // While bisecting, a second bisect is refused.
            assert!(crate::error::is_usage(&repo.check_usable().unwrap_err()));
        }
        assert_eq!(steps, 3);
        assert_eq!(repo.head().unwrap(), before);
        repo.check_usable().unwrap();
    }

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
    fn only_skipped_commits_leave_candidates() {
        let (_d, repo, ids) = tree(3);
        let b = Bisecting::start(&repo).unwrap();
        b.mark("bad", &ids[3]).unwrap();
        let mut next = b.mark("good", &ids[0]).unwrap();
        let left = loop {
            match next {
                Next::Test(c) => next = b.mark("skip", &c).unwrap(),
                Next::OnlySkipped(ids) => break ids,
                Next::Found(c) => panic!("found {c}"),
            }
        };
        assert_eq!(left.len(), 3, "{left:?}");
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
            &Repo::open(plain.path()).unwrap_err()
        ));
    }
}
