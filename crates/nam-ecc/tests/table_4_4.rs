//! Small reruns of Abeyratne 2017 Table 4.4: the qualitative properties Abeyratne 2017 states, determinism, and
//! refusal of bad input.

use nam_ecc::report::agrees_with_seed;
use nam_ecc::sim::run;
use nam_ecc::{
    layout, sim, CodeKind, CodeSetup, DecodePolicy, ErrorValues, FaultCombination, FaultKind, LineCodec, LocationCheck,
    Outcome, ParseError, Placement, SimConfig, SimError, StoredLine, Tally,
};

const TRIALS: u64 = 20_000;

fn table(trials: u64, seed: u64, faults: &str) -> (SimConfig, Vec<sim::SimResult>) {
    let mut config = SimConfig::seed_table(trials, seed);
    config.combinations = FaultCombination::parse_list(faults).expect("valid faults");
    let results = run(&config).expect("simulation runs");
    (config, results)
}

fn tally(results: &[sim::SimResult], code: CodeKind, faults: &str) -> Tally {
    let combination: FaultCombination = faults.parse().expect("valid combination");
    nam_ecc::report::find(results, code, &combination).expect("row present")
}

#[test]
fn seed_properties_hold_on_every_row_and_fault_type() {
    let (config, results) = table(TRIALS, 2024, "all");
    for combination in &config.combinations {
        let name = combination.to_string();
        let single = combination.kinds().len() == 1;
        let rs36 = tally(&results, CodeKind::Rs36_32, &name);
        let rs18 = tally(&results, CodeKind::Rs18_16, &name);
        let rs19 = tally(&results, CodeKind::Rs19_16, &name);
        // RS(18,16) in detect-only mode detects every single- and double-chip fault.
        assert_eq!(rs18.due, TRIALS, "RS(18,16) {name}");
        if single {
            // RS(19,16) is Chipkill-Correct: every single-chip fault is corrected.
            assert_eq!(rs19.dce, TRIALS, "RS(19,16) {name}");
            // RS(36,32) SSC-TSD corrects one-symbol faults and detects the rest.
            let one_symbol = matches!(combination.kinds()[0], FaultKind::Bit | FaultKind::Column | FaultKind::Word);
            let expected = if one_symbol { rs36.dce } else { rs36.due };
            assert_eq!(expected, TRIALS, "RS(36,32) {name}");
        } else {
            // Double-chip faults: RS(19,16) detects all, RS(36,32) corrects none.
            assert_eq!(rs19.due, TRIALS, "RS(19,16) {name}");
            assert_eq!(rs36.dce, 0, "RS(36,32) {name}");
            assert!(rs36.sdc_pct() < 0.01, "RS(36,32) {name}: {rs36:?}");
        }
    }
}

#[test]
fn agrees_with_the_seed_table_where_the_seed_is_consistent() {
    let (config, results) = table(TRIALS, 7, "table");
    for r in &results {
        let cell = nam_ecc::seed::table_4_4(r.code.kind, &r.combination).expect("seed row");
        // SDC within 0.01 percentage points of Abeyratne 2017's 0.0001 % / 0.0031 %; all else exact.
        assert!(
            agrees_with_seed(&r.tally, &cell, 0.01),
            "{} {}: {:?} vs {:?}",
            r.code.kind,
            r.combination,
            r.tally,
            cell
        );
    }
    assert_eq!(results.len(), 3 * config.combinations.len());
}

#[test]
fn same_seed_same_numbers_other_seed_other_numbers() {
    let mut config = SimConfig::seed_table(TRIALS, 99);
    config.combinations = FaultCombination::parse_list("bit+bit,chip").expect("valid");
    config.model.placement = Placement::Independent;
    let first = run(&config).expect("runs");
    config.threads = Some(1);
    assert_eq!(run(&config).expect("runs"), first, "thread count changes nothing");
    config.combinations.reverse();
    let reordered = run(&config).expect("runs");
    for r in &first {
        assert_eq!(
            nam_ecc::report::find(&reordered, r.code.kind, &r.combination),
            Some(r.tally),
            "list order changes nothing"
        );
    }
    config.seed = 100;
    config.combinations.reverse();
    let other = run(&config).expect("runs");
    assert_ne!(other, first, "bit+bit independent: RS(36,32) corrects about half");
    let rs36 = tally(&first, CodeKind::Rs36_32, "bit+bit");
    assert!((0.45..0.55).contains(&(rs36.dce as f64 / TRIALS as f64)));
}

#[test]
fn a_decoder_without_range_check_turns_detections_into_silent_corruption() {
    // Abeyratne 2017's 0.0031 % SDC is what an RS(36,32) decoder that accepts error positions beyond
    // the 36 real ones gives (docs/ecc.md); the real decoder gives ~7× less.
    let mut config = SimConfig::seed_table(200_000, 5);
    config.combinations = FaultCombination::parse_list("chip+chip").expect("valid");
    let mut unchecked = DecodePolicy::correct(1);
    unchecked.location_check = LocationCheck::FullLength;
    config.codes = vec![CodeSetup::seed(CodeKind::Rs36_32), CodeSetup { kind: CodeKind::Rs36_32, policy: unchecked }];
    let results = run(&config).expect("runs");
    let (checked, unchecked) = (results[0].tally, results[1].tally);
    assert!(unchecked.sdc > checked.sdc, "{checked:?} vs {unchecked:?}");
    assert!(unchecked.sdc_pct() > 0.0005 && unchecked.sdc_pct() < 0.01);
}

#[test]
fn rs36_32_detects_every_pin_plus_pin_pattern_exhaustively() {
    // Two pin faults in two chips put 4 two-bit errors in each RS(36,32) codeword. Enumerate
    // every chip pair, pin pair and error value: none is miscorrected, so the exact SDC rate of
    // `pin+pin` under this fault model is 0 (Abeyratne 2017 prints 0.0001 %).
    let codec = LineCodec::seed(CodeKind::Rs36_32);
    let written = StoredLine::default();
    let mut patterns = 0;
    for a in 0..layout::CHIPS {
        for b in (a + 1)..layout::CHIPS {
            for (pa, pb) in (0..4).flat_map(|x| (0..4).map(move |y| (x, y))) {
                for values in 0..81u32 {
                    let mut line = StoredLine::default();
                    for (k, (chip, pin)) in [(a, pa), (a, pa), (b, pb), (b, pb)].iter().enumerate() {
                        let v = (values / 3u32.pow(k as u32) % 3 + 1) as u8;
                        let bits = ((v & 1) << pin) | ((v >> 1) << (4 + pin));
                        line.rank.symbols[layout::symbol_index(k % 2, *chip)] ^= bits;
                    }
                    let read = codec.read(&mut line);
                    let outcome = sim::classify(CodeKind::Rs36_32, &read, &written, &line);
                    assert_eq!(outcome, Outcome::Due, "chips {a},{b} pins {pa},{pb}");
                    patterns += 1;
                }
            }
        }
    }
    assert_eq!(patterns, 153 * 16 * 81);
}

#[test]
fn inverted_footprints_give_the_same_qualitative_table() {
    let mut config = SimConfig::seed_table(5_000, 3);
    config.model.values = ErrorValues::Invert;
    let results = run(&config).expect("runs");
    for r in &results {
        let cell = nam_ecc::seed::table_4_4(r.code.kind, &r.combination).expect("seed row");
        assert!(agrees_with_seed(&r.tally, &cell, 0.01), "{r:?}");
    }
}

#[test]
fn bad_input_gives_clear_errors() {
    assert!(matches!("rs20_16".parse::<CodeKind>(), Err(ParseError::UnknownCode(_))));
    assert!(matches!(FaultCombination::parse_list("bit,cosmic"), Err(ParseError::UnknownFault(_))));
    assert!(matches!(FaultCombination::parse_list("bit+"), Err(ParseError::EmptyFault(_))));
    let too_many = vec!["chip"; 19].join("+");
    let err = FaultCombination::parse_list(&too_many).expect_err("19 chips do not exist");
    assert!(err.to_string().contains("impossible fault combination"), "{err}");
    assert_eq!(run(&SimConfig::seed_table(0, 1)), Err(SimError::ZeroTrials));
    let mut config = SimConfig::seed_table(10, 1);
    config.codes[0].policy = DecodePolicy::correct(3);
    let err = run(&config).expect_err("RS(36,32) corrects at most 2");
    assert!(err.to_string().contains("at most 2"), "{err}");
    // 18 faults, one per chip, is possible.
    let all_chips = vec!["bit"; 18].join("+");
    assert!(all_chips.parse::<FaultCombination>().is_ok());
}
