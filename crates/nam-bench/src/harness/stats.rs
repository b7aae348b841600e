//! The statistics every benchmark reports, in one place. Shared machines are noisy, so each
//! benchmark repeats its measurement and reports a median; two kinds are used, and which one
//! a benchmark reports is part of its published numbers.

/// The median of `values`: the mean of the middle two for an even count, 0 for none.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// The middle sample: the value of rank n/2 once sorted (the upper of the middle two for an
/// even count), so that the result is one of the measured values. Panics on no values.
pub fn middle(values: Vec<f64>) -> f64 {
    middle_by(values, |v| *v)
}

/// The item whose `key` is the middle one (rank n/2 once sorted by `key`), so that a
/// reported run is one that happened, with all its fields. Panics on no items.
pub fn middle_by<T>(mut items: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    items.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let mid = items.len() / 2;
    items.swap_remove(mid)
}

/// The middle of each field of repeated measurements of one point: `field` picks a field,
/// and the middle sample of that field over `runs` is returned (see [`middle`]).
pub fn middle_of<T>(runs: &[T], field: impl Fn(&T) -> f64) -> f64 {
    middle(runs.iter().map(field).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_medians_differ_only_on_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(middle(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(middle(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(Vec::new()), 0.0);
        assert_eq!(middle_by(vec![(1, 9.0), (2, 1.0), (3, 5.0)], |p| p.1).0, 3);
    }
}
