//! L2 redundancy under `mpirun`: each scheme protects uneven per-rank checkpoints, ranks lose
//! their node-local directory, the scheme rebuilds, and every byte is compared. Losses beyond
//! what a scheme survives, and corrupted stored redundancy, give a clear error, never data.

mod ckpt_support;

use ckpt_support::{mpirun, run, temp_dir, text};

fn check(ranks: usize, nodes: usize, scheme: &str, lose: &str, extra: &[&str]) -> (bool, String) {
    let dir = temp_dir(&format!("{scheme}-{ranks}-{}", lose.replace(',', "_")));
    let mut args = vec!["ckpt-check", "redundancy", "--scheme", scheme, "--uneven", "--size-per-rank", "300KiB"];
    args.extend(["--block", "64KiB", "--lose", lose, "--dir", dir.to_str().unwrap()]);
    args.extend(extra);
    let out = run(mpirun(ranks, nodes, &args));
    let _ = std::fs::remove_dir_all(&dir);
    (out.status.success(), text(&out))
}

#[test]
fn xor_rebuilds_one_lost_rank_per_set() {
    for (ranks, nodes, lose, set) in [(3, 3, "1", "8"), (4, 4, "0", "8"), (6, 3, "2,5", "3")] {
        let (ok, out) = check(ranks, nodes, "xor", lose, &["--set-size", set]);
        assert!(ok && out.contains("bytes_match=true"), "{ranks} ranks, lose {lose}:\n{out}");
    }
}

#[test]
fn partner_rebuilds_lost_ranks_whose_partner_survives() {
    for (ranks, nodes, lose) in [(2, 2, "1"), (4, 2, "0,2"), (5, 3, "4")] {
        let (ok, out) = check(ranks, nodes, "partner", lose, &[]);
        assert!(ok && out.contains("bytes_match=true"), "{ranks} ranks, lose {lose}:\n{out}");
    }
}

#[test]
fn reed_solomon_rebuilds_up_to_k_lost_ranks_per_set() {
    for (ranks, nodes, lose, k) in [(5, 5, "0,3", "2"), (4, 4, "2", "1"), (6, 3, "1,3", "1")] {
        let (ok, out) = check(ranks, nodes, "rs", lose, &["--rs-parity", k, "--set-size", "5"]);
        assert!(ok && out.contains("bytes_match=true"), "{ranks} ranks, k={k}, lose {lose}:\n{out}");
    }
    let (ok, out) = check(5, 5, "rs", "1,2,4", &["--rs-parity", "2"]);
    assert!(!ok && out.contains("it rebuilds up to 2 per set"), "{out}");
}

/// `Redundancy::rebuild_into`: the lost ranks' data goes straight into arrays of uneven sizes
/// (as into an application's registered regions, filled with other bytes before), blocks
/// straddling the arrays' edges; XOR and partner write them themselves, Reed-Solomon through
/// the trait's default. Every byte is compared.
#[test]
fn every_scheme_rebuilds_straight_into_the_arrays_given() {
    for (scheme, ranks, nodes, lose, extra) in [
        ("xor", 4, 4, "1", &["--set-size", "4"][..]),
        ("xor", 6, 3, "2,5", &["--set-size", "3"][..]),
        ("partner", 4, 2, "0,2", &[][..]),
        ("partner", 5, 3, "4", &[][..]),
        ("rs", 5, 5, "0,3", &["--rs-parity", "2", "--set-size", "5"][..]),
    ] {
        let (ok, out) = check(ranks, nodes, scheme, lose, &[extra, &["--into-pieces"]].concat());
        assert!(ok && out.contains("bytes_match=true"), "{scheme}, {ranks} ranks, lose {lose}:\n{out}");
    }
    // A copy that fails its CRC32C after it was streamed back fails the rebuild, never data.
    let (ok, out) = check(3, 3, "partner", "0", &["--corrupt-redundancy-of", "1", "--into-pieces"]);
    assert!(!ok && out.contains("CRC32C mismatch"), "{out}");
}

#[test]
fn losses_beyond_the_scheme_are_unrecoverable_not_wrong() {
    let (ok, out) = check(4, 4, "xor", "1,2", &[]);
    assert!(!ok && out.contains("unrecoverable") && out.contains("lost ranks [1, 2]"), "{out}");
    let (ok, out) = check(4, 4, "partner", "1,2", &[]);
    assert!(!ok && out.contains("rank 1 and its partner 2 both lost"), "{out}");
    let (ok, out) = check(3, 3, "none", "0", &[]);
    assert!(!ok && out.contains("scheme is `none`"), "{out}");
}

#[test]
fn corrupted_redundancy_is_detected() {
    let (ok, out) = check(4, 4, "xor", "1", &["--corrupt-redundancy-of", "3"]);
    assert!(!ok && out.contains("CRC32C mismatch"), "{out}");
    let (ok, out) = check(3, 3, "partner", "0", &["--corrupt-redundancy-of", "1"]);
    assert!(!ok && out.contains("CRC32C mismatch"), "{out}");
}

#[test]
fn one_node_is_refused_with_the_reason() {
    let (ok, out) = check(3, 1, "xor", "1", &[]);
    assert!(!ok && out.contains("needs ranks on at least 2 nodes"), "{out}");
}

/// `nam-bench ckpt --scheme nam-xor` with every rank on one host (no emulated nodes): every
/// rank fails with a cause that says its ranks share a node and how to emulate nodes, and no
/// line of the error chain is empty.
#[test]
fn a_one_host_nam_xor_run_names_the_shared_node_and_node_emulation() {
    let dir = temp_dir("namxor-one-node");
    let args = ["ckpt", "--scheme", "nam-xor", "--size-per-rank", "256KiB", "--checkpoints", "1"];
    let mut cmd = mpirun(4, 1, &args);
    cmd.args(["--compute-ms", "1", "--no-fsync", "--dir", dir.to_str().unwrap()]);
    let out = run(cmd);
    let _ = std::fs::remove_dir_all(&dir);
    let out_text = text(&out);
    assert!(!out.status.success(), "{out_text}");
    let errors: Vec<&str> = out_text.lines().filter(|l| l.starts_with("nam-bench ckpt: rank ")).collect();
    assert_eq!(errors.len(), 4, "every rank prints its error:\n{out_text}");
    for line in errors {
        assert!(line.contains("share node") && line.contains("NAM_EMULATE_NODES"), "{line}");
    }
    assert!(!out_text.lines().any(|l| l.trim() == "Caused by:" || l.trim_end().ends_with(": error:")), "{out_text}");
}
