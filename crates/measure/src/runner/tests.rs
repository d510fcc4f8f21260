//! The runner's rules on the fake backend: warm-up, calibration, the stop
//! rule and `--iters`, with exact (fake-clock) times.

use super::fake::{self, Ev, FakeBackend};
use super::*;

const MS: Duration = Duration::from_millis(1);

/// Measure `blocks` blocks of `plan` on `b`.
fn measure(b: &mut FakeBackend, plan: CellPlan, blocks: usize) -> CellRun {
    let mut run = CellRun::new(plan);
    let mut rep = b.reporter();
    for _ in 0..blocks {
        run.run_block(b, &mut rep).unwrap();
    }
    run
}

/// Durations of the op's runs in `log`.
fn runs(log: &[Ev]) -> Vec<Duration> {
    log.iter()
        .filter_map(|e| match e {
            Ev::Run { took, .. } => Some(*took),
            _ => None,
        })
        .collect()
}

fn at(log: &[Ev], phase: &str) -> usize {
    log.iter()
        .position(|e| *e == Ev::Phase(phase.into()))
        .unwrap_or_else(|| panic!("no phase {phase} in the log"))
}

#[test]
fn warm_up_comes_before_any_timed_sample() {
    let mut b = FakeBackend::new(1_000.0);
    let run = measure(&mut b, fake::plan(4096, Budget::Time(400 * MS), 2), 2);
    let log = b.log();
    let (warm, cal, sample) = (
        at(&log, "warm-up"),
        at(&log, "calibrate"),
        at(&log, "sample"),
    );
    assert!(warm < cal && cal < sample);
    assert!(runs(&log[..warm]).is_empty(), "the op ran before warm-up");
    assert!(runs(&log[warm..cal]).iter().sum::<Duration>() >= WARMUP);
    // The second block warms its fresh instance up again but keeps the
    // calibrated batch.
    let second = log
        .iter()
        .rposition(|e| matches!(e, Ev::Prepare { .. }))
        .unwrap();
    let tail = &log[second..];
    let (warm2, sample2) = (at(tail, "warm-up"), at(tail, "sample"));
    assert!(!tail.contains(&Ev::Phase("calibrate".into())));
    assert!(runs(&tail[warm2..sample2]).iter().sum::<Duration>() >= WARMUP);
    // Every timed sample is a batch run after the "sample" phase began.
    let first_block = &log[sample..second];
    assert_eq!(runs(first_block).len() as u64, run.blocks[0].samples);
    assert_eq!(runs(&tail[sample2..]).len() as u64, run.blocks[1].samples);
    assert_eq!(
        run.pooled[0].len() as u64,
        run.blocks[0].samples + run.blocks[1].samples
    );
}

#[test]
fn a_tcg_guest_samples_a_quarter_of_a_timer_tick() {
    let mut b = FakeBackend::new(41_000.0);
    let mut plan = fake::plan(4096, Budget::Time(200 * MS), 1);
    plan.sample_target = ICOUNT_SAMPLE_TARGET;
    measure(&mut b, plan, 1);
    let log = b.log();
    for took in runs(&log[at(&log, "sample")..]) {
        let err = (took.as_secs_f64() / ICOUNT_SAMPLE_TARGET.as_secs_f64() - 1.0).abs();
        assert!(err < 0.05, "a sample took {took:?}");
    }
}

#[test]
fn calibration_lands_samples_near_the_target() {
    for (cost_ns, multiple) in [(1_000.0, 1), (7_300.0, 2), (37.0, 1), (450_000.0, 2)] {
        let mut b = FakeBackend::new(cost_ns);
        b.multiple = multiple;
        let run = measure(&mut b, fake::plan(4096, Budget::Time(200 * MS), 1), 1);
        let batch = run.batch.unwrap();
        assert_eq!(batch % multiple, 0, "{cost_ns}: batch {batch}");
        let log = b.log();
        for took in runs(&log[at(&log, "sample")..]) {
            let err = (took.as_secs_f64() / SAMPLE_TARGET.as_secs_f64() - 1.0).abs();
            assert!(err < 0.05, "{cost_ns} ns/call: a sample took {took:?}");
        }
    }
    // One call longer than the target: one iteration multiple per sample.
    let mut b = FakeBackend::new(30e6);
    b.multiple = 2;
    let run = measure(&mut b, fake::plan(4096, Budget::Time(MS), 1), 1);
    assert_eq!(run.batch, Some(2));
}

#[test]
fn the_stop_rule_ends_a_block_once_the_median_is_precise() {
    // Equal samples: the CI is tight as soon as it is defined.
    let mut b = FakeBackend::new(1_000.0);
    b.jitter = 0.001;
    let budget = Duration::from_secs(10);
    let run = measure(&mut b, fake::plan(4096, Budget::Time(budget), 1), 1);
    assert_eq!(run.blocks[0].samples, MIN_SAMPLES as u64);
    let log = b.log();
    let sampled: Duration = runs(&log[at(&log, "sample")..]).iter().sum();
    assert!(sampled < 200 * MS, "{sampled:?} of a {budget:?} budget");
    let r = &run.finish()[0];
    assert!(
        r.warnings.iter().all(|w| !w.contains("time budget")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn the_stop_rule_ends_a_noisy_block_when_its_share_of_the_budget_is_spent() {
    for blocks in [1, 4] {
        let mut b = FakeBackend::new(1_000.0);
        b.jitter = 0.3;
        let budget = Duration::from_secs(1);
        let share = budget / blocks;
        let mut run = CellRun::new(fake::plan(4096, Budget::Time(budget), blocks));
        let mut rep = b.reporter();
        for _ in 0..blocks {
            let start = b.log().len();
            run.run_block(&mut b, &mut rep).unwrap();
            let log = b.log();
            let block = &log[start..];
            let sampled: Duration = runs(&block[at(block, "sample")..]).iter().sum();
            // Spent, and not by more than one sample.
            assert!(sampled >= share, "{sampled:?} < {share:?}");
            assert!(sampled < share + 2 * SAMPLE_TARGET, "{sampled:?}");
        }
        assert!(run.finished());
        let r = &run.finish()[0];
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("time budget spent before the precision target")),
            "{:?}",
            r.warnings
        );
        assert_eq!(r.blocks.len(), blocks as usize);
    }
}

#[test]
fn a_slow_op_still_gets_the_minimum_samples_per_block() {
    // 400 ms per call against a 1 s budget: the share is spent after 3
    // samples, which is also the minimum.
    let mut b = FakeBackend::new(400e6);
    b.jitter = 0.3;
    let run = measure(
        &mut b,
        fake::plan(4096, Budget::Time(Duration::from_secs(1)), 1),
        1,
    );
    assert_eq!(run.blocks[0].samples, MIN_BLOCK_SAMPLES as u64);
}

#[test]
fn a_fixed_iteration_budget_runs_exactly_that_many_iterations() {
    // 1 ms per call: batches of 10, the last one cut to what is left.
    let mut b = FakeBackend::new(1e6);
    let run = measure(&mut b, fake::plan(4096, Budget::Iters(35), 7), 1);
    assert!(run.finished(), "--iters is one block");
    let log = b.log();
    let sampled: Vec<u64> = log[at(&log, "sample")..]
        .iter()
        .filter_map(|e| match e {
            Ev::Run { iterations, .. } => Some(*iterations),
            _ => None,
        })
        .collect();
    assert_eq!(sampled, [10, 10, 10, 5]);
    assert_eq!(run.finish()[0].calls, 35);
}

#[test]
fn a_layout_mismatch_stops_the_block_unless_allowed() {
    let mut b = FakeBackend::new(1_000.0);
    b.layout.matches = false;
    b.layout.mismatch = Some("expected 100% 64K, observed 100% 4K".into());
    let mut run = CellRun::new(fake::plan(4096, Budget::Time(100 * MS), 1));
    let mut rep = b.reporter();
    let err = run.run_block(&mut b, &mut rep).unwrap_err();
    assert!(err.to_string().contains("--allow-mismatch"), "{err}");
    assert!(
        runs(&b.log()).is_empty(),
        "a mismatched instance was measured"
    );
    let mut plan = fake::plan(4096, Budget::Time(100 * MS), 1);
    plan.allow_mismatch = true;
    let run = measure(&mut b, plan, 1);
    let r = &run.finish()[0];
    assert!(r
        .warnings
        .iter()
        .any(|w| w.starts_with("layout mismatch accepted")));
}

#[test]
fn every_phase_gets_its_own_samples() {
    let mut b = FakeBackend::new(2_000.0);
    b.phases = 2;
    let run = measure(&mut b, fake::plan(4096, Budget::Time(100 * MS), 1), 1);
    let results = run.finish();
    assert_eq!(results.len(), 2);
    assert_eq!(
        results[0].ns_per_call.samples,
        results[1].ns_per_call.samples
    );
    assert!((results[0].ns_per_call.median - 2_000.0).abs() < 1.0);
}

#[test]
fn a_speed_state_change_between_blocks_is_a_warning() {
    assert_eq!(
        speed_change_warning([186.0, 190.0, 188.0].into_iter()),
        None
    );
    let w = speed_change_warning([186.0, 255.0, 188.0].into_iter()).unwrap();
    assert!(w.contains("probe 186-255 ns"), "{w}");
    assert_eq!(speed_change_warning(std::iter::empty()), None);
}
