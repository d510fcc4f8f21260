//! One run against one run: pair the cells, plan drift and noise, compare
//! every pair with `ptelab_stats::compare` (ratio of medians, bootstrap CI,
//! Mann-Whitney, Holm across the grid).

use ptelab_stats::compare::{compare_grid, CellInput, CompareOpts, NotComparable, Side};

use super::drift::{drift_plan, probe_covariates, Covariates, Normalize};
use super::noise::{noise_threshold, NoiseRule};
use super::pair::{key, keys_in_order, layout_refusal, require_cells, require_comparable, CellKey};
use super::rows::{hex, row, run_ref};
use super::view::{CompareRow, CompareView, Method, Summary, SCHEMA};
use crate::error::usage;
use crate::record::CellResult;
use crate::record::Metric;
use crate::store::{GuestBias, Store, StoredRun};

/// Pair the kernel cells of two runs and compare them, correcting for machine
/// drift when `--normalize auto` would. Pure apart from the bootstrap's CPU
/// time.
pub fn compare_runs(
    name_a: &str,
    a: &StoredRun,
    name_b: &str,
    b: &StoredRun,
    opts: &CompareOpts,
    noise: &NoiseRule,
) -> anyhow::Result<CompareView> {
    let rules = Rules {
        noise: noise.clone(),
        ..Rules::default()
    };
    compare_runs_paired(name_a, a, name_b, b, opts, &rules)
}

/// How cells are paired, corrected and judged, beyond the statistics'
/// options.
#[derive(Clone, Debug)]
pub struct Rules {
    /// Pair cells that differ only in their folio layout.
    pub across_folios: bool,
    /// When to correct for machine drift.
    pub normalize: Normalize,
    /// Where the noise threshold comes from.
    pub noise: NoiseRule,
    /// The guest biases stored (`calibrate --guest`): instruction counts
    /// of guest runs are judged against each cell's (None: not looked up,
    /// as with `--noise`).
    pub guest_biases: Option<Vec<GuestBias>>,
}

impl Rules {
    /// The rules `compare` judges two stored runs by: the machine's
    /// calibrations as the noise floor (`fixed_noise`: `--noise` given, as
    /// is) and, for two guest runs counting instructions, each cell's guest
    /// bias from `calibrate --guest`.
    pub fn stored(
        store: &Store,
        (a, b): (&StoredRun, &StoredRun),
        across_folios: bool,
        normalize: Normalize,
        fixed_noise: bool,
    ) -> anyhow::Result<Rules> {
        let guest =
            |r: &StoredRun| r.run.guest.as_ref().map(|g| g.metric) == Some(Metric::Instructions);
        Ok(Rules {
            across_folios,
            normalize,
            noise: match fixed_noise {
                true => NoiseRule::Fixed,
                false => NoiseRule::Calibrated(store.calibrations(&a.run.machine_id)?),
            },
            guest_biases: match fixed_noise {
                false if guest(a) && guest(b) => Some(store.guest_biases()?),
                _ => None,
            },
        })
    }
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            across_folios: false,
            normalize: Normalize::Auto,
            noise: NoiseRule::Fixed,
            guest_biases: None,
        }
    }
}

/// [`compare_runs`], optionally pairing cells that differ only in their folio
/// layout (`--across-folios`: "what does 64K buy over 4K on this kernel?"),
/// with an explicit machine-drift rule.
pub fn compare_runs_paired(
    name_a: &str,
    a: &StoredRun,
    name_b: &str,
    b: &StoredRun,
    opts: &CompareOpts,
    rules: &Rules,
) -> anyhow::Result<CompareView> {
    let across_folios = rules.across_folios;
    require_cells(name_a, std::slice::from_ref(a))?;
    require_cells(name_b, std::slice::from_ref(b))?;
    let metric = require_comparable(
        (name_a, std::slice::from_ref(a)),
        (name_b, std::slice::from_ref(b)),
    )?;
    let cells_a: Vec<&CellResult> = a.kernel_cells().collect();
    let cells_b: Vec<&CellResult> = b.kernel_cells().collect();
    let keys = keys_in_order(cells_a.iter().chain(&cells_b).copied(), across_folios);
    let find = |cells: &[&'_ CellResult], k: &CellKey| -> Option<usize> {
        cells.iter().position(|c| key(c, across_folios) == *k)
    };
    let pairs: Vec<(Option<&CellResult>, Option<&CellResult>)> = keys
        .iter()
        .map(|k| {
            (
                find(&cells_a, k).map(|i| cells_a[i]),
                find(&cells_b, k).map(|i| cells_b[i]),
            )
        })
        .collect();
    let refusals: Vec<Option<NotComparable>> = pairs
        .iter()
        .map(|p| match p {
            (Some(x), Some(y)) => layout_refusal(x, y, across_folios),
            (None, _) => Some(NotComparable::Missing {
                absent_from: Side::A,
            }),
            (_, None) => Some(NotComparable::Missing {
                absent_from: Side::B,
            }),
        })
        .collect();
    // With drift correction, each cell is adjusted by its blocks' probes:
    // kernel speed, and memory latency when both cells recorded it (older
    // results did not). The stats crate checks that every probe fits.
    let drift = drift_plan(a, b, rules.normalize, metric);
    let (noise, noise_source) = noise_threshold(opts.noise, &rules.noise, &drift, metric, a, b);
    let opts = &CompareOpts { noise, ..*opts };
    let covariates: Vec<(Covariates<'_>, Covariates<'_>)> = pairs
        .iter()
        .map(|&(x, y)| match (x, y) {
            (Some(x), Some(y)) if drift.corrected => {
                let memory = !x.memory_probe_ns.is_empty() && !y.memory_probe_ns.is_empty();
                (probe_covariates(x, memory), probe_covariates(y, memory))
            }
            _ => (Vec::new(), Vec::new()),
        })
        .collect();
    fn samples(c: Option<&CellResult>) -> &[f64] {
        c.map_or(&[], |c| &c.ns_per_call.samples)
    }
    // Samples per block: the bootstrap resamples blocks (fresh instances
    // spread over time) before samples, so run-to-run noise widens the CI.
    fn blocks(c: Option<&CellResult>) -> Vec<usize> {
        c.map_or_else(Vec::new, |c| c.blocks.iter().map(|&n| n as usize).collect())
    }
    let block_sizes: Vec<(Vec<usize>, Vec<usize>)> =
        pairs.iter().map(|&(x, y)| (blocks(x), blocks(y))).collect();
    let inputs: Vec<CellInput<'_>> = pairs
        .iter()
        .zip(&refusals)
        .zip(&block_sizes)
        .zip(&covariates)
        .map(|(((&(x, y), refuse), (ba, bb)), (ca, cb))| CellInput {
            a: samples(x),
            b: samples(y),
            refuse: refuse.as_ref(),
            a_blocks: ba,
            b_blocks: bb,
            a_cov: ca,
            b_cov: cb,
        })
        .collect();
    let results =
        compare_grid(&inputs, opts).map_err(|e| usage(format!("bad comparison option: {e}")))?;

    let mut rows: Vec<CompareRow> = pairs
        .iter()
        .zip(&results)
        .map(|(&(x, y), r)| row(x, y, r))
        .collect();
    let guest_bias = match &rules.guest_biases {
        Some(biases) if metric == Metric::Instructions => Some(super::bias::judge_rows(
            &mut rows,
            &pairs,
            biases,
            (a, b),
            opts.alpha,
        )),
        _ => None,
    };
    let family = results.iter().filter(|r| r.p_adjusted.is_some()).count();
    Ok(CompareView {
        schema: SCHEMA,
        metric,
        a: run_ref(name_a, a),
        b: run_ref(name_b, b),
        method: Method {
            statistic: format!("median {}", metric.per_call_words())
                .replace("nsec", "ns"),
            confidence: opts.confidence,
            resamples: opts.resamples,
            seed: hex(opts.seed),
            test: "mann-whitney-u on block medians (samples when a side has fewer than 3 blocks); normal approximation, tie and continuity corrected".into(),
            correction: "holm".into(),
            family,
            alpha: opts.alpha,
            noise: opts.noise,
            noise_source,
            guest_bias,
            min_samples: opts.min_samples,
            replicated: None,
        },
        drift,
        summary: Summary::of(&rows),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{cell, opts, stored};
    use crate::workload::FolioSpec;
    use crate::VerdictKind;

    fn across() -> Rules {
        Rules {
            across_folios: true,
            ..Rules::default()
        }
    }

    #[test]
    fn across_folios_pairs_4k_with_64k_and_gives_the_sign() {
        let a = stored(1, vec![cell(65536, FolioSpec::Base, 2_700_000.0, 30)]);
        let b = stored(
            2,
            vec![cell(65536, FolioSpec::Mthp(64 << 10), 640_000.0, 30)],
        );
        // By default the two layouts are different cells: nothing to compare.
        let v = compare_runs("1", &a, "2", &b, &opts(), &NoiseRule::Fixed).unwrap();
        assert_eq!(v.summary.not_comparable, 2);
        // Across folios they pair, and 64K is an improvement over 4K.
        let v = compare_runs_paired("1", &a, "2", &b, &opts(), &across()).unwrap();
        assert_eq!(v.summary.improvements, 1, "{v:?}");
        assert_eq!(v.rows[0].folio, "4K vs 64K");
        // Reversed, it is a regression.
        let v = compare_runs_paired("2", &b, "1", &a, &opts(), &across()).unwrap();
        assert_eq!(v.summary.regressions, 1);
    }

    #[test]
    fn pairs_by_key_and_refuses_layouts_and_missing_cells() {
        let mut mixed = cell(400, FolioSpec::Mthp(64 << 10), 3000.0, 30);
        mixed.layout.histogram = [(4096, 36), (65536, 4)].into();
        let mut unmatched = cell(4000, FolioSpec::Base, 9000.0, 30);
        unmatched.layout.matches = false;
        unmatched.layout.mismatch = Some("requested 4K folios: 3 THPs".into());
        let a = stored(
            1,
            vec![
                cell(4, FolioSpec::Base, 1000.0, 30),
                cell(40, FolioSpec::Base, 2000.0, 30),
                cell(400, FolioSpec::Mthp(64 << 10), 3000.0, 30),
                cell(4000, FolioSpec::Base, 9000.0, 30),
                cell(8, FolioSpec::Base, 1000.0, 30),
            ],
        );
        let b = stored(
            2,
            vec![
                cell(40, FolioSpec::Base, 2400.0, 30),
                cell(4, FolioSpec::Base, 1001.0, 30),
                mixed,
                unmatched,
                cell(16, FolioSpec::Base, 1000.0, 30),
            ],
        );
        let v = compare_runs("1", &a, "latest", &b, &opts(), &NoiseRule::Fixed).unwrap();
        let verdicts: Vec<(u64, VerdictKind)> = v
            .rows
            .iter()
            .map(|r| (r.size_bytes >> 10, r.verdict))
            .collect();
        assert_eq!(
            verdicts,
            vec![
                (4, VerdictKind::NoChange),
                (40, VerdictKind::Regression),
                (400, VerdictKind::NotComparable),
                (4000, VerdictKind::NotComparable),
                (8, VerdictKind::NotComparable),
                (16, VerdictKind::NotComparable),
            ]
        );
        let reasons: Vec<&str> = v.rows.iter().filter_map(|r| r.reason.as_deref()).collect();
        assert_eq!(reasons[0], "layouts differ: A 100% 64K, B 64% 64K, 36% 4K");
        assert!(reasons[1]
            .contains("B does not have the requested layout (requested 4K folios: 3 THPs)"));
        assert_eq!(&reasons[2..], ["only in A", "only in B"]);
        assert_eq!(v.method.family, 2);
        assert_eq!(v.summary.regressions, 1);
        assert_eq!(v.a.name, "1");
        assert_eq!(v.b.name, "latest");
        assert!((v.rows[1].ratio.unwrap() - 1.2).abs() < 1e-9);
    }

    #[test]
    fn too_few_samples_and_model_only_runs() {
        let a = stored(1, vec![cell(4, FolioSpec::Base, 1000.0, 4)]);
        let b = stored(2, vec![cell(4, FolioSpec::Base, 2000.0, 30)]);
        let v = compare_runs("1", &a, "2", &b, &opts(), &NoiseRule::Fixed).unwrap();
        assert_eq!(
            v.rows[0].reason.as_deref(),
            Some("too few samples (4 vs 30, need 5 each)")
        );
        let empty = stored(3, vec![]);
        let err = compare_runs("3", &empty, "2", &b, &opts(), &NoiseRule::Fixed).unwrap_err();
        assert!(
            crate::error::is_usage(&err) && err.to_string().contains("no measured cells"),
            "{err}"
        );
    }
}
