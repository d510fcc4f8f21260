//! The user's kernel tree, driven with `git bisect` so that it shows the
//! standard bisect state while ptelab works, and is put back as found
//! (`git bisect reset`, to the original branch) on every exit it sees:
//! success, error, and SIGINT (the children die of it; ptelab unwinds).

pub use crate::guest::build::git::Repo;

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
    use crate::guest::build::git::fixture::tree;

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
}
