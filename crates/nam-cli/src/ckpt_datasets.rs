//! `nam ckpt list|current|forget|delete|halt`: the checkpoint library's datasets and halt
//! request, from outside the job (SCR's `scr_index` and `scr_halt`).
//!
//! These work on files only ([`nam_ckpt_control`]), so the command needs no MPI:
//! - `list DIR`: every dataset under a level directory, with level, descriptor and scheme,
//!   bytes, time and completeness, and the index's marks (current, forgotten, output);
//! - `current DIR NAME VERSION` (or `--clear`): the version the next restart uses;
//! - `forget DIR NAME VERSION`: never offer it for restart again (files stay);
//! - `delete DIR NAME VERSION`: remove what DIR holds of it, and forget it (run it on each
//!   node for node-local directories);
//! - `halt DIR [--reason TEXT] [--after SECONDS]` (or `--clear`): ask the job whose control
//!   directory is DIR to stop at its next `should_exit`.
//!
//! DIR for the index and the halt file is the job's control directory (`datasets.dir`; by
//! default its `flush.dir`, else its `ssd.dir`).

use anyhow::{bail, Result};
use nam_ckpt_control::{format_utc, list, unix_now, Halt, Index};
use nam_proto::size::format_size;
use std::path::PathBuf;

/// `nam ckpt list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// A level directory (or the control directory): `ram.dir`, `ssd.dir`, `flush.dir`.
    dir: PathBuf,
    /// Print JSON (one array of datasets) instead of a table.
    #[arg(long)]
    json: bool,
}

/// `nam ckpt current`.
#[derive(clap::Args, Debug)]
pub struct CurrentArgs {
    /// The job's control directory.
    dir: PathBuf,
    /// Checkpoint name.
    name: String,
    /// The version the next restart uses.
    #[arg(required_unless_present = "clear")]
    version: Option<u64>,
    /// Go back to the newest restorable version.
    #[arg(long, conflicts_with = "version")]
    clear: bool,
}

/// `nam ckpt forget` and `nam ckpt delete`.
#[derive(clap::Args, Debug)]
pub struct DatasetArgs {
    /// The directory (control directory for `forget`; a level directory for `delete`).
    dir: PathBuf,
    /// Checkpoint name.
    name: String,
    /// Version.
    version: u64,
}

/// `nam ckpt halt`.
#[derive(clap::Args, Debug)]
pub struct HaltArgs {
    /// The job's control directory.
    dir: PathBuf,
    /// Why (the job reports it when it stops).
    #[arg(long, default_value = "nam ckpt halt")]
    reason: String,
    /// Stop only this many seconds from now.
    #[arg(long)]
    after: Option<f64>,
    /// Withdraw the request.
    #[arg(long, conflicts_with_all = ["reason", "after"])]
    clear: bool,
}

/// `nam ckpt list DIR`.
pub fn run_list(args: &ListArgs) -> Result<()> {
    let all = list(&args.dir)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    if all.is_empty() {
        println!("no datasets in {}", args.dir.display());
        return Ok(());
    }
    println!(
        "{:<12} {:>8} {:<5} {:<10} {:<8} {:>10} {:<19} {:<12} flags",
        "name", "version", "level", "descriptor", "scheme", "bytes", "time (UTC)", "completeness"
    );
    for d in all {
        let mut flags = Vec::new();
        for (on, flag) in [(d.current, "current"), (d.forgotten, "forgotten"), (d.output, "output")] {
            if on {
                flags.push(flag);
            }
        }
        let dash = || "-".to_string();
        println!(
            "{:<12} {:>8} {:<5} {:<10} {:<8} {:>10} {:<19} {:<12} {}",
            d.name,
            d.version,
            d.level.clone().unwrap_or_else(dash),
            d.descriptor.clone().unwrap_or_else(dash),
            d.scheme.clone().unwrap_or_else(dash),
            format_size(d.bytes),
            d.time.map(format_utc).unwrap_or_else(dash),
            d.completeness(),
            flags.join(",")
        );
    }
    Ok(())
}

/// `nam ckpt current DIR NAME VERSION`.
pub fn run_current(args: &CurrentArgs) -> Result<()> {
    let index = Index::update(&args.dir, &args.name, |i| match (args.clear, args.version) {
        (false, Some(v)) => i.set_current(v),
        _ => i.current = None,
    })?;
    match index.current {
        Some(v) => {
            println!("{} restarts from version {v} ({})", args.name, Index::path(&args.dir, &args.name)?.display())
        }
        None => println!("{} restarts from its newest restorable version", args.name),
    }
    Ok(())
}

/// `nam ckpt forget DIR NAME VERSION`.
pub fn run_forget(args: &DatasetArgs) -> Result<()> {
    Index::update(&args.dir, &args.name, |i| i.forget(args.version))?;
    println!("forgot {} version {} (its files stay)", args.name, args.version);
    Ok(())
}

/// `nam ckpt delete DIR NAME VERSION`.
pub fn run_delete(args: &DatasetArgs) -> Result<()> {
    nam_ckpt_control::delete_dataset(&args.dir, &args.name, args.version)?;
    println!("deleted {} version {} from {}", args.name, args.version, args.dir.display());
    Ok(())
}

/// `nam ckpt halt DIR`.
pub fn run_halt(args: &HaltArgs) -> Result<()> {
    if args.clear {
        let had = Halt::clear(&args.dir)?;
        println!("{}", if had { "halt request withdrawn" } else { "there was no halt request" });
        return Ok(());
    }
    let now = unix_now();
    let after = match args.after {
        Some(s) if !(s.is_finite() && s >= 0.0) => bail!("--after {s}: seconds must be a finite number >= 0"),
        Some(s) => Some(now + s),
        None => None,
    };
    let path = Halt { reason: args.reason.clone(), set_at: now, after }.write(&args.dir)?;
    match after {
        Some(t) => println!("halt requested from {} UTC ({})", format_utc(t), path.display()),
        None => println!("halt requested ({})", path.display()),
    }
    Ok(())
}
