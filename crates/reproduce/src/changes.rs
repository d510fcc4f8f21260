//! The kernel changes behind the seeds: each with its mainline commit and the
//! first release that carries it, and the Debian kernels that bracket it
//! (the newest offered without it, the oldest offered with it).
//!
//! Where each release comes from is in docs/kernel.md ("The changes behind
//! the seeds"); none of these changes was backported to an earlier stable
//! series that Debian offers, so a Debian version carries a change exactly
//! when its mainline release does.

use serde::Serialize;

use crate::guest::source::Version;

/// One upstream change a seed is about.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Change {
    /// Short name used in the catalogue and in output.
    pub key: &'static str,
    /// The commit's subject, as merged.
    pub subject: &'static str,
    /// Mainline commit (12 hex digits).
    pub commit: &'static str,
    /// First mainline release that carries it (major, minor).
    pub release: (u32, u32),
    /// Seeds whose claims it decides.
    pub seeds: &'static [&'static str],
    /// Companion commits that travel with it, and what they do.
    pub note: &'static str,
}

/// The changes, oldest first.
pub const CHANGES: &[Change] = &[
    Change {
        key: "ext4-large-folios",
        subject: "ext4: enable large folio for regular file",
        commit: "7ac67301e82f",
        release: (6, 16),
        seeds: &["004"],
        note: "the page cache of ext4 files gets large folios: a prerequisite of seed 004 in a guest",
    },
    Change {
        key: "mprotect-batching",
        subject: "mm: optimize mprotect() by PTE batching",
        commit: "cac1db8c3aad",
        release: (6, 17),
        seeds: &["000", "001"],
        note: "with 0aa3657df3ec (batched ptep_modify_prot_start/commit) and 7efa1cd5f89b (its arm64 version)",
    },
    Change {
        key: "mremap-batching",
        subject: "mm: optimize mremap() by PTE batching",
        commit: "f822a9a81a31",
        release: (6, 17),
        seeds: &["002"],
        note: "every released 6.17 also has the v6.17-rc2 hotfix 0b5be138ce00 (no folio lookup unless \
               pte_batch_hint() > 1, so x86-64 never batches)",
    },
    Change {
        key: "arm64-pte-needs-flush",
        subject: "arm64/mm: Elide TLB flush in certain pte protection transitions",
        commit: "c320dbb7c80d",
        release: (6, 19),
        seeds: &["003"],
        note: "arm64 only; x86-64 has its own pte_needs_flush() since long before",
    },
    Change {
        key: "mglru-young-batching",
        subject: "arm64: mm: implement the architecture-specific test_and_clear_young_ptes()",
        commit: "9970a9a27ffc",
        release: (7, 1),
        seeds: &["004"],
        note: "with 6d7237dda44f (generic test_and_clear_young_ptes()) and 56e5b60b2114 (its use in the \
               MGLRU look-around and page-table walk); the classic-LRU rmap batching (52e054f71840) \
               came in 7.0",
    },
    Change {
        key: "small-folio-mprotect",
        subject: "mm/mprotect: special-case small folios when applying permissions",
        commit: "89e613bc0b2d",
        release: (7, 1),
        seeds: &["001"],
        note: "with 3bc181c14363 (softleaf code out of the main function); posted as \"... applying write \
               permissions\"",
    },
];

/// The change named `key` (the catalogue's own keys: a typo is a bug).
pub fn change(key: &str) -> &'static Change {
    CHANGES
        .iter()
        .find(|c| c.key == key)
        .unwrap_or_else(|| panic!("no change '{key}' in the table"))
}

impl Change {
    /// Does kernel `v` carry this change?
    pub fn carried_by(&self, v: &Version) -> bool {
        (v.major, v.minor) >= self.release
    }

    /// `v6.17`.
    pub fn release_name(&self) -> String {
        format!("v{}.{}", self.release.0, self.release.1)
    }

    /// The newest of `offered` without the change and the oldest with it;
    /// a missing side says which versions would be needed.
    pub fn bracket(&self, offered: &[Version]) -> Result<(Version, Version), String> {
        let before = offered.iter().filter(|v| !self.carried_by(v)).max();
        let after = offered.iter().filter(|v| self.carried_by(v)).min();
        match (before, after) {
            (Some(b), Some(a)) => Ok((*b, *a)),
            (b, a) => {
                let mut need = Vec::new();
                if b.is_none() {
                    need.push(format!("one older than {}", self.release_name()));
                }
                if a.is_none() {
                    need.push(format!("one from {} on", self.release_name()));
                }
                Err(format!(
                    "no kernel offered brackets {} ({}, {}): it needs {}",
                    self.commit,
                    self.subject,
                    self.release_name(),
                    need.join(" and ")
                ))
            }
        }
    }
}

/// The upstream version of a `uname -r` (`6.17.13+deb13-cloud-amd64`).
pub fn release_version(release: &str) -> Option<Version> {
    let end = release
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(release.len());
    Version::parse(release[..end].trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn every_change_names_a_commit_and_a_seed() {
        for c in CHANGES {
            assert_eq!(c.commit.len(), 12, "{}", c.key);
            assert!(c.commit.bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(!c.seeds.is_empty());
        }
        assert!(CHANGES.windows(2).all(|w| w[0].release <= w[1].release));
    }

    #[test]
    fn the_bracket_is_the_newest_without_and_the_oldest_with() {
        let offered: Vec<Version> = [
            "6.12.117", "6.16.3", "6.16.12", "6.17.8", "6.17.13", "7.0.13", "7.1.3",
        ]
        .map(v)
        .to_vec();
        let c = change("mprotect-batching");
        assert_eq!(c.bracket(&offered).unwrap(), (v("6.16.12"), v("6.17.8")));
        assert_eq!(
            change("small-folio-mprotect").bracket(&offered).unwrap(),
            (v("7.0.13"), v("7.1.3"))
        );
        let e = change("small-folio-mprotect")
            .bracket(&offered[..5])
            .unwrap_err();
        assert!(e.contains("one from v7.1 on"), "{e}");
        let e = c.bracket(&[v("6.17.8")]).unwrap_err();
        assert!(e.contains("one older than v6.17"), "{e}");
    }

    #[test]
    fn a_release_string_gives_its_version() {
        assert_eq!(
            release_version("6.17.13+deb13-cloud-amd64"),
            Some(v("6.17.13"))
        );
        assert_eq!(release_version("7.1.0-rc1-00012-gabc"), Some(v("7.1.0")));
        assert_eq!(release_version("6.16.0"), Some(v("6.16.0")));
        assert_eq!(release_version("garbage"), None);
    }
}
