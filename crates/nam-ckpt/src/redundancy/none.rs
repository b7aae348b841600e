//! No L2 redundancy: checkpoints live only in node-local storage.

use super::{lost_ranks, Rebuilt, Redundancy, Scheme, Target};
use crate::comm::Comm;
use crate::error::{CkptError, Result};
use crate::ProtectStats;
use mpi::topology::SimpleCommunicator;
use mpi::traits::Communicator;

/// The `none` scheme: protect stores nothing; rebuild fails when any rank lost its data.
pub struct NoRedundancy {
    comm: SimpleCommunicator,
}

impl NoRedundancy {
    /// Collective over `comm`.
    pub fn new(comm: &Comm) -> Self {
        NoRedundancy { comm: comm.raw().duplicate() }
    }
}

impl Redundancy for NoRedundancy {
    fn scheme(&self) -> Scheme {
        Scheme::None
    }

    fn protect(&mut self, data: &[u8], _target: &Target) -> Result<ProtectStats> {
        Ok(ProtectStats { data_bytes: data.len() as u64, ..Default::default() })
    }

    fn rebuild(&mut self, data: Option<&[u8]>, _target: &Target) -> Result<Rebuilt> {
        let lost = lost_ranks(&self.comm, data.is_some());
        if lost.is_empty() {
            return Ok(Rebuilt::default());
        }
        Err(CkptError::Unrecoverable(format!("ranks {lost:?} lost their data and the scheme is `none`")))
    }

    fn discard(&mut self, _target: &Target) -> Result<()> {
        Ok(())
    }
}
