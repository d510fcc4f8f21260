//! The names nearest to one a user typed, for "no X; the nearest: …".

/// The `n` names of `names` nearest to `name` (most characters in common
/// as one run, then shortest, then alphabetical).
pub fn nearest<'a>(names: impl Iterator<Item = &'a str>, name: &str, n: usize) -> Vec<&'a str> {
    let mut scored: Vec<(usize, &str)> = names.map(|c| (common_run(c, name), c)).collect();
    scored.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(a.1.len().cmp(&b.1.len()))
            .then(a.1.cmp(b.1))
    });
    scored.dedup_by_key(|s| s.1);
    scored.into_iter().take(n).map(|(_, c)| c).collect()
}

/// The longest common substring of `a` and `b`, in bytes.
fn common_run(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut best = 0;
    let mut prev = vec![0usize; b.len() + 1];
    for &x in a {
        let mut cur = vec![0usize; b.len() + 1];
        for (j, &y) in b.iter().enumerate() {
            if x == y {
                cur[j + 1] = prev[j] + 1;
                best = best.max(cur[j + 1]);
            }
        }
        prev = cur;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_names_share_the_longest_run() {
        let names = [
            "_stext",
            "vm_normal_page",
            "change_pte_range",
            "weak_fn",
            "mod_fn",
        ];
        assert_eq!(
            nearest(names.into_iter(), "vm_normal_folio", 2),
            ["vm_normal_page", "mod_fn"]
        );
        assert_eq!(
            nearest(names.into_iter(), "change_pte", 1),
            ["change_pte_range"]
        );
        assert!(nearest(std::iter::empty(), "x", 3).is_empty());
    }
}
