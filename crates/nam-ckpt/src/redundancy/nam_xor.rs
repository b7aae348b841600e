//! NAM-XOR (Schmidt 2017 §4.5): XOR parity computed by a memory server, not by the ranks.
//!
//! Sets of ranks on distinct nodes are formed as for [`super::Xor`]; each set is one
//! checkpoint group on a memory server (sets are spread round-robin over the configured
//! servers). **Protect** puts the rank's checkpoint in its registered group buffer (no copy
//! when the application built it there, see [`NamXor::buffer_mut`]), flags it ready and
//! waits: the server pulls every rank's buffer with one-sided GETs and keeps the XOR in
//! ping-pong parity slots, so the ranks spend no CPU on parity. A small record file beside
//! the checkpoint names the epoch. **Rebuild** has the survivors put their checkpoint back in
//! their buffers; one collective names the lost rank and shares the survivors' records; the
//! lost rank asks the server to rebuild it into its buffer and waits, while the survivors
//! wait for it in a collective that sleeps. The server checks the parity and every segment
//! against stored checksums, so wrong data is never returned. The ranks' collectives sleep
//! while they wait ([`crate::patient`]), as their waits for the server do.

use super::{agree, agreed, Arrived, LocalWrite, ProtectStats, Rebuilt, Redundancy, Scheme, Target};
use crate::comm::{all_gather_u64, Comm};
use crate::cpu::Stopwatch;
use crate::error::{CkptError, Result};
use crate::failure_groups::form_sets;
use crate::memory_server::ServerClient;
use crate::patient;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use nam_client::{CkptMember, Client, GroupSpec, Restoring};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;

use crate::constants::SERVER_WAIT;

/// What a rank records beside a checkpoint protected with NAM-XOR.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    group: String,
    server: String,
    epoch: u64,
    set: Vec<usize>,
    sizes: Vec<u64>,
}

/// The memory server's work on one epoch or restore.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerWork {
    /// Wall seconds of its working steps (longer when other processes share its cores).
    pub wall_seconds: f64,
    /// CPU seconds of the server process (all threads) in those steps.
    pub cpu_seconds: f64,
}

/// Where the lost rank's restore spends its time, in wall seconds: asking the server (with
/// the collective that makes every survivor wait), the server rebuilding the bytes (pulling
/// the survivors, XOR with the parity, checksums), and bringing them into the rank's buffer
/// when the server could not write it itself (0 when it could: same host).
#[derive(Debug, Clone, Copy, Default)]
pub struct RestoreProfile {
    /// From the request to every rank knowing the server accepted it.
    pub request_s: f64,
    /// From then to the server's word saying the rebuilt bytes are verified.
    pub rebuild_s: f64,
    /// From then to the bytes being in the rank's buffer.
    pub fetch_s: f64,
    /// Of `rebuild_s`, the server's own work (its wall time in the restore's steps: pulling,
    /// XOR, checksums); the rest is the server waiting for the survivors' bytes to arrive.
    pub server_busy_s: f64,
}

/// The `nam-xor` scheme, built over a communicator (collective).
pub struct NamXor {
    set_comm: SimpleCommunicator,
    set: Vec<usize>,
    spec: GroupSpec,
    server: SocketAddr,
    /// The last protect failed: agree on the epoch before the next.
    resync: bool,
    /// Wall seconds of this rank's last own restore, from asking the server to holding the
    /// verified bytes (only on the rank that was lost).
    restore_seconds: Option<f64>,
    /// Where the lost rank's last restore spent its time (only on the rank that was lost).
    restore_profile: Option<RestoreProfile>,
    /// This rank's membership; it holds its own share of `client`.
    member: Option<CkptMember<'static>>,
    client: Arc<Client>,
}

fn client_error(what: &str) -> impl Fn(nam_client::Error) -> CkptError + '_ {
    move |e| CkptError::Unrecoverable(format!("NAM-XOR {what}: {e}"))
}

impl NamXor {
    /// Forms sets on distinct nodes, assigns each to one of `servers` (round-robin over
    /// sets), and connects to it, with the client settings of the environment
    /// ([`ServerClient::from_env`]: every `NAM_*` client variable; `NAM_CKPT_GROUP` prefixes
    /// the group names, so two jobs of one tenant can share servers).
    pub fn new(comm: &Comm, set_size: usize, servers: &[String]) -> Result<Self> {
        Self::with_tuning(comm, set_size, servers, 0, 0)
    }

    /// As [`NamXor::new`], with the server's GET segment size and GETs in flight per rank
    /// (0: the server's defaults).
    pub fn with_tuning(
        comm: &Comm,
        set_size: usize,
        servers: &[String],
        segment_bytes: u32,
        in_flight: u32,
    ) -> Result<Self> {
        let client = ServerClient::from_env();
        let client = comm.agree(client, "reading the memory-server client settings")?;
        Self::with_client(comm, set_size, servers, &client, segment_bytes, in_flight)
    }

    /// As [`NamXor::with_tuning`], with client settings read once by the caller (the
    /// checkpointer reads them at init).
    pub fn with_client(
        comm: &Comm,
        set_size: usize,
        servers: &[String],
        settings: &ServerClient,
        segment_bytes: u32,
        in_flight: u32,
    ) -> Result<Self> {
        let sets = form_sets(comm, set_size, "nam-xor")?;
        if servers.is_empty() {
            return Err(CkptError::Config("nam-xor needs at least one memory server (redundancy.servers)".into()));
        }
        let rank = comm.rank();
        let idx = sets.iter().position(|s| s.contains(&rank)).expect("every rank is in a set");
        let me = sets[idx].iter().position(|&r| r == rank).expect("rank in its set");
        let set_comm = comm.split(Some(idx as u32), me as i32).expect("rank passed a color");
        let server = nam_client::config::parse_servers(&servers[idx % servers.len()])
            .map_err(|e| CkptError::Config(format!("redundancy.servers: {e}")))?[0];
        let connected = settings.connect(server).map(Arc::new);
        let client = agree(&set_comm, connected, "connecting to the memory server")?;
        let prefix = &settings.group_prefix;
        let mut spec =
            GroupSpec::new(&format!("{prefix}-{}x{}-set{idx}", comm.size(), sets.len()), sets[idx].len() as u32);
        spec.node = comm.nodes().names[comm.nodes().node_of[rank]].clone();
        spec.timeout = SERVER_WAIT;
        spec.segment_bytes = segment_bytes;
        spec.in_flight = in_flight;
        Ok(NamXor {
            set_comm,
            set: sets[idx].clone(),
            spec,
            server,
            resync: true,
            restore_seconds: None,
            restore_profile: None,
            member: None,
            client,
        })
    }

    /// The client of this set's memory server, shared with the scheme (it stays connected
    /// while any holder keeps it).
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// The ranks of this rank's set.
    pub fn set(&self) -> &[usize] {
        &self.set
    }

    fn me(&self) -> u32 {
        self.set_comm.rank() as u32
    }

    /// Joins the group with a buffer of `len` bytes, or resizes the one joined.
    fn ensure_buffer(&mut self, len: usize) -> Result<&mut CkptMember<'static>> {
        let me = self.me();
        if self.member.as_ref().is_some_and(|m| m.buffer().len() != len) {
            let m = self.member.as_mut().expect("checked");
            m.resize(len).map_err(client_error("resizing the group buffer"))?;
        }
        if self.member.is_none() {
            let member =
                self.client.ckpt_join_shared(&self.spec, me, len).map_err(client_error("joining the group"))?;
            self.member = Some(member);
        }
        Ok(self.member.as_mut().expect("joined"))
    }

    /// The registered buffer of `len` bytes the server pulls (collective only in that every
    /// rank of the set must call [`Redundancy::protect`] afterwards). An application that
    /// builds its checkpoint here saves protect a copy.
    pub fn buffer_mut(&mut self, len: usize) -> Result<&mut [u8]> {
        self.ensure_buffer(len)?.buffer_mut().map_err(client_error("the group buffer"))
    }

    /// Joins the group with the application's own `buffer`, registered in place
    /// ([`Client::ckpt_join_in`]), instead of a buffer the library allocates: an application
    /// that computes there checkpoints with no copy, and every checkpoint must have the
    /// buffer's size. Before the first protect; every rank of the set must then protect, as
    /// after [`NamXor::buffer_mut`].
    pub fn join_in(&mut self, buffer: &'static mut [u8]) -> Result<()> {
        if self.member.is_some() {
            return Err(CkptError::Config("NAM-XOR: this rank has joined its group already".into()));
        }
        let me = self.me();
        let member =
            self.client.ckpt_join_in_shared(&self.spec, me, buffer).map_err(client_error("joining the group"))?;
        self.member = Some(member);
        Ok(())
    }

    /// Puts `data` in the buffer unless it already is the buffer.
    fn stage(&mut self, data: &[u8]) -> Result<()> {
        let member = self.ensure_buffer(data.len())?;
        if member.buffer().as_ptr() != data.as_ptr() {
            member.buffer_mut().map_err(client_error("the group buffer"))?.copy_from_slice(data);
        }
        Ok(())
    }

    fn record(&self, epoch: u64, sizes: Vec<u64>) -> Record {
        Record { group: self.spec.name.clone(), server: self.server.to_string(), epoch, set: self.set.clone(), sizes }
    }
}

impl Redundancy for NamXor {
    fn scheme(&self) -> Scheme {
        Scheme::NamXor
    }

    fn protect(&mut self, data: &[u8], target: &Target) -> Result<ProtectStats> {
        self.protect_while(data, target, |_| Ok(()))
    }

    fn rebuild(&mut self, data: Option<&[u8]>, target: &Target) -> Result<Rebuilt> {
        let mut rebuilt = self.rebuild_in_buffer(data, target)?;
        if data.is_none() && !rebuilt.lost.is_empty() {
            // This method hands the rebuilt bytes back; the staged form leaves them in place.
            rebuilt.data = Some(self.member.as_ref().expect("restored").buffer().to_vec());
        }
        Ok(rebuilt)
    }

    /// The server rebuilds the lost rank into its group buffer, from which the bytes go
    /// straight to `into`: no buffer of their own in between.
    fn rebuild_into(&mut self, data: Option<&[u8]>, into: &mut [&mut [u8]], target: &Target) -> Result<Rebuilt> {
        let rebuilt = self.rebuild_in_buffer(data, target)?;
        if data.is_none() && !rebuilt.lost.is_empty() {
            super::scatter(self.member.as_ref().expect("restored").buffer(), into)?;
        }
        Ok(rebuilt)
    }

    /// [`Redundancy::rebuild_into`] whose rebuilt bytes go from the group buffer to `into` in
    /// a thread of its own while this thread hands them to `arrived` (the checkpoint library
    /// stages the file from them): the two copies run on two cores, not one after the other.
    fn rebuild_into_with(
        &mut self,
        data: Option<&[u8]>,
        into: &mut [&mut [u8]],
        arrived: &mut Arrived<'_>,
        target: &Target,
    ) -> Result<Rebuilt> {
        let rebuilt = self.rebuild_in_buffer(data, target)?;
        if data.is_none() && !rebuilt.lost.is_empty() {
            let buffer = self.member.as_ref().expect("restored").buffer();
            let holds: usize = into.iter().map(|p| p.len()).sum();
            if holds != buffer.len() {
                // The same refusal as `scatter`'s, before anything is copied or staged.
                return super::scatter(buffer, into).map(|()| rebuilt);
            }
            std::thread::scope(|threads| {
                let copy = threads.spawn(|| super::scatter(buffer, into));
                arrived(0, buffer);
                copy.join().expect("the copy into the regions does not panic")
            })?;
        }
        Ok(rebuilt)
    }

    fn discard(&mut self, target: &Target) -> Result<()> {
        super::xor::remove_if_exists(&target.file("namxor"))
    }

    fn missing_redundancy(&self, target: &Target) -> Option<String> {
        // The parity is in the memory server; the survivors' records name its epoch.
        super::missing_file(&target.file("namxor"))
    }

    fn can_rebuild(&self, lost: &[usize], no_redundancy: &[usize]) -> std::result::Result<(), String> {
        super::set_can_rebuild("NAM-XOR", &self.set, 1, lost, no_redundancy)
    }

    /// The memory server's parity costs this rank no CPU: flag the buffer before the local
    /// write's fsync, so the server pulls while the rank waits for its disk (the commit still
    /// waits for both, and a failed write fails the checkpoint on every rank). Not before the
    /// write itself: the pull would then compete with the ranks' copies into the page cache
    /// for the cores and the memory bus (docs/checkpoint.md). The ranks agree on the write
    /// with the parity, in the set's one collective after it ([`NamXor::protect_while`]).
    fn protect_overlapped(&mut self, data: &[u8], target: &Target, local: &mut dyn LocalWrite) -> Result<ProtectStats> {
        local.before_protect();
        self.protect_while(data, target, |d| local.write(d))
    }
}

impl NamXor {
    /// [`Redundancy::protect`] of the `len` bytes already in [`NamXor::buffer_mut`]: the
    /// zero-copy form for applications that build their checkpoint there.
    pub fn protect_buffer(&mut self, len: usize, target: &Target) -> Result<ProtectStats> {
        self.protect_buffer_while(len, target, |_| Ok(()))
    }

    /// [`Redundancy::protect`] of `data` (copied into the group buffer) with this rank's own
    /// work overlapped, as [`NamXor::protect_buffer_while`] does: the checkpoint library
    /// writes and fsyncs the node-local file in `local` while the server pulls.
    pub fn protect_while<F>(&mut self, data: &[u8], target: &Target, local: F) -> Result<ProtectStats>
    where
        F: FnOnce(&[u8]) -> Result<()>,
    {
        let clock = Stopwatch::start();
        let staged = self.stage(data);
        if self.resync {
            agree(&self.set_comm, staged, "staging the checkpoint")?;
        } else {
            staged?;
        }
        self.protect_staged(data.len(), target, clock, local)
    }

    /// [`NamXor::protect_buffer`] with this rank's own work overlapped: the buffer is flagged
    /// ready first, so the memory server pulls it while `local` runs (typically the fsync of
    /// the node-local copy, or its whole write: `local` may read the buffer, as the server
    /// does, and must not change it), and then the rank waits for the parity. The partner and
    /// XOR schemes cannot do this, because their redundancy runs on the rank's own CPU; here
    /// it costs the rank nothing, so the parity hides behind the rank's wait for its disk. A
    /// failed `local` fails the protect on every rank, once the server is done with the
    /// buffer. The returned statistics count the redundancy alone: the CPU seconds of `local`
    /// are not in them, and [`ProtectStats::seconds`] is the wall time the redundancy added
    /// beyond `local`.
    pub fn protect_buffer_while<F>(&mut self, len: usize, target: &Target, local: F) -> Result<ProtectStats>
    where
        F: FnOnce(&[u8]) -> Result<()>,
    {
        let clock = Stopwatch::start();
        let joined = self.ensure_buffer(len).map(|_| ());
        // Agree only while joining (the first protect, or after a failure): in steady state
        // the ranks meet once, after the parity is complete.
        if self.resync {
            agree(&self.set_comm, joined, "joining the group")?;
        } else {
            joined?;
        }
        self.protect_staged(len, target, clock, local)
    }

    /// Removes this set's group, parity and all, from the memory server (collective over the
    /// set): for a job that ends for good. A group otherwise stays on the server after its
    /// job, by design, so that a restarted job can have its lost rank rebuilt; `nam status`
    /// lists what stays and `nam ckpt drop` removes it. Every rank lets go of its membership
    /// before the set's first rank destroys the group; the scheme can join again afterwards.
    pub fn drop_group(&mut self) -> Result<()> {
        let member = self.member.take();
        let leader = self.me() == 0;
        let left = patient::all_agree(&self.set_comm, true);
        let dropped = match member {
            Some(m) if leader && left => m.destroy().map_err(client_error("dropping the group")),
            _ => Ok(()),
        };
        self.resync = true;
        agree_patiently(&self.set_comm, dropped, "dropping the NAM-XOR group")
    }

    /// What the memory server spent on this set's last finished epoch or restore (pulling,
    /// XOR, checksums), waits for ranks excluded.
    pub fn server_work(&self) -> Result<ServerWork> {
        let member = self.member.as_ref().ok_or_else(|| CkptError::Unrecoverable("NAM-XOR: not joined".into()))?;
        let info = member.query().map_err(client_error("query"))?;
        Ok(ServerWork {
            wall_seconds: info.last_job_busy_us as f64 * 1e-6,
            cpu_seconds: info.last_job_cpu_us as f64 * 1e-6,
        })
    }

    /// On the rank that was lost, the wall seconds of its last restore from asking the memory
    /// server to holding the verified bytes in its buffer (the rest of [`Rebuilt::seconds`] is
    /// the ranks agreeing who was lost and on the epoch); `None` on the survivors.
    pub fn restore_seconds(&self) -> Option<f64> {
        self.restore_seconds
    }

    /// On the rank that was lost, where its last restore spent its time; `None` on the
    /// survivors.
    pub fn restore_profile(&self) -> Option<RestoreProfile> {
        self.restore_profile
    }

    /// [`Redundancy::rebuild`] that leaves the lost rank's rebuilt bytes in its group buffer
    /// ([`NamXor::buffer_mut`]) for the caller to take from there.
    fn rebuild_in_buffer(&mut self, data: Option<&[u8]>, target: &Target) -> Result<Rebuilt> {
        let clock = Stopwatch::start();
        // Nothing lost in the set (the common restart): no copy into the group buffer, which
        // would cost a pass over the whole checkpoint for nothing.
        if patient::all_agree(&self.set_comm, data.is_some()) {
            self.restore_seconds = None;
            self.restore_profile = None;
            return Ok(Rebuilt {
                seconds: clock.wall_seconds(),
                cpu_seconds: clock.cpu_seconds(),
                ..Default::default()
            });
        }
        let staged = match data {
            Some(d) => self.stage(d),
            None => Ok(()),
        };
        agree(&self.set_comm, staged, "staging the checkpoint")?;
        self.rebuild_staged(data.is_some(), target, clock)
    }

    /// [`Redundancy::rebuild`] where a survivor's checkpoint is already back in
    /// [`NamXor::buffer_mut`] (`have`), and a lost rank has none: the lost rank finds the
    /// rebuilt bytes in [`NamXor::buffer_mut`] afterwards ([`Rebuilt::data`] stays `None`).
    pub fn rebuild_buffer(&mut self, have: bool, target: &Target) -> Result<Rebuilt> {
        self.rebuild_staged(have, target, Stopwatch::start())
    }

    /// Flags the staged buffer ready and waits for the set's parity. Ranks do not meet in a
    /// collective before flagging: each flags as soon as it is ready and sleeps in the wait
    /// (an MPI collective would have the early ranks spin on the cores the server needs).
    /// They meet once, after the parity is complete, to exchange sizes and outcomes.
    /// `local` runs between flagging and waiting (see [`NamXor::protect_buffer_while`]).
    fn protect_staged<F>(&mut self, len: usize, target: &Target, clock: Stopwatch, local: F) -> Result<ProtectStats>
    where
        F: FnOnce(&[u8]) -> Result<()>,
    {
        let last = self.member.as_ref().expect("staged").epoch();
        // After a failed protect the ranks may disagree on the epoch: agree on it first.
        let last = if self.resync { all_gather_u64(&self.set_comm, last).into_iter().max().unwrap_or(0) } else { last };
        let epoch = last + 1;
        let member = self.member.as_mut().expect("staged");
        let flagged = member.ready_epoch(epoch);
        // The local work runs even when flagging failed: it is the checkpoint's first level.
        let local_clock = Stopwatch::start();
        let written = local(&member.buffer()[..len]);
        let (local_wall, local_cpu) = (local_clock.wall_seconds(), local_clock.cpu_seconds());
        let pulled = flagged
            .and_then(|_| member.wait(SERVER_WAIT))
            .and_then(|_| member.wait_complete(epoch, SERVER_WAIT))
            .map_err(client_error("parity generation"))
            .and(written);
        // One collective: every rank's length, bit 63 set where its part failed.
        let failed_bit = 1u64 << 63;
        let words = patient::all_gather_u64(&self.set_comm, len as u64 | if pulled.is_err() { failed_bit } else { 0 });
        if words.iter().any(|w| w & failed_bit != 0) {
            self.resync = true;
            // Every rank learns the failing rank's cause (its node-local write, or the parity).
            let failed = agreed(&self.set_comm, pulled, false, "the NAM-XOR checkpoint");
            return Err(failed.expect_err("agreed fails when a rank failed"));
        }
        self.resync = false;
        let record = self.record(epoch, words);
        let written = write_record(target, &record);
        agree_patiently(&self.set_comm, written, "writing the NAM-XOR record")?;
        Ok(ProtectStats {
            data_bytes: len as u64,
            sent_bytes: len as u64,
            stored_bytes: 0,
            seconds: (clock.wall_seconds() - local_wall).max(0.0),
            cpu_seconds: (clock.cpu_seconds() - local_cpu).max(0.0),
        })
    }

    fn rebuild_staged(&mut self, have: bool, target: &Target, clock: Stopwatch) -> Result<Rebuilt> {
        self.restore_seconds = None;
        self.restore_profile = None;
        // One collective: who has its data, and each survivor's record (epoch, every size),
        // which the lost rank needs and every rank checks.
        let width = 3 + self.set.len();
        let read = if have { read_record(target).ok() } else { None };
        let in_place = self.member.as_ref().is_some_and(|m| m.served_in_place());
        let mut mine = vec![u64::from(have), u64::from(in_place), read.as_ref().map_or(0, |r| r.epoch)];
        mine.extend((0..self.set.len()).map(|i| read.as_ref().and_then(|r| r.sizes.get(i).copied()).unwrap_or(0)));
        let all = patient::all_gather_u64s(&self.set_comm, &mine);
        let rows: Vec<&[u64]> = all.chunks_exact(width).collect();
        let lost: Vec<usize> = (0..rows.len()).filter(|&i| rows[i][0] == 0).collect();
        let lost_world: Vec<usize> = lost.iter().map(|&i| self.set[i]).collect();
        if lost.len() > 1 {
            return Err(CkptError::Unrecoverable(format!(
                "NAM-XOR set {:?} lost ranks {lost_world:?}; XOR parity rebuilds one rank per set",
                self.set
            )));
        }
        let Some(&l) = lost.first() else { return Ok(Rebuilt::default()) };
        let me = self.me() as usize;
        // The survivors' records name the epoch and every rank's size; they must agree (a
        // survivor that loaded another checkpoint would also fail the server's checksums).
        let all_in_place = rows.iter().enumerate().all(|(i, row)| i == l || row[1] == 1);
        let records: Vec<(usize, &[u64])> = rows
            .iter()
            .enumerate()
            .filter(|(_, row)| row[0] == 1 && row[2] != 0)
            .map(|(i, row)| (i, &row[2..]))
            .collect();
        let Some(&(_, first)) = records.first() else {
            return Err(CkptError::Unrecoverable(format!(
                "no survivor of NAM-XOR set {:?} could read its record of the checkpoint",
                self.set
            )));
        };
        if let Some(&(i, other)) = records.iter().find(|(_, row)| *row != first) {
            return Err(CkptError::Corrupt(format!(
                "NAM-XOR records differ: rank {} names epoch {}, rank {} epoch {}",
                self.set[records[0].0], first[0], self.set[i], other[0]
            )));
        }
        let record = self.record(first[0], first[1..].to_vec());
        // The replacement joins with a buffer of its recorded size: the server rebuilds
        // straight into it when it maps it (same host), else into an allocation copied here.
        let joined = if have { self.ensure_joined() } else { self.ensure_buffer(record.sizes[l] as usize).map(|_| ()) };
        if all_in_place {
            self.restore_in_place(me == l, joined, record.epoch)?;
        } else {
            self.restore_over_network(me == l, joined, record.epoch)?;
        }
        if me == l {
            write_record(target, &record)?;
        }
        Ok(Rebuilt { data: None, lost: lost_world, seconds: clock.wall_seconds(), cpu_seconds: clock.cpu_seconds() })
    }

    /// The restore when the server reads every survivor in place: the lost rank asks and
    /// waits; the survivors wait for it in the collective that ends the rebuild (sleeping:
    /// the server needs the cores), so they leave their buffers alone until it is over.
    fn restore_in_place(&mut self, lost: bool, joined: Result<()>, epoch: u64) -> Result<()> {
        let asked = std::time::Instant::now();
        let restored = joined.and_then(|()| {
            if !lost {
                return Ok(());
            }
            let member = self.member.as_mut().expect("joined");
            let restoring = member.restore_own(epoch).map_err(client_error("restore"))?;
            member.finish_restore(restoring, SERVER_WAIT).map(|_| ()).map_err(client_error("restore"))
        });
        self.restore_seconds = (lost && restored.is_ok()).then(|| asked.elapsed().as_secs_f64());
        if let Some(seconds) = self.restore_seconds {
            let busy = self.member.as_ref().and_then(|m| m.query().ok()).map_or(0, |info| info.last_job_busy_us);
            let server_busy_s = busy as f64 * 1e-6;
            self.restore_profile =
                Some(RestoreProfile { request_s: 0.0, rebuild_s: seconds, fetch_s: 0.0, server_busy_s });
        }
        agree_patiently(&self.set_comm, restored, "rebuilding at the memory server")
    }

    /// The restore when the server reaches a survivor over the network: UCX may emulate its
    /// GETs with messages that survivor must answer, so every survivor waits on the restore
    /// word, progressing, after a collective that ensures the server has reset it.
    fn restore_over_network(&mut self, lost: bool, joined: Result<()>, epoch: u64) -> Result<()> {
        let asked = std::time::Instant::now();
        let requested = joined.and_then(|()| {
            let member = self.member.as_mut().expect("joined");
            let own = if lost { member.restore_own(epoch).map(Some) } else { Ok(None) };
            own.map_err(client_error("restore"))
        });
        let restoring = agree_patiently(&self.set_comm, requested, "requesting the restore")?;
        let member = self.member.as_mut().expect("joined");
        let requested_s = asked.elapsed().as_secs_f64();
        let waited = match restoring {
            // As `CkptMember::finish_restore`, in its two steps, each timed.
            Some(restoring) => {
                let waited = member.wait_restore(SERVER_WAIT);
                let rebuilt_s = asked.elapsed().as_secs_f64();
                let fetched = waited.and_then(|epoch| match restoring {
                    Restoring::Allocation(allocation) => {
                        let len = member.buffer().len() as u64;
                        member.fetch_restored(&allocation, len).map(|()| epoch)
                    }
                    Restoring::InBuffer => Ok(epoch),
                });
                let total_s = asked.elapsed().as_secs_f64();
                let busy = member.query().map_or(0, |info| info.last_job_busy_us);
                self.restore_profile = Some(RestoreProfile {
                    request_s: requested_s,
                    rebuild_s: rebuilt_s - requested_s,
                    fetch_s: total_s - rebuilt_s,
                    server_busy_s: busy as f64 * 1e-6,
                });
                fetched
            }
            None => member.wait_restore(SERVER_WAIT),
        };
        self.restore_seconds = (lost && waited.is_ok()).then(|| asked.elapsed().as_secs_f64());
        agree_patiently(
            &self.set_comm,
            waited.map(|_| ()).map_err(client_error("restore")),
            "rebuilding at the memory server",
        )
    }

    /// A survivor whose buffer already holds its data must be joined with it.
    fn ensure_joined(&mut self) -> Result<()> {
        match &self.member {
            Some(_) => Ok(()),
            None => Err(CkptError::Unrecoverable("NAM-XOR survivor has no group buffer to rebuild from".into())),
        }
    }
}

/// [`agree`] through a collective that sleeps while it waits ([`patient`]): NAM-XOR's ranks
/// meet while the memory server may still need their cores.
fn agree_patiently<T>(comm: &SimpleCommunicator, local: Result<T>, what: &str) -> Result<T> {
    let all_ok = patient::all_agree(comm, local.is_ok());
    agreed(comm, local, all_ok, what)
}

fn write_record(target: &Target, record: &Record) -> Result<()> {
    let path = target.file("namxor");
    let bytes = serde_json::to_vec(record).expect("serializes");
    std::fs::write(&path, bytes).map_err(|e| CkptError::io("write", &path, e))
}

fn read_record(target: &Target) -> Result<Record> {
    let path = target.file("namxor");
    let bytes = std::fs::read(&path).map_err(|e| CkptError::io("read", &path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| CkptError::Corrupt(format!("{}: {e}", path.display())))
}
