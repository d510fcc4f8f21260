//! Binary search for the first bad item of an ordered list whose first item
//! is good and last is bad (the Debian versions between two endpoints).
//! A skipped item is left out and its neighbour nearest the middle is
//! tried instead, as `git bisect skip` does; when only skipped items
//! remain between the last good and the first bad, every one of them is a
//! candidate.

use super::classify::Verdict;

/// Where the search ended.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    /// The last good item (index).
    pub last_good: usize,
    /// The first bad item (index); with skips in between, the first bad
    /// is one of `last_good + 1 ..= first_bad`.
    pub first_bad: usize,
    /// Items probed, in order, with their verdicts.
    pub probes: Vec<(usize, Verdict)>,
}

impl Outcome {
    /// True when skips leave more than one candidate.
    #[cfg(test)]
    pub fn ambiguous(&self) -> bool {
        self.first_bad - self.last_good > 1
    }
}

/// Bisect `0..n` (0 known good, n-1 known bad), asking `probe` about items
/// in between.
pub fn bisect<F>(n: usize, mut probe: F) -> anyhow::Result<Outcome>
where
    F: FnMut(usize) -> anyhow::Result<Verdict>,
{
    assert!(n >= 2, "two endpoints");
    let (mut lo, mut hi) = (0, n - 1);
    let mut skipped = vec![false; n];
    let mut probes = Vec::new();
    loop {
        let mid = (lo + hi) / 2;
        let Some(next) = (lo + 1..hi)
            .filter(|&i| !skipped[i])
            .min_by_key(|&i| (i.abs_diff(mid), i))
        else {
            break;
        };
        let v = probe(next)?;
        match &v {
            Verdict::Good => lo = next,
            Verdict::Bad => hi = next,
            Verdict::Skip(_) => skipped[next] = true,
        }
        probes.push((next, v));
    }
    Ok(Outcome {
        last_good: lo,
        first_bad: hi,
        probes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake measurer: items from `first_bad` on are bad, `skip` ones fail.
    fn run(n: usize, first_bad: usize, skip: &[usize]) -> Outcome {
        bisect(n, |i| {
            Ok(if skip.contains(&i) {
                Verdict::Skip("build failed".into())
            } else if i >= first_bad {
                Verdict::Bad
            } else {
                Verdict::Good
            })
        })
        .unwrap()
    }

    #[test]
    fn every_change_point_is_found_in_log2_steps() {
        for n in [2usize, 3, 4, 9, 17, 100, 257] {
            let bound = (n as f64 - 1.0).log2().ceil() as usize;
            for first_bad in 1..n {
                let o = run(n, first_bad, &[]);
                assert_eq!((o.last_good, o.first_bad), (first_bad - 1, first_bad));
                assert!(o.probes.len() <= bound, "n {n} at {first_bad}: {o:?}");
            }
        }
        // Eight candidates (commits 1..=8 after a good 0): exactly three steps.
        for first_bad in 1..=8 {
            assert_eq!(run(9, first_bad, &[]).probes.len(), 3);
        }
    }

    #[test]
    fn the_debian_versions_around_6_17_take_one_step() {
        // 6.16.12 6.17.8 6.17.13: only 6.17.8 lies between.
        let o = run(3, 1, &[]);
        assert_eq!(o.probes, vec![(1, Verdict::Bad)]);
        assert_eq!(o.first_bad, 1);
    }

    #[test]
    fn skipped_items_are_stepped_around_or_left_as_candidates() {
        let o = run(100, 37, &[49, 50, 37]);
        assert!(o.ambiguous());
        assert_eq!((o.last_good, o.first_bad), (36, 38));
        let o = run(100, 60, &[49, 50]);
        assert_eq!((o.last_good, o.first_bad), (59, 60));
        assert!(o.probes.iter().any(|(i, v)| *i == 49 && v.word() == "skip"));
        // Everything in between skipped: all are candidates.
        let o = run(5, 2, &[1, 2, 3]);
        assert_eq!((o.last_good, o.first_bad, o.probes.len()), (0, 4, 3));
    }

    #[test]
    fn a_probe_error_stops_the_search() {
        let e = bisect(10, |_| anyhow::bail!("interrupted")).unwrap_err();
        assert_eq!(e.to_string(), "interrupted");
    }
}
