//! Signals: a put whose completion is announced by a 64-bit word, and waiting on that word.

use crate::allocation::Allocation;

/// How a signal word is updated by [`crate::Client::put_signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// The word becomes the value.
    Set,
    /// The value is added to the word.
    Add,
}

/// The signal word a [`crate::Client::put_signal`] updates after its data.
#[derive(Debug, Clone, Copy)]
pub struct Signal<'a> {
    /// The allocation holding the 64-bit word.
    pub word: &'a Allocation,
    /// Its offset (8-byte aligned).
    pub offset: u64,
    /// The value set or added.
    pub value: u64,
    /// Set or add.
    pub op: SignalOp,
}

/// Comparison for [`crate::Client::wait_until`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// word == value
    Eq,
    /// word != value
    Ne,
    /// word >= value
    Ge,
    /// word > value
    Gt,
    /// word <= value
    Le,
    /// word < value
    Lt,
}
